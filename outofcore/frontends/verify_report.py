"""The verdict of :func:`outofcore.frontends.verify.verify` (:class:`VerifyReport`) and what
its exact and rounded checks share: the operands read as blocks, each row's bounds, the
failures counted."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import dask.array as da
import numpy as np
import zarr
from numpy.typing import ArrayLike

from outofcore.operands.dask_graph import on_dask
from outofcore.operands.joined import Joined
from outofcore.operands.product import Product
from outofcore.operands.reading import read_panel
from outofcore.operands.stacking import Window


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of :func:`verify`."""

    passed: bool
    rounds: int
    max_relative_residual: float
    tolerance: float
    failing_rows: int
    first_failing_row: int | None
    nonfinite_mismatches: int
    #: Whether the check was exact (an integer product).
    exact: bool = False
    #: The batch index of the matrix holding the first failing row (a stack's; None for
    #: a product of one matrix, or when none fails).
    first_failing_matrix: tuple[int, ...] | None = None
    #: Rows holding an element whose value was not confirmed, and how many such elements:
    #: NaN or Inf in ``C`` where the reference is Inf or mixes Infs (only "not finite" is
    #: confirmed there), and the rows not compared because their values may overflow the
    #: output's dtype and hold an Inf.  A report that passes with these says so.
    unchecked_rows: int = 0
    unchecked_elements: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def dask_operands(product: Product, c: zarr.Array) -> tuple[da.Array, ...]:
    """``op(A)``, ``op(B)``, ``C`` and the addend (or None) as Dask arrays in their stored
    dtypes (the caller converts them),
    each of two or more dimensions (a vector as a one-row or one-column matrix, numpy's
    promotion; the batch dimensions broadcast), each block read as a job's tasks read
    (:func:`outofcore.operands.reading.read_panel`): chunks never decode to more than their size,
    transient errors are retried, and a block that cannot be read or decoded is a
    :class:`~outofcore.operands.reading.ReadError` naming the array, its region and the chunk's
    key (it was zarr's bare ``ValueError``)."""
    stack = product.stack

    def read(array: zarr.Array) -> da.Array:
        return da.from_array(array, chunks=array.chunks, getitem=_read_block, name=False)

    def matrices(x: da.Array) -> da.Array:
        """An output-shaped array with the vectors' unit axes put back."""
        if stack.a_vector:
            x = da.expand_dims(x, axis=x.ndim - (0 if stack.b_vector else 1))
        return da.expand_dims(x, axis=x.ndim) if stack.b_vector else x

    def operand(role: str, window: Window | None) -> da.Array:
        """The values operand ``role`` reads: its array (its parts joined), its window."""
        values = product.values(role)
        if isinstance(values, Joined):
            x = da.concatenate([read(part) for part in values.arrays], axis=values.axis)
        else:
            x = read(values)
        if window is None:
            return x
        (row, col), (rows, cols) = window.start, window.shape
        return x[row : row + rows, col : col + cols]

    # Operands computed as they are read: their region, then their steps.
    a = on_dask(product.a_steps, operand("A", product.a_window), read)
    b = on_dask(product.b_steps, operand("B", product.b_window), read)
    a = a[None, :] if stack.a_vector else da.swapaxes(a, -1, -2) if stack.transpose_a else a
    b = b[:, None] if stack.b_vector else da.swapaxes(b, -1, -2) if stack.transpose_b else b
    addend = None if product.addend is None else matrices(read(product.addend))
    return a, b, matrices(read(c)), addend


def count_failures(bad: np.ndarray) -> tuple[int, int | None, tuple[int, ...] | None]:
    """How many rows fail in ``bad`` (rows of each matrix of the output, batch first), the
    first one's row, and its matrix's batch index (None for one matrix)."""
    found = np.argwhere(bad)
    if not found.size:
        return 0, None, None
    first = tuple(int(i) for i in found[0])
    return len(found), first[-1], first[:-1] if bad.ndim > 1 else None


def _read_block(
    array: zarr.Array, index: tuple[slice, ...], asarray: bool = True, lock: object = None
) -> np.ndarray:
    """One block of ``array`` for Dask (``from_array``'s getitem), read by
    :func:`outofcore.operands.reading.read_panel`."""
    bounds = zip(index, array.shape, strict=True)
    selection = tuple(slice(*part.indices(size)) for part, size in bounds)
    out = np.empty([part.stop - part.start for part in selection], dtype=array.dtype)
    read_panel(array, selection, out)
    return out


def row_bounds(
    product: Product, a: da.Array, b: da.Array, addend: da.Array | None
) -> tuple[da.Array, ...]:
    """``‖a_i‖₂`` (A's batch..., m), ``‖op(B)‖_F`` per matrix and ``‖d_i‖₂`` (or 0): the
    parts of ``s_i`` (the module docstring), lazily."""
    row_norms = da.sqrt((abs(a) ** 2).sum(axis=-1))
    b_frobenius = da.sqrt((abs(b) ** 2).sum(axis=(-2, -1)))
    addend_norms = da.zeros(()) if addend is None else da.sqrt((abs(addend) ** 2).sum(axis=-1))
    return row_norms, b_frobenius, addend_norms


def row_scales(
    product: Product,
    row_norms: ArrayLike,
    b_frobenius: ArrayLike,
    addend_norms: ArrayLike,
) -> np.ndarray:
    """``s_i = |alpha|·‖a_i‖₂·‖op(B)‖_F + |beta|·‖d_i‖₂`` (batch..., m), in float64."""
    with np.errstate(over="ignore", invalid="ignore"):
        return abs(product.alpha) * np.asarray(row_norms) * np.asarray(b_frobenius)[
            ..., None
        ] + abs(product.beta) * np.asarray(addend_norms)


def largest_magnitude(dtype: np.dtype) -> float:
    """The largest finite magnitude of a float or complex dtype (inf for integers)."""
    return float(np.finfo(dtype).max) if dtype.kind in "fc" else math.inf

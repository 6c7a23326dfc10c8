"""Checking ``C = alpha·op(A)·op(B) + beta·D`` without recomputing it (Freivalds' method).

For random ±1 vectors ``r`` (one per round) compare ``C·r`` with
``alpha·op(A)·(op(B)·r) + beta·D·r``: ``O(mn + mk + kn)`` work per round
instead of ``O(mnk)``, streamed chunk by chunk (Dask's threaded scheduler in
this process).

**Floating-point products** are checked in float64 (complex128 for complex
ones).  If ``C = exact + E`` then ``C·r − (...)= E·r``.  Accumulated in a
dtype of unit roundoff ``u``, ``|E_ij| ≤ γ·(|alpha|·‖a_i‖₂·‖b_j‖₂ + |beta|·|d_ij|)``
and with random signs ``|(E·r)_i| ≲ γ·s_i`` where
``s_i = |alpha|·‖a_i‖₂·‖op(B)‖_F + |beta|·‖d_i‖₂``, with ``γ = √k·u`` and
``u`` the accumulation's unit roundoff (float32's for float16 inputs).  An
output written in a coarser dtype (float16) rounds each element once more,
by at most ``u_out·|c_ij|``: ``u_out·‖c_i‖₂`` for the row.  Row ``i`` passes when

    |(C·r)_i − (...)_i|  ≤  16 · (√k·u·s_i + u_out·‖c_i‖₂);

the report's ``tolerance`` is ``16·√k·u`` and ``max_relative_residual`` the
largest left side over ``s_i + (u_out / (√k·u))·‖c_i‖₂`` (just ``s_i`` unless
the output is coarser), so a row passes when its ratio is within the
tolerance.  Rows where
the reference is not finite (NaN or Inf in the inputs) must be non-finite in
``C·r`` too.

**Integer products** are exact, and are checked exactly: in int64 arithmetic,
which wraps modulo ``2**64``.  A wrong element changes ``(C·r)_i`` by twice
its error on one sign of ``r_j``, so each round misses it with probability at
most 1/2; the tolerance is 0.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np
import zarr

from outofcore import arrays, config
from outofcore.codecs import ChunkSizeError
from outofcore.derived import on_dask
from outofcore.joined import Joined
from outofcore.locations import locate
from outofcore.product import Product
from outofcore.reading import ReadError, read_panel
from outofcore.stacking import Window
from outofcore.targets import JOB_ATTRIBUTE
from outofcore.worker_context import worker_context
from scheduler.addresses import computing_on

SAFETY = 16.0


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

    def as_dict(self) -> dict:
        return asdict(self)


def _check_complete(c: zarr.Array) -> None:
    """Refuse an output whose job has not finished: its unwritten tiles read as NaN (or 0)."""
    record = c.attrs.get(JOB_ATTRIBUTE)
    if not isinstance(record, dict) or record.get("complete", True):
        return  # an array outofcore's jobs did not write, or a finished one
    from outofcore.journal import Journal  # noqa: PLC0415

    journal = Journal.for_output(c)
    document = journal.read_job() or {}
    done = ""
    if "journal_id" in document:
        done = (
            f" ({len(journal.done_tiles(document['journal_id']))} of "
            f"{document.get('tiles_total')} tiles done)"
        )
    raise arrays.InputError(
        f"C ({arrays.describe(c)}) is incomplete: its job has not finished{done}, so its "
        "unwritten tiles hold no product; rerun the same matmul command to resume it, then "
        "verify"
    )


#: Most random vectors one verification uses (each holds n or k numbers in memory).
MAX_ROUNDS = 64


def verify(
    a: arrays.ArrayLike,
    b: arrays.ArrayLike,
    c: arrays.ArrayLike,
    rounds: int = 2,
    seed: int | None = None,
    *,
    transpose_a: bool = False,
    transpose_b: bool = False,
    alpha: float | complex = 1.0,
    beta: float | complex = 0.0,
    addend: arrays.ArrayLike | None = None,
    storage_options: dict[str, Any] | None = None,
    client: Any = None,
) -> VerifyReport:
    """Check that ``c`` holds ``alpha * op(a) @ op(b) + beta * addend``, reading each once.

    Parameters
    ----------
    a, b, c
        ``zarr.Array`` objects or paths / URLs; ``c`` must have the product's shape.
    rounds
        Random vectors to test with; a wrong element escapes all of them
        only when its error is below the tolerance.
    seed
        Seed of the random vectors (fresh ones when None).
    transpose_a, transpose_b, alpha, beta, addend
        The product, as given to :func:`outofcore.matmul`.
    storage_options
        fsspec options of URLs (credentials, endpoint; :mod:`outofcore.stores`).
    client
        Where the products run, as for :func:`outofcore.matmul`: a ``distributed.Client``
        or a scheduler address (its workers read the arrays), ``"sync"`` (this thread);
        None: Dask's convention (the default Client when one is open, else what
        ``dask.config`` names), else threads of this process.
    """
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= MAX_ROUNDS:
        raise arrays.InputError(
            f"rounds = {rounds!r}: need a whole number from 1 to {MAX_ROUNDS} (each round is "
            "one random vector kept in memory; a wrong result escapes two already only below "
            "the tolerance)"
        )
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63
    ):
        raise arrays.InputError(f"seed = {seed!r}: need None or a whole number from 0 to 2**63-1")
    # Each array named by a path or URL is located once, with the options that open it.
    a, b, c, addend = (
        locate(x, storage_options) if isinstance(x, str | os.PathLike) else x
        for x in (a, b, c, addend)
    )
    c_arr = arrays.open_input(c, "C", dtypes=None)
    _check_complete(c_arr)
    product = Product.open(
        a,
        b,
        transpose_a=transpose_a,
        transpose_b=transpose_b,
        alpha=alpha,
        beta=beta,
        addend=addend,
        out_dtype=c_arr.dtype,
    )
    if tuple(c_arr.shape) != product.shape:
        raise arrays.InputError(
            f"C is {tuple(c_arr.shape)} but the product "
            f"({'A.T' if product.transpose_a else 'A'} @ "
            f"{'B.T' if product.transpose_b else 'B'}) is {product.shape}"
        )
    if product.types.boolean:
        raise arrays.InputError(
            f"C ({arrays.describe(c_arr)}) is a bool product: it holds whether any of the "
            "ands is true, not a sum, and Freivalds' check multiplies sums; compare it with "
            "the inputs' product as integers (outofcore matmul ... --out-dtype int64), nonzero"
        )
    rng = np.random.default_rng(seed)
    r = rng.choice(np.array([-1, 1]), size=(product.matrix_shape[1], rounds))
    try:
        with computing_on(client, config.number("connect-timeout", positive=True)):
            if product.types.exact:
                return _verify_exact(product, c_arr, r)
            return _verify_rounded(product, c_arr, r)
    except ChunkSizeError as exc:  # a decompression bomb, refused from its header
        read = [arrays.describe(x) for x in (*product.inputs.values(), c_arr)]
        raise ReadError(f"a chunk of {', '.join(read)} is corrupt: {exc}") from exc
    finally:  # the chunk-file buffers the reads kept (outofcore.reading, as a job's tasks)
        worker_context().release_in_process()


def _operands(product: Product, c: zarr.Array, dtype: np.dtype) -> tuple[da.Array, ...]:
    """``op(A)``, ``op(B)``, ``C`` and the addend (or None) as Dask arrays of ``dtype``,
    each of two or more dimensions (a vector as a one-row or one-column matrix, numpy's
    promotion; the batch dimensions broadcast), each block read as a job's tasks read
    (:func:`outofcore.reading.read_panel`): chunks never decode to more than their size,
    transient errors are retried, and a block that cannot be read or decoded is a
    :class:`~outofcore.reading.ReadError` naming the array, its region and the chunk's
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
    addend = None if product.addend is None else matrices(read(product.addend)).astype(dtype)
    return a.astype(dtype), b.astype(dtype), matrices(read(c)).astype(dtype), addend


def _failures(bad: np.ndarray) -> tuple[int, int | None, tuple[int, ...] | None]:
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
    :func:`outofcore.reading.read_panel`."""
    bounds = zip(index, array.shape, strict=True)
    selection = tuple(slice(*part.indices(size)) for part, size in bounds)
    out = np.empty([part.stop - part.start for part in selection], dtype=array.dtype)
    read_panel(array, selection, out)
    return out


def _reference(product: Product, a: da.Array, b: da.Array, addend, r: np.ndarray) -> da.Array:
    expected = a @ (b @ r)
    if product.alpha != 1:
        expected = expected * product.alpha
    if addend is not None:
        expected = expected + (addend @ r) * product.beta
    return expected


def _verify_exact(product: Product, c: zarr.Array, r: np.ndarray) -> VerifyReport:
    """Integers: exact in int64 arithmetic (modulo 2**64)."""
    a, b, c_d, addend = _operands(product, c, np.dtype(np.int64))
    alpha, beta = int(product.alpha.real), int(product.beta.real)
    r = r.astype(np.int64)
    expected = a @ (b @ r) * alpha
    if addend is not None:
        expected = expected + (addend @ r) * beta
    cr, abr = dask.compute(c_d @ r, expected)
    residual = np.abs((cr - abr).astype(np.float64))
    failing, row, matrix = _failures((cr != abr).any(axis=-1))
    return VerifyReport(
        passed=failing == 0,
        rounds=r.shape[1],
        max_relative_residual=float(residual.max()) if residual.size else 0.0,
        tolerance=0.0,
        failing_rows=failing,
        first_failing_row=row,
        nonfinite_mismatches=0,
        exact=True,
        first_failing_matrix=matrix,
    )


def _verify_rounded(product: Product, c: zarr.Array, r: np.ndarray) -> VerifyReport:
    """Floats and complex: residuals against ``γ·s_i`` (see the module docstring)."""
    dtype = np.dtype(np.complex128 if product.types.compute.kind == "c" else np.float64)
    a, b, c_d, addend = _operands(product, c, dtype)
    r = r.astype(np.float64)
    row_norms = da.sqrt((abs(a) ** 2).sum(axis=-1))  # (A's batch..., m)
    c_norms = da.sqrt((abs(c_d) ** 2).sum(axis=-1))
    b_frobenius = da.sqrt((abs(b) ** 2).sum(axis=(-2, -1)))  # one per matrix of B
    addend_norms = da.zeros(()) if addend is None else (da.sqrt((abs(addend) ** 2).sum(axis=-1)))
    cr, abr, row_norms, b_frobenius, addend_norms, c_norms = dask.compute(
        c_d @ r,
        _reference(product, a, b, addend, r),
        row_norms,
        b_frobenius,
        addend_norms,
        c_norms,
    )
    types = product.types
    accumulation = math.sqrt(product.k) * types.unit_roundoff()
    scale = (
        abs(product.alpha) * row_norms * np.asarray(b_frobenius)[..., None]
        + abs(product.beta) * addend_norms
    )
    if types.output_roundoff():
        scale = scale + types.output_roundoff() / accumulation * np.nan_to_num(c_norms)
    scale = scale[..., None]
    expected_finite = np.isfinite(abr)
    got_finite = np.isfinite(cr)
    nonfinite_mismatch = expected_finite != got_finite
    with np.errstate(invalid="ignore", divide="ignore"):
        residual = np.where(expected_finite & got_finite, np.abs(cr - abr), 0.0)
        relative = np.where(scale > 0, residual / scale, np.where(residual > 0, np.inf, 0.0))
    tolerance = SAFETY * accumulation
    failing, row, matrix = _failures(
        (relative > tolerance).any(axis=-1) | nonfinite_mismatch.any(axis=-1)
    )
    return VerifyReport(
        passed=failing == 0,
        rounds=r.shape[1],
        max_relative_residual=float(relative.max()) if relative.size else 0.0,
        tolerance=tolerance,
        failing_rows=failing,
        first_failing_row=row,
        nonfinite_mismatches=int(nonfinite_mismatch.any(axis=-1).sum()),
        first_failing_matrix=matrix,
    )

"""Operands computed as they are read: a stored array's elementwise steps (:class:`Step`),
typed and applied as numpy applies them (:func:`apply`), a slab at a time, on the workers.

Which steps a graph holds is :mod:`outofcore.operands.dask_graph`'s (on the client)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from outofcore.operands.dtypes import INPUT_DTYPES
from outofcore.planner.memory import STEP_SLAB_ELEMENTS
from outofcore.storage.locations import locate


@dataclass(frozen=True, eq=False)
class Step:
    """One elementwise step ``values = values <op> other`` (or ``other <op> values``).

    ``other`` is a scalar, or a vector along ``axis`` of the stored array (0: one value
    a row, 1: one value a column).  ``astype`` steps only change the dtype.
    """

    op: str
    #: The dtype the values have after the step (numpy's promotion, as dask typed it).
    dtype: np.dtype
    other: Any = None
    axis: int | None = None
    #: Whether the operand is the right-hand side: ``other - values``, ``other / values``.
    reflected: bool = False
    #: A ``sub`` step of the stored array's own mean over the other axis (``x -
    #: x.mean(axis=0)``) whose ``other`` is a *shift*: the mean of a sample
    #: (:func:`outofcore.operands.reading.sample_means`).  The product subtracts the rest of the
    #: exact mean from its panel sums (:mod:`outofcore.operands.centring`), or the caller makes
    #: the step exact first (:func:`exact_steps`).
    shift: bool = False
    #: The stored array a :attr:`shift` is the mean of (its sample's), and the axis of
    #: that array the mean runs over.
    mean_of: Any = None
    mean_axis: int | None = None
    #: Where ``other`` is a stored array of the operand's shape (``x * y``): whether it
    #: is stored as the transpose of the operand's stored array.
    other_transposed: bool = False
    #: The dask layer of a :attr:`shift`'s mean (:attr:`Vectors.layers` computes it).
    mean_layer: str | None = None

    @property
    def stored_other(self) -> bool:
        """Whether ``other`` is a stored array (``x * y``), read region by region."""
        return isinstance(self.other, zarr.Array)

    def describe(self) -> dict[str, Any]:
        """JSON-ready: the step, with a vector's length and checksum (the job's identity)."""
        said: dict[str, Any] = {"op": self.op, "dtype": str(self.dtype)}
        if self.reflected:
            said["reflected"] = True
        if self.shift:
            said["shift"] = True  # the mean of a sample; the exact mean from panel sums
        if isinstance(self.other, np.ndarray):
            data = np.ascontiguousarray(self.other)
            said["vector"] = {
                "axis": self.axis,
                "length": int(data.size),
                "dtype": str(data.dtype),
                "sha256": hashlib.sha256(data.tobytes()).hexdigest(),
            }
        elif self.stored_other:  # its values are the job's input (fingerprinted)
            said["array"] = {
                "path": stored_path(self.other),
                "shape": list(self.other.shape),
                "dtype": str(self.other.dtype),
                "transposed": self.other_transposed,
            }
        elif self.other is not None:
            said["scalar"] = _json_scalar(self.other)
        return said


def describe(steps: Sequence[Step]) -> list[dict[str, Any]]:
    """The steps as the job's identity and the product's record write them."""
    return [step.describe() for step in steps]


def vector_bytes(steps: Sequence[Step]) -> int:
    """Bytes of the vectors the steps hold."""
    return sum(s.other.nbytes for s in steps if isinstance(s.other, np.ndarray))


def result_dtype(steps: Sequence[Step], stored: np.dtype) -> np.dtype:
    """The dtype of the values after the steps (the stored dtype without any)."""
    return np.dtype(steps[-1].dtype) if steps else np.dtype(stored)


def applicable(steps: Sequence[Step], stored: np.dtype) -> bool:
    """Whether outofcore applies these steps as it reads (:func:`apply`, exactly as numpy
    computes them): each gives a dtype a product takes, at most one reads another stored
    array (``x * y``: its region is read once a panel), and they give float or complex
    values, or integers of the stored dtype at every step (``counts + 1``, wrapping as
    numpy's).  Integer steps that change the dtype are dask's to compute: dask's integer
    product wraps block by block, and an exact product would differ from it."""
    stored = np.dtype(stored)
    dtypes = [stored, *(np.dtype(step.dtype) for step in steps)]
    dtypes += [np.dtype(step.other.dtype) for step in steps if step.stored_other]
    if not all(d in INPUT_DTYPES for d in dtypes) or sum(s.stored_other for s in steps) > 1:
        return False
    in_stored = stored.kind in "iu" and all(d == stored for d in dtypes)
    return result_dtype(steps, stored).kind in "fc" or (
        in_stored and not any(s.shift for s in steps)
    )


#: Slabs alive at once while the steps run: the step's input and its result.
SLABS_ALIVE = 2
#: numpy's ufunc of each operation.
UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide}


def slab_itemsize(steps: Sequence[Step], stored: np.dtype) -> int:
    """Bytes per element :func:`apply` holds beside its input and output while it applies
    ``steps`` to values stored as ``stored``: :data:`SLABS_ALIVE` slabs of the widest dtype
    a step gives (0 without steps); the memory model counts
    :data:`~outofcore.planner.memory.STEP_SLAB_ELEMENTS` of them at most, fewer
    for a smaller panel (:attr:`outofcore.planner.problem.Problem.step_slabs`)."""
    if not steps:
        return 0
    widest = max(np.dtype(d).itemsize for d in (stored, *(s.dtype for s in steps)))
    return SLABS_ALIVE * widest


def apply(
    steps: Sequence[Step],
    values: np.ndarray,
    out: np.ndarray,
    r0: int,
    c0: int,
    read: Callable[[Any, tuple[slice, slice], np.ndarray], None] | None = None,
) -> None:
    """``out[...] = steps(values)``: the steps applied as numpy applies them, each in
    numpy's dtype for it (the stored values first), a slab of at most
    :data:`outofcore.planner.memory.STEP_SLAB_ELEMENTS` at a time (:func:`slab_itemsize`).

    ``values`` are rows ``r0:`` and columns ``c0:`` of the stored array as decoded (2-D,
    stored orientation, its stored dtype; a transposed view is fine); ``out`` has their
    shape (the accumulation dtype) and may be ``values`` itself.  ``read(array,
    selection, out)`` reads a stored other operand's region (``x * y``) into a buffer of
    its dtype, once, let go after the steps.
    """
    rows, cols = values.shape
    others = [_region(step, (rows, cols), r0, c0, read) for step in steps]
    wide = min(max(cols, 1), STEP_SLAB_ELEMENTS)
    per = max(1, STEP_SLAB_ELEMENTS // wide)
    with np.errstate(all="ignore"):  # numpy's values; its warnings are dask's business
        for s0 in range(0, rows, per):
            for t0 in range(0, cols, wide):
                where = (slice(s0, s0 + per), slice(t0, t0 + wide))
                part = values[where]
                for step, other in zip(steps, others, strict=True):
                    part = _one_step(step, part, _slab(step, other, where))
                np.copyto(out[where], part, casting="unsafe")


def _region(
    step: Step, shape: tuple[int, int], r0: int, c0: int, read: Callable[..., None] | None
) -> Any:
    """What a step's ``other`` is for the region: a stored array's values (read now), a
    vector cut to the region (as a column or a row), or the scalar."""
    rows, cols = shape
    other = step.other
    if step.stored_other:
        if read is None:
            raise ValueError("a step on a stored array needs a reader of its regions")
        values = np.empty(shape, other.dtype)
        if step.other_transposed:
            read(other, (slice(c0, c0 + cols), slice(r0, r0 + rows)), values.T)
        else:
            read(other, (slice(r0, r0 + rows), slice(c0, c0 + cols)), values)
        return values
    if isinstance(other, np.ndarray):
        return other[r0 : r0 + rows, None] if step.axis == 0 else other[None, c0 : c0 + cols]
    return other


def _slab(step: Step, other: Any, where: tuple[slice, slice]) -> Any:
    """``other`` (:func:`_region`) for the slab ``where`` (rows, columns) of the region:
    a stored array's slab, a column vector's rows or a row vector's columns."""
    if step.stored_other:
        return other[where]
    if isinstance(other, np.ndarray):
        return other[where[0]] if step.axis == 0 else other[:, where[1]]
    return other


def _one_step(step: Step, part: np.ndarray, other: Any) -> np.ndarray:
    """One step on ``part``, by numpy: its dtype must be the one the step was typed."""
    if step.op == "astype":
        return part.astype(step.dtype)
    ufunc = UFUNCS[step.op]
    result = ufunc(other, part) if step.reflected else ufunc(part, other)
    if result.dtype != step.dtype:  # never: the steps were typed by the same ufuncs
        raise RuntimeError(f"step {step.op} gave {result.dtype}, typed {step.dtype}")
    return result


def stored_path(array: Any) -> str:
    """Where a zarr array is stored, canonically (:func:`outofcore.storage.locations.locate`: one
    array, however spelled; its fsspec options never shown)."""
    return str(locate(array))


def _json_scalar(value: Any) -> float | int | list[float]:
    if isinstance(value, complex | np.complexfloating):
        return [float(value.real), float(value.imag)]
    return value.item() if isinstance(value, np.generic) else value

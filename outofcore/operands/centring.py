"""Centring over k from panel sums: ``xc.T @ xc`` of ``xc = x - x.mean(axis=0)`` in one
read of ``x``.

When both operands are centred over the contracted axis (their mean over it
subtracted), the exact means need not be known before the product.  For any shifts ``c`` and ``e``,

    (X - 1 mu^T)^T (Z - 1 nu^T) = X'^T Z' - s t^T / n,

where ``X' = X - 1 c^T`` and ``Z' = Z - 1 e^T`` are what the tasks multiply,
``s = X'^T 1`` and ``t = Z'^T 1`` the sums of their panels over the ``n`` rows of k,
and ``mu``, ``nu`` the exact means.  The tasks add up ``s`` and ``t`` from the panels
they read anyway (:class:`PanelSums`), and each finished tile subtracts its block of
``s t^T / n`` before it is scaled and written (a split tile's parts keep their sums
beside their partial tiles; the reduction adds them up).  The shifts are the means of
a sample of at least a sixteenth of the rows (:func:`outofcore.operands.reading.sample_means`),
so ``X'`` stays within ``sqrt(15)`` standard deviations of centred: the subtraction
cancels at most 4 bits, and on typical data none.  The exact mean is then never read
in a pass of its own: the job reads ``x`` once, where subtracting the mean first
reads it twice.

The product must equal numpy's ``(x - x.mean(0)).T @ (x - x.mean(0))`` or be refused,
and numpy's NaN and Inf follow from its exact means (its own dtype's sums, which can
overflow).  So only a centred Gram whose failures show takes this path
(:func:`fused_gram`): a NaN or an Inf of ``x`` gives dask's NaN rows and columns, and
any other non-finite result is refused (:meth:`PanelSums.correct`).
Anything else (a cross-covariance, one operand centred, a step after the centring, a
slice, a stack, float16) has its shifts made exact before the job
(:func:`outofcore.operands.dask_graph.exact_steps`: dask's own means).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from outofcore.errors import InputError
from outofcore.operands.dask_graph import Vectors, exact_steps
from outofcore.operands.stacking import Window
from outofcore.operands.steps import Step, describe


def settle(
    a: Any,
    b: Any,
    steps: tuple[tuple[Step, ...], tuple[Step, ...]],
    flags: tuple[bool, bool],
    windows: tuple[Window | None, Window | None],
    vectors: Vectors,
) -> tuple[tuple[Step, ...], tuple[Step, ...]]:
    """The steps of A and B as the job applies them: with their shifts for a centred
    Gram (:func:`fused_gram`), else with every shift made exact (dask's own means,
    computed now by ``vectors``)."""
    a_steps, b_steps = steps
    if fused_gram(a, b, steps, flags, windows):
        return a_steps, b_steps
    return exact_steps(a_steps, vectors), exact_steps(b_steps, vectors)


def fused_gram(
    a: Any,
    b: Any,
    steps: tuple[tuple[Step, ...], tuple[Step, ...]],
    flags: tuple[bool, bool],
    windows: tuple[Window | None, Window | None],
) -> bool:
    """Whether ``xc.T @ xc`` centres from its panel sums, exactly as numpy's
    ``(x - x.mean(0)).T @ (x - x.mean(0))`` or detectably not (:meth:`PanelSums.correct`
    refuses a non-finite result): one stored 2-D array read whole with the same steps
    on both sides, centred over k, the shift in the dtype of the product (float32,
    float64, complex), finite, and small enough that no sum of ``n`` values of its size
    nears the largest float.

    Then a mean numpy's dtype overflows (the sum of ``|x|`` above the largest float)
    needs a value of ``x`` at least ``max / n`` from the shift or a shift of that size;
    the first makes the tile's diagonal (a sum of squares, in the same dtype) infinite,
    the second is turned away here.  A cross-covariance, float16 (whose mean numpy sums
    in float16) or anything else has its means made exact."""
    a_steps, b_steps = steps
    two_d = a.ndim == 2 and b.ndim == 2 and windows == (None, None)
    if not (two_d and _same(a, b) and describe(a_steps) == describe(b_steps)):
        return False
    k_axis = 0 if flags[0] else 1
    if not (centred_over_k(a_steps, k_axis) and centred_over_k(b_steps, 1 if flags[1] else 0)):
        return False
    shift = a_steps[-1]
    dtype = np.dtype(shift.dtype)
    if dtype not in _FUSED_DTYPES or np.dtype(shift.other.dtype) != dtype:
        return False
    largest = float(np.max(np.abs(shift.other), initial=0.0))
    return bool(np.isfinite(largest)) and a.shape[k_axis] * largest <= np.finfo(dtype).max / 4


#: The dtypes of a shift a centred Gram takes: numpy's mean of them sums in the same.
_FUSED_DTYPES = tuple(np.dtype(t) for t in ("float32", "float64", "complex64", "complex128"))


def _same(one: Any, other: Any) -> bool:
    """Whether two operands are one stored array (read whole)."""
    import zarr  # noqa: PLC0415

    from outofcore.storage.locations import locate  # noqa: PLC0415

    arrays = isinstance(one, zarr.Array) and isinstance(other, zarr.Array)
    return one is other or (arrays and locate(one) == locate(other))


def centred_over_k(steps: tuple[Step, ...], k_axis: int) -> bool:
    """Whether ``steps`` are ``astype``\\s, then the subtraction of a shift of the mean
    over the stored axis ``k_axis`` (the contracted one), last."""
    if not steps or not steps[-1].shift or steps[-1].axis != 1 - k_axis:
        return False
    return all(step.op == "astype" for step in steps[:-1])


def uses_panel_sums(a_steps: tuple[Step, ...], b_steps: tuple[Step, ...]) -> bool:
    """Whether a product with these steps centres from its panel sums."""
    return any(step.shift for step in (*a_steps, *b_steps))


def sums_dtype(compute: np.dtype) -> np.dtype:
    """float64, or complex128 for a complex product: what panel sums add up in."""
    return np.dtype(np.complex128 if np.dtype(compute).kind == "c" else np.float64)


def held_bytes(m: int, n: int, compute: np.dtype) -> int:
    """Bytes of a task's panel sums at most (one value for each row and column)."""
    return (m + n) * sums_dtype(compute).itemsize


#: Why a centred Gram from panel sums is refused when its result is not finite.
NOT_FINITE = (
    "the centred Gram (x - x.mean(axis=0)).T @ (x - x.mean(axis=0)) has non-finite values "
    "(x holds NaN or Inf, or values whose squares overflow): numpy's NaN and Inf there "
    "follow from its exact means, which a product centred from its panel sums does not "
    "read; compute the means first (mu = x.mean(axis=0).compute(); xc = x - mu), which "
    "outofcore subtracts exactly as numpy does"
)


def _sums(panel: np.ndarray, axis: int, dtype: np.dtype) -> np.ndarray:
    """``panel``'s sums along ``axis`` in ``dtype``, NaN where a summed value is NaN or
    ±Inf (:meth:`PanelSums.add`)."""
    sums = np.sum(panel, axis=axis, dtype=dtype)
    held = ~np.isfinite(panel).all(axis=axis)
    if held.any():
        sums[held] = np.nan
    return sums


@dataclass
class PanelSums:
    """The sums over k of the A panels (one for each row of the tile) and of the B
    panels (one for each column) a task has read."""

    a: np.ndarray
    b: np.ndarray

    @classmethod
    def zeros(cls, shape: tuple[int, int], compute: np.dtype) -> PanelSums:
        """Nothing read yet, for a tile of ``shape``."""
        dtype = sums_dtype(compute)
        return cls(np.zeros(shape[0], dtype), np.zeros(shape[1], dtype))

    def add(self, a_panel: np.ndarray, b_panel: np.ndarray, same: bool) -> None:
        """Add one panel pair (``same``: the B panel is the A panel's transpose).

        The sum of a row of A (a column of B) that holds a NaN or ±Inf is NaN, whatever
        its values: dask's mean of such a column of ``x`` is NaN or ±Inf, so its centred
        column holds a NaN (``inf - inf``) and its row and column of the Gram are NaN
        (:meth:`correct`); a sum of finite values that overflows stays ±Inf."""
        a = _sums(a_panel, 1, self.a.dtype)
        self.a += a
        self.b += a if same else _sums(b_panel, 0, self.b.dtype)

    def correct(self, r0: int, rows: np.ndarray, k: int) -> None:
        """Subtract ``s t^T / k`` from ``rows`` (rows ``r0`` on of the tile), in place.

        A column of ``x`` holding NaN or ±Inf has a mean that is NaN or ±Inf in numpy's
        and dask's centring, so its centred column holds a NaN and its row and column of
        the Gram are NaN whole: where a panel sum is NaN (:meth:`add` makes it so for
        such a column, in every dtype), its row or column of the result is NaN, as
        dask's.

        Raises
        ------
        InputError
            Where a value is not finite otherwise (finite values whose sums or squares
            overflow): numpy's NaN and Inf there follow from its exact means, which this
            product does not read (:data:`NOT_FINITE`).
        """
        if k:  # (s_i t_j) / k: the same bits for (i, j) and (j, i) of a symmetric tile
            with np.errstate(all="ignore"):  # non-finite: refused just below
                block = np.multiply.outer(self.a[r0 : r0 + len(rows)], self.b)
                block /= k
                np.subtract(rows, block, out=rows, casting="unsafe")
        if np.isfinite(rows).all():
            return
        nan_rows = np.isnan(self.a[r0 : r0 + len(rows)])  # a NaN or Inf of x: dask's NaN
        nan_cols = np.isnan(self.b)
        nan = complex(np.nan, np.nan) if rows.dtype.kind == "c" else np.nan  # as dask's
        rows[nan_rows, :] = nan
        rows[:, nan_cols] = nan
        if np.isfinite(rows[~nan_rows][:, ~nan_cols]).all():
            return
        raise InputError(NOT_FINITE)  # numpy's NaN/Inf come from its exact mean

    def vector(self) -> np.ndarray:
        """Both sums in one array (kept beside a split tile's part)."""
        return np.concatenate([self.a, self.b])

    def add_vector(self, kept: np.ndarray) -> None:
        """Add the sums a part kept (:meth:`vector`)."""
        self.a += kept[: len(self.a)]
        self.b += kept[len(self.a) :]

"""Checking ``C = A @ B`` without recomputing it (Freivalds' method).

For random ±1 vectors ``r`` (one per round) compare ``C·r`` with ``A·(B·r)``:
``O(mn + mk + kn)`` work per round instead of ``O(mnk)``, streamed chunk by
chunk (Dask's threaded scheduler in this process), in float64.

Tolerance.  If ``C = AB + E`` then ``C·r − A·(B·r) = E·r``.  A computed
product obeys ``|E_ij| ≤ γ·‖a_i‖₂·‖b_j‖₂`` and with random signs
``|(E·r)_i| ≈ ‖E_i,:‖₂ ≤ γ·‖a_i‖₂·‖B‖_F``.  We take ``γ = 16·√k·u``
(``u`` the unit roundoff of the dtype), so row ``i`` passes when

    |(C·r)_i − (A·(B·r))_i|  ≤  16·√k·u · ‖a_i‖₂ · ‖B‖_F.

The report's ``max_relative_residual`` is the largest left side divided by
``‖a_i‖₂·‖B‖_F``, to compare with ``tolerance``.  Rows where ``A·(B·r)`` is
not finite (NaN or Inf in the inputs) must be non-finite in ``C·r`` too.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import dask
import dask.array as da
import numpy as np
import zarr

from outofcore import arrays

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

    def as_dict(self) -> dict:
        return asdict(self)


def verify(
    a: arrays.ArrayLike,
    b: arrays.ArrayLike,
    c: arrays.ArrayLike,
    rounds: int = 2,
    seed: int | None = None,
) -> VerifyReport:
    """Check that ``c`` holds ``a @ b``, reading each array once.

    Parameters
    ----------
    a, b, c
        ``zarr.Array`` objects or paths / URLs; ``c`` must be ``m×n``.
    rounds
        Random vectors to test with; a wrong element escapes all of them
        only when its error is below the tolerance.
    seed
        Seed of the random vectors (fresh ones when None).
    """
    if rounds < 1:
        raise arrays.InputError(f"rounds = {rounds}: need at least one round")
    a_arr = arrays.open_input(a, "A")
    b_arr = arrays.open_input(b, "B")
    c_arr = arrays.open_input(c, "C")
    dtype = arrays.check_operands(a_arr, b_arr)
    expected = (a_arr.shape[0], b_arr.shape[1])
    if tuple(c_arr.shape) != expected:
        raise arrays.InputError(f"C is {tuple(c_arr.shape)} but A @ B is {expected}")

    k = a_arr.shape[1]
    rng = np.random.default_rng(seed)
    r = rng.choice(np.array([-1.0, 1.0]), size=(b_arr.shape[1], rounds))
    a_d, b_d, c_d = (_as_float64(x) for x in (a_arr, b_arr, c_arr))
    cr = c_d @ r
    abr = a_d @ (b_d @ r)
    row_norms = da.sqrt((a_d * a_d).sum(axis=1))
    b_frobenius = da.sqrt((b_d * b_d).sum())
    with dask.config.set(scheduler="threads"):
        cr, abr, row_norms, b_frobenius = dask.compute(cr, abr, row_norms, b_frobenius)

    scale = row_norms[:, None] * float(b_frobenius)
    expected_finite = np.isfinite(abr)
    got_finite = np.isfinite(cr)
    nonfinite_mismatch = expected_finite != got_finite
    with np.errstate(invalid="ignore", divide="ignore"):
        residual = np.where(expected_finite & got_finite, np.abs(cr - abr), 0.0)
        relative = np.where(scale > 0, residual / scale, np.where(residual > 0, np.inf, 0.0))
    tolerance = SAFETY * math.sqrt(k) * float(np.finfo(dtype).eps) / 2
    bad_rows = np.flatnonzero((relative > tolerance).any(axis=1) | nonfinite_mismatch.any(axis=1))
    return VerifyReport(
        passed=bad_rows.size == 0,
        rounds=rounds,
        max_relative_residual=float(relative.max()) if relative.size else 0.0,
        tolerance=tolerance,
        failing_rows=int(bad_rows.size),
        first_failing_row=int(bad_rows[0]) if bad_rows.size else None,
        nonfinite_mismatches=int(nonfinite_mismatch.any(axis=1).sum()),
    )


def _as_float64(array: zarr.Array) -> da.Array:
    return da.from_zarr(array).astype(np.float64)

"""Checking a product: the float32 tolerance of depth k, and an output against the reference."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

#: Tolerance factor over float32 rounding (every case uses this one).
TOLERANCE_FACTOR = 8


def tolerance(k: int) -> tuple[float, float]:
    """``(rtol, atol)`` between two float32 products of depth ``k`` of standard normals.

    Entries are about ``√k``; summing ``k`` float32 products loses about ``eps·√k``
    relative to the terms, so ``rtol = F·eps·√k``, ``atol = F·eps·k``.  A lost or
    repeated k-panel of depth ``d`` moves entries by about ``√d``, far outside.
    """
    eps = 2.0**-23
    return TOLERANCE_FACTOR * eps * math.sqrt(k), TOLERANCE_FACTOR * eps * k


def compare_outputs(path: Path, reference: Path, k: int) -> dict:
    """Compare a stored product with the reference, block by block along axis 0.

    Returns ``ok``, ``error_ratio`` (largest ``|c - ref| / (atol + rtol·|ref|)``: at
    most 1 passes; NaN or a missing output fails), ``max_abs_error``, ``rtol``, ``atol``.
    """
    import numpy as np  # noqa: PLC0415
    import zarr  # noqa: PLC0415

    rtol, atol = tolerance(k)
    report: dict[str, Any] = {"rtol": rtol, "atol": atol}
    try:
        got, want = (zarr.open_array(str(p), mode="r") for p in (path, reference))
    except Exception as error:  # noqa: BLE001 (no output is a failed check, not a crash)
        return {**report, "ok": False, "error": f"cannot open: {error}"}
    if got.shape != want.shape:
        return {**report, "ok": False, "error": f"shape {got.shape}, expected {want.shape}"}
    if got.dtype != want.dtype:
        return {**report, "ok": False, "error": f"dtype {got.dtype}, expected {want.dtype}"}
    worst, largest, non_finite = 0.0, 0.0, 0
    row = 4 * max(1, math.prod(want.shape[1:]))
    step = max(1, (64 * 2**20) // row)
    for r0 in range(0, want.shape[0], step):
        g = np.asarray(got[r0 : r0 + step], np.float64)
        w = np.asarray(want[r0 : r0 + step], np.float64)
        finite = np.isfinite(g)
        non_finite += int(finite.size - np.count_nonzero(finite))
        diff = np.abs(g[finite] - w[finite])
        bound = atol + rtol * np.abs(w[finite])
        worst = max(worst, float(np.max(diff / bound, initial=0.0)))
        largest = max(largest, float(np.max(diff, initial=0.0)))
    report.update(error_ratio=worst, max_abs_error=largest)
    if non_finite:
        share = non_finite / math.prod(want.shape)
        where = f"{non_finite} of {math.prod(want.shape)} ({share:.1%})"
        return {**report, "ok": False, "error": f"NaN or inf in {where} elements"}
    return {**report, "ok": worst <= 1.0}

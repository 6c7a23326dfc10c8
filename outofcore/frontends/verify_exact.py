"""Freivalds' check of an exact (integer) product: residuals modulo 2**64 in int64, exact
for a product written as integers, and within the output's rounding for one written as
floats or complex (a value no 64-bit integer rounds to is wrong)."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import zarr

from outofcore.frontends.verify_report import (
    VerifyReport,
    count_failures,
    dask_operands,
    largest_magnitude,
    row_bounds,
    row_scales,
)
from outofcore.operands.product import Product

#: The whole numbers a 64-bit result rounded to a float can be: int64's and uint64's,
#: and 2**64 (uint64's largest rounded up).
LOWEST, HIGHEST = -(2.0**63), 2.0**64


def _wrapped(value: int) -> np.int64:
    """A whole-number scale as int64 arithmetic applies it: modulo ``2**64``."""
    return np.int64((int(value) + 2**63) % 2**64 - 2**63)


def _whole(values: da.Array) -> da.Array:
    """Where ``values`` are whole numbers a 64-bit integer rounded to a float can be."""
    return (values == da.floor(values)) & (values >= LOWEST) & (values <= HIGHEST)


def _to_modular(block: np.ndarray) -> np.ndarray:
    """Whole-number float values (from -2**63 to 2**64) as int64 modulo ``2**64``;
    anything else as 0 (the caller counts those elements as wrong)."""
    usable = np.isfinite(block) & (block == np.floor(block))
    usable &= (block >= LOWEST) & (block <= HIGHEST)
    block = np.where(usable, block, 0.0)
    high = block >= 2.0**63  # beyond int64: shifted down by 2**63 first (exact)
    magnitude = np.abs(np.where(high, block - 2.0**63, block)).astype(np.uint64)
    magnitude = np.where(high, magnitude + np.uint64(2**63), magnitude)  # 2**64 wraps to 0
    wrapped = np.where(block < 0, np.uint64(0) - magnitude, magnitude)
    return wrapped.view(np.int64)


def verify_exact(product: Product, c: zarr.Array, r: np.ndarray) -> VerifyReport:
    """Integers: exact in int64 arithmetic (modulo 2**64).  An integer output is compared
    exactly; a float (or complex) one holds the 64-bit result rounded once, so ``C`` is
    read back as integers modulo ``2**64`` and each row's residual, exact, is within the
    rounding of its elements: ``|(C·r)_i − (...)_i| ≤ 2·u_out·‖c_i‖₁``."""
    a, b, c_d, addend = dask_operands(product, c)
    a, b = a.astype(np.int64), b.astype(np.int64)
    addend = None if addend is None else addend.astype(np.int64)
    r = r.astype(np.int64)
    expected = a @ (b @ r) * _wrapped(product.alpha)
    if addend is not None:
        expected = expected + (addend @ r) * _wrapped(product.beta)
    output = product.types.output
    if output.kind in "iu":
        cr, abr = dask.compute(c_d.astype(np.int64) @ r, expected)
        failing, row, matrix = count_failures((cr != abr).any(axis=-1))
        return VerifyReport(
            passed=failing == 0,
            rounds=r.shape[1],
            max_relative_residual=_largest_residual(cr - abr),
            tolerance=0.0,
            failing_rows=failing,
            first_failing_row=row,
            nonfinite_mismatches=0,
            exact=True,
            first_failing_matrix=matrix,
        )
    return _verify_exact_rounded(product, (a, b, c_d, addend), expected, r)


def _largest_residual(difference: np.ndarray) -> float:
    """The largest ``|difference|`` of int64 residuals (modulo 2**64, signed), as a float."""
    return float(np.abs(difference.astype(np.float64)).max()) if difference.size else 0.0


def _verify_exact_rounded(
    product: Product, operands: tuple, expected: da.Array, r: np.ndarray
) -> VerifyReport:
    """An integer product written as a float or complex: see :func:`verify_exact`."""
    a, b, c_d, addend = operands
    output = product.types.output
    unit = float(np.finfo(output).eps) / 2
    real = (c_d.real if output.kind == "c" else c_d).astype(np.float64)
    imaginary = (c_d.imag != 0).sum(axis=-1) if output.kind == "c" else da.zeros(())
    infinite = da.isinf(real)
    usable = da.isfinite(real) & _whole(real)  # what a 64-bit integer's rounding can be
    malformed = da.isnan(real) | (da.isfinite(real) & ~usable)
    bounds = row_bounds(
        product,
        a.astype(np.float64),
        b.astype(np.float64),
        None if addend is None else addend.astype(np.float64),
    )
    cr, abr, l1, infinite, malformed, imaginary, *bounds = dask.compute(
        real.map_blocks(_to_modular, dtype=np.int64) @ r,
        expected,
        abs(da.where(usable, real, 0.0)).sum(axis=-1),
        infinite.sum(axis=-1),
        malformed.sum(axis=-1),
        imaginary,
        *bounds,
    )
    # Inf is numpy's rounding of a 64-bit value beyond the output's range (float16); a row
    # that may reach it and holds Inf is not compared (its other values unchecked).
    reach = row_scales(product, *bounds) * (1 + 1e-6)  # wrapped (``wraps``): any 64-bit value
    may_overflow = ~(reach < largest_magnitude(output)) | product.types.wraps
    unchecked = (infinite > 0) & may_overflow
    limit = 2 * unit * l1
    residual = np.abs((cr - abr).astype(np.float64))
    with np.errstate(invalid="ignore", divide="ignore"):
        relative = np.where(
            l1[..., None] > 0, residual / l1[..., None], np.where(residual > 0, np.inf, 0.0)
        )
    unchecked = unchecked | (~unchecked & (limit >= 2.0**62))  # the modular residual says nothing
    unchecked &= (malformed == 0) & (np.asarray(imaginary) == 0)  # wrong whatever the rest
    wrong = (
        ((residual > limit[..., None]).any(axis=-1) & ~unchecked)
        | ((infinite > 0) & ~may_overflow)
        | (malformed > 0)
        | (np.asarray(imaginary) > 0)
    )
    failing, row, matrix = count_failures(wrong)
    checked = np.where(unchecked[..., None], 0.0, relative)
    return VerifyReport(
        passed=failing == 0,
        rounds=r.shape[1],
        max_relative_residual=float(checked.max()) if checked.size else 0.0,
        tolerance=2 * unit,
        failing_rows=failing,
        first_failing_row=row,
        nonfinite_mismatches=int((((infinite > 0) & ~may_overflow) | (malformed > 0)).sum()),
        exact=True,
        first_failing_matrix=matrix,
        unchecked_rows=int(unchecked.sum()),
        unchecked_elements=int(np.broadcast_to(unchecked, l1.shape).sum())
        * product.matrix_shape[1],
    )

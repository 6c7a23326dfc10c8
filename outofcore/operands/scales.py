"""Scales of a product (alpha, beta) as numpy takes them: whole numbers kept exact
(modulo 2**64 for integer products), other numbers as floats, anything else refused."""

from __future__ import annotations

import decimal
import numbers
from typing import Any

import numpy as np

from outofcore.errors import InputError

#: Whole-number scales of an integer product: those a 64-bit integer holds (int64 or
#: uint64), applied exactly, modulo ``2**64``.
SCALE_RANGE = (-(2**63), 2**64 - 1)


#: The largest magnitude of a scale given as a whole number (float64's largest).
LARGEST_SCALE = int(np.finfo(np.float64).max)


def check_scale(value: Any, name: str) -> int | float | complex:
    """``value`` as a Python int (a whole number given as an integer: kept exact, never
    rounded through float), float or complex, if it is a finite number; else InputError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Number):
        raise InputError(f"{name} = {value!r}: need a number")
    whole = _whole_number(value)
    if whole is not None:
        if abs(whole) > LARGEST_SCALE:
            raise InputError(
                f"{name} is an integer of {whole.bit_length()} bits: need a magnitude float64 "
                "holds (a float product converts it; an integer product takes -2**63 to "
                "2**64-1)"
            )
        return whole
    try:
        value = complex(value) if isinstance(value, complex | np.complexfloating) else float(value)
    except OverflowError:
        raise InputError(f"{name} = {value}: need a finite number") from None
    if isinstance(value, complex) and not value.imag:
        value = value.real
    if not np.isfinite(value):
        raise InputError(f"{name} = {value}: need a finite number")
    return value


def _whole_number(value: Any) -> int | None:
    """``value`` as an int where it is given as an integer (Python's, numpy's, a Fraction
    or Decimal of a whole number); None for floats and complex numbers."""
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Rational) and value.denominator == 1:
        return int(value.numerator)
    if isinstance(value, decimal.Decimal) and value.is_finite() and value == value.to_integral():
        return int(value) if value.adjusted() < 400 else None
    return None

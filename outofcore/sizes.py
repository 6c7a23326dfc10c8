"""Parsing and printing byte sizes such as ``"512MiB"`` or ``"1.5GB"``."""

from __future__ import annotations

import re

from outofcore.errors import InputError

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_size(size: int | str) -> int:
    """Return the number of bytes in ``size`` (an int, or text like ``"512MiB"``).

    Raises
    ------
    InputError
        When the text is not a positive size with a known unit.
    """
    if isinstance(size, bool):
        raise InputError(f"memory size must be bytes or text like '512MiB', got {size!r}")
    if isinstance(size, int):
        value = size
    else:
        match = _SIZE.match(str(size))
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise InputError(
                f"cannot read the size {size!r}: use bytes or a number with a unit "
                "such as 512MiB, 2GiB or 1.5GB"
            )
        value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise InputError(f"a memory size must be positive, got {size!r}")
    return value


def format_size(nbytes: float) -> str:
    """Return ``nbytes`` in binary units, e.g. ``format_size(3 * 2**30) == '3.00 GiB'``."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")

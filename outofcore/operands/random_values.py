"""Seeded random values of any numpy dtype outofcore reads: what ``outofcore generate``
writes (:mod:`outofcore.frontends.generate`) and the machine probe multiplies
(:mod:`outofcore.machine.probe`)."""

from __future__ import annotations

import numpy as np


def random_values(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Random values of ``dtype``: standard normal floats, integers over the dtype's range,
    booleans true or false with even odds."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    real = np.float64 if dtype in (np.float64, np.complex128) else np.float32
    values = rng.standard_normal(shape, dtype=real)
    if dtype.kind == "c":
        values = values + 1j * rng.standard_normal(shape, dtype=real)
    return values.astype(dtype)

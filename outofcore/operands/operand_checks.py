"""Checks of a product's opened operands before the model holds them: the arrays each
reads by name, their shapes as read, whether two are the same values, whether their steps
are applied as they are read, and an addend's scale."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import zarr

from outofcore.errors import InputError
from outofcore.operands.joined import Joined
from outofcore.operands.stacking import Window
from outofcore.operands.steps import Step, applicable, result_dtype
from outofcore.storage import stored_arrays

if TYPE_CHECKING:
    pass


def check_addend_scale(beta: Any, addend_array: zarr.Array | None) -> None:
    """Refuse ``beta != 0`` without an addend, and an addend with ``beta == 0``."""
    if beta != 0 and addend_array is None:
        raise InputError(f"beta = {beta} needs an addend (out = alpha*A@B + beta*addend)")
    if beta == 0 and addend_array is not None:
        raise InputError(
            f"an addend ({stored_arrays.describe(addend_array)}) was given with beta = 0, "
            "so it would be ignored; pass beta (e.g. 1.0) or leave the addend out"
        )


def named_parts(name: str, values: zarr.Array | Joined) -> dict[str, zarr.Array]:
    """The arrays an operand reads, by name: ``A``, or ``A``, ``A part 2``, ... joined."""
    if not isinstance(values, Joined):
        return {name: values}
    return {
        name if number == 1 else f"{name} part {number}": part
        for number, part in enumerate(values.arrays, start=1)
    }


def first_part(values: zarr.Array | Joined) -> zarr.Array:
    return values.arrays[0] if isinstance(values, Joined) else values


def same_values(a: zarr.Array | Joined, b: zarr.Array | Joined) -> bool:
    """Whether two operands read the same stored values (the same parts, joined alike)."""
    if isinstance(a, Joined) or isinstance(b, Joined):
        if not (isinstance(a, Joined) and isinstance(b, Joined)) or a.axis != b.axis:
            return False
        pairs = zip(a.arrays, b.arrays, strict=False)
        return len(a.arrays) == len(b.arrays) and all(
            stored_arrays.same_array(x, y) for x, y in pairs
        )
    return stored_arrays.same_array(a, b)


def read_shape(array: zarr.Array | Joined, window: Window | None) -> tuple[int, ...]:
    """The shape of the values read of ``array``: its ``window``'s, or its own."""
    return tuple(array.shape) if window is None else window.shape


def check_steps(name: str, array: zarr.Array, steps: tuple[Step, ...]) -> None:
    """Refuse elementwise steps outofcore does not apply as it reads: on an operand that
    is not a matrix, or giving an integer or bool operand (whose product is exact)."""
    if not steps:
        return
    dtype = result_dtype(steps, array.dtype)
    if array.ndim != 2 or not applicable(steps, array.dtype):
        raise InputError(
            f"input {name} computes {dtype} values from {stored_arrays.describe(array)} (shape "
            f"{tuple(array.shape)}) by elementwise steps; outofcore applies steps to "
            "matrices of float or complex values as it reads them: store the operand first"
        )

"""Opening a product's operands: the arrays (a URL by its location, with the fsspec
options it carries), the vectors their elementwise steps hold, and what centring over k
reads first; then the model checks them (:meth:`outofcore.operands.product.Product.of`).

Nothing is written.  :func:`outofcore.jobs.inputs.open_product` (a job) and
:func:`outofcore.frontends.verify.verify` open their products here.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from outofcore.operands import arrays, centring
from outofcore.operands.dask_graph import Vectors
from outofcore.operands.dtypes import ADDEND_DTYPES
from outofcore.operands.operand_checks import named_parts
from outofcore.operands.product import Product
from outofcore.operands.reading import sample_means, sums_along
from outofcore.storage.locations import Location, locate


def open_product(
    a: arrays.ArrayLike | Location,
    b: arrays.ArrayLike | Location,
    *,
    transpose_a: bool = False,
    transpose_b: bool = False,
    alpha: int | float | complex = 1.0,
    beta: int | float | complex = 0.0,
    addend: arrays.ArrayLike | Location | None = None,
    out_dtype: Any = None,
    storage_options: dict[str, Any] | None = None,
) -> Product:
    """Open and check the operands of ``alpha * op(a) @ op(b) + beta * addend``.

    Each one named by a path or URL is located once, with ``storage_options`` (the fsspec
    options that open it: :func:`outofcore.storage.locations.locate`).  An operand given
    as a transposed dask array (``da.from_zarr(...).T``) is its zarr array with the
    transpose flag flipped (:mod:`outofcore.operands.interop`).

    Raises
    ------
    InputError
        As :meth:`Product.of`, and for an addend that is A or B.
    """
    a, b, addend = (
        locate(x, storage_options) if isinstance(x, str | os.PathLike) else x
        for x in (a, b, addend)
    )
    # Vectors computed once for both operands; means to subtract are shifts first.
    vectors = Vectors(reduce=sums_along, sample=sample_means)
    a_array, a_flipped, a_steps, a_window = arrays.open_operand(a, "A", vectors=vectors)
    b_array, b_flipped, b_steps, b_window = arrays.open_operand(b, "B", vectors=vectors)
    addend_array = None
    if addend is not None:
        addend_array = arrays.open_input(addend, "the addend", ADDEND_DTYPES)
        read = {**named_parts("A", a_array), **named_parts("B", b_array)}
        arrays.check_distinct(addend_array, read, "the addend")
    if all(isinstance(flag, bool | np.bool_) for flag in (transpose_a, transpose_b)):
        # Centred over k: from the panel sums, or the exact means read now (flags of
        # another type are refused by the model).
        a_steps, b_steps = centring.settle(
            a_array, b_array, (a_steps, b_steps),
            (bool(transpose_a) != a_flipped, bool(transpose_b) != b_flipped),
            (a_window, b_window), vectors,
        )  # fmt: skip
    return Product.of(
        (a_array, a_flipped, a_steps, a_window),
        (b_array, b_flipped, b_steps, b_window),
        addend_array,
        transpose_a=transpose_a,
        transpose_b=transpose_b,
        alpha=alpha,
        beta=beta,
        out_dtype=out_dtype,
    )

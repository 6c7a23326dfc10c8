"""Opening and checking the zarr arrays of a job: A and B in, C out.

Every check here runs in the client before any task is submitted, and none of
them writes anything: inputs are opened read-only, and the output is only
created (or replaced) by :func:`create_output`, after all checks passed.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import zarr
from zarr.errors import NodeTypeValidationError

from outofcore.errors import InputError
from outofcore.operands import interop
from outofcore.operands.dask_graph import Vectors
from outofcore.operands.dtypes import INPUT_DTYPES, check_input_dtype
from outofcore.operands.joined import Joined
from outofcore.operands.stacking import Stack, Window
from outofcore.operands.steps import Step
from outofcore.storage.codecs import DEFAULT_OUTPUT_CODEC, zarr_compressors
from outofcore.storage.locations import Location, locate
from outofcore.storage.stored_arrays import WRITE_CONFIG, describe, same_array
from outofcore.storage.stores import check_metadata, store_errors, zarr_options

#: An array argument: a ``zarr.Array``, a path or fsspec URL of one, a numpy array, or a
#: dask array made by ``da.from_zarr`` (its ``.T`` too) (:mod:`outofcore.operands.interop`).
ArrayLike = zarr.Array | str | os.PathLike | np.ndarray
#: zarr formats of the outputs a job can create (3: zarr's default; 2: older readers).
ZARR_FORMATS = (2, 3)
#: The attribute in which xarray keeps a format-2 array's dimension names.
XARRAY_DIMENSIONS = "_ARRAY_DIMENSIONS"
#: A name per dimension of a 2-D array (None: unnamed).
DimensionNames = tuple[str | None, ...]

__all__ = ["ArrayLike", "DimensionNames"]


def open_input(
    source: ArrayLike | Location,
    name: str,
    dtypes: tuple[np.dtype, ...] | None = INPUT_DTYPES,
) -> zarr.Array:
    """Open input ``name`` (``"A"``, ``"B"``, ...) read-only and check it is 2-D.

    Parameters
    ----------
    source
        A ``zarr.Array``, a path or fsspec URL of one (or its location, opened with the
        options it carries: :func:`outofcore.storage.locations.locate`), a numpy array (copied
        into memory) or a dask array reading a zarr array (:mod:`outofcore.operands.interop`).
    name
        How error messages call this operand.
    dtypes
        The dtypes it may have (:func:`outofcore.operands.dtypes.check_input_dtype`); None: any.

    Raises
    ------
    InputError
        Also for a transposed dask array (``x.T``): only A and B have a transpose
        flag (:func:`open_operand`).
    """
    array, transposed, steps, window = open_operand(source, name, dtypes)
    if isinstance(array, Joined):
        raise InputError(
            f"{_label(name)} joins {len(array.arrays)} arrays ({describe(array)}); it is read "
            f"as stored, so store it first: {interop.store_line(_label(name), source)}"
        )
    if window is not None:
        raise InputError(
            f"{_label(name)} is the region {window.text()} of {describe(array)} (a slice); "
            f"it is read as stored, so store it first: {interop.store_line(_label(name), source)}"
        )
    if steps:
        raise InputError(
            f"{_label(name)} computes something ({len(steps)} elementwise steps on "
            f"{describe(array)}); it is read as stored, so store it first: "
            f"{interop.store_line(_label(name), source)}"
        )
    if transposed:
        raise InputError(
            f"{_label(name)} is the transpose of the zarr array {describe(array)} (a dask "
            f"array's .T); it is read as stored, so store the transpose first: "
            f"{interop.store_line(_label(name), source)}"
        )
    return array


def open_operand(
    source: ArrayLike | Location,
    name: str,
    dtypes: tuple[np.dtype, ...] | None = INPUT_DTYPES,
    vectors: Vectors | None = None,
) -> tuple[zarr.Array, bool, tuple[Step, ...], Window | None]:
    """Open operand ``name`` as :func:`open_input` does; return the zarr array, whether
    ``source`` is its transpose (a dask array ``da.from_zarr(...).T``), which the
    product turns into its transpose flag, the elementwise steps that compute the
    operand from it as it is read (:mod:`outofcore.operands.dask_graph`; ``vectors`` keeps their
    vectors for the product's other operand) and the region of it read (a slice
    ``x[:, :1000]``: :mod:`outofcore.operands.windows`; None for all of it)."""
    label = _label(name)
    transposed, steps, window = False, (), None
    if not isinstance(source, Location):
        resolved = interop.resolve(source, label, dtypes, vectors)
        source, transposed = resolved.source, resolved.transposed
        steps, window = resolved.steps, resolved.window
    if isinstance(source, zarr.Array | Joined):  # a Joined: zarr arrays of one operand
        array = source
    else:
        where = source if isinstance(source, Location) else locate(source)
        location = where.name or str(where)
        target = where.target  # file:// URLs open as local paths
        try:
            with store_errors(target, where):
                check_metadata(where, label)  # bounded: zarr's parser has no size or depth cap
                array = zarr.open_array(target, mode="r", **zarr_options(where))
        except InputError:
            raise
        except FileNotFoundError:
            raise InputError(f"{label}: no zarr array at {location!r}") from None
        except NodeTypeValidationError:
            raise InputError(
                f"{label}: {location!r} is a zarr group, not an array; "
                "give the path of the array inside it"
            ) from None
        except (ValueError, KeyError, OSError, TypeError) as exc:  # metadata zarr cannot read
            raise InputError(f"{label}: {location!r} is not a zarr array ({exc})") from None
    if array.ndim == 0 and name in ("A", "B"):  # numpy.matmul's refusal
        raise InputError(
            f"{label} ({describe(array)}) is 0-d (shape ()): matmul needs operands of at "
            "least 1 dimension"
        )
    if dtypes is not None:
        check_input_dtype(array.dtype, f"{label} ({describe(array)})", dtypes)
    if window is not None:
        window.check(tuple(array.shape), f"{label} ({describe(array)})")
    return array, transposed, steps, window


def _label(name: str) -> str:
    return f"input {name}" if name in ("A", "B") else name  # "the addend", "C"


def dimension_names(array: zarr.Array) -> DimensionNames:
    """The names of ``array``'s dimensions: zarr format 3's ``dimension_names``, else
    xarray's ``_ARRAY_DIMENSIONS`` attribute (format 2); None for each one unnamed."""
    names = getattr(array.metadata, "dimension_names", None)
    if not names:
        names = array.attrs.get(XARRAY_DIMENSIONS)
    if not isinstance(names, list | tuple) or len(names) != array.ndim:
        return (None,) * array.ndim
    return tuple(name if isinstance(name, str) else None for name in names)


def check_distinct(array: zarr.Array, others: dict[str, zarr.Array], what: str) -> None:
    """Refuse ``array`` (called ``what``) when it is one of ``others``."""
    for name, other in others.items():
        if same_array(array, other):
            raise InputError(f"{what} ({describe(array)}) is the same array as input {name}")


def check_output_target(target: zarr.Array | Location, inputs: dict[str, zarr.Array]) -> None:
    """Refuse an output that is, contains or lies inside an input array (the addend too),
    however either is spelled (path, relative path, ``file://``, symbolic link)."""
    out = target if isinstance(target, Location) else locate(target)
    for name, array in inputs.items():
        location = locate(array)
        if out == location:
            raise InputError(f"the output {str(out)!r} is the same array as input {name}")
        if out.overlaps(location):
            raise InputError(
                f"the output {str(out)!r} and input {name} ({str(location)!r}) are nested in "
                "one another; writing the output could damage the input"
            )


def output_grid(array: zarr.Array) -> tuple[int, ...]:
    """The grid writes must follow so that no stored chunk is partly written."""
    return tuple(array.shards or array.chunks)


def named_dimensions(
    dimension_names: DimensionNames | None,
    ndim: int,
    zarr_format: int,
    attributes: dict[str, Any],
) -> tuple[tuple[str | None, ...] | None, dict[str, Any]]:
    """The ``dimension_names`` and attributes that name an array's ``ndim`` dimensions
    in ``zarr_format``: format 3's ``dimension_names`` (None for an unnamed one; none at
    all when every one is), format 2's xarray ``_ARRAY_DIMENSIONS`` attribute when every
    one is named (xarray needs a name for each)."""
    dimension_names = dimension_names or (None,) * ndim
    named = any(name is not None for name in dimension_names)
    if zarr_format == 2 and named and all(name is not None for name in dimension_names):
        attributes = {**attributes, XARRAY_DIMENSIONS: list(dimension_names)}
    return (tuple(dimension_names) if named and zarr_format == 3 else None), attributes


def create_output(
    location: Location,
    shape: tuple[int, ...],
    dtype: np.dtype,
    chunks: tuple[int, ...],
    overwrite: bool,
    attributes: dict[str, Any],
    codec: str = DEFAULT_OUTPUT_CODEC,
    shards: tuple[int, ...] | None = None,
    zarr_format: int = 3,
    dimension_names: DimensionNames | None = None,
) -> zarr.Array:
    """Create the output array at ``location`` (opened with its options), replacing an
    old one only when ``overwrite``.

    ``codec`` is one of :data:`outofcore.storage.codecs.OUTPUT_CODECS`; ``shards`` (a multiple
    of ``chunks``, zarr format 3 only) groups chunks into shards: the plan makes them
    its tiles (:func:`outofcore.planner.tiling.make_output_plan`).  ``zarr_format`` 2 writes an
    array older readers open.  ``dimension_names`` (the product's,
    :attr:`outofcore.operands.product.Product.dimension_names`) are format 3's
    ``dimension_names`` (None for an unnamed one; none at all when both are);
    format 2 has none, so they go in xarray's ``_ARRAY_DIMENSIONS`` attribute,
    when both are named (xarray needs a name for every dimension).

    Raises
    ------
    InputError
        For a format other than 2 and 3, or shards with format 2.
    """
    if zarr_format not in ZARR_FORMATS:
        raise InputError(f"zarr_format = {zarr_format!r}: choose 2 or 3")
    if shards is not None and zarr_format == 2:
        raise InputError(f"zarr format 2 has no shards (asked for shards {shards})")
    names, attributes = named_dimensions(dimension_names, len(shape), zarr_format, attributes)
    return zarr.create_array(
        location.target,  # file:// URLs as local paths
        **zarr_options(location),
        shape=shape,
        chunks=chunks,
        shards=shards,
        zarr_format=zarr_format,
        dimension_names=names,
        dtype=dtype,
        overwrite=overwrite,
        attributes=attributes,
        # Chunks never written read as NaN (as 0 in an integer output, which has no NaN;
        # the output's record says whether it is complete).
        fill_value=0 if np.dtype(dtype).kind in "iu" else np.nan,
        compressors=zarr_compressors(codec, zarr_format),
        config=WRITE_CONFIG,
    )


#: Appended to the column dimension's name when it is the row dimension's name too.
REPEATED_SUFFIX = "_2"


def output_names(a: zarr.Array, b: zarr.Array, stack: Stack) -> DimensionNames:
    """The dimension names of ``op(a) @ op(b)`` (``stack``: its shapes), from the inputs'
    names (:func:`dimension_names`), and xarray's ``dim_0``, ``dim_1``, ... (by the
    output's axis) where they have none, so that xarray opens every output.

    Each batch axis takes the name of the operand that has it (A first where both do,
    B where A's is missing or of size 1 and B's is not); then op(a)'s row dimension
    unless A is a vector, op(b)'s column dimension unless B is.  A name met twice (a
    Gram product ``X.T @ X`` of an ``X`` with dimensions ``(sample, feature)`` gives
    ``feature`` twice) is followed by ``feature_2``: xarray cannot index an array
    with a repeated dimension.
    """
    a_names, b_names = dimension_names(a), dimension_names(b)
    batch = []
    for axis in range(-len(stack.batch), 0):
        choices = [
            (names[axis - 2], shape[axis])
            for names, shape in ((a_names, stack.a_batch), (b_names, stack.b_batch))
            if -axis <= len(shape)
        ]
        named = [name for name, size in choices if size > 1 or len(choices) == 1] or [
            name for name, _ in choices
        ]
        batch.append(named[0] if named else None)
    matrix = []
    if not stack.a_vector:
        matrix.append(a_names[-1] if stack.transpose_a else a_names[-2])
    if not stack.b_vector:
        matrix.append(b_names[-2] if stack.transpose_b else b_names[-1])
    names: list[str | None] = []
    for name in (*batch, *matrix):
        while name is not None and name in names:
            name = f"{name}{REPEATED_SUFFIX}"
        names.append(name)
    for axis, name in enumerate(names):  # xarray's names for unnamed dimensions
        if name is None:
            name = f"dim_{axis}"
            while name in names:
                name = f"{name}{REPEATED_SUFFIX}"
            names[axis] = name
    return tuple(names)

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
from zarr.storage import FsspecStore, LocalStore, MemoryStore

from outofcore.codecs import DEFAULT_OUTPUT_CODEC, zarr_compressors
from outofcore.dtypes import INPUT_DTYPES, check_input_dtype
from outofcore.errors import InputError
from outofcore.locations import locate
from outofcore.stores import store_errors, url_of, zarr_options

ArrayLike = zarr.Array | str | os.PathLike
#: fsspec options of URLs (credentials, endpoint), or None.
StorageOptions = dict[str, Any] | None
#: zarr formats of the outputs a job can create (3: zarr's default; 2: older readers).
ZARR_FORMATS = (2, 3)

__all__ = ["ArrayLike", "StorageOptions"]


def open_input(
    source: ArrayLike,
    name: str,
    dtypes: tuple[np.dtype, ...] | None = INPUT_DTYPES,
    storage_options: StorageOptions = None,
) -> zarr.Array:
    """Open input ``name`` (``"A"``, ``"B"``, ...) read-only and check it is 2-D.

    Parameters
    ----------
    source
        A ``zarr.Array``, or a path or fsspec URL of one.
    name
        How error messages call this operand.
    dtypes
        The dtypes it may have (:func:`outofcore.dtypes.check_input_dtype`); None: any.
    storage_options
        fsspec options (credentials, endpoint) for a URL (:mod:`outofcore.stores`).
    """
    label = f"input {name}" if name in ("A", "B") else name  # "the addend", "C"
    if isinstance(source, zarr.Array):
        array = source
    else:
        location = os.fspath(source)
        target = locate(location, storage_options).target  # file:// URLs open as local paths
        try:
            with store_errors(target):
                array = zarr.open_array(target, mode="r", **zarr_options(target, storage_options))
        except InputError:
            raise
        except FileNotFoundError:
            raise InputError(f"{label}: no zarr array at {location!r}") from None
        except NodeTypeValidationError:
            raise InputError(
                f"{label}: {location!r} is a zarr group, not an array; "
                "give the path of the array inside it"
            ) from None
        except (ValueError, KeyError, OSError) as exc:
            raise InputError(f"{label}: {location!r} is not a zarr array ({exc})") from None
    if array.ndim != 2:
        raise InputError(
            f"{label} ({describe(array)}) has {array.ndim} dimensions with shape "
            f"{array.shape}; matmul needs 2-D arrays"
        )
    if dtypes is not None:
        check_input_dtype(array.dtype, f"{label} ({describe(array)})", dtypes)
    return array


def describe(array: zarr.Array) -> str:
    """Where an array lives, for messages: its store URL (absolute for local files) and path."""
    store = array.store
    if isinstance(store, LocalStore):
        where = f"file://{os.path.realpath(os.fspath(store.root))}"
    elif isinstance(store, FsspecStore):
        where = url_of(store)
    else:
        where = str(store)
    if array.path:
        where = f"{where.rstrip('/')}/{array.path}"
    return where


def location_of(array: zarr.Array) -> str | None:
    """A comparable location (absolute local path or URL) of an array, or None in memory.

    Kept in job records (:func:`outofcore.resume.describe_input`); identity checks
    compare :class:`outofcore.locations.Location` objects (:func:`same_array`).
    """
    if isinstance(array.store, MemoryStore):
        return None
    return locate(array).target


def same_array(x: zarr.Array, y: zarr.Array) -> bool:
    """Whether ``x`` and ``y`` are the same stored array (opened once or twice, spelled
    alike or not: :func:`outofcore.locations.locate`)."""
    return locate(x) == locate(y)


def check_distinct(array: zarr.Array, others: dict[str, zarr.Array], what: str) -> None:
    """Refuse ``array`` (called ``what``) when it is one of ``others``."""
    for name, other in others.items():
        if same_array(array, other):
            raise InputError(f"{what} ({describe(array)}) is the same array as input {name}")


def check_output_target(
    target: ArrayLike, inputs: dict[str, zarr.Array], storage_options: StorageOptions = None
) -> None:
    """Refuse an output that is, contains or lies inside an input array (the addend too),
    however either is spelled (path, relative path, ``file://``, symbolic link)."""
    out = locate(target, storage_options)
    for name, array in inputs.items():
        location = locate(array)
        if out == location:
            raise InputError(f"the output {str(out)!r} is the same array as input {name}")
        if out.overlaps(location):
            raise InputError(
                f"the output {str(out)!r} and input {name} ({str(location)!r}) are nested in "
                "one another; writing the output could damage the input"
            )


def open_existing_output(target: zarr.Array, shape: tuple[int, int], dtype: np.dtype) -> zarr.Array:
    """Check a ``zarr.Array`` given as the output: writable, of the product's shape and dtype.

    Outputs named by a path or URL are checked by :func:`outofcore.targets.check_replaceable`
    and created by :func:`create_output`.
    """
    if target.read_only:
        raise InputError(f"the output {describe(target)} was opened read-only")
    if tuple(target.shape) != tuple(shape) or np.dtype(target.dtype) != dtype:
        raise InputError(
            f"the output {describe(target)} is {target.shape} {target.dtype}, but "
            f"the product is {shape} {dtype}"
        )
    return target


def output_grid(array: zarr.Array) -> tuple[int, int]:
    """The grid writes must follow so that no stored chunk is partly written."""
    return tuple(array.shards or array.chunks)


def create_output(
    target: str | os.PathLike,
    shape: tuple[int, int],
    dtype: np.dtype,
    chunks: tuple[int, int],
    overwrite: bool,
    attributes: dict[str, Any],
    codec: str = DEFAULT_OUTPUT_CODEC,
    storage_options: StorageOptions = None,
    shards: tuple[int, int] | None = None,
    zarr_format: int = 3,
) -> zarr.Array:
    """Create the output array (replacing an old one only when ``overwrite``).

    ``codec`` is one of :data:`outofcore.codecs.OUTPUT_CODECS`; ``storage_options``
    open a URL (:mod:`outofcore.stores`); ``shards`` (a multiple of ``chunks``,
    zarr format 3 only) groups chunks into shards: the plan makes them its tiles
    (:func:`scheduler.plan.make_output_plan`).  ``zarr_format`` 2 writes an
    array older readers open.

    Raises
    ------
    InputError
        For a format other than 2 and 3, or shards with format 2.
    """
    if zarr_format not in ZARR_FORMATS:
        raise InputError(f"zarr_format = {zarr_format!r}: choose 2 or 3")
    if shards is not None and zarr_format == 2:
        raise InputError(f"zarr format 2 has no shards (asked for shards {shards})")
    location = locate(target, storage_options).target  # file:// URLs as local paths
    return zarr.create_array(
        location,
        **zarr_options(location, storage_options),
        shape=shape,
        chunks=chunks,
        shards=shards,
        zarr_format=zarr_format,
        dtype=dtype,
        overwrite=overwrite,
        attributes=attributes,
        # Chunks never written read as NaN (as 0 in an integer output, which has no NaN;
        # the output's record says whether it is complete).
        fill_value=0 if np.dtype(dtype).kind in "iu" else np.nan,
        compressors=zarr_compressors(codec, zarr_format),
    )

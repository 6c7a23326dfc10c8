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
from outofcore.errors import InputError, OutputExistsError
from outofcore.stores import is_remote, local_path, url_of, zarr_options

ArrayLike = zarr.Array | str | os.PathLike
#: fsspec options of URLs (credentials, endpoint), or None.
StorageOptions = dict[str, Any] | None
#: zarr formats of the outputs a job can create (3: zarr's default; 2: older readers).
ZARR_FORMATS = (2, 3)

__all__ = ["ArrayLike", "StorageOptions", "is_remote", "local_path"]


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
    if isinstance(source, zarr.Array):
        array = source
    else:
        location = os.fspath(source)
        try:
            array = zarr.open_array(location, mode="r", **zarr_options(location, storage_options))
        except FileNotFoundError:
            raise InputError(f"input {name}: no zarr array at {location!r}") from None
        except NodeTypeValidationError:
            raise InputError(
                f"input {name}: {location!r} is a zarr group, not an array; "
                "give the path of the array inside it"
            ) from None
        except (ValueError, KeyError, OSError) as exc:
            raise InputError(f"input {name}: {location!r} is not a zarr array ({exc})") from None
    if array.ndim != 2:
        raise InputError(
            f"input {name} ({describe(array)}) has {array.ndim} dimensions with shape "
            f"{array.shape}; matmul needs 2-D arrays"
        )
    if dtypes is not None:
        check_input_dtype(array.dtype, f"input {name} ({describe(array)})", dtypes)
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
    """A comparable location (absolute local path or URL) of an array, or None in memory."""
    store = array.store
    if isinstance(store, MemoryStore):
        return None
    if isinstance(store, LocalStore):
        root = os.path.realpath(os.fspath(store.root))
        return os.path.join(root, array.path) if array.path else root
    return describe(array).rstrip("/")


def _location_of_target(target: ArrayLike) -> str:
    if isinstance(target, zarr.Array):
        location = location_of(target)
        return location if location is not None else f"memory:{id(target.store)}"
    text = os.fspath(target)
    if is_remote(text):
        return text.rstrip("/")
    return os.path.realpath(local_path(text))


def same_array(x: zarr.Array, y: zarr.Array) -> bool:
    """Whether ``x`` and ``y`` are the same stored array (opened once or twice)."""
    location = location_of(x)
    if location is None:
        return y.store is x.store and y.path == x.path
    return location == location_of(y)


def check_distinct(array: zarr.Array, others: dict[str, zarr.Array], what: str) -> None:
    """Refuse ``array`` (called ``what``) when it is one of ``others``."""
    for name, other in others.items():
        if same_array(array, other):
            raise InputError(f"{what} ({describe(array)}) is the same array as input {name}")


def check_output_target(target: ArrayLike, inputs: dict[str, zarr.Array]) -> None:
    """Refuse an output that is, contains or lies inside an input array."""
    out = _location_of_target(target)
    for name, array in inputs.items():
        location = location_of(array)
        if location is None:
            same_store = isinstance(target, zarr.Array) and target.store is array.store
            if same_store and target.path == array.path:
                raise InputError(f"the output is the same array as input {name}")
            continue
        if out == location:
            raise InputError(f"the output {out!r} is the same array as input {name}")
        if location.startswith(out.rstrip("/") + "/") or out.startswith(location + "/"):
            raise InputError(
                f"the output {out!r} and input {name} ({location!r}) are nested in one "
                "another; writing the output could damage the input"
            )


def open_existing_output(
    target: ArrayLike, shape: tuple[int, int], dtype: np.dtype, overwrite: bool
) -> zarr.Array | None:
    """Return an existing output array to write into, or None when one must be created.

    A ``zarr.Array`` given as output is used as is after its shape and dtype
    are checked.  An existing array at a path is refused unless ``overwrite``;
    with ``overwrite`` it is replaced by :func:`create_output`.
    """
    if isinstance(target, zarr.Array):
        if target.read_only:
            raise InputError(f"the output {describe(target)} was opened read-only")
        if tuple(target.shape) != tuple(shape) or np.dtype(target.dtype) != dtype:
            raise InputError(
                f"the output {describe(target)} is {target.shape} {target.dtype}, but "
                f"A @ B is {shape} {dtype}"
            )
        return target
    location = os.fspath(target)
    if exists(location) and not overwrite:
        raise OutputExistsError(
            f"the output {location!r} already exists; pass overwrite=True "
            "(--overwrite) to replace it, or choose another path"
        )
    return None


def exists(location: str, storage_options: StorageOptions = None) -> bool:
    """Whether anything is stored at ``location`` (a path or URL)."""
    if not is_remote(location):
        return os.path.exists(local_path(location))
    try:
        zarr.open(location, mode="r", **zarr_options(location, storage_options))
    except (FileNotFoundError, KeyError, ValueError):
        return False
    return True


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
    return zarr.create_array(
        os.fspath(target),
        **zarr_options(os.fspath(target), storage_options),
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

"""Making input arrays: seeded random zarr arrays written chunk by chunk."""

from __future__ import annotations

import itertools
import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import zarr

from outofcore.errors import InputError, OutputExistsError
from outofcore.journal.lease import check_not_held
from outofcore.journal.records import Journal
from outofcore.journal.targets import GENERATED_ATTRIBUTE, Occupant, check_replaceable
from outofcore.operands.dtypes import check_input_dtype
from outofcore.operands.random_values import random_values
from outofcore.runtime.cores import usable_cores
from outofcore.storage.locations import Location, locate
from outofcore.storage.stored_arrays import WRITE_CONFIG, shape_text
from outofcore.storage.stores import zarr_options
from outofcore.storage.writing import disk_usage_of


def random_array(
    path: str | os.PathLike,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    dtype: str = "float32",
    *,
    seed: int = 0,
    overwrite: bool = False,
    threads: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> zarr.Array:
    """Write a ``shape`` array of random values to a new zarr array.

    Floats are standard normal (complex: real and imaginary parts each);
    integers uniform over the dtype's whole range.  Each chunk draws from its
    own generator seeded with ``(seed, *index)`` (the chunk's index, ``(seed, i, j)``
    for a matrix), so the values depend only on the seed, shape and chunks, never on
    the order chunks are written in; memory use is a few chunks.  Any number of
    dimensions from 1 (a vector, a stack of matrices).  ``path`` may be a URL opened
    with fsspec ``storage_options`` (:mod:`outofcore.storage.stores`).
    """
    shape, chunks = tuple(shape), tuple(chunks)
    if not shape or not all(_size_ok(size) for size in shape):
        raise InputError(
            f"shape {shape}: need one or more dimensions, each >= 1 (a whole number up to 2**63-1)"
        )
    if len(chunks) != len(shape) or not all(_size_ok(size) for size in chunks):
        raise InputError(
            f"chunks {chunks}: need one chunk size >= 1 (a whole number up to 2**63-1) for "
            f"each of the {len(shape)} dimensions of shape {shape}"
        )
    check_seed(seed)
    if threads is not None and not (_whole(threads) and 1 <= threads <= MAX_THREADS):
        raise InputError(
            f"threads = {threads!r}: need None or a whole number from 1 to {MAX_THREADS}"
        )
    np_dtype = check_input_dtype(dtype, f"random array {os.fspath(path)!r}")
    where = locate(path, storage_options)  # with the options that open it, once
    # Only an array outofcore made is replaced (never a folder, a group or another's array),
    # and only when nothing inside it is another's: its own keys are deleted, one at a time.
    # Checked first: a place no array can be (/proc, an archive) is named as such.
    occupant = check_replaceable(where, deep=overwrite)
    workers = threads or usable_cores()
    check_room(where, shape, chunks, np_dtype, workers)
    clear_own_array(where, occupant, overwrite)
    array = zarr.create_array(
        where.target,
        shape=shape,
        chunks=chunks,
        dtype=np_dtype,
        overwrite=False,
        attributes={
            GENERATED_ATTRIBUTE: {"seed": seed, "shape": list(shape), "chunks": list(chunks)}
        },
        config=WRITE_CONFIG,  # a chunk of zeros is written, never deleted (by pattern)
        **zarr_options(where),
    )
    grid = [range(0, extent, step) for extent, step in zip(shape, chunks, strict=True)]

    def write_chunk(origin: tuple[int, ...]) -> None:
        region = tuple(
            slice(o, min(o + c, n)) for o, c, n in zip(origin, chunks, shape, strict=True)
        )
        rng = np.random.default_rng((seed, *(o // c for o, c in zip(origin, chunks, strict=True))))
        array[region] = random_values(rng, tuple(s.stop - s.start for s in region), np_dtype)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(write_chunk, itertools.product(*grid)))
    return array


#: The largest seed taken (numpy takes larger ones; ``verify`` takes these).
MAX_SEED = 2**63 - 1
#: The most threads that write chunks at once.
MAX_THREADS = 1024


def check_seed(seed: object) -> int:
    """``seed`` if it is a whole number from 0 to :data:`MAX_SEED`.

    Raises
    ------
    InputError
        Naming the seed (numpy's own refusal of a negative one was a ValueError).
    """
    if not (_whole(seed) and 0 <= seed <= MAX_SEED):
        raise InputError(f"seed = {seed!r}: need a whole number from 0 to 2**63-1")
    return seed


def _whole(value: object) -> bool:
    """Whether ``value`` is an int (numpy's too), not a bool."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _size_ok(size: object) -> bool:
    """Whether ``size`` is a whole number from 1 to 2**63-1 (zarr's and numpy's largest)."""
    return _whole(size) and 1 <= size <= MAX_SEED


def clear_own_array(where: Location, occupant: Occupant, overwrite: bool) -> None:
    """Make room for a new array at ``where``, where :func:`check_replaceable` found
    ``occupant``: nothing to do for nothing, else (with ``overwrite``) delete the keys of
    the array outofcore made there, once no live job holds it.

    Raises
    ------
    OutputExistsError
        When something is there and ``overwrite`` is False.
    """
    if occupant.kind == "nothing":
        return
    if not overwrite:
        raise OutputExistsError(f"{str(where)!r} already exists; pass overwrite=True to replace it")
    journal = Journal.for_output(where)
    check_not_held(journal, str(where))
    journal.clear_output()


#: Bytes of memory a chunk being written takes, per byte of its dtype: the values drawn
#: (float64 for float64 and complex128, else float32), their conversion, the encoded copy.
CHUNK_COPIES = 3


def check_room(
    where, shape: tuple[int, ...], chunks: tuple[int, ...], dtype: np.dtype, threads: int
) -> None:
    """Refuse, before anything is written, an array this machine cannot hold or make.

    The chunks written at once (``threads`` of them, :data:`CHUNK_COPIES` copies each)
    must fit in the available memory; on a local disk the array (random values do not
    compress) must fit in the free space of the folder it goes to.

    Raises
    ------
    InputError
        Naming the bytes needed and the bytes there are.
    """
    from dask.utils import format_bytes  # noqa: PLC0415

    itemsize = np.dtype(dtype).itemsize
    chunk = math.prod(min(c, n) for c, n in zip(chunks, shape, strict=True)) * itemsize
    import psutil  # noqa: PLC0415

    available = psutil.virtual_memory().available
    if CHUNK_COPIES * chunk * threads > available:
        raise InputError(
            f"chunks {shape_text(chunks)} of {np.dtype(dtype)} are {format_bytes(chunk)} "
            f"each; writing {threads} at once needs about "
            f"{format_bytes(CHUNK_COPIES * chunk * threads)} of memory and "
            f"{format_bytes(available)} is available: use smaller chunks or fewer threads"
        )
    if not where.is_local:
        return
    total = math.prod(shape) * itemsize
    folder, free, _ = disk_usage_of(where.path)
    if total > free:
        raise InputError(
            f"a {shape_text(shape)} array of {np.dtype(dtype)} is {format_bytes(total)} "
            f"(random values do not compress) and {folder!r} has {format_bytes(free)} free"
        )

"""A stored zarr array as outofcore names it, compares it and writes through it.

Where an array lives, for messages (:func:`describe`) and job records
(:func:`location_of`); whether two are one (:func:`same_array`); the settings every
array outofcore writes carries (:data:`WRITE_CONFIG`).  Storage, journal and jobs
name arrays through this module, without the operand resolver above it.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

import numpy as np
import zarr
from zarr.storage import FsspecStore, LocalStore, MemoryStore

from outofcore.errors import InputError
from outofcore.storage.locations import locate
from outofcore.storage.stores import url_of


class Parts(Protocol):
    """Arrays read as one (:class:`outofcore.operands.joined.Joined`)."""

    arrays: tuple[zarr.Array, ...]


def describe(array: zarr.Array | Parts) -> str:
    """Where an array lives, for messages: its store URL (absolute for local files) and
    path (of each part of a :class:`~outofcore.operands.joined.Joined`, joined by ``+``)."""
    if not isinstance(array, zarr.Array):  # joined parts
        return " + ".join(describe(part) for part in array.arrays)
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

    Kept in job records (:func:`outofcore.journal.identity.describe_input`); identity checks
    compare :class:`outofcore.storage.locations.Location` objects (:func:`same_array`).
    """
    if isinstance(array.store, MemoryStore):
        return None
    return locate(array).target


def same_array(x: zarr.Array, y: zarr.Array) -> bool:
    """Whether ``x`` and ``y`` are the same stored array (opened once or twice, spelled
    alike or not: :func:`outofcore.storage.locations.locate`)."""
    return locate(x) == locate(y)


#: zarr's settings of every array outofcore writes: a chunk equal to the fill value is
#: written, never deleted.  zarr's default deletes such a chunk, and on fsspec stores
#: (s3fs, gcsfs, adlfs) its delete expands ``[ ] * ?`` in the key as a pattern: a chunk
#: of ``run[1].zarr`` would delete that of ``run1.zarr`` (and a chunk reads the same
#: written or not: outofcore's local chunk files are written either way).
WRITE_CONFIG: dict[str, Any] = {"write_empty_chunks": True}


def for_writing(array: zarr.Array) -> zarr.Array:
    """``array`` with :data:`WRITE_CONFIG`: what outofcore writes through."""
    return array.with_config(WRITE_CONFIG)


def open_existing_output(target: zarr.Array, shape: tuple[int, ...], dtype: np.dtype) -> zarr.Array:
    """Check a ``zarr.Array`` given as the output: writable, of the product's shape and dtype;
    returned with :data:`WRITE_CONFIG`.

    Outputs named by a path or URL are checked by
    :func:`outofcore.journal.targets.check_replaceable`
    and created by :func:`create_output`.
    """
    if target.read_only:
        raise InputError(f"the output {describe(target)} was opened read-only")
    if tuple(target.shape) != tuple(shape) or np.dtype(target.dtype) != dtype:
        raise InputError(
            f"the output {describe(target)} is {target.shape} {target.dtype}, but "
            f"the product is {shape} {dtype}"
        )
    return for_writing(target)


def shape_text(shape: tuple[int, ...]) -> str:
    """A shape as messages write it: ``13x11``, ``7x13x11``, ``13`` (1-D), ``0-d``."""
    return "x".join(map(str, shape)) if shape else "0-d"

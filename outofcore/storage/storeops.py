"""Operations on an object store's keys that must be exact: conditional writes, deletes
of exactly the keys named, fast listings.

What must have one winner (the lease, a tile's record) is written with a
conditional write where the store offers one (:func:`conditional_writes`):

* through obstore (:mod:`outofcore.storage.obstores`), on S3 (an fsspec ``s3://`` URL,
  or a zarr ``ObjectStore``), GCS and Azure (a zarr ``ObjectStore``):
  ``put(mode="create")`` creates an object only when none is there, and
  ``put(mode={"e_tag": ..., "version": ...})`` replaces it only when it is
  unchanged since it was read; both atomic in the server, refusals told apart
  by their type (``AlreadyExistsError``, ``PreconditionError``);
* local disks (``LocalStore``): an exclusive hard link;
* zarr's ``MemoryStore``: its own atomic ``set_if_not_exists``.

Any other fsspec filesystem (``gs://``, ``az://``, HTTP, ...), and ``s3://``
without obstore, falls back to zarr's default ``set_if_not_exists``: check,
then write.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import glob
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import FsspecStore, LocalStore, MemoryStore, ObjectStore

from outofcore.errors import InputError
from outofcore.storage import obstores
from outofcore.storage.stores import fs_path, url_of

#: Listing requests kept in flight at once (one per row of tiles) by :func:`list_times`.
LISTING_CONCURRENCY = 32
#: Delete requests kept in flight at once by :func:`delete_exact`.
DELETES_IN_FLIGHT = 32

logger = logging.getLogger("outofcore")

# -- conditional writes ------------------------------------------------------------------


@dataclass(frozen=True)
class Version:
    """What a compare-and-swap write compares: the object's ETag and version as read."""

    e_tag: str | None
    #: A store's own version marker where it has one (GCS: the generation).
    version: str | None = None

    def mode(self) -> dict[str, str]:
        """obstore's ``put(mode=...)`` for this version."""
        return {k: v for k, v in (("e_tag", self.e_tag), ("version", self.version)) if v}


def conditional_writes(store: Store) -> str | None:
    """How ``store`` creates an object only if absent atomically, or None (check, then write)."""
    if isinstance(store, ObjectStore):
        kind = type(store.store).__name__
        swap = "" if kind not in obstores.NO_COMPARE_AND_SWAP else " (replacing: check, then write)"
        return f"obstore put(mode='create') on {kind}{swap}"
    if obstores.is_s3(store):
        if obstores.installed():
            return "obstore put(mode='create') on S3Store: If-None-Match"
        _warn_no_obstore()
        return None
    if isinstance(store, LocalStore):
        return "exclusive hard link"
    if isinstance(store, MemoryStore):
        return "MemoryStore.set_if_not_exists"
    return None


@functools.cache
def _warn_no_obstore() -> None:
    logger.warning(
        "obstore is not installed: the lease and tile records on s3:// are written "
        'check-then-write, not atomically; pip install "outofcore[s3]" adds it'
    )


async def put_if_absent(store: Store, key: str, data: bytes) -> bool | None:
    """Write ``data`` at ``key`` only when nothing is there.

    Returns True (written) or False (something was there) on stores with an
    atomic create (obstore: ``put(mode="create")``, refused with
    ``AlreadyExistsError``); None where it is not known (zarr's
    ``set_if_not_exists``: local disks and memory atomically, other stores
    check, then write).
    """
    handle = await obstores.handle_of(store)
    if handle is not None:
        from obstore import put  # noqa: PLC0415 (the s3 extra)
        from obstore.exceptions import AlreadyExistsError  # noqa: PLC0415

        if store.read_only:
            raise OSError(f"the store {store} is read-only")
        try:
            await obstores.call(put, handle.store, handle.path(key), data, mode="create")
        except AlreadyExistsError:  # also S3's 409: another create of this key in flight
            return False
        forget_listing(store, key)
        return True
    if obstores.is_s3(store):
        conditional_writes(store)  # warns once
    buffer = default_buffer_prototype().buffer.from_bytes(data)
    await store.set_if_not_exists(key, buffer)
    return None


async def get_versioned(store: Store, key: str) -> tuple[bytes | None, Version | None]:
    """The object at ``key`` and its version (ETag and version, read in the same request).

    The version is None on stores without compare-and-swap (:func:`put_if_unchanged`).
    """
    handle = await obstores.handle_of(store)
    if handle is not None:
        try:
            data, meta = await obstores.call(_get_with_meta, handle.store, handle.path(key))
        except FileNotFoundError:  # obstore's NotFoundError is one
            return None, None
        version = Version(meta["e_tag"], meta["version"])
        return data, (version if version.mode() and handle.compare_and_swap else None)
    buffer = await store.get(key, prototype=default_buffer_prototype())
    return (None if buffer is None else buffer.to_bytes()), None


def _get_with_meta(obstore_store: Any, path: str) -> tuple[bytes, Mapping[str, Any]]:
    """One object's bytes and its meta (ETag, version), from one obstore GET."""
    from obstore import get  # noqa: PLC0415 (the s3 extra)

    result = get(obstore_store, path)
    return bytes(result.bytes()), result.meta


async def put_if_unchanged(store: Store, key: str, data: bytes, version: Version) -> bool:
    """Replace the object at ``key`` only if it is still ``version``.

    Returns whether it was replaced: obstore's ``put(mode={"e_tag": ...,
    "version": ...})``, refused by type (``PreconditionError``; a key deleted
    since it was read, or a write of it in flight, too).  Only for versions
    :func:`get_versioned` returned.
    """
    handle = await obstores.handle_of(store)
    if handle is None or not handle.compare_and_swap:
        raise InputError(f"{store} has no compare-and-swap write")
    from obstore import put  # noqa: PLC0415 (the s3 extra)
    from obstore.exceptions import AlreadyExistsError, PreconditionError  # noqa: PLC0415

    try:
        await obstores.call(put, handle.store, handle.path(key), data, mode=version.mode())
    except (PreconditionError, AlreadyExistsError, FileNotFoundError):
        return False
    forget_listing(store, key)
    return True


# -- deleting exact keys -----------------------------------------------------------------


async def delete_exact(store: Store, keys: Iterable[str]) -> None:
    """Delete the objects at exactly ``keys`` (keys of ``store``), one request per key.

    A key is a name, never a pattern or a folder: ``run[1].zarr/zarr.json`` deletes
    that object and nothing else, on every store.  zarr's ``FsspecStore.delete``
    calls fsspec's ``rm``, which expands ``[ ] * ?`` as a glob (s3fs, gcsfs, adlfs):
    it would delete ``run1.zarr/zarr.json`` instead.  So deletes go

    * through obstore where it reaches the objects (``s3://`` with the ``s3`` extra,
      a zarr ``ObjectStore``): ``delete`` of one path, literal;
    * else, on an fsspec store, through the filesystem's ``_rm_file`` (s3fs: one
      ``DeleteObject``), which never expands;
    * else through the store's own ``delete`` (local disks, memory: literal).

    A key that is not there is no error.  :data:`DELETES_IN_FLIGHT` requests at once.

    Raises
    ------
    OSError
        When ``store`` is read-only, or the store refuses a delete.
    """
    keys = list(dict.fromkeys(keys))
    if not keys:
        return
    if store.read_only:
        raise OSError(f"the store {store} is read-only")
    handle = await obstores.handle_of(store)
    gate = asyncio.Semaphore(DELETES_IN_FLIGHT)

    async def delete(key: str) -> None:
        async with gate:
            if handle is not None:
                from obstore import delete as obstore_delete  # noqa: PLC0415 (the s3 extra)

                with contextlib.suppress(FileNotFoundError):  # obstore's NotFoundError is one
                    await obstores.call(obstore_delete, handle.store, handle.path(key))
                forget_listing(store, key)
            elif isinstance(store, FsspecStore):
                await _fsspec_delete(store, key)
            else:
                await store.delete(key)

    await asyncio.gather(*(delete(key) for key in keys))


async def _fsspec_delete(store: FsspecStore, key: str) -> None:
    """Delete the one object at ``key`` through the fsspec filesystem, never by pattern."""
    path = fs_path(store, key)
    try:
        await store.fs._rm_file(path)
    except FileNotFoundError:
        pass
    except NotImplementedError:  # a filesystem without a one-file delete
        if glob.has_magic(path):
            raise OSError(
                f"{url_of(store, key)}: this filesystem deletes only by pattern, and the key "
                "holds [ ] * or ?, which would match other objects: nothing deleted"
            ) from None
        await store.delete(key)
    forget_listing(store, key)


def forget_listing(store: Store, key: str) -> None:
    """Drop what an fsspec store's filesystem remembers of listings on the way to ``key``
    (s3fs keeps them: a write or delete not made through it would leave them stale)."""
    if isinstance(store, FsspecStore):
        store.fs.invalidate_cache(fs_path(store, key))


# -- listings ----------------------------------------------------------------------------


async def list_times(
    store: Store, folder: str, prefixes: Iterable[str] = ("",)
) -> dict[str, float]:
    """Every object under ``folder`` whose name starts with one of ``prefixes``, with its
    last-modified time (seconds since the epoch): names relative to ``folder``.

    Listings only, no object is read: on an fsspec store one paged listing per
    prefix (1000 names a request on S3), ``LISTING_CONCURRENCY`` of them in
    flight; on a local disk one ``scandir``; on a zarr ``ObjectStore`` one obstore
    listing of the folder.  Other stores: NaN as the time.
    """
    folder = folder.strip("/")
    if isinstance(store, LocalStore):
        return await asyncio.to_thread(_local_times, os.path.join(os.fspath(store.root), folder))
    if isinstance(store, FsspecStore):
        root = fs_path(store, folder)
        limit = asyncio.Semaphore(LISTING_CONCURRENCY)

        async def one(prefix: str) -> dict[str, Any]:
            async with limit:
                try:
                    return await store.fs._find(root, detail=True, prefix=prefix)
                except FileNotFoundError:
                    return {}

        found: dict[str, float] = {}
        for listing in await asyncio.gather(*(one(prefix) for prefix in set(prefixes))):
            for name, info in listing.items():
                found[name[len(root) :].lstrip("/")] = _modified(info)
        return found
    if isinstance(store, ObjectStore):
        return await _obstore_times(store, folder, tuple(set(prefixes)))
    keys = [key async for key in store.list_prefix(f"{folder}/")]
    return {key[len(folder) + 1 :]: float("nan") for key in keys}


async def _obstore_times(store: ObjectStore, folder: str, prefixes: tuple[str, ...]) -> dict:
    """:func:`list_times` on a zarr ``ObjectStore``: one paged obstore listing of ``folder``
    (its prefixes match whole path segments, so the names are filtered here)."""
    return await obstores.call(_obstore_times_now, store.store, folder, prefixes)


def _obstore_times_now(obstore_store: Any, folder: str, prefixes: tuple[str, ...]) -> dict:
    import obstore  # noqa: PLC0415 (an ObjectStore wraps an obstore store)

    found: dict[str, float] = {}
    for page in obstore.list(obstore_store, folder or None, chunk_size=1000):
        for meta in page:
            name = meta["path"][len(folder) :].lstrip("/")
            if name.startswith(prefixes):
                found[name] = meta["last_modified"].timestamp()
    return found


def _local_times(path: str) -> dict[str, float]:
    try:
        with os.scandir(path) as entries:
            return {e.name: e.stat().st_mtime for e in entries if e.is_file()}
    except FileNotFoundError:
        return {}


def _modified(info: Mapping[str, Any]) -> float:
    for field in ("LastModified", "last_modified", "mtime", "updated", "created"):
        value = info.get(field)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, int | float):
            return float(value)
    return float("nan")

"""Object stores: URLs opened with storage options, conditional writes, fast listings.

Remote arrays and journals are fsspec URLs (``s3://bucket/c.zarr``) opened
through zarr's ``FsspecStore``.  Credentials and the endpoint come as users
pass them to fsspec: ``storage_options`` (``{"key": ..., "secret": ...,
"endpoint_url": ...}`` for s3fs), or the environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ...), which s3fs reads
itself.  An array opened with storage options keeps them: Dask pickles the
store with its filesystem's options, so worker tasks open the same store.

What must have one winner (the lease, a tile's record) is written with a
conditional write where the store offers one (:func:`conditional_writes`):

* through obstore (:mod:`outofcore.obstores`), on S3 (an fsspec ``s3://`` URL,
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
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import zarr
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import FsspecStore, LocalStore, MemoryStore, ObjectStore

from outofcore import config, deadlines, endpoints, obstores
from outofcore.errors import InputError
from scheduler.plan import DEFAULT_IO_CONCURRENCY

#: Defaults under a user's options for ``s3://``: s3fs's ``max_concurrency > 1`` makes it
#: send a HEAD before every whole-object GET (to split objects over 50 MiB into ranged
#: reads), doubling the requests of a chunk read; chunks are far smaller.
S3_DEFAULTS: dict[str, Any] = {"max_concurrency": 1}
#: Listing requests kept in flight at once (one per row of tiles) by :func:`list_times`.
LISTING_CONCURRENCY = 32
#: Delete requests kept in flight at once by :func:`delete_exact`.
DELETES_IN_FLIGHT = 32

logger = logging.getLogger("outofcore")


def is_remote(location: str) -> bool:
    """Whether ``location`` is the URL of a store other than this machine's file system."""
    return "://" in location and not location.startswith("file://")


#: ``store_errors``' storage options when none were given (the endpoint is not asked).
_UNSET: Any = object()
#: Errors that say the endpoint did not answer: asking it again whether it is S3 would wait.
_NO_ANSWER = ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError")


@contextlib.contextmanager
def store_errors(url: str, storage_options: Mapping[str, Any] | None = _UNSET) -> Iterator[None]:
    """Turn an object store's refusal while opening ``url`` into an :class:`InputError`
    naming the URL and what to do: no credentials, an endpoint that does not answer (or
    not within its deadline), a bucket that does not exist, access denied.  Given the
    ``storage_options`` (None: none), a failure that could mean the endpoint is not an S3
    API at all (a web server's 404s read as a missing bucket or array) asks the endpoint
    once (:func:`outofcore.endpoints.not_s3`) and says so.  Other errors pass through."""
    try:
        yield
    except Exception as exc:
        if storage_options is not _UNSET and _could_be_foreign(exc):
            foreign = endpoints.not_s3(url, storage_options)
            if foreign is not None:
                raise InputError(foreign) from None
        message = None if isinstance(exc, InputError) else _store_refusal(url, exc)
        if message is None:
            raise
        raise InputError(message) from None


def _could_be_foreign(exc: BaseException) -> bool:
    """Whether ``exc`` may come from an endpoint that is not S3 (it answered something)."""
    if isinstance(exc, deadlines.StoreDeadlineError) or type(exc).__name__ in _NO_ANSWER:
        return False
    return not type(exc).__name__.endswith("CredentialsError")


def _store_refusal(url: str, exc: BaseException) -> str | None:
    """What the object store's error ``exc`` means for ``url``, or None when it is not one."""
    name = type(exc).__name__
    text = " ".join(str(exc).split())
    bucket = url.split("://", 1)[-1].split("/", 1)[0]
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return (
            f"{url}: no credentials for the object store ({text}); pass them as storage "
            "options (--storage-option key=... --storage-option secret=..., or "
            "storage_options={'key': ..., 'secret': ...}) or set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY"
        )
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError"):
        return f"{url}: the object store does not answer ({text}); check its endpoint_url"
    if isinstance(exc, deadlines.StoreDeadlineError) or name == "ReadTimeoutError":
        return f"{url}: the object store does not answer in time: {text}"
    if isinstance(exc, FileNotFoundError) and (
        "bucket does not exist" in text.lower() or "NoSuchBucket" in text
    ):
        return f"{url}: the bucket {bucket!r} does not exist"
    if isinstance(exc, PermissionError) or name in ("InvalidAccessKeyId", "SignatureDoesNotMatch"):
        return f"{url}: the object store refused access ({name}: {text}); check the credentials"
    return None


def check_storage_options(value: Any) -> dict[str, Any] | None:
    """``value`` as a dict of fsspec storage options (None stays None).

    Raises
    ------
    InputError
        When it is not a mapping with text keys.
    """
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InputError(
            f"storage_options = {value!r}: need a dict of fsspec options with text keys, "
            "e.g. {'endpoint_url': 'http://127.0.0.1:9000', 'key': ..., 'secret': ...}"
        )
    return dict(value)


def parse_storage_options(pairs: Iterable[str]) -> dict[str, Any] | None:
    """Storage options from ``KEY=VALUE`` texts (``--storage-option``); None when none.

    A dotted key nests (``client_kwargs.region_name=us-east-1``); a value
    that reads as JSON (``true``, ``10``, ``{"a": 1}``) is that value, any
    other value is text.
    """
    options: dict[str, Any] = {}
    for text in pairs:
        key, sep, raw = text.partition("=")
        if not sep or not key.strip():
            raise InputError(
                f"--storage-option {text!r}: need KEY=VALUE, e.g. endpoint_url=http://host:9000"
            )
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        *parents, leaf = key.strip().split(".")
        node = options
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise InputError(f"--storage-option {text!r}: {part!r} is already a value")
            node = child
        node[leaf] = value
    return options or None


def with_defaults(location: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``storage_options`` over this module's defaults for ``location``'s protocol; for
    ``s3://`` with the deadlines of :mod:`outofcore.deadlines` under the user's
    ``config_kwargs``."""
    if location.split("://", 1)[0] not in obstores.S3_PROTOCOLS:
        return dict(storage_options or {})
    return deadlines.s3fs_options({**S3_DEFAULTS, **(storage_options or {})})


def zarr_options(location: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Keyword arguments that give zarr's open and create functions ``storage_options``
    (over :data:`S3_DEFAULTS` for ``s3://``).

    Empty for a local path (zarr refuses storage options there).
    """
    options = with_defaults(location, storage_options) if is_remote(location) else {}
    return {"storage_options": options} if options else {}


def fsspec_store(
    location: str, storage_options: Mapping[str, Any] | None = None, read_only: bool = False
) -> FsspecStore:
    """The zarr store of the URL ``location``."""
    return FsspecStore.from_url(
        location, storage_options=with_defaults(location, storage_options), read_only=read_only
    )


def url_of(store: FsspecStore, path: str = "") -> str:
    """The URL of ``path`` in an fsspec store, e.g. ``s3://bucket/c.zarr``."""
    return store.fs.unstrip_protocol(_fs_path(store, path))


def _fs_path(store: FsspecStore, key: str) -> str:
    """The filesystem path of ``key`` in an fsspec store (``bucket/c.zarr/key``)."""
    return "/".join(part for part in (store.path.rstrip("/"), key.strip("/")) if part)


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
    path = _fs_path(store, key)
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
        store.fs.invalidate_cache(_fs_path(store, key))


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
        root = _fs_path(store, folder)
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


# -- reads ---------------------------------------------------------------------------------


#: Bytes one chunk request in flight to an object store holds beside the chunk's own
#: buffers: the client's request, the response object and its body's read buffers.
#: Measured (tests/outofcore/test_memory.py, s3fs on moto, 10 KB chunks): about 36 KB per
#: request beyond its chunk's two buffers.
REQUEST_BYTES = 64 * 1024


def read_concurrency(arrays: Iterable[zarr.Array]) -> int:
    """Chunks a task reads at once: the plan's default on local disks; with any input
    on a remote store, the setting ``remote-concurrency`` (``$OUTOFCORE_REMOTE_CONCURRENCY``,
    default 16) requests in flight, each with its chunk's buffers in the memory contract."""
    if any(_remote(array) for array in arrays):
        return int(config.number("remote-concurrency", integer=True, positive=True))
    return DEFAULT_IO_CONCURRENCY


def request_bytes(arrays: Iterable[zarr.Array]) -> int:
    """What each request in flight holds beside its chunk (:data:`REQUEST_BYTES`) when any
    of ``arrays`` is on a remote store; 0 for local files, read with no request objects."""
    return REQUEST_BYTES if any(_remote(array) for array in arrays) else 0


def _remote(array: zarr.Array) -> bool:
    """Whether ``array`` is read through requests: an fsspec store other than local files,
    or a zarr ``ObjectStore`` on a remote obstore store."""
    store = array.store
    if isinstance(store, FsspecStore):
        return not obstores.protocols(store) & {"file", "local"}
    return obstores.is_remote(store)

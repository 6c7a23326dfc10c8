"""Object stores: the store of a location, opened with its storage options.

Remote arrays and journals are fsspec URLs (``s3://bucket/c.zarr``) opened
through zarr's ``FsspecStore``.  Credentials and the endpoint come as users
pass them to fsspec: ``storage_options`` (``{"key": ..., "secret": ...,
"endpoint_url": ...}`` for s3fs), or the environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ...), which s3fs reads
itself.  The options are resolved with the location they open, once
(:func:`outofcore.storage.locations.locate`), and travel in it
(:attr:`outofcore.storage.locations.Location.options`): everything here opens a
:class:`~outofcore.storage.locations.Location`.  An array opened with storage options
keeps them: Dask pickles the store with its filesystem's options, so worker
tasks open the same store.  Conditional writes, exact deletes and listings of
an opened store are in :mod:`outofcore.storage.storeops`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import zarr
from zarr.abc.store import RangeByteRequest, Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import FsspecStore, LocalStore

from outofcore import config
from outofcore.errors import InputError
from outofcore.planner.plan import DEFAULT_IO_CONCURRENCY
from outofcore.storage import deadlines, endpoints, obstores
from outofcore.storage.documents import (
    MAX_DOCUMENT_BYTES,
    DocumentError,
    check_size,
    load_document,
    open_regular_file,
)
from outofcore.storage.locations import Location

#: Defaults under a user's options for ``s3://``: s3fs's ``max_concurrency > 1`` makes it
#: send a HEAD before every whole-object GET (to split objects over 50 MiB into ranged
#: reads), doubling the requests of a chunk read; chunks are far smaller.
S3_DEFAULTS: dict[str, Any] = {"max_concurrency": 1}


class MissingBucketError(InputError):
    """An object store says the bucket of a location is not there: or its endpoint is not
    an S3 API at all, whose 404 pages read the same (:func:`store_errors` asks)."""


#: Errors that say the endpoint did not answer: asking it again whether it is S3 would wait.
_NO_ANSWER = ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError")


@contextlib.contextmanager
def store_errors(url: str, location: Location | None = None) -> Iterator[None]:
    """Turn an object store's refusal while opening ``url`` into an :class:`InputError`
    naming the URL and what to do: no credentials, an endpoint that does not answer (or
    not within its deadline), a bucket that does not exist, access denied.  Given the
    ``location`` being opened (with its options), a failure that could mean the endpoint
    is not an S3 API at all (a web server's 404s read as a missing bucket or array) asks
    the endpoint once (:func:`outofcore.storage.endpoints.not_s3`) and says so.  Other errors
    pass through."""
    try:
        yield
    except Exception as exc:
        if location is not None and _could_be_foreign(exc):
            foreign = endpoints.not_s3(url, location)
            if foreign is not None:
                raise InputError(foreign) from None
        message = None if isinstance(exc, InputError) else _store_refusal(url, exc)
        if message is None:
            raise
        raise InputError(message) from None


def _could_be_foreign(exc: BaseException) -> bool:
    """Whether ``exc`` may come from an endpoint that is not S3 (it answered something);
    not outofcore's own refusals (a metadata document too large or too deep)."""
    if isinstance(exc, MissingBucketError):
        return True
    if (
        isinstance(exc, InputError | deadlines.StoreDeadlineError)
        or type(exc).__name__ in _NO_ANSWER
    ):
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


def with_defaults(location: Location) -> dict[str, Any]:
    """The options of ``location`` over this module's defaults for its protocol; for
    ``s3://`` with the deadlines of :mod:`outofcore.storage.deadlines` under the user's
    ``config_kwargs`` (:func:`s3fs_options`)."""
    if location.protocol not in obstores.S3_PROTOCOLS:
        return dict(location.options or {})
    return s3fs_options({**S3_DEFAULTS, **(location.options or {})})


def s3fs_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """fsspec ``options`` for s3fs with this process's deadlines
    (:class:`outofcore.storage.deadlines.Deadlines`) under the user's ``config_kwargs`` (each key
    the user gave wins), and an HTTP session that gives up at the deadline
    (:class:`outofcore.storage.s3session.DeadlineSession`)."""
    limits = deadlines.Deadlines.from_config()
    ours: dict[str, Any] = {
        "connect_timeout": limits.connect,
        "read_timeout": limits.read,
        "retries": {"max_attempts": limits.attempts, "mode": "standard"},
    }
    try:
        from outofcore.storage.s3session import DeadlineSession  # noqa: PLC0415 (aiobotocore: s3 extra)
    except ImportError:  # no aiobotocore: s3fs cannot be used either
        pass
    else:
        ours["http_session_cls"] = DeadlineSession
    given = options.get("config_kwargs")
    mine = {**ours, **given} if isinstance(given, Mapping) else ours
    return {**options, "config_kwargs": mine}


def zarr_options(location: Location) -> dict[str, Any]:
    """Keyword arguments that give zarr's open and create functions the options of
    ``location`` (over :data:`S3_DEFAULTS` for ``s3://``).

    Empty for a local path (zarr refuses storage options there).
    """
    options = {} if location.is_local else with_defaults(location)
    return {"storage_options": options} if options else {}


def fsspec_store(location: Location, read_only: bool = False) -> FsspecStore:
    """The zarr store of the URL of ``location``, opened with its options."""
    return FsspecStore.from_url(
        location.target, storage_options=with_defaults(location), read_only=read_only
    )


def open_store(location: Location, read_only: bool = False) -> Store:
    """The zarr store of ``location``: a ``LocalStore`` on this machine's disks, else
    :func:`fsspec_store`."""
    if location.is_local:
        return LocalStore(location.path, read_only=read_only)
    return fsspec_store(location, read_only)


def url_of(store: FsspecStore, path: str = "") -> str:
    """The URL of ``path`` in an fsspec store, e.g. ``s3://bucket/c.zarr``."""
    return store.fs.unstrip_protocol(fs_path(store, path))


def fs_path(store: FsspecStore, key: str) -> str:
    """The filesystem path of ``key`` in an fsspec store (``bucket/c.zarr/key``)."""
    return "/".join(part for part in (store.path.rstrip("/"), key.strip("/")) if part)


# -- metadata --------------------------------------------------------------------------------

#: zarr's metadata documents at the path of an array or group: format 3's, then format 2's.
METADATA_DOCUMENTS = ("zarr.json", ".zarray", ".zattrs", ".zgroup")


def check_metadata(location: Location, what: str) -> None:
    """Read the metadata documents at ``location`` within a document's bounds before zarr
    reads them (:func:`outofcore.storage.documents.load_document`: a size cap checked before the
    bytes are read, a depth cap before they are parsed; zarr itself writes ``NaN`` into
    attributes, so the constants are taken).  Documents that are not there are skipped:
    zarr says what is missing.

    Parameters
    ----------
    location
        An array's (or group's) location, opened with its options.
    what
        How the error names it, e.g. ``"input A"``.

    Raises
    ------
    DocumentError
        Naming ``what`` and the document: too large (not read), nested too deep, not
        JSON, or (on this machine's disks) not a regular file.
    """
    where = (location.name or str(location)).rstrip("/")
    found = (
        _local_metadata(location, what, where)
        if location.is_local
        else _remote_metadata(location, what, where)
    )
    for name, data in found.items():
        document = load_document(data, f"{what}: {where}/{name}", allow_constants=True)
        check_grid_fields(document, name, f"{what}: {where}/{name}")


def check_grid_fields(document: Any, name: str, what: str) -> None:
    """Refuse an array's metadata ``document`` (the document ``name``: ``zarr.json`` or
    ``.zarray``) whose shape or chunk shapes are not lists of whole numbers (``NaN``, a
    string, a bool, ``1.5``), or are negative (a shape) or zero (a chunk), or do not have
    as many axes as the shape: zarr's own parser fails on them with a ``TypeError``.

    Raises
    ------
    DocumentError
        In one line naming ``what`` (the document), the field and the value found.
    """
    if not isinstance(document, dict) or name not in ("zarr.json", ".zarray"):
        return
    if name == "zarr.json" and document.get("node_type") != "array":
        return
    shape = _whole_numbers(document.get("shape"), 0, None, what, "'shape'")
    if name == ".zarray":
        _whole_numbers(document.get("chunks"), 1, len(shape), what, "'chunks'")
        return
    grid = document.get("chunk_grid")
    configuration = grid.get("configuration") if isinstance(grid, dict) else None
    if not isinstance(configuration, dict) or grid.get("name") != "regular":
        return  # another grid (zarr names what it does not know)
    field = "'chunk_grid' (its chunk_shape)"
    _whole_numbers(configuration.get("chunk_shape"), 1, len(shape), what, field)
    for codec in document.get("codecs") or ():
        inner = codec.get("configuration") if isinstance(codec, dict) else None
        if codec.get("name") == "sharding_indexed" and isinstance(inner, dict):
            field = "'codecs' (the sharding codec's chunk_shape)"
            _whole_numbers(inner.get("chunk_shape"), 1, len(shape), what, field)


def _whole_numbers(value: Any, least: int, axes: int | None, what: str, field: str) -> list[int]:
    """``value`` when it is a list of ints (not bools) of at least ``least`` each (and
    ``axes`` of them, when given); else a :class:`DocumentError` naming the field."""
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    kinds = isinstance(value, list) and all(
        isinstance(n, int) and not isinstance(n, bool) for n in value
    )
    if not kinds:
        raise DocumentError(f"{what}: field {field} is {shown}, not a list of whole numbers")
    if any(n < least for n in value):
        raise DocumentError(f"{what}: field {field} is {shown}: each must be {least} or more")
    if axes is not None and len(value) != axes:
        raise DocumentError(
            f"{what}: field {field} is {shown}: {len(value)} axes, the shape has {axes}"
        )
    return value


def _local_metadata(location: Location, what: str, where: str) -> dict[str, bytes]:
    """The metadata documents in a local folder, each refused by its size before it is
    read, and refused unless a regular file (a pipe would block, a device never end:
    :func:`outofcore.storage.documents.open_regular_file`, the one rule for what outofcore
    opens on a local disk; an input's document may be a link); a folder of the name is
    skipped, as zarr's ``LocalStore`` skips it."""
    found = {}
    for name in METADATA_DOCUMENTS:
        path = os.path.join(location.path, name)
        try:
            if stat.S_ISDIR(os.stat(path).st_mode):
                continue
        except (FileNotFoundError, NotADirectoryError):
            continue
        label = f"{what}: {where}/{name}"
        opened = open_regular_file(path, label, follow_links=True)
        if opened is None:  # gone meanwhile
            continue
        with opened:
            size = os.fstat(opened.fileno()).st_size
            check_size(size, label)  # before a byte is read
            data = opened.read(size + 1)  # a read of its size: not of the cap's
        if len(data) > size:
            raise DocumentError(
                f"{label} grew while it was read ({size} bytes when asked); it is not read"
            )
        found[name] = data
    return found


def _remote_metadata(location: Location, what: str, where: str) -> dict[str, bytes]:
    """The metadata documents of an object store's location, read at once in ranged reads
    of one byte over the cap; one that fills it is refused with its whole size.  A web
    server (``http://``) may answer a ranged read with the whole object, so there each
    document's size is asked first (``HEAD``) and one over the cap is not read."""
    store = fsspec_store(location, read_only=True)
    cap = RangeByteRequest(0, MAX_DOCUMENT_BYTES + 1)
    prototype = default_buffer_prototype()

    async def read(name: str) -> Any:
        if location.read_only:
            try:
                size = await store.getsize(name)
            except FileNotFoundError:
                return None
            if size is not None:  # a server that does not tell: the ranged read
                check_size(size, f"{what}: {where}/{name}")
        return await store.get(name, prototype, byte_range=cap)

    async def read_all() -> list[Any]:
        return await asyncio.gather(*(read(name) for name in METADATA_DOCUMENTS))

    found = {}
    for name, buffer in zip(METADATA_DOCUMENTS, sync(read_all()), strict=True):
        if buffer is None:
            continue
        data = buffer.to_bytes()
        if len(data) > MAX_DOCUMENT_BYTES:
            size = max(len(data), sync(store.getsize(name)))
            check_size(size, f"{what}: {where}/{name}")
        found[name] = data
    return found


# -- reads ---------------------------------------------------------------------------------


#: Bytes one chunk request in flight to an object store holds beside the chunk's own
#: buffers: the client's request, the response object and its body's read buffers.
#: Measured (tests/outofcore/jobs/test_memory.py, s3fs on moto, 10 KB chunks): about 36 KB per
#: request beyond its chunk's two buffers.
REQUEST_BYTES = 64 * 1024


def read_concurrency(arrays: Iterable[zarr.Array], local: int = DEFAULT_IO_CONCURRENCY) -> int:
    """Chunks a task reads at once: ``local`` on local disks (its decode threads,
    :func:`outofcore.planner.memory.decode_threads`); with any input on a remote store, the
    setting ``remote-concurrency`` (``$OUTOFCORE_REMOTE_CONCURRENCY``, default 16)
    requests in flight, each with its chunk's buffers in the memory contract."""
    if any(_remote(array) for array in arrays):
        return int(config.number("remote-concurrency", integer=True, positive=True))
    return local


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

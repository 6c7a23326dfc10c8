"""Where an array lives, compared as a location rather than a spelling.

Every array a job names (inputs, addend, output) is resolved once to a
:class:`Location`: a protocol, a root and a normalised path.  ``a.zarr``,
``./a.zarr/``, ``file:///home/me/a.zarr``, ``../me/a.zarr`` and a symbolic
link to it are one location; ``s3://bucket//a.zarr/`` and ``s3a://bucket/a.zarr``
are one location on the same endpoint.  Identity checks (an output that is an
input, an addend that is an input) compare locations, and a location is what
zarr is given to open (:attr:`Location.target`): a ``file://`` URL is opened as
the local path it names, so local outputs always get zarr's ``LocalStore``.

A location carries what it was resolved with: the fsspec options of its URL
(:attr:`Location.options`: credentials, endpoint), which open its store
(:mod:`outofcore.storage.stores`), and the spelling it was given (:attr:`Location.name`,
for messages).  Neither is compared; the options are never shown (no ``repr``,
message, log or journal holds them).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import fsspec
import zarr
from zarr.storage import FsspecStore, LocalStore, MemoryStore

from outofcore.errors import InputError

#: The extra of outofcore that installs the filesystem package of a protocol.
EXTRAS = {"s3": "pip install 'outofcore[s3]' (s3fs)"}
#: Protocols that name this machine's file system.
LOCAL_PROTOCOLS = ("file", "local")
#: Protocols whose URL is the whole address (read-only, through fsspec's HTTP filesystem).
WEB_PROTOCOLS = ("http", "https")
#: Protocols of s3fs, and what it cuts from a key as a version (``key?versionId=...``).
S3_PROTOCOLS, S3_VERSION = ("s3", "s3a"), "?versionId="


@dataclass(frozen=True)
class Location:
    """A canonical location: ``protocol`` (``file`` for this machine's disks, ``memory``
    for an in-process store, else fsspec's canonical name, e.g. ``s3``), ``root`` (the
    endpoint of an object store, the store's identity in memory, ``""`` on disk) and
    ``path`` (absolute with symbolic links resolved on disk; ``bucket/key`` elsewhere;
    never a trailing slash); ``options``: the fsspec options that open it (never shown,
    compared or written); ``name``: how it was given (for messages; ``""``: not given)."""

    protocol: str
    root: str
    path: str
    options: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)
    name: str = field(default="", compare=False)

    @property
    def is_local(self) -> bool:
        """Whether this is a path on this machine's file system."""
        return self.protocol == "file"

    @property
    def read_only(self) -> bool:
        """Whether nothing can be written here (``http://`` and ``https://`` are read only)."""
        return self.protocol in WEB_PROTOCOLS

    @property
    def target(self) -> str:
        """What to hand zarr or fsspec to open it: the path on disk, else the URL."""
        return self.path if self.is_local else f"{self.protocol}://{self.path}"

    def __str__(self) -> str:
        if self.is_local:
            return self.path
        where = f"{self.protocol}://{self.path}"
        return f"{where} (endpoint {self.root})" if self.root else where

    def contains(self, other: Location) -> bool:
        """Whether ``other`` is this location or lies inside it."""
        if (self.protocol, self.root) != (other.protocol, other.root):
            return False
        return other.path == self.path or other.path.startswith(self.path.rstrip("/") + "/")

    def overlaps(self, other: Location) -> bool:
        """Whether one of the two is, or lies inside, the other."""
        return self.contains(other) or other.contains(self)


def locate(target: zarr.Array | str | os.PathLike, storage_options: Any = None) -> Location:
    """The canonical location of an array, or of a path or URL naming one.

    ``storage_options`` (fsspec options of a URL: credentials, endpoint) give an object
    store's endpoint, and the location keeps them to open its store with
    (:attr:`Location.options`).

    Raises
    ------
    InputError
        For a URL whose protocol fsspec does not know, or whose filesystem package
        is not installed (naming the package and outofcore's extra).
    """
    if isinstance(target, zarr.Array):
        return _of_array(target)
    text = os.fspath(target)
    options = dict(storage_options) if storage_options else None
    where = _resolve(text, _endpoint(options))
    return replace(where, options=options, name=text)


def _resolve(text: str, endpoint: str) -> Location:
    """The location of the path or URL ``text`` (:func:`locate`) on ``endpoint`` (an
    object store's), without its options."""
    protocol, _ = fsspec.core.split_protocol(text)
    if protocol is None:
        return _local(fsspec.get_filesystem_class("file")._strip_protocol(text))
    if protocol in WEB_PROTOCOLS:  # fsspec keeps the whole URL as an http "path"
        _filesystem_class(protocol, text)  # aiohttp may be missing
        return Location(protocol, "", _clean(text.split("://", 1)[1]))
    cls = _filesystem_class(protocol, text)
    canonical = cls.protocol if isinstance(cls.protocol, str) else cls.protocol[0]
    if canonical in LOCAL_PROTOCOLS:
        return _local(_local_url_path(text))
    path = _clean(cls._strip_protocol(text))
    if canonical in S3_PROTOCOLS and S3_VERSION in path:
        raise InputError(
            f"{text!r}: s3fs reads {S3_VERSION!r} in a key as an object version and "
            "drops the rest, so it would read and write other objects: choose a name "
            "without it"
        )
    return Location(canonical, endpoint, path)


def _local_url_path(url: str) -> str:
    """The path a ``file://`` URL names on this machine (RFC 8089: ``file:///p`` or
    ``file://localhost/p``; fsspec would read ``localhost`` as a relative folder).

    Raises
    ------
    InputError
        For a URL naming another host, or a relative path after ``file://``.
    """
    host, _, path = url.split("://", 1)[1].partition("/")
    if host.lower() not in ("", "localhost"):
        raise InputError(
            f"{url!r}: a file:// URL names an absolute path on this machine "
            f"(file:///path or file://localhost/path), not the host or folder {host!r}; "
            "write a plain path for a relative one"
        )
    return "/" + path


def _of_array(array: zarr.Array) -> Location:
    store = array.store
    if isinstance(store, LocalStore):
        return _local(os.path.join(os.fspath(store.root), array.path))
    if isinstance(store, MemoryStore):
        return Location("memory", str(id(store._store_dict)), _clean(array.path))
    if isinstance(store, FsspecStore):
        fs = store.fs
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        if protocol in LOCAL_PROTOCOLS:
            return _local(os.path.join(store.path, array.path))
        if "://" in store.path:  # HTTP: the store's path is the whole URL
            return locate(f"{store.path}/{array.path}")
        path = f"{store.path}/{array.path}"
        return Location(protocol, _endpoint(fs.storage_options), _clean(path))
    return Location(type(store).__name__, str(id(store)), _clean(array.path))


def _local(path: str) -> Location:
    return Location("file", "", os.path.realpath(os.path.expanduser(path)))


def _clean(path: str) -> str:
    """``path`` with repeated slashes, ``.`` and ``..`` folded, and no slash at either end."""
    path = path.strip("/")
    return "" if not path else posixpath.normpath(path).lstrip("/")


def _endpoint(options: Mapping[str, Any] | None) -> str:
    """The endpoint named by fsspec ``options`` or the environment ("" for the default)."""
    options = options or {}
    client = options.get("client_kwargs") or {}
    endpoint = options.get("endpoint_url") or client.get("endpoint_url")
    return str(endpoint or os.environ.get("AWS_ENDPOINT_URL", "")).rstrip("/")


def _filesystem_class(protocol: str, text: str) -> type:
    try:
        return fsspec.get_filesystem_class(protocol)
    except ImportError as exc:
        hint = EXTRAS.get(protocol, str(exc))
        raise InputError(
            f"{text!r}: {protocol}:// needs a package that is missing: {hint}"
        ) from None
    except ValueError:
        raise InputError(
            f"{text!r}: fsspec knows no protocol {protocol!r} (a path, file://, s3://, gs://, "
            "... is expected)"
        ) from None

"""Content fingerprints of input arrays: is this still the data a job started on?

A fingerprint lists every object of an array in its store (metadata, chunk
files, shards) with a token that changes whenever the object is rewritten:

* a local disk: size, modification and change times (ns) and inode number.
  zarr writes a chunk to a temporary file and renames it over the old one, so a
  rewritten chunk gets a new inode; a file rewritten in place, its size and
  modification time restored by hand (``os.utime``), still gets a new change
  time, which no call sets back.  Links to files and folders are followed;
* an fsspec store: size and the store's version marker (ETag, version id,
  generation, inode, modification or change time, whichever it reports);
* zarr's ``ObjectStore`` (obstore: S3, GCS, Azure, ...): size, ETag, version
  and modification time from obstore's listing;
* zarr's ``MemoryStore``, and any other store: a hash of each object's bytes
  (read through the store).

Only listings and ``stat`` calls are made, no chunk is read (but on the last
kind of store): about a second per 10⁵ local chunk files (docs/cluster.md).
The setting ``fingerprint: content`` (``$OUTOFCORE_FINGERPRINT=content``) hashes
every object's bytes on every store instead: edits that keep every version
marker are caught too, at the cost of reading each input once more, twice a job.
The job journal stores the summary (object count, bytes, digest) with the job
and the per-object tokens beside it, so a refused resume can name the objects
that changed.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import zarr
from zarr.core.sync import sync
from zarr.storage import FsspecStore, LocalStore, MemoryStore, ObjectStore

from outofcore import config
from outofcore.errors import InputChangedError, InputError
from outofcore.storage import stored_arrays
from outofcore.storage.manifest import JOURNAL_DIR

#: Folder of outofcore's own journal inside an array made by outofcore: not content.
SKIPPED_FOLDERS = frozenset({JOURNAL_DIR})
#: How inputs may be fingerprinted (the setting ``fingerprint``).
METHODS = ("stat", "content")
#: Objects a page of an obstore listing asks for (S3 gives at most 1000 a request).
LISTING_PAGE = 1000
#: Fields of an fsspec ``info`` record that change when an object is rewritten.
VERSION_FIELDS = (
    "ETag",
    "etag",
    "VersionId",
    "version_id",
    "generation",
    "ino",
    "mtime",
    "LastModified",
    "last_modified",
    "updated",
    "created",
)


@dataclass(frozen=True)
class Fingerprint:
    """Every object of an array with its version token, and a digest of them all."""

    #: Object key (relative to the array's folder) -> version token.
    tokens: Mapping[str, str]
    #: Total bytes of the objects.
    nbytes: int
    #: Where the tokens come from (``stat``, the store's version fields, or content).
    method: str

    @cached_property
    def digest(self) -> str:
        lines = "".join(f"{key}\t{self.tokens[key]}\n" for key in sorted(self.tokens))
        return hashlib.sha256(lines.encode()).hexdigest()

    def summary(self) -> dict[str, Any]:
        """What the job document records: object count, bytes, digest, method."""
        return {
            "objects": len(self.tokens),
            "bytes": self.nbytes,
            "digest": self.digest,
            "method": self.method,
        }


def fingerprint(array: zarr.Array, method: str | None = None) -> Fingerprint:
    """The fingerprint of ``array``'s objects in its store (see the module docstring).

    ``method``: ``"stat"`` (version tokens from listings and ``stat``) or ``"content"``
    (a hash of every object's bytes: reads the whole array); None: the setting
    ``fingerprint`` (``$OUTOFCORE_FINGERPRINT``, default ``stat``).

    Raises
    ------
    InputError
        For another method.
    """
    method = method or str(config.get("fingerprint")).strip().lower()
    if method not in METHODS:
        raise InputError(
            f"{config.env_name('fingerprint')}={method!r}: need one of {', '.join(METHODS)}"
        )
    store = array.store
    if isinstance(store, LocalStore):
        root = os.path.join(os.fspath(store.root), array.path)
        return _local(root, content=method == "content")
    if method == "content":
        return _through_store(store, array.path)
    if isinstance(store, FsspecStore):
        return _fsspec(store, array.path)
    if isinstance(store, ObjectStore):
        return _obstore(store, array.path)
    return _through_store(store, array.path)


def check_unchanged(
    inputs: Mapping[str, zarr.Array], before: Mapping[str, Fingerprint], output: str
) -> None:
    """Raise :class:`InputChangedError` when an input differs from its fingerprint ``before``.

    Called at the end of a job, before the output is marked complete.
    """
    for name, array in inputs.items():
        now = fingerprint(array)
        if now.digest != before[name].digest:
            raise InputChangedError(
                f"input {name} ({stored_arrays.describe(array)}) changed while the job read it "
                f"({changes(before[name].tokens, now.tokens)}), so the output {output!r} may "
                "mix old and new data and is left incomplete. Once the input is final, rerun "
                "with overwrite=True to start over"
            )


def changes(then: Mapping[str, str], now: Mapping[str, str], limit: int = 3) -> str:
    """What differs between two token listings, in words: ``"c/0/1 rewritten, 2 more"``."""
    both = sorted(then.keys() & now.keys())
    found = [f"{key} rewritten" for key in both if then[key] != now[key]]
    found += [f"{key} added" for key in sorted(now.keys() - then.keys())]
    found += [f"{key} removed" for key in sorted(then.keys() - now.keys())]
    if not found:
        return "no object differs"
    more = f" and {len(found) - limit} more" if len(found) > limit else ""
    return ", ".join(found[:limit]) + more


def _local(root: str, content: bool = False) -> Fingerprint:
    """A local array folder: each file's ``stat`` token, or with ``content`` its bytes' hash.

    Symbolic links are followed, to files and folders alike (a read goes through them),
    each folder once.
    """
    tokens: dict[str, str] = {}
    nbytes = 0
    folders = [("", root)]
    seen: set[tuple[int, int]] = set()
    while folders:
        prefix, folder = folders.pop()
        try:
            place = os.stat(folder)
        except OSError:
            continue
        if (place.st_dev, place.st_ino) in seen:  # a link back to a folder listed already
            continue
        seen.add((place.st_dev, place.st_ino))
        with os.scandir(folder) as entries:
            for entry in entries:
                key = f"{prefix}{entry.name}"
                try:
                    is_folder = entry.is_dir()  # a link to a folder too: reads go through it
                except OSError:
                    is_folder = False
                if is_folder:
                    if not (prefix == "" and entry.name in SKIPPED_FOLDERS):
                        folders.append((f"{key}/", entry.path))
                    continue
                try:
                    info = entry.stat()  # a link's target: what a read gets
                except FileNotFoundError:  # removed while listed: it is not there
                    continue
                except OSError:  # a link that cannot be followed (reads fail on it too)
                    info = entry.stat(follow_symlinks=False)
                tokens[key] = _content_token(entry.path, info) if content else stat_token(info)
                nbytes += info.st_size
    return Fingerprint(tokens=tokens, nbytes=nbytes, method="content" if content else "stat")


def stat_token(info: os.stat_result) -> str:
    """A local file's token: size, modification and change times (ns), inode.

    The change time (ctime) moves with every write, rename, ``utime`` or ``chmod``
    and cannot be set back by hand, so a file rewritten in place with its size and
    modification time restored still gets a new token.
    """
    return f"{info.st_size}:{info.st_mtime_ns}:{info.st_ino}:{info.st_ctime_ns}"


def _content_token(path: str, info: os.stat_result) -> str:
    """Size and SHA-256 of the file at ``path`` (the setting ``fingerprint: content``)."""
    try:
        with open(path, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:  # unreadable: its stat stands in (reads of it fail too)
        return stat_token(info)
    return f"{info.st_size}:{digest}"


def _fsspec(store: FsspecStore, path: str) -> Fingerprint:
    root = "/".join(part for part in (store.path.rstrip("/"), path.strip("/")) if part)
    listing = sync(store.fs._find(root, detail=True, withdirs=False))
    tokens: dict[str, str] = {}
    nbytes = 0
    for name, info in listing.items():
        key = name[len(root) :].lstrip("/") if name.startswith(root) else name
        if key.split("/", 1)[0] in SKIPPED_FOLDERS:
            continue
        size = int(info.get("size") or 0)
        versions = [f"{field}={info[field]}" for field in VERSION_FIELDS if info.get(field)]
        tokens[key] = ":".join([str(size), *versions])
        nbytes += size
    return Fingerprint(tokens=tokens, nbytes=nbytes, method="listing")


def _obstore(store: ObjectStore, path: str) -> Fingerprint:
    """A zarr ``ObjectStore``: one paged listing through obstore, with each object's meta."""
    import obstore  # noqa: PLC0415 (an ObjectStore wraps an obstore store)

    prefix = path.strip("/")
    tokens: dict[str, str] = {}
    nbytes = 0
    for page in obstore.list(store.store, prefix or None, chunk_size=LISTING_PAGE):
        for meta in page:
            key = meta["path"][len(prefix) :].lstrip("/") if prefix else meta["path"]
            if key.split("/", 1)[0] in SKIPPED_FOLDERS:
                continue
            modified = meta["last_modified"].isoformat()
            versions = [f"{f}={meta[f]}" for f in ("e_tag", "version") if meta.get(f)]
            tokens[key] = ":".join([str(meta["size"]), *versions, f"modified={modified}"])
            nbytes += int(meta["size"])
    return Fingerprint(tokens=tokens, nbytes=nbytes, method="listing")


def _through_store(store: Any, path: str) -> Fingerprint:
    """Any other zarr store: keys and a hash of each object's bytes."""
    from zarr.core.buffer import default_buffer_prototype  # noqa: PLC0415

    prefix = f"{path.strip('/')}/" if path.strip("/") else ""

    async def collect() -> dict[str, bytes]:
        found = {}
        async for key in store.list_prefix(prefix):
            relative = key[len(prefix) :]
            if relative.split("/", 1)[0] in SKIPPED_FOLDERS:
                continue
            value = await store.get(key, prototype=default_buffer_prototype())
            if value is not None:
                found[relative] = value.to_bytes()
        return found

    objects = sync(collect())
    tokens = {
        key: f"{len(data)}:{hashlib.sha256(data).hexdigest()}" for key, data in objects.items()
    }
    method = "content" if isinstance(store, MemoryStore) else "content (read through the store)"
    return Fingerprint(tokens=tokens, nbytes=sum(map(len, objects.values())), method=method)

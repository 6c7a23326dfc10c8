"""Which keys inside an output are outofcore's: the one manifest checks and deletions read.

outofcore deletes exactly the keys it writes, one at a time, and never a
folder by walking it.  Inside an output (a job's, or ``outofcore random``'s
array) those keys are:

* the array's metadata documents: ``zarr.json``, ``.zarray``, ``.zattrs``;
* its chunk keys, of the form its own metadata gives (format 3: ``c/0/1``
  with the separator of its ``chunk_key_encoding``; format 2: ``0.1`` or
  ``0/1``), every index inside the chunk grid (the shard grid when sharded);
* the job journal's keys (:mod:`outofcore.journal.records`, :mod:`outofcore.journal.lease`):
  ``_outofcore/job.json``, ``lease.json``, ``inputs/<id>.json``,
  ``tiles/<id>/tile-I-J.json``, ``partials/<id>/tile-I-J-kPofS.json`` and
  ``partials/<id>/tile-I-J-kPofS/rows-R.npy`` and ``.../sums.npy`` (its panel sums, for a
  product centred from them) (``tile-I-J-bE`` for entry E of a stack);
* the temporary files a killed write leaves of any of these
  (``<key>.<32 hex digits>.partial``, zarr's ``LocalStore`` and
  :mod:`outofcore.storage.chunkfiles`).

A FIFO or a socket, or an empty folder, where one of those keys would be (what a
crash, a disk or a hostile writer leaves) holds no one's bytes: it counts as that key
(the FIFO unlinked, the folder removed while empty).  Anything else found (a user's
file or folder, an unknown key, a symbolic link, a device, a pipe or a folder
elsewhere) is a stranger: :func:`output_contents` names it, outofcore
refuses to start over an output holding one, and deletes nothing of it.  On
local disks the listing never follows a link and deletions (:mod:`outofcore.storage.deleting`)
go folder by folder with ``O_NOFOLLOW``, so nothing is ever deleted through one.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from zarr.abc.store import Store
from zarr.storage import FsspecStore, LocalStore

from outofcore.errors import InputError
from outofcore.storage.documents import DocumentError, load_document
from outofcore.storage.output_keys import join_key, link_target, list_store, read_metadata

#: Folder of a job's journal inside its output (:mod:`outofcore.journal.records`).
JOURNAL_DIR = "_outofcore"
#: The array's own metadata documents (format 3, format 2 and its attributes).
METADATA_NAMES = ("zarr.json", ".zarray", ".zattrs")
#: Every name a journal key is built from (journal ids, file names): letters, digits,
#: "_" and "-", and "." after the first, at most 200 characters.
SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}")
#: Names of the journal's documents and folders (:mod:`outofcore.journal.records`,
#: :mod:`outofcore.journal.lease`).
JOB_NAME, LEASE_NAME = "job.json", "lease.json"
INPUTS_DIR, TILES_DIR, PARTIALS_DIR = "inputs", "tiles", "partials"

_SAFE = SAFE_NAME.pattern
_INDEX = r"(?:0|[1-9][0-9]{0,18})"
_TILE = rf"tile-{_INDEX}-{_INDEX}(?:-b{_INDEX})?"
_PART = rf"{_TILE}-k{_INDEX}of{_INDEX}"
#: Journal keys, relative to the journal folder.
_JOURNAL_KEY = re.compile(
    rf"{re.escape(JOB_NAME)}|{re.escape(LEASE_NAME)}|{INPUTS_DIR}/{_SAFE}\.json"
    rf"|{TILES_DIR}/{_SAFE}/{_TILE}\.json|{PARTIALS_DIR}/{_SAFE}/{_PART}\.json"
    rf"|{PARTIALS_DIR}/{_SAFE}/{_PART}/rows-{_INDEX}\.npy"
    rf"|{PARTIALS_DIR}/{_SAFE}/{_PART}/sums\.npy"
)
#: Journal folders, relative to the journal folder.
_JOURNAL_FOLDER = re.compile(
    rf"{INPUTS_DIR}|{TILES_DIR}|{PARTIALS_DIR}|{TILES_DIR}/{_SAFE}"
    rf"|{PARTIALS_DIR}/{_SAFE}|{PARTIALS_DIR}/{_SAFE}/{_PART}"
)
#: A write in flight (or killed): zarr's LocalStore writes ``Path(key).with_suffix(...)``,
#: outofcore's chunk files ``<key>.<hex>.partial``.
_TEMPORARY = re.compile(r"(.+)\.[0-9a-f]{32}\.partial")
_INDEX_ONLY = re.compile(_INDEX)
#: Names shown in a message, at most.
SHOWN = 5
logger = logging.getLogger("outofcore")


class StrangersError(InputError):
    """An output holds what outofcore did not write (or a symbolic link): nothing is deleted."""


@dataclass(frozen=True)
class ChunkKeys:
    """The chunk keys an array's metadata allows.

    ``prefix``: ``"c"`` (format 3's default encoding) or ``""``; ``separator``:
    ``"/"`` or ``"."``; ``grid``: chunks (shards when sharded) along each dimension.
    """

    prefix: str
    separator: str
    grid: tuple[int, ...]

    def _indices(self, key: str) -> list[str] | None:
        if self.prefix:
            if key == self.prefix:
                return []
            if not key.startswith(self.prefix + self.separator):
                return None
            key = key[len(self.prefix) + 1 :]
        elif not self.grid:
            return [] if key == "0" else None
        return key.split(self.separator)

    def _inside(self, indices: Sequence[str]) -> bool:
        return all(
            _INDEX_ONLY.fullmatch(index) and int(index) < extent
            for index, extent in zip(indices, self.grid, strict=False)
        )

    def is_key(self, key: str) -> bool:
        """Whether ``key`` (relative to the array) is one of its chunk keys."""
        return self.index(key) is not None

    def index(self, key: str) -> tuple[int, ...] | None:
        """The grid index of the chunk key ``key`` (relative to the array), or None when
        it is not one of the array's chunk keys."""
        indices = self._indices(key)
        if indices is None or len(indices) != len(self.grid) or not self._inside(indices):
            return None
        return tuple(int(index) for index in indices)

    def is_folder(self, folder: str) -> bool:
        """Whether ``folder`` holds chunk keys (``c``, ``c/0`` with ``/`` separators)."""
        if self.separator != "/" or (not self.prefix and not self.grid):
            return False
        parts = folder.split("/")
        if self.prefix:
            if parts[0] != self.prefix:
                return False
            parts = parts[1:]
        return len(parts) < len(self.grid) and self._inside(parts)


def chunk_keys_of(name: str, document: bytes) -> ChunkKeys | None:
    """The chunk keys the metadata document ``name`` (``zarr.json`` or ``.zarray``)
    gives, or None when it is not an array's, or damaged (then no key is a chunk's)."""
    try:  # bounded: depth and size capped, zarr v2's NaN fill value taken
        meta = load_document(document, name, allow_constants=True)
    except DocumentError:
        return None
    if not isinstance(meta, dict) or not _sizes(meta.get("shape"), 0):
        return None
    shape = meta["shape"]
    if name == "zarr.json":
        grid, encoding = _mapping(meta.get("chunk_grid")), _mapping(meta.get("chunk_key_encoding"))
        if meta.get("node_type") != "array" or grid.get("name") != "regular":
            return None
        chunks = _mapping(grid.get("configuration")).get("chunk_shape")
        kind = encoding.get("name")
        prefix = {"default": "c", "v2": ""}.get(kind) if isinstance(kind, str) else None
        separator = _mapping(encoding.get("configuration")).get(
            "separator", "/" if kind == "default" else "."
        )
    elif name == ".zarray":
        chunks, separator, prefix = meta.get("chunks"), meta.get("dimension_separator", "."), ""
        separator = "." if separator is None else separator
    else:
        return None
    if prefix is None or separator not in ("/", ".") or not _sizes(chunks, 1):
        return None
    if len(chunks) != len(shape):
        return None
    grid = tuple(-(-extent // chunk) for extent, chunk in zip(shape, chunks, strict=True))
    return ChunkKeys(prefix, separator, grid)


def _mapping(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _sizes(value: object, least: int) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= least for v in value
    )


@dataclass(frozen=True)
class Contents:
    """What one listing found inside an output, by whose it is.

    Keys are relative to the output; ``folders`` (local stores only) are the
    folders of outofcore's keys, deepest first; ``strangers`` what outofcore did
    not write (a folder's name ends in ``/``); ``links`` symbolic links, each as
    ``name -> target``.
    """

    chunks: tuple[str, ...] = ()
    metadata: tuple[str, ...] = ()
    journal: tuple[str, ...] = ()
    strangers: tuple[str, ...] = ()
    links: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()

    def refusal(self, where: str) -> str | None:
        """Why outofcore may not delete this output's keys (one line), or None."""
        if self.links:
            return (
                f"the output {where!r} holds symbolic links ({show(self.links)}); outofcore "
                "never writes or deletes through a link: replace each with what it points to, "
                "or choose another path"
            )
        if self.strangers:
            return (
                f"the output {where!r} also holds {show(self.strangers)}, which outofcore did "
                "not write, and it deletes only what it wrote: move them out, or choose "
                "another path"
            )
        return None


def show(names: Sequence[str]) -> str:
    """The first :data:`SHOWN` of ``names`` and how many more."""
    if not names:
        return "nothing"
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def whose(key: str, forms: Sequence[ChunkKeys]) -> str | None:
    """``"chunks"``, ``"metadata"`` or ``"journal"`` for a key of outofcore's (relative to the
    output; a killed write's temporary file counts as its key's), None for a stranger."""
    for candidate in written_as(key):
        found = _whose(candidate, forms)
        if found is not None:
            return found
    return None


def written_as(name: str) -> tuple[str, ...]:
    """The keys ``name`` may be a write of: itself, or for a temporary file the keys it
    was to become (zarr drops the key's last suffix: ``zarr.<hex>.partial``, ``0.<hex>``)."""
    temporary = _TEMPORARY.fullmatch(name)
    if temporary is None:
        return (name,)
    base = temporary.group(1)
    return (base, base + ".json", base + ".npy", base + ".0")


def _whose(key: str, forms: Sequence[ChunkKeys]) -> str | None:
    if key in METADATA_NAMES:
        return "metadata"
    if key.startswith(JOURNAL_DIR + "/"):
        return "journal" if _JOURNAL_KEY.fullmatch(key[len(JOURNAL_DIR) + 1 :]) else None
    return "chunks" if any(form.is_key(key) for form in forms) else None


def without_lease(keys: Iterable[str]) -> tuple[str, ...]:
    """``keys`` but the lease and its writes in flight: the lease is its holder's to delete."""
    lease = f"{JOURNAL_DIR}/{LEASE_NAME}"

    def of_lease(key: str) -> bool:
        temporary = _TEMPORARY.fullmatch(key)
        return key == lease or (temporary is not None and temporary.group(1) + ".json" == lease)

    return tuple(key for key in keys if not of_lease(key))


def is_our_folder(folder: str, forms: Sequence[ChunkKeys]) -> bool:
    """Whether ``folder`` (relative to the output) is one outofcore's keys live in."""
    if folder == JOURNAL_DIR:
        return True
    if folder.startswith(JOURNAL_DIR + "/"):
        return bool(_JOURNAL_FOLDER.fullmatch(folder[len(JOURNAL_DIR) + 1 :]))
    return any(form.is_folder(folder) for form in forms)


def output_contents(store: Store, prefix: str, under: str = "") -> Contents:
    """List the output at ``prefix`` in ``store`` once and sort what is there.

    ``under``: only what lies in this folder of the output (``_outofcore``, ...).
    No object is read but the array's metadata documents.

    Raises
    ------
    InputError
        When a local folder of the output cannot be listed (permissions).
    """
    base, top, under = local_base(store), prefix.strip("/"), under.strip("/")
    journal_only = under == JOURNAL_DIR or under.startswith(JOURNAL_DIR + "/")
    forms = () if journal_only else _chunk_forms(store, top, base)
    if base is not None:
        entries = _walk_local(base, top, under, forms)
    else:
        entries = ((key, "file") for key in list_store(store, top, under))
    found: dict[str, list[str]] = {
        "chunks": [], "metadata": [], "journal": [], "strangers": [], "links": [], "folders": []
    }  # fmt: skip
    for name, kind in entries:
        if kind == "file":
            found[whose(name, forms) or "strangers"].append(name)
        else:
            found[kind].append(name)
    return Contents(
        chunks=tuple(sorted(found["chunks"])),
        metadata=tuple(sorted(found["metadata"], key=_metadata_last)),
        journal=tuple(sorted(found["journal"], key=_job_last)),
        strangers=tuple(sorted(found["strangers"])),
        links=tuple(sorted(found["links"])),
        folders=tuple(sorted(found["folders"], key=lambda f: (-f.count("/"), f))),
    )


def _metadata_last(key: str) -> tuple[bool, str]:
    """Deletion order of metadata: attributes, then the array's document, last."""
    return (key in ("zarr.json", ".zarray"), key)


def _job_last(key: str) -> tuple[bool, str]:
    """Deletion order of the journal: records first, the job document last."""
    return (key == f"{JOURNAL_DIR}/{JOB_NAME}", key)


def is_local(store: Store) -> bool:
    """Whether ``store``'s keys are files on this machine (where links may be)."""
    return local_base(store) is not None


def local_base(store: Store) -> str | None:
    """The folder on this machine that ``store``'s keys are paths in, or None."""
    if isinstance(store, LocalStore):
        return os.fspath(store.root)
    if isinstance(store, FsspecStore) and "file" in _protocols(store.fs):
        return store.path
    return None


def _protocols(fs: object) -> tuple[str, ...]:
    protocol = getattr(fs, "protocol", ())
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def _chunk_forms(store: Store, top: str, base: str | None) -> tuple[ChunkKeys, ...]:
    forms = []
    for name in ("zarr.json", ".zarray"):
        document = read_metadata(store, top, base, name)
        form = None if document is None else chunk_keys_of(name, document)
        if form is not None:
            forms.append(form)
    return tuple(forms)


def _walk_local(
    base: str, top: str, under: str, forms: Sequence[ChunkKeys]
) -> Iterator[tuple[str, str]]:
    """``(name, kind)`` of everything below ``base/top/under``, never following a link:
    kind is ``file``, ``links`` (``name -> target``), ``strangers`` (a folder outofcore
    does not write, not entered; a device, pipe or socket) or ``folders`` (outofcore's).
    Names are relative to the output ``base/top``."""
    path = base
    for part in [p for p in join_key(top, under).split("/") if p]:
        path = os.path.join(path, part)
        if os.path.islink(path):  # the output itself, or the folder listed, is a link
            yield f"{os.path.relpath(path, base)} -> {link_target(path)}", "links"
            return
    output = os.path.join(base, top) if top else base
    pending = [under]
    while pending:
        folder = pending.pop()
        path = os.path.join(output, folder) if folder else output
        try:
            with os.scandir(path) as listing:
                entries = list(listing)
        except FileNotFoundError:
            continue
        except NotADirectoryError:
            if folder:  # a file where a folder of outofcore's would be
                yield folder, "file"
            continue
        except OSError as exc:
            raise InputError(f"{path!r} cannot be listed ({exc.strerror or exc})") from exc
        for entry in entries:
            name = join_key(folder, entry.name)
            if entry.is_symlink():
                yield f"{name} -> {link_target(entry.path)}", "links"
            elif entry.is_dir(follow_symlinks=False):
                if is_our_folder(name, forms):
                    yield name, "folders"
                    pending.append(name)
                elif whose(name, forms) is not None and _empty(entry.path):
                    yield name, "folders"  # where a key of outofcore's was: holds nothing
                else:
                    yield name + "/", "strangers"
            elif entry.is_file(follow_symlinks=False):
                yield name, "file"
            elif _holds_nothing(entry) and whose(name, forms) is not None:
                yield name, "file"  # a FIFO or socket at a key of outofcore's: unlinked
            else:
                yield name, "strangers"


def _empty(path: str) -> bool:
    """Whether the folder at ``path`` holds nothing (False when it cannot be listed)."""
    try:
        with os.scandir(path) as listing:
            return next(listing, None) is None
    except OSError:
        return False


def _holds_nothing(entry: os.DirEntry) -> bool:
    """Whether ``entry`` is a FIFO or a socket: removing its name loses no one's bytes."""
    try:
        mode = entry.stat(follow_symlinks=False).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)

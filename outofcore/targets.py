"""What is at an output's location, and whether outofcore may replace it.

outofcore deletes only what it made.  Before a job (or ``outofcore random``)
creates an array at a location, :func:`check_replaceable` looks at what is
there and refuses, naming what it found, anything outofcore did not make:

* a regular file, a folder that is not a zarr array, a zarr group: refused
  always, ``overwrite`` or not (the message never suggests ``--overwrite``);
* a zarr array without outofcore's attribute (:data:`JOB_ATTRIBUTE`,
  :data:`GENERATED_ATTRIBUTE`) and without a job journal: someone else's data,
  refused always; delete it yourself if it is to go;
* an array outofcore made that also holds files zarr and outofcore do not
  write (``notes.txt`` next to ``zarr.json``): refused, naming them;
* an array outofcore made (a job's output, ``outofcore random``'s arrays):
  replaceable with ``overwrite``; without it the job resumes or refuses
  (:func:`outofcore.resume.inspect_output`).

Nothing here writes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import zarr
from zarr.core.sync import sync
from zarr.errors import NodeTypeValidationError

from outofcore import stores
from outofcore.errors import InputError
from outofcore.locations import Location

#: Key of a job's record in its output's attributes.
JOB_ATTRIBUTE = "outofcore"
#: Key of the record ``outofcore random`` keeps in the arrays it writes.
GENERATED_ATTRIBUTE = "outofcore_random"
#: Folder of a job's journal inside its output (:mod:`outofcore.journal`).
JOURNAL_DIR = "_outofcore"
#: Names zarr writes at the top of an array: metadata, and chunk keys (format 3: ``c/...``;
#: format 2: ``0.1`` files or ``0/1`` folders).
_ZARR_NAMES = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata", "c"})
_CHUNK_KEY = re.compile(r"^\d+([./]\d+)*$")
#: Object stores whose paths start with a bucket (or container) that must exist.
BUCKET_PROTOCOLS = frozenset({"s3", "gs", "gcs", "az", "abfs", "abfss"})
#: Names shown in a message, at most.
_SHOWN = 5


@dataclass(frozen=True)
class Occupant:
    """What is at a location: ``kind`` is one of ``nothing``, ``journal`` (only a job
    journal folder), ``file``, ``folder``, ``group``, ``foreign-array`` (a zarr array
    outofcore did not make), ``mixed-array`` (one it made, with other files in it) or
    ``array`` (one it made); ``names``: what it holds (group members, folder entries,
    or the files outofcore did not write)."""

    kind: str
    names: tuple[str, ...] = ()

    @property
    def replaceable(self) -> bool:
        """Whether outofcore may delete what is there to create its own array."""
        return self.kind in ("nothing", "journal", "array")


def what_is_at(location: Location, storage_options: Any = None) -> Occupant:
    """Look at ``location`` (read only) and say what occupies it.

    Raises
    ------
    InputError
        When an object store refuses to say (credentials, endpoint, a missing bucket).
    """
    with stores.store_errors(location.target):
        return _what_is_at(location, storage_options)


def _what_is_at(location: Location, storage_options: Any) -> Occupant:
    names = _children(location, storage_options)
    if names is None:
        return Occupant("file")
    if not names:
        return Occupant("nothing")
    if set(names) == {JOURNAL_DIR}:
        return Occupant("journal", names)
    options = stores.zarr_options(location.target, storage_options)
    try:
        node = zarr.open(location.target, mode="r", **options)
    except (FileNotFoundError, KeyError, ValueError, OSError, NodeTypeValidationError):
        return Occupant("folder", names)
    if isinstance(node, zarr.Group):
        return Occupant("group", tuple(sorted(node.keys())) or names)
    made = JOURNAL_DIR in names or any(
        key in node.attrs for key in (JOB_ATTRIBUTE, GENERATED_ATTRIBUTE)
    )
    if not made:
        return Occupant("foreign-array", names)
    strangers = tuple(n for n in names if n != JOURNAL_DIR and not _zarr_name(n))
    return Occupant("mixed-array", strangers) if strangers else Occupant("array", names)


def check_replaceable(location: Location, storage_options: Any = None) -> Occupant:
    """What is at the output ``location``, when outofcore may replace it.

    Raises
    ------
    InputError
        For anything outofcore did not make (see the module docstring), naming what
        is there (the message never suggests ``overwrite``); for a local output this
        user cannot write.
    """
    if location.read_only:
        raise InputError(
            f"the output {str(location)!r} cannot be written: {location.protocol}:// is read "
            "only (inputs may be read over it); write the output to a path or an object store"
        )
    occupant = what_is_at(location, storage_options)
    if occupant.replaceable:
        if location.is_local:
            _check_writable(location.path)
        return occupant
    where = str(location)
    shown = _show(occupant.names)
    why = {
        "file": "is a file, not a zarr array; choose another path",
        "folder": f"is a folder that is not a zarr array (it holds {shown}); choose another path",
        "group": f"is a zarr group (members: {shown}), not an array; choose another path",
        "foreign-array": (
            "is a zarr array that outofcore did not write (it has no outofcore record or "
            "journal), and outofcore never deletes data it did not make; choose another path, "
            "or delete it yourself if it is to go"
        ),
        "mixed-array": (
            f"is an array outofcore wrote, but it also holds {shown}, which outofcore did "
            "not write; move them out, or choose another path"
        ),
    }[occupant.kind]
    raise InputError(f"the output {where!r} {why}")


def _check_writable(path: str) -> None:
    """Refuse a local output whose folder (or the nearest existing parent) is not writable."""
    folder = path
    while not os.path.lexists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise InputError(f"the output {path!r} cannot be created: {folder!r} is a file")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(
            f"the output {path!r} cannot be written: {folder!r} is not writable here "
            "(permissions, or a read-only file system)"
        )


def _children(location: Location, storage_options: Any) -> tuple[str, ...] | None:
    """The names at the top of ``location`` (empty: nothing there); None for a file."""
    if location.is_local:
        if not os.path.lexists(location.path):
            return ()
        if not os.path.isdir(location.path):
            return None
        return tuple(sorted(os.listdir(location.path)))
    store = stores.fsspec_store(location.target, storage_options, read_only=True)

    async def listing() -> list[str]:
        return [name async for name in store.list_dir("")]

    try:
        names = tuple(sorted(sync(listing())))
    except FileNotFoundError:
        names = ()
    bucket = location.path.split("/", 1)[0]
    in_buckets = location.protocol in BUCKET_PROTOCOLS
    if not names and in_buckets and not sync(store.fs._exists(bucket)):  # else writes fail
        raise InputError(f"{location.target}: the bucket {bucket!r} does not exist")
    return names


def _zarr_name(name: str) -> bool:
    return name in _ZARR_NAMES or bool(_CHUNK_KEY.match(name))


def _show(names: tuple[str, ...]) -> str:
    if not names:
        return "nothing"
    more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more

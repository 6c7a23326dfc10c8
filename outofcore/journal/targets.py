"""What is at an output's location, and whether outofcore may replace it.

outofcore deletes only what it made.  Before a job (or ``outofcore random``)
creates an array at a location, :func:`check_replaceable` looks at what is
there and refuses, naming what it found, anything outofcore did not make:

* a regular file, a folder that is not a zarr array, a zarr group: refused
  always, ``overwrite`` or not (the message never suggests ``--overwrite``);
* a zarr array without outofcore's attribute (:data:`JOB_ATTRIBUTE`,
  :data:`GENERATED_ATTRIBUTE`) and without a job journal: someone else's data,
  refused always; delete it yourself if it is to go;
* an array outofcore made that also holds anything zarr and outofcore do not
  write (``notes.txt`` next to ``zarr.json``; with ``deep``, anywhere inside
  it: in ``c/``, in ``_outofcore/``; :mod:`outofcore.storage.manifest`): refused,
  naming them; one holding a symbolic link: refused, naming it and its target;
* an array outofcore made (a job's output, ``outofcore random``'s arrays):
  replaceable with ``overwrite``; without it the job resumes or refuses
  (:func:`outofcore.journal.resume.inspect_output`);
* a location no array can be written to (inside a zip or tar archive, on
  ``/proc``, ``/sys`` and the kernel's other file systems): refused.

Nothing here writes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psutil
import zarr
from zarr.core.sync import sync
from zarr.errors import NodeTypeValidationError

from outofcore.errors import InputError
from outofcore.storage import manifest, stores
from outofcore.storage.locations import Location
from outofcore.storage.manifest import JOURNAL_DIR

#: Key of a job's record in its output's attributes.
JOB_ATTRIBUTE = "outofcore"
#: Key of the record ``outofcore random`` keeps in the arrays it writes.
GENERATED_ATTRIBUTE = "outofcore_random"
#: What a refusal of an array the user made as the output says (here, and for a
#: ``zarr.Array`` given as ``out``): how to get the layout they made it for.  outofcore never
#: writes into an array it did not make: one it left unfinished would read as plausible
#: values (the fill value) with no record that it is not the product.
OWN_LAYOUT_ADVICE = (
    "For a job's output in the layout you want, give a path where nothing is and the layout: "
    "chunks=(rows, cols) and shards=(rows, cols) or False (command line: --out-chunks R,C, "
    "--out-shards R,C, --zarr-format 2), and the job creates it so; open it with "
    "zarr.open_array(path) once it is written"
)
#: Names zarr writes at the top of an array: metadata, and chunk keys (format 3: ``c/...``;
#: format 2: ``0.1`` files or ``0/1`` folders).
_ZARR_NAMES = frozenset({*manifest.METADATA_NAMES, "c"})
_CHUNK_KEY = re.compile(r"^\d+([./]\d+)*$")
#: Object stores whose paths start with a bucket (or container) that must exist.
BUCKET_PROTOCOLS = frozenset({"s3", "gs", "gcs", "az", "abfs", "abfss"})
#: fsspec file systems nothing can be written into: archives, references, repositories
#: (web servers: :attr:`outofcore.storage.locations.Location.read_only`).
ARCHIVE_PROTOCOLS = frozenset({"zip", "tar", "libarchive", "reference", "github", "git"})
#: File systems of the kernel's own objects (``/proc``, ``/sys``, ...): no array lives there.
PSEUDO_FILE_SYSTEMS = frozenset(
    {
        "proc", "sysfs", "cgroup", "cgroup2", "devpts", "debugfs", "tracefs", "securityfs",
        "pstore", "bpf", "configfs", "fusectl", "mqueue", "binfmt_misc", "efivarfs",
        "selinuxfs", "nsfs", "rpc_pipefs",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Occupant:
    """What is at a location: ``kind`` is one of ``nothing``, ``journal`` (only a job
    journal folder), ``file``, ``folder``, ``group``, ``foreign-array`` (a zarr array
    outofcore did not make), ``mixed-array`` (one it made, with other files in it),
    ``linked-array`` (one it made, holding a symbolic link) or ``array`` (one it made);
    ``names``: what it holds (group members, folder entries, the files outofcore did
    not write, or each link as ``name -> target``)."""

    kind: str
    names: tuple[str, ...] = ()

    @property
    def replaceable(self) -> bool:
        """Whether outofcore may delete what is there to create its own array."""
        return self.kind in ("nothing", "journal", "array")


def what_is_at(location: Location, deep: bool = False) -> Occupant:
    """Look at ``location`` (read only, opened with its options) and say what occupies it.

    Only its top is listed, unless ``deep`` (where outofcore is to delete it) or only a
    journal is there: then all of it, once, and anything anywhere inside that outofcore
    does not write makes it ``mixed-array`` (:mod:`outofcore.storage.manifest`).  A local
    array outofcore made is listed whole in any case, for symbolic links
    (``linked-array``): a job writes through none.

    Raises
    ------
    InputError
        When an object store refuses to say (credentials, endpoint, a missing bucket).
    """
    with stores.store_errors(location.target):
        occupant = _what_is_at(location)
        if occupant.kind == "journal" or (deep and occupant.kind == "array"):
            return _look_inside(location, occupant)
        if occupant.kind == "array" and location.is_local:  # a link anywhere: never written
            return _look_inside(location, occupant, strangers=False)
        return occupant


def _what_is_at(location: Location) -> Occupant:
    names = _children(location)
    if names is None:
        return Occupant("file")
    if not names:
        return Occupant("nothing")
    links = _links(location, names)
    if set(names) == {JOURNAL_DIR}:
        return Occupant("linked-array", links) if links else Occupant("journal", names)
    stores.check_metadata(location, "the output")  # bounded: zarr's parser is not
    try:
        node = zarr.open(location.target, mode="r", **stores.zarr_options(location))
    except (FileNotFoundError, KeyError, ValueError, OSError, NodeTypeValidationError):
        return Occupant("folder", names)
    if isinstance(node, zarr.Group):
        return Occupant("group", tuple(sorted(node.keys())) or names)
    if not made_by_outofcore(node.attrs, JOURNAL_DIR in names):
        return Occupant("foreign-array", names)
    if links:
        return Occupant("linked-array", links)
    strangers = tuple(n for n in names if n != JOURNAL_DIR and not _zarr_name(n))
    return Occupant("mixed-array", strangers) if strangers else Occupant("array", names)


def made_by_outofcore(attributes: Mapping[str, Any], has_journal: bool) -> bool:
    """Whether an array with ``attributes`` (and a journal folder, or not) is outofcore's:
    a job's output (:data:`JOB_ATTRIBUTE`, or a journal) or ``random``'s
    (:data:`GENERATED_ATTRIBUTE`)."""
    return has_journal or any(key in attributes for key in (JOB_ATTRIBUTE, GENERATED_ATTRIBUTE))


def array_made_by_outofcore(array: zarr.Array) -> bool:
    """Whether the ``zarr.Array`` ``array`` is outofcore's (:func:`made_by_outofcore`); its
    attributes and the names at its top are read, nothing else."""

    async def names() -> list[str]:
        return [name async for name in array.store.list_dir(array.path)]

    try:
        has_journal = JOURNAL_DIR in sync(names())
    except (FileNotFoundError, NotADirectoryError):
        has_journal = False
    return made_by_outofcore(array.attrs, has_journal)


def _links(location: Location, names: tuple[str, ...]) -> tuple[str, ...]:
    """The symbolic links among ``names`` at the top of a local ``location``."""
    if not location.is_local:
        return ()
    found = []
    for name in names:
        path = os.path.join(location.path, name)
        if os.path.islink(path):
            found.append(f"{name} -> {os.readlink(path)}")
    return tuple(found)


def _look_inside(location: Location, occupant: Occupant, strangers: bool = True) -> Occupant:
    """``occupant`` (an array or a journal outofcore made), or ``linked-array`` for a
    symbolic link anywhere inside it, or (``strangers``) ``mixed-array`` for anything
    inside it outofcore did not write (one listing)."""
    contents = manifest.output_contents(stores.open_store(location, read_only=True), "")
    if contents.links:
        return Occupant("linked-array", contents.links)
    if strangers and contents.strangers:
        return Occupant("mixed-array", contents.strangers)
    return occupant


def check_replaceable(location: Location, deep: bool = False) -> Occupant:
    """What is at the output ``location`` (opened with its options), when outofcore may
    replace it.

    ``deep``: outofcore is to delete what is there (``overwrite``), so all of it is
    listed, and anything inside that outofcore does not write is refused
    (:func:`what_is_at`).

    Raises
    ------
    InputError
        For anything outofcore did not make (see the module docstring), naming what
        is there (the message never suggests ``overwrite``); for a local output this
        user cannot write; for a location no array can be written to.
    """
    if location.read_only:
        raise InputError(
            f"the output {str(location)!r} cannot be written: {location.protocol}:// is read "
            "only (inputs may be read over it); write the output to a path or an object store"
        )
    if location.protocol in ARCHIVE_PROTOCOLS:
        raise InputError(
            f"the output {str(location)!r} cannot be written: outofcore does not write into a "
            f"{location.protocol}:// file system (an archive, read only here); write the output "
            "to a folder or an object store"
        )
    if location.is_local:
        _check_real_file_system(location.path)
    occupant = what_is_at(location, deep)
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
            "journal), and outofcore never deletes data it did not make; delete it yourself "
            f"if it is to go, or choose another path. {OWN_LAYOUT_ADVICE}"
        ),
        "mixed-array": (
            f"is an array outofcore wrote, but it also holds {shown}, which outofcore did "
            "not write, and it deletes only what it wrote; move them out, or choose another "
            "path"
        ),
        "linked-array": (
            f"is an array outofcore wrote, but it holds symbolic links ({shown}), and "
            "outofcore never writes or deletes through a link; replace each with what it "
            "points to, or choose another path"
        ),
    }[occupant.kind]
    raise InputError(f"the output {where!r} {why}")


def _check_real_file_system(path: str) -> None:
    """Refuse a local output on the kernel's own file systems (``/proc``, ``/sys``, ...),
    where no array can be written whatever the permissions say."""
    folder = path
    while not os.path.lexists(folder):
        folder = os.path.dirname(folder)
    folder = os.path.realpath(folder)
    best, kind = "", None
    try:
        partitions = psutil.disk_partitions(all=True)
    except (OSError, RuntimeError):  # the mount table cannot be read: nothing to say
        return
    for partition in partitions:
        mount = partition.mountpoint
        inside = folder == mount or folder.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, partition.fstype
    if kind in PSEUDO_FILE_SYSTEMS:
        raise InputError(
            f"the output {path!r} cannot be written: {best!r} is the kernel's {kind} file "
            "system, not a disk; choose a path on a disk"
        )


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


def _children(location: Location) -> tuple[str, ...] | None:
    """The names at the top of ``location`` (empty: nothing there); None for a file."""
    if location.is_local:
        if not os.path.lexists(location.path):
            return ()
        if not os.path.isdir(location.path):
            return None
        return tuple(sorted(os.listdir(location.path)))
    store = stores.fsspec_store(location, read_only=True)

    async def listing() -> list[str]:
        return [name async for name in store.list_dir("")]

    try:
        names = tuple(sorted(sync(listing())))
    except FileNotFoundError:
        names = ()
    bucket = location.path.split("/", 1)[0]
    in_buckets = location.protocol in BUCKET_PROTOCOLS
    if not names and in_buckets and not sync(store.fs._exists(bucket)):  # else writes fail
        raise stores.MissingBucketError(f"{location.target}: the bucket {bucket!r} does not exist")
    return names


def _zarr_name(name: str) -> bool:
    """Whether ``name`` at an array's top is zarr's (or a killed write of one)."""
    return any(n in _ZARR_NAMES or _CHUNK_KEY.match(n) for n in manifest.written_as(name))


def _show(names: tuple[str, ...]) -> str:
    return manifest.show(names)

"""The job journal kept with the output, so a job can resume after a crash.

Layout, under the output array's own path in its store (next to ``zarr.json``)::

    _outofcore/job.json                        the job: inputs, parameters, plan, state
    _outofcore/inputs/<journal_id>.json         every input object's version token
    _outofcore/tiles/<journal_id>/tile-I-J.json one small record per finished tile
    _outofcore/partials/<journal_id>/tile-I-J-kPofS.json      a finished part of a split tile
    _outofcore/partials/<journal_id>/tile-I-J-kPofS/rows-R.npy its partial sum, block by block
    _outofcore/lease.json                      which job writes the output now (lease.py)

Everything goes through the zarr store API (``get``, ``set``, ``list_prefix``,
``delete``), so any zarr store works; local paths, S3 (a moto server) and
Azure (Azurite) are tested.  Writes that must have one winner (the lease, a tile's record) are
conditional where the store offers it (:mod:`outofcore.stores`).  Only the
client writes ``job.json``; each task writes its own tile record, after all
the tile's chunks are written, so concurrent tasks never rewrite a shared
object.  Records live under the journal's id: a fresh start (``overwrite``)
gets a new id, so a late record of an earlier job is never counted.

This module is the store of records only: :mod:`outofcore.resume` decides
whether a job starts afresh or resumes a journal, and the worker entry
(:func:`outofcore.recorded.run_recorded`) writes the task records.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore

from outofcore import arrays, manifest, stores
from outofcore.fingerprint import Fingerprint
from outofcore.locations import locate
from outofcore.targets import JOURNAL_DIR
from outofcore.writing import naming_full_disk, write_durably
from scheduler.errors import OutputExistsError
from scheduler.plan import PartialTask, TileTask

JOB_NAME = "job.json"
TILES_DIR = "tiles"
#: Partial tiles of split-k plans and their records (:mod:`outofcore.splitk`).
PARTIALS_DIR = "partials"
INPUTS_DIR = "inputs"
#: Every name a journal key is built from (journal ids, tile and part names, file names):
#: letters, digits, "_" and "-", and "." after the first, at most 200 characters. Names
#: read back from the store (a job document's journal id) are held to it before any key
#: or path is made of them, so an edited journal cannot point outside its folder.
#: (:mod:`outofcore.manifest` keeps it, with every other form of a key outofcore writes.)
SAFE_NAME = manifest.SAFE_NAME


class JournalError(OutputExistsError):
    """The output's journal holds what outofcore never writes (edited or damaged)."""


def safe_name(value: object, what: str) -> str:
    """Return ``value`` when it is a name journal keys may be built from (:data:`SAFE_NAME`).

    Raises
    ------
    JournalError
        Naming ``what`` and the value, for anything else (``..``, a ``/``, not a str).
    """
    if isinstance(value, str) and SAFE_NAME.fullmatch(value):
        return value
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    raise JournalError(
        f"{what} {shown} is not a name outofcore writes (letters, digits, '_', '-', '.'): "
        "the output's journal was edited or damaged, and nothing is read or written by it; "
        "pass overwrite=True to start the output over"
    )


#: Version of the journal's layout; a journal of another version is not resumed.
#: 2: inputs carry a content fingerprint.  3: the job names its product (transposes,
#: scales, addend, dtypes).  4: partial tiles of split-k plans; symmetric products.
#: 5: local input tokens carry the change time (a format-4 token never matches one, so
#: its journal is refused by format rather than called "rewritten").
FORMAT = 5
#: The field of a journal document holding the SHA-256 of the rest of it (:func:`seal`).
CHECKSUM = "checksum"
#: Records read at once when a resume checks them (:meth:`Journal.drop_damaged_records`).
RECORDS_IN_FLIGHT = 32
logger = logging.getLogger("outofcore")


def document_digest(document: dict[str, Any]) -> str:
    """SHA-256 of ``document`` without its :data:`CHECKSUM` field, as canonical JSON
    (sorted keys, no spaces): what :func:`seal` writes and :func:`is_sealed` checks."""
    rest = {key: value for key, value in document.items() if key != CHECKSUM}
    text = json.dumps(rest, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def seal(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with its checksum (:func:`document_digest`) in :data:`CHECKSUM`."""
    return {**document, CHECKSUM: document_digest(document)}


def is_sealed(document: Any) -> bool:
    """Whether ``document`` is a JSON object whose checksum matches the rest of it: no
    field of a journal document is trusted otherwise."""
    return isinstance(document, dict) and document.get(CHECKSUM) == document_digest(document)


def record_problem(
    record: dict[str, Any] | None, task: TileTask, part: PartialTask | None = None
) -> str | None:
    """Why ``record`` is not a sound record of ``task`` (or of its ``part``), or None.

    Sound: sealed (:func:`is_sealed`), and naming this tile, its rows and columns (and
    this part and its panels): a record copied over another's name is not.
    """
    if record is None:
        return "missing, or not a JSON object"
    if not is_sealed(record):
        return "its checksum does not match its contents"
    same = (
        record.get("tile") == task.key
        and record.get("rows") == [task.row0, task.row1]
        and record.get("cols") == [task.col0, task.col1]
    )
    if part is not None:
        same = same and record.get("part") == part.key and record.get("panels") == list(part.panels)
    return None if same else "it is the record of another tile"


@dataclass(frozen=True)
class Journal:
    """The journal of the output at ``prefix`` in ``store`` (see the module docstring)."""

    store: Store
    prefix: str

    @classmethod
    def for_output(
        cls, target: arrays.ArrayLike, storage_options: arrays.StorageOptions = None
    ) -> Journal:
        """The journal of an output given as a ``zarr.Array``, a local path or a URL
        (opened with fsspec ``storage_options``).

        Nothing is read or written here.
        """
        if isinstance(target, zarr.Array):
            return cls(store=target.store, prefix=target.path)
        location = locate(target, storage_options)
        if location.is_local:
            return cls(store=LocalStore(location.path), prefix="")
        return cls(store=stores.fsspec_store(location.target, storage_options), prefix="")

    # -- keys -------------------------------------------------------------------------
    def key(self, *parts: str) -> str:
        """Store key of ``parts`` inside the journal folder.

        Raises
        ------
        JournalError
            For a part that is not a :data:`SAFE_NAME` (``..``, ``a/b``, ...): no key
            leaves the journal folder, whatever a journal read back says.
        """
        for part in parts:
            safe_name(part, "the journal key part")
        return "/".join(p for p in (self.prefix.strip("/"), JOURNAL_DIR, *parts) if p)

    def tile_key(self, journal_id: str, tile: str) -> str:
        return self.key(TILES_DIR, journal_id, f"{tile}.json")

    @property
    def local_folder(self) -> str | None:
        """The journal's folder on disk for local stores, else None (for messages)."""
        if isinstance(self.store, LocalStore):
            return os.path.join(os.fspath(self.store.root), self.key())
        return None

    # -- raw access -------------------------------------------------------------------
    def _reader(self) -> Store:
        # A read-only twin: opening a writable LocalStore would create its folder.
        return self.store if self.store.read_only else self.store.with_read_only(True)

    def get_array(self, key: str) -> np.ndarray | None:
        """The object at ``key`` as bytes in a read-only numpy array (as the store read
        it, not copied), or None when there is none."""
        try:
            buffer = sync(self._reader().get(key, prototype=default_buffer_prototype()))
        except FileNotFoundError:
            return None
        return None if buffer is None else buffer.as_numpy_array()

    def get_bytes(self, key: str) -> bytes | None:
        """The object at ``key``, or None when there is none."""
        data = self.get_array(key)
        return None if data is None else data.tobytes()

    def get_json(self, key: str) -> dict[str, Any] | None:
        """The JSON document at ``key``, or None when there is none or it is unreadable."""
        data = self.get_bytes(key)
        if data is None:
            return None
        try:
            document = json.loads(data)
        except ValueError:
            return None
        return document if isinstance(document, dict) else None

    def get_versioned(
        self, key: str
    ) -> tuple[dict[str, Any] | None, bytes | None, stores.Version | None]:
        """The JSON document at ``key``, its bytes, and its version for
        :meth:`put_json`'s ``if_version`` (None where the store has no compare-and-swap)."""
        data, version = sync(stores.get_versioned(self._reader(), key))
        try:
            document = None if data is None else json.loads(data)
        except ValueError:
            document = None
        return (document if isinstance(document, dict) else None), data, version

    def put_json(
        self,
        key: str,
        document: dict[str, Any],
        *,
        only_if_absent: bool = False,
        if_version: stores.Version | None = None,
    ) -> bool | None:
        """Write ``document`` at ``key`` (atomically on local stores).

        ``only_if_absent``: only when nothing is there; ``if_version``: only
        when the object is still the version :meth:`get_versioned` returned.
        Returns whether it was written when the store knows (a conditional
        write), else None.
        """
        data = json.dumps(document, indent=1, sort_keys=True).encode()
        with naming_full_disk(f"writing {key} of the job journal", self.local_folder):
            if if_version is not None:
                return sync(stores.put_if_unchanged(self.store, key, data, if_version))
            if self.local_path(key) is not None:  # flushed to disk before it counts
                return self.put_bytes(key, data, only_if_absent=only_if_absent)
            if only_if_absent:
                return sync(stores.put_if_absent(self.store, key, data))
            sync(self.store.set(key, default_buffer_prototype().buffer.from_bytes(data)))
        return None

    def put_bytes(self, key: str, data: Any, *, only_if_absent: bool = False) -> bool | None:
        """Write ``data`` (bytes or a buffer) at ``key``; on a local disk durably
        (:func:`outofcore.writing.write_durably`: the bytes are on disk before the name
        is), elsewhere through the store (a PUT is durable once acknowledged).

        Returns whether it was written where that is known (a local disk, a conditional
        write), else None.
        """
        path = self.local_path(key)
        if path is not None:
            if self.store.read_only:
                raise OSError(f"the store {self.store} is read-only")
            root = os.path.join(os.fspath(self.store.root), self.prefix.strip("/"))
            return write_durably(path, data, exclusive=only_if_absent, root=root)
        if only_if_absent:
            return sync(stores.put_if_absent(self.store, key, bytes(data)))
        buffer = default_buffer_prototype().buffer
        value = buffer.from_bytes(data) if isinstance(data, bytes) else buffer.from_array_like(data)
        sync(self.store.set(key, value))
        return None

    def local_path(self, key: str) -> str | None:
        """The file of ``key`` on a local disk, or None for other stores."""
        if isinstance(self.store, LocalStore):
            return os.path.join(os.fspath(self.store.root), *key.split("/"))
        return None

    @property
    def conditional_writes(self) -> str | None:
        """How this journal's store creates an object only if absent atomically, or None."""
        return stores.conditional_writes(self.store)

    def delete(self, key: str) -> None:
        """Remove the object at exactly ``key`` if there is one (never a pattern or a
        folder: :func:`outofcore.manifest.delete_keys`)."""
        manifest.delete_keys(self.store, "", [key])

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` (a folder), empty when there is none."""

        async def collect() -> list[str]:
            return [key async for key in self._reader().list_prefix(prefix)]

        try:
            return sync(collect())
        except FileNotFoundError:
            return []

    # -- the job document ------------------------------------------------------------
    def read_job(self) -> dict[str, Any] | None:
        """The job document, or None when the output has no journal.

        Raises
        ------
        JournalError
            When it is there but damaged (not a JSON object; of this :data:`FORMAT`
            but not sealed: :func:`is_sealed`), or its journal id is not a
            :data:`SAFE_NAME` (it becomes part of keys).
        """
        data = self.get_bytes(self.key(JOB_NAME))
        if data is None:
            return None
        try:
            document = json.loads(data)
        except ValueError as exc:
            document, problem = None, f"not JSON ({exc})"
        else:
            problem = f"a JSON {type(document).__name__}, not an object"
        if not isinstance(document, dict):
            raise JournalError(
                f"the output's {JOURNAL_DIR}/{JOB_NAME} ({len(data)} bytes) is damaged: "
                f"{problem}; nothing is resumed or deleted by it: pass overwrite=True "
                "to start the output over"
            )
        if "journal_id" in document:
            safe_name(document["journal_id"], f"{JOURNAL_DIR}/{JOB_NAME}'s journal id")
        if document.get("format") == FORMAT and not is_sealed(document):  # older: refused later
            raise JournalError(
                f"the output's {JOURNAL_DIR}/{JOB_NAME} does not match its checksum: it was "
                "edited or damaged since outofcore wrote it, and nothing is resumed or deleted "
                "by it; pass overwrite=True to start the output over"
            )
        return document

    def write_job(self, document: dict[str, Any]) -> None:
        """Write the job document, sealed (:func:`seal`)."""
        self.put_json(self.key(JOB_NAME), seal(document))

    # -- input fingerprints ----------------------------------------------------------
    def write_input_tokens(self, journal_id: str, fingerprints: dict[str, Fingerprint]) -> None:
        """Keep every input object's version token, to name what changed on a refused resume."""
        document = {name: dict(fp.tokens) for name, fp in fingerprints.items()}
        self.put_json(self.key(INPUTS_DIR, f"{journal_id}.json"), seal(document))

    def read_input_tokens(self, journal_id: str) -> dict[str, dict[str, str]]:
        """The tokens :meth:`write_input_tokens` kept (empty when there are none, or they
        do not match their checksum)."""
        document = self.get_json(self.key(INPUTS_DIR, f"{journal_id}.json"))
        if not is_sealed(document):
            return {}
        return {name: tokens for name, tokens in document.items() if name != CHECKSUM}

    # -- tile records ----------------------------------------------------------------
    def done_tiles(self, journal_id: str) -> set[str]:
        """Keys (``tile-I-J``) of the tiles recorded done under ``journal_id``."""
        folder = self.key(TILES_DIR, journal_id) + "/"
        names = (key[len(folder) :] for key in self.list_keys(folder) if key.startswith(folder))
        return {name.removesuffix(".json") for name in names if _is_record(name)}

    def tile_times(self, journal_id: str, tile_rows: int | None = None) -> dict[str, float]:
        """When each tile recorded under ``journal_id`` was recorded (NaN: unknown).

        From listings only, no record is read (:func:`outofcore.stores.list_times`);
        with ``tile_rows`` (the plan's tiles down) one listing per row of tiles,
        many in flight.
        """
        prefixes = [f"tile-{i}-" for i in range(tile_rows)] if tile_rows else [""]
        folder = self.key(TILES_DIR, journal_id)
        listed = sync(stores.list_times(self._reader(), folder, prefixes))
        return {n.removesuffix(".json"): t for n, t in listed.items() if _is_record(n)}

    def record_tile(
        self,
        journal_id: str,
        task: TileTask,
        result: dict[str, Any],
        key: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Mark ``task`` done with its figures; call only after every chunk is written
        (and flushed: :mod:`outofcore.writing`).  The record is sealed (:func:`seal`).

        ``key``: the record's key when it is not the tile's own (a part of a split tile);
        ``extra``: more fields (a part's name, panels and its blocks' checksums).
        """
        record = {
            "tile": task.key,
            "index": task.index,
            "rows": [task.row0, task.row1],
            "cols": [task.col0, task.col1],
            "finished": time.time(),
            "result": result,
            **(extra or {}),
        }
        # A rerun of the task (Dask retried it) finds the first record there: it stays.
        self.put_json(key or self.tile_key(journal_id, task.key), seal(record), only_if_absent=True)

    def read_records(self, keys: list[str]) -> dict[str, dict[str, Any] | None]:
        """The JSON documents at ``keys`` (None: missing or not a JSON object), read
        :data:`RECORDS_IN_FLIGHT` at a time."""
        reader = self._reader()

        async def one(key: str, limit: asyncio.Semaphore) -> dict[str, Any] | None:
            async with limit:
                try:
                    buffer = await reader.get(key, prototype=default_buffer_prototype())
                except FileNotFoundError:
                    return None
            try:
                document = None if buffer is None else json.loads(buffer.to_bytes())
            except ValueError:
                return None
            return document if isinstance(document, dict) else None

        async def every() -> list[dict[str, Any] | None]:
            limit = asyncio.Semaphore(RECORDS_IN_FLIGHT)  # made on the loop that uses it
            return list(await asyncio.gather(*(one(key, limit) for key in keys)))

        return dict(zip(keys, sync(every()), strict=True)) if keys else {}

    def drop_damaged_records(
        self,
        journal_id: str,
        tiles: list[TileTask],
        parts: list[PartialTask] = (),
    ) -> dict[str, str]:
        """Read the records of ``tiles`` and ``parts`` (recorded done under
        ``journal_id``); delete each that is not sound (:func:`record_problem`), naming
        it in a warning, so its task runs again.  Returns ``{tile or part: why}`` of those.
        """
        wanted = {self.tile_key(journal_id, t.key): (t, None) for t in tiles}
        wanted |= {self.partial_key(journal_id, p.key): (p.tile, p) for p in parts}
        damaged = {}
        for key, record in self.read_records(list(wanted)).items():
            task, part = wanted[key]
            problem = record_problem(record, task, part)
            if problem is not None:
                name = part.key if part is not None else task.key
                damaged[name] = problem
                logger.warning(
                    "the journal record of %s %s (%s) is damaged (%s): it is computed again",
                    "part" if part is not None else "tile",
                    name,
                    self.local_path(key) or key,
                    problem,
                )
                self.delete(key)
        return damaged

    # -- partial tiles (split-k) -----------------------------------------------------
    def partial_key(self, journal_id: str, part: str, *rest: str) -> str:
        """Key of the record of ``part`` (``tile-I-J-kPofS``), or with ``rest`` of its data."""
        if rest:
            return self.key(PARTIALS_DIR, journal_id, part, *rest)
        return self.key(PARTIALS_DIR, journal_id, f"{part}.json")

    def done_partials(self, journal_id: str) -> set[str]:
        """Keys (``tile-I-J-kPofS``) of the parts of split tiles recorded under ``journal_id``."""
        folder = self.key(PARTIALS_DIR, journal_id) + "/"
        names = (key[len(folder) :] for key in self.list_keys(folder) if key.startswith(folder))
        return {name.removesuffix(".json") for name in names if _is_record(name)}

    def clear_partials(self, journal_id: str) -> None:
        """Delete the partial tiles and their records kept under ``journal_id``.

        Only keys of the forms outofcore writes there (:mod:`outofcore.manifest`), one
        at a time; anything else is left, and named in a warning.
        """
        folder = "/".join((JOURNAL_DIR, PARTIALS_DIR, safe_name(journal_id, "the journal id")))
        contents = manifest.output_contents(self.store, self.prefix, folder)
        manifest.delete_keys(self.store, self.prefix, contents.journal)
        manifest.remove_folders(
            self.store, self.prefix, (*contents.folders, folder, f"{JOURNAL_DIR}/{PARTIALS_DIR}")
        )  # other journals' partials may still be there: only empty folders go
        left = contents.strangers + contents.links
        if left:
            manifest.logger.warning(
                "left %s in the journal of %s: outofcore did not write them",
                manifest.show(left),
                self.where,
            )

    # -- starting over ---------------------------------------------------------------
    @property
    def where(self) -> str:
        """How messages name the output of this journal."""
        folder = self.local_folder
        if folder is not None:
            return os.path.dirname(folder)
        return "/".join(p for p in (str(self.store), self.prefix.strip("/")) if p)

    def _contents(self, under: str = "") -> manifest.Contents:
        """What is in the output (``under`` a folder of it), refused when anything there is
        not outofcore's (:meth:`outofcore.manifest.Contents.refusal`)."""
        contents = manifest.output_contents(self.store, self.prefix, under)
        refusal = contents.refusal(self.where)
        if refusal is not None:
            raise manifest.StrangersError(refusal)
        return contents

    def clear_journal(self) -> None:
        """Delete the job document and every record (the lease stays): only the keys of
        the forms outofcore writes (:mod:`outofcore.manifest`), one at a time.

        Raises
        ------
        outofcore.manifest.StrangersError
            Before anything is deleted, when the journal folder holds anything else.
        """
        contents = self._contents(JOURNAL_DIR)
        manifest.delete_keys(self.store, self.prefix, manifest.without_lease(contents.journal))
        manifest.remove_folders(self.store, self.prefix, contents.folders)

    def clear_output(self) -> None:
        """Delete the output's chunks and metadata, then its journal (the lease stays).

        Used to start over (``overwrite``) while holding the lease.  Only the keys
        outofcore writes are deleted, one at a time, found by one listing
        (:mod:`outofcore.manifest`): chunk keys of the array's own grid, its metadata,
        the journal's records; never a folder by walking it.

        Raises
        ------
        outofcore.manifest.StrangersError
            Before anything is deleted, when the output holds anything else (a user's
            file or folder, a symbolic link), naming it.
        """
        contents = self._contents()
        journal_folders = tuple(f for f in contents.folders if f.startswith(JOURNAL_DIR + "/"))
        manifest.delete_keys(self.store, self.prefix, contents.chunks)
        manifest.remove_folders(  # before the metadata: a kill leaves an array or a journal
            self.store, self.prefix, [f for f in contents.folders if f not in journal_folders]
        )
        manifest.delete_keys(self.store, self.prefix, contents.metadata)
        manifest.delete_keys(self.store, self.prefix, manifest.without_lease(contents.journal))
        manifest.remove_folders(self.store, self.prefix, journal_folders)

    def remove_empty_folders(self) -> None:
        """On local stores, remove the journal folder (and the output's) when left empty."""
        folder = self.local_folder
        if folder is None:
            return
        for path in (
            os.path.join(folder, TILES_DIR),
            os.path.join(folder, PARTIALS_DIR),
            os.path.join(folder, INPUTS_DIR),
            folder,
            os.path.dirname(folder),
        ):
            try:
                os.rmdir(path)
            except FileNotFoundError:
                continue
            except OSError:  # not empty
                return


def _is_record(name: str) -> bool:
    """Whether ``name`` (in a tiles folder) is a whole tile record, not a write in flight."""
    return "/" not in name and name.endswith(".json") and name.count(".") == 1


def timestamp(seconds: float | None) -> str | None:
    """ISO 8601 time in UTC, to the second."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")

"""The job journal kept with the output, so a job can resume after a crash.

Layout, under the output array's own path in its store (next to ``zarr.json``)::

    _outofcore/job.json                        the job: inputs, parameters, plan, state
    _outofcore/inputs/<journal_id>.json         every input object's version token
    _outofcore/tiles/<journal_id>/tile-I-J.json one small record per finished tile
    _outofcore/partials/<journal_id>/tile-I-J-kPofS.json      a finished part of a split tile
    _outofcore/partials/<journal_id>/tile-I-J-kPofS/rows-R.npy its partial sum, block by block
    _outofcore/partials/<journal_id>/tile-I-J-kPofS/sums.npy   its panel sums (centring.py)
    _outofcore/lease.json                      which job writes the output now (lease.py)

A stack's tiles are ``tile-I-J-bE`` (entry E; its parts ``tile-I-J-bE-kPofS``), and
their records name the entry (``batch``); the records of one matrix's product have
no such field.

Everything goes through the zarr store API (``get``, ``set``, ``list_prefix``,
``delete``), so any zarr store works; local paths, S3 (a moto server) and
Azure (Azurite) are tested.  Writes that must have one winner (the lease, a tile's record) are
conditional where the store offers it (:mod:`outofcore.storage.storeops`).  Only the
client writes ``job.json``; each task writes its own tile record, after all
the tile's chunks are written, so concurrent tasks never rewrite a shared
object.  Records live under the journal's id: a fresh start (``overwrite``)
gets a new id, so a late record of an earlier job is never counted.

This module is the store of records only (their keys and raw access:
:mod:`outofcore.journal.store`): :mod:`outofcore.journal.resume` decides
whether a job starts afresh or resumes a journal, and the worker entry
(:func:`outofcore.jobs.recorded.run_recorded`) writes the task records.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from zarr.core.sync import sync

from outofcore.journal.job_schema import FORMAT, check_job, string_mapping
from outofcore.journal.store import JournalError, JournalStore, parse_document, safe_name
from outofcore.planner.plan import PartialTask, TileTask
from outofcore.storage import deleting, manifest, storeops
from outofcore.storage.documents import DocumentError, NotRegularFileError
from outofcore.storage.fingerprint import Fingerprint
from outofcore.storage.manifest import JOURNAL_DIR

JOB_NAME = "job.json"
TILES_DIR = "tiles"
#: Partial tiles of split-k plans and their records (:mod:`outofcore.jobs.splitk`).
PARTIALS_DIR = "partials"
INPUTS_DIR = "inputs"
#: The field of a journal document holding the SHA-256 of the rest of it (:func:`seal`).
CHECKSUM = "checksum"
logger = logging.getLogger("outofcore")
#: A check of the records of tiles recorded done (``{tile: (task, record)}``) against
#: what is in the output now; returns ``{tile: why}`` of those to compute again
#: (:func:`outofcore.jobs.recorded.written_changes`).
WrittenCheck = Callable[[dict[str, tuple[TileTask, dict[str, Any]]]], dict[str, str]]

#: The most listings :meth:`Journal.tile_times` makes, one a row of tiles; more rows (or
#: a number read back from an edited journal) are listed at once.
MAX_ROW_LISTINGS = 4096


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

    Sound: sealed (:func:`is_sealed`), and naming this tile, its rows and columns, its
    entry of a stack or none (and this part and its panels): a record copied over
    another's name is not.
    """
    if record is None:
        return "missing, or not a JSON object"
    if not is_sealed(record):
        return "its checksum does not match its contents"
    same = (
        record.get("tile") == task.key
        and record.get("rows") == [task.row0, task.row1]
        and record.get("cols") == [task.col0, task.col1]
        and record.get("batch") == task.batch
    )
    if part is not None:
        same = same and record.get("part") == part.key and record.get("panels") == list(part.panels)
    return None if same else "it is the record of another tile"


@dataclass(frozen=True)
class Journal(JournalStore):
    """The journal of the output at ``prefix`` in ``store`` (see the module docstring);
    its keys and raw access are :class:`outofcore.journal.store.JournalStore`'s."""

    # -- keys -------------------------------------------------------------------------
    def tile_key(self, journal_id: str, tile: str) -> str:
        return self.key(TILES_DIR, journal_id, f"{tile}.json")

    # -- the job document ------------------------------------------------------------
    def read_job(self) -> dict[str, Any] | None:
        """The job document, or None when the output has no journal.

        Read within bounds and checked field by field (:func:`check_job`).

        Raises
        ------
        JournalError
            When it is there but damaged or hostile, naming the file and what is wrong:
            not a regular file (a FIFO, a folder, a link: never opened as one), too
            large, too deep or not JSON, not a JSON object; of this :data:`FORMAT` but
            not sealed (:func:`is_sealed`); a field of the wrong type or not a
            finite number (even resealed); or a journal id that is not a
            :data:`SAFE_NAME` (it becomes part of keys).
        """
        key = self.key(JOB_NAME)
        advice = "nothing is resumed or deleted by it: pass overwrite=True to start the output over"
        try:
            data = self.get_bounded(key)
        except NotRegularFileError as exc:  # a FIFO would have blocked the read for ever
            raise JournalError(f"the output's {JOURNAL_DIR}/{JOB_NAME}: {exc}; {advice}") from None
        if data is None:
            return None
        try:
            document = parse_document(data, self.name_of(key))
        except DocumentError as exc:
            document, problem = None, str(exc)
        else:
            problem = f"a JSON {type(document).__name__}, not an object"
        if not isinstance(document, dict):
            raise JournalError(
                f"the output's {JOURNAL_DIR}/{JOB_NAME} ({len(data)} bytes) is damaged: "
                f"{problem}; {advice}"
            )
        if "journal_id" in document:
            safe_name(document["journal_id"], f"{JOURNAL_DIR}/{JOB_NAME}'s journal id")
        if document.get("format") == FORMAT and not is_sealed(document):  # older: refused later
            raise JournalError(
                f"the output's {JOURNAL_DIR}/{JOB_NAME} does not match its checksum: it was "
                "edited or damaged since outofcore wrote it, and nothing is resumed or deleted "
                "by it; pass overwrite=True to start the output over"
            )
        try:
            check_job(document, self.name_of(key))
        except DocumentError as exc:
            raise JournalError(f"{exc}; {advice}") from None
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
        """The tokens :meth:`write_input_tokens` kept (empty when there are none, they
        do not match their checksum, or are not a mapping of names to strings)."""
        document = self.get_json(self.key(INPUTS_DIR, f"{journal_id}.json"))
        if not is_sealed(document):
            return {}
        kept = {name: tokens for name, tokens in document.items() if name != CHECKSUM}
        return kept if all(string_mapping(tokens) for tokens in kept.values()) else {}

    # -- tile records ----------------------------------------------------------------
    def done_tiles(self, journal_id: str) -> set[str]:
        """Keys (``tile-I-J``, ``tile-I-J-bE``) of the tiles recorded done under ``journal_id``."""
        folder = self.key(TILES_DIR, journal_id) + "/"
        names = (key[len(folder) :] for key in self.list_keys(folder) if key.startswith(folder))
        return {name.removesuffix(".json") for name in names if _is_record(name)}

    def tile_times(self, journal_id: str, tile_rows: int | None = None) -> dict[str, float]:
        """When each tile recorded under ``journal_id`` was recorded (NaN: unknown).

        From listings only, no record is read (:func:`outofcore.storage.storeops.list_times`);
        with ``tile_rows`` (the plan's tiles down) one listing per row of tiles (of
        every entry of a stack), many in flight.
        """
        many = tile_rows is not None and 0 < tile_rows <= MAX_ROW_LISTINGS
        prefixes = [f"tile-{i}-" for i in range(tile_rows)] if many else [""]
        folder = self.key(TILES_DIR, journal_id)
        listed = sync(storeops.list_times(self._reader(), folder, prefixes))
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
        (and flushed: :mod:`outofcore.storage.writing`).  The record is sealed (:func:`seal`).

        ``key``: the record's key when it is not the tile's own (a part of a split tile);
        ``extra``: more fields (a part's name, panels and its blocks' checksums).
        """
        record = {
            "tile": task.key,
            "index": task.index,
            "rows": [task.row0, task.row1],
            "cols": [task.col0, task.col1],
            **({} if task.batch is None else {"batch": task.batch}),
            "finished": time.time(),
            "result": result,
            **(extra or {}),
        }
        # A rerun of the task (Dask retried it) finds the first record there: it stays.
        key = key or self.tile_key(journal_id, task.key)
        if self.put_json(key, seal(record), only_if_absent=True) is False and self._not_a_file(key):
            self.delete(key)  # an empty folder, a FIFO, a link: never a folder holding files
            self.put_json(key, seal(record), only_if_absent=True)

    def _not_a_file(self, key: str) -> bool:
        """Whether what is at the record ``key`` is not a regular file (on a local disk:
        a folder, a FIFO, a link, where a record must be), named in a warning."""
        try:
            self.get_bounded(key, 0)
        except NotRegularFileError as exc:
            logger.warning("%s: it is replaced by the record of its task", exc)
            return True
        return False

    def drop_damaged_records(
        self,
        journal_id: str,
        tiles: list[TileTask],
        parts: Iterable[PartialTask] = (),
        written: WrittenCheck | None = None,
    ) -> dict[str, str]:
        """Read the records of ``tiles`` and ``parts`` (recorded done under
        ``journal_id``); delete each that is not sound (:func:`record_problem`), or whose
        tile's output ``written`` finds changed, naming it in a warning, so its task runs
        again.  Returns ``{tile or part: why}`` of those.
        """
        wanted = {self.tile_key(journal_id, t.key): (t, None) for t in tiles}
        wanted |= {self.partial_key(journal_id, p.key): (p.tile, p) for p in parts}
        damaged: dict[str, tuple[str, str, str]] = {}  # name: (key, kind, why)
        sound: dict[str, tuple[TileTask, dict[str, Any]]] = {}
        for key, record in self.read_records(list(wanted)).items():
            task, part = wanted[key]
            problem = record_problem(record, task, part)
            if problem is not None:
                name = part.key if part is not None else task.key
                damaged[name] = (key, "part" if part is not None else "tile", problem)
            elif part is None:
                sound[task.key] = (task, record)
        changed = written(sound) if written is not None and sound else {}
        for name, why in changed.items():
            damaged[name] = (self.tile_key(journal_id, name), "output", why)
        for name, (key, kind, why) in damaged.items():
            if kind == "output":
                logger.warning(
                    "tile %s is recorded done, but the output no longer holds what it wrote "
                    "(%s): it is computed again",
                    name,
                    why,
                )
            else:
                logger.warning(
                    "the journal record of %s %s (%s) is damaged (%s): it is computed again",
                    kind,
                    name,
                    self.name_of(key),
                    why,
                )
            self.delete(key)
        return {name: why for name, (_, _, why) in damaged.items()}

    # -- partial tiles (split-k) -----------------------------------------------------
    def partial_key(self, journal_id: str, part: str, *rest: str) -> str:
        """Key of the record of ``part`` (``tile-I-J[-bE]-kPofS``), or with ``rest`` of its data."""
        if rest:
            return self.key(PARTIALS_DIR, journal_id, part, *rest)
        return self.key(PARTIALS_DIR, journal_id, f"{part}.json")

    def done_partials(self, journal_id: str) -> set[str]:
        """Keys (``tile-I-J[-bE]-kPofS``) of the parts of split tiles recorded under
        ``journal_id``."""
        folder = self.key(PARTIALS_DIR, journal_id) + "/"
        names = (key[len(folder) :] for key in self.list_keys(folder) if key.startswith(folder))
        return {name.removesuffix(".json") for name in names if _is_record(name)}

    def clear_partials(self, journal_id: str) -> None:
        """Delete the partial tiles and their records kept under ``journal_id``.

        Only keys of the forms outofcore writes there (:mod:`outofcore.storage.manifest`), one
        at a time; anything else is left, and named in a warning.
        """
        folder = "/".join((JOURNAL_DIR, PARTIALS_DIR, safe_name(journal_id, "the journal id")))
        contents = manifest.output_contents(self.store, self.prefix, folder)
        deleting.delete_keys(self.store, self.prefix, contents.journal)
        deleting.remove_folders(
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
    def _contents(self, under: str = "") -> manifest.Contents:
        """What is in the output (``under`` a folder of it), refused when anything there is
        not outofcore's (:meth:`outofcore.storage.manifest.Contents.refusal`)."""
        contents = manifest.output_contents(self.store, self.prefix, under)
        refusal = contents.refusal(self.where)
        if refusal is not None:
            raise manifest.StrangersError(refusal)
        return contents

    def clear_journal(self) -> None:
        """Delete the job document and every record (the lease stays): only the keys of
        the forms outofcore writes (:mod:`outofcore.storage.manifest`), one at a time.

        Raises
        ------
        outofcore.storage.manifest.StrangersError
            Before anything is deleted, when the journal folder holds anything else.
        """
        contents = self._contents(JOURNAL_DIR)
        deleting.delete_keys(self.store, self.prefix, manifest.without_lease(contents.journal))
        deleting.remove_folders(self.store, self.prefix, contents.folders)

    def clear_output(self) -> None:
        """Delete the output's chunks and metadata, then its journal (the lease stays).

        Used to start over (``overwrite``) while holding the lease.  Only the keys
        outofcore writes are deleted, one at a time, found by one listing
        (:mod:`outofcore.storage.manifest`): chunk keys of the array's own grid, its metadata,
        the journal's records; never a folder by walking it.

        Raises
        ------
        outofcore.storage.manifest.StrangersError
            Before anything is deleted, when the output holds anything else (a user's
            file or folder, a symbolic link), naming it.
        """
        contents = self._contents()
        journal_folders = tuple(f for f in contents.folders if f.startswith(JOURNAL_DIR + "/"))
        deleting.delete_keys(self.store, self.prefix, contents.chunks)
        deleting.remove_folders(  # before the metadata: a kill leaves an array or a journal
            self.store, self.prefix, [f for f in contents.folders if f not in journal_folders]
        )
        deleting.delete_keys(self.store, self.prefix, contents.metadata)
        deleting.delete_keys(self.store, self.prefix, manifest.without_lease(contents.journal))
        deleting.remove_folders(self.store, self.prefix, journal_folders)

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
    """ISO 8601 time in UTC, to the second (None for None, or a time no clock shows)."""
    if seconds is None:
        return None
    try:
        return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError, TypeError):
        return None

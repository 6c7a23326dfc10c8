"""The job journal kept with the output, so a job can resume after a crash.

Layout, under the output array's own path in its store (next to ``zarr.json``)::

    _outofcore/job.json                        the job: inputs, parameters, plan, state
    _outofcore/inputs/<journal_id>.json         every input object's version token
    _outofcore/tiles/<journal_id>/tile-I-J.json one small record per finished tile
    _outofcore/lease.json                      which job writes the output now (lease.py)

Everything goes through the zarr store API (``get``, ``set``, ``list_prefix``,
``delete``), so any zarr store works; local paths are tested.  Only the
client writes ``job.json``; each task writes its own tile record, after all
the tile's chunks are written, so concurrent tasks never rewrite a shared
object.  Records live under the journal's id: a fresh start (``overwrite``)
gets a new id, so a late record of an earlier job is never counted.

A rerun of the same job (same inputs, shapes, dtypes, chunkings, memory
budget and tile sizes) into an incomplete output resumes: the tiles with a
record are skipped and the plan's tile sizes are forced from the journal.
"Same inputs" includes their content: the job records a fingerprint of every
input object (:mod:`outofcore.fingerprint`), and an input rewritten since is
refused, naming the objects that changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from typing import Any

import zarr
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import FsspecStore, LocalStore

from outofcore import arrays
from outofcore.errors import OutputExistsError
from outofcore.fingerprint import Fingerprint, changes
from outofcore.tile import TileJob, TileResult, compute_tile
from outofcore.writing import naming_full_disk
from scheduler.plan import TileTask

#: Folder of the journal inside the output array's path.
JOURNAL_DIR = "_outofcore"
JOB_NAME = "job.json"
TILES_DIR = "tiles"
INPUTS_DIR = "inputs"
#: Version of the journal's layout; a journal of another version is not resumed.
#: 2: inputs carry a content fingerprint.
FORMAT = 2


class ResumeError(OutputExistsError):
    """The output holds the journal of a different job (other inputs or parameters)."""


@dataclass(frozen=True)
class Journal:
    """The journal of the output at ``prefix`` in ``store`` (see the module docstring)."""

    store: Store
    prefix: str

    @classmethod
    def for_output(cls, target: arrays.ArrayLike) -> Journal:
        """The journal of an output given as a ``zarr.Array``, a local path or a URL.

        Nothing is read or written here.
        """
        if isinstance(target, zarr.Array):
            return cls(store=target.store, prefix=target.path)
        location = os.fspath(target)
        if "://" in location and not location.startswith("file://"):
            return cls(store=FsspecStore.from_url(location), prefix="")
        return cls(store=LocalStore(location.removeprefix("file://")), prefix="")

    # -- keys -------------------------------------------------------------------------
    def key(self, *parts: str) -> str:
        """Store key of ``parts`` inside the journal folder."""
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

    def get_bytes(self, key: str) -> bytes | None:
        """The object at ``key``, or None when there is none."""
        try:
            buffer = sync(self._reader().get(key, prototype=default_buffer_prototype()))
        except FileNotFoundError:
            return None
        return None if buffer is None else buffer.to_bytes()

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

    def put_json(self, key: str, document: dict[str, Any], *, only_if_absent: bool = False) -> None:
        """Write ``document`` at ``key`` (atomically on local stores)."""
        buffer = default_buffer_prototype().buffer.from_bytes(
            json.dumps(document, indent=1, sort_keys=True).encode()
        )
        with naming_full_disk(f"writing {key} of the job journal", self.local_folder):
            if only_if_absent:
                sync(self.store.set_if_not_exists(key, buffer))
            else:
                sync(self.store.set(key, buffer))

    def delete(self, key: str) -> None:
        """Remove the object at ``key`` if there is one."""
        sync(self.store.delete(key))

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
        """The job document, or None when the output has no journal."""
        return self.get_json(self.key(JOB_NAME))

    def write_job(self, document: dict[str, Any]) -> None:
        self.put_json(self.key(JOB_NAME), document)

    # -- input fingerprints ----------------------------------------------------------
    def write_input_tokens(self, journal_id: str, fingerprints: dict[str, Fingerprint]) -> None:
        """Keep every input object's version token, to name what changed on a refused resume."""
        document = {name: dict(fp.tokens) for name, fp in fingerprints.items()}
        self.put_json(self.key(INPUTS_DIR, f"{journal_id}.json"), document)

    def read_input_tokens(self, journal_id: str) -> dict[str, dict[str, str]]:
        """The tokens :meth:`write_input_tokens` kept (empty when there are none)."""
        return self.get_json(self.key(INPUTS_DIR, f"{journal_id}.json")) or {}

    # -- tile records ----------------------------------------------------------------
    def done_tiles(self, journal_id: str) -> set[str]:
        """Keys (``tile-I-J``) of the tiles recorded done under ``journal_id``."""
        folder = self.key(TILES_DIR, journal_id) + "/"
        done = set()
        for key in self.list_keys(folder):
            name = key.rsplit("/", 1)[-1]
            # Temporary files of writes in flight end otherwise; only whole records count.
            if key.startswith(folder) and name.endswith(".json") and name.count(".") == 1:
                done.add(name.removesuffix(".json"))
        return done

    def tile_records(self, journal_id: str) -> list[dict[str, Any]]:
        """Every tile record under ``journal_id`` (read concurrently)."""
        keys = [self.tile_key(journal_id, tile) for tile in sorted(self.done_tiles(journal_id))]
        reader = self._reader()
        prototype = default_buffer_prototype()

        async def read_all() -> list[Any]:
            return await asyncio.gather(*(reader.get(key, prototype=prototype) for key in keys))

        records = []
        for buffer in sync(read_all()) if keys else []:
            if buffer is not None:
                try:
                    records.append(json.loads(buffer.to_bytes()))
                except ValueError:
                    continue
        return records

    def record_tile(self, journal_id: str, task: TileTask, result: TileResult) -> None:
        """Mark ``task`` done; call only after every chunk of the tile is written."""
        record = {
            "tile": task.key,
            "index": task.index,
            "rows": [task.row0, task.row1],
            "cols": [task.col0, task.col1],
            "finished": time.time(),
            "result": asdict(result),
        }
        self.put_json(self.tile_key(journal_id, task.key), record)

    # -- starting over ---------------------------------------------------------------
    def clear_journal(self) -> None:
        """Delete the job document and every tile record (the lease stays)."""
        sync(self.store.delete_dir(self.key(TILES_DIR)))
        sync(self.store.delete_dir(self.key(INPUTS_DIR)))
        self.delete(self.key(JOB_NAME))

    def clear_output(self) -> None:
        """Delete everything at the output's path except the journal folder, then the journal.

        Used to start over (``overwrite``) while holding the lease, which a plain
        ``zarr.create_array(overwrite=True)`` would delete too.
        """

        async def children() -> list[str]:
            return [child async for child in self.store.list_dir(self.prefix)]

        try:
            names = sync(children())
        except FileNotFoundError:
            names = []
        for name in names:
            if name == JOURNAL_DIR:
                continue
            key = f"{self.prefix.strip('/')}/{name}" if self.prefix.strip("/") else name
            with contextlib.suppress(ValueError, NotADirectoryError):  # a file, not a folder
                sync(self.store.delete_dir(key))
            self.delete(key)
        self.clear_journal()

    def remove_empty_folders(self) -> None:
        """On local stores, remove the journal folder (and the output's) when left empty."""
        folder = self.local_folder
        if folder is None:
            return
        for path in (
            os.path.join(folder, TILES_DIR),
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


@dataclass(frozen=True)
class RecordedJob:
    """A :class:`~outofcore.tile.TileJob` whose tasks record each finished tile."""

    tile_job: TileJob
    journal: Journal
    journal_id: str
    #: Raises unless this job still owns the output (:class:`outofcore.lease.OwnerCheck`);
    #: called before every write and before the record.  None: no check.
    owner_check: Callable[[], None] | None = None


def compute_and_record(job: RecordedJob, task: TileTask) -> TileResult:
    """Compute and write one tile (:func:`~outofcore.tile.compute_tile`), then record it.

    The record is written only after ``compute_tile`` returned, that is after
    every chunk of the tile is in the store.  A tile already recorded is not
    computed again: Dask reruns a finished task when the worker holding its
    result dies before the client fetched it, and then the record's figures
    are returned instead.  A task whose job lost the output's lease (its
    client died and another job took over) stops before writing anything.
    """
    done = recorded_result(job.journal.get_json(job.journal.tile_key(job.journal_id, task.key)))
    if done is not None:
        return done
    result = compute_tile(job.tile_job, task, before_write=job.owner_check)
    if job.owner_check is not None:
        job.owner_check()
    job.journal.record_tile(job.journal_id, task, result)
    return result


def recorded_result(record: dict[str, Any] | None) -> TileResult | None:
    """The :class:`~outofcore.tile.TileResult` kept in a tile record, if it has one."""
    if record is None or not isinstance(record.get("result"), dict):
        return None
    try:
        return TileResult(**{f.name: record["result"][f.name] for f in fields(TileResult)})
    except (KeyError, TypeError):
        return None


# -- what identifies a job ---------------------------------------------------------------
def describe_input(array: zarr.Array, content: Fingerprint) -> dict[str, Any]:
    """What identifies an input: where it lives, shape, dtype, chunking and content."""
    return {
        "location": arrays._location(array) or "memory",
        "shape": list(array.shape),
        "dtype": str(array.dtype),
        "chunks": list(array.chunks),
        "shards": list(array.shards) if array.shards else None,
        "content": content.summary(),
    }


def job_identity(
    inputs: dict[str, zarr.Array],
    fingerprints: dict[str, Fingerprint],
    budget_bytes: int,
    tile: tuple[int, int] | None,
    tk: int | None,
) -> dict[str, Any]:
    """What must match for a rerun to resume: inputs and their content, budget, tile sizes."""
    return {
        "inputs": {name: describe_input(inputs[name], fingerprints[name]) for name in inputs},
        "memory": budget_bytes,
        "tile": list(tile) if tile else None,
        "tk": tk,
    }


def differences(
    journal: dict[str, Any],
    now: dict[str, Any],
    tokens_then: dict[str, dict[str, str]] | None = None,
    fingerprints: dict[str, Fingerprint] | None = None,
) -> list[str]:
    """Human-readable differences between a journal's identity and this job's.

    With the journal's input tokens and this job's fingerprints, a changed
    input names the objects that changed.
    """
    found = []
    then_inputs, now_inputs = journal.get("inputs", {}), now["inputs"]
    for name in ("A", "B"):
        then, current = then_inputs.get(name, {}), now_inputs[name]
        for field in ("location", "shape", "dtype", "chunks", "shards"):
            if then.get(field) != current[field]:
                was, now_value = _show(then.get(field)), _show(current[field])
                found.append(f"input {name} {field} was {was}, now {now_value}")
        was, content = then.get("content") or {}, current["content"]
        if was.get("digest") != content["digest"]:
            if tokens_then and fingerprints and name in tokens_then:
                detail = changes(tokens_then[name], fingerprints[name].tokens)
            else:
                detail = (
                    f"{was.get('objects')} objects of {was.get('bytes')} bytes then, "
                    f"{content['objects']} of {content['bytes']} now"
                )
            found.append(f"input {name} was rewritten since the job started ({detail})")
    if journal.get("memory") != now["memory"]:
        found.append(f"memory budget was {journal.get('memory')} bytes, now {now['memory']} bytes")
    for field in ("tile", "tk"):
        if now[field] is not None and journal.get(field) != now[field]:
            found.append(f"{field} was {_show(journal.get(field))}, now {_show(now[field])}")
    return found


def _show(value: Any) -> str:
    if isinstance(value, list):
        return (
            "x".join(str(v) for v in value)
            if all(isinstance(v, int) for v in value)
            else str(value)
        )
    return repr(value) if isinstance(value, str) else str(value)


def new_job_document(
    journal_id: str,
    identity: dict[str, Any],
    plan_summary: dict[str, Any],
    tile: tuple[int, int],
    tk: int,
    backend: str,
) -> dict[str, Any]:
    """The job document of a fresh start."""
    now = time.time()
    return {
        "format": FORMAT,
        "journal_id": journal_id,
        "created": now,
        "created_text": timestamp(now),
        "inputs": identity["inputs"],
        "memory": identity["memory"],
        "tile": list(tile),
        "tk": tk,
        "tiles_total": plan_summary["tiles"],
        "plan": plan_summary,
        "backend": backend,
        "complete": False,
        "completed": None,
        "runs": [],
    }


def add_run(document: dict[str, Any], job_id: str, skipped: int) -> dict[str, Any]:
    """The job document with this run (job id, host, pid, start, tiles skipped) appended."""
    now = time.time()
    run = {
        "job_id": job_id,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": now,
        "started_text": timestamp(now),
        "tiles_skipped": skipped,
    }
    return {**document, "runs": [*document.get("runs", []), run]}


def timestamp(seconds: float | None) -> str | None:
    """ISO 8601 time in UTC, to the second."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Start:
    """How a job starts on its output: fresh, or resuming a journal."""

    #: The output array to write into, or None to create one at the path.
    existing: zarr.Array | None
    #: The job document to resume, or None for a fresh start.
    document: dict[str, Any] | None
    #: Delete what is at the output path (data and journal) before creating it.
    clear_output: bool = False
    #: Delete the journal (not the data) of an array given as the output.
    clear_journal: bool = False

    @property
    def resuming(self) -> bool:
        return self.document is not None


def inspect_output(
    target: arrays.ArrayLike,
    journal: Journal,
    shape: tuple[int, int],
    dtype: Any,
    identity: dict[str, Any],
    overwrite: bool,
    fingerprints: dict[str, Fingerprint] | None = None,
) -> Start:
    """Decide how to start on the output ``target``; reads, never writes.

    * nothing there (or only a journal folder): a fresh start;
    * an incomplete output whose journal matches ``identity``: resume it;
    * ``overwrite``: start over;
    * a ``zarr.Array`` given as the output without a journal, or complete:
      write into it afresh (as before journals existed).

    Raises
    ------
    OutputExistsError
        For an existing path holding a complete output, or no journal.
    ResumeError
        When the journal belongs to other inputs or parameters (naming the
        differences) or to another journal format.
    """
    if isinstance(target, zarr.Array):
        existing = arrays.open_existing_output(target, shape, dtype, overwrite)
        document = journal.read_job()
        if document is None or document.get("complete") or overwrite:
            return Start(existing=existing, document=None, clear_journal=document is not None)
        _check_resumable(document, identity, journal, arrays.describe(target), fingerprints)
        return Start(existing=existing, document=document)

    where = os.fspath(target)
    if overwrite or not _holds_output(where):
        return Start(existing=None, document=None, clear_output=True)
    try:
        existing = zarr.open_array(where, mode="r+")
    except (FileNotFoundError, KeyError, ValueError, OSError, zarr.errors.NodeTypeValidationError):
        raise OutputExistsError(_exists_message(where, "it is not a zarr array")) from None
    document = journal.read_job()
    if document is None:
        raise OutputExistsError(
            _exists_message(where, "it has no outofcore job journal, so there is nothing to resume")
        )
    if document.get("complete"):
        raise OutputExistsError(
            _exists_message(
                where,
                f"it holds the complete result of an earlier job, finished "
                f"{timestamp(document.get('completed'))}",
            )
        )
    _check_resumable(document, identity, journal, where, fingerprints)
    if tuple(existing.shape) != tuple(shape) or str(existing.dtype) != str(dtype):
        raise ResumeError(
            f"the output {where!r} is {existing.shape} {existing.dtype}, but A @ B is "
            f"{shape} {dtype}; pass overwrite=True (--overwrite) to start over"
        )
    return Start(existing=existing, document=document)


def _holds_output(where: str) -> bool:
    """Whether something other than a bare journal folder is at ``where``."""
    if "://" in where and not where.startswith("file://"):
        return arrays._exists(where)
    local = where.removeprefix("file://")
    if not os.path.exists(local):
        return False
    return not os.path.isdir(local) or bool(set(os.listdir(local)) - {JOURNAL_DIR})


def _exists_message(where: str, why: str) -> str:
    return (
        f"the output {where!r} already exists; pass overwrite=True (--overwrite) to replace it, "
        f"or choose another path ({why})"
    )


def _check_resumable(
    document: dict[str, Any],
    identity: dict[str, Any],
    journal: Journal,
    where: str,
    fingerprints: dict[str, Fingerprint] | None,
) -> None:
    if document.get("format") != FORMAT or not document.get("journal_id"):
        raise ResumeError(
            f"the output {where!r} holds a job journal of format {document.get('format')!r}, "
            f"this version reads format {FORMAT}; pass overwrite=True (--overwrite) to start over"
        )
    found = differences(document, identity)
    if found and fingerprints:  # name the objects of a changed input
        tokens = journal.read_input_tokens(document["journal_id"])
        found = differences(document, identity, tokens, fingerprints)
    if found:
        done = len(journal.done_tiles(document["journal_id"]))
        raise ResumeError(
            f"the output {where!r} holds an unfinished job ({done} of "
            f"{document.get('tiles_total')} tiles done) for other inputs or parameters: "
            f"{'; '.join(found)}. Rerun with the original inputs and parameters to resume it, "
            "or pass overwrite=True (--overwrite) to start over"
        )

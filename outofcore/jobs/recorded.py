"""The recorded-task protocol, once for every kind of task (tile, split part, reduction).

A task of a job (a worker entry) skips work already recorded, computes, checks that
its job still owns the output, then records itself::

    record_key = ...                          # where its record lives in the journal
    if the record exists: return its figures  # Dask reran a finished task
    result = compute()                        # writes whole chunks (or a part's sum)
    owner_check()                             # its job lost the lease: stop, record nothing
    record(result)                            # create-only-if-absent (outofcore.journal.records)

A record is written only after everything the task writes is in the store, so a
recorded task is a finished one; a task killed halfway is simply run again.  A tile's
record keeps what the tile wrote (:data:`WRITTEN`: each stored object of its output,
chunk or shard, with its size and SHA-256: of the bytes each chunk file's write wrote,
durable before the write returned, or read back once written where zarr wrote it
(:mod:`outofcore.storage.digests`, :func:`record_written_tile`); a resume checks
them (:func:`written_changes`) and computes again a tile whose object is missing or
changed, so a deleted or swapped chunk is never taken for a finished tile.  A record
without them (an older version's) counts as not done: its tile is computed again.
The compute functions (:mod:`outofcore.compute.tile`, :mod:`outofcore.jobs.splitk`) know
nothing of the journal: :func:`run_recorded` holds it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from outofcore.compute import peaks
from outofcore.compute.tile import TaskIO, compute_tile
from outofcore.compute.tile_job import TileJob
from outofcore.compute.worker_context import worker_context
from outofcore.journal.records import Journal, is_sealed
from outofcore.journal.store import parse_document
from outofcore.operands.product import Product
from outofcore.planner.plan import TileTask
from outofcore.storage import deleting
from outofcore.storage.digests import Digests, file_digest, object_digest
from outofcore.storage.documents import DocumentError, entry_kind
from outofcore.storage.manifest import StrangersError, local_base

#: Where outofcore says what is not the result: here, damaged records found by a task.
logger = logging.getLogger("outofcore")
#: The field of a tile's record holding what it wrote: ``{key: [bytes, sha256] or None}``
#: for each stored object (chunk, or shard) of the output holding the tile, its key
#: relative to the output (None: the store holds none, as zarr leaves a chunk of the
#: fill value).
WRITTEN = "chunks"
#: Stored objects read at once to take or check their digests...
OBJECTS_IN_FLIGHT = 32
#: ... and at most about this many of their decoded bytes (a shard may be a whole tile).
DIGEST_BYTES_IN_FLIGHT = 256 * 2**20
#: How many changed objects a message names.
NAMED = 3


@dataclass(frozen=True, kw_only=True)
class TileResult(TaskIO):
    """What a task measured (every kind: tile, split part, reduction): what its own work
    measured (:class:`~outofcore.compute.tile.TaskIO`, the one definition of those
    figures) and what the wrapper measures around it; the client adds these up for the
    job summary, and the task's journal record keeps them."""

    key: str
    #: The task's wall time, from its start to its record (the wrapper's clock).
    seconds: float
    #: Peak resident bytes of the worker process while the task ran (outofcore.compute.peaks).
    peak_rss_bytes: int
    worker: str
    #: Host bytes the worker process keeps between tasks once this task is done
    #: (every thread's panels and accumulators, and the chunk-file I/O buffers).
    kept_bytes: int = 0
    #: That peak over the process's resident bytes when the task began: how much the task
    #: grew its process (the first task of a fresh worker includes what it keeps for the
    #: tasks after it: buffers, its engine; later ones reuse them).
    task_peak_bytes: int = 0


#: Where a task's time went beside read wait, compute and write (:class:`TileResult`);
#: the job summary adds each up (:func:`outofcore.jobs.tasks.summarize`).
TASK_FIGURES = (
    "setup_seconds",
    "decode_cpu_seconds",
    "write_cpu_seconds",
    "kernel_seconds",
    "copy_seconds",
    "first_launch_seconds",
)


@dataclass(frozen=True)
class RecordedJob:
    """A :class:`~outofcore.compute.tile_job.TileJob` whose tasks record each finished task in the
    output's journal."""

    tile_job: TileJob
    journal: Journal
    journal_id: str
    #: Raises unless this job still owns the output (:class:`outofcore.journal.lease.OwnerCheck`);
    #: called before every write and before the record.  None: no check.
    owner_check: Callable[[], None] | None = None

    def check_owner(self) -> None:
        """Raise when this job no longer owns the output (its lease was taken over)."""
        if self.owner_check is not None:
            self.owner_check()


def run_recorded(
    job: RecordedJob,
    record_key: str,
    result_key: str,
    compute: Callable[[], TaskIO],
    record: Callable[[dict[str, Any]], None],
) -> TileResult:
    """Run one task under the protocol of the module docstring.

    ``record_key`` is the task's record in ``job.journal``; ``compute`` does the
    work and returns what it read and wrote; ``record`` writes the record holding the
    result's figures, named ``result_key``.  Everything else a result says is measured
    here, for every kind alike: the task's seconds, its memory (:mod:`outofcore.compute.peaks`:
    the process's peak while it ran, and that peak over the process's size when it
    began), the worker, and what the worker keeps after it.
    """
    done = sound_result(job.journal, record_key)
    if done is not None:
        return done
    started = time.perf_counter()
    token, rss_before = peaks.start()
    io = compute()
    peak = peaks.finish(token)  # this process's peak while the task ran, not its lifetime's
    show_on_dashboard(io)
    job.check_owner()
    result = TileResult(
        key=result_key,
        **asdict(io),
        seconds=time.perf_counter() - started,
        peak_rss_bytes=peak,
        task_peak_bytes=max(0, peak - rss_before),
        worker=worker_name(),
        kept_bytes=worker_context().kept_bytes(),
    )
    record(asdict(result))
    return result


#: The figures of a task shown on Dask's dashboard (Fine Performance Metrics), by name.
#: Their unit is not Dask's "seconds", which Dask subtracts from the task's own time:
#: these overlap it (other threads, the device).
DASHBOARD_FIGURES = ("read_wait_seconds", "write_seconds", *TASK_FIGURES)
DASHBOARD_UNIT = "outofcore-seconds"


def show_on_dashboard(io: TaskIO) -> None:
    """Hand the task's figures (:data:`DASHBOARD_FIGURES`) to Dask's fine performance
    metrics: shown on the dashboard under the task's prefix; nothing outside a worker."""
    from distributed.metrics import context_meter  # noqa: PLC0415

    for name in DASHBOARD_FIGURES:
        value = getattr(io, name)
        if value > 0:
            context_meter.digest_metric(name.removesuffix("_seconds"), value, DASHBOARD_UNIT)


def compute_and_record(job: RecordedJob, task: TileTask) -> TileResult:
    """The worker entry of a job's tile task: compute and write one tile, then record it."""
    written: Digests = {}  # what the task's writes hashed as they wrote, durably

    def compute() -> TaskIO:
        clear_own_objects(job, task)
        return compute_tile(job.tile_job, task, before_write=job.owner_check, written=written)

    return run_recorded(
        job,
        job.journal.tile_key(job.journal_id, task.key),
        task.key,
        compute,
        lambda result: record_written_tile(job, task, result, written),
    )


def clear_own_objects(job: RecordedJob, task: TileTask) -> None:
    """Before an unrecorded tile of a sharded output is computed, clear the shards it
    owns whole that are there already (:func:`clear_objects`): a write killed halfway, or
    damage since, left them, and the tile's blocks of rows would be merged into them (a
    damaged shard index failed every rerun).  The tile writes each anew, block by block.

    Only shards wholly inside the tile (or its mirror): a shard two tiles share is never
    cleared here.  Nothing is cleared unless this job still owns the output.
    """
    c = job.tile_job.c
    if c.shards is None:
        return
    owned = tile_objects(job.tile_job.product, c, task, whole=True)
    present = objects_present(c, owned)
    if present:
        job.check_owner()
        clear_objects(c, present)


def objects_present(c: zarr.Array, keys: Iterable[str]) -> dict[str, str]:
    """Which of the stored objects ``keys`` of ``c`` are there: ``{key: what it is}`` (on
    a local disk in words, ``"a regular file"``, ``"a folder"``, never opened; else
    ``"an object"``)."""
    top, base = c.path.strip("/"), local_base(c.store)
    found: dict[str, str] = {}
    for key in keys:
        full = "/".join(p for p in (top, key) if p)
        if base is not None:
            try:
                found[key] = entry_kind(os.lstat(os.path.join(base, *full.split("/"))).st_mode)
            except (FileNotFoundError, NotADirectoryError):
                continue
        elif sync(c.store.exists(full)):
            found[key] = "an object"
    return found


def record_written_tile(
    job: RecordedJob, task: TileTask, result: dict[str, Any], written: Digests | None = None
) -> None:
    """Record ``task``'s tile done, with its figures and what it wrote (:data:`WRITTEN`:
    the digests of its stored objects).

    ``written`` holds the digests the task's writes took of the bytes they wrote as chunk
    files, durable before they returned; any other object of the tile (one zarr wrote)
    is read back and hashed now that it is written.
    """
    keys = tile_objects(job.tile_job.product, job.tile_job.c, task)
    known = written or {}
    read = object_digests(job.tile_job.c, [key for key in keys if key not in known])
    digests = {key: known[key] if key in known else read[key] for key in keys}
    job.journal.record_tile(job.journal_id, task, result, extra={WRITTEN: digests})


def tile_objects(
    product: Product, c: zarr.Array, task: TileTask, whole: bool = False
) -> tuple[str, ...]:
    """Keys (relative to the output ``c``) of the stored objects (shards, else chunks)
    holding ``task``'s tile of ``product``, and its mirror (a symmetric product's tile
    off the diagonal); ``whole``: only those the tile (or its mirror) covers whole, which
    no other tile writes into."""
    out = product.matrix("out", task.batch)
    rows, cols = slice(task.row0, task.row1), slice(task.col0, task.col1)
    regions = [out.selection(rows, cols)]
    if product.symmetric and task.i != task.j:
        regions.append(out.selection(cols, rows))
    grid = c.shards or c.chunks
    encode = c.metadata.encode_chunk_key
    keys: dict[str, None] = {}
    for region in regions:
        if any(part.stop <= part.start for part in region):
            continue
        ranges = (
            range(
                -(-part.start // size) if whole else part.start // size,
                (part.stop if whole and part.stop < extent else part.stop - 1 + size) // size,
            )
            for part, size, extent in zip(region, grid, c.shape, strict=True)
        )
        keys |= {encode(index): None for index in itertools.product(*ranges)}
    return tuple(keys)


def object_digests(c: zarr.Array, keys: Iterable[str]) -> Digests:
    """``{key: [bytes, sha256] or None}`` of the stored objects ``keys`` of the output ``c``
    (None: the store holds none), as the store reads them now: :data:`OBJECTS_IN_FLIGHT`
    at a time, fewer where that many could hold more than :data:`DIGEST_BYTES_IN_FLIGHT`.

    On a local disk each file is opened by the one rule for what outofcore opens from
    an output (:func:`outofcore.storage.digests.file_digest`): what is not a regular file
    comes back as what it is, in words (``"a folder"``), and a file larger than
    :func:`most_stored_bytes` is not read."""
    keys = list(keys)
    store, top = c.store, c.path.strip("/")
    largest = c.dtype.itemsize * math.prod(c.shards or c.chunks)  # uncompressed, at most
    in_flight = max(1, min(OBJECTS_IN_FLIGHT, DIGEST_BYTES_IN_FLIGHT // max(1, largest)))
    base = local_base(store)

    async def one(key: str, limit: asyncio.Semaphore) -> list[Any] | str | None:
        async with limit:  # hashed before the next read may start: the bytes are let go
            if base is not None:  # a file: by the one rule, never a FIFO or a folder read
                path = os.path.join(base, *"/".join(p for p in (top, key) if p).split("/"))
                return await asyncio.to_thread(file_digest, path, most_stored_bytes(c))
            try:
                buffer = await store.get(
                    "/".join(p for p in (top, key) if p), prototype=default_buffer_prototype()
                )
            except FileNotFoundError:
                return None
            if buffer is None:
                return None
            data = buffer.as_numpy_array()
            # Hashed on a thread (hashlib lets go of the GIL): the objects in flight are
            # hashed side by side on the cores the tile's BLAS has just left.
            return await asyncio.to_thread(object_digest, data)

    async def every() -> list[list[Any] | str | None]:
        limit = asyncio.Semaphore(in_flight)  # made on the loop that uses it
        return list(await asyncio.gather(*(one(key, limit) for key in keys)))

    return dict(zip(keys, sync(every()), strict=True)) if keys else {}


def most_stored_bytes(c: zarr.Array) -> int:
    """The most bytes one stored object (a chunk or a shard) of ``c`` is read in when its
    digest is taken: four times its decoded size (a compressor's worst case is far less),
    a shard's index (16 bytes an inner chunk), and a mebibyte."""
    decoded = c.dtype.itemsize * math.prod(c.shards or c.chunks)
    inner = math.prod(c.shards or c.chunks) // max(1, math.prod(c.chunks))
    return 4 * decoded + 16 * inner + 2**20


def written_changes(
    c: zarr.Array, product: Product, sound: dict[str, tuple[TileTask, dict[str, Any]]]
) -> dict[str, str]:
    """Of the tiles recorded done (``{tile: (task, record)}``, records sound), those whose
    output in ``c`` is not what their record says they wrote (:data:`WRITTEN`), with why:
    ``{tile: why}``.

    The keys are the tile's own (:func:`tile_objects`), never a name the record holds;
    every object is read and hashed (a resume reads the finished output once).  A record
    that keeps no digests, or not of this tile's objects, counts as changed.

    The objects found changed are cleared (:func:`clear_objects`: keys the tiles' records
    name, of the output's own grid), so each is written anew when its tile is computed
    again; a tile sharing one of them is computed again too.
    """
    expected = {tile: tile_objects(product, c, task) for tile, (task, _) in sound.items()}
    problems: dict[str, str] = {}
    for tile, (_, record) in sound.items():
        kept = record.get(WRITTEN)
        if not isinstance(kept, dict):
            problems[tile] = (
                "its record keeps no digests of its chunks (an older version wrote it), so "
                "what the output holds cannot be checked"
            )
        elif set(kept) != set(expected[tile]) or not all(map(_is_digest, kept.values())):
            problems[tile] = "its record's chunk digests are not those of this tile's chunks"
    checked = [tile for tile in sound if tile not in problems]
    now = object_digests(c, {key: None for tile in checked for key in expected[tile]})
    cleared: dict[str, str] = {}  # key: the tile whose record named it changed
    for tile in checked:
        kept = sound[tile][1][WRITTEN]
        changed = [key for key in expected[tile] if now[key] != kept[key]]
        if changed:
            problems[tile] = _changes(changed, kept, now)
            cleared |= {key: tile for key in changed if now[key] is not None}
    for tile in checked:  # a tile sharing an object cleared for another is written again too
        shared = [key for key in expected[tile] if cleared.get(key, tile) != tile]
        if shared and tile not in problems:
            problems[tile] = (
                f"its chunk {shared[0]} is written again for tile {cleared[shared[0]]}, "
                "whose record found it changed"
            )
    clear_objects(c, {key: now[key] for key in cleared})
    return problems


def clear_objects(c: zarr.Array, found: dict[str, list[Any] | str | None]) -> None:
    """Delete the stored objects ``found`` (keys of ``c``'s own grid that a tile's record
    names, found changed: ``{key: what is there}``), so that computing their tile again
    writes each anew: a damaged shard is never merged into, a folder or a FIFO where a
    chunk was never blocks its write.

    Each key alone, never a folder by walking it: a file, a FIFO or a link is removed (a
    link's target is never touched), an empty folder too; a folder that holds anything
    is not outofcore's to remove.

    Raises
    ------
    outofcore.storage.manifest.StrangersError
        Naming the first folder holding something where a chunk of a tile was.
    """
    if not found:
        return
    top = c.path.strip("/")
    folders = [key for key, kind in found.items() if kind == "a folder"]
    deleting.remove_folders(c.store, top, folders)  # only those left empty
    deleting.delete_keys(c.store, top, [key for key in found if key not in folders])
    base = local_base(c.store)
    for key in folders if base is not None else ():
        path = os.path.join(base, *"/".join(p for p in (top, key) if p).split("/"))
        if os.path.isdir(path) and not os.path.islink(path):
            raise StrangersError(
                f"{path} is a folder that holds files, where outofcore wrote a chunk of the "
                "output; it is not outofcore's to remove: move it away and run the command "
                "again (or pass --overwrite to start over)"
            )


def _is_digest(value: Any) -> bool:
    """Whether ``value`` is what :func:`object_digests` keeps for one object."""
    if value is None:
        return True
    return (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], int)
        and not isinstance(value[0], bool)
        and isinstance(value[1], str)
    )


def _changes(
    keys: list[str], kept: dict[str, list[Any] | None], now: dict[str, list[Any] | str | None]
) -> str:
    """How the objects ``keys`` differ from what was kept, in words, the first few named."""
    said = []
    for key in keys[:NAMED]:
        then, found = kept[key], now[key]
        if found is None:
            said.append(f"{key} is missing")
        elif isinstance(found, str):
            said.append(f"{key} is {found}, not the file it wrote")
        elif then is None:
            said.append(f"{key} was not written by it")
        elif found[0] != then[0]:
            said.append(f"{key} is {found[0]} bytes, {then[0]} when written")
        else:
            said.append(f"{key} holds other bytes than it wrote")
    more = f" and {len(keys) - NAMED} more" if len(keys) > NAMED else ""
    return "its chunk " + ", ".join(said) + more


def sound_result(journal: Journal, record_key: str) -> TileResult | None:
    """The figures of the task recorded at ``record_key``, or None to run it.

    A record that is there but not sealed (:func:`outofcore.journal.records.is_sealed`: damaged
    or edited since it was written) is named in a warning and deleted, so the task's
    new record can be written.
    """
    try:
        data = journal.get_bounded(record_key)
        if data is None:
            return None
        record = parse_document(data, journal.name_of(record_key))
    except DocumentError:  # too large, not JSON, or not a regular file (never opened as one)
        record = None
    if is_sealed(record):
        return recorded_result(record)
    logger.warning(
        "the journal record %s does not match its checksum (damaged or edited): "
        "its task is computed again",
        journal.local_path(record_key) or record_key,
    )
    journal.delete(record_key)
    return None


def recorded_result(record: dict[str, Any] | None) -> TileResult | None:
    """The :class:`TileResult` kept in a task's record, if it has one (only trust a
    sealed record's: :func:`sound_result`)."""
    if record is None or not isinstance(record.get("result"), dict):
        return None
    kept = record["result"]
    values = {f.name: kept.get(f.name, f.default) for f in fields(TileResult)}
    if any(value is MISSING for value in values.values()):  # an older record: figures unknown
        return None
    recomputed = values["recomputed"]
    numbers = [v for name, v in values.items() if name not in ("key", "worker", "recomputed")]
    typed = (
        isinstance(values["key"], str)
        and isinstance(values["worker"], str)
        and isinstance(recomputed, (list, tuple))
        and all(isinstance(part, str) for part in recomputed)
        and all(_finite_number(v) for v in numbers)
    )
    return TileResult(**{**values, "recomputed": tuple(recomputed)}) if typed else None


def _finite_number(value: Any) -> bool:
    """Whether ``value`` is an int or a finite float (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value)


def worker_name() -> str:
    """``host:pid`` of this process, as task results name their worker."""
    return f"{socket.gethostname()}:{os.getpid()}"

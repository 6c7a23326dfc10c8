"""The recorded-task protocol, once for every kind of task (tile, split part, reduction).

A task of a job (a worker entry) skips work already recorded, computes, checks that
its job still owns the output, then records itself::

    record_key = ...                          # where its record lives in the journal
    if the record exists: return its figures  # Dask reran a finished task
    result = compute()                        # writes whole chunks (or a part's sum)
    owner_check()                             # its job lost the lease: stop, record nothing
    record(result)                            # create-only-if-absent (outofcore.journal)

A record is written only after everything the task writes is in the store, so a
recorded task is a finished one; a task killed halfway is simply run again.
The compute functions (:mod:`outofcore.tile`, :mod:`outofcore.splitk`) know
nothing of the journal: :func:`run_recorded` holds it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

from outofcore import peaks
from outofcore.journal import Journal, is_sealed
from outofcore.tile import TaskIO, TileJob, compute_tile
from outofcore.worker_context import worker_context
from scheduler.plan import TileTask

#: Where outofcore says what is not the result: here, damaged records found by a task.
logger = logging.getLogger("outofcore")


@dataclass(frozen=True)
class TileResult:
    """What a task measured (every kind: tile, split part, reduction); the client adds
    these up for the job summary, and the task's journal record keeps them."""

    key: str
    bytes_read: int
    bytes_written: int
    read_wait_seconds: float
    compute_seconds: float
    write_seconds: float
    #: The task's wall time, from its start to its record (the wrapper's clock).
    seconds: float
    #: Peak resident bytes of the worker process while the task ran (outofcore.peaks).
    peak_rss_bytes: int
    worker: str
    #: Host bytes the worker process keeps between tasks once this task is done
    #: (every thread's panels and accumulators, and the chunk-file I/O buffers).
    kept_bytes: int = 0
    #: Bytes of partial tiles written (a part of a split tile) or read back (its reduction).
    scratch_bytes: int = 0
    #: That peak over the process's resident bytes when the task began: how much the task
    #: grew its process (the first task of a fresh worker includes what it keeps for the
    #: tasks after it: buffers, its engine; later ones reuse them).
    task_peak_bytes: int = 0
    #: Parts of split tiles this task found damaged (their kept sums no longer match their
    #: records' checksums) and computed again before adding them up (a reduction).
    recomputed: tuple[str, ...] = ()


@dataclass(frozen=True)
class RecordedJob:
    """A :class:`~outofcore.tile.TileJob` whose tasks record each finished task in the
    output's journal."""

    tile_job: TileJob
    journal: Journal
    journal_id: str
    #: Raises unless this job still owns the output (:class:`outofcore.lease.OwnerCheck`);
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
    here, for every kind alike: the task's seconds, its memory (:mod:`outofcore.peaks`:
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


def compute_and_record(job: RecordedJob, task: TileTask) -> TileResult:
    """The worker entry of a job's tile task: compute and write one tile, then record it."""
    return run_recorded(
        job,
        job.journal.tile_key(job.journal_id, task.key),
        task.key,
        lambda: compute_tile(job.tile_job, task, before_write=job.owner_check),
        lambda result: job.journal.record_tile(job.journal_id, task, result),
    )


def sound_result(journal: Journal, record_key: str) -> TileResult | None:
    """The figures of the task recorded at ``record_key``, or None to run it.

    A record that is there but not sealed (:func:`outofcore.journal.is_sealed`: damaged
    or edited since it was written) is named in a warning and deleted, so the task's
    new record can be written.
    """
    data = journal.get_bytes(record_key)
    if data is None:
        return None
    try:
        record = json.loads(data)
    except ValueError:
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
    try:
        return TileResult(**{**values, "recomputed": tuple(values["recomputed"])})
    except TypeError:
        return None


def worker_name() -> str:
    """``host:pid`` of this process, as task results name their worker."""
    return f"{socket.gethostname()}:{os.getpid()}"

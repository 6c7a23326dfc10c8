"""A bounded wait for a run's tasks on a Dask cluster: a cluster that runs nothing ends the run.

A run waits for its tasks as long as the cluster works: a tile may take an hour, and a
shared cluster may run other users' tasks for as long before ours.  What it must not do
is wait for ever on a cluster where nothing runs at all: workers all paused by Dask's
memory monitor (a worker in a process that holds more than its limit), no worker left,
or none that has the resources the tasks ask for.  :class:`StallWatch` hands out the
run's finished futures; when for ``timeout`` seconds none finished and no worker
executed any task (Dask's heartbeat counts, ``task_counts["executing"]``), it raises
:class:`ClusterStalledError` naming each worker's state.  Finished tiles stay recorded,
so a rerun resumes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from outofcore.errors import ClusterLostError

#: Seconds between two looks at the workers while no task finishes.
CHECK_EVERY = 5.0
#: Longest wait for a finished future between two checks.
POLL_SECONDS = 0.1
#: Workers named one by one in the message; the rest are counted.
NAMED_WORKERS = 8


class ClusterStalledError(ClusterLostError):
    """No worker of the cluster ran any task for the stall timeout while a run waited."""


@dataclass
class StallWatch:
    """Finished futures of a run, one at a time (:meth:`next_finished`), within a bound on
    the time the cluster may run nothing.

    ``timeout`` None waits as long as it takes (no check at all).
    """

    client: Any
    timeout: float | None
    _quiet_since: float = field(default_factory=time.monotonic)
    _checked: float = field(default_factory=time.monotonic)

    def next_finished(self, pending: Any) -> Any | None:
        """The next finished future of ``pending`` (a ``distributed.as_completed``), or
        None once every one was handed out.

        Raises
        ------
        ClusterStalledError
            When no future finished and no worker executed a task for ``timeout`` seconds.
        """
        condition = getattr(pending, "thread_condition", None)
        while not pending.has_ready():
            if pending.is_empty():
                return None
            self.check()
            if condition is None:
                time.sleep(POLL_SECONDS)
            else:
                with condition:  # notified when a future lands
                    condition.wait(timeout=POLL_SECONDS)
        self._quiet_since = time.monotonic()
        return next(pending)

    def check(self) -> None:
        """Look at the workers (at most every :data:`CHECK_EVERY` seconds); raise once
        the cluster has executed nothing for ``timeout`` seconds."""
        if self.timeout is None:
            return
        now = time.monotonic()
        if now - self._checked < min(CHECK_EVERY, self.timeout / 4):
            return
        self._checked = now
        workers = self.client.scheduler_info(n_workers=-1).get("workers", {})
        if self._busy(workers):
            self._quiet_since = now
        elif now - self._quiet_since >= self.timeout:
            raise ClusterStalledError(stalled_message(workers, now - self._quiet_since))

    def _busy(self, workers: dict[str, dict[str, Any]]) -> bool:
        """Whether any worker executes a task, as of its last heartbeat; a worker whose
        heartbeat does not count its tasks (another version of Dask) counts as busy while
        the scheduler has tasks assigned to it."""
        if any(_executing(worker) for worker in workers.values()):
            return True
        uncounted = [a for a, w in workers.items() if "task_counts" not in w.get("metrics", {})]
        return bool(uncounted) and any(self.client.processing(workers=uncounted).values())


def _executing(worker: dict[str, Any]) -> int:
    """How many tasks ``worker`` (an entry of ``scheduler_info()["workers"]``) executes,
    as of its last heartbeat."""
    counts = worker.get("metrics", {}).get("task_counts", {}) or {}
    return int(counts.get("executing", 0))


def stalled_message(workers: dict[str, dict[str, Any]], quiet: float) -> str:
    """What a stalled run says: how long, each worker's state, and what to do."""
    state = f"workers: {workers_text(workers)}" if workers else "the cluster has no worker"
    return (
        f"no worker ran any task for {quiet:.0f} s while the job's tasks waited ({state}); "
        "finished tiles are kept: rerun the same command to resume once the workers run "
        "again (the setting stall-timeout sets this wait)"
    )


def workers_text(workers: dict[str, dict[str, Any]]) -> str:
    """The first :data:`NAMED_WORKERS` of ``workers`` (``scheduler_info()["workers"]``) with
    their state (:func:`_worker_text`), the rest counted."""
    shown = [_worker_text(address, w) for address, w in list(workers.items())[:NAMED_WORKERS]]
    more = len(workers) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more else "")


def _worker_text(address: str, worker: dict[str, Any]) -> str:
    """One worker's state: its address, status and memory against its limit."""
    from dask.utils import format_bytes  # noqa: PLC0415 (keeps Dask out of plain imports)

    status = str(worker.get("status", "unknown")).removeprefix("Status.")
    if status == "paused":
        status = "paused by Dask's memory monitor"
    memory, limit = worker.get("metrics", {}).get("memory"), worker.get("memory_limit")
    if isinstance(memory, int) and isinstance(limit, int) and limit > 0:
        status += f", {format_bytes(memory)} of its {format_bytes(limit)} limit"
    return f"{address} {status}"

"""Panels done within a task, told to whoever shows the job's progress.

A job of one or two large tiles had nothing to show until a tile ended (``0/1 tiles``
for minutes).  Each task tells :func:`report` after every panel; where it goes:

- a listener of this process for the job (:func:`listening`): the job's tasks run in
  this process (``"sync"``, or the worker threads of the LocalCluster the job starts);
- else, in a Dask worker elsewhere, a worker event on :data:`TOPIC`, which the job's
  client receives (``Client.subscribe_topic``);
- else nowhere.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

#: The Dask event topic of panel reports (``{"job", "task", "done", "total"}``).
TOPIC = "outofcore-panels"

#: ``listener(task_key, panels_done, panels_total)``.
Listener = Callable[[str, int, int], None]

_lock = threading.Lock()
_listeners: dict[str, Listener] = {}


@contextlib.contextmanager
def listening(job_id: str, listener: Listener) -> Iterator[None]:
    """Hand the panel reports of job ``job_id`` made in this process to ``listener``."""
    with _lock:
        _listeners[job_id] = listener
    try:
        yield
    finally:
        with _lock:
            _listeners.pop(job_id, None)


def report(job_id: str, task_key: str, done: int, total: int) -> None:
    """``done`` of ``total`` panels of task ``task_key`` of job ``job_id`` are multiplied."""
    listener = _listeners.get(job_id)
    if listener is not None:
        listener(task_key, done, total)
        return
    worker = _worker()
    if worker is not None:
        worker.log_event(TOPIC, {"job": job_id, "task": task_key, "done": done, "total": total})


def _worker() -> Any:
    """The Dask worker running this task, or None."""
    try:
        from distributed import get_worker  # noqa: PLC0415
    except ImportError:
        return None
    try:
        return get_worker()
    except ValueError:  # not in a worker's task
        return None

"""What the workers of a LocalCluster outofcore starts print about its own tasks.

A task of a job that fails (an input read that failed after its retries, a
full disk) reaches the job as its exception, and the command prints it as one
``outofcore: error:`` line (``--debug`` adds the traceback).  Dask's worker also
logs every failed task on ``distributed.worker`` (``Compute Failed``, with the
task's repr and the whole traceback), once per attempt: on the terminal of a
LocalCluster that is three tracebacks of the same error around the command's
one line.  :class:`QuietOwnTaskFailures` drops those records for outofcore's
own task keys on the workers of clusters outofcore starts; other tasks' failures,
and clusters the user made, are left as they are.
"""

from __future__ import annotations

import logging
from typing import Any

from distributed import WorkerPlugin

#: The logger and message of Dask's record of a failed task (``distributed.worker``).
WORKER_LOGGER = "distributed.worker"
COMPUTE_FAILED = "Compute Failed"
#: How outofcore's task keys start (``("outofcore-<kind>-<token>", tile key)``).
KEY_PREFIX = "outofcore-"


class OwnTaskFailureFilter(logging.Filter):
    """Drops ``Compute Failed`` records of tasks whose key is outofcore's."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not (isinstance(record.msg, str) and record.msg.startswith(COMPUTE_FAILED)):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        key = args[0] if args else None
        group = key[0] if isinstance(key, tuple) and key else key
        return not (isinstance(group, str) and group.startswith(KEY_PREFIX))


class QuietOwnTaskFailures(WorkerPlugin):
    """A worker plugin that adds :class:`OwnTaskFailureFilter` to the worker's
    ``distributed.worker`` logger while the worker runs (in a worker process, or in
    this process for a worker that runs here)."""

    name = "outofcore-quiet-own-task-failures"

    def __init__(self) -> None:
        self.filter = OwnTaskFailureFilter()

    def setup(self, worker: Any) -> None:
        logging.getLogger(WORKER_LOGGER).addFilter(self.filter)

    def teardown(self, worker: Any) -> None:
        logging.getLogger(WORKER_LOGGER).removeFilter(self.filter)

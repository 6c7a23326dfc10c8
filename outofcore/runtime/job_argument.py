"""What each Dask task of a run is submitted with, so that a job goes to the workers
once at most (:func:`job_argument`): with every task as an argument where it is small,
scattered once where it is large, and left in this process where the workers are
threads here.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from outofcore.runtime.in_process import in_this_process

J = TypeVar("J")
T = TypeVar("T")
R = TypeVar("R")


#: A job pickled larger than this is scattered to the workers once, not sent with every
#: task (distributed warns of a task graph over 10 MB: "Sending large graph").
SCATTER_ABOVE_BYTES = 2**20
#: ``(function, job)`` of the runs in progress whose tasks run in this process, by token
#: (:func:`job_argument`); each is removed when its run ends.
_JOBS_HERE: dict[str, Any] = {}


@contextlib.contextmanager
def job_argument(
    client: Any, fn: Callable[[J, T], R], job: J
) -> Iterator[tuple[Callable[..., R], tuple[Any, ...]]]:
    """The function each task of a run on ``client`` is submitted with and the arguments
    before its task: ``fn`` and ``(job,)``, the job (array handles, a few KB) going with
    every task rather than scattered once (scattered data dies with the workers that hold
    it, a task's argument not).

    A job larger than :func:`scatter_above` pickled (the vectors of elementwise
    steps, such as a column mean over a million columns) is scattered once to every
    worker instead, as dask advises: each task gets its future, each worker a copy (held
    by every worker, it outlives any one of them).

    Where the client's workers are threads of this process
    (:func:`outofcore.runtime.in_process.in_this_process`: the LocalCluster a job starts, or a
    user's ``LocalCluster(processes=False)``), the job stays here: each task gets a token
    and takes the function and job from :data:`_JOBS_HERE`.  distributed would otherwise
    pickle the job into every task, and with it the numpy arrays it holds (a job's
    in-memory operands): "Sending large graph of size ...", and a copy of them a task.
    """
    if not in_this_process(client):
        if _pickled_bytes(job) <= scatter_above():
            yield fn, (job,)
            return
        # Sent once to every worker, each task names it (dask resolves the future).
        scattered = client.scatter(job, broadcast=True, hash=False)
        try:
            yield fn, (scattered,)
        finally:
            with contextlib.suppress(Exception):  # a scheduler that is gone holds nothing
                scattered.release()
        return
    token = uuid.uuid4().hex
    _JOBS_HERE[token] = (fn, job)
    try:
        yield _run_here, (token,)
    finally:
        del _JOBS_HERE[token]


def scatter_above() -> int:
    """The bytes above which a job is scattered: :data:`SCATTER_ABOVE_BYTES`, or half of
    distributed's ``admin.large-graph-warning-threshold`` where that is lower."""
    import dask  # noqa: PLC0415
    from dask.utils import parse_bytes  # noqa: PLC0415

    warned = dask.config.get("distributed.admin.large-graph-warning-threshold", None)
    return min(SCATTER_ABOVE_BYTES, parse_bytes(warned) // 2) if warned else SCATTER_ABOVE_BYTES


def _pickled_bytes(job: Any) -> int:
    """The bytes of ``job`` as distributed pickles a task's argument (0 where it cannot:
    submitting it then fails as it would have)."""
    from distributed.protocol.pickle import dumps  # noqa: PLC0415

    try:
        return len(dumps(job))
    except Exception:
        return 0


def _run_here(token: str, task: T) -> Any:
    """The function of the run registered as ``token`` in this process, of its job and
    ``task``.

    Raises
    ------
    RuntimeError
        Where that job's run has ended (a task cancelled too late), or this is another
        process (never, for the clients :func:`job_argument` gives a token).
    """
    registered = _JOBS_HERE.get(token)
    if registered is None:
        raise RuntimeError(
            f"the run of task {getattr(task, 'key', task)!r} has ended (pid {os.getpid()})"
        )
    fn, job = registered
    return fn(job, task)

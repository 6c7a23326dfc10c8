"""Executors run the tasks of a plan; they are interchangeable.

* :class:`SynchronousExecutor` runs every task in this process through dask's local
  schedulers, one after the other (``client="sync"``) or on threads (``dask.config``'s
  ``"threads"``), so dask's callbacks (``ProgressBar``) see them: for tests, debugging
  and in-memory arrays.
* :class:`DaskExecutor` submits each task as one Dask task to a
  ``distributed.Client`` (a LocalCluster or a real cluster), the job with each task or
  once (:mod:`outofcore.runtime.job_argument`).

A task is anything with a ``key`` (unique in its run) and an ``index`` (its place in
the run: lower runs first), :class:`Task`: a tile, a part of a split tile, a reduction.
``run`` is generic over the task and result types, so one executor runs every kind of a
job and the type checker follows each.

Both call the same task function with the same arguments, and report each
finished task through a callback, so progress and summaries do not depend on
the executor.  The caller names the kind of the tasks of a run (``"tile"``):
on Dask their keys are ``("outofcore-<kind>-<token>", task.key)``, so the
dashboard (which groups tasks by ``distributed.utils.key_split``, here
``outofcore-<kind>``) shows each kind apart, and :meth:`DaskExecutor.span`
gathers the runs of one job under one ``distributed.span``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from outofcore.errors import ClusterLostError, OutOfCoreError
from outofcore.runtime.cores import usable_cores
from outofcore.runtime.job_argument import job_argument
from outofcore.runtime.stall import StallWatch


class Task(Protocol):
    """What an executor needs of a task: its key, unique in its run (the Dask key), and
    its index, its place in the run (Dask's priority: lower runs first)."""

    @property
    def key(self) -> str: ...

    @property
    def index(self) -> int: ...


#: The type variables of a run: J the job its tasks share, T its tasks, R their results.
J = TypeVar("J")
T = TypeVar("T", bound=Task)
R = TypeVar("R")
#: A kind of task: lowercase words joined by ``-``, which ``key_split`` keeps whole.
KIND_PATTERN = re.compile(r"[a-z]+(-[a-z]+)*")


@dataclass(frozen=True)
class WorkerShape:
    """How many workers run tasks, and the threads each task may give BLAS."""

    workers: int
    threads_per_worker: int
    blas_threads: int
    #: Workers that advertise a ``GPU`` resource (tile tasks then ask for one).
    gpu_workers: int = 0
    #: ``(address, memory limit in bytes or 0 for none, threads)`` of every worker.
    memory_limits: tuple[tuple[str, int, int], ...] = ()
    #: The tile tasks a GPU worker runs at once on its device: its ``GPU`` resources, at
    #: most its threads (the fewest of any GPU worker); 1 where there are none.
    tiles_in_flight: int = 1


def client_worker_shape(client: Any) -> WorkerShape:
    """The workers of a connected ``distributed.Client`` as its scheduler reports them, and
    the BLAS threads each task gets: an equal share of its host's cores."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    if not workers:
        return WorkerShape(workers=0, threads_per_worker=1, blas_threads=1)
    per_host = Counter(info["host"] for info in workers.values())
    cores = client.run(usable_cores)
    # Each task running at once on a host gets an equal share of its cores.
    blas = min(
        max(1, (cores.get(address) or 1) // (per_host[info["host"]] * info["nthreads"]))
        for address, info in workers.items()
    )
    threads = max(info["nthreads"] for info in workers.values())
    gpus = [info for info in workers.values() if info.get("resources", {}).get("GPU")]
    # A GPU worker runs as many tile tasks at once as it has GPU resources and threads.
    in_flight = [min(int(info["resources"]["GPU"]), int(info["nthreads"])) for info in gpus]
    limits = tuple(
        (address, int(info.get("memory_limit") or 0), int(info["nthreads"]))
        for address, info in sorted(workers.items())
    )
    return WorkerShape(
        workers=len(workers),
        threads_per_worker=threads,
        blas_threads=blas,
        gpu_workers=len(gpus),
        memory_limits=limits,
        tiles_in_flight=max(1, min(in_flight, default=1)),
    )


class Executor(Protocol):
    """Runs ``fn(job, task)`` for every task of any kind (:class:`Task`) and reports each
    result as it lands."""

    def worker_shape(self) -> WorkerShape: ...

    def run(
        self,
        fn: Callable[[J, T], R],
        job: J,
        tasks: Sequence[T],
        on_result: Callable[[R], None],
        resources: dict[str, float] | None = None,
        kind: str = "task",
    ) -> list[R]: ...

    def span(self, name: str) -> contextlib.AbstractContextManager[None]: ...

    def abort(self, error: BaseException) -> None: ...


class SynchronousExecutor:
    """Runs tasks in this process through dask's local schedulers (no ``distributed``).

    ``threads`` None (the default) runs them one after the other in the calling thread
    (``dask.local.get_sync``); a number runs them on a pool of that many threads of this
    process (``dask.threaded.get``), as ``dask.config.set(scheduler="threads")`` runs
    dask's own arrays.  Either way dask's local-scheduler callbacks see every task:
    ``dask.diagnostics.ProgressBar``, ``Profiler`` or any ``dask.callbacks.Callback``
    active around the job.  Tasks start in index order whatever order dask picks its
    keys in: each key of the graph runs the next task not started.
    ``blas_threads``: what each task may give BLAS (None: this machine's cores shared
    equally between the tasks that run at once).
    """

    def __init__(self, threads: int | None = None, blas_threads: int | None = None) -> None:
        if threads is not None and threads < 1:
            raise ValueError(f"threads = {threads}: at least 1")
        self.threads = threads
        self.blas_threads = blas_threads or max(1, usable_cores() // (threads or 1))
        self._aborted: BaseException | None = None

    def abort(self, error: BaseException) -> None:
        """Stop the run in progress once its running tasks end: none starts after, and
        :meth:`run` raises ``error`` (any thread may call it)."""
        self._aborted = error

    def worker_shape(self) -> WorkerShape:
        return WorkerShape(
            workers=self.threads or 1, threads_per_worker=1, blas_threads=self.blas_threads
        )

    def run(
        self,
        fn: Callable[[J, T], R],
        job: J,
        tasks: Sequence[T],
        on_result: Callable[[R], None],
        resources: dict[str, float] | None = None,
        kind: str = "task",
    ) -> list[R]:
        """Run ``fn(job, task)`` for every task; report (in the calling thread) and return
        the results as they land.  A task that raises ends the run with its error once the
        tasks running beside it have ended (none is left running after :meth:`run`)."""
        group = f"outofcore-{check_kind(kind)}-{uuid.uuid4().hex[:8]}"
        if self._aborted is not None:
            raise self._aborted
        waiting = collections.deque(sorted(tasks, key=lambda task: task.index))
        taken = threading.Lock()
        stopped = threading.Event()  # the run ended: no task starts after

        def next_task() -> R:
            if self._aborted is not None:
                raise self._aborted
            if stopped.is_set():
                raise RuntimeError("the run has ended")
            with taken:
                task = waiting.popleft()
            return fn(job, task)

        results: list[R] = []

        def landed(key: Any, result: R, *_: Any) -> None:
            on_result(result)
            results.append(result)

        graph = {(group, n): (next_task,) for n in range(len(tasks))}
        try:
            _run_locally(graph, self.threads, landed, stopped)
        except Exception:
            if self._aborted is not None:  # the task failed because the run was stopped
                raise self._aborted from None
            raise
        if self._aborted is not None:
            raise self._aborted
        return results

    def span(self, name: str) -> contextlib.AbstractContextManager[None]:
        """Nothing to group in one process: a context that does nothing."""
        return contextlib.nullcontext()


def _run_locally(
    graph: dict[Any, Any],
    threads: int | None,
    landed: Callable[..., None],
    stopped: threading.Event,
) -> None:
    """Compute ``graph`` with dask's synchronous scheduler (``threads`` None) or its
    threaded one on a pool of ``threads`` threads of its own, with the callbacks active around it
    (taken for this run, as dask's schedulers take them: a dask computation inside a task
    does not report to them) and ``landed`` called for each result, in this thread.  The
    pool is shut down, its running tasks waited for, before this returns or raises."""
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    import dask.local  # noqa: PLC0415 (keeps Dask out of plain imports)
    import dask.threaded  # noqa: PLC0415
    from dask.callbacks import local_callbacks  # noqa: PLC0415

    with local_callbacks() as active:
        callbacks = [*active, (None, None, None, landed, None)]
        if threads is None:
            dask.local.get_sync(graph, list(graph), callbacks=callbacks)
            return
        pool = ThreadPoolExecutor(threads, thread_name_prefix="outofcore-task")
        try:
            dask.threaded.get(graph, list(graph), pool=pool, callbacks=callbacks)
        finally:
            stopped.set()
            pool.shutdown(wait=True, cancel_futures=True)


class DaskExecutor:
    """Each task as one Dask task on a ``distributed.Client``.

    Parameters
    ----------
    client
        A connected ``distributed.Client``.
    retries
        How often a task that raised is run again (never for an :class:`OutOfCoreError`,
        which is final).  A task whose worker died is Dask's to rerun
        (``distributed.scheduler.allowed-failures``).
    stall_timeout
        Seconds a run waits while no worker of the cluster executes any task
        (:mod:`outofcore.runtime.stall`); None: for ever.
    """

    def __init__(self, client: Any, retries: int = 2, stall_timeout: float | None = None) -> None:
        self.client = client
        self.retries = retries
        self.stall_timeout = stall_timeout
        self._aborted: BaseException | None = None
        self._running: list[Any] = []  # the futures of the run in progress

    def abort(self, error: BaseException) -> None:
        """Stop the run in progress: cancel its tasks not finished yet, and :meth:`run`
        raises ``error`` instead of waiting for them (any thread may call it).

        A task already running on a worker runs on until it ends (Python cannot stop a
        thread): it stops itself at its next lease check, before writing.
        """
        self._aborted = error
        with contextlib.suppress(Exception):  # a scheduler that is gone cancels nothing
            self.client.cancel([f for f in list(self._running) if not f.done()])

    def worker_shape(self) -> WorkerShape:
        return client_worker_shape(self.client)

    @contextlib.contextmanager
    def span(self, name: str) -> Iterator[None]:
        """Run the tasks submitted inside it in one ``distributed.span`` called ``name``
        (the dashboard and the scheduler's spans extension show it as one group)."""
        from distributed import span  # noqa: PLC0415

        with span(name):
            yield

    def run(
        self,
        fn: Callable[[J, T], R],
        job: J,
        tasks: Sequence[T],
        on_result: Callable[[R], None],
        resources: dict[str, float] | None = None,
        kind: str = "task",
    ) -> list[R]:
        """Submit ``fn(job, task)`` for every task; report and return the results as they land.

        ``kind`` names the tasks (see the module docstring): every key of this run is
        ``("outofcore-<kind>-<token>", task.key)``, one Dask task group per run (a rerun
        of a task: ``task.key`` with ``-retry<n>``).  A task that raised is run again, up
        to ``retries`` times, unless it raised an :class:`OutOfCoreError`: those are final
        (an input read that failed after its own retries, a lease lost, a full disk).
        """
        from distributed import as_completed  # noqa: PLC0415 (keeps Dask out of plain imports)

        # An 8-digit hex token: key_split stops at it, key_split_group keeps it.
        group = f"outofcore-{check_kind(kind)}-{uuid.uuid4().hex[:8]}"
        submitted: dict[Any, tuple[Any, T, int]] = {}  # key: (future, task, attempt)

        def submit(task: T, attempt: int) -> Any:
            future = self.client.submit(
                call,
                *leading,
                task,
                key=(group, task.key if attempt == 0 else f"{task.key}-retry{attempt}"),
                priority=-task.index,
                pure=False,
                resources=resources,
            )
            submitted[future.key] = (future, task, attempt)
            self._running.append(future)
            return future

        results: list[R] = []
        self._running = []
        if self._aborted is not None:
            raise self._aborted
        with job_argument(self.client, fn, job) as (call, leading):
            try:
                # This client's loop: it need not be the default Client (as_completed's guess).
                pending = as_completed([submit(task, 0) for task in tasks], loop=self.client.loop)
                watch = StallWatch(self.client, self.stall_timeout)
                while (future := watch.next_finished(pending)) is not None:
                    if self._aborted is not None:
                        raise self._aborted
                    _, task, attempt = submitted[future.key]
                    try:
                        result = future.result()
                    except Exception as exc:
                        if self._aborted is not None:
                            raise self._aborted from None
                        final = isinstance(exc, OutOfCoreError) or _cluster_lost(exc)
                        if final or attempt >= self.retries:
                            raise
                        pending.add(submit(task, attempt + 1))
                        continue
                    # Let go of the result held on the worker at once: a worker that dies
                    # later then costs only the tiles in flight, not every tile it finished
                    # (Dask recomputes lost results that a client still holds).
                    future.release()
                    on_result(result)
                    results.append(result)
            except (Exception, asyncio.CancelledError) as exc:
                if self._aborted is not None and exc is not self._aborted:
                    raise self._aborted from None
                if _cluster_lost(exc):
                    raise ClusterLostError(
                        f"the Dask cluster failed while the job ran ({type(exc).__name__}: {exc}); "
                        "finished tiles are kept: rerun the same command to resume"
                    ) from exc
                raise
            finally:
                with contextlib.suppress(Exception):  # a scheduler that is gone cancels nothing
                    self.client.cancel([f for f, _, _ in submitted.values() if not f.done()])
        return results


def check_kind(kind: str) -> str:
    """``kind`` if it can name tasks (lowercase words joined by ``-``).

    Raises
    ------
    ValueError
        For anything else: ``key_split`` would cut it or swallow what follows.
    """
    if not isinstance(kind, str) or not KIND_PATTERN.fullmatch(kind):
        raise ValueError(f"task kind {kind!r}: use lowercase words joined by '-', e.g. 'tile'")
    return kind


def _cluster_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the cluster (not the task's own code) failed: a worker killed
    over and over, the scheduler's connection closed, the tasks cancelled under the job."""
    from distributed import CancelledError as FutureCancelledError  # noqa: PLC0415
    from distributed.comm.core import CommClosedError  # noqa: PLC0415
    from distributed.scheduler import KilledWorker  # noqa: PLC0415

    lost = (KilledWorker, CommClosedError, FutureCancelledError, asyncio.CancelledError)
    return isinstance(exc, lost)

"""Getting an executor for a job: a LocalCluster, a named scheduler, or in-process.

``client`` as users pass it to :func:`outofcore.matmul`:

* ``None``: the default ``distributed.Client`` when one is open (dask's
  convention, ``distributed.default_client()``;
  :func:`outofcore.runtime.addresses.resolve_client`), used as it is; else what ``dask.config``'s
  ``scheduler`` says: ``"sync"`` as below,
  ``"threads"`` threads of this process through dask's threaded scheduler, no cluster
  (:func:`outofcore.runtime.in_process.runs_in_threads`); otherwise (``"processes"`` too) start a
  LocalCluster sized to this machine and the budget, and close it after the job;
* ``"sync"``: no cluster, the tasks one after the other in this thread (dask's
  synchronous scheduler: :class:`~outofcore.runtime.executors.SynchronousExecutor`);
* a scheduler address such as ``"tcp://10.0.0.5:8786"``: connect to it (``tls://``
  and ``wss://`` with the certificates of Dask's settings: :mod:`outofcore.runtime.tls`);
* a ``distributed.Client``: use it as it is (never closed here).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from outofcore.errors import ClusterError
from outofcore.runtime.addresses import (
    CONNECT_TIMEOUT_SECONDS,
    SYNC,
    check_client,
    client_address,
    not_answered,
    resolve_client,
)
from outofcore.runtime.blas_idle import IDLE_SPIN
from outofcore.runtime.cores import usable_cores
from outofcore.runtime.executors import (
    DaskExecutor,
    Executor,
    SynchronousExecutor,
    WorkerShape,
    client_worker_shape,
)
from outofcore.runtime.gpu_cluster import (
    GPU_RESOURCE,
    GpuNode,
    check_tiles_in_flight,
    cluster_kind,
    start_gpu_cluster,
)
from outofcore.runtime.in_process import runs_in_process, runs_in_threads, thread_count
from outofcore.runtime.in_process import tasks_run_here as tasks_run_here  # where others import it
from outofcore.runtime.loopback import LOCAL_DASHBOARD_ADDRESS, LOCAL_HOST, local_dashboard_link
from outofcore.runtime.stall import workers_text
from outofcore.runtime.tls import client_security
from outofcore.runtime.worker_sizing import (
    DEFAULT_BUDGET_BYTES,
    IN_PROCESS_MEMORY,
    default_budget,
    local_blas_threads,
    local_worker_count,
    local_worker_limit,
)

#: Where outofcore says what is not the result (the command shows it on stderr).
logger = logging.getLogger("outofcore")
BLAS_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: What to install for the dashboard of a LocalCluster (bokeh, which Dask's dashboard needs).
DASHBOARD_EXTRA = "pip install 'outofcore[dashboard]'"


def is_local(client: Any) -> bool:
    """Whether ``client`` runs the job's tasks on this machine (a LocalCluster or in-process)."""
    return client is None or (isinstance(client, str) and client.lower() in SYNC)


def budget_for(
    memory: int | None,
    client: Any,
    workers: int | None = None,
    gpus: tuple[int, ...] | None = None,
) -> int:
    """A job's budget per worker: ``memory`` when given; on this machine (``client`` None,
    a LocalCluster of ``workers`` or one per GPU, or ``"sync"``, one) what fits its memory
    cap (:func:`outofcore.runtime.worker_sizing.default_budget`); on a scheduler elsewhere
    :data:`~outofcore.runtime.worker_sizing.DEFAULT_BUDGET_BYTES` (its workers' limits are checked
    when the job has them)."""
    if memory is not None:
        return memory
    if not is_local(client):
        return DEFAULT_BUDGET_BYTES
    if client is not None:
        workers, gpus = 1, None
    return default_budget(workers, gpus)


def check_local_memory(
    client: Any,
    budget_bytes: int,
    workers: int | None = None,
    gpus: tuple[int, ...] | None = None,
) -> None:
    """Refuse, before any work, a job on this machine that cannot fit its memory cap.

    For ``client=None`` (a LocalCluster: ``workers``, or one per GPU in
    ``gpus``) and ``"sync"`` (one, in this process), as
    :func:`~outofcore.runtime.worker_sizing.local_worker_count`; a job on a scheduler elsewhere
    passes (its workers' limits are checked once they are known:
    :func:`~outofcore.runtime.worker_sizing.check_worker_memory`).

    Raises
    ------
    ClusterError
        Naming the cap, where it was read and the bytes needed.
    """
    if not is_local(client):
        return
    if client is not None:
        workers, gpus = 1, None
    local_worker_count(budget_bytes, len(gpus) if gpus else workers, gpu=bool(gpus))


def start_local_cluster(
    budget_bytes: int,
    workers: int | None = None,
    gpus: tuple[int, ...] | None = None,
    in_process: bool = False,
    dashboard: bool = True,
    node: GpuNode | None = None,
    tiles_in_flight: int = 1,
) -> Any:
    """Start the LocalCluster a job with ``budget_bytes`` per worker runs on.

    One single-threaded worker process per worker (see
    :func:`~outofcore.runtime.worker_sizing.local_worker_count`), or with ``gpus`` one per
    listed GPU on ``node``, the GPU backend's (:func:`outofcore.runtime.gpu_cluster.
    start_gpu_cluster`: the vendor's own cluster where the node offers one); each gets the
    memory limit :func:`~outofcore.runtime.worker_sizing.local_worker_limit` gives (GPU
    workers: with a GPU worker's allowance).
    ``in_process`` runs CPU workers, or a single GPU's, as threads of this process instead
    (:func:`runs_in_process`).  A GPU's worker runs ``tiles_in_flight`` tasks at once (as
    many threads and ``GPU`` resources).

    Raises
    ------
    ClusterError
        For ``gpus`` without a ``node`` (no GPU backend says how to start their workers).
    ``dashboard`` serves Dask's dashboard (False: none, and no bokeh imported); the
    scheduler's web server (Dask's health and metrics pages) takes a free port either
    way: with no address Dask would take 8787, and warn where another holds it.
    """
    if gpus and node is None:
        raise ClusterError(
            f"GPU workers for GPUs {list(gpus)} need a GPU backend's node to start them"
        )
    memory_limit = local_worker_limit(budget_bytes, gpu=bool(gpus))
    here = runs_in_process(gpus, in_process, node)
    if gpus and not here:
        with _workers_ignore_interrupts():
            return start_gpu_cluster(
                gpus, memory_limit, node, logging.ERROR, dashboard, tiles_in_flight
            )
    n_workers = len(gpus) if gpus else local_worker_count(budget_bytes, workers)
    _warn_over_cores(n_workers)
    if here:
        gpu_threads = check_tiles_in_flight(tiles_in_flight) if gpus else 0
        return _start_in_process(n_workers, memory_limit, gpu_threads, dashboard)
    return _start_worker_processes(n_workers, memory_limit, dashboard)


def _warn_over_cores(n_workers: int) -> None:
    """Warn where ``n_workers`` single-threaded workers are more than this machine's cores."""
    cores = usable_cores()
    if n_workers > cores:
        logger.warning(
            "%d workers on %d core(s): each worker will wait for a core most of the "
            "time (and its heartbeats may time out); --workers %d or fewer is faster",
            n_workers,
            cores,
            cores,
        )


def _start_in_process(n_workers: int, memory_limit: int, gpu_threads: int, dashboard: bool) -> Any:
    """A LocalCluster whose ``n_workers`` workers are threads of this process.

    Each worker's memory monitor reads this whole process's memory: each gets the limit
    of them all.  Scheduler and workers talk inproc://; their web servers are the only
    listening sockets.  LocalCluster can put a worker's web server on loopback only by
    turning on its bokeh dashboard too (worker_dashboard_address), so the workers are
    added after, from the spec with the address alone.  A GPU job's worker (one GPU: one
    worker) has ``gpu_threads`` threads (0: a CPU job's one) and offers as many of the GPU
    resource its tile tasks ask for one of: that many tiles in flight on the device.
    """
    import dask  # noqa: PLC0415
    from distributed import LocalCluster  # noqa: PLC0415

    cluster = LocalCluster(
        n_workers=0,
        threads_per_worker=1,
        processes=False,
        memory_limit=memory_limit * n_workers,
        dashboard_address=LOCAL_DASHBOARD_ADDRESS,
        scheduler_kwargs={"dashboard": dashboard},
        silence_logs=logging.ERROR,
    )
    try:
        cluster.new_spec["options"]["dashboard_address"] = LOCAL_DASHBOARD_ADDRESS
        if gpu_threads:
            cluster.new_spec["options"]["resources"] = {GPU_RESOURCE: gpu_threads}
            cluster.new_spec["options"]["nthreads"] = gpu_threads
        # That memory is this whole process's, the caller's arrays included: a worker
        # paused at 80% of its limit by them would never run a task (the job waiting
        # for ever).  Its tasks keep to the plan's budget instead; nothing to spill.
        with dask.config.set(IN_PROCESS_MEMORY):
            cluster.scale(n_workers)
            cluster.wait_for_workers(n_workers, timeout=CONNECT_TIMEOUT_SECONDS * 3)
    except BaseException:
        cluster.close()
        raise
    return cluster


def _start_worker_processes(n_workers: int, memory_limit: int, dashboard: bool) -> Any:
    """A LocalCluster of ``n_workers`` single-threaded worker processes on loopback.

    Dask's nanny starts workers with OMP/OPENBLAS/MKL_NUM_THREADS=1; our tasks size BLAS
    themselves (threadpoolctl), so each worker's pool starts at its share of the cores
    rather than growing from one thread.
    """
    from distributed import LocalCluster  # noqa: PLC0415

    blas = str(local_blas_threads(n_workers))
    threads_env = {**IDLE_SPIN, **{name: blas for name in BLAS_THREAD_VARIABLES}}
    with _workers_ignore_interrupts():
        return LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            env=threads_env,
            memory_limit=memory_limit,
            host=LOCAL_HOST,
            dashboard_address=LOCAL_DASHBOARD_ADDRESS,
            scheduler_kwargs={"dashboard": dashboard},
            silence_logs=logging.ERROR,
        )


@contextlib.contextmanager
def _workers_ignore_interrupts() -> Iterator[None]:
    """Start worker processes that ignore SIGINT (inherited through exec; Python keeps an
    ignored SIGINT ignored): Ctrl-C reaches the terminal's whole process group, and the
    client alone should handle it, closing the cluster, instead of every worker printing
    a traceback.  Ctrl-C is ignored here meanwhile, for the second the start takes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def open_executor(
    client: Any,
    *,
    budget_bytes: int,
    workers: int | None = None,
    gpus: tuple[int, ...] | None = None,
    announce: bool = True,
    connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
    in_process: bool = False,
    dashboard: bool = True,
    on_close: Callable[[], None] | None = None,
    stall_timeout: float | None = None,
    node: GpuNode | None = None,
    tiles_in_flight: int = 1,
) -> Iterator[Executor]:
    """Yield an executor for ``client`` (see the module docstring), cleaning up after.

    ``gpus`` (with ``client=None``) starts one worker per listed GPU instead of one per
    core, on ``node``, the GPU backend's (see :mod:`outofcore.runtime.gpu_cluster`).
    ``connect_timeout`` bounds the wait for a scheduler address (three times it for its workers).
    ``in_process`` runs a LocalCluster's CPU workers in this process
    (:func:`runs_in_process`); ``dashboard`` False starts it without Dask's dashboard.
    ``on_close`` is called once the executor is closed
    when the tasks ran in this process (``"sync"`` or such a worker), failed or not:
    what they kept here is then nobody's.  ``stall_timeout`` bounds the wait of a run on
    a Dask cluster whose workers execute nothing (:mod:`outofcore.runtime.stall`; None: no bound).
    ``tiles_in_flight``: the tasks each GPU worker it starts runs at once.

    Raises
    ------
    ClusterError
        When a scheduler address does not answer within the timeout, or a
        cluster has fewer workers than ``workers`` asked for.
    """
    local = _in_this_process(client, budget_bytes, workers, gpus)
    if local is not None:
        try:
            yield local
        finally:
            if on_close is not None:
                on_close()
        return
    check_client(client, connect_timeout)
    if gpus and client is not None:
        raise ClusterError("--gpus starts workers on this node; it cannot go with --scheduler")
    if client is None:
        with _on_local_cluster(
            budget_bytes,
            workers,
            gpus,
            in_process=in_process,
            dashboard=dashboard,
            announce=announce,
            on_close=on_close,
            stall_timeout=stall_timeout,
            node=node,
            tiles_in_flight=tiles_in_flight,
        ) as executor:
            yield executor
    elif isinstance(client, str):
        with _connect(client, connect_timeout) as connected:
            _wait_for_workers(connected, client, workers, connect_timeout)
            _forward_warnings(connected)
            yield DaskExecutor(connected, stall_timeout=stall_timeout)
    else:
        _wait_for_workers(client, client_address(client), workers, connect_timeout)
        if announce and client is resolve_client(None):
            _announce_default_client(client)
        yield DaskExecutor(client, stall_timeout=stall_timeout)


@contextlib.contextmanager
def _on_local_cluster(
    budget_bytes: int,
    workers: int | None,
    gpus: tuple[int, ...] | None,
    *,
    in_process: bool,
    dashboard: bool,
    announce: bool,
    on_close: Callable[[], None] | None,
    stall_timeout: float | None,
    node: GpuNode | None,
    tiles_in_flight: int = 1,
) -> Iterator[DaskExecutor]:
    """Yield an executor on a LocalCluster started for the job, closed after it.

    Its own Client, not the default one (a job started meanwhile, in another thread,
    would take it); its workers' warnings forwarded here unless they run in this
    process (they log here already); ``announce`` prints what started.  ``on_close``
    is called once the cluster is closed when its workers ran in this process.
    """
    from distributed import Client  # noqa: PLC0415

    cluster = start_local_cluster(
        budget_bytes, workers, gpus, in_process, dashboard, node, tiles_in_flight
    )
    n_workers = len(cluster.workers)
    here = runs_in_process(gpus, in_process, node)
    try:
        with Client(cluster, set_as_default=False) as local_client:
            if not here:
                _forward_warnings(local_client)
            _quiet_own_task_failures(local_client)
            if announce:
                print(
                    f"Started a {cluster_kind(cluster, node)}: {n_workers} worker(s)"
                    f"{' in this process' if here else ''}, "
                    f"{dashboard_note(_local_link(local_client), dashboard)}",
                    file=sys.stderr,
                )
            yield DaskExecutor(local_client, stall_timeout=stall_timeout)
    finally:
        cluster.close()
        if here and on_close is not None:
            on_close()


def _announce_default_client(client: Any) -> None:
    """Say on stderr that the job runs on the default Dask Client: its scheduler, workers."""
    have = len(client.scheduler_info(n_workers=-1)["workers"])
    print(
        f"Running on the default Dask Client: scheduler {client_address(client)}, {have} worker(s)",
        file=sys.stderr,
    )


def _in_this_process(
    client: Any, budget_bytes: int, workers: int | None, gpus: tuple[int, ...] | None
) -> SynchronousExecutor | None:
    """The executor of a job on ``client`` that runs its tasks in this process without a
    cluster: ``"sync"``, one task at a time; dask.config's ``"threads"``
    (:func:`~outofcore.runtime.in_process.runs_in_threads`), as many threads as a LocalCluster
    would have workers (:func:`~outofcore.runtime.worker_sizing.local_worker_count`, at most
    dask's ``num_workers``), each with their share of the cores for BLAS.  None for any
    other ``client``."""
    if isinstance(client, str) and client.lower() in SYNC:
        return SynchronousExecutor()
    if not runs_in_threads(client, gpus):
        return None
    threads = thread_count(local_worker_count(budget_bytes, workers))
    return SynchronousExecutor(threads, local_blas_threads(threads))


def _connect(address: str, connect_timeout: float) -> Any:
    """A ``distributed.Client`` of the scheduler at ``address`` (not the default one).

    Raises
    ------
    ClusterError
        When no scheduler answers within ``connect_timeout``, or TLS refuses.
    """
    from distributed import Client  # noqa: PLC0415

    try:
        return Client(
            address,
            timeout=connect_timeout,
            set_as_default=False,
            security=client_security(address),  # as the probe's (check_client)
        )
    except (OSError, TimeoutError) as exc:
        raise not_answered(address, connect_timeout, exc) from None


def worker_shape_of(
    client: Any,
    *,
    budget_bytes: int,
    workers: int | None = None,
    gpus: tuple[int, ...] | None = None,
    connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
    tiles_in_flight: int = 1,
) -> WorkerShape:
    """The workers :func:`open_executor` would give a job, told before any cluster starts.

    ``"sync"``: this process, one task at a time.  None: the LocalCluster
    :func:`start_local_cluster` would start (one single-threaded worker per
    :func:`~outofcore.runtime.worker_sizing.local_worker_count`, or one per GPU with
    ``tiles_in_flight`` threads), with
    :func:`~outofcore.runtime.worker_sizing.local_blas_threads` each.
    A scheduler address or a ``distributed.Client``: asked of its scheduler (once
    ``workers`` have joined, as the job waits for them), the connection closed after.

    Raises
    ------
    ClusterError
        As :func:`open_executor` does: no scheduler, too few workers, a memory cap.
    """
    local = _in_this_process(client, budget_bytes, workers, gpus)
    if local is not None:
        return local.worker_shape()
    if client is None:
        if gpus:
            count = len(gpus)  # start_gpu_cluster: one worker per GPU, its tiles in flight
            threads = check_tiles_in_flight(tiles_in_flight)
            blas = local_blas_threads(count)
            return WorkerShape(count, threads, blas, gpu_workers=count, tiles_in_flight=threads)
        count = local_worker_count(budget_bytes, workers)
        return WorkerShape(count, 1, local_blas_threads(count))
    check_client(client, connect_timeout)
    if isinstance(client, str):
        with _connect(client, connect_timeout) as connected:
            _wait_for_workers(connected, client, workers, connect_timeout)
            return client_worker_shape(connected)
    _wait_for_workers(client, client_address(client), workers, connect_timeout)
    return client_worker_shape(client)


def _forward_warnings(client: Any) -> None:
    """Have the workers of a Client outofcore made send what they log on the ``outofcore``
    logger (read retries, fallbacks) at WARNING and above to this process's logger, where
    the command shows it as ``outofcore: warning: ...``: without it a LocalCluster's
    workers print bare lines and a remote cluster's keep them in their own logs.  A Client
    the user made is left as it is."""
    client.forward_logging(logger.name, level=logging.WARNING)


def _quiet_own_task_failures(client: Any) -> None:
    """Keep Dask's ``Compute Failed`` tracebacks of outofcore's tasks off the terminal of a
    LocalCluster outofcore started: the job reports the error itself
    (:mod:`outofcore.runtime.worker_logs`)."""
    from outofcore.runtime.worker_logs import QuietOwnTaskFailures  # noqa: PLC0415 (imports distributed)

    client.register_plugin(QuietOwnTaskFailures())


def serves_dashboard() -> bool:
    """Whether a scheduler started in this process serves Dask's dashboard: it does when it
    can import ``distributed.dashboard.scheduler`` (bokeh at the version Dask needs), and
    shows a page asking for bokeh otherwise."""
    try:
        importlib.import_module("distributed.dashboard.scheduler")
    except ImportError:
        return False
    return True


def _local_link(client: Any) -> str:
    """The dashboard link of a cluster this process started: where it listens."""
    services = client.scheduler_info(n_workers=0).get("services", {})
    return local_dashboard_link(services) or client.dashboard_link


def dashboard_note(link: str, asked: bool) -> str:
    """How the start of a LocalCluster names its dashboard: ``link`` where one was ``asked``
    for and is served, what to install where it is not (no address of a page that only
    asks for bokeh), and how to ask for one on a short job."""
    if not asked:
        return "no dashboard (a short job: --dashboard for one)"
    if not serves_dashboard():
        return f"no dashboard ({DASHBOARD_EXTRA} for one)"
    return f"dashboard at {link}"


def _wait_for_workers(client: Any, address: str, workers: int | None, timeout: float) -> None:
    wanted = workers or 1
    try:
        client.wait_for_workers(wanted, timeout=timeout * 3)
    except TimeoutError:
        found = client.scheduler_info(n_workers=-1)["workers"]
        # Dask waits for running workers: name the others (paused, closing) and their state.
        idle = {a: w for a, w in found.items() if str(w.get("status")) != "running"}
        raise ClusterError(
            f"the scheduler at {address!r} has {len(found) - len(idle)} running worker(s); "
            f"waited {timeout * 3:g} s for {wanted}"
            + (f" (not running: {workers_text(idle)})" if idle else "")
        ) from None

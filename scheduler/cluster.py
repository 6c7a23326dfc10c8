"""Getting an executor for a job: a LocalCluster, a named scheduler, or in-process.

``client`` as users pass it to :func:`outofcore.matmul`:

* ``None``: the default ``distributed.Client`` when one is open (dask's
  convention, ``distributed.default_client()``; :func:`resolve_client`), used
  as it is; otherwise start a LocalCluster sized to this machine and the
  budget, and close it after the job;
* ``"sync"``: no Dask at all, the synchronous in-process executor;
* a scheduler address such as ``"tcp://10.0.0.5:8786"``: connect to it (``tls://``
  and ``wss://`` with the certificates of Dask's settings: :mod:`scheduler.tls`);
* a ``distributed.Client``: use it as it is (never closed here).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from scheduler.errors import ClusterError
from scheduler.executors import (
    DaskExecutor,
    Executor,
    SynchronousExecutor,
    WorkerShape,
    client_worker_shape,
)
from scheduler.gpu_cluster import cluster_kind, start_gpu_cluster
from scheduler.loopback import LOCAL_DASHBOARD_ADDRESS, LOCAL_HOST
from scheduler.memory_cap import gib, memory_cap
from scheduler.tls import client_security, tls_failure

#: Memory a worker needs besides its task: its interpreter and libraries, its nanny,
#: and its share of the client and scheduler processes of a LocalCluster.  Measured
#: (docs/performance.md, "Larger than RAM"): a 1-worker job's whole process tree peaked
#: 0.21 GiB above its projected task; this keeps more than twice that.
WORKER_OVERHEAD_BYTES = 512 * 2**20
#: Memory a GPU worker needs beside its task on top of :data:`WORKER_OVERHEAD_BYTES`:
#: numba.cuda, the CUDA context, the compiled kernels and the engine's fixed pinned
#: buffers (:func:`worker_allowance`).  Measured on an H200 (dask-cuda 26.10, a worker
#: started by ``gpus=(0,)`` with a 256 MiB budget): its resident memory was 226 MB idle,
#: 320 MB after ``outofcore.cuda.make_engine("cuda")`` (numba.cuda imported, the context
#: made, device memory measured) and 462 MB after one 256x256 float32 tile (the first
#: kernel compile, the pinned staging ring); 512 MiB rounds 462 MB up with margin.
GPU_WORKER_OVERHEAD_BYTES = 512 * 2**20
#: A LocalCluster worker's memory limit over its budget: Dask pauses a worker at 80% of its
#: limit (``distributed.worker.memory.pause``), so the budget must sit below that.
PAUSE_HEADROOM = 1.25
#: Budget per worker of a job that names none, where the memory cap allows.
DEFAULT_BUDGET_BYTES = 2**30
#: Below this a budget chosen for the user is too small to be of use: refuse instead.
MIN_DEFAULT_BUDGET_BYTES = 16 * 2**20
#: Seconds to wait for a scheduler address to answer (``outofcore.config``: connect-timeout).
CONNECT_TIMEOUT_SECONDS = 10.0
SYNC = ("sync", "synchronous")
#: Where outofcore says what is not the result (the command shows it on stderr).
logger = logging.getLogger("outofcore")
BLAS_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: What to install for the dashboard of a LocalCluster (bokeh, which Dask's dashboard needs).
DASHBOARD_EXTRA = "pip install 'outofcore[dashboard]'"


def resolve_client(client: Any, gpus: tuple[int, ...] | None = None) -> Any:
    """The client a job runs on: ``client``, or for ``None`` the default
    ``distributed.Client`` when one is open (``distributed.default_client()``:
    the one of ``with Client(...):``, or the last one made), else ``None`` (a
    LocalCluster for the job).

    Raises
    ------
    ClusterError
        For ``gpus`` (workers this job would start on this node's GPUs) while a
        default Client is open: the job would run on that Client's cluster; and for
        a ``client`` that is none of a ``distributed.Client``, a scheduler address,
        ``"sync"`` or None.
    """
    from distributed import Client, default_client  # noqa: PLC0415

    if client is not None:
        if not isinstance(client, str | Client):
            shown = repr(client) if len(repr(client)) <= 60 else repr(client)[:57] + "..."
            raise ClusterError(
                f"client = {shown} ({type(client).__name__}): give a distributed.Client, a "
                "scheduler address such as 'tcp://HOST:8786', 'sync' (this process), or None "
                "(a LocalCluster, or the default Client when one is open)"
            )
        return client

    try:
        found = default_client()
    except ValueError:  # no Client open
        return None
    if gpus:
        raise ClusterError(
            f"gpus={list(gpus)} starts workers on this node's GPUs, but a default Dask Client "
            f"is open (scheduler {_address(found)}) and the job would run on its cluster: leave "
            "out gpus to run there, or close that Client first"
        )
    return found


def worker_allowance(gpu: bool = False) -> int:
    """The memory a worker needs beside its tasks, in bytes.

    Parameters
    ----------
    gpu
        For a GPU worker: :data:`GPU_WORKER_OVERHEAD_BYTES` is added.

    Returns
    -------
    int
        :data:`WORKER_OVERHEAD_BYTES`, plus :data:`GPU_WORKER_OVERHEAD_BYTES` for a GPU
        worker: what every check of a worker's memory limit and the limits outofcore
        gives its own workers use.
    """
    return WORKER_OVERHEAD_BYTES + (GPU_WORKER_OVERHEAD_BYTES if gpu else 0)


def _allowance_note(gpu: bool) -> str:
    """How messages name :func:`worker_allowance`."""
    return "a GPU worker (interpreter, CUDA)" if gpu else "a worker (its interpreter)"


def local_worker_count(budget_bytes: int, requested: int | None = None, gpu: bool = False) -> int:
    """Workers for a LocalCluster: one, which gives BLAS every core of this machine.

    One worker with the whole budget holds tiles twice as large as two workers
    with half each, so it decodes fewer input bytes (inputs are read once per
    tile row or column) and runs one interpreter instead of two; decoding the
    next panel overlaps the multi-threaded BLAS call (the GIL is released).
    Measured in docs/performance.md.  Ask for more with ``requested``.

    Raises
    ------
    ClusterError
        For fewer than one worker, or more than the memory cap of this process
        tree (:func:`scheduler.memory_cap.memory_cap`: its cgroup's limit or the
        machine's memory) holds at ``budget_bytes`` plus :func:`worker_allowance`
        each (``gpu``: GPU workers).
    """
    workers = 1 if requested is None else requested
    if workers < 1:
        raise ClusterError(f"workers = {workers}: need at least one worker")
    allowance = worker_allowance(gpu)
    needed = workers * (budget_bytes + allowance)
    cap = memory_cap()
    if needed > cap.nbytes:
        raise ClusterError(
            f"{workers} worker(s) with a budget of {budget_bytes} bytes each need about "
            f"{needed} bytes ({gib(needed)}) with the {allowance} bytes of "
            f"{_allowance_note(gpu)} each, more than the {cap.describe()}, which holds this "
            f"process and every process it starts; "
            + _what_fits(cap.nbytes, workers, budget_bytes, allowance, gpu)
        )
    return workers


def _what_fits(cap: int, workers: int, budget_bytes: int, allowance: int, gpu: bool) -> str:
    """What to change so that workers fit ``cap`` bytes: a lower budget where one is left
    beside the allowances, else fewer workers (no budget makes their allowances fit)."""
    option = "--gpus" if gpu else "--workers"
    budget = cap // workers - allowance
    if budget > 0:
        return f"lower --memory to at most {budget} bytes or use fewer {option}"
    fewer = cap // (budget_bytes + allowance)
    if fewer >= 1:
        return (
            f"use at most {fewer} worker(s) ({option}): the allowances of {workers} alone "
            "exceed it, whatever the budget"
        )
    if cap > allowance:
        return f"use one worker ({option}) with --memory at most {cap - allowance} bytes"
    return "run where more memory is allowed: it holds less than one worker's allowance"


def default_budget(workers: int | None = None, gpus: tuple[int, ...] | None = None) -> int:
    """The budget per worker of a job on this machine that names none.

    :data:`DEFAULT_BUDGET_BYTES`, or less: the share of the memory cap of this
    process tree (:func:`scheduler.memory_cap.memory_cap`) left to each worker
    after its :func:`worker_allowance`, so a job started inside a capped
    cgroup fits without flags.  ``gpus`` starts one GPU worker per GPU.

    Raises
    ------
    ClusterError
        When the cap leaves no memory for a budget, naming the cap.
    """
    count = len(gpus) if gpus else (1 if workers is None else workers)
    allowance = worker_allowance(bool(gpus))
    cap = memory_cap()
    share = cap.nbytes // max(1, count) - allowance
    if share < MIN_DEFAULT_BUDGET_BYTES:
        raise ClusterError(
            f"the {cap.describe()} leaves {gib(max(0, share))} per worker for {count} worker(s) "
            f"after the {gib(allowance)} of {_allowance_note(bool(gpus))} each, less than "
            f"{gib(MIN_DEFAULT_BUDGET_BYTES)}; use fewer {'--gpus' if gpus else '--workers'} "
            "or run where more memory is allowed"
        )
    return min(DEFAULT_BUDGET_BYTES, share)


def check_client(client: Any, timeout: float = CONNECT_TIMEOUT_SECONDS) -> None:
    """Refuse a scheduler address that is not a Dask scheduler's, before any work.

    Raises
    ------
    ClusterError
        For a web address (the dashboard's, ``http://host:8787``), an address
        without a port, or an unknown protocol, with the form to use instead; for a
        TLS address (``tls://``, ``wss://``) without usable certificates
        (:func:`scheduler.tls.client_security`); and for an address where no Dask
        scheduler answers within ``timeout`` seconds (:func:`probe_scheduler`).
    """
    if not isinstance(client, str) or client.lower() in SYNC:
        return
    from distributed.comm.addressing import parse_address, parse_host_port  # noqa: PLC0415
    from distributed.comm.registry import backends  # noqa: PLC0415

    address = client.strip()
    scheme, _, rest = address.rpartition("://")
    host = rest.split("/")[0].rsplit(":", 1)[0] or "HOST"
    if scheme in ("http", "https"):
        raise ClusterError(
            f"--scheduler {client!r} is a web address (the dashboard's?); give the scheduler's "
            f"address, e.g. tcp://{host}:8786 (`dask scheduler` prints it)"
        )
    try:
        protocol, location = parse_address(address)
        if protocol not in backends:
            raise ValueError(f"unknown protocol {protocol!r}; Dask knows {', '.join(backends)}")
        if protocol in ("tcp", "tls", "ws", "wss"):
            parse_host_port(location)
        _check_special_protocol(protocol, location, backends[protocol])
    except ValueError as exc:
        raise ClusterError(
            f"--scheduler {client!r} is not a scheduler address ({exc}); give one like "
            f"tcp://{host}:8786, or 'sync' to run in this process"
        ) from None
    probe_scheduler(address, timeout, client_security(address))


def _check_special_protocol(protocol: str, location: str, backend: Any) -> None:
    """Refuse addresses of protocols no job can reach from here: an ``inproc://`` address
    of another process (it names a scheduler inside one process only), and ``ucx://``
    where only distributed's stub is installed (UCX was moved to distributed-ucxx).

    Raises
    ------
    ValueError
        Saying why.
    """
    if protocol == "inproc":
        parts = location.split("/")
        if len(parts) != 3 or not parts[1].isdigit():
            raise ValueError("an inproc address is inproc://HOST/PID/N")
        if int(parts[1]) != os.getpid():
            raise ValueError(
                f"inproc:// names a scheduler inside process {parts[1]}; only that process "
                "can reach it"
            )
    if protocol == "ucx" and type(backend).__module__ == "distributed.comm.ucx":
        raise ValueError("ucx:// needs distributed-ucxx, which is not installed here")


def probe_scheduler(
    address: str, timeout: float = CONNECT_TIMEOUT_SECONDS, security: Any = None
) -> None:
    """Ask the server at ``address`` who it is, the whole exchange within ``timeout`` s.

    A port that accepts connections and then says nothing (an HTTP or SSH server, a
    proxy) would hold a Dask Client forever: this answers first, before anything is
    written.  The exchange runs on its own event loop in another thread, so it works
    from code that is itself inside an event loop.

    ``security`` (a ``distributed.security.Security``; None: Dask's settings, checked by
    :func:`scheduler.tls.client_security`) gives the TLS context, as the job's Client uses
    it: the TLS handshake is bounded by ``timeout`` too.

    Raises
    ------
    ClusterError
        When nothing answers in time, or what answers is not a Dask scheduler; when the
        TLS handshake fails (:func:`scheduler.tls.tls_failure` says why).
    """
    import asyncio  # noqa: PLC0415
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    from distributed.comm import connect  # noqa: PLC0415

    if security is None:
        security = client_security(address)
    try:
        connection_args = security.get_connection_args("client")
    except (OSError, ValueError) as exc:
        raise ClusterError(f"cannot use the TLS certificates for {address!r}: {exc}") from None

    async def identity() -> Any:
        # The handshake (TLS included) is bounded too.
        comm = await connect(address, timeout=timeout, **connection_args)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    def ask() -> Any:
        return asyncio.run(asyncio.wait_for(identity(), timeout))

    try:
        with ThreadPoolExecutor(1, thread_name_prefix="outofcore-probe") as pool:
            reply = pool.submit(ask).result()
    except Exception as exc:  # refused, timed out, closed, or a protocol it cannot read
        refused = tls_failure(exc, address)
        if refused:
            raise ClusterError(refused) from None
        raise ClusterError(
            f"no Dask scheduler answered at {address!r} within {timeout:g} s "
            f"({type(exc).__name__}{': ' + str(exc)[:120] if str(exc) else ''}); is "
            "`dask scheduler` running there, and is the address right, its protocol the "
            "scheduler's (tcp://, tls://, ws://)?"
        ) from None
    kind = reply.get("type") if isinstance(reply, dict) else None
    if kind != "Scheduler":
        raise ClusterError(
            f"{address!r} answered, but as {kind or type(reply).__name__!r}, not a Dask "
            "scheduler: give the scheduler's address (`dask scheduler` prints it)"
        )


def is_local(client: Any) -> bool:
    """Whether ``client`` runs the job's tasks on this machine (a LocalCluster or in-process)."""
    return client is None or (isinstance(client, str) and client.lower() in SYNC)


def check_local_memory(
    client: Any,
    budget_bytes: int,
    workers: int | None = None,
    gpus: tuple[int, ...] | None = None,
) -> None:
    """Refuse, before any work, a job on this machine that cannot fit its memory cap.

    For ``client=None`` (a LocalCluster: ``workers``, or one per GPU in
    ``gpus``) and ``"sync"`` (one, in this process), as
    :func:`local_worker_count`; a job on a scheduler elsewhere passes (its
    workers' limits are checked once they are known: :func:`check_worker_memory`).

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
) -> Any:
    """Start the LocalCluster a job with ``budget_bytes`` per worker runs on.

    One single-threaded worker process per worker (see :func:`local_worker_count`),
    or with ``gpus`` one per listed GPU (:func:`scheduler.gpu_cluster.start_gpu_cluster`:
    dask-cuda's LocalCUDACluster where it is installed and sees the GPUs); each gets
    the memory limit :func:`local_worker_limit` gives (GPU workers: with CUDA's allowance).
    ``in_process`` runs CPU workers as threads of this process instead (:func:`runs_in_process`).
    ``dashboard`` serves Dask's dashboard (False: none, and no bokeh imported); the
    scheduler's web server (Dask's health and metrics pages) takes a free port either
    way: with no address Dask would take 8787, and warn where another holds it.
    """
    from distributed import LocalCluster  # noqa: PLC0415

    memory_limit = local_worker_limit(budget_bytes, gpu=bool(gpus))
    if gpus:
        with _workers_ignore_interrupts():
            return start_gpu_cluster(gpus, memory_limit, logging.ERROR, dashboard)
    n_workers = local_worker_count(budget_bytes, workers)
    cores = os.cpu_count() or 1
    if n_workers > cores:
        logger.warning(
            "%d workers on %d core(s): each worker will wait for a core most of the "
            "time (and its heartbeats may time out); --workers %d or fewer is faster",
            n_workers,
            cores,
            cores,
        )
    # Dask's nanny starts workers with OMP/OPENBLAS/MKL_NUM_THREADS=1; our tasks
    # size BLAS themselves (threadpoolctl), so start its pool at the share of
    # cores each worker gets rather than growing it from one thread.
    if runs_in_process(gpus, in_process):
        # Each worker's memory monitor reads this whole process's memory: give each the
        # limit of them all.  Scheduler and workers talk inproc://; their web servers are
        # the only listening sockets.  LocalCluster can put a worker's web server on
        # loopback only by turning on its bokeh dashboard too (worker_dashboard_address),
        # so the workers are added after, from the spec with the address alone.
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
            cluster.scale(n_workers)
            cluster.wait_for_workers(n_workers, timeout=CONNECT_TIMEOUT_SECONDS * 3)
        except BaseException:
            cluster.close()
            raise
        return cluster
    blas = str(local_blas_threads(n_workers))
    threads_env = {name: blas for name in BLAS_THREAD_VARIABLES}
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


def local_blas_threads(workers: int) -> int:
    """The BLAS threads each of ``workers`` LocalCluster workers gets: an equal share of
    this machine's cores, at least one."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def runs_in_process(gpus: tuple[int, ...] | None, in_process: bool) -> bool:
    """Whether a LocalCluster runs its workers in this process: ``in_process`` asked for,
    and CPU workers (no ``gpus``), however many.

    CPU workers gain nothing from processes of their own: their tasks spend their time
    in BLAS, decoding and chunk I/O, which release the GIL, and BLAS's threads are set
    for the process (:meth:`outofcore.worker_context.WorkerContext.blas_threads`).  In
    this process they start in a twentieth of the time (no interpreter to spawn,
    nothing imported again: docs/performance.md, "The first seconds").  GPU workers
    (one device each) keep their processes.
    """
    return in_process and not gpus


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


def local_worker_limit(budget_bytes: int, gpu: bool = False) -> int:
    """The memory limit of a LocalCluster worker whose tasks have ``budget_bytes``: the
    budget with Dask's :data:`PAUSE_HEADROOM`, plus :func:`worker_allowance` (``gpu``: a
    GPU worker's, with :data:`GPU_WORKER_OVERHEAD_BYTES`)."""
    return int(budget_bytes * PAUSE_HEADROOM) + worker_allowance(gpu)


def check_worker_memory(shape: WorkerShape, task_bytes: int) -> None:
    """Refuse workers whose memory limit per thread is below a task's projected bytes.

    A worker runs one task per thread, so each task may use its memory limit, less
    the :func:`worker_allowance` the worker needs beside its tasks, divided by its
    threads (as cubed's ``check_runtime_memory``).  Where every worker advertises the
    ``GPU`` resource, the allowance is a GPU worker's (``shape`` does not say which
    worker of a mixed cluster has a GPU: those get a CPU worker's).  Workers without a
    limit pass.

    Raises
    ------
    ClusterError
        Naming every worker that is short, its limit and threads, and the task's bytes.
    """
    gpu = 0 < shape.workers == shape.gpu_workers
    allowance = worker_allowance(gpu)

    def per_task(limit: int, threads: int) -> int:
        return (limit - allowance) // max(1, threads)

    short = [
        f"{address} ({limit} bytes for {threads} thread(s): {max(0, per_task(limit, threads))} "
        f"per task after the {allowance} bytes a {'GPU ' if gpu else ''}worker needs beside "
        "its tasks)"
        for address, limit, threads in shape.memory_limits
        if limit and per_task(limit, threads) < task_bytes
    ]
    if short:
        raise ClusterError(
            f"a task of this plan needs {task_bytes} bytes (projected), more than the memory "
            f"limit per thread of worker(s) {', '.join(short)}; lower --memory (the budget is "
            "shared by a worker's threads), or start the workers with more --memory-limit "
            "or fewer --nthreads"
        )


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
) -> Iterator[Executor]:
    """Yield an executor for ``client`` (see the module docstring), cleaning up after.

    ``gpus`` (with ``client=None``) starts one worker per listed GPU instead
    of one per core (see :mod:`scheduler.gpu_cluster`).  ``connect_timeout``
    bounds the wait for a scheduler address (three times it for its workers).
    ``in_process`` runs a LocalCluster's CPU workers in this process
    (:func:`runs_in_process`); ``dashboard`` False starts it without Dask's dashboard.
    ``on_close`` is called once the executor is closed
    when the tasks ran in this process (``"sync"`` or such a worker), failed or not:
    what they kept here is then nobody's.

    Raises
    ------
    ClusterError
        When a scheduler address does not answer within the timeout, or a
        cluster has fewer workers than ``workers`` asked for.
    """
    if isinstance(client, str) and client.lower() in SYNC:
        try:
            yield SynchronousExecutor()
        finally:
            if on_close is not None:
                on_close()
        return
    check_client(client, connect_timeout)
    from distributed import Client  # noqa: PLC0415

    if gpus and client is not None:
        raise ClusterError("--gpus starts workers on this node; it cannot go with --scheduler")
    if client is None:
        cluster = start_local_cluster(budget_bytes, workers, gpus, in_process, dashboard)
        n_workers = len(cluster.workers)
        here = runs_in_process(gpus, in_process)
        try:
            # Not the default Client: a job started meanwhile (another thread) would take it.
            with Client(cluster, set_as_default=False) as local_client:
                if not here:  # a worker in this process logs here already
                    _forward_warnings(local_client)
                _quiet_own_task_failures(local_client)
                if announce:
                    print(
                        f"Started a {cluster_kind(cluster)}: {n_workers} worker(s)"
                        f"{' in this process' if here else ''}, "
                        f"{dashboard_note(local_client.dashboard_link, dashboard)}",
                        file=sys.stderr,
                    )
                yield DaskExecutor(local_client)
        finally:
            cluster.close()
            if here and on_close is not None:
                on_close()
        return
    if isinstance(client, str):
        address = client
        with _connect(address, connect_timeout) as connected:
            _wait_for_workers(connected, address, workers, connect_timeout)
            _forward_warnings(connected)
            yield DaskExecutor(connected)
        return
    _wait_for_workers(client, _address(client), workers, connect_timeout)
    if announce and client is resolve_client(None):
        have = len(client.scheduler_info(n_workers=-1)["workers"])
        print(
            f"Running on the default Dask Client: scheduler {_address(client)}, {have} worker(s)",
            file=sys.stderr,
        )
    yield DaskExecutor(client)


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
        refused = tls_failure(exc, address)
        if refused:
            raise ClusterError(refused) from None
        raise ClusterError(
            f"no Dask scheduler answered at {address!r} within "
            f"{connect_timeout:g} s ({type(exc).__name__}); is `dask scheduler` "
            "running there, and is the address (tcp://HOST:PORT) right?"
        ) from None


def worker_shape_of(
    client: Any,
    *,
    budget_bytes: int,
    workers: int | None = None,
    gpus: tuple[int, ...] | None = None,
    connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
) -> WorkerShape:
    """The workers :func:`open_executor` would give a job, told before any cluster starts.

    ``"sync"``: this process, one task at a time.  None: the LocalCluster
    :func:`start_local_cluster` would start (one single-threaded worker per
    :func:`local_worker_count`, or one per GPU), with :func:`local_blas_threads` each.
    A scheduler address or a ``distributed.Client``: asked of its scheduler (once
    ``workers`` have joined, as the job waits for them), the connection closed after.

    Raises
    ------
    ClusterError
        As :func:`open_executor` does: no scheduler, too few workers, a memory cap.
    """
    if isinstance(client, str) and client.lower() in SYNC:
        return SynchronousExecutor().worker_shape()
    if client is None:
        if gpus:
            count = len(gpus)  # start_gpu_cluster: one single-threaded worker per GPU
            return WorkerShape(count, 1, local_blas_threads(count), gpu_workers=count)
        count = local_worker_count(budget_bytes, workers)
        return WorkerShape(count, 1, local_blas_threads(count))
    check_client(client, connect_timeout)
    if isinstance(client, str):
        with _connect(client, connect_timeout) as connected:
            _wait_for_workers(connected, client, workers, connect_timeout)
            return client_worker_shape(connected)
    _wait_for_workers(client, _address(client), workers, connect_timeout)
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
    (:mod:`scheduler.worker_logs`)."""
    from scheduler.worker_logs import QuietOwnTaskFailures  # noqa: PLC0415 (imports distributed)

    client.register_plugin(QuietOwnTaskFailures())


def _address(client: Any) -> str:
    """The scheduler address of a ``distributed.Client``, as messages name it."""
    return str(getattr(getattr(client, "scheduler", None), "address", None) or "?")


def serves_dashboard() -> bool:
    """Whether a scheduler started in this process serves Dask's dashboard: it does when it
    can import ``distributed.dashboard.scheduler`` (bokeh at the version Dask needs), and
    shows a page asking for bokeh otherwise."""
    try:
        importlib.import_module("distributed.dashboard.scheduler")
    except ImportError:
        return False
    return True


def dashboard_note(link: str, asked: bool) -> str:
    """How the start of a LocalCluster names its dashboard: ``link`` where one was ``asked``
    for and is served, what to install where it is not (no address of a page that only
    asks for bokeh), and how to ask for one on a short job."""
    if not asked:
        return "no dashboard for a short job (--dashboard, or dashboard=True, for one)"
    if not serves_dashboard():
        return f"no dashboard ({DASHBOARD_EXTRA} for one)"
    return f"dashboard at {link}"


def _wait_for_workers(client: Any, address: str, workers: int | None, timeout: float) -> None:
    wanted = workers or 1
    try:
        client.wait_for_workers(wanted, timeout=timeout * 3)
    except TimeoutError:
        have = len(client.scheduler_info(n_workers=-1)["workers"])
        raise ClusterError(
            f"the scheduler at {address!r} has {have} worker(s); waited "
            f"{timeout * 3:g} s for {wanted}"
        ) from None

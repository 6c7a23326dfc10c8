"""Whether a job's tasks run in this process, decided in one place.

* :func:`runs_in_threads`: ``dask.config.set(scheduler="threads")`` with no client and no
  default Client: the tasks run on threads of this process through dask's threaded
  scheduler (:class:`outofcore.runtime.executors.SynchronousExecutor` with threads), no
  LocalCluster started, as dask runs its own arrays there;
* :func:`runs_in_process`: a LocalCluster the job starts whose workers are threads here;
* :func:`in_this_process`: a ``distributed.Client`` whose scheduler (and so every worker)
  is inside this process (``inproc://``: ``LocalCluster(processes=False)``);
* :func:`tasks_run_here`: any of those, or ``"sync"``: the tasks see this process's
  memory (numpy arrays, zarr ``MemoryStore`` arrays).

``dask.config``'s ``"sync"`` (``"synchronous"``, ``"single-threaded"``) and
``scheduler-address`` are resolved with the client
(:func:`outofcore.runtime.addresses.resolve_client`); ``"processes"`` starts the LocalCluster a
job starts without a setting (:func:`runs_in_threads` says False).
"""

from __future__ import annotations

import os
from typing import Any

from outofcore.runtime.addresses import SYNC
from outofcore.runtime.gpu_cluster import GpuNode

#: ``dask.config``'s names of its threaded scheduler.
THREADS = ("threads", "threading")


def runs_in_threads(client: Any, gpus: tuple[int, ...] | None = None) -> bool:
    """Whether a job on ``client`` (as :func:`~outofcore.runtime.addresses.resolve_client` left it)
    runs its tasks on threads of this process, without a cluster: ``client`` None (no
    client given, no default Client open), no ``gpus`` (those ask for a cluster of GPU
    workers), and ``dask.config``'s ``scheduler`` set to ``"threads"`` (or
    ``"threading"``, or ``dask.threaded.get``)."""
    if client is not None or gpus:
        return False
    import dask  # noqa: PLC0415 (keeps Dask out of plain imports)
    import dask.threaded  # noqa: PLC0415

    scheduler = dask.config.get("scheduler", None)
    if isinstance(scheduler, str):
        return scheduler.lower() in THREADS
    return scheduler is dask.threaded.get


def thread_count(workers: int) -> int:
    """The threads of a job :func:`runs_in_threads` gives: ``workers`` (those this
    machine's memory cap allows, or the job's ``workers``), at most ``dask.config``'s
    ``num_workers`` where that is set, as dask's threaded scheduler takes it."""
    import dask  # noqa: PLC0415

    limit = dask.config.get("num_workers", None)
    return max(1, min(workers, int(limit))) if limit else workers


def runs_in_process(
    gpus: tuple[int, ...] | None, in_process: bool, node: GpuNode | None = None
) -> bool:
    """Whether a LocalCluster runs its workers in this process: ``in_process`` asked for,
    and CPU workers (no ``gpus``), however many, or the worker of a single GPU where this
    process numbers devices as the job's GPU indices mean them (``node``'s
    :meth:`~outofcore.runtime.gpu_cluster.GpuNode.numbers_devices_as_listed`: the command
    sets it before the device library starts; no ``node``: a GPU's worker is a process).

    CPU workers gain nothing from processes of their own: their tasks spend their time
    in BLAS, decoding and chunk I/O, which release the GIL, and BLAS's threads are set
    for the process (:meth:`outofcore.compute.worker_context.WorkerContext.blas_threads`).  In
    this process they start in a twentieth of the time (no interpreter to spawn,
    nothing imported again: docs/performance.md, "The first seconds").  A single GPU's
    worker in this process saves the start and stop of a GPU cluster (2.5 to 4 s on the
    GPU nodes measured, design.md), the imports and device context of a second process; its
    tasks select the GPU (the backend's in-process device).  Several GPUs keep a process
    each (one device, one device context each).
    """
    if not in_process:
        return False
    if not gpus:
        return True
    return len(gpus) == 1 and node is not None and node.numbers_devices_as_listed()


def in_this_process(client: Any) -> bool:
    """Whether ``client`` is a ``distributed.Client`` whose scheduler is inside this
    process (an ``inproc://`` address of this process's id): its workers are then threads
    of this process too (nothing else can reach such a scheduler)."""
    address = str(getattr(getattr(client, "scheduler", None), "address", None) or "")
    if not address.startswith("inproc://"):
        return False
    parts = address[len("inproc://") :].split("/")
    return len(parts) == 3 and parts[1] == str(os.getpid())


def tasks_run_here(
    client: Any, gpus: tuple[int, ...] | None, in_process: bool, node: GpuNode | None = None
) -> bool:
    """Whether a job on ``client`` runs its tasks in this process: ``"sync"``; no client
    with ``dask.config``'s threads (:func:`runs_in_threads`) or the LocalCluster the job
    starts when its workers are threads of this process (:func:`runs_in_process`); a
    ``distributed.Client`` of a cluster in this process (:func:`in_this_process`).  Its
    tasks then see this process's memory (numpy arrays, zarr ``MemoryStore`` arrays)."""
    if isinstance(client, str):
        return client.lower() in SYNC
    if client is None:
        return runs_in_threads(client, gpus) or runs_in_process(gpus, in_process, node)
    return in_this_process(client)

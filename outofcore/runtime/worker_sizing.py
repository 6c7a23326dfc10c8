"""The memory and threads of a job's workers: how many LocalCluster workers fit this
machine's memory cap, the budget of a job that names none, the memory limit outofcore gives
its own workers, the BLAS threads each gets, and the check that a cluster's workers hold a
task (:func:`check_worker_memory`).

No Dask is imported here: a plan sizes its workers before any cluster starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from outofcore.errors import ClusterError
from outofcore.runtime.cores import usable_cores
from outofcore.runtime.memory_cap import gib, memory_cap

if TYPE_CHECKING:
    from outofcore.runtime.executors import WorkerShape

#: Memory a worker needs besides its task: its interpreter and libraries, its nanny,
#: and its share of the client and scheduler processes of a LocalCluster.  Measured
#: (docs/performance.md, "Larger than RAM"): a 1-worker job's whole process tree peaked
#: 0.21 GiB above its projected task; this keeps more than twice that.
WORKER_OVERHEAD_BYTES = 512 * 2**20
#: Memory a GPU worker needs beside its task on top of :data:`WORKER_OVERHEAD_BYTES`:
#: the device library, its context, the compiled kernels and the engine's fixed pinned
#: buffers (:func:`worker_allowance`).  Measured on an H200 worker started by
#: ``gpus=(0,)`` with a 256 MiB budget (docs/gpu.md): its resident memory was 226 MB idle,
#: 320 MB once the CUDA backend's engine was made (its library imported, the context made,
#: device memory measured) and 462 MB after one 256x256 float32 tile (the first kernel
#: compile, the pinned staging ring); 512 MiB rounds 462 MB up with margin.
GPU_WORKER_OVERHEAD_BYTES = 512 * 2**20
#: A LocalCluster worker's memory limit over its budget: Dask pauses a worker at 80% of its
#: limit (``distributed.worker.memory.pause``), so the budget must sit below that.
PAUSE_HEADROOM = 1.25
#: Dask's memory monitor, off for a worker that runs in the job's own process: it reads
#: the whole process's memory, the caller's arrays included, and a worker it paused for
#: them would never run a task.  Such a worker's tasks keep to the plan's budget.
IN_PROCESS_MEMORY = {
    f"distributed.worker.memory.{name}": False for name in ("target", "spill", "pause", "terminate")
}
#: Budget per worker of a job that names none, where the memory cap allows.
DEFAULT_BUDGET_BYTES = 2**30
#: Below this a budget chosen for the user is too small to be of use: refuse instead.
MIN_DEFAULT_BUDGET_BYTES = 16 * 2**20


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
        tree (:func:`outofcore.runtime.memory_cap.memory_cap`: its cgroup's limit or the
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
    process tree (:func:`outofcore.runtime.memory_cap.memory_cap`) left to each worker
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


def local_blas_threads(workers: int) -> int:
    """The BLAS threads each of ``workers`` LocalCluster workers gets: an equal share of
    this machine's cores, at least one."""
    return max(1, usable_cores() // max(1, workers))


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

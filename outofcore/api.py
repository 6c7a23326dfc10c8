"""The Python API: :func:`matmul`, and :func:`run_job` behind it and the CLI.

``run_job`` is orchestration only: it checks the operands and the output
(:mod:`outofcore.arrays`, :mod:`outofcore.resume`), takes the output's lease
(:mod:`outofcore.lease`), opens an executor (:mod:`scheduler.cluster`), makes
the plan for its workers (:mod:`scheduler.plan`), runs the worker entry
:func:`outofcore.recorded.compute_and_record` once per tile not yet recorded, and
marks the output complete only when every tile has its record.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from typing import Any

import zarr

from outofcore import arrays, config, interop
from outofcore.engines import resolve_backend
from outofcore.errors import InputError
from outofcore.job_output import (
    JobResult,
    damaged_found,
    finish_output,
    make_metadata_durable,
    start_output,
    write_empty_product,
)
from outofcore.job_tasks import run_tiles, summarize, tile_job
from outofcore.lease import OwnerCheck, check_not_held, new_job_id
from outofcore.leasing import Lease
from outofcore.operands import Operands, check_output_room
from outofcore.phases import Phases
from outofcore.planning import (
    ONE_TASK,
    job_workers,
    plan_job,
    wants_dashboard,
    warn_unsharded,
    with_budget,
)
from outofcore.recorded import RecordedJob
from outofcore.resume import (
    check_start_unchanged,
)
from outofcore.spec import JobSpec
from outofcore.status import job_status
from outofcore.targets import JOB_ATTRIBUTE
from outofcore.worker_context import worker_context
from scheduler.addresses import SYNC, check_client
from scheduler.cluster import check_local_memory, is_local, open_executor, resolve_client
from scheduler.executors import Executor, SynchronousExecutor
from scheduler.gpu_cluster import check_gpus_usable
from scheduler.worker_sizing import check_worker_memory

__all__ = [
    "ATTRIBUTE",
    "JobSpec",
    "gram",
    "job_status",
    "matmul",
    "run_job",
]

#: Key of the job record in the output array's attributes.
ATTRIBUTE = JOB_ATTRIBUTE


def matmul(
    a: arrays.ArrayLike,
    b: arrays.ArrayLike,
    out: arrays.ArrayLike,
    spec: JobSpec | None = None,
    *,
    client: Any = None,
    **options: Any,
) -> zarr.Array:
    """Compute ``out = alpha * op(a) @ op(b) + beta * addend`` out of core; return ``out``.

    Parameters
    ----------
    a, b
        2-D ``zarr.Array`` objects, or paths / fsspec URLs: float16/32/64,
        complex64/128, int8, uint8 or int16, mixed as numpy mixes them
        (:mod:`outofcore.dtypes`); also ``da.from_zarr`` dask arrays (``.T`` too) and,
        in process, numpy arrays (:mod:`outofcore.interop`).
    out
        Path or URL of the output (created with the plan's tiling), or an
        existing ``zarr.Array`` of the product's shape and output dtype.
    spec
        The job's options as a :class:`~outofcore.spec.JobSpec`, or ``None``
        to build one from ``options``.
    client
        ``None``: the default ``distributed.Client`` when one is open (dask's
        convention, ``distributed.default_client()``: inside ``with Client(...):``),
        otherwise a LocalCluster started for this job and closed after it.  Or a
        scheduler address, a ``distributed.Client`` (used as it is, never closed), or
        ``"sync"`` (in-process, no Dask).
    **options
        Fields of :class:`~outofcore.spec.JobSpec`: ``transpose_a``,
        ``transpose_b``, ``alpha``, ``beta``, ``addend``, ``out_dtype``, ``memory`` (per
        worker, e.g. ``"512MiB"``; default 1 GiB, or less to fit this machine's memory cap),
        ``backend`` (``"auto"``, ``"cpu"``, ``"cuda"``, ``"cupy"``), ``workers``,
        ``overwrite``, ``progress``, ``output_codec`` (``"none"`` or ``"zstd"``), ``device_memory``,
        ``gpus``, ``tile``, ``tk``, ``splits``, ``lease_timeout``, ``storage_options`` (fsspec
        options of URLs: credentials, endpoint; docs/object-stores.md).

    Returns
    -------
    zarr.Array
        The output, opened; ``out.attrs["outofcore"]`` holds the job summary.

    Examples
    --------
    >>> c = outofcore.matmul("a.zarr", "b.zarr", "c.zarr", memory="512MiB")  # doctest: +SKIP
    >>> gram = outofcore.matmul("x.zarr", "x.zarr", "g.zarr", transpose_a=True)  # doctest: +SKIP
    """
    return run_job(a, b, out, spec, client=client, **options).output


def gram(
    x: arrays.ArrayLike,
    out: arrays.ArrayLike,
    spec: JobSpec | None = None,
    *,
    rows: bool = False,
    client: Any = None,
    **options: Any,
) -> zarr.Array:
    """Compute the Gram matrix ``out = alpha * x.T @ x`` (``rows``: ``x @ x.T``); return ``out``.

    Only the tiles on and above the diagonal are computed (the diagonal ones
    with BLAS ``syrk``, half the work) and each is written with its mirror,
    so ``out`` is exactly symmetric and ``x`` is read about half as often as
    by a general product.  Takes :func:`matmul`'s options except the
    transposes and the addend; ``matmul(x, x, out, transpose_a=True)`` is the
    same job.

    Examples
    --------
    >>> g = outofcore.gram("x.zarr", "g.zarr", memory="2GiB")  # doctest: +SKIP
    """
    for name in ("transpose_a", "transpose_b", "addend", "beta"):
        if name in options or (spec is not None and getattr(spec, name) not in (False, None, 0)):
            raise InputError(
                f"gram takes no {name}: it computes alpha * x.T @ x (x @ x.T: rows=True)"
            )
    product = {"transpose_a": not rows, "transpose_b": rows}
    if spec is not None:
        spec = replace(spec, **product)
    else:
        options.update(product)
    return run_job(x, x, out, spec, client=client, **options).output


def run_job(
    a: arrays.ArrayLike,
    b: arrays.ArrayLike,
    out: arrays.ArrayLike,
    spec: JobSpec | None = None,
    *,
    client: Any = None,
    **options: Any,
) -> JobResult:
    """Run one product like :func:`matmul` and return the plan and summary too.

    An incomplete output whose journal matches this job is resumed: its tile
    sizes are forced and only the tiles without a record are computed.  The
    job holds the output's lease while it runs (see :mod:`outofcore.lease`).
    """
    phases = Phases()
    with phases("open"):
        spec = JobSpec.of(spec, options)
        client = resolve_client(client, spec.gpus)  # None: the default Client when one is open
        if spec.gpus and client is None:  # GPU workers on this node: refuse them without a GPU
            check_local_gpus(spec.gpus)
        spec = with_budget(spec, client)  # the budget of one worker (--memory)
        # A scheduler address that names no scheduler, or where none answers: before anything.
        check_client(client, config.number("connect-timeout", positive=True))
        if not (isinstance(client, str) and client.lower() in SYNC):  # worker processes read
            interop.check_shareable(
                {"input A": a, "input B": b, "the addend": spec.addend, "the output": out}
            )
        if is_local(client):  # the tasks run on this machine: its GPU decides, before any work
            spec = replace(spec, backend=resolve_backend(spec.backend))
        operands = Operands.open(a, b, out, spec, phases)
        check_not_held(operands.journal, operands.where)  # refuse at once, before any write
        start = operands.inspect(spec.overwrite)
    if 0 in (*operands.shape, operands.product.k):
        return write_empty_product(operands, start, spec)
    with phases("open"):
        if start.resuming:  # the plan must be the one the journal's tiles belong to
            spec = replace(spec, tile=tuple(start.document["tile"]), tk=int(start.document["tk"]))
        # Refuse a budget too small for the smallest tile before any cluster starts: with
        # the workers of the LocalCluster or process the job starts (a scheduler elsewhere
        # is asked once its workers have joined: one task at a time until then).
        workers = job_workers(spec, client) if is_local(client) else ONE_TASK
        job_plan = plan_job(operands.product, spec, workers, start.existing)
        if start.existing is None:  # and an output its disk cannot hold, before any write
            check_output_room(operands.out, operands.shape, operands.dtype, spec)
        # And a LocalCluster (or this process) that cannot fit this machine's memory cap.
        check_local_memory(client, spec.memory, spec.workers, spec.gpus)
        dashboard = wants_dashboard(job_plan, operands.product, spec, client)

    lease = Lease(operands.journal, operands.where, new_job_id(), spec.lease_timeout)
    with contextlib.ExitStack() as held:
        with phases("lease"):
            held.enter_context(lease)
        with phases("cluster_start"):
            executor = held.enter_context(_open_executor(client, spec, dashboard))
            lease.on_lost(executor.abort)  # a lost lease stops the tasks: the job fails
        with phases("plan"):
            check_start_unchanged(start, operands.inspect(spec.overwrite))
            workers = executor.worker_shape()
            if not is_local(client):  # a cluster's workers decide, not this machine
                where = getattr(getattr(client, "scheduler", None), "address", client)
                backend = resolve_backend(spec.backend, workers.gpu_workers, where)
                spec = replace(spec, backend=backend)
            job_plan = plan_job(operands.product, spec, workers, start.existing)
            plan = job_plan.plan
            warn_unsharded(plan, spec, start.existing)
            if not isinstance(executor, SynchronousExecutor):
                interop.check_shareable({**operands.product.inputs, "the output": start.existing})
                check_worker_memory(workers, plan.task_bytes)
        with phases("output"):
            output, record, document, done = start_output(operands, start, plan, spec, lease.job_id)
        recorded = RecordedJob(
            tile_job=tile_job(operands, output, plan, spec, workers, lease.job_id),
            journal=operands.journal,
            journal_id=document["journal_id"],
            owner_check=OwnerCheck(operands.journal, lease.job_id, lease.timeout),
        )
        with phases("tasks"), executor.span(f"outofcore {operands.where}"):  # the dashboard's
            results, seconds = run_tiles(executor, recorded, plan, done, spec, workers)
        with phases("finish"):
            lease.check()  # a job that lost its lease never calls the output complete
            summary = summarize(
                plan, results, seconds, spec.backend, output, len(done), lease.job_id
            )
            summary["product"] = operands.product.summary()
            summary["worker_budget_bytes"] = job_plan.worker_budget_bytes
            summary["damaged"] = damaged_found(document, results)
            finish_output(operands, plan, document, done, results)
            summary["phases"] = phases.as_dict()  # so far: the stored summary's
            output.attrs[ATTRIBUTE] = {**record, "complete": True, "summary": summary}
            make_metadata_durable(output)  # before job.json says complete
            operands.journal.write_job({**document, "complete": True, "completed": time.time()})
        with phases("cluster_stop"):
            held.close()
    summary = {**summary, "phases": phases.as_dict()}
    return JobResult(output=output, plan=plan, summary=summary, results=tuple(results))


def check_local_gpus(gpus: tuple[int, ...]) -> None:
    """Refuse ``gpus`` (workers on this node's GPUs) where no CUDA GPU is usable here.

    Asks the CUDA driver for its device count (:func:`outofcore.cuda.probe.device_count`,
    without importing numba); numba's CUDA simulator counts as a GPU, as in the tests.

    Raises
    ------
    ClusterError
        Naming ``gpus`` and the driver's device count
        (:func:`scheduler.gpu_cluster.check_gpus_usable`).
    """
    from outofcore.cuda import probe as cuda_probe  # noqa: PLC0415 (the standard library only)

    simulator = cuda_probe.simulator_enabled()
    check_gpus_usable(gpus, 0 if simulator else cuda_probe.device_count(), simulator)


def _open_executor(
    client: Any, spec: JobSpec, dashboard: bool
) -> contextlib.AbstractContextManager[Executor]:
    return open_executor(
        client,
        budget_bytes=spec.memory,
        workers=spec.workers,
        gpus=spec.gpus,
        announce=spec.progress,
        connect_timeout=config.number("connect-timeout", positive=True),
        in_process=config.flag("in-process-worker"),
        dashboard=dashboard,
        # Tasks that ran in this process (in-process, or its LocalCluster's worker threads)
        # leave their engines, panels and buffers here: free them with the executor.
        on_close=worker_context().release_in_process,
    )

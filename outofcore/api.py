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
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import zarr

from outofcore import arrays, config, interop
from outofcore.engines import resolve_backend
from outofcore.errors import InputError
from outofcore.fingerprint import Fingerprint, check_unchanged, fingerprint
from outofcore.journal import Journal
from outofcore.lease import OwnerCheck, check_not_held, new_job_id
from outofcore.leasing import Lease
from outofcore.locations import Location, locate
from outofcore.phases import Phases
from outofcore.planning import (
    ONE_TASK,
    job_workers,
    plan_job,
    wants_dashboard,
    warn_unsharded,
    with_budget,
)
from outofcore.product import Product, listed_product
from outofcore.progress import progress
from outofcore.recorded import RecordedJob, TileResult, compute_and_record
from outofcore.resume import (
    Start,
    check_output_unchanged,
    check_start_unchanged,
    inspect_output,
    job_identity,
    open_journal,
    output_layout,
    output_metadata,
)
from outofcore.spec import JobSpec
from outofcore.splitk import SplitJob, compute_partial, reduce_tile
from outofcore.status import describe_output, job_status
from outofcore.targets import JOB_ATTRIBUTE, check_replaceable
from outofcore.tile import TileJob
from outofcore.worker_context import worker_context
from outofcore.writing import disk_usage_of, local_folder, make_durable
from scheduler.addresses import SYNC, check_client
from scheduler.cluster import check_local_memory, is_local, open_executor, resolve_client
from scheduler.executors import Executor, SynchronousExecutor, WorkerShape
from scheduler.gpu_cluster import GPU_RESOURCE, check_gpus_usable
from scheduler.plan import Plan
from scheduler.worker_sizing import check_worker_memory

__all__ = [
    "ATTRIBUTE",
    "JobResult",
    "JobSpec",
    "gram",
    "job_status",
    "matmul",
    "open_product",
    "run_job",
    "summarize",
]

#: Key of the job record in the output array's attributes.
ATTRIBUTE = JOB_ATTRIBUTE


@dataclass(frozen=True)
class JobResult:
    """The output array and what the job measured."""

    output: zarr.Array
    #: The plan; None for an empty product (a dimension of 0), which has no tile to plan.
    plan: Plan | None
    summary: dict[str, Any]
    results: tuple[TileResult, ...]


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
        return _empty_product(operands, start, spec)
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
            output, record, document, done = _start_output(
                operands, start, plan, spec, lease.job_id
            )
        recorded = RecordedJob(
            tile_job=_tile_job(operands, output, plan, spec, workers, lease.job_id),
            journal=operands.journal,
            journal_id=document["journal_id"],
            owner_check=OwnerCheck(operands.journal, lease.job_id, lease.timeout),
        )
        with phases("tasks"), executor.span(f"outofcore {operands.where}"):  # the dashboard's
            results, seconds = _run_tiles(executor, recorded, plan, done, spec, workers)
        with phases("finish"):
            lease.check()  # a job that lost its lease never calls the output complete
            summary = summarize(
                plan, results, seconds, spec.backend, output, len(done), lease.job_id
            )
            summary["product"] = operands.product.summary()
            summary["worker_budget_bytes"] = job_plan.worker_budget_bytes
            summary["damaged"] = damaged_found(document, results)
            _finish(operands, plan, document, done, results)
            summary["phases"] = phases.as_dict()  # so far: the stored summary's
            output.attrs[ATTRIBUTE] = {**record, "complete": True, "summary": summary}
            make_metadata_durable(output)  # before job.json says complete
            operands.journal.write_job({**document, "complete": True, "completed": time.time()})
        with phases("cluster_stop"):
            held.close()
    summary = {**summary, "phases": phases.as_dict()}
    return JobResult(output=output, plan=plan, summary=summary, results=tuple(results))


def _empty_product(operands: Operands, start: Start, spec: JobSpec) -> JobResult:
    """A product with a dimension of 0, as numpy computes it: an empty output (m or n = 0),
    or for k = 0 the sum of no terms, ``0·alpha + beta·addend``, written by row blocks in
    this process (no cluster: there is nothing to multiply).  No journal: it is written
    whole, then marked complete."""
    m, n = operands.shape
    started = time.perf_counter()
    with Lease(operands.journal, operands.where, new_job_id(), spec.lease_timeout) as lease:
        if start.clear_output:
            operands.journal.clear_output()
        elif start.clear_journal:  # an array given as the output, started over
            operands.journal.clear_journal()
        chunks = (max(1, min(m, 1024)), max(1, min(n, 1024)))
        record = {"complete": False, "product": operands.product.summary(), "job_id": lease.job_id}
        if start.existing is None:
            output = arrays.create_output(
                operands.out, (m, n), operands.dtype, chunks, False, {ATTRIBUTE: record},
                spec.output_codec, zarr_format=spec.zarr_format,
                dimension_names=operands.product.dimension_names,
            )  # fmt: skip
        else:
            output = start.existing
        compute = operands.product.types.compute
        for r0 in range(0, m if n else 0, chunks[0]):
            rows = np.zeros((min(chunks[0], m - r0), n), compute)
            output[r0 : r0 + rows.shape[0], :] = operands.product.finish_rows(rows, (r0, 0))
        seconds = time.perf_counter() - started
        summary = {
            "output": arrays.describe(output),
            "shape": [m, n],
            "k": operands.product.k,
            "dtype": str(np.dtype(output.dtype)),
            "empty": True,
            "tiles": 0,
            "seconds": seconds,
            "bytes_written": m * n * output.dtype.itemsize,
            "job_id": lease.job_id,
            "product": operands.product.summary(),
        }
        lease.check()
        output.attrs[ATTRIBUTE] = {**record, "complete": True, "summary": summary}
    return JobResult(output=output, plan=None, summary=summary, results=())


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


def open_product(a: arrays.ArrayLike, b: arrays.ArrayLike, spec: JobSpec) -> Product:
    """The product a job with ``spec`` computes, opened and checked (nothing is written)."""
    # Each array named by a path or URL is located once, with the options that open it.
    a, b, addend = (
        locate(x, spec.storage_options) if isinstance(x, str | os.PathLike) else x
        for x in (a, b, spec.addend)
    )
    return Product.open(
        a,
        b,
        transpose_a=spec.transpose_a,
        transpose_b=spec.transpose_b,
        alpha=spec.alpha,
        beta=spec.beta,
        addend=addend,
        out_dtype=spec.out_dtype,
    )


@dataclass(frozen=True)
class Operands:
    """A job's inputs and output as checked in the client, before anything is written."""

    product: Product
    #: The output: a ``zarr.Array``, or the location of a path or URL (located once, with
    #: the options that open it: every step below takes it).
    out: zarr.Array | Location
    shape: tuple[int, int]
    dtype: np.dtype
    journal: Journal
    #: How messages name the output.
    where: str
    fingerprints: dict[str, Fingerprint]
    #: What must match for a rerun to resume (:func:`outofcore.resume.job_identity`).
    identity: dict[str, Any]

    @classmethod
    def open(
        cls,
        a: arrays.ArrayLike,
        b: arrays.ArrayLike,
        out: arrays.ArrayLike,
        spec: JobSpec,
        phases: Phases | None = None,
    ) -> Operands:
        """Open and check the product, check the output target and fingerprint the inputs
        (timed as the phase ``fingerprints`` of ``phases``)."""
        product = open_product(a, b, spec)
        inputs = product.inputs
        if not isinstance(out, zarr.Array):  # located once, with the options that open it
            out = locate(out, spec.storage_options)
        arrays.check_output_target(out, inputs)
        if isinstance(out, Location):  # nothing outofcore did not make
            check_replaceable(out)
        with (phases or Phases())("fingerprints"):
            fingerprints = {name: fingerprint(array) for name, array in inputs.items()}
        identity = job_identity(
            inputs,
            fingerprints,
            spec.memory,
            spec.tile,
            spec.tk,
            product.summary(),
            output_layout(spec.zarr_format, spec.shards),
        )
        return cls(
            product=product,
            out=out,
            shape=product.shape,
            dtype=product.types.output,
            journal=Journal.for_output(out),
            where=describe_output(out),
            fingerprints=fingerprints,
            identity=identity,
        )

    @property
    def inputs(self) -> dict[str, zarr.Array]:
        """Every array the job reads, by name."""
        return self.product.inputs

    def inspect(self, overwrite: bool) -> Start:
        """How the job starts on its output now (:func:`outofcore.resume.inspect_output`)."""
        return inspect_output(
            self.out,
            self.journal,
            self.shape,
            self.dtype,
            self.identity,
            overwrite,
            self.fingerprints,
        )


def check_output_room(
    out: zarr.Array | Location, shape: tuple[int, int], dtype: np.dtype, spec: JobSpec
) -> None:
    """Refuse a new output that the free space of its local disk cannot hold
    uncompressed (``--output-codec none``, the default; products of dense values hardly
    compress), before anything is written: a metadata-only 10^8 x 10^8 product ran until
    killed.  Outputs elsewhere, or compressed, are not checked.

    Raises
    ------
    InputError
        Naming the output's bytes and the free bytes.
    """
    if spec.output_codec != "none" or isinstance(out, zarr.Array) or not out.is_local:
        return
    from dask.utils import format_bytes  # noqa: PLC0415

    total = shape[0] * shape[1] * np.dtype(dtype).itemsize
    folder, free, _ = disk_usage_of(out.path)
    if total > free:
        raise InputError(
            f"the output is {shape[0]}x{shape[1]} {np.dtype(dtype)}: {format_bytes(total)} "
            f"uncompressed, and {folder!r} has {format_bytes(free)} free: make room, choose "
            "another disk, or compress the output (--output-codec zstd, checked as it writes)"
        )


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


def _start_output(
    operands: Operands, start: Start, plan: Plan, spec: JobSpec, job_id: str
) -> tuple[zarr.Array, dict[str, Any], dict[str, Any], set[str]]:
    """Open the journal and create (or take) the output, marked incomplete.

    Returns the output, its attribute record, the job document and the tiles done.
    """
    record = {
        "complete": False,
        "plan": plan.summary(),
        "product": operands.product.summary(),
        "backend": spec.backend,
        "job_id": job_id,
    }
    document, done = open_journal(
        operands.journal,
        start,
        plan,
        operands.identity,
        operands.fingerprints,
        spec.backend,
        job_id,
    )
    if start.existing is None:
        output = arrays.create_output(
            operands.out,
            operands.shape,
            operands.dtype,
            plan.out_chunks,
            False,
            {ATTRIBUTE: record},
            spec.output_codec,
            shards=plan.out_shards,
            zarr_format=spec.zarr_format,
            dimension_names=operands.product.dimension_names,
        )
    else:
        output = start.existing
        output.attrs[ATTRIBUTE] = record
    make_metadata_durable(output)
    if not start.resuming:  # its own metadata, fingerprinted with the job (checked on resume)
        document = {**document, "output_metadata": output_metadata(operands.journal)}
        operands.journal.write_job(document)
    return output, record, document, done


def _tile_job(
    operands: Operands,
    output: zarr.Array,
    plan: Plan,
    spec: JobSpec,
    workers: WorkerShape,
    job_id: str,
) -> TileJob:
    return TileJob(
        # inputs read as twins that refuse to read a listed chunk the store calls missing
        product=listed_product(operands.product, operands.fingerprints),
        c=output,
        panels=plan.panels,
        tm=plan.tm,
        tn=plan.tn,
        tk=plan.tk,
        backend=spec.backend,
        blas_threads=workers.blas_threads,
        io_concurrency=plan.io_concurrency,
        job_id=job_id,
        device_memory=spec.device_memory,
    )


def _run_tiles(
    executor: Executor,
    recorded: RecordedJob,
    plan: Plan,
    done: set[str],
    spec: JobSpec,
    workers: WorkerShape,
) -> tuple[list[TileResult], float]:
    """Run every tile not ``done`` (GPU workers only, for a GPU backend); results, seconds.

    A split plan runs the parts of those tiles not recorded yet, then their reductions
    (:mod:`outofcore.splitk`).  Dask keys name their kind: ``outofcore-tile`` (a Gram
    product's tiles too), ``outofcore-part``, ``outofcore-reduce``.
    """
    todo = [task for task in plan.tasks if task.key not in done]
    resources = {GPU_RESOURCE: 1} if spec.on_gpu and workers.gpu_workers else None
    started = time.perf_counter()
    name = "gram" if plan.problem.symmetric else "matmul"
    if plan.splits == 1:
        with _progress(len(plan.tasks), len(done), spec.progress, name=name) as on_result:
            results = executor.run(compute_and_record, recorded, todo, on_result, resources, "tile")
        return results, time.perf_counter() - started
    split = SplitJob(recorded, plan.splits)
    finished = recorded.journal.done_partials(recorded.journal_id)
    parts = [p for p in plan.partial_tasks if p.tile.key not in done and p.key not in finished]
    total = len(plan.tasks) * (plan.splits + 1)  # every part, then every reduction
    done_before = total - len(parts) - len(todo)
    with _progress(total, done_before, spec.progress, "task", name) as on_result:
        results = executor.run(compute_partial, split, parts, on_result, resources, "part")
        results += executor.run(reduce_tile, split, todo, on_result, kind="reduce")
    return results, time.perf_counter() - started


def _progress(
    total: int, done: int, show: bool, unit: str = "tile", name: str = "matmul"
) -> contextlib.AbstractContextManager[Callable[[Any], None]]:
    """Progress on stderr, called ``name`` (a bar on a terminal, else a line every few
    seconds: :mod:`outofcore.progress`); yields the executor's per-result callback."""
    return progress(total, done, show, unit, name)


def damaged_found(document: dict[str, Any], results: list[TileResult]) -> list[str]:
    """Records and partial tiles this run found damaged and computed again: the records
    dropped when it resumed (``job.json``'s run entry) and the parts its reductions
    computed again."""
    dropped = (document.get("runs") or [{}])[-1].get("damaged") or {}
    return sorted(set(dropped) | {part for r in results for part in r.recomputed})


def make_metadata_durable(output: zarr.Array) -> None:
    """Flush the output's metadata documents (and the folders above, to its parent) to disk
    on a local store (:func:`outofcore.writing.make_durable`)."""
    folder = local_folder(output)
    if folder is None:
        return
    names = ("zarr.json", ".zarray", ".zattrs")
    files = [os.path.join(folder, name) for name in names]
    make_durable([f for f in files if os.path.exists(f)], os.path.dirname(folder))


def _finish(
    operands: Operands,
    plan: Plan,
    document: dict[str, Any],
    done: set[str],
    results: list[TileResult],
) -> None:
    """Refuse to call the output complete unless every tile is recorded and inputs held still."""
    expected = {task.key for task in plan.tasks}
    missing = expected - operands.journal.done_tiles(document["journal_id"])
    if missing or {r.key for r in results if r.key in expected} | done != expected:
        raise RuntimeError(
            f"{len(missing)} of {len(plan.tasks)} tiles of {operands.where!r} have no journal "
            f"record (first: {sorted(missing)[:3]}); the output is not complete, rerun to resume"
        )
    check_unchanged(operands.inputs, operands.fingerprints, operands.where)
    check_output_unchanged(operands.journal, document, operands.where)
    operands.journal.clear_partials(document["journal_id"])  # every tile is written


def summarize(
    plan: Plan,
    results: list[TileResult],
    seconds: float,
    backend: str,
    output: zarr.Array,
    skipped: int = 0,
    job_id: str | None = None,
) -> dict[str, Any]:
    """The job's figures, as printed by the CLI and stored with the output.

    ``skipped`` tiles were done by an earlier run of the job (resumed); rates
    count only the tiles computed now.
    """
    bytes_read = sum(r.bytes_read for r in results)
    flops_of = plan.task_flops()
    flops = sum(flops_of.get(r.key, 0) for r in results)
    tiles = {task.key for task in plan.tasks}
    return {
        "output": arrays.describe(output),
        "shape": [plan.problem.m, plan.problem.n],
        "k": plan.problem.k,
        "dtype": str(np.dtype(output.dtype)),
        "backend": backend,
        "workers": plan.workers,
        "tile": [plan.tm, plan.tn],
        "tk": plan.tk,
        "tiles": len(plan.tasks),
        "tiles_computed": sum(1 for r in results if r.key in tiles),
        "tiles_skipped": skipped,
        "splits": plan.splits,
        "partial_tasks_computed": sum(1 for r in results if r.key not in tiles),
        "job_id": job_id,
        "seconds": seconds,
        "gflops": flops / seconds / 1e9 if seconds > 0 else 0.0,
        "bytes_read": bytes_read,
        "bytes_read_predicted": plan.bytes_read,
        "bytes_written": sum(r.bytes_written for r in results),
        "io_lower_bound": plan.io_lower_bound,
        # A resumed job read for some tiles only: no bound of a whole job applies to it.
        "read_over_lower_bound": None if skipped else bytes_read / plan.io_lower_bound,
        "task_budget_bytes": plan.task_budget_bytes,
        "task_bytes_projected": plan.task_bytes,
        # While this job's tasks ran (outofcore.peaks), never an earlier job's peak.
        "peak_worker_bytes": max((r.peak_rss_bytes for r in results), default=0),
        "peak_task_bytes": max((r.task_peak_bytes for r in results), default=0),
        "read_wait_seconds": sum(r.read_wait_seconds for r in results),
        "compute_seconds": sum(r.compute_seconds for r in results),
        "write_seconds": sum(r.write_seconds for r in results),
        # Partial tiles (split-k): written by the parts, as the plan's scratch_bytes counts
        # them, and read back by the reductions.
        "scratch_bytes": sum(r.scratch_bytes for r in results if r.key not in tiles),
        "scratch_bytes_read": sum(r.scratch_bytes for r in results if r.key in tiles),
    }

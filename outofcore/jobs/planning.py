"""One planning home: the plan of a job, for the workers it runs on, and what it predicts.

:func:`plan_job` is the only function that plans a job: :func:`outofcore.api.run_job`
calls it before any cluster starts (to refuse a budget too small, and to decide on
the dashboard) and again with the cluster's real workers; ``outofcore plan`` calls it
with the workers the job would get (:func:`job_workers`: a scheduler elsewhere is
asked), so that it shows what ``outofcore matmul`` runs, and adds what the plan is
predicted to take (:func:`with_predictions`); the benchmarks call it too.

Two budgets, one meaning each: the user's ``--memory`` (:attr:`JobSpec.memory
<outofcore.jobs.spec.JobSpec.memory>`) is per worker, :attr:`JobPlan.worker_budget_bytes`;
a worker runs one task per thread, so the plan's budget is per task,
:attr:`outofcore.planner.plan.Plan.task_budget_bytes` (the worker's divided by its threads).

Where a job runs (the client, usable GPUs, the budget per worker) and whether it serves a
dashboard are :mod:`outofcore.jobs.placement`'s, decided before and after it is planned.

A GPU job (:func:`outofcore.planner.gpu_rates.job_gpu_target`) is planned with its GPU's rates and
device budget (:class:`outofcore.planner.gpu_rates.GpuTarget`, passed to the pure tiling) and
predicted with them.

No Dask, zarr or numba is imported here at module level (config, the stores' settings and
the machine's prediction are imported where a function needs them).
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from outofcore.backends.registry import assumed_gpu, backend_choice, job_gpu_target
from outofcore.errors import InputError
from outofcore.planner import tiling
from outofcore.planner.device_plan import device_summary
from outofcore.planner.gpu_rates import GpuTarget
from outofcore.planner.memory import decode_threads, round_up
from outofcore.planner.model import what_ifs
from outofcore.planner.plan import DEFAULT_IO_CONCURRENCY, Plan
from outofcore.planner.problem import Problem
from outofcore.planner.tiling import is_large_output, make_output_plan
from outofcore.runtime.cluster import (
    is_local,
    worker_shape_of,
)
from outofcore.runtime.executors import WorkerShape

if TYPE_CHECKING:
    import zarr

    from outofcore.jobs.spec import JobSpec
    from outofcore.operands.product import Product

#: The workers a budget is checked for before the job knows its own: one task at a time.
ONE_TASK = WorkerShape(workers=1, threads_per_worker=1, blas_threads=1)


class OutputLayoutWarning(UserWarning):
    """The output is created in a layout other than the one outofcore would choose."""


@dataclass(frozen=True)
class JobPlan:
    """A job's plan, the workers it was made for and what was predicted of it."""

    plan: Plan
    #: The workers the plan was made for (each runs ``threads_per_worker`` tasks at once).
    workers: WorkerShape
    #: The user's budget of one worker (``--memory``); the plan's is per task.
    worker_budget_bytes: int
    #: This machine's figures (:func:`outofcore.machine.prediction.machine_prediction`), when
    #: predictions were asked for.
    machine: dict[str, Any] | None = None
    #: This machine's prediction first (``basis`` "measured"), then the assumed machines'.
    predicted: tuple[dict[str, Any], ...] = ()
    #: The device tiling and PCIe bytes (:func:`outofcore.planner.device_plan.device_summary`),
    #: with a device budget.
    device: dict[str, Any] | None = None
    #: The GPU the plan was ranked for (:func:`outofcore.planner.gpu_rates.job_gpu_target`); None: a
    #: CPU job.
    gpu: GpuTarget | None = None

    def summary(self) -> dict[str, Any]:
        """The plan's summary (:meth:`outofcore.planner.plan.Plan.summary`) with both budgets, the
        worker shape, and the predictions and device tiling when there are any."""
        plan = self.plan
        summary = {
            **plan.summary(),
            "out_layout": out_layout(plan),
            "worker_budget_bytes": self.worker_budget_bytes,
            "threads_per_worker": self.workers.threads_per_worker,
        }
        if self.machine is not None:
            summary["machine"] = self.machine
            summary["predicted"] = list(self.predicted)
        if self.device is not None:
            summary["device"] = self.device
        if self.gpu is not None:
            summary["gpu"] = self.gpu.as_dict()
            summary["backend_choice"] = backend_choice(self.gpu.backend, self.gpu.dtype)
        return summary


def out_layout(plan: Plan) -> str:
    """Who chose the output's chunks (and shards): ``"asked"`` (``chunks=``, ``shards=``),
    ``"existing"`` (an output written into keeps its own) or ``"planned"``."""
    problem = plan.problem
    if problem.out_chunks is not None:
        return "asked"
    return "planned" if problem.out_grid is None else "existing"


def job_workers(spec: JobSpec, client: Any) -> WorkerShape:
    """The workers a job with ``spec`` on ``client`` would get, before any cluster starts:
    this process for ``"sync"``, the LocalCluster the job would start, or the workers a
    scheduler elsewhere reports (asked now: :func:`outofcore.runtime.cluster.worker_shape_of`)."""
    from outofcore import config  # noqa: PLC0415 (imports dask)

    return worker_shape_of(
        client,
        budget_bytes=spec.memory,
        workers=spec.workers,
        gpus=spec.gpus,
        connect_timeout=config.number("connect-timeout", positive=True),
        tiles_in_flight=config.value("gpu-tiles-in-flight"),
    )


def plan_options(spec: JobSpec) -> dict[str, Any]:
    """What ``spec`` forces or allows of the tiling: the tile, panel depth and split of k,
    and the sharding of an output it creates (format 3 only)."""
    return {
        "tile": spec.tile,
        "tk": spec.tk,
        "splits": spec.splits,
        "shards": spec.shards is True and spec.zarr_format == 3,
    }


def asked_layout(
    spec: JobSpec, m: int, n: int
) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """The chunks and shards ``spec`` asks of an ``m×n`` output (a stack's matrices; 1 for
    a vector's missing axis), clipped to it: ``(None, None)`` where the plan chooses.

    A chunk larger than the output is clipped to the output (as dask clips: zarr would
    store its padding); a shard to the whole chunks that cover it.
    """
    shards = spec.shards if isinstance(spec.shards, tuple) else None
    chunks = spec.chunks  # never None with shards asked (JobSpec)
    if chunks is None:
        return None, None
    chunks = (min(chunks[0], m), min(chunks[1], n))
    if shards is not None:
        shards = (min(shards[0], round_up(m, chunks[0])), min(shards[1], round_up(n, chunks[1])))
    return chunks, shards


def planned_problem(product: Product, spec: JobSpec, existing: zarr.Array | None) -> Problem:
    """The problem the job is planned for: ``existing``'s grid where it writes into an
    output (a different one asked is refused), else the chunks and shards asked
    (:func:`asked_layout`), else the plan's own.

    Raises
    ------
    InputError
        When ``spec`` asks for chunks or shards other than the existing output's.
    """
    problem = product.problem(existing)
    if spec.chunks is None:  # and no shape of shards (JobSpec)
        return problem
    chunks, shards = asked_layout(spec, problem.m, problem.n)
    if existing is not None:
        check_existing_layout(product, existing, chunks, shards)
        return problem
    return dataclasses.replace(problem, out_chunks=chunks, out_grid=shards)


def check_existing_layout(
    product: Product,
    existing: zarr.Array,
    chunks: tuple[int, int] | None,
    shards: tuple[int, int] | None,
) -> None:
    """Refuse ``chunks`` or ``shards`` asked (on the matrix axes) that an existing output
    written into does not have: it keeps its own grid."""
    from outofcore.storage.stored_arrays import describe  # noqa: PLC0415 (imports zarr)

    matrix = product.matrix("out")
    has_chunks = matrix.chunks2d(existing.chunks)
    has_shards = None if existing.shards is None else matrix.chunks2d(existing.shards)
    asked = spec_text(chunks, shards)
    if chunks not in (None, has_chunks) or shards not in (None, has_shards):
        raise InputError(
            f"the output {describe(existing)} exists in {spec_text(has_chunks, has_shards)}, "
            f"not the {asked} asked; an existing output keeps its grid: resume it without "
            "chunks=/shards= (--out-chunks/--out-shards), or start over in the new layout "
            "with overwrite=True (--overwrite) on its path"
        )


def spec_text(chunks: tuple[int, int] | None, shards: tuple[int, int] | None) -> str:
    """``chunks (64, 29)`` and ``shards (128, 58)`` as a message says them."""
    said = [] if chunks is None else [f"chunks {chunks}"]
    return " in ".join(said + ([] if shards is None else [f"shards {shards}"]))


def plan_job(
    product: Product,
    spec: JobSpec,
    workers: WorkerShape | None = None,
    existing: zarr.Array | None = None,
    *,
    client: Any = None,
) -> JobPlan:
    """The plan of a job: what :func:`~outofcore.api.run_job` runs and ``outofcore plan``
    prints, for ``workers``.

    ``workers`` None: those the job on ``client`` would get before any cluster starts
    (:func:`job_workers`), or one task at a time where a scheduler elsewhere has not been
    asked (:data:`ONE_TASK`: the job asks it once its workers have joined).
    ``spec.memory`` is one worker's, shared by its threads (one task each); chunk requests
    in flight per task (many on object stores) are in the memory contract; an output the
    job creates in format 3 is sharded when large (``spec.shards``); ``existing``, an
    output written into, imposes its own chunk grid.  What the plan is predicted to take:
    :func:`with_predictions`.

    Raises
    ------
    BudgetError
        When no tile fits the budget per task.
    """
    from outofcore.storage.stores import read_concurrency  # noqa: PLC0415 (imports zarr)

    options = plan_options(spec)
    if workers is None:
        workers = job_workers(spec, client) if is_local(client) else ONE_TASK
    gpu = job_gpu_target(  # a GPU job's tiles are ranked by its GPU's rates
        spec.backend,
        bool(spec.gpus or workers.gpu_workers),
        str(product.types.compute),
        device_memory=spec.device_memory,
        transposed=bool(spec.transpose_a or spec.transpose_b),
        # The tile tasks a GPU worker runs at once (gpu-tiles-in-flight on our own).
        tiles_in_flight=workers.tiles_in_flight if workers.gpu_workers else 1,
    )
    problem = planned_problem(product, spec, existing)
    task_budget = spec.memory // max(1, workers.threads_per_worker)
    # Decode threads: a core each of the task's share (CPU affinity), buffers in the budget
    # (half of it for a GPU's tiles, an eighth for BLAS's).
    threads = decode_threads(
        problem, task_budget, workers.blas_threads, DEFAULT_IO_CONCURRENCY, gpu=gpu is not None
    )
    plan = make_output_plan(
        problem,
        task_budget,
        max(1, workers.workers),
        io_concurrency=read_concurrency(product.inputs.values(), threads),
        gpu=gpu,
        **options,
    )
    return JobPlan(plan=plan, workers=workers, worker_budget_bytes=spec.memory, gpu=gpu)


def with_predictions(
    job_plan: JobPlan,
    product: Product,
    spec: JobSpec,
    client: Any,
    *,
    reprobe: bool = False,
    device_memory: int | None = None,
) -> JobPlan:
    """``job_plan`` with what ``outofcore plan`` shows beside it: this machine's figures and
    the model's predictions, here and on assumed machines re-planned with the same options
    (``client`` says where the tasks run; ``reprobe`` measures again), and with
    ``device_memory`` the device tiling of the plan's host tiles."""
    from outofcore.machine.prediction import machine_prediction  # noqa: PLC0415 (imports zarr)

    plan = job_plan.plan
    machine, measured = machine_prediction(
        product,
        plan,
        client,
        gpus=spec.gpus,
        backend=spec.backend,
        output_codec=spec.output_codec,
        reprobe=reprobe,
        gpu=job_plan.gpu,
    )
    assumed = what_ifs(plan, **plan_options(spec), gpu=assumed_gpu(str(product.types.compute)))
    device = None
    if device_memory is not None:
        transposed = bool(spec.transpose_a or spec.transpose_b)
        blocks = (job_plan.gpu or assumed_gpu(str(product.types.compute))).blocks
        device = device_summary(plan, device_memory, transposed, blocks)
    return dataclasses.replace(
        job_plan,
        machine=machine,
        predicted=(measured, *({**p.as_dict(), "basis": "assumed"} for p in assumed)),
        device=device,
    )


def warn_unsharded(plan: Plan, spec: JobSpec, existing: zarr.Array | None) -> None:
    """Warn when a created format-2 output has more chunks than a sharded one would."""
    created_v2 = existing is None and spec.zarr_format == 2 and spec.shards
    if created_v2 and is_large_output(plan):
        warnings.warn(
            f"the output has {plan.out_chunk_count} chunks of {plan.out_chunks[0]}x"
            f"{plan.out_chunks[1]}, more than {tiling.SHARD_OVER_CHUNKS}; zarr format 2 "
            "has no shards, so each is written as its own object (format 3 would group them "
            "one shard per tile)",
            OutputLayoutWarning,
            stacklevel=3,
        )

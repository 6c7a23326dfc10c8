"""A job's tasks: the worker-side job every tile task carries
(:class:`~outofcore.compute.tile_job.TileJob`),
running the tiles (or a split plan's parts and reductions) on an executor with progress,
and the job's figures from their results."""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any

import numpy as np
import zarr

from outofcore.compute.tile_job import TileJob
from outofcore.jobs.inputs import Operands
from outofcore.jobs.progress import panel_reports, progress
from outofcore.jobs.recorded import TASK_FIGURES, RecordedJob, TileResult, compute_and_record
from outofcore.jobs.spec import JobSpec
from outofcore.jobs.splitk import SplitJob, compute_partial, reduce_tile
from outofcore.operands.product import listed_product
from outofcore.planner.plan import Plan
from outofcore.runtime.executors import Executor, WorkerShape
from outofcore.runtime.gpu_cluster import GPU_RESOURCE
from outofcore.storage import stored_arrays


def tile_job(
    operands: Operands,
    output: zarr.Array,
    plan: Plan,
    spec: JobSpec,
    workers: WorkerShape,
    job_id: str,
) -> TileJob:
    """What every tile task of the job carries to its worker: the product (inputs read as
    twins that name a listed chunk the store calls missing), the output, the tiling, the
    backend and the worker's BLAS threads."""
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
        # The tile tasks a GPU worker runs at once, sharing its device.
        tiles_in_flight=workers.tiles_in_flight if spec.on_gpu and workers.gpu_workers else 1,
    )


def run_tiles(
    executor: Executor,
    recorded: RecordedJob,
    plan: Plan,
    done: set[str],
    spec: JobSpec,
    workers: WorkerShape,
) -> tuple[list[TileResult], float]:
    """Run every tile not ``done`` (GPU workers only, for a GPU backend); results, seconds.

    A split plan runs the parts of those tiles not recorded yet, then their reductions
    (:mod:`outofcore.jobs.splitk`).  Dask keys name their kind: ``outofcore-tile`` (a Gram
    product's tiles too), ``outofcore-part``, ``outofcore-reduce``.
    """
    todo = [task for task in plan.tasks if task.key not in done]
    resources = {GPU_RESOURCE: 1} if spec.on_gpu and workers.gpu_workers else None
    started = time.perf_counter()
    name = "gram" if plan.problem.symmetric else "matmul"
    job_id = recorded.tile_job.job_id
    if plan.splits == 1:
        with (
            progress(len(plan.tasks), len(done), spec.progress, name=name) as on_result,
            panel_reports(executor, job_id, on_result.panel) if spec.progress else nullcontext(),
        ):
            results = executor.run(compute_and_record, recorded, todo, on_result, resources, "tile")
        return results, time.perf_counter() - started
    split = SplitJob(recorded, plan.splits)
    finished = recorded.journal.done_partials(recorded.journal_id)
    parts = [p for p in plan.partial_tasks if p.tile.key not in done and p.key not in finished]
    total = len(plan.tasks) * (plan.splits + 1)  # every part, then every reduction
    done_before = total - len(parts) - len(todo)
    with (
        progress(total, done_before, spec.progress, "task", name) as on_result,
        panel_reports(executor, job_id, on_result.panel) if spec.progress else nullcontext(),
    ):
        results = executor.run(compute_partial, split, parts, on_result, resources, "part")
        results += executor.run(reduce_tile, split, todo, on_result, kind="reduce")
    return results, time.perf_counter() - started


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
        "output": stored_arrays.describe(output),
        "shape": list(output.shape),
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
        # While this job's tasks ran (outofcore.compute.peaks), never an earlier job's peak.
        "peak_worker_bytes": max((r.peak_rss_bytes for r in results), default=0),
        "peak_task_bytes": max((r.task_peak_bytes for r in results), default=0),
        "read_wait_seconds": sum(r.read_wait_seconds for r in results),
        "compute_seconds": sum(r.compute_seconds for r in results),
        "write_seconds": sum(r.write_seconds for r in results),
        # Where the tasks' time went beside (summed): setup, CPU seconds of decoding and
        # writing (every thread's), a GPU's kernel and copy seconds and first launches.
        **{name: sum(getattr(r, name) for r in results) for name in TASK_FIGURES},
        # Partial tiles (split-k): written by the parts, as the plan's scratch_bytes counts
        # them, and read back by the reductions.
        "scratch_bytes": sum(r.scratch_bytes for r in results if r.key not in tiles),
        "scratch_bytes_read": sum(r.scratch_bytes for r in results if r.key in tiles),
    }

"""The Python API: :func:`matmul` and the job runner behind it and the CLI."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr
from tqdm import tqdm
from zarr.storage import MemoryStore

from outofcore import arrays
from outofcore.engines import resolve_backend
from outofcore.errors import InputError
from outofcore.sizes import parse_size
from outofcore.tile import TileJob, TileResult, compute_tile
from scheduler.cluster import open_executor
from scheduler.executors import SynchronousExecutor
from scheduler.gpu_cluster import GPU_RESOURCE
from scheduler.plan import Plan, Problem, make_plan

#: Key of the job record in the output array's attributes.
ATTRIBUTE = "outofcore"


@dataclass(frozen=True)
class JobResult:
    """The output array and what the job measured."""

    output: zarr.Array
    plan: Plan
    summary: dict[str, Any]
    results: tuple[TileResult, ...]


def matmul(
    a: arrays.ArrayLike,
    b: arrays.ArrayLike,
    out: arrays.ArrayLike,
    *,
    memory: int | str = "1GiB",
    backend: str = "auto",
    client: Any = None,
    workers: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> zarr.Array:
    """Compute ``out = a @ b`` out of core and return the output array.

    Parameters
    ----------
    a, b
        2-D float32 or float64 ``zarr.Array`` objects, or paths / fsspec URLs.
    out
        Path or URL of the output (created with the plan's tiling), or an
        existing ``zarr.Array`` of shape ``(a.shape[0], b.shape[1])`` and the
        inputs' dtype.
    memory
        Memory budget of one worker, e.g. ``"512MiB"``; tiles are sized to it.
    backend
        ``"cpu"`` (BLAS), ``"cuda"`` (our numba kernel), ``"cupy"`` or
        ``"auto"`` (cuda when a GPU is visible).
    client
        ``None`` (start a LocalCluster for this job), a scheduler address, a
        ``distributed.Client``, or ``"sync"`` (in-process, no Dask).
    workers
        Workers of the LocalCluster to start; with a scheduler address, the
        number of workers to wait for.
    overwrite
        Replace an existing output at ``out``.
    progress
        Show a progress bar on stderr.

    Returns
    -------
    zarr.Array
        The output, opened; ``out.attrs["outofcore"]`` holds the job summary.

    Examples
    --------
    >>> c = outofcore.matmul("a.zarr", "b.zarr", "c.zarr", memory="512MiB")  # doctest: +SKIP
    """
    return run_job(
        a,
        b,
        out,
        memory=memory,
        backend=backend,
        client=client,
        workers=workers,
        overwrite=overwrite,
        progress=progress,
    ).output


def run_job(
    a: arrays.ArrayLike,
    b: arrays.ArrayLike,
    out: arrays.ArrayLike,
    *,
    memory: int | str = "1GiB",
    backend: str = "auto",
    client: Any = None,
    workers: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
    tile: tuple[int, int] | None = None,
    tk: int | None = None,
    gpus: tuple[int, ...] | None = None,
) -> JobResult:
    """Run one product like :func:`matmul` and return the plan and summary too.

    ``tile`` and ``tk`` force the plan's tile shape and panel depth; ``gpus``
    starts one worker per listed GPU on this node instead of a CPU LocalCluster.
    """
    budget = parse_size(memory)
    backend_name = resolve_backend(backend)
    a_array = arrays.open_input(a, "A")
    b_array = arrays.open_input(b, "B")
    dtype = arrays.check_operands(a_array, b_array)
    shape = (a_array.shape[0], b_array.shape[1])
    arrays.check_output_target(out, {"A": a_array, "B": b_array})
    existing = arrays.open_existing_output(out, shape, dtype, overwrite)
    problem = Problem(
        m=shape[0],
        k=a_array.shape[1],
        n=shape[1],
        itemsize=dtype.itemsize,
        a_chunks=tuple(a_array.chunks),
        b_chunks=tuple(b_array.chunks),
        out_grid=arrays.output_grid(existing) if existing is not None else None,
    )
    make_plan(problem, budget, tile=tile, tk=tk)  # refuse a budget too small before any cluster

    with open_executor(
        client, budget_bytes=budget, workers=workers, gpus=gpus, announce=progress
    ) as executor:
        shape_of_workers = executor.worker_shape()
        if not isinstance(executor, SynchronousExecutor):
            _check_shareable({"A": a_array, "B": b_array, "the output": existing})
        plan = make_plan(
            problem,
            budget // shape_of_workers.threads_per_worker,
            max(1, shape_of_workers.workers),
            tile=tile,
            tk=tk,
        )
        record = {"complete": False, "plan": plan.summary(), "backend": backend_name}
        if existing is None:
            output = arrays.create_output(
                out, shape, dtype, plan.out_chunks, overwrite, {ATTRIBUTE: record}
            )
        else:
            output = existing
            output.attrs[ATTRIBUTE] = record
        job = TileJob(
            a=a_array,
            b=b_array,
            c=output,
            panels=plan.panels,
            tm=plan.tm,
            tn=plan.tn,
            tk=plan.tk,
            backend=backend_name,
            blas_threads=shape_of_workers.blas_threads,
            io_concurrency=plan.io_concurrency,
        )
        started = time.perf_counter()
        with tqdm(
            total=len(plan.tasks),
            unit="tile",
            desc="matmul",
            disable=not progress,
            file=sys.stderr,
            dynamic_ncols=True,
        ) as bar:
            results = executor.run(
                compute_tile,
                job,
                plan.tasks,
                on_result=lambda _: bar.update(1),
                resources=(
                    {GPU_RESOURCE: 1}
                    if backend_name in ("cuda", "cupy") and shape_of_workers.gpu_workers
                    else None
                ),
            )
        seconds = time.perf_counter() - started

    summary = summarize(plan, results, seconds, backend_name, output)
    if len({r.key for r in results}) != len(plan.tasks):  # never claim a partial output
        raise RuntimeError(
            f"only {len(results)} of {len(plan.tasks)} tiles reported; the output is not complete"
        )
    output.attrs[ATTRIBUTE] = {**record, "complete": True, "summary": summary}
    return JobResult(output=output, plan=plan, summary=summary, results=tuple(results))


def summarize(
    plan: Plan, results: list[TileResult], seconds: float, backend: str, output: zarr.Array
) -> dict[str, Any]:
    """The job's figures, as printed by the CLI and stored with the output."""
    bytes_read = sum(r.bytes_read for r in results)
    return {
        "output": arrays.describe(output),
        "shape": [plan.problem.m, plan.problem.n],
        "k": plan.problem.k,
        "dtype": str(np.dtype(output.dtype)),
        "backend": backend,
        "workers": plan.workers,
        "tile": [plan.tm, plan.tn],
        "tk": plan.tk,
        "tiles": len(results),
        "tiles_skipped": 0,
        "seconds": seconds,
        "gflops": plan.problem.flops / seconds / 1e9 if seconds > 0 else 0.0,
        "bytes_read": bytes_read,
        "bytes_read_predicted": plan.bytes_read,
        "bytes_written": sum(r.bytes_written for r in results),
        "io_lower_bound": plan.io_lower_bound,
        "read_over_lower_bound": bytes_read / plan.io_lower_bound,
        "budget_bytes": plan.budget_bytes,
        "task_bytes_projected": plan.task_bytes,
        "peak_worker_bytes": max((r.peak_rss_bytes for r in results), default=0),
        "read_wait_seconds": sum(r.read_wait_seconds for r in results),
        "compute_seconds": sum(r.compute_seconds for r in results),
        "write_seconds": sum(r.write_seconds for r in results),
    }


def _check_shareable(named: dict[str, zarr.Array | None]) -> None:
    for name, array in named.items():
        if array is not None and isinstance(array.store, MemoryStore):
            raise InputError(
                f"{name} lives in memory in this process, so Dask worker processes cannot "
                "see it; save it to a path, or run in-process with client='sync'"
            )

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

from outofcore import arrays, config
from outofcore.codecs import DEFAULT_OUTPUT_CODEC, check_output_codec
from outofcore.config import parse_size
from outofcore.engines import resolve_backend
from outofcore.errors import InputError
from outofcore.fingerprint import Fingerprint, check_unchanged, fingerprint
from outofcore.journal import (
    Journal,
    RecordedJob,
    Start,
    add_run,
    compute_and_record,
    inspect_output,
    job_identity,
    new_job_document,
    timestamp,
)
from outofcore.lease import (
    Lease,
    OwnerCheck,
    check_not_held,
    lease_timeout,
    new_job_id,
    read_lease,
)
from outofcore.tile import TileJob, TileResult
from scheduler.cluster import open_executor
from scheduler.executors import SynchronousExecutor
from scheduler.gpu_cluster import GPU_RESOURCE
from scheduler.plan import Plan, make_plan

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
    output_codec: str = DEFAULT_OUTPUT_CODEC,
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
    output_codec
        Compression of an output created here: ``"none"`` (default, the
        fastest to write and read; dense float products barely compress) or
        ``"zstd"`` (zarr's default; about 8% smaller on random data). An
        existing output keeps its own.

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
        output_codec=output_codec,
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
    lease_timeout_s: float | None = None,
    device_memory: int | str | None = None,
    output_codec: str = DEFAULT_OUTPUT_CODEC,
) -> JobResult:
    """Run one product like :func:`matmul` and return the plan and summary too.

    ``tile`` and ``tk`` force the plan's tile shape and panel depth; ``gpus``
    starts one worker per listed GPU on this node instead of a CPU LocalCluster.
    ``device_memory`` (e.g. ``"2GiB"``) caps the device memory of each GPU
    worker's engine, which uses the smaller of it and its own budget (a
    fraction of the free device memory); a host tile larger than that is cut
    into device tiles (``scheduler/device_plan.py``).  CPU engines ignore it.

    An incomplete output whose journal matches this job is resumed: its tile
    sizes are forced and only the tiles without a record are computed.  The
    job holds the output's lease while it runs (``lease_timeout_s``, default
    ``$OUTOFCORE_LEASE_TIMEOUT`` or 60 s; see :mod:`outofcore.lease`).
    """
    budget = parse_size(memory)
    device_budget = None if device_memory is None else parse_size(device_memory)
    backend_name = resolve_backend(backend)
    check_output_codec(output_codec)
    a_array = arrays.open_input(a, "A")
    b_array = arrays.open_input(b, "B")
    dtype = arrays.check_operands(a_array, b_array)
    shape = (a_array.shape[0], b_array.shape[1])
    arrays.check_output_target(out, {"A": a_array, "B": b_array})
    journal = Journal.for_output(out)
    where = _where(out)
    inputs = {"A": a_array, "B": b_array}
    fingerprints = {name: fingerprint(array) for name, array in inputs.items()}
    identity = job_identity(inputs, fingerprints, budget, tile, tk)
    check_not_held(journal, where)  # refuse at once, before writing anything
    start = inspect_output(out, journal, shape, dtype, identity, overwrite, fingerprints)
    if start.resuming:  # the plan must be the one the journal's tiles belong to
        tile, tk = tuple(start.document["tile"]), int(start.document["tk"])
    existing = start.existing
    problem = arrays.problem_of(a_array, b_array, existing)
    make_plan(problem, budget, tile=tile, tk=tk)  # refuse a budget too small before any cluster

    lease = Lease(journal, where, new_job_id(), lease_timeout(lease_timeout_s))
    with (
        lease,
        open_executor(
            client,
            budget_bytes=budget,
            workers=workers,
            gpus=gpus,
            announce=progress,
            connect_timeout=config.number("connect-timeout", positive=True),
        ) as executor,
    ):
        _check_unchanged(
            start, inspect_output(out, journal, shape, dtype, identity, overwrite, fingerprints)
        )
        shape_of_workers = executor.worker_shape()
        if not isinstance(executor, SynchronousExecutor):
            _check_shareable({**inputs, "the output": existing})
        plan = make_plan(
            problem,
            budget // shape_of_workers.threads_per_worker,
            max(1, shape_of_workers.workers),
            tile=tile,
            tk=tk,
        )
        record = {
            "complete": False,
            "plan": plan.summary(),
            "backend": backend_name,
            "job_id": lease.job_id,
        }
        document, done = _open_journal(
            journal, start, plan, identity, fingerprints, backend_name, lease.job_id
        )
        if existing is None:
            output = arrays.create_output(
                out, shape, dtype, plan.out_chunks, False, {ATTRIBUTE: record}, output_codec
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
            job_id=lease.job_id,
            device_memory=device_budget,
        )
        recorded = RecordedJob(
            tile_job=job,
            journal=journal,
            journal_id=document["journal_id"],
            owner_check=OwnerCheck(journal, lease.job_id),
        )
        todo = [task for task in plan.tasks if task.key not in done]
        started = time.perf_counter()
        with tqdm(
            total=len(plan.tasks),
            initial=len(done),
            unit="tile",
            desc="matmul",
            disable=not progress,
            file=sys.stderr,
            dynamic_ncols=True,
        ) as bar:
            results = executor.run(
                compute_and_record,
                recorded,
                todo,
                on_result=lambda _: bar.update(1),
                resources=(
                    {GPU_RESOURCE: 1}
                    if backend_name in ("cuda", "cupy") and shape_of_workers.gpu_workers
                    else None
                ),
            )
        seconds = time.perf_counter() - started
        summary = summarize(
            plan, results, seconds, backend_name, output, skipped=len(done), job_id=lease.job_id
        )
        # Never claim a partial output: every tile must have its record in the journal.
        missing = {t.key for t in plan.tasks} - journal.done_tiles(document["journal_id"])
        if missing or {r.key for r in results} | done != {t.key for t in plan.tasks}:
            raise RuntimeError(
                f"{len(missing)} of {len(plan.tasks)} tiles of {where!r} have no journal record "
                f"(first: {sorted(missing)[:3]}); the output is not complete, rerun to resume"
            )
        check_unchanged(inputs, fingerprints, where)  # read while it changed: not complete
        output.attrs[ATTRIBUTE] = {**record, "complete": True, "summary": summary}
        journal.write_job({**document, "complete": True, "completed": time.time()})
    return JobResult(output=output, plan=plan, summary=summary, results=tuple(results))


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
    by_key = {task.key: task for task in plan.tasks}
    flops = sum(
        2 * plan.problem.k * by_key[r.key].shape[0] * by_key[r.key].shape[1] for r in results
    )
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
        "tiles_computed": len(results),
        "tiles_skipped": skipped,
        "job_id": job_id,
        "seconds": seconds,
        "gflops": flops / seconds / 1e9 if seconds > 0 else 0.0,
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


def _where(out: arrays.ArrayLike) -> str:
    """How messages name the output."""
    return arrays.describe(out) if isinstance(out, zarr.Array) else str(out)


def _check_unchanged(before: Start, now: Start) -> None:
    """Refuse when the output changed between the first look and taking the lease."""
    then_id = before.document["journal_id"] if before.document else None
    now_id = now.document["journal_id"] if now.document else None
    if then_id != now_id:
        raise InputError(
            "the output changed while this job was starting (another job wrote its journal); "
            "run the command again"
        )


def _open_journal(
    journal: Journal,
    start: Start,
    plan: Plan,
    identity: dict[str, Any],
    fingerprints: dict[str, Fingerprint],
    backend: str,
    job_id: str,
) -> tuple[dict[str, Any], set[str]]:
    """Start or resume the output's journal; return the job document and the tiles done."""
    if start.clear_output:
        journal.clear_output()
    elif start.clear_journal:
        journal.clear_journal()
    if start.resuming:
        document = start.document
        if [plan.tm, plan.tn] != list(document["tile"]) or plan.tk != document["tk"]:
            raise InputError(  # make_plan honours forced sizes; this guards the invariant
                f"the resumed plan has {plan.tm}x{plan.tn} tiles {plan.tk} deep, the journal "
                f"{document['tile']} {document['tk']} deep"
            )
        done = journal.done_tiles(document["journal_id"]) & {t.key for t in plan.tasks}
    else:
        document = new_job_document(
            job_id, identity, plan.summary(), (plan.tm, plan.tn), plan.tk, backend
        )
        journal.write_input_tokens(document["journal_id"], fingerprints)
        done = set()
    document = add_run(document, job_id, len(done))
    journal.write_job(document)
    return document, done


def job_status(out: arrays.ArrayLike) -> dict[str, Any]:
    """The state of the job writing (or that wrote) the output ``out``, from its journal.

    Returns the tiles done and in total, when the job started and last made
    progress, whether it is complete, and who holds the lease (alive or not).

    Raises
    ------
    InputError
        When there is no job journal at ``out``.
    """
    journal = Journal.for_output(out)
    where = _where(out)
    document = journal.read_job()
    if document is None or "journal_id" not in document:
        raise InputError(
            f"no outofcore job journal at {where!r}: no job has written there, or the output "
            "was made by an older version"
        )
    records = journal.tile_records(document["journal_id"])
    last = max((r.get("finished", 0.0) for r in records), default=None)
    holder = read_lease(journal)
    now = time.time()
    dead = holder.dead_because(now) if holder else None
    complete = bool(document.get("complete"))
    runs = document.get("runs", [])
    if complete:
        state = "complete"
    elif holder is not None and dead is None:
        state = "running"
    else:
        state = "stopped"
    return {
        "output": where,
        "state": state,
        "complete": complete,
        "tiles_done": len(records),
        "tiles_total": document.get("tiles_total"),
        "tile": document.get("tile"),
        "tk": document.get("tk"),
        "journal_id": document["journal_id"],
        "runs": len(runs),
        "started": timestamp(document.get("created")),
        "last_run_started": runs[-1].get("started_text") if runs else None,
        "last_progress": timestamp(last),
        "last_progress_seconds_ago": now - last if last else None,
        "completed": timestamp(document.get("completed")),
        "lease": None
        if holder is None
        else {
            **holder.as_document(),
            "heartbeat_seconds_ago": now - holder.heartbeat,
            "alive": dead is None,
            "dead_because": dead,
        },
    }

"""Running a prepared job (:class:`~outofcore.jobs.setup.PreparedJob`): the output's lease,
the executor (a cluster, or this process), the plan for the executor's real workers, the
output started, its tiles run, and the output marked complete only when every tile has
its record."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from outofcore import config
from outofcore.backends.cuda.cache_folder import use_kernel_cache
from outofcore.backends.cuda.device_choice import in_process_device
from outofcore.backends.registry import gpu_node, resolve_backend
from outofcore.compute.worker_context import worker_context
from outofcore.jobs.output import (
    JobResult,
    damaged_found,
    finish_output,
    make_metadata_durable,
    start_output,
)
from outofcore.jobs.phases import Phases
from outofcore.jobs.planning import plan_job, warn_unsharded
from outofcore.jobs.recorded import RecordedJob
from outofcore.jobs.setup import PreparedJob
from outofcore.jobs.spec import JobSpec
from outofcore.jobs.tasks import run_tiles, summarize, tile_job
from outofcore.journal.lease import OwnerCheck, new_job_id
from outofcore.journal.leasing import Lease
from outofcore.journal.resume import check_start_unchanged
from outofcore.journal.targets import JOB_ATTRIBUTE
from outofcore.operands import interop
from outofcore.runtime.cluster import is_local, open_executor
from outofcore.runtime.executors import Executor, SynchronousExecutor
from outofcore.runtime.in_process import runs_in_process
from outofcore.runtime.worker_sizing import check_worker_memory


def execute_job(job: PreparedJob, phases: Phases) -> JobResult:
    """Run ``job``: take the output's lease, open the executor, plan for its workers, run
    the tiles not yet recorded and mark the output complete (timed in ``phases``)."""
    spec, client, operands, start = job.spec, job.client, job.operands, job.start
    lease = Lease(operands.journal, operands.where, new_job_id(), spec.lease_timeout)
    with contextlib.ExitStack() as held:
        with phases("lease"):
            held.enter_context(lease)
        with phases("cluster_start"):
            executor = held.enter_context(open_job_executor(client, spec, job.dashboard))
            lease.on_lost(executor.abort)  # a lost lease stops the tasks: the job fails
        with phases("plan"):
            check_start_unchanged(start, operands.inspect())
            workers = executor.worker_shape()
            if not is_local(client):  # a cluster's workers decide, not this machine
                where = getattr(getattr(client, "scheduler", None), "address", client)
                backend = resolve_backend(spec.backend, workers.gpu_workers, where)
                spec = replace(spec, backend=backend)
            job_plan = plan_job(operands.product, spec, workers, start.existing)
            plan = job_plan.plan
            warn_unsharded(plan, spec, start.existing)
            if not isinstance(executor, SynchronousExecutor):
                shared = {**operands.product.inputs, "the output": start.existing}
                node = gpu_node(spec.backend) if spec.gpus else None
                interop.check_shareable(shared, client, spec.gpus, node)
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
            output.attrs[JOB_ATTRIBUTE] = {**record, "complete": True, "summary": summary}
            make_metadata_durable(output)  # before job.json says complete
            operands.journal.write_job({**document, "complete": True, "completed": time.time()})
        with phases("cluster_stop"):
            held.close()
    summary = {**summary, "phases": phases.as_dict()}
    return JobResult(output=output, plan=plan, summary=summary, results=tuple(results))


@contextlib.contextmanager
def open_job_executor(client: Any, spec: JobSpec, dashboard: bool) -> Iterator[Executor]:
    """Yield the executor a job with ``spec`` runs on, closed after it.

    :func:`~outofcore.runtime.cluster.open_executor` with the spec's budget, workers and
    GPUs; a GPU job's own workers inherit the kernels' cache folder, and one GPU's worker
    in this process gets its device first.
    """
    in_process = config.flag("in-process-worker")
    with contextlib.ExitStack() as held:
        if spec.gpus and client is None:  # its GPU workers inherit the kernels' folder
            use_kernel_cache()
            if runs_in_process(spec.gpus, in_process, gpu_node(spec.backend)):  # a thread here
                held.enter_context(in_process_device(spec.gpus[0]))
        yield held.enter_context(_executor(client, spec, dashboard, in_process))


def _executor(
    client: Any, spec: JobSpec, dashboard: bool, in_process: bool
) -> contextlib.AbstractContextManager[Executor]:
    return open_executor(
        client,
        budget_bytes=spec.memory,
        workers=spec.workers,
        gpus=spec.gpus,
        announce=spec.progress,
        connect_timeout=config.number("connect-timeout", positive=True),
        stall_timeout=config.number("stall-timeout", positive=True),
        in_process=in_process,
        dashboard=dashboard,
        node=gpu_node(spec.backend) if spec.gpus else None,
        tiles_in_flight=config.value("gpu-tiles-in-flight"),  # each GPU worker's threads
        # Tasks that ran in this process (in-process, or its LocalCluster's worker threads)
        # leave their engines, panels and buffers here: free them with the executor.
        on_close=worker_context().release_in_process,
    )

"""Where a job runs, decided before it is planned, and whether it serves a dashboard.

:func:`where_it_runs`: the client (resolved once), usable GPUs, the budget per worker
(:func:`with_budget`); :func:`backend_for_product`: once the operands' dtypes are known;
:func:`wants_dashboard`: after the plan, from its predicted time.
The plan itself is :mod:`outofcore.jobs.planning`'s.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from outofcore.runtime.addresses import resolve_client
from outofcore.runtime.cluster import budget_for, is_local, runs_in_process

if TYPE_CHECKING:
    from outofcore.jobs.planning import JobPlan
    from outofcore.jobs.spec import JobSpec
    from outofcore.operands.product import Product


def with_budget(spec: JobSpec, client: Any) -> JobSpec:
    """``spec`` with its memory budget per worker chosen when it names none
    (:func:`outofcore.runtime.cluster.budget_for`)."""
    memory = budget_for(spec.memory, client, spec.workers, spec.gpus)
    return dataclasses.replace(spec, memory=memory)


def where_it_runs(
    spec: JobSpec | None, options: dict[str, Any], client: Any
) -> tuple[JobSpec, Any]:
    """The job's spec (:meth:`JobSpec.of <outofcore.jobs.spec.JobSpec.of>` ``spec`` and
    ``options``) with its budget per worker chosen, and the client it runs on; every
    setting of this process parsed first (:func:`outofcore.config.check_all`).

    GPU workers this job would start on this node (``gpus``, no client) are refused first
    where no GPU of the job's backend is usable here (its node's ``check_usable``: for CUDA,
    :meth:`outofcore.backends.cuda.workers.CudaNode.check_usable`, without importing numba;
    numba's CUDA simulator counts as a GPU, as in the tests).  Then ``client`` is resolved
    (:func:`outofcore.runtime.addresses.resolve_client`: None is the default Client when one is
    open) and the budget chosen for it (:func:`outofcore.runtime.cluster.budget_for`).
    """
    from outofcore import config  # noqa: PLC0415 (imports dask)
    from outofcore.backends.registry import gpu_node  # noqa: PLC0415
    from outofcore.jobs.spec import JobSpec  # noqa: PLC0415 (imports dask)

    spec = JobSpec.of(spec, options)
    config.check_all()  # a bad setting is refused here, not in a worker's task
    node = gpu_node(spec.backend) if spec.gpus and client is None else None
    if node is not None:
        node.check_usable(spec.gpus)
    client = resolve_client(client, spec.gpus)
    memory = budget_for(spec.memory, client, spec.workers, spec.gpus)
    return dataclasses.replace(spec, memory=memory), client


def backend_for_product(spec: JobSpec, asked: str, product: Product, client: Any) -> JobSpec:
    """``spec`` with the backend that multiplies ``product``, once its dtypes are known:
    the CPU for an exact integer product (its limbs have no GPU kernel); and where the
    job asked for ``"auto"`` and runs on this machine's GPU, the GPU backend its compute
    dtype multiplies fastest on (:func:`outofcore.backends.registry.resolve_backend`: our
    kernel, or cuBLAS through CuPy for float64 where CuPy is installed)."""
    from outofcore.backends.registry import AUTO, resolve_backend  # noqa: PLC0415

    if product.types.limbs is not None:  # no GPU kernel: the plan names the CPU
        return dataclasses.replace(spec, backend="cpu")
    if asked == AUTO and is_local(client):
        dtype = str(product.types.compute)
        return dataclasses.replace(spec, backend=resolve_backend(asked, dtype=dtype))
    return spec


def wants_dashboard(job_plan: JobPlan, product: Product, spec: JobSpec, client: Any) -> bool:
    """Whether the LocalCluster the job starts serves Dask's dashboard: as
    ``spec.dashboard`` asks, else when ``job_plan`` (made for the cluster's workers,
    :func:`job_workers`) is predicted to take
    :data:`~outofcore.jobs.spec.DASHBOARD_AFTER_SECONDS` or more here (a GPU cluster keeps
    its dashboard: the prediction is the CPUs')."""
    from outofcore.config import flag  # noqa: PLC0415 (imports dask)
    from outofcore.jobs.spec import DASHBOARD_AFTER_SECONDS  # noqa: PLC0415 (imports zarr)
    from outofcore.machine import prediction  # noqa: PLC0415 (the probe imports zarr)

    if spec.dashboard is not None:
        return spec.dashboard
    if client is not None:  # no LocalCluster to start
        return False
    if spec.gpus:
        return True
    # CPU workers from here on (GPU clusters returned above): no GPUs to ask about.
    processes = not runs_in_process(None, flag("in-process-worker"))
    plan = job_plan.plan
    seconds = prediction.predicted_seconds(plan, product, spec.output_codec, processes)
    return seconds >= DASHBOARD_AFTER_SECONDS

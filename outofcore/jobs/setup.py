"""A job prepared before anything is written: its spec resolved once (where it runs, the
budget per worker, the backend, the tile of a journal it resumes), its operands checked,
its start on the output decided and its plan made for the workers it would get, with
every refusal that needs no cluster.  :func:`prepare_job` is the only place the job's spec
is read; what runs the job (:mod:`outofcore.jobs.run`) takes the :class:`PreparedJob`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from outofcore import config
from outofcore.backends.registry import gpu_node, resolve_backend
from outofcore.jobs.inputs import Operands
from outofcore.jobs.phases import Phases
from outofcore.jobs.placement import backend_for_product, wants_dashboard, where_it_runs
from outofcore.jobs.planning import JobPlan, plan_job
from outofcore.jobs.spec import JobSpec
from outofcore.journal.lease import check_not_held
from outofcore.journal.resume import Start
from outofcore.operands import arrays, interop
from outofcore.runtime.addresses import check_client
from outofcore.runtime.cluster import check_local_memory, is_local
from outofcore.storage.writing import check_output_room


@dataclass(frozen=True)
class PreparedJob:
    """A job as checked and planned before its lease, cluster or any write."""

    #: The spec as resolved: its budget per worker chosen, its backend (on this machine),
    #: and a resumed journal's tile and panel depth.
    spec: JobSpec
    #: Where the job runs: a ``distributed.Client``, a scheduler address, ``"sync"``, or
    #: None (a LocalCluster the job starts).
    client: Any
    operands: Operands
    #: How the job starts on its output (new, resumed, or started over).
    start: Start
    #: The plan for the workers the job would get, before any cluster starts (None for an
    #: empty product); the job plans again with its cluster's workers.
    plan: JobPlan | None

    @property
    def dashboard(self) -> bool:
        """Whether a LocalCluster the job starts serves Dask's dashboard
        (:func:`~outofcore.jobs.placement.wants_dashboard`: asked for, or a plan predicted
        to take long here), decided as the cluster starts: ``outofcore plan`` needs none."""
        if self.plan is None:  # an empty product starts no cluster
            return False
        return wants_dashboard(self.plan, self.operands.product, self.spec, self.client)

    @property
    def empty(self) -> bool:
        """A dimension of 0: nothing to multiply (written by
        :func:`outofcore.jobs.output.write_empty_product`)."""
        return self.operands.product.empty


def prepare_job(
    a: arrays.ArrayLike,
    b: arrays.ArrayLike,
    out: arrays.ArrayLike,
    spec: JobSpec | None,
    options: dict[str, Any],
    client: Any = None,
    phases: Phases | None = None,
) -> PreparedJob:
    """Resolve the job's spec (``spec`` and ``options``, :meth:`JobSpec.of
    <outofcore.jobs.spec.JobSpec.of>`) and check everything knowable before the job's lease or
    cluster.

    Refuses, in this order: a client or GPUs that cannot run the job, a scheduler
    that does not answer, arrays worker processes cannot share, operands and outputs
    that do not fit the product, an output another job holds, an output its disk
    cannot hold, a budget too small for the smallest tile, and a LocalCluster (or this
    process) that cannot fit this machine's memory cap.
    """
    spec, client = where_it_runs(spec, options, client)  # and the budget per worker
    # A scheduler address that names no scheduler, or where none answers: before anything.
    check_client(client, config.number("connect-timeout", positive=True))
    asked = spec.backend
    if is_local(client):  # the tasks run on this machine: its GPU decides, before any work
        spec = replace(spec, backend=resolve_backend(asked))
    node = gpu_node(spec.backend) if spec.gpus else None  # its GPU workers' node
    interop.check_shareable(  # worker processes cannot see this process's memory
        {"input A": a, "input B": b, "the addend": spec.addend, "the output": out},
        client,
        spec.gpus,
        node,
    )
    operands = Operands.open(a, b, out, spec, phases)
    check_not_held(operands.journal, operands.where)  # refuse at once, before any write
    start = operands.inspect()
    if operands.product.empty:
        return PreparedJob(spec, client, operands, start, None)
    spec = backend_for_product(spec, asked, operands.product, client)  # by its dtypes
    if start.resuming:  # the plan must be the one the journal's tiles belong to
        spec = replace(spec, tile=tuple(start.document["tile"]), tk=int(start.document["tk"]))
    if start.existing is None:  # an output its disk cannot hold, before any write
        check_output_room(operands.out, operands.shape, operands.dtype, spec.output_codec)
    # Refuse a budget too small for the smallest tile before any cluster starts: with
    # the workers of the LocalCluster or process the job starts (a scheduler elsewhere
    # is asked once its workers have joined: one task at a time until then).
    job_plan = plan_job(operands.product, spec, None, start.existing, client=client)
    # And a LocalCluster (or this process) that cannot fit this machine's memory cap.
    check_local_memory(client, spec.memory, spec.workers, spec.gpus)
    return PreparedJob(spec, client, operands, start, job_plan)

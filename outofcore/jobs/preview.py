"""A job's plan without running it: what ``outofcore.plan`` returns
(:mod:`outofcore.frontends.plan_report`) and ``outofcore plan`` prints, made as
:func:`outofcore.jobs.entry.run_job` would make it (the job's spec, budget, backend,
workers and planning function), with what it is predicted to take."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from outofcore.backends.registry import resolve_backend
from outofcore.jobs.inputs import open_product
from outofcore.jobs.placement import backend_for_product, with_budget
from outofcore.jobs.planning import JobPlan, job_workers, plan_job, with_predictions
from outofcore.jobs.spec import JobSpec
from outofcore.operands import arrays
from outofcore.operands.product import Product
from outofcore.runtime.addresses import resolve_client
from outofcore.runtime.cluster import is_local
from outofcore.runtime.tls import client_security


def plan_product(
    a: arrays.ArrayLike,
    b: arrays.ArrayLike,
    spec: JobSpec | None,
    options: dict[str, Any],
    client: Any,
    reprobe: bool = False,
) -> tuple[Product, JobPlan | None]:
    """The product of ``a`` and ``b`` and its plan (None when the product is empty): the
    plan ``outofcore.matmul(a, b, out, ...)`` would run, with its predictions.  Nothing is
    written and no cluster starts: the job's workers are those it would get (a scheduler
    elsewhere, ``client``, is asked for its own); ``reprobe`` measures this machine again
    for the predicted time instead of using its cached figures."""
    client = resolve_client(client)
    if client and not is_local(client):
        client_security(client)  # the job's refusals (certificates, addresses)
    spec = with_budget(JobSpec.of(spec, options), client)
    asked = spec.backend
    if is_local(client):  # as the job: this machine's GPU decides "auto" (jobs/setup.py)
        spec = replace(spec, backend=resolve_backend(asked))
    product = open_product(a, b, spec)
    if product.empty:
        return product, None
    spec = backend_for_product(spec, asked, product, client)
    job_plan = plan_job(product, spec, job_workers(spec, client))
    predicted = with_predictions(
        job_plan, product, spec, client, reprobe=reprobe, device_memory=spec.device_memory
    )
    return product, predicted

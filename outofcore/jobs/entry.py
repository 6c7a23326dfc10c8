"""A job's entry: :func:`matmul`, :func:`gram`, and :func:`run_job` behind them and the CLI
(the public names live in :mod:`outofcore.api`).

``run_job`` resolves the job's spec once and checks everything knowable before any write
(:func:`outofcore.jobs.setup.prepare_job`: where it runs, its budget and backend, its
operands, its start on the output, its plan), then runs the prepared job
(:func:`outofcore.jobs.run.execute_job`: the lease, the executor, the plan for its real
workers, the tiles, and the output marked complete only when every tile has its record).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import zarr

from outofcore.errors import InputError
from outofcore.jobs.output import (
    JobResult,
    write_empty_product,
)
from outofcore.jobs.phases import Phases
from outofcore.jobs.run import execute_job
from outofcore.jobs.setup import prepare_job
from outofcore.jobs.spec import JobSpec, with_job_options
from outofcore.journal.targets import JOB_ATTRIBUTE
from outofcore.operands import arrays

__all__ = ["ATTRIBUTE", "gram", "matmul", "run_job"]

#: Key of the job record in the output array's attributes.
ATTRIBUTE = JOB_ATTRIBUTE


@with_job_options()
def matmul(
    a: arrays.ArrayLike,
    b: arrays.ArrayLike,
    out: arrays.ArrayLike,
    *,
    spec: JobSpec | None = None,
    client: Any = None,
    **options: Any,
) -> zarr.Array:
    """Compute ``out = alpha * op(a) @ op(b) + beta * addend`` out of core; return ``out``.

    Parameters
    ----------
    a, b
        ``zarr.Array`` objects of one or more dimensions (matrices, vectors, stacks of
        matrices: numpy's ``matmul`` rules), or their paths / fsspec URLs; any bool,
        integer, float or complex dtype, mixed as numpy mixes them
        (:mod:`outofcore.operands.dtypes`); also ``da.from_zarr`` dask arrays (``.T`` too) and,
        in process, numpy arrays (:mod:`outofcore.operands.interop`).
    out
        Path or URL of the output (created with the plan's tiling), or an
        existing ``zarr.Array`` of the product's shape and output dtype.
    spec
        The job's options as a :class:`~outofcore.jobs.spec.JobSpec`, or ``None``
        to build one from ``options``.
    client
        ``None``: Dask's convention: the default ``distributed.Client`` when one is open
        (``distributed.default_client()``: inside ``with Client(...):``), else what
        ``dask.config`` says: ``scheduler="threads"`` runs the tasks on threads of this
        process through dask's threaded scheduler (no cluster; ``num_workers`` caps the
        threads), ``"sync"`` (``"synchronous"``, ``"single-threaded"``) one after the other
        in this thread, so ``dask.diagnostics.ProgressBar`` shows them; a
        ``scheduler-address`` is connected to; otherwise (``"processes"`` too: outofcore's
        tasks release the GIL, and its LocalCluster's CPU workers are threads of this
        process by default) a LocalCluster started for this job and closed after it.  Or a
        scheduler address, a ``distributed.Client`` (used as it is, never closed), or
        ``"sync"`` (in this thread, no cluster).
    **options
        Fields of :class:`~outofcore.jobs.spec.JobSpec`: ``transpose_a``,
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
    return run_job(a, b, out, spec=spec, client=client, **options).output


@with_job_options(excluding=("transpose_a", "transpose_b", "addend", "beta"))
def gram(
    x: arrays.ArrayLike,
    out: arrays.ArrayLike,
    *,
    spec: JobSpec | None = None,
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
    return run_job(x, x, out, spec=spec, client=client, **options).output


@with_job_options()
def run_job(
    a: arrays.ArrayLike,
    b: arrays.ArrayLike,
    out: arrays.ArrayLike,
    *,
    spec: JobSpec | None = None,
    client: Any = None,
    **options: Any,
) -> JobResult:
    """Run one product like :func:`matmul` and return the plan and summary too.

    An incomplete output whose journal matches this job is resumed: its tile
    sizes are forced and only the tiles without a record are computed.  The
    job holds the output's lease while it runs (see :mod:`outofcore.journal.lease`).

    The spec is resolved once, before anything is written
    (:func:`outofcore.jobs.setup.prepare_job`: where the job runs, its budget and
    backend, its operands, its plan); what runs it takes that prepared job
    (:func:`outofcore.jobs.run.execute_job`).
    """
    phases = Phases()
    with phases("open"):
        job = prepare_job(a, b, out, spec, options, client, phases)
    if job.empty:
        return write_empty_product(job.operands, job.start, job.spec)
    return execute_job(job, phases)

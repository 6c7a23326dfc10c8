"""A job's output from start to finish: the journal opened and the output created (or
taken) marked incomplete, its metadata made durable, the refusal to call it complete
unless every tile is recorded and the inputs held still, and the empty product (a
dimension of 0) written whole."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import zarr

from outofcore.jobs.inputs import Operands
from outofcore.jobs.planning import asked_layout
from outofcore.jobs.recorded import TileResult, written_changes
from outofcore.jobs.spec import JobSpec
from outofcore.journal.lease import new_job_id
from outofcore.journal.leasing import Lease
from outofcore.journal.resume import Start, check_output_unchanged, open_journal, output_metadata
from outofcore.journal.targets import JOB_ATTRIBUTE
from outofcore.operands import arrays
from outofcore.planner.plan import Plan
from outofcore.storage import stored_arrays
from outofcore.storage.fingerprint import check_unchanged
from outofcore.storage.writing import local_folder, make_durable


@dataclass(frozen=True)
class JobResult:
    """The output array and what the job measured."""

    output: zarr.Array
    #: The plan; None for an empty product (a dimension of 0), which has no tile to plan.
    plan: Plan | None
    summary: dict[str, Any]
    results: tuple[TileResult, ...]


def start_output(
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
    # A resume skips a tile only while its output holds what its record says it wrote.
    check = (
        None
        if start.existing is None
        else partial(written_changes, start.existing, operands.product)
    )
    document, done = open_journal(
        operands.journal,
        start,
        plan,
        operands.identity,
        operands.fingerprints,
        spec.backend,
        job_id,
        check,
    )
    if start.existing is None:
        stack = operands.product.stack  # the plan's 2-D grid on the matrix axes
        output = arrays.create_output(
            operands.out,
            operands.shape,
            operands.dtype,
            stack.out_grid(*plan.out_chunks),
            False,
            {JOB_ATTRIBUTE: record},
            spec.output_codec,
            shards=None if plan.out_shards is None else stack.out_grid(*plan.out_shards),
            zarr_format=spec.zarr_format,
            dimension_names=spec.dimension_names or operands.product.dimension_names,
        )
    else:
        output = start.existing
        output.attrs[JOB_ATTRIBUTE] = record
    make_metadata_durable(output)
    if not start.resuming:  # its own metadata, fingerprinted with the job (checked on resume)
        document = {**document, "output_metadata": output_metadata(operands.journal)}
        operands.journal.write_job(document)
    return output, record, document, done


def damaged_found(document: dict[str, Any], results: list[TileResult]) -> list[str]:
    """Records and partial tiles this run found damaged and computed again: the records
    dropped when it resumed (``job.json``'s run entry) and the parts its reductions
    computed again."""
    dropped = (document.get("runs") or [{}])[-1].get("damaged") or {}
    return sorted(set(dropped) | {part for r in results for part in r.recomputed})


def make_metadata_durable(output: zarr.Array) -> None:
    """Flush the output's metadata documents (and the folders above, to its parent) to disk
    on a local store (:func:`outofcore.storage.writing.make_durable`)."""
    folder = local_folder(output)
    if folder is None:
        return
    names = ("zarr.json", ".zarray", ".zattrs")
    files = [os.path.join(folder, name) for name in names]
    make_durable([f for f in files if os.path.exists(f)], os.path.dirname(folder))


def finish_output(
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


def write_empty_product(operands: Operands, start: Start, spec: JobSpec) -> JobResult:
    """A product with a dimension of 0, as numpy computes it: an empty output (m or n = 0),
    or for k = 0 the sum of no terms, ``0·alpha + beta·addend``, written by row blocks in
    this process (no cluster: there is nothing to multiply).  No journal: it is written
    whole, then marked complete."""
    product = operands.product
    m, n = product.matrix_shape
    started = time.perf_counter()
    with Lease(operands.journal, operands.where, new_job_id(), spec.lease_timeout) as lease:
        if start.clear_output:
            operands.journal.clear_output()
        elif start.clear_journal:  # an array given as the output, started over
            operands.journal.clear_journal()
        asked, shards = asked_layout(spec, max(1, m), max(1, n))
        chunks = asked or (max(1, min(m, 1024)), max(1, min(n, 1024)))
        grid = product.stack.out_grid(*chunks)
        record = {"complete": False, "product": product.summary(), "job_id": lease.job_id}
        if start.existing is None:
            output = arrays.create_output(
                operands.out, operands.shape, operands.dtype, grid, False,
                {JOB_ATTRIBUTE: record}, spec.output_codec, zarr_format=spec.zarr_format,
                shards=None if shards is None else product.stack.out_grid(*shards),
                dimension_names=spec.dimension_names or product.dimension_names,
            )  # fmt: skip
        else:
            output = start.existing
        compute = product.types.compute
        for entry in range(product.stack.count if m and n else 0):
            out = product.matrix("out", entry)
            for r0 in range(0, m, chunks[0]):
                rows = np.zeros((min(chunks[0], m - r0), n), compute)
                values = out.view(product.finish_rows(rows, (r0, 0), entry))
                output[out.selection(slice(r0, r0 + rows.shape[0]), slice(0, n))] = values
        seconds = time.perf_counter() - started
        summary = {
            "output": stored_arrays.describe(output),
            "shape": list(operands.shape),
            "k": product.k,
            "dtype": str(np.dtype(output.dtype)),
            "empty": True,
            "tiles": 0,
            "seconds": seconds,
            "bytes_written": math.prod(operands.shape) * output.dtype.itemsize,
            "job_id": lease.job_id,
            "product": operands.product.summary(),
        }
        lease.check()
        output.attrs[JOB_ATTRIBUTE] = {**record, "complete": True, "summary": summary}
    return JobResult(output=output, plan=None, summary=summary, results=())

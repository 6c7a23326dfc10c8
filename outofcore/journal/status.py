"""The state of a job, from its output's journal: ``outofcore status`` and
:func:`outofcore.job_status`.

Read only: the job document, the tile records listed (not read), and the lease
(:mod:`outofcore.journal.lease`), which says whether the job still runs.
"""

from __future__ import annotations

import os
import time
from typing import Any

import zarr

from outofcore.errors import InputError
from outofcore.journal.lease import read_lease
from outofcore.journal.records import Journal, timestamp
from outofcore.journal.targets import what_is_at
from outofcore.storage import stored_arrays
from outofcore.storage.locations import Location, locate
from outofcore.storage.stores import check_metadata, store_errors


def job_status(
    out: zarr.Array | str | os.PathLike, storage_options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The state of the job writing (or that wrote) the output ``out``, from its journal.

    The tile records are listed, not read (:meth:`outofcore.journal.records.Journal.tile_times`):
    a paged listing per row of tiles, many in flight, on an object store.

    Returns the tiles done and in total, when the job started and last made
    progress, whether it is complete (as its job document says, when as many tiles are
    recorded as it has: else its state is ``"damaged"`` and ``claims_complete`` true),
    and who holds the lease (alive or not).

    Raises
    ------
    InputError
        When there is no job journal at ``out``, its job document or its metadata is
        damaged (named in one line, as a rerun names it), or its object store refuses or does not
        answer (no credentials, wrong ones, an endpoint that is not S3 or not there: as
        ``matmul`` and ``verify`` say it, :func:`outofcore.storage.stores.store_errors`).
    """
    where = describe_output(out)
    location = locate(out, storage_options)  # with its options: what opens its store
    with store_errors(where, location):
        return _job_status(out if isinstance(out, zarr.Array) else location, where)


def _job_status(out: zarr.Array | Location, where: str) -> dict[str, Any]:
    journal = Journal.for_output(out)
    document = journal.read_job()
    if document is None:
        raise InputError(_no_journal(out, where))
    if "journal_id" not in document:
        raise InputError(
            f"the job journal at {where!r} was written by an older version of outofcore, "
            "which this one does not read"
        )
    if isinstance(out, Location):  # its metadata through the checks a rerun makes
        check_metadata(out, "the output")
    grid = (document.get("plan") or {}).get("tiles_grid")
    finished = journal.tile_times(document["journal_id"], grid[0] if grid else None)
    last = max((t for t in finished.values() if t == t), default=None)  # NaN: unknown
    holder = read_lease(journal)
    now = time.time()
    dead = holder.dead_because(now) if holder else None
    total = document.get("tiles_total")
    # Complete as the job document says, when the records bear it out: a document resealed
    # to say so over an interrupted output is not believed.
    claimed = document.get("complete") is True
    complete = claimed and (total is None or len(finished) >= total)
    runs = document.get("runs", [])
    if complete:
        state = "complete"
    elif claimed:
        state = "damaged"
    elif holder is not None and dead is None:
        state = "running"
    else:
        state = "stopped"
    return {
        "output": where,
        "state": state,
        "complete": complete,
        "tiles_done": len(finished),
        "tiles_total": total,
        # The job document says complete, but its records do not bear it out.
        "claims_complete": claimed and not complete,
        # Parts of split tiles (split-k) recorded and not yet reduced (deleted once complete).
        "partials_done": 0 if complete else len(journal.done_partials(document["journal_id"])),
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


def _no_journal(out: zarr.Array | Location, where: str) -> str:
    """Why there is no job to show at ``out``: what is there instead."""
    if isinstance(out, zarr.Array):
        return f"{where!r} has no outofcore job journal: no job has written into it"
    kind = what_is_at(out).kind
    return {
        "nothing": f"there is nothing at {where!r}: no job has written there",
        "file": f"{where!r} is a file, not the output of an outofcore job",
        "folder": f"{where!r} is a folder, not the output of an outofcore job",
        "group": f"{where!r} is a zarr group, not the output of an outofcore job",
    }.get(kind, f"{where!r} is a zarr array with no outofcore job journal: no job wrote it")


def describe_output(out: zarr.Array | Location | str | os.PathLike) -> str:
    """How messages name the output: a ``zarr.Array`` by its store, a location by what
    opens it (:attr:`outofcore.storage.locations.Location.target`), a path or URL as given."""
    if isinstance(out, zarr.Array):
        return stored_arrays.describe(out)
    return out.target if isinstance(out, Location) else str(out)

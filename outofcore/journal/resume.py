"""Whether a job starts afresh or resumes its output's journal (its state:
:mod:`outofcore.journal.status`).

A rerun of the same job (same inputs, shapes, dtypes, chunkings, memory
budget and tile sizes) into an incomplete output resumes: the tiles with a
record are skipped and the plan's tile sizes are forced from the journal.
"Same inputs" includes their content: the job records a fingerprint of every
input object (:mod:`outofcore.storage.fingerprint`), and an input rewritten since is
refused, naming the objects that changed.  The records themselves live in
:mod:`outofcore.journal.records`.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

import zarr

from outofcore.errors import (
    InputError,
    OutputChangedError,
    OutputExistsError,
    ResumeError,
)
from outofcore.journal.identity import differences
from outofcore.journal.job_schema import FORMAT
from outofcore.journal.records import Journal, WrittenCheck, timestamp
from outofcore.journal.targets import (
    OWN_LAYOUT_ADVICE,
    array_made_by_outofcore,
    check_replaceable,
)
from outofcore.planner.plan import Plan
from outofcore.storage import stored_arrays
from outofcore.storage.documents import DocumentError, load_document
from outofcore.storage.fingerprint import Fingerprint
from outofcore.storage.locations import Location
from outofcore.storage.manifest import Contents, StrangersError, is_local, output_contents
from outofcore.storage.stores import zarr_options

#: The output array's metadata documents, format 3 then format 2 (its attributes, which
#: outofcore rewrites, are in ``zarr.json``'s ``attributes`` field or in ``.zattrs``).
METADATA_DOCUMENTS = ("zarr.json", ".zarray")


def output_metadata(journal: Journal) -> dict[str, Any] | None:
    """The output array's own metadata as its job keeps it, or None when it has none.

    Its metadata document read from the store (``zarr.json`` without ``attributes``,
    or ``.zarray``): shape, dtype, chunk grid, codecs, fill value, chunk key encoding,
    dimension names, ...; and the SHA-256 of that, canonical.  An edit of any of them
    (a codec, the chunk grid) changes it.
    """
    for name in METADATA_DOCUMENTS:
        key = "/".join(p for p in (journal.prefix.strip("/"), name) if p)
        data = journal.get_bounded(key)
        if data is None:
            continue
        try:  # zarr v2 metadata may hold NaN (a fill value)
            fields = load_metadata(data, journal.name_of(key))
        except DocumentError:
            fields = None
        if not isinstance(fields, dict):  # damaged: stands for itself by its bytes' hash
            fields = {"unreadable": hashlib.sha256(data).hexdigest()}
        fields = {key: value for key, value in fields.items() if key != "attributes"}
        text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return {"name": name, "fields": fields, "digest": hashlib.sha256(text.encode()).hexdigest()}
    return None


def load_metadata(data: bytes, what: str) -> Any:
    """The output's metadata document ``data`` parsed within bounds (NaN and Infinity
    taken, as zarr format 2 writes a fill value).

    Raises
    ------
    outofcore.storage.documents.DocumentError
        When it is too large, too deep or not JSON.
    """
    return load_document(data, what, allow_constants=True)


def metadata_change(then: dict[str, Any] | None, now: dict[str, Any] | None) -> str | None:
    """What differs between two :func:`output_metadata`, in words, or None when nothing."""
    if then is not None and now is not None and then.get("digest") == now["digest"]:
        return None
    if now is None:
        return "its metadata document is gone"
    if then is None or not isinstance(then.get("fields"), dict):
        return f"its {now['name']} is not the one the job recorded"
    if then.get("name") != now["name"]:
        return f"its metadata document was {then.get('name')}, now {now['name']}"
    was, fields = then["fields"], now["fields"]
    changed = sorted(key for key in was.keys() | fields.keys() if was.get(key) != fields.get(key))
    return f"its {now['name']} changed in {', '.join(changed) or 'its bytes'}"


def check_output_unchanged(journal: Journal, document: dict[str, Any], where: str) -> None:
    """Raise :class:`OutputChangedError` when the output's metadata is no longer what the
    job recorded (``document["output_metadata"]``); called before it is marked complete."""
    change = metadata_change(document.get("output_metadata"), output_metadata(journal))
    if change is not None:
        raise OutputChangedError(
            f"the output {where!r} was changed while the job wrote it ({change}): its chunks "
            "were written for the metadata the job started with, so it is left incomplete; "
            "rerun with overwrite=True to start over"
        )


def new_job_document(
    journal_id: str,
    identity: dict[str, Any],
    plan_summary: dict[str, Any],
    tile: tuple[int, int],
    tk: int,
    backend: str,
) -> dict[str, Any]:
    """The job document of a fresh start."""
    now = time.time()
    return {
        "format": FORMAT,
        "journal_id": journal_id,
        "created": now,
        "created_text": timestamp(now),
        "inputs": identity["inputs"],
        "product": identity["product"],
        "memory": identity["memory"],
        "output": identity["output"],
        "tile": list(tile),
        "tk": tk,
        "tiles_total": plan_summary["tiles"],
        "plan": plan_summary,
        "backend": backend,
        "complete": False,
        "completed": None,
        "runs": [],
    }


def add_run(document: dict[str, Any], job_id: str, skipped: int) -> dict[str, Any]:
    """The job document with this run (job id, host, pid, start, tiles skipped) appended."""
    now = time.time()
    run = {
        "job_id": job_id,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": now,
        "started_text": timestamp(now),
        "tiles_skipped": skipped,
    }
    return {**document, "runs": [*document.get("runs", []), run]}


@dataclass(frozen=True)
class Start:
    """How a job starts on its output: fresh, or resuming a journal."""

    #: The output array to write into, or None to create one at the path.
    existing: zarr.Array | None
    #: The job document to resume, or None for a fresh start.
    document: dict[str, Any] | None
    #: Delete what is at the output path (data and journal) before creating it.
    clear_output: bool = False
    #: Delete the journal (not the data) of an array given as the output.
    clear_journal: bool = False

    @property
    def resuming(self) -> bool:
        return self.document is not None


def inspect_output(
    target: zarr.Array | Location,
    journal: Journal,
    shape: tuple[int, int],
    dtype: Any,
    identity: dict[str, Any],
    overwrite: bool,
    fingerprints: dict[str, Fingerprint] | None = None,
) -> Start:
    """Decide how to start on the output ``target`` (a ``zarr.Array``, or the location
    of a path or URL, opened with its options); reads, never writes.

    * nothing there (or only a journal folder): a fresh start;
    * an incomplete output whose journal matches ``identity``: resume it;
    * ``overwrite``: start over, when outofcore made what is there and nothing
      inside it is another's (:func:`outofcore.journal.targets.check_replaceable` with ``deep``);
    * a ``zarr.Array`` given as the output: the same, and only when outofcore
      made it (:func:`outofcore.journal.targets.array_made_by_outofcore`); it keeps its
      metadata and chunk grid, and its journal is started over.

    Raises
    ------
    InputError
        For what outofcore did not make, or that holds what outofcore did not write.
    OutputExistsError
        For an existing output holding a complete output, or no journal.
    ResumeError
        When the journal belongs to other inputs or parameters (naming the
        differences) or to another journal format.
    """
    if isinstance(target, zarr.Array):
        where = stored_arrays.describe(target)
        existing = stored_arrays.open_existing_output(target, shape, dtype)
        if not array_made_by_outofcore(existing):
            raise InputError(
                f"the output {where} is a zarr array that outofcore did not write (it has no "
                "outofcore record or journal), and outofcore never writes into data it did not "
                "make, overwrite or not; pass a path or URL where nothing is, and the output "
                f"is created there. {OWN_LAYOUT_ADVICE}"
            )
        if overwrite or is_local(existing.store):  # to delete from; a link: never written
            contents = output_contents(existing.store, existing.path)
            refusal = (contents if overwrite else Contents(links=contents.links)).refusal(where)
            if refusal is not None:
                raise StrangersError(refusal)
        if overwrite:
            return Start(existing=existing, document=None, clear_journal=True)
        document = _unfinished_job(journal, where)
        _check_resumable(document, identity, journal, where, fingerprints)
        return Start(existing=existing, document=document)

    where = str(target)
    # Nothing outofcore did not make; to start over, nothing inside that it did not write.
    occupant = check_replaceable(target, deep=overwrite)
    if overwrite or occupant.kind in ("nothing", "journal"):
        return Start(existing=None, document=None, clear_output=occupant.kind != "nothing")
    document = _unfinished_job(journal, where)
    _check_resumable(document, identity, journal, where, fingerprints)
    opened = zarr.open_array(target.target, mode="r+", **zarr_options(target))
    existing = stored_arrays.for_writing(opened)
    if tuple(existing.shape) != tuple(shape) or str(existing.dtype) != str(dtype):
        raise ResumeError(
            f"the output {where!r} is {existing.shape} {existing.dtype}, but the product is "
            f"{shape} {dtype}; pass overwrite=True to start over"
        )
    return Start(existing=existing, document=document)


def _unfinished_job(journal: Journal, where: str) -> dict[str, Any]:
    """The job document of an output to resume; :class:`OutputExistsError` when it has
    none, or holds a complete result."""
    document = journal.read_job()
    if document is None or document.get("complete"):
        why = (
            "it has no outofcore job journal, so there is nothing to resume"
            if document is None
            else "it holds the complete result of an earlier job, finished "
            f"{timestamp(document.get('completed'))}"
        )
        raise OutputExistsError(
            f"the output {where!r} already exists ({why}); pass overwrite=True to replace it, "
            "or choose another path"
        )
    return document


def _check_resumable(
    document: dict[str, Any],
    identity: dict[str, Any],
    journal: Journal,
    where: str,
    fingerprints: dict[str, Fingerprint] | None,
) -> None:
    if document.get("format") != FORMAT or not document.get("journal_id"):
        raise ResumeError(
            f"the output {where!r} holds a job journal of format {document.get('format')!r}, "
            f"this version reads format {FORMAT}; pass overwrite=True to start over"
        )
    change = metadata_change(document.get("output_metadata"), output_metadata(journal))
    if change is not None:  # before the array is opened with it, or anything is written
        raise ResumeError(
            f"the output {where!r} was changed since its job started ({change}), so its "
            "chunks no longer match its metadata and it is not resumed; pass overwrite=True "
            "to start over"
        )
    found = differences(document, identity)
    if found and fingerprints:  # name the objects of a changed input
        tokens = journal.read_input_tokens(document["journal_id"])
        found = differences(document, identity, tokens, fingerprints)
    if found:
        done = len(journal.done_tiles(document["journal_id"]))
        raise ResumeError(
            f"the output {where!r} holds an unfinished job ({done} of "
            f"{document.get('tiles_total')} tiles done) for other inputs or parameters: "
            f"{'; '.join(found)}. Rerun with the original inputs and parameters to resume it, "
            "or pass overwrite=True to start over"
        )


def check_start_unchanged(before: Start, now: Start) -> None:
    """Refuse when the output changed between the first look and taking the lease."""
    then_id = before.document["journal_id"] if before.document else None
    now_id = now.document["journal_id"] if now.document else None
    if then_id != now_id:
        raise InputError(
            "the output changed while this job was starting (another job wrote its journal); "
            "run the command again"
        )


def open_journal(
    journal: Journal,
    start: Start,
    plan: Plan,
    identity: dict[str, Any],
    fingerprints: dict[str, Fingerprint],
    backend: str,
    job_id: str,
    written: WrittenCheck | None = None,
) -> tuple[dict[str, Any], set[str]]:
    """Start or resume the output's journal; return the job document and the tiles done.

    On a resume, a tile counts as done when its record is sound and ``written`` (given
    the sound records) does not find its output chunks changed since
    (:func:`outofcore.jobs.recorded.written_changes`); the others are computed again, named
    in ``job.json``'s run entry (``damaged``).
    """
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
        damaged = _drop_damaged(journal, document["journal_id"], plan, done, written)
        done -= set(damaged)
    else:
        document = new_job_document(
            job_id, identity, plan.summary(), (plan.tm, plan.tn), plan.tk, backend
        )
        journal.write_input_tokens(document["journal_id"], fingerprints)
        done, damaged = set(), {}
    document = add_run(document, job_id, len(done))
    if damaged:  # what this run found damaged and computes again, in job.json
        document["runs"][-1]["damaged"] = damaged
    journal.write_job(document)
    return document, done


def _drop_damaged(
    journal: Journal,
    journal_id: str,
    plan: Plan,
    done: set[str],
    written: WrittenCheck | None = None,
) -> dict[str, str]:
    """Check the records of the tiles ``done`` (and their output, by ``written``) and of
    the parts recorded for the other tiles
    (:meth:`outofcore.journal.records.Journal.drop_damaged_records`): those not sound are
    deleted, to be computed again.  Returns ``{tile or part: why}`` of those."""
    tiles = [task for task in plan.tasks if task.key in done]
    recorded = journal.done_partials(journal_id) if plan.splits > 1 else set()
    parts = [p for p in plan.partial_tasks if p.key in recorded and p.tile.key not in done]
    return journal.drop_damaged_records(journal_id, tiles, parts, written)

"""Split-k: tiles computed in parts over ranges of k, then added up by a reduction.

When a plan has fewer tiles than workers (a small output from a large k) it
splits each tile's k-panels into ``splits`` parts (:attr:`outofcore.planner.plan.Plan.splits`).
Each part is a task, :func:`compute_partial`: it runs the ordinary tile loop
(:func:`outofcore.compute.tile.compute_tile`) over its panels only and writes its
partial sum, in the accumulation dtype and block of rows by block of rows,
as ``.npy`` objects in the output's journal folder (``_outofcore/partials/``,
next to the output, so object stores work as local disk does), then records
the part.  The tile's reduction task, :func:`reduce_tile`, adds the parts
block by block in part order (so every run gives the same bits), finishes
the rows (scales, addend, output dtype), writes them to the output (and, for
an off-diagonal tile of a symmetric product, its mirror) and records the
tile.  The client deletes the partials when the job completes.

Every part is idempotent (a rerun writes the same bytes, its record is
created only if absent), parts live under the journal's id (tied to the
inputs' fingerprints and the product) and their keys name the split count,
so a resume with another split never mixes parts.  A part's blocks are
flushed to disk before its record (:mod:`outofcore.storage.writing`), and its record
(sealed: :func:`outofcore.journal.records.seal`) keeps each block's SHA-256.  The
reduction checks the record and every block it reads against it: a part
whose record or data is damaged, missing, or of the wrong shape or dtype is
never added in; it is named in a warning, computed again in the reduction
(on the CPU engine, which every worker has) and the tile's sum started over.
"""

from __future__ import annotations

import hashlib
import io
import logging
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from outofcore.compute.tile import TaskIO, compute_tile, write_finished_rows
from outofcore.compute.tile_io import addend_bytes, output_bytes, output_grid, write_mirror
from outofcore.jobs.recorded import (
    RecordedJob,
    TileResult,
    clear_own_objects,
    record_written_tile,
    run_recorded,
    worker_name,
)
from outofcore.journal.records import record_problem
from outofcore.operands.centring import PanelSums
from outofcore.planner.memory import write_block_rows
from outofcore.planner.plan import PartialTask, TileTask, tile_parts
from outofcore.storage.writing import naming_full_disk

#: Where outofcore says what is not the result: here, damaged parts computed again.
logger = logging.getLogger("outofcore")


class DamagedPart(Exception):
    """A part of a split tile whose record or kept sum is not what it should be: the
    reduction computes it again (never raised out of :func:`reduce_tile`)."""

    def __init__(self, part: PartialTask, why: str) -> None:
        super().__init__(f"{part.key}: {why}")
        self.part = part
        self.why = why


@dataclass(frozen=True)
class SplitJob:
    """A recorded job whose tiles are computed in ``splits`` parts over k."""

    recorded: RecordedJob
    splits: int

    def parts_of(self, task: TileTask) -> tuple[PartialTask, ...]:
        """The parts of ``task``'s tile, in the order the reduction adds them."""
        return tile_parts(task, len(self.recorded.tile_job.panels), self.splits)

    def _block_key(self, part: PartialTask, name: str) -> str:
        journal = self.recorded.journal
        return journal.partial_key(self.recorded.journal_id, part.key, name)

    def write_block(self, part: PartialTask, name: str, rows: np.ndarray) -> str:
        """Keep ``rows`` of ``part``'s partial sum (``rows-R.npy``: from row R of the tile),
        or its panel sums (``sums.npy``), durably
        (:meth:`outofcore.journal.records.Journal.put_bytes`); return the SHA-256 of its bytes."""
        journal = self.recorded.journal
        key = self._block_key(part, name)
        data = npy_bytes(rows)
        with naming_full_disk(f"writing the partial tile {key}", journal.local_folder):
            journal.put_bytes(key, data)
        return hashlib.sha256(data).hexdigest()

    def part_record(self, part: PartialTask) -> dict[str, Any]:
        """``part``'s record, checked (:func:`outofcore.journal.records.record_problem`).

        Raises
        ------
        DamagedPart
            When it is missing, not sealed, another part's, or lists no block checksums.
        """
        journal = self.recorded.journal
        record = journal.get_json(journal.partial_key(self.recorded.journal_id, part.key))
        problem = record_problem(record, part.tile, part)
        if problem is None and not isinstance(record.get("blocks"), dict):
            problem = "it keeps no checksums of its blocks"
        if problem is not None:
            raise DamagedPart(part, f"its record is {problem}" if record is None else problem)
        return record

    def read_block(
        self,
        part: PartialTask,
        name: str,
        shape: tuple[int, ...],
        checksums: dict[str, Any],
        dtype: np.dtype | None = None,
    ) -> np.ndarray:
        """Block ``name`` of ``part``'s partial sum (:meth:`write_block`), checked against
        the SHA-256 its record keeps (in ``checksums``) and the shape and dtype due (the
        accumulation dtype when None): a read-only view of the bytes the store read.

        Raises
        ------
        DamagedPart
            When the block is missing, its bytes differ from the checksum, or it is not
            an array of that shape and dtype.
        """
        key = self._block_key(part, name)
        data = self.recorded.journal.get_array(key)
        dtype = self.recorded.tile_job.product.types.compute if dtype is None else dtype
        if data is None:
            raise DamagedPart(part, f"{key} is missing although its part is recorded")
        if hashlib.sha256(data).hexdigest() != checksums.get(name):
            raise DamagedPart(part, f"{key} does not match the checksum its record keeps")
        block = npy_view(data)
        if block is None or block.shape != shape or block.dtype != dtype:
            held = (
                "bytes that are no .npy array" if block is None else f"{block.shape} {block.dtype}"
            )
            raise DamagedPart(part, f"{key} holds {held}, expected {shape} {dtype}")
        return block


def npy_bytes(rows: np.ndarray) -> np.ndarray:
    """``rows`` as the bytes of a ``.npy`` file (C order), in one buffer: one copy of the
    rows, where ``np.save`` into memory makes two or three."""
    header = io.BytesIO()
    fields = {"descr": np.lib.format.dtype_to_descr(rows.dtype), "fortran_order": False}
    np.lib.format.write_array_header_1_0(header, {**fields, "shape": rows.shape})
    head = header.getvalue()  # padded to a multiple of 64 bytes: the data after it is aligned
    data = np.empty(len(head) + rows.nbytes, np.uint8)
    data[: len(head)] = np.frombuffer(head, np.uint8)
    data[len(head) :].view(rows.dtype).reshape(rows.shape)[...] = rows
    return data


def npy_view(data: np.ndarray) -> np.ndarray | None:
    """The array in ``data``, the bytes of a ``.npy`` file of :func:`npy_bytes`, as a view
    (not copied); None when they are not such a file or are cut short."""
    try:
        header = io.BytesIO(data[:10].tobytes())
        version = np.lib.format.read_magic(header)
        if version != (1, 0):
            return None
        offset = 10 + int.from_bytes(data[8:10].tobytes(), "little")
        shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(
            io.BytesIO(data[8:offset].tobytes())
        )
        if fortran_order or dtype.hasobject:
            return None
        return data[offset:].view(dtype).reshape(shape)
    except ValueError:
        return None


def compute_partial(job: SplitJob, part: PartialTask) -> TileResult:
    """The worker entry of one part of a split tile: multiply its panels, keep the sum,
    record it (:func:`outofcore.jobs.recorded.run_recorded`)."""
    recorded = job.recorded
    key = recorded.journal.partial_key(recorded.journal_id, part.key)
    checksums: dict[str, str] = {}
    return run_recorded(
        recorded,
        key,
        part.key,
        lambda: _compute_part(job, part, checksums),
        lambda result: _record_part(job, part, result, checksums),
    )


def _compute_part(
    job: SplitJob, part: PartialTask, checksums: dict[str, str], backend: str | None = None
) -> TaskIO:
    """Multiply ``part``'s panels and keep its sum block by block, each block's SHA-256
    in ``checksums`` (by name, ``rows-R.npy``); ``backend`` overrides the job's."""
    recorded = job.recorded
    first, stop = part.panels
    tile_job = replace(recorded.tile_job, panels=recorded.tile_job.panels[first:stop])
    if backend is not None:
        tile_job = replace(tile_job, backend=backend)

    def keep(r0: int, rows: np.ndarray) -> None:
        checksums[f"rows-{r0}.npy"] = job.write_block(part, f"rows-{r0}.npy", rows)

    def keep_sums(sums: PanelSums) -> None:  # a product centred from them
        checksums[SUMS_BLOCK] = job.write_block(part, SUMS_BLOCK, sums.vector())

    io = compute_tile(
        tile_job, part.tile, before_write=recorded.owner_check, sink=keep, keep_sums=keep_sums
    )
    return replace(io, scratch_bytes=io.bytes_written, bytes_written=0)  # kept, not output


def _record_part(
    job: SplitJob, part: PartialTask, result: dict[str, Any], checksums: dict[str, str]
) -> None:
    """Record ``part`` done: its figures, panels and its blocks' checksums, sealed."""
    recorded = job.recorded
    recorded.journal.record_tile(
        recorded.journal_id,
        part.tile,
        result,
        key=recorded.journal.partial_key(recorded.journal_id, part.key),
        extra={"part": part.key, "panels": list(part.panels), "blocks": dict(checksums)},
    )


def _recompute_part(job: SplitJob, damaged: DamagedPart, where: str) -> TaskIO:
    """Compute a damaged part again inside its tile's reduction (nothing of the sum held),
    on the CPU engine (reductions run on any worker), and record it anew; return what
    that measured."""
    recorded = job.recorded
    part = damaged.part
    logger.warning(
        "the partial tile %s in %s is damaged (%s): it is computed again", part.key, where,
        damaged.why,
    )  # fmt: skip
    recorded.journal.delete(recorded.journal.partial_key(recorded.journal_id, part.key))
    started = time.perf_counter()
    checksums: dict[str, str] = {}
    io = _compute_part(job, part, checksums, backend="cpu")
    recorded.check_owner()
    seconds = time.perf_counter() - started
    result = TileResult(
        key=part.key, **asdict(io), seconds=seconds, peak_rss_bytes=0, worker=worker_name()
    )
    _record_part(job, part, asdict(result), checksums)
    return io


def reduce_tile(job: SplitJob, task: TileTask) -> TileResult:
    """The worker entry of a split tile's reduction: add its parts, write the tile, record it.

    Block of rows by block of rows (the blocks the parts were written in):
    the parts are added in order in the accumulation dtype, finished and
    written as whole chunks of the output.  A tile already recorded is not
    written again.
    """
    recorded = job.recorded

    def reduce() -> TaskIO:
        clear_own_objects(recorded, task)  # a damaged shard is written anew, not merged into
        return _reduce(job, task)

    return run_recorded(
        recorded,
        recorded.journal.tile_key(recorded.journal_id, task.key),
        task.key,
        reduce,
        lambda result: record_written_tile(recorded, task, result),
    )


def _reduce(job: SplitJob, task: TileTask) -> TaskIO:
    """Add the parts of ``task``'s tile and write it; a damaged part is computed again
    and the sum started over (:func:`_add_parts` holds nothing once it raises)."""
    recomputed: list[str] = []
    read = 0  # what computing damaged parts again read
    parts = job.parts_of(task)
    where = job.recorded.journal.local_folder or job.recorded.journal.key()
    while True:  # each part is computed again at most once
        try:
            io = _add_parts(job, task, parts)
        except DamagedPart as damaged:
            if damaged.part.key in recomputed:
                raise RuntimeError(
                    f"the partial tile {damaged} in {where} is damaged again after it was "
                    "computed again: check the disk of the output's journal"
                ) from None
            read += _recompute_part(job, damaged, where).bytes_read
            recomputed.append(damaged.part.key)
            continue
        return replace(io, bytes_read=io.bytes_read + read, recomputed=tuple(recomputed))


def _add_parts(job: SplitJob, task: TileTask, parts: tuple[PartialTask, ...]) -> TaskIO:
    """Add the parts of ``task``'s tile, row block by row block, and write it.

    Raises
    ------
    DamagedPart
        For the first part whose record or a block is not sound.
    """
    recorded = job.recorded
    tile_job = recorded.tile_job
    checksums = [job.part_record(part)["blocks"] for part in parts]
    rows, cols = task.shape
    block = write_block_rows(output_grid(tile_job)[0], rows)
    read = compute = write = 0.0
    scratch = 0
    # The mirror of an off-diagonal tile of a symmetric product is written from the whole sum.
    mirror = tile_job.product.symmetric and task.i != task.j
    whole = np.empty(task.shape, tile_job.product.types.compute) if mirror else None
    sums = _panel_sums(job, task, parts, checksums)
    for r0 in range(0, rows, block):
        shape = (min(block, rows - r0), cols)
        # Two blocks held, whatever the fan-in: the sum, and the part just read.
        total = None if whole is None else whole[r0 : r0 + shape[0]]
        for index, part in enumerate(parts):
            t0 = time.perf_counter()
            partial = job.read_block(part, f"rows-{r0}.npy", shape, checksums[index])
            t1 = time.perf_counter()
            if index:
                total += partial  # in the parts' order: the same bits on every run
            elif total is None:
                total = partial.copy()  # the part is a read-only view of the store's bytes
            else:
                total[...] = partial
            read, compute = read + t1 - t0, compute + time.perf_counter() - t1
            scratch += partial.nbytes
            del partial
        t2 = time.perf_counter()
        recorded.check_owner()
        if sums is not None:  # centred from the panel sums: before the scales
            sums.correct(r0, total, tile_job.product.k)
        write_finished_rows(tile_job, task, r0, total)
        write += time.perf_counter() - t2
    if whole is not None:
        t0 = time.perf_counter()
        write_mirror(tile_job, task, whole, recorded.owner_check)
        write += time.perf_counter() - t0
    return TaskIO(
        bytes_read=addend_bytes(tile_job, task),  # the parts read A and B
        bytes_written=output_bytes(tile_job, task),
        read_wait_seconds=read,
        compute_seconds=compute,
        write_seconds=write,
        scratch_bytes=scratch,
    )


#: The block a part of a product centred from its panel sums keeps them in.
SUMS_BLOCK = "sums.npy"


def _panel_sums(
    job: SplitJob, task: TileTask, parts: tuple[PartialTask, ...], checksums: list[dict]
) -> PanelSums | None:
    """The panel sums of ``task``'s parts added up, in part order (None where the
    product is not centred from them); a part without sound sums is damaged."""
    product = job.recorded.tile_job.product
    if not product.panel_sums:
        return None
    sums = PanelSums.zeros(task.shape, product.types.compute)
    length = (sum(task.shape),)
    for part, kept in zip(parts, checksums, strict=True):
        sums.add_vector(job.read_block(part, SUMS_BLOCK, length, kept, sums.a.dtype))
    return sums

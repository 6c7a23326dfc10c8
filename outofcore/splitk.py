"""Split-k: tiles computed in parts over ranges of k, then added up by a reduction.

When a plan has fewer tiles than workers (a small output from a large k) it
splits each tile's k-panels into ``splits`` parts (:attr:`scheduler.plan.Plan.splits`).
Each part is a task, :func:`compute_partial`: it runs the ordinary tile loop
(:func:`outofcore.tile.compute_tile`) over its panels only and writes its
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
so a resume with another split never mixes parts.  A part whose data is
missing or of the wrong shape or dtype stops the reduction with an error:
the tile is never written from it.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass, replace

import numpy as np
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from outofcore.recorded import RecordedJob, TileResult, run_recorded
from outofcore.tile import TaskIO, compute_tile, output_bytes, write_finished_rows, write_mirror
from outofcore.writing import naming_full_disk
from scheduler.plan import PartialTask, TileTask, tile_parts, write_block_rows


@dataclass(frozen=True)
class SplitJob:
    """A recorded job whose tiles are computed in ``splits`` parts over k."""

    recorded: RecordedJob
    splits: int

    def parts_of(self, task: TileTask) -> tuple[PartialTask, ...]:
        """The parts of ``task``'s tile, in the order the reduction adds them."""
        return tile_parts(task, len(self.recorded.tile_job.panels), self.splits)

    def _block_key(self, part: PartialTask, r0: int) -> str:
        journal = self.recorded.journal
        return journal.partial_key(self.recorded.journal_id, part.key, f"rows-{r0}.npy")

    def write_block(self, part: PartialTask, r0: int, rows: np.ndarray) -> None:
        """Keep ``rows`` (from row ``r0`` of the tile) of ``part``'s partial sum."""
        journal = self.recorded.journal
        key = self._block_key(part, r0)
        with naming_full_disk(f"writing the partial tile {key}", journal.local_folder):
            data = default_buffer_prototype().buffer.from_array_like(npy_bytes(rows))
            sync(journal.store.set(key, data))

    def read_block(self, part: PartialTask, r0: int, shape: tuple[int, int]) -> np.ndarray:
        """Rows ``r0`` on of ``part``'s partial sum, checked against the shape and dtype due
        (a read-only view of the bytes the store read)."""
        key = self._block_key(part, r0)
        data = self.recorded.journal.get_array(key)
        dtype = self.recorded.tile_job.product.types.compute
        if data is None:
            raise RuntimeError(f"the partial tile {key} is missing although its part is recorded")
        block = npy_view(data)
        if block is None or block.shape != shape or block.dtype != dtype:
            held = (
                "bytes that are no .npy array" if block is None else f"{block.shape} {block.dtype}"
            )
            raise RuntimeError(
                f"the partial tile {key} holds {held}, expected "
                f"{shape} {dtype}: it is not this job's; rerun with overwrite to start afresh"
            )
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
    record it (:func:`outofcore.recorded.run_recorded`)."""
    recorded = job.recorded
    key = recorded.journal.partial_key(recorded.journal_id, part.key)

    def compute() -> TaskIO:
        first, stop = part.panels
        tile_job = replace(recorded.tile_job, panels=recorded.tile_job.panels[first:stop])
        io = compute_tile(
            tile_job,
            part.tile,
            before_write=recorded.owner_check,
            sink=lambda r0, rows: job.write_block(part, r0, rows),
        )
        return replace(io, scratch_bytes=io.bytes_written, bytes_written=0)  # kept, not output

    def record(result: dict) -> None:
        recorded.journal.record_tile(recorded.journal_id, part.tile, result, key=key)

    return run_recorded(recorded, key, part.key, compute, record)


def reduce_tile(job: SplitJob, task: TileTask) -> TileResult:
    """The worker entry of a split tile's reduction: add its parts, write the tile, record it.

    Block of rows by block of rows (the blocks the parts were written in):
    the parts are added in order in the accumulation dtype, finished and
    written as whole chunks of the output.  A tile already recorded is not
    written again.
    """
    recorded = job.recorded
    return run_recorded(
        recorded,
        recorded.journal.tile_key(recorded.journal_id, task.key),
        task.key,
        lambda: _reduce(job, task),
        lambda result: recorded.journal.record_tile(recorded.journal_id, task, result),
    )


def _reduce(job: SplitJob, task: TileTask) -> TaskIO:
    """Add the parts of ``task``'s tile, row block by row block, and write it."""
    recorded = job.recorded
    tile_job = recorded.tile_job
    parts = job.parts_of(task)
    rows, cols = task.shape
    block = write_block_rows((tile_job.c.shards or tile_job.c.chunks)[0], rows)
    read = compute = write = 0.0
    scratch = 0
    # The mirror of an off-diagonal tile of a symmetric product is written from the whole sum.
    mirror = tile_job.product.symmetric and task.i != task.j
    whole = np.empty(task.shape, tile_job.product.types.compute) if mirror else None
    for r0 in range(0, rows, block):
        shape = (min(block, rows - r0), cols)
        # Two blocks held, whatever the fan-in: the sum, and the part just read.
        total = None if whole is None else whole[r0 : r0 + shape[0]]
        for index, part in enumerate(parts):
            t0 = time.perf_counter()
            partial = job.read_block(part, r0, shape)
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
        write_finished_rows(tile_job, task, r0, total)
        write += time.perf_counter() - t2
    if whole is not None:
        t0 = time.perf_counter()
        write_mirror(tile_job, task, whole, recorded.owner_check)
        write += time.perf_counter() - t0
    return TaskIO(
        bytes_read=0,
        bytes_written=output_bytes(tile_job, task),
        read_wait_seconds=read,
        compute_seconds=compute,
        write_seconds=write,
        scratch_bytes=scratch,
    )

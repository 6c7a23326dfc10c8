"""What a tile task reads and writes: its matrices' entries, the grid the output is written
in, the bytes it decodes, reads and writes, and the mirror of a symmetric product's tile."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from outofcore.compute.tile_job import TileJob
from outofcore.planner.io_model import chunk_span
from outofcore.planner.memory import write_block_rows
from outofcore.planner.plan import TileTask
from outofcore.storage.digests import Digests
from outofcore.storage.writing import write_region


def operand_entries(job: TileJob, task: TileTask) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The batch indices into A and into B of ``task``'s matrices (``()`` without a batch)."""
    return job.product.stack.operand_index(task.batch or 0)


def output_grid(job: TileJob) -> tuple[int, int]:
    """``(rows, cols)`` of the grid the output's matrices are written in (its shards, else
    its chunks, on the matrix axes): whole blocks of it are written at once."""
    return job.product.matrix("out").chunks2d(job.c.shards or job.c.chunks)


def is_diagonal(job: TileJob, task: TileTask) -> bool:
    """Whether ``task`` is a diagonal tile of a symmetric product (one panel, ``syrk``)."""
    return job.product.symmetric and task.i == task.j


def output_bytes(job: TileJob, task: TileTask) -> int:
    """Bytes of the output a task writes: its tile, and its mirror (a symmetric product's
    tile off the diagonal), in the output's dtype."""
    copies = 2 if job.product.symmetric and task.i != task.j else 1
    return copies * task.shape[0] * task.shape[1] * job.c.dtype.itemsize


def addend_bytes(job: TileJob, task: TileTask) -> int:
    """Bytes of the addend a task reads to finish its tile (its region, in the addend's
    dtype), as the plan's ``bytes_read`` and the I/O lower bound count them; 0 without one."""
    addend = job.product.addend
    return 0 if addend is None else task.shape[0] * task.shape[1] * addend.dtype.itemsize


def write_mirror(
    job: TileJob, task: TileTask, tile: np.ndarray, before_write: Callable[[], None] | None
) -> Digests:
    """Write tile ``(j, i)`` of a symmetric product as the transpose of ``tile`` ``(i, j)``.

    Call after the tile's own rows are written: :meth:`Product.finish_rows`
    scaled them in place, so ``tile`` holds the finished values and they are
    only converted to the output dtype here (a symmetric product has no
    addend).  In blocks of whole output-chunk rows of the mirror (columns of
    ``tile``), each transposed into a contiguous block; the values are the
    same bits as the tile's, so the output is exactly symmetric.  Returns the digests of
    what it wrote (:func:`~outofcore.storage.writing.write_region`).
    """
    block = write_block_rows(output_grid(job)[0], tile.shape[1])
    output = job.product.types.output
    out = job.product.matrix("out", task.batch)
    written: Digests = {}
    for q0 in range(0, tile.shape[1], block):
        if before_write is not None:
            before_write()
        rows = np.ascontiguousarray(tile[:, q0 : q0 + block].T).astype(output, copy=False)
        written |= write_region(job.c, out.start(task.col0 + q0, task.row0), out.view(rows))
    return written


def largest_chunk_bytes(job: TileJob) -> int:
    """Bytes of the largest input or output chunk this job reads or writes."""
    arrays = (*job.product.inputs.values(), job.c)
    return max(
        np.dtype(x.dtype).itemsize * math.prod(x.shards or x.chunks if x is job.c else x.chunks)
        for x in arrays
    )


def decoded_bytes(
    job: TileJob, task: TileTask, k0: int, k1: int, a: bool = True, b: bool = True
) -> int:
    """Bytes of A and B decoded to read this panel (whole chunks along k)."""
    product = job.product
    a_view, b_view = product.op_view("A"), product.op_view("B")
    a_k = chunk_span(k0, k1, a_view.chunks[1], product.k) if a else 0
    b_k = chunk_span(k0, k1, b_view.chunks[0], product.k) if b else 0
    rows, cols = task.shape
    return product.a.dtype.itemsize * rows * a_k + product.b.dtype.itemsize * b_k * cols

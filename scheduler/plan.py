"""The plan: tile sizes, task list and I/O model for ``C = A @ B``, as pure data.

Nothing here imports Dask, numba or zarr.  A plan is made from shapes, chunk
grids, the element size and a per-worker memory budget; it is checked against
the budget before anything runs and is the single source of truth for what
the tasks do.

Memory contract of one task (bytes)::

    w * (tm*tn + depth * tk * (tm + tn))  +  staging  +  write block  +  codec buffers

with ``w`` the accumulation dtype's size (float32 for float16 inputs, float64
for exact integer products), ``depth = 2`` panels in flight (one multiplied,
one being decoded), staging: the panel of an input stored in another dtype,
decoded there before it is converted (``tk * (tm + tn)`` at the stored size,
for each input that needs it), write block: the output rows written at once
(``write_block_rows``) when they are converted to the output dtype or an
addend is read for them, and codec buffers: a file and a chunk buffer per I/O
thread (``io_concurrency`` of them), of the input chunk's size, grown to the
output chunk's size in the threads that write; the same buffers serve reads and writes and are kept
between tasks.  The CPU engine writes the tile's finished rows while it multiplies
the last panels, so the panels are still live while output chunks are
written (:func:`task_bytes`).

Bytes read by the whole job (every task reads its A row-panel and B
column-panel once)::

    nt * wa * m * k  +  mt * wb * k * n        (mt, nt = tiles down and across)

(``wa``, ``wb`` the stored element sizes of A and B) plus whatever a k-panel
boundary that splits a chunk reads twice, plus the addend once.  The lower
bound printed beside it is ``max(|A| + |B|, 2*m*n*k*w / sqrt(M/w) - 2*M)``
for a budget of ``M`` bytes (Smith et al., arXiv:1702.02017).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.errors import BudgetError, InputError

PANELS_IN_FLIGHT = 2
DEFAULT_IO_CONCURRENCY = 2
#: Preferred k-panel depth: deep enough for BLAS to run near peak.
TARGET_TK = 1024
#: Largest side of an output chunk we create (a tile may hold several).
MAX_OUTPUT_CHUNK = 2048
#: Core time to decode one element, in multiply-adds of the same core: zstd
#: decodes about 1 GB/s (0.25 G float32/s) where sgemm runs about 50 G
#: multiply-adds/s per core (measured on the 2-core CI machine).  Only used to
#: rank tile shapes against each other.
DECODE_COST_FMAS = 200
#: Tile counts along one side tried one by one before the search goes geometric.
MAX_EDGE_CANDIDATES = 256
#: An output a job creates with more chunks than this is sharded, one shard per
#: tile (zarr v3 ``shards=``), so that the store holds a few large objects and
#: each tile still writes whole ones: :func:`make_output_plan`.
SHARD_OVER_CHUNKS = 10**5
#: Rows of C written at once (whole rows of output chunks, at least this many):
#: the CPU engine multiplies a tile's last panels block by block and writes each
#: finished block while it multiplies the next.
WRITE_BLOCK_ROWS = 1024
#: Core time to write and read back one element of a partial tile (split-k), in
#: multiply-adds: raw bytes to the output's store and back, no codec.
SCRATCH_COST_FMAS = 50


@dataclass(frozen=True)
class Problem:
    """The shapes and chunkings of one product ``C (m×n) = op(A) (m×k) @ op(B) (k×n)``.

    Chunk grids are those of ``op(A)`` and ``op(B)``: a transposed operand's
    stored chunks, swapped.  Element sizes are bytes.
    """

    m: int
    k: int
    n: int
    #: Size of the accumulation dtype (panels in memory and the tile).
    itemsize: int
    a_chunks: tuple[int, int]
    b_chunks: tuple[int, int]
    #: The grid an existing output must be written in (its shards, else chunks).
    out_grid: tuple[int, int] | None = None
    #: Stored element sizes of A and B (bytes read); None: ``itemsize``.
    read_itemsizes: tuple[int, int] | None = None
    #: Bytes per element of A's and B's staging panels (0: decoded straight into the panel).
    staging: tuple[int, int] = (0, 0)
    #: Element size of the output; None: ``itemsize``.
    out_itemsize: int | None = None
    #: Bytes per output element of a write block's buffers (converted output, addend).
    block_extra: int = 0
    #: Stored element size of the addend (read once); 0: no addend.
    addend_itemsize: int = 0
    #: Decoded bytes of one chunk of the addend (its reads' buffers); 0: no addend.
    addend_chunk_bytes: int = 0
    #: Bytes a chunk request in flight holds beside the chunk's buffers (an object store
    #: client's request and response objects); 0 for files on a local disk.
    request_bytes: int = 0
    #: Shards of ``op(A)`` and ``op(B)`` that zarr's sharding codec reads (a remote store,
    #: codecs outofcore's reader does not decode): a read then holds a shard's part of the
    #: panel, encoded and decoded, at once (:func:`shard_read_bytes`).  None: read chunk by
    #: chunk (chunk files, local shard files, unsharded arrays).
    read_shards: tuple[tuple[int, int] | None, tuple[int, int] | None] = (None, None)
    #: ``op(A) @ op(B)`` is ``X.T @ X`` or ``X @ X.T`` of one array X: only the tiles on
    #: and above the diagonal are tasks; each writes its mirror tile too.
    symmetric: bool = False
    #: The output is created with one shard per tile: a tile is written, and
    #: encoded, as one object (:func:`make_output_plan`).
    shard_tiles: bool = False

    def __post_init__(self) -> None:
        for name in ("m", "k", "n"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} = {getattr(self, name)}: every dimension must be >= 1")
        if self.symmetric and (self.m != self.n or self.a_chunks[::-1] != self.b_chunks):
            raise InputError(
                f"a symmetric product needs op(A) = op(B).T: got {self.m}x{self.k} in chunks "
                f"{self.a_chunks} and {self.k}x{self.n} in chunks {self.b_chunks}"
            )
        grids = {"a_chunks": self.a_chunks, "b_chunks": self.b_chunks}
        for name, shards in zip(("a_shards", "b_shards"), self.read_shards, strict=True):
            if shards is not None:
                grids[name] = shards
        if self.out_grid is not None:
            grids["out_grid"] = self.out_grid
            if self.shard_tiles:
                raise InputError(
                    f"out_grid = {self.out_grid} (an existing output) cannot go with "
                    "shard_tiles (shards of an output the job creates)"
                )
        for name, grid in grids.items():
            if len(grid) != 2 or min(grid) < 1:
                raise InputError(f"{name} = {grid}: need two chunk sizes >= 1")
        sizes = [self.itemsize, *self.read_sizes, self.written_itemsize]
        extras = (*self.staging, self.block_extra, self.addend_itemsize, self.request_bytes)
        if min(sizes) < 1 or min(extras) < 0:
            raise InputError(f"element sizes must be >= 1 (staging >= 0), got {self}")

    @property
    def read_sizes(self) -> tuple[int, int]:
        """Stored element sizes of A and B."""
        return self.read_itemsizes or (self.itemsize, self.itemsize)

    @property
    def written_itemsize(self) -> int:
        """Element size of the output."""
        return self.out_itemsize or self.itemsize


@dataclass(frozen=True)
class TileTask:
    """One output tile ``C[row0:row1, col0:col1]``; a Dask task computes it."""

    index: int
    i: int
    j: int
    row0: int
    row1: int
    col0: int
    col1: int

    @property
    def shape(self) -> tuple[int, int]:
        return (self.row1 - self.row0, self.col1 - self.col0)

    @property
    def key(self) -> str:
        """Stable name of the tile, used for Dask keys and the job journal."""
        return f"tile-{self.i}-{self.j}"


@dataclass(frozen=True)
class PartialTask:
    """Part ``part`` of ``parts`` of a split tile: its product over one range of k-panels.

    The task writes its partial sum to scratch next to the output (in the
    accumulation dtype); the tile's reduction task adds the parts in order.
    """

    tile: TileTask
    part: int
    parts: int
    #: Positions ``[first, stop)`` in the plan's panel list this part multiplies.
    panels: tuple[int, int]

    @property
    def index(self) -> int:
        """Position in the plan's order of partial tasks (tile by tile)."""
        return self.tile.index * self.parts + self.part

    @property
    def key(self) -> str:
        """Stable name (the split count is part of it: a resume with another split
        never takes this part for one of its own)."""
        return f"{self.tile.key}-k{self.part}of{self.parts}"


class Panels(Sequence[tuple[int, int]]):
    """The k-panels ``(k0, k1)`` of depth ``tk`` over ``k``, each made when it is asked for.

    A product with k = 10**12 has millions of panels: listing them would cost the
    planning what it must not (planning time independent of the chunk grid).  Holds
    positions ``start`` to ``stop`` of the whole list (a slice of it is one, too: the
    panels of one part of a split tile).  Equal to a tuple of the same panels.
    """

    __slots__ = ("k", "start", "stop", "tk")

    def __init__(self, k: int, tk: int, start: int = 0, stop: int | None = None) -> None:
        if k < 1 or tk < 1:
            raise InputError(f"panels of depth {tk} over k = {k}: both must be >= 1")
        count = -(-k // tk)
        stop = count if stop is None else stop
        if not 0 <= start <= stop <= count:
            raise InputError(f"panels {start}:{stop} of {count}: out of range")
        self.k, self.tk, self.start, self.stop = k, tk, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            first, stop, step = index.indices(len(self))
            if step != 1:
                return tuple(self[i] for i in range(first, stop, step))
            return Panels(self.k, self.tk, self.start + first, self.start + max(first, stop))
        position = operator.index(index)
        if position < 0:
            position += len(self)
        if not 0 <= position < len(self):
            raise IndexError(f"panel {index} of {len(self)}")
        k0 = (self.start + position) * self.tk
        return (k0, min(k0 + self.tk, self.k))

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for position in range(self.start, self.stop):
            k0 = position * self.tk
            yield (k0, min(k0 + self.tk, self.k))

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        """Position of the panel ``value`` (at ``start`` or after, before ``stop``)."""
        try:
            k0, k1 = value
            found = operator.index(k0) // self.tk - self.start
        except (TypeError, ValueError):
            found = -1
        within = range(len(self))[start:stop]
        if found in within and self[found] == (k0, k1):
            return found
        raise ValueError(f"{value!r} is not one of the panels")

    def __contains__(self, value: object) -> bool:
        try:
            self.index(value)
        except ValueError:
            return False
        return True

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Panels):  # uniform: the count and the ends fix every panel
            return len(self) == len(other) and (
                not self or (self[0] == other[0] and self[-1] == other[-1])
            )
        if isinstance(other, tuple | list):
            return len(self) == len(other) and all(
                mine == tuple(theirs) for mine, theirs in zip(self, other, strict=True)
            )
        return NotImplemented

    def __hash__(self) -> int:
        return hash((len(self), self[0] if self else None, self[-1] if self else None))

    def __repr__(self) -> str:
        return f"Panels(k={self.k}, tk={self.tk}, start={self.start}, stop={self.stop})"

    def __reduce__(self) -> tuple:
        return (Panels, (self.k, self.tk, self.start, self.stop))


class Tiles(Sequence[TileTask]):
    """The tile tasks of ``tm×tn`` tiles over an ``m×n`` output, each made when asked for.

    Row by row, alternating direction, so neighbours share an A or B panel; a
    symmetric product's tasks are the tiles on and above the diagonal.  Planning
    an output of millions of tiles lists none of them (:attr:`Plan.flops` and the
    counts are closed forms); running a job lists those it runs.  Equal to a tuple
    of the same tasks.
    """

    __slots__ = ("across", "down", "m", "n", "symmetric", "tm", "tn")

    def __init__(self, m: int, n: int, tm: int, tn: int, symmetric: bool = False) -> None:
        if min(m, n, tm, tn) < 1:
            raise InputError(f"tiles of {tm}x{tn} over {m}x{n}: every size must be >= 1")
        self.m, self.n, self.tm, self.tn, self.symmetric = m, n, tm, tn, symmetric
        self.down, self.across = -(-m // tm), -(-n // tn)

    def _row_start(self, i: int) -> int:
        """Position of the first task of tile row ``i``."""
        if not self.symmetric:
            return i * self.across
        return i * self.across - i * (i - 1) // 2

    def __len__(self) -> int:
        return self._row_start(self.down) if self.symmetric else self.down * self.across

    def _task(self, index: int, i: int, j: int) -> TileTask:
        return TileTask(
            index=index,
            i=i,
            j=j,
            row0=i * self.tm,
            row1=min((i + 1) * self.tm, self.m),
            col0=j * self.tn,
            col1=min((j + 1) * self.tn, self.n),
        )

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[position] for position in range(*index.indices(len(self))))
        position = operator.index(index)
        if position < 0:
            position += len(self)
        if not 0 <= position < len(self):
            raise IndexError(f"tile {index} of {len(self)}")
        low, high = 0, self.down - 1  # the last row starting at or before ``position``
        while low < high:
            middle = (low + high + 1) // 2
            if self._row_start(middle) <= position:
                low = middle
            else:
                high = middle - 1
        i, offset = low, position - self._row_start(low)
        first = i if self.symmetric else 0
        j = first + offset if i % 2 == 0 else self.across - 1 - offset
        return self._task(position, i, j)

    def __iter__(self) -> Iterator[TileTask]:
        index = 0
        for i in range(self.down):
            first = i if self.symmetric else 0
            columns = range(first, self.across)
            for j in columns if i % 2 == 0 else reversed(columns):
                yield self._task(index, i, j)
                index += 1

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        """Position of the task ``value`` (at ``start`` or after, before ``stop``)."""
        found = -1
        if isinstance(value, TileTask) and 0 <= value.i < self.down:
            first = value.i if self.symmetric else 0
            if first <= value.j < self.across:
                offset = value.j - first if value.i % 2 == 0 else self.across - 1 - value.j
                found = self._row_start(value.i) + offset
        if found in range(len(self))[start:stop] and self[found] == value:
            return found
        raise ValueError(f"{value!r} is not one of the tasks")

    def __contains__(self, value: object) -> bool:
        try:
            self.index(value)
        except ValueError:
            return False
        return True

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Tiles):
            fields = ("m", "n", "tm", "tn", "symmetric")
            return len(self) == len(other) == 0 or all(
                getattr(self, name) == getattr(other, name) for name in fields
            )
        if isinstance(other, tuple | list):
            return len(self) == len(other) and all(
                mine == theirs for mine, theirs in zip(self, other, strict=True)
            )
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.m, self.n, self.tm, self.tn, self.symmetric))

    def __repr__(self) -> str:
        return (
            f"Tiles({self.m}x{self.n} in {self.tm}x{self.tn}"
            f"{', symmetric' if self.symmetric else ''}: {len(self)} tasks)"
        )

    def __reduce__(self) -> tuple:
        return (Tiles, (self.m, self.n, self.tm, self.tn, self.symmetric))


@dataclass(frozen=True)
class Plan:
    """Everything decided before the job runs; see the module docstring."""

    problem: Problem
    budget_bytes: int
    workers: int
    tm: int
    tn: int
    tk: int
    out_chunks: tuple[int, int]
    io_concurrency: int
    panels: Panels
    tasks: Tiles = field(repr=False)
    #: Parts each tile's k is split into (split-k); 1: every task computes a whole tile.
    splits: int = 1

    @property
    def split_panels(self) -> tuple[tuple[int, int], ...]:
        """``[first, stop)`` panel positions of each part, as even as whole panels allow."""
        return split_evenly(len(self.panels), self.splits)

    @property
    def partial_tasks(self) -> tuple[PartialTask, ...]:
        """Every part of every tile when k is split, tile by tile; empty otherwise."""
        if self.splits == 1:
            return ()
        return tuple(
            part for task in self.tasks for part in tile_parts(task, len(self.panels), self.splits)
        )

    @property
    def busy_workers(self) -> int:
        """Workers that get a task: no more than the tasks (partial tasks when k is split)."""
        return min(self.workers, len(self.tasks) * self.splits)

    @property
    def scratch_bytes(self) -> int:
        """Bytes of partial tiles a split plan writes next to the output (and reads back once)."""
        p = self.problem
        return 0 if self.splits == 1 else self.splits * p.m * p.n * p.itemsize

    @property
    def tiles_down(self) -> int:
        return math.ceil(self.problem.m / self.tm)

    @property
    def tiles_across(self) -> int:
        return math.ceil(self.problem.n / self.tn)

    def task_flops(self) -> dict[str, int]:
        """Floating-point operations of each task that multiplies, by key: whole tiles, or
        for a split plan each part of a tile (its reductions only add); the diagonal tiles
        of a symmetric product count ``syrk``'s ``k·t·(t+1)``, its mirrors nothing."""
        k, symmetric = self.problem.k, self.problem.symmetric

        def of(task: TileTask, depth: int) -> int:
            rows, cols = task.shape
            if symmetric and task.i == task.j:
                return depth * rows * (rows + 1)
            return 2 * depth * rows * cols

        if self.splits == 1:
            return {t.key: of(t, k) for t in self.tasks}
        flops = {}
        for part in self.partial_tasks:
            first, stop = part.panels
            flops[part.key] = of(part.tile, self.panels[stop - 1][1] - self.panels[first][0])
        return flops

    @property
    def flops(self) -> int:
        """Floating-point operations of the whole job (a multiply and an add each): the sum
        of :meth:`task_flops`, in closed form (``2mnk``; ``k·m·(m+1)`` for a symmetric
        product, whose diagonal tiles count ``syrk``'s work and mirrors none)."""
        p = self.problem
        return p.k * p.m * (p.m + 1) if p.symmetric else 2 * p.m * p.n * p.k

    @property
    def projections(self) -> dict[str, int]:
        """Projected peak bytes of each kind of task the plan runs (:func:`projections`)."""
        return projections(
            self.problem, self.tm, self.tn, self.tk, self.io_concurrency, self.splits
        )

    @property
    def task_bytes(self) -> int:
        """Projected peak bytes of the plan's largest task, of any kind."""
        return max(self.projections.values())

    @property
    def out_shards(self) -> tuple[int, int] | None:
        """Shard shape of the output the job creates (one shard per tile), or None."""
        if not self.problem.shard_tiles:
            return None
        return (self.tm, self.tn)

    @property
    def out_chunk_count(self) -> int:
        """Chunks of the output in the plan's chunking (inner chunks when sharded)."""
        rows, cols = self.out_chunks
        return math.ceil(self.problem.m / rows) * math.ceil(self.problem.n / cols)

    @property
    def bytes_read(self) -> int:
        """Predicted bytes of A and B read by all tasks together."""
        p = self.problem
        wa, wb = p.read_sizes
        a_reads = wa * self.tiles_across * p.m * _touched(self.panels, p.a_chunks[1])
        if p.symmetric:  # tile (i, j), j > i, reads panels i and j; tile (i, i) one panel
            return a_reads
        b_reads = wb * self.tiles_down * p.n * _touched(self.panels, p.b_chunks[0])
        return a_reads + b_reads + p.addend_itemsize * p.m * p.n

    @property
    def bytes_written(self) -> int:
        p = self.problem
        return p.written_itemsize * p.m * p.n

    @property
    def io_lower_bound(self) -> int:
        """No schedule with this budget reads fewer bytes (see the module docstring)."""
        return io_lower_bound(self.problem, self.budget_bytes)

    def summary(self) -> dict:
        """Return the plan as plain JSON-ready values (without the task list)."""
        return {
            "m": self.problem.m,
            "k": self.problem.k,
            "n": self.problem.n,
            "itemsize": self.problem.itemsize,
            "read_itemsizes": list(self.problem.read_sizes),
            "out_itemsize": self.problem.written_itemsize,
            "a_chunks": list(self.problem.a_chunks),
            "b_chunks": list(self.problem.b_chunks),
            "budget_bytes": self.budget_bytes,
            "workers": self.workers,
            "tile": [self.tm, self.tn],
            "tk": self.tk,
            "out_chunks": list(self.out_chunks),
            "out_chunk_count": self.out_chunk_count,
            "out_shards": list(self.out_shards) if self.out_shards else None,
            "tiles": len(self.tasks),
            "tiles_grid": [self.tiles_down, self.tiles_across],
            "symmetric": self.problem.symmetric,
            "splits": self.splits,
            "partial_tasks": len(self.tasks) * self.splits if self.splits > 1 else 0,
            "busy_workers": self.busy_workers,
            "scratch_bytes": self.scratch_bytes,
            "panels_per_tile": len(self.panels),
            "task_bytes": self.task_bytes,
            "task_bytes_by_kind": self.projections,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "io_lower_bound": self.io_lower_bound,
            "read_over_lower_bound": self.bytes_read / self.io_lower_bound,
            "flops": self.flops,
        }


def task_bytes(problem: Problem, tm: int, tn: int, tk: int, io_concurrency: int) -> int:
    """Projected peak bytes of one task with a ``tm×tn`` tile and ``tk``-deep panels.

    The tile loop (:func:`loop_bytes`), and what finishing and writing the tile adds:
    one write block's conversion and addend buffers, the addend's chunk buffers
    (``io_concurrency`` read at a time), the codec buffers grown to the output
    chunk's size in the threads that write (at most ``c = io_concurrency``, and at
    most the tile's output chunks), and for a symmetric product the transposed
    blocks its mirror tile is written from.
    """
    p = problem
    tm, tn = min(tm, p.m), min(tn, p.n)
    wa, wb = p.read_sizes
    input_chunk = max(wa * p.a_chunks[0] * p.a_chunks[1], wb * p.b_chunks[0] * p.b_chunks[1])
    out_rows, out_cols = _out_grid(p, tm, tn)
    block = p.block_extra * write_block_rows(out_rows, tm) * tn
    out_chunk = p.written_itemsize * min(out_rows, tm) * min(out_cols, tn)
    writers = min(io_concurrency, math.ceil(tm / out_rows) * math.ceil(tn / out_cols))
    codec_buffers = writers * 2 * max(0, out_chunk - input_chunk)
    codec_buffers += io_concurrency * 2 * p.addend_chunk_bytes
    if p.symmetric:  # the mirror tile is written from transposed blocks of the tile's columns
        block += max(p.itemsize, p.written_itemsize) * tm * write_block_rows(out_cols, tn)
    return loop_bytes(p, tm, tn, tk, io_concurrency) + block + codec_buffers


def loop_bytes(problem: Problem, tm: int, tn: int, tk: int, io_concurrency: int) -> int:
    """Projected peak bytes of the tile loop over its panels, before anything is written.

    ``w * (tm*tn + depth*tk*(tm + tn))`` for the tile and the panels in flight,
    live throughout (the last panels' rows are written while they are
    multiplied); the staging panels of inputs stored in another dtype; and the
    codec buffers, kept from reads to writes and task to task: a file and a chunk
    buffer for each of the ``c = io_concurrency`` I/O threads, of the largest input
    chunk, and on object stores each request's own objects (``request_bytes``); or,
    where zarr reads shards (``read_shards``), what its reads hold at once
    (:func:`shard_read_bytes`) if that is more.
    """
    p = problem
    tm, tn, tk = min(tm, p.m), min(tn, p.n), min(tk, p.k)
    wa, wb = p.read_sizes
    input_chunk = max(wa * p.a_chunks[0] * p.a_chunks[1], wb * p.b_chunks[0] * p.b_chunks[1])
    panels = p.itemsize * PANELS_IN_FLIGHT * tk * (tm + tn)
    staging = tk * (tm * p.staging[0] + tn * p.staging[1])
    shard_reads = max(
        shard_read_bytes(p.read_shards[0], p.a_chunks, wa, (tm, tk), io_concurrency),
        shard_read_bytes(p.read_shards[1], p.b_chunks, wb, (tk, tn), io_concurrency),
    )
    codec_buffers = max(2 * io_concurrency * input_chunk, shard_reads)
    codec_buffers += io_concurrency * p.request_bytes
    return p.itemsize * tm * tn + panels + staging + codec_buffers


def shard_read_bytes(
    shards: tuple[int, int] | None,
    chunks: tuple[int, int],
    itemsize: int,
    panel: tuple[int, int],
    io_concurrency: int,
) -> int:
    """Bytes zarr's sharding codec holds while it reads a ``panel`` (rows, columns) of an
    input in ``shards`` of ``chunks``; 0 without shards.

    zarr reads up to ``io_concurrency`` shards at once (the shards the panel touches, at
    most); each holds its part of the panel (in whole inner chunks) three times: its
    stored bytes, the decoded block it returns, and the previous read's block, which
    glibc's allocator keeps in a thread's arena after zarr frees it (its mmap threshold
    grows to the largest block freed: measured 4-11 % over the live bytes without this
    term, 23 % under them with ``MALLOC_MMAP_THRESHOLD_`` fixed); and it decodes up to
    ``io_concurrency`` inner chunks at once, each beside its stored bytes.  Measured in
    benchmarks/task_memory.py (case ``sharded-zarr``).
    """
    if shards is None:
        return 0
    block, touched = itemsize, 1
    for extent, shard, chunk in zip(panel, shards, chunks, strict=True):
        block *= min(shard, round_up(extent, chunk))
        touched *= math.ceil(extent / shard) + (1 if extent % shard else 0)
    chunk_bytes = itemsize * chunks[0] * chunks[1]
    inner = 2 * min(io_concurrency, math.prod(shards) // math.prod(chunks)) * chunk_bytes
    return min(io_concurrency, touched) * (3 * block + inner)


def part_bytes(problem: Problem, tm: int, tn: int, tk: int, io_concurrency: int) -> int:
    """Projected peak bytes of one part of a split tile (:mod:`outofcore.splitk`).

    The tile loop over the part's panels (:func:`loop_bytes`; a part neither finishes
    nor writes output chunks), and the block of rows being kept: serialized once
    (``.npy``), and copied once more by stores that send a body as ``bytes``.
    """
    p = problem
    tm, tn = min(tm, p.m), min(tn, p.n)
    rows = write_block_rows(_out_grid(p, tm, tn)[0], tm)
    return loop_bytes(p, tm, tn, tk, io_concurrency) + 2 * p.itemsize * rows * tn


def reduction_bytes(problem: Problem, tm: int, tn: int, io_concurrency: int) -> int:
    """Projected peak bytes of the reduction of a split tile (:mod:`outofcore.splitk`).

    Per write block of rows, whatever the number of parts: the running sum, the part
    just read and a store's copy of it (three blocks in the accumulation dtype), the
    block's conversion and addend buffers, and the output codec buffers; an
    off-diagonal tile of a symmetric product also keeps its whole sum for the mirror.
    """
    p = problem
    tm, tn = min(tm, p.m), min(tn, p.n)
    out_rows, out_cols = _out_grid(p, tm, tn)
    rows = write_block_rows(out_rows, tm)
    sums = 3 * p.itemsize * rows * tn + p.block_extra * rows * tn
    out_chunk = p.written_itemsize * min(out_rows, tm) * min(out_cols, tn)
    writers = min(io_concurrency, math.ceil(rows / out_rows) * math.ceil(tn / out_cols))
    mirror = p.itemsize * tm * tn if p.symmetric else 0
    addend = io_concurrency * 2 * p.addend_chunk_bytes
    requests = io_concurrency * p.request_bytes
    return sums + writers * 2 * out_chunk + mirror + addend + requests


#: What each kind of task is called in messages (the keys of :func:`projections`).
KIND_NAMES = {"tile": "task", "part": "part of a split tile", "reduction": "reduction task"}


def projections(
    problem: Problem, tm: int, tn: int, tk: int, io_concurrency: int, splits: int = 1
) -> dict[str, int]:
    """Projected peak bytes of each kind of task a plan with these tiles runs, by kind:
    ``tile`` (a whole tile), or when k is split ``part`` (the tile loop over a part's
    panels, keeping its sum) and ``reduction``.  The plan is checked against the budget
    for each."""
    if splits == 1:
        return {"tile": task_bytes(problem, tm, tn, tk, io_concurrency)}
    return {
        "part": part_bytes(problem, tm, tn, tk, io_concurrency),
        "reduction": reduction_bytes(problem, tm, tn, io_concurrency),
    }


def _out_grid(p: Problem, tm: int, tn: int) -> tuple[int, int]:
    """Rows and columns of the output's write grid for tiles of ``tm×tn``."""
    return p.out_grid or ((tm, tn) if p.shard_tiles else (_output_chunk(tm), _output_chunk(tn)))


def write_block_rows(grid_rows: int, tile_rows: int) -> int:
    """Rows of a tile written at once: whole rows of output chunks (or shards).

    At least :data:`WRITE_BLOCK_ROWS` (rounded up to the output grid), at most the tile.
    """
    block = grid_rows * max(1, -(-WRITE_BLOCK_ROWS // grid_rows))
    return min(block, tile_rows)


def io_lower_bound(problem: Problem, budget_bytes: int) -> int:
    """``max(|A|+|B|, 2·m·n·k·w/√(M/w) − 2M)`` bytes for a budget of ``M`` bytes.

    ``|A|``, ``|B|`` (and an addend) at their stored sizes; the communication
    term counts words of the accumulation size held in ``M``, moved at the
    inputs' mean stored size.  A symmetric product: ``max(|X|, half the term)``.
    """
    p, budget = problem, budget_bytes
    wa, wb = p.read_sizes
    inputs = wa * p.m * p.k + wb * p.k * p.n + p.addend_itemsize * p.m * p.n
    words = budget / p.itemsize
    communication = (2 * p.m * p.n * p.k / math.sqrt(words) - 2 * words) * (wa + wb) / 2
    if p.symmetric:  # one array, read once at least; half the products to form
        inputs, communication = wa * p.m * p.k, communication / 2
    return int(max(inputs, communication))


def make_plan(
    problem: Problem,
    budget_bytes: int,
    workers: int = 1,
    *,
    tile: tuple[int, int] | None = None,
    tk: int | None = None,
    io_concurrency: int = DEFAULT_IO_CONCURRENCY,
    splits: int | None = None,
) -> Plan:
    """Choose tile sizes for ``problem`` within ``budget_bytes`` per worker.

    The tile shape and the split of k minimise the estimated time of the
    busiest worker, compute plus decoding plus partial tiles moved
    (:func:`_best_tile`): tiles as large as the budget allows, since that
    minimises bytes read, with whole-grid ceilings and the balance over
    ``workers`` counted.  When there are too few tiles to keep every worker
    busy, k is split (each tile's panels divided into ``splits`` parts whose
    partial sums a reduction adds) or, where that costs less, the tiles are
    made smaller.  Tile edges fall on A's row chunks, B's column chunks and
    the output grid; k-panel edges on the chunks of A's columns and B's rows
    where their common multiple fits.

    Parameters
    ----------
    problem
        Shapes, element size and chunk grids.
    budget_bytes
        Memory one task may use on a worker.
    workers
        Workers that will run tasks; the plan makes at least this many tiles
        when the shapes allow.
    tile, tk
        Force the tile shape or panel depth (tests and experiments); they are
        still checked against the chunk grids and the budget.
    io_concurrency
        Chunks decoded at once per task (sizes the codec buffers).
    splits
        Force the number of parts k is split into (1: no split); at most the
        number of panels.

    Raises
    ------
    BudgetError
        When even the smallest aligned tile does not fit, naming the bytes.
    """
    if workers < 1:
        raise InputError(f"workers = {workers}: need at least one worker")
    if io_concurrency < 1:
        raise InputError(f"io_concurrency = {io_concurrency}: need at least 1")
    p = problem
    row_unit = _unit(p.m, p.a_chunks[0], p.out_grid[0] if p.out_grid else None)
    col_unit = _unit(p.n, p.b_chunks[1], p.out_grid[1] if p.out_grid else None)
    if p.symmetric:  # square tiles, so that tile (i, j) mirrors onto tile (j, i)
        row_unit = col_unit = _unit(p.m, row_unit, col_unit)
    k_unit = _k_unit(p)

    if tk is None:
        tk = _choose_tk(
            p, k_unit, row_unit, col_unit, budget_bytes, io_concurrency, workers, splits
        )
    _check_multiple("tk", tk, k_unit, p.k)
    panel_count = math.ceil(p.k / min(tk, p.k))
    if splits is not None and not 1 <= splits <= panel_count:
        raise InputError(
            f"splits = {splits}: k = {p.k} in panels {min(tk, p.k)} deep can be split "
            f"into 1 to {panel_count} parts"
        )
    if tile is None:
        tm, tn, best_splits = _best_tile(
            p, row_unit, col_unit, tk, budget_bytes, io_concurrency, workers, splits
        )
        if best_splits == 1:
            tm, tn = _split_for_workers(p, tm, tn, row_unit, col_unit, workers)
    else:
        tm, tn = tile
        _check_multiple("tile rows", tm, row_unit, p.m)
        _check_multiple("tile columns", tn, col_unit, p.n)
        if p.symmetric and min(tm, p.m) != min(tn, p.n):
            raise InputError(f"tile = {tile}: a symmetric product needs square tiles")
    tm, tn, tk = min(tm, p.m), min(tn, p.n), min(tk, p.k)
    if splits is None:
        splits = _best_splits(p, tm, tn, tk, workers, budget_bytes, io_concurrency)
    for kind, projected in projections(p, tm, tn, tk, io_concurrency, splits).items():
        if projected > budget_bytes:
            what = KIND_NAMES[kind] + (f" (k split in {splits} parts)" if splits > 1 else "")
            raise BudgetError(
                f"a {tm}x{tn} tile with {tk}-deep panels needs {projected} bytes per {what} "
                f"({mib(projected)}), over the budget of {budget_bytes} bytes "
                f"({mib(budget_bytes)})"
            )
    out_chunks = p.out_grid or (_output_chunk(tm), _output_chunk(tn))
    return Plan(
        problem=p,
        budget_bytes=budget_bytes,
        workers=workers,
        tm=tm,
        tn=tn,
        tk=tk,
        out_chunks=out_chunks,
        io_concurrency=io_concurrency,
        panels=Panels(p.k, tk),
        tasks=Tiles(p.m, p.n, tm, tn, p.symmetric),
        splits=splits,
    )


def make_output_plan(
    problem: Problem,
    budget_bytes: int,
    workers: int = 1,
    *,
    tile: tuple[int, int] | None = None,
    tk: int | None = None,
    io_concurrency: int = DEFAULT_IO_CONCURRENCY,
    splits: int | None = None,
    shards: bool = True,
) -> Plan:
    """:func:`make_plan` for a job that creates its output: sharded when it is large.

    An output of more than :data:`SHARD_OVER_CHUNKS` chunks is planned with
    ``shard_tiles`` (one shard per tile, whose encoding the memory contract
    counts, so the tile may come out smaller) when ``shards`` and when a tile
    then holds more than one chunk (a shard of one chunk would not make the
    store hold fewer objects).  A problem with an ``out_grid`` (an existing
    output) is planned as it is.
    """
    options = {"tile": tile, "tk": tk, "io_concurrency": io_concurrency, "splits": splits}
    plan = make_plan(problem, budget_bytes, workers, **options)
    if not shards or problem.out_grid is not None or not is_large_output(plan):
        return plan
    sharded = make_plan(replace(problem, shard_tiles=True), budget_bytes, workers, **options)
    if sharded.out_shards == sharded.out_chunks:
        return plan
    return sharded


def is_large_output(plan: Plan) -> bool:
    """Whether the plan's output has more than :data:`SHARD_OVER_CHUNKS` chunks."""
    return plan.out_chunk_count > SHARD_OVER_CHUNKS


def _unit(extent: int, *grids: int | None) -> int:
    """Smallest tile edge step that keeps tile edges on every grid (capped at ``extent``)."""
    unit = math.lcm(*(g for g in grids if g))
    return min(unit, extent)


def _k_unit(p: Problem) -> int:
    """Panel depth step: a common multiple of both chunkings when one fits in k."""
    common = math.lcm(p.a_chunks[1], p.b_chunks[0])
    if common <= p.k:
        return common
    # The grids do not meet inside k: panels follow the coarser chunking and the
    # finer one is read twice where a panel edge cuts its chunk (bytes_read says so).
    return min(max(p.a_chunks[1], p.b_chunks[0]), p.k)


def _choose_tk(
    p: Problem,
    k_unit: int,
    row_unit: int,
    col_unit: int,
    budget: int,
    io_concurrency: int,
    workers: int,
    splits: int | None,
) -> int:
    """The panel depth: :data:`TARGET_TK` rounded to ``k_unit`` where the smallest tile
    fits ``budget`` with it (its parts and reduction too, when k is split).  Otherwise
    the tile the thinnest panels leave room for is kept, with the deepest panels
    (halving, in whole units) it still fits with: a large tile is not multiplied by the
    thinnest panels when deeper ones fit (each panel reads and writes the whole tile).
    A forced split of k leaves at least one panel a part."""
    if k_unit >= p.k:
        return p.k
    steps = max(1, TARGET_TK // k_unit)
    if splits:
        steps = max(1, min(steps, p.k // splits // k_unit))

    def fits(tm: int, tn: int, tk: int, parts: int) -> bool:
        return max(projections(p, tm, tn, tk, io_concurrency, parts).values()) <= budget

    if fits(row_unit, col_unit, steps * k_unit, splits or 1):
        return min(steps * k_unit, p.k)
    try:
        tm, tn, parts = _best_tile(
            p, row_unit, col_unit, k_unit, budget, io_concurrency, workers, splits
        )
    except BudgetError:
        return k_unit  # the plan refuses the budget with the thinnest panels' figures
    steps //= 2
    while steps > 1 and not fits(tm, tn, steps * k_unit, parts):
        steps //= 2
    return min(steps * k_unit, p.k)


def _check_multiple(name: str, value: int, unit: int, extent: int) -> None:
    if value < 1 or (value < extent and value % unit):
        raise InputError(
            f"{name} = {value} does not fall on the chunk grid: use a multiple of {unit} "
            f"(or {extent} or more for the whole dimension)"
        )


def _best_tile(
    p: Problem,
    row_unit: int,
    col_unit: int,
    tk: int,
    budget: int,
    io_concurrency: int,
    workers: int,
    splits: int | None = None,
) -> tuple[int, int, int]:
    """The aligned tile within ``budget``, and the split of k, that minimise the job time.

    For every count of tile rows ``R`` the tile height is the smallest aligned
    one giving ``R`` rows; its width is the widest that fits, or a narrower one
    with a few more columns (better balance over workers); when the tiles are
    too few for the workers, each split of k is tried too (``splits`` forces
    one).  Each candidate is scored by :func:`_estimate`.  Returns ``(tm, tn, splits)``.
    """
    tk = min(tk, p.k)

    def fits(tm: int, tn: int) -> bool:
        return task_bytes(p, min(tm, p.m), min(tn, p.n), tk, io_concurrency) <= budget

    if not fits(row_unit, col_unit):
        smallest = task_bytes(p, row_unit, col_unit, tk, io_concurrency)
        raise BudgetError(
            f"budget of {budget} bytes ({mib(budget)}) is too small: the smallest tile "
            f"the chunking allows ({row_unit}x{col_unit}, panels {tk} deep, "
            f"A chunks {p.a_chunks}, B chunks {p.b_chunks}) needs {smallest} bytes "
            f"({mib(smallest)}) per task; raise the budget or rechunk the inputs smaller"
        )
    best: tuple[float, int, int, int] | None = None
    for tm in _candidate_edges(p.m, row_unit):
        if not fits(tm, col_unit):
            continue
        widest_tn = widest(tm, col_unit, p.n, fits)
        first = math.ceil(p.n / widest_tn)
        widths = (
            [tm]
            if p.symmetric
            else [
                min(p.n, round_up(math.ceil(p.n / columns), col_unit))
                for columns in range(first, first + 4)
            ]
        )
        for tn in widths:
            if not fits(tm, tn):
                continue
            for parts in [splits] if splits else _split_candidates(p, tm, tn, tk, workers):
                if (
                    parts > 1
                    and max(projections(p, tm, tn, tk, io_concurrency, parts).values()) > budget
                ):
                    continue  # a part or its reduction would not fit
                score = _estimate(p, tm, tn, tk, workers, parts)
                if best is None or score < best[0]:
                    best = (score, tm, tn, parts)
    if best is None:  # the smallest tile fits, so some candidate does unless splits is forced
        raise BudgetError(
            f"no tile fits the budget of {budget} bytes ({mib(budget)})"
            + (f" with k split in {splits} parts (its parts and their reduction)" if splits else "")
        )
    return best[1], best[2], best[3]


def _estimate(p: Problem, tm: int, tn: int, tk: int, workers: int, splits: int) -> float:
    """Estimated time of a plan, in multiply-adds of its busiest worker.

    The compute of the busiest worker (tasks largest first to the least loaded
    one), plus decoding the bytes read at :data:`DECODE_COST_FMAS` an element
    and, for a split of k, writing and reading back the partial tiles at
    :data:`SCRATCH_COST_FMAS` an element, both shared by the workers that have
    a task.  Whole-grid ceilings are counted, so a ragged edge that adds a
    tile row or column costs what it reads.
    """
    panels = Panels(p.k, min(tk, p.k))
    rows, cols = math.ceil(p.m / tm), math.ceil(p.n / tn)
    decoded = cols * p.m * _touched(panels, p.a_chunks[1])
    if not p.symmetric:  # a symmetric product reads one panel per tile row and column
        decoded += rows * p.n * _touched(panels, p.b_chunks[0])
    scratch = 2 * splits * p.m * p.n if splits > 1 else 0
    busy = min(workers, tile_count(p, tm, tn) * splits)
    compute = busiest_worker(p, tm, tn, workers, splits) * p.k
    return compute + (DECODE_COST_FMAS * decoded + SCRATCH_COST_FMAS * scratch) / busy


def _split_candidates(p: Problem, tm: int, tn: int, tk: int, workers: int) -> range:
    """Splits of k worth trying for ``tm×tn`` tiles: 1, and when the tiles are fewer
    than twice the workers, up to four tasks a worker (at most one part a panel)."""
    tiles = tile_count(p, tm, tn)
    if workers == 1 or tiles >= 2 * workers:
        return range(1, 2)
    most = min(math.ceil(p.k / min(tk, p.k)), math.ceil(4 * workers / tiles))
    return range(1, most + 1)


def _best_splits(
    p: Problem, tm: int, tn: int, tk: int, workers: int, budget: int, io_concurrency: int
) -> int:
    """The split of k that :func:`_estimate` rates fastest for fixed ``tm×tn`` tiles,
    among those whose parts and reduction fit ``budget`` (no split: the tile fits)."""
    candidates = [
        parts
        for parts in _split_candidates(p, tm, tn, tk, workers)
        if parts == 1 or max(projections(p, tm, tn, tk, io_concurrency, parts).values()) <= budget
    ]
    return min(candidates, key=lambda parts: _estimate(p, tm, tn, tk, workers, parts))


def tile_parts(task: TileTask, panel_count: int, splits: int) -> tuple[PartialTask, ...]:
    """The ``splits`` parts of ``task``'s tile over ``panel_count`` panels, in the order
    a reduction adds them."""
    ranges = split_evenly(panel_count, splits)
    return tuple(
        PartialTask(tile=task, part=part, parts=splits, panels=ranges[part])
        for part in range(splits)
    )


def split_evenly(count: int, parts: int) -> tuple[tuple[int, int], ...]:
    """``[first, stop)`` ranges dividing ``count`` items into ``parts`` runs, as even as can be."""
    edges = [count * part // parts for part in range(parts + 1)]
    return tuple(zip(edges[:-1], edges[1:], strict=True))


def _candidate_edges(extent: int, unit: int) -> list[int]:
    """Aligned tile edges, one per count of tiles along ``extent`` (capped for speed)."""
    most = math.ceil(extent / unit)
    counts = list(range(1, min(most, MAX_EDGE_CANDIDATES) + 1))
    count = float(MAX_EDGE_CANDIDATES)
    while count < most:  # geometric beyond the first few hundred counts
        count *= 1.05
        counts.append(min(most, math.ceil(count)))
    edges = {min(extent, round_up(math.ceil(extent / c), unit)) for c in counts}
    return sorted(edges, reverse=True)


def widest(height: int, unit: int, extent: int, fits: Callable[[int, int], bool]) -> int:
    """Widest width beside ``height`` rows that ``fits``: ``extent``, a ``unit`` multiple, or 0.

    Binary search over the multiples of ``unit`` (exact when ``fits`` is
    monotone in the width); 0 when not even one ``unit`` fits.
    """
    if not fits(height, min(extent, unit)):
        return 0
    low, high = 1, math.ceil(extent / unit)  # in units; ``low`` fits
    while low < high:
        middle = (low + high + 1) // 2
        if fits(height, min(extent, middle * unit)):
            low = middle
        else:
            high = middle - 1
    return min(extent, low * unit)


def busiest_worker(p: Problem, tm: int, tn: int, workers: int, splits: int = 1) -> float:
    """Output elements (times k) of the busiest worker when ``tm×tn`` tiles go to ``workers``.

    With k split in ``splits`` parts every tile is that many tasks of
    ``1/splits`` of its work; a symmetric product has the tiles on and above
    the diagonal only, the diagonal ones at half the work (``syrk``).  Tasks
    are handed out largest first to the least loaded worker.  Beyond ``4 *
    workers`` tasks that is approximated, in constant time, by the mean share
    or one whole task, whichever is larger (the planner calls this for every
    candidate).  :mod:`scheduler.model` uses it too.
    """
    rows, cols = math.ceil(p.m / tm), math.ceil(p.n / tn)
    last_height = p.m - (rows - 1) * tm
    total = float(p.m * p.n)
    if p.symmetric:  # the upper triangle of tiles, the diagonal ones at half the work
        total = (total + (rows - 1) * tm * tm + last_height * last_height) / 2
    if workers == 1:
        return total
    if tile_count(p, tm, tn) * splits > 4 * workers:  # fine-grained: the mean, or one task
        return max(total / workers, tm * tn / splits)
    heights = [tm] * (rows - 1) + [last_height]
    widths = [tn] * (cols - 1) + [p.n - (cols - 1) * tn]
    areas = [
        heights[i] * widths[j] * (0.5 if i == j and p.symmetric else 1.0) / splits
        for i in range(rows)
        for j in range(i if p.symmetric else 0, cols)
        for _ in range(splits)
    ]
    loads = [0.0] * workers
    for area in sorted(areas, reverse=True):
        loads[loads.index(min(loads))] += area
    return float(max(loads))


def tile_count(p: Problem, tm: int, tn: int) -> int:
    """Tasks of ``tm×tn`` tiles: every tile, or those on and above the diagonal (symmetric)."""
    rows, cols = math.ceil(p.m / tm), math.ceil(p.n / tn)
    return rows * (rows + 1) // 2 if p.symmetric else rows * cols


def _split_for_workers(
    p: Problem, tm: int, tn: int, row_unit: int, col_unit: int, workers: int
) -> tuple[int, int]:
    """Shrink the tile until every worker gets one, while the grid allows (square stays square)."""
    while tile_count(p, tm, tn) < workers:
        rows_can = tm > row_unit
        cols_can = tn > col_unit
        if not (rows_can or cols_can):
            break
        if p.symmetric:
            tm = tn = max(row_unit, round_up(math.ceil(tm / 2), row_unit))
        elif rows_can and (tm >= tn or not cols_can):
            tm = max(row_unit, round_up(math.ceil(tm / 2), row_unit))
        else:
            tn = max(col_unit, round_up(math.ceil(tn / 2), col_unit))
    return tm, tn


def round_up(value: int, unit: int) -> int:
    """``value`` rounded up to a multiple of ``unit``."""
    return math.ceil(value / unit) * unit


def _output_chunk(tile_edge: int) -> int:
    """Largest divisor of the tile edge no bigger than ``MAX_OUTPUT_CHUNK``."""
    parts = math.ceil(tile_edge / MAX_OUTPUT_CHUNK)
    while tile_edge % parts:
        parts += 1
    return tile_edge // parts


def chunk_span(start: int, stop: int, chunk: int, extent: int) -> int:
    """Elements decoded along one axis to read ``[start, stop)`` with chunks of ``chunk``."""
    return min(math.ceil(stop / chunk) * chunk, extent) - (start // chunk) * chunk


def _touched(panels: Panels, chunk: int) -> int:
    """Elements along k that reading every panel decodes, given chunks of ``chunk``.

    The sum of :func:`chunk_span` over the panels, in closed form (floor sums): time
    independent of the number of panels and chunks.
    """
    k, tk, first, stop = panels.k, panels.tk, panels.start, panels.stop
    if first == stop:
        return 0
    count = -(-k // tk)
    inner = min(stop, count - 1)  # panels ending at (p + 1) * tk, not at k
    # Each panel decodes from the start of its first chunk to the end of its last one ...
    ends = chunk * floor_sum(max(0, inner - first), chunk, tk, tk * first + tk + chunk - 1)
    starts = chunk * floor_sum(stop - first, chunk, tk, tk * first)
    # ... where a last chunk is cut short by k, and the last panel ends at k itself.
    whole = k // chunk * chunk
    if k % chunk:
        short = max(0, inner - max(first, whole // tk))
        ends -= short * (whole + chunk - k)
    if stop == count:
        ends += k
    return ends - starts


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """``sum(floor((a*i + b) / m) for i in range(n))`` in ``O(log m)`` steps (``a, b >= 0``)."""
    total = 0
    while n > 0:
        if a >= m:
            total += n * (n - 1) // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        top = a * n + b
        if top < m:
            break
        n, b = divmod(top, m)
        m, a = a, m
    return total


def mib(nbytes: int) -> str:
    """``nbytes`` as ``"12.3 MiB"`` for messages (scheduler/ may not import dask's format_bytes)."""
    return f"{nbytes / 2**20:.1f} MiB"

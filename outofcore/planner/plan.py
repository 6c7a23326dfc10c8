"""The plan of ``C = A @ B``: its tiles, panels and tasks, as pure data.

Nothing here imports Dask, numba or zarr.  A plan is made from a
:class:`~outofcore.planner.problem.Problem` and a memory budget per task by the tile search
(:mod:`outofcore.planner.tiling`); it is checked against the budget before anything runs
and is the single source of truth for what the tasks do.  What a task holds is the
memory model's (:mod:`outofcore.planner.memory`), what the job reads the I/O model's
(:mod:`outofcore.planner.io_model`).  The tiles are :mod:`outofcore.planner.tiles`' (re-exported
here).  A stack of matrices (``Problem.batch``) runs every tile of every entry: the
tile, panels and memory per task are one matrix's, the job's totals (flops, bytes,
tasks, chunks) the stack's.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from outofcore.errors import InputError
from outofcore.planner.io_model import io_lower_bound, touched
from outofcore.planner.lazy import LazySequence
from outofcore.planner.memory import output_shards, projections
from outofcore.planner.problem import Problem
from outofcore.planner.tiles import Tiles, TileTask

__all__ = [
    "DEFAULT_IO_CONCURRENCY",
    "Panels",
    "PartialTask",
    "Plan",
    "TileTask",
    "Tiles",
    "split_evenly",
    "tile_parts",
]

DEFAULT_IO_CONCURRENCY = 2


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


class Panels(LazySequence[tuple[int, int]]):
    """The k-panels ``(k0, k1)`` of depth ``tk`` over ``k``, each made when it is asked for.

    A product with k = 10**12 has millions of panels: listing them would cost the
    planning what it must not (planning time independent of the chunk grid).  Holds
    positions ``start`` to ``stop`` of the whole list (a slice of it is one, too: the
    panels of one part of a split tile).  Equal to a tuple of the same panels.
    """

    __slots__ = ("k", "start", "stop", "tk")
    noun = "panel"

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
        k0 = (self.start + self._position(index)) * self.tk
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

    def _identity(self) -> tuple:  # uniform: the count and the ends fix every panel
        return (len(self), self[0] if self else None, self[-1] if self else None)

    def _arguments(self) -> tuple:
        return (self.k, self.tk, self.start, self.stop)

    def _item_of(self, value: Any) -> Any:
        return tuple(value)

    def __repr__(self) -> str:
        return f"Panels(k={self.k}, tk={self.tk}, start={self.start}, stop={self.stop})"


@dataclass(frozen=True)
class Plan:
    """Everything decided before the job runs; see the module docstring."""

    problem: Problem
    #: Memory one task may use (a worker's budget shared by its threads, one task each).
    task_budget_bytes: int
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

    def __post_init__(self) -> None:
        if self.tasks.batch != self.problem.batch:
            raise InputError(
                f"tiles of batch {self.tasks.batch} for a problem of batch {self.problem.batch}"
            )

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
        return 0 if self.splits == 1 else self.splits * p.entries * p.m * p.n * p.itemsize

    @property
    def tasks_per_matrix(self) -> int:
        """Tile tasks of one matrix (of each entry of a stack)."""
        return self.tasks.per_matrix

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
        product, whose diagonal tiles count ``syrk``'s work and mirrors none), times the
        entries of a stack."""
        p = self.problem
        return p.entries * (p.k * p.m * (p.m + 1) if p.symmetric else 2 * p.m * p.n * p.k)

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
        """Shard shape of the output the job creates, or None
        (:func:`outofcore.planner.memory.output_shards`)."""
        return output_shards(self.problem, self.tm, self.tn, self.out_chunks)

    @property
    def out_chunk_count(self) -> int:
        """Chunks of the output in the plan's chunking (inner chunks when sharded); a
        stack's chunks hold one entry each."""
        rows, cols = self.out_chunks
        p = self.problem
        return p.entries * math.ceil(p.m / rows) * math.ceil(p.n / cols)

    @property
    def bytes_read(self) -> int:
        """Predicted bytes of A and B read by all tasks together (and the addend's).

        Each entry of a stack reads its matrices as one matrix's tasks do, decoding
        whole chunks: an operand's chunk holding ``chunk_batch`` entries is read
        whole for each of them."""
        p = self.problem
        wa, wb = p.read_sizes
        a_reads = wa * self.tiles_across * p.m * touched(self.panels, p.a_chunks[1])
        a_reads *= p.entries * p.chunk_batch[0]
        if p.symmetric:  # tile (i, j), j > i, reads panels i and j; tile (i, i) one panel
            return a_reads
        b_reads = wb * self.tiles_down * p.n * touched(self.panels, p.b_chunks[0])
        b_reads *= p.entries * p.chunk_batch[1]
        return a_reads + b_reads + p.entries * p.addend_itemsize * p.m * p.n

    @property
    def bytes_written(self) -> int:
        p = self.problem
        return p.entries * p.written_itemsize * p.m * p.n

    @property
    def io_lower_bound(self) -> int:
        """No schedule with this budget reads fewer bytes (see the module docstring)."""
        return io_lower_bound(self.problem, self.task_budget_bytes)

    def summary(self) -> dict:
        """Return the plan as plain JSON-ready values (without the task list).

        A stack's adds ``batch``, ``tasks_per_matrix``, ``matrices`` (stored in A and B)
        and ``chunk_batch``; ``tiles`` and the totals count every entry."""
        summary = {
            "m": self.problem.m,
            "k": self.problem.k,
            "n": self.problem.n,
            "itemsize": self.problem.itemsize,
            "read_itemsizes": list(self.problem.read_sizes),
            "out_itemsize": self.problem.written_itemsize,
            "a_chunks": list(self.problem.a_chunks),
            "b_chunks": list(self.problem.b_chunks),
            "task_budget_bytes": self.task_budget_bytes,
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
        p = self.problem
        if p.batch is not None:
            summary["batch"] = p.batch
            summary["tasks_per_matrix"] = self.tasks_per_matrix
            summary["matrices"] = [p.a_matrices, p.b_matrices]
            summary["chunk_batch"] = list(p.chunk_batch)
        return summary


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

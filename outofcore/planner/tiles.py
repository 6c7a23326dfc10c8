"""The output tiles a plan's tasks compute: :class:`TileTask` and the lazy :class:`Tiles`.

Pure data, like :mod:`outofcore.planner.plan` (which re-exports both): nothing here imports
Dask, numba or zarr.  A stack of matrices (:attr:`outofcore.planner.problem.Problem.batch`)
has the tiles of every entry, entry by entry; its tasks' keys name the entry.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from outofcore.errors import InputError
from outofcore.planner.lazy import LazySequence


@dataclass(frozen=True)
class TileTask:
    """One output tile ``C[row0:row1, col0:col1]`` (of entry ``batch`` of a stack);
    a Dask task computes it."""

    index: int
    i: int
    j: int
    row0: int
    row1: int
    col0: int
    col1: int
    #: The entry of a stacked output (its position in the flattened leading
    #: dimensions); None: the output is one matrix.
    batch: int | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.row1 - self.row0, self.col1 - self.col0)

    @property
    def key(self) -> str:
        """Stable name of the tile, used for Dask keys and the job journal:
        ``tile-I-J``, or ``tile-I-J-bE`` for entry ``E`` of a stack."""
        if self.batch is None:
            return f"tile-{self.i}-{self.j}"
        return f"tile-{self.i}-{self.j}-b{self.batch}"


class Tiles(LazySequence[TileTask]):
    """The tile tasks of ``tm×tn`` tiles over an ``m×n`` output, each made when asked for.

    Row by row, alternating direction, so neighbours share an A or B panel; a
    symmetric product's tasks are the tiles on and above the diagonal.  With
    ``batch`` (a stack of that many matrices) the tasks are those of entry 0, then
    entry 1, and so on, each task naming its entry; ``index`` counts across the
    whole stack.  Planning an output of millions of tiles lists none of them
    (:attr:`Plan.flops` and the counts are closed forms); running a job lists those
    it runs.  Equal to a tuple of the same tasks.
    """

    __slots__ = ("across", "batch", "down", "m", "n", "symmetric", "tm", "tn")
    noun = "tile"

    def __init__(
        self,
        m: int,
        n: int,
        tm: int,
        tn: int,
        symmetric: bool = False,
        batch: int | None = None,
    ) -> None:
        if min(m, n, tm, tn) < 1:
            raise InputError(f"tiles of {tm}x{tn} over {m}x{n}: every size must be >= 1")
        if batch is not None and (isinstance(batch, bool) or batch < 1):
            raise InputError(f"batch = {batch!r}: need None (one matrix) or an int >= 1")
        self.m, self.n, self.tm, self.tn, self.symmetric = m, n, tm, tn, symmetric
        self.batch = batch
        self.down, self.across = -(-m // tm), -(-n // tn)

    def _row_start(self, i: int) -> int:
        """Position of the first task of tile row ``i`` within one matrix."""
        if not self.symmetric:
            return i * self.across
        return i * self.across - i * (i - 1) // 2

    @property
    def per_matrix(self) -> int:
        """Tasks of one matrix (of each entry of a stack)."""
        return self._row_start(self.down) if self.symmetric else self.down * self.across

    def __len__(self) -> int:
        return self.per_matrix * (1 if self.batch is None else self.batch)

    def _task(self, index: int, i: int, j: int, entry: int | None) -> TileTask:
        return TileTask(
            index=index,
            i=i,
            j=j,
            row0=i * self.tm,
            row1=min((i + 1) * self.tm, self.m),
            col0=j * self.tn,
            col1=min((j + 1) * self.tn, self.n),
            batch=entry,
        )

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[position] for position in range(*index.indices(len(self))))
        position = self._position(index)
        entry, local = divmod(position, self.per_matrix)
        low, high = 0, self.down - 1  # the last row starting at or before ``local``
        while low < high:
            middle = (low + high + 1) // 2
            if self._row_start(middle) <= local:
                low = middle
            else:
                high = middle - 1
        i, offset = low, local - self._row_start(low)
        first = i if self.symmetric else 0
        j = first + offset if i % 2 == 0 else self.across - 1 - offset
        return self._task(position, i, j, None if self.batch is None else entry)

    def __iter__(self) -> Iterator[TileTask]:
        index = 0
        for entry in [None] if self.batch is None else range(self.batch):
            for i in range(self.down):
                first = i if self.symmetric else 0
                columns = range(first, self.across)
                for j in columns if i % 2 == 0 else reversed(columns):
                    yield self._task(index, i, j, entry)
                    index += 1

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        """Position of the task ``value`` (at ``start`` or after, before ``stop``)."""
        found, entry = -1, getattr(value, "batch", None)
        if self.batch is None:  # a task of one matrix names no entry
            entry = 0 if entry is None else None
        elif not isinstance(entry, int) or not 0 <= entry < self.batch:
            entry = None
        if isinstance(value, TileTask) and entry is not None and 0 <= value.i < self.down:
            first = value.i if self.symmetric else 0
            if first <= value.j < self.across:
                offset = value.j - first if value.i % 2 == 0 else self.across - 1 - value.j
                found = entry * self.per_matrix + self._row_start(value.i) + offset
        if found in range(len(self))[start:stop] and self[found] == value:
            return found
        raise ValueError(f"{value!r} is not one of the tasks")

    def _identity(self) -> tuple:
        return (self.m, self.n, self.tm, self.tn, self.symmetric, self.batch)

    def _arguments(self) -> tuple:
        return self._identity()

    def __repr__(self) -> str:
        stack = "" if self.batch is None else f", {self.batch} matrices"
        return (
            f"Tiles({self.m}x{self.n} in {self.tm}x{self.tn}"
            f"{', symmetric' if self.symmetric else ''}{stack}: {len(self)} tasks)"
        )

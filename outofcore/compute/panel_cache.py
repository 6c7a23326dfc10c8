"""What a worker thread keeps between tile tasks of one job: its last panels, spare buffers.

A Dask worker thread that finishes a tile keeps the tile's last A and B panels
(and its other panel buffers) for the next task it runs.  The next tile of the
same row or column starts with the panel it shares instead of reading it
again (``docs/performance.md``, design choices 5 and 14).

Panel *contents* are reused only by a task of the same job: the identity of a
kept panel is the job's id (fresh for every run of ``run_job``, resumed runs
included), its dtype, its k-range and the rows or columns it covers.  A task
of another job, on the same cluster a minute or a day later, never reads
them, even when the inputs are at the same paths.  Buffers (not their
contents) may serve any later task whose engine, dtype and size match; the
rest are dropped before the task allocates its own, so a thread holds at most
the memory of the task it runs or ran last.

Each thread's kept panels sit in its state in the process's
:class:`~outofcore.compute.worker_context.WorkerContext` (taken and kept with its
``take_panels`` and ``keep_panels``), which also adds up what a whole worker
keeps and lets it go.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PanelIdentity:
    """What a kept panel pair holds: whose data, which k-range, which rows and columns."""

    job_id: str
    dtype: str
    #: The panel's k-range ``(k0, k1)``.
    panel: tuple[int, int]
    #: Rows of A (and of C) the A panel covers.
    rows: tuple[int, int]
    #: Columns of B (and of C) the B panel covers.
    cols: tuple[int, int]
    #: The batch indices into A and into B of the panels' matrices (a stack's; ``()``
    #: for an operand of one matrix).
    a_entry: tuple[int, ...] = ()
    b_entry: tuple[int, ...] = ()


@dataclass(frozen=True)
class KeptPanels:
    """The buffers a thread keeps after a task: its last A and B panels and the others."""

    identity: PanelIdentity
    backend: str
    a: np.ndarray
    b: np.ndarray
    others: tuple[np.ndarray, ...] = ()

    @property
    def buffers(self) -> tuple[np.ndarray, ...]:
        return (self.a, self.b, *self.others)

    @property
    def nbytes(self) -> int:
        return sum(buffer.nbytes for buffer in self.buffers)


@dataclass(frozen=True)
class Reuse:
    """What a task takes from the kept state: panel order, panels it skips, spare buffers."""

    #: Positions in the job's panel list, in the order the task reads them.
    order: tuple[int, ...]
    #: Kept A / B panel buffers holding the first panel of ``order`` (or None: read it).
    a: np.ndarray | None
    b: np.ndarray | None
    #: Other kept buffers of the same engine and dtype, free to be overwritten.
    spares: list[np.ndarray]

    def take(self, size: int) -> np.ndarray | None:
        """Remove and return a spare buffer of exactly ``size`` elements, or None."""
        for position, buffer in enumerate(self.spares):
            if buffer.size == size:
                return self.spares.pop(position)
        return None


def plan_reuse(
    kept: KeptPanels | None,
    *,
    job_id: str,
    dtype: np.dtype,
    backend: str,
    panels: tuple[tuple[int, int], ...],
    rows: tuple[int, int],
    cols: tuple[int, int],
    a_entry: tuple[int, ...] = (),
    b_entry: tuple[int, ...] = (),
) -> Reuse:
    """How a task of job ``job_id`` covering ``rows`` x ``cols`` uses ``kept``
    (``a_entry``, ``b_entry``: which matrices of A and of B, in a stack).

    Without a usable kept panel the order is 0, 1, ..., last.  With one (panel
    ``s`` of the same job and dtype, sharing the task's rows or its columns),
    ``s`` comes first, then the others moving away from it, so a row of tiles
    alternates direction along k and every tile after the first starts with
    the panel its predecessor ended on.  Kept buffers of another engine or
    dtype are left out of ``spares`` (the caller drops them before allocating).
    """
    count = len(panels)
    order: tuple[int, ...] = tuple(range(count))
    if kept is None:
        return Reuse(order=order, a=None, b=None, spares=[])
    dtype = np.dtype(dtype)
    same = kept.identity
    a = b = None
    if same.job_id == job_id and same.dtype == dtype.str and same.panel in panels:
        a = kept.a if (same.rows, same.a_entry) == (rows, a_entry) else None
        b = kept.b if (same.cols, same.b_entry) == (cols, b_entry) else None
    if a is not None or b is not None:
        s = panels.index(same.panel)
        order = (s, *range(s - 1, -1, -1), *range(s + 1, count))
    in_use = [x for x in (a, b) if x is not None]
    spares = [
        buffer
        for buffer in kept.buffers
        if kept.backend == backend
        and buffer.dtype == dtype
        and not any(buffer is used for used in in_use)
    ]
    return Reuse(order=order, a=a, b=b, spares=spares)


def in_dask_worker() -> bool:
    """Whether this code runs in a task on a Dask worker (whose threads keep state)."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return False
    try:
        distributed.get_worker()
    except ValueError:
        return False
    return True

"""The per-tile task: stream k-panels of A and B through an engine, write C_ij once.

This is the work of a tile task on a worker, whichever executor schedules it;
the task itself (skip a tile already recorded, compute it with
:func:`compute_tile`, record it in the journal) is
:func:`outofcore.jobs.recorded.compute_and_record`.
The next panel is decoded in a background thread while the engine multiplies
the current one; the tile is written as whole chunks of C, so running a task
twice (a retry, a lost worker) gives the same result.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import numpy as np

from outofcore.backends.blas import mirror_upper
from outofcore.backends.protocol import TileEngine
from outofcore.compute import panel_cache, panel_progress
from outofcore.compute.cpu_meter import CpuMeter
from outofcore.compute.tile_io import (
    addend_bytes,
    decoded_bytes,
    is_diagonal,
    largest_chunk_bytes,
    operand_entries,
    output_bytes,
    output_grid,
    write_mirror,
)
from outofcore.compute.tile_job import TileJob
from outofcore.compute.worker_context import worker_context
from outofcore.operands.centring import PanelSums
from outofcore.operands.reading import read_operand, reads_chunk_files
from outofcore.planner.memory import PANELS_IN_FLIGHT, write_block_rows
from outofcore.planner.plan import TileTask
from outofcore.storage import chunkfiles
from outofcore.storage.digests import Digests
from outofcore.storage.writing import write_region


@dataclass(frozen=True)
class TaskIO:
    """What a task's own work measured: the bytes it read and wrote, where its time went.

    The recorded-task wrapper (:func:`outofcore.jobs.recorded.run_recorded`) adds what it
    measures around every task alike (seconds, memory, worker) to make the task's
    :class:`~outofcore.jobs.recorded.TileResult`.
    """

    bytes_read: int
    bytes_written: int
    read_wait_seconds: float
    compute_seconds: float
    write_seconds: float
    #: Bytes of partial tiles written (a part of a split tile) or read back (its reduction).
    scratch_bytes: int = 0
    #: Parts of split tiles found damaged and computed again (a reduction).
    recomputed: tuple[str, ...] = ()
    #: Seconds to get the engine and the panel buffers (a GPU's context and pinned
    #: allocation on a worker's first task).
    setup_seconds: float = 0.0
    #: CPU seconds of reading and decoding panels, and of encoding and writing C
    #: (:class:`outofcore.compute.cpu_meter.CpuMeter`: every thread's share).
    decode_cpu_seconds: float = 0.0
    write_cpu_seconds: float = 0.0
    #: A GPU engine's kernel and copy time (CUDA events), and its first launch in the
    #: process (compile or cache load and launch); 0 on the CPU.
    kernel_seconds: float = 0.0
    copy_seconds: float = 0.0
    first_launch_seconds: float = 0.0


#: Where a task's finished rows go: ``sink(r0, rows)``, ``r0`` the first row in the tile.
RowSink = Callable[[int, np.ndarray], None]


def compute_tile(
    job: TileJob,
    task: TileTask,
    before_write: Callable[[], None] | None = None,
    sink: RowSink | None = None,
    keep_sums: Callable[[PanelSums], None] | None = None,
    written: Digests | None = None,
) -> TaskIO:
    """Compute ``C[task] = A[rows, :] @ B[:, cols]`` over ``job.panels``; write it as whole chunks.

    ``before_write`` is called before each block of the tile is written (it
    raises to stop the task: its job no longer owns the output).  ``sink``
    takes the finished rows instead of the output (a part of a split tile,
    :mod:`outofcore.jobs.splitk`); by default they are finished and written to
    ``job.c`` (:func:`write_finished_rows`).  Returns what it read, wrote and
    how long each part took.  A product centred from its panel sums
    (:mod:`outofcore.operands.centring`) corrects the rows it writes; with a ``sink`` the
    rows are left as summed and ``keep_sums`` takes the panels' sums.  ``written`` takes
    the digests of the output's objects the task wrote as chunk files
    (:func:`outofcore.storage.writing.write_region`), for the task's record.
    """
    context = worker_context()
    started = time.perf_counter()
    context.start_task(job.io_concurrency, chunkfiles.buffer_limit(largest_chunk_bytes(job)))
    engine = context.engine(job.backend)
    # GPU engines: device budget min(own, the job's) and panel depth; CPU: nothing.
    engine.configure(
        device_memory=job.device_memory, panel_depth=job.tk, tiles_in_flight=job.tiles_in_flight
    )
    panels = TilePanels.prepare(job, task, engine)
    setup = time.perf_counter() - started
    with (
        context.blas_threads(job.blas_threads),
        ThreadPoolExecutor(max_workers=2, thread_name_prefix="outofcore-read") as reader,
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="outofcore-write") as writer,
    ):
        run = _PanelLoop(job, task, engine, panels, reader, writer, before_write, sink)
        tile = run.multiply_and_write()
    if written is not None:
        written.update(run.written)
    if panels.sums is not None and sink is not None:
        if keep_sums is None:
            raise ValueError("a part of a product centred from its panel sums keeps its sums")
        keep_sums(panels.sums)
    panels.keep_for_next_task(job, task)
    return TaskIO(
        # The addend's region is read when the finished tile is written (not by a part).
        bytes_read=run.bytes_read + (addend_bytes(job, task) if sink is None else 0),
        bytes_written=tile.nbytes if sink is not None else output_bytes(job, task),
        read_wait_seconds=run.read_wait,
        compute_seconds=run.compute,
        write_seconds=run.write,
        setup_seconds=setup,
        decode_cpu_seconds=run.decode_cpu.seconds,
        write_cpu_seconds=run.write_cpu.seconds,
        **engine_timings(engine),
    )


def engine_timings(engine: TileEngine) -> dict[str, float]:
    """What ``engine`` measured of its last tile (a device's kernel and copy seconds, first
    launch), as :class:`TaskIO` fields; nothing for an engine that measures none."""
    return dict(engine.timings()) if engine.capabilities.timings else {}


@dataclass
class TilePanels:
    """The panel buffers of one task: two A and two B slots, in the order it reads panels.

    The previous task on this thread may have left its last panels: when this
    task of the same job needs one of them (same A rows or same B columns, e.g.
    the next tile of a row), it starts with it instead of reading it again
    (:func:`outofcore.compute.panel_cache.plan_reuse`).
    """

    job: TileJob
    task: TileTask
    #: Positions in the job's panel list, in the order this task reads them.
    order: tuple[int, ...]
    a: list[np.ndarray]
    b: list[np.ndarray]
    #: Whether slot 0 already holds the first panel of A / of B (kept by the last task).
    holds_a: bool
    holds_b: bool
    #: Buffers of A's and B's stored dtype that panels are decoded into before conversion.
    staged: dict[str, np.ndarray] = field(default_factory=dict)
    #: The sums over k of the panels read, for a product centred from them.
    sums: PanelSums | None = None
    #: Whether A's and B's parts of a panel are read at once (:meth:`load`).
    together: bool = False

    @classmethod
    def prepare(cls, job: TileJob, task: TileTask, engine: TileEngine) -> TilePanels:
        """Take what this thread kept that fits, then allocate the rest from ``engine``."""
        tm, tn = task.shape
        dtype = job.product.types.compute
        a_entry, b_entry = operand_entries(job, task)
        reuse = panel_cache.plan_reuse(
            worker_context().take_panels(),
            job_id=job.job_id,
            dtype=dtype,
            backend=job.backend,
            panels=job.panels,
            rows=(task.row0, task.row1),
            cols=(task.col0, task.col1),
            a_entry=a_entry,
            b_entry=b_entry,
        )
        a = [reuse.a] if reuse.a is not None else []
        b = [reuse.b] if reuse.b is not None else []
        # Other kept buffers are reused when their size is one this task needs
        # (fresh memory costs page faults, pinned memory an expensive allocation);
        # the rest are dropped before anything new is allocated.
        needs = [(a, tm * job.tk)] * (2 - len(a)) + [(b, job.tk * tn)] * (2 - len(b))
        taken = [reuse.take(size) for _, size in needs]
        reuse.spares.clear()  # unused kept buffers are freed here
        for (slots, size), buffer in zip(needs, taken, strict=True):
            slots.append(buffer if buffer is not None else engine.host_buffer(size, dtype))
        sums = PanelSums.zeros(task.shape, dtype) if job.product.panel_sums else None
        holds = (reuse.a is not None, reuse.b is not None)
        product = job.product
        together = reads_chunk_files(product.values("A")) and reads_chunk_files(product.values("B"))
        return cls(job, task, reuse.order, a, b, *holds, sums=sums, together=together)

    def _staging(self, operand: str, size: int) -> np.ndarray | None:
        """A buffer of ``operand``'s stored dtype to decode into before converting (or None).

        One per operand, made at its first use: the reader thread converts one panel at a time.
        """
        array = getattr(self.job.product, operand)
        if array.dtype == self.job.product.types.compute:
            return None
        kept = self.staged.get(operand)
        if kept is None or kept.size < size:
            kept = self.staged[operand] = np.empty(size, dtype=array.dtype)
        return kept

    def load(
        self,
        position: int,
        read: Callable[[], None] | None = None,
        alongside: Callable[[Callable[[], None]], Future] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Read the ``position``-th panel pair into its slot; return it and the bytes decoded.
        ``read`` is called once each operand's part is in (read, or held already), from
        the thread that read it.

        ``alongside(part)`` runs ``part`` in another thread: where both operands are read
        from their chunk files (:func:`~outofcore.operands.reading.reads_chunk_files`), A's
        part is read there while B's is read here, so that the chunk-file threads decode
        both panels' chunks together (A's last chunks no longer leave threads idle
        before B's first); their chunks in flight stay bounded by those threads."""
        job, task, product = self.job, self.task, self.job.product
        k0, k1 = job.panels[self.order[position]]
        slot = position % PANELS_IN_FLIGHT
        tm, tn = task.shape
        depth = k1 - k0
        a_panel = _panel_view(self.a[slot], (tm, depth), product.transpose_a)
        b_panel = _panel_view(self.b[slot], (depth, tn), product.transpose_b)
        read_a = not (position == 0 and self.holds_a)
        read_b = not (position == 0 and self.holds_b)
        if is_diagonal(job, task):  # X.T @ X or X @ X.T: one panel of X is both operands
            read_a, read_b = read_a and not product.transpose_a, read_b and product.transpose_a
        rows, cols, ks = slice(task.row0, task.row1), slice(task.col0, task.col1), slice(k0, k1)

        def part_a() -> None:
            staging = self._staging("a", tm * depth)
            a_matrix = product.matrix("A", task.batch)
            read_operand(
                product.values("A"), a_matrix, product.transpose_a, rows, ks, a_panel, staging,
                product.a_steps,
            )  # fmt: skip

        def part_b() -> None:
            staging = self._staging("b", depth * tn)
            b_matrix = product.matrix("B", task.batch)
            read_operand(
                product.values("B"), b_matrix, product.transpose_b, ks, cols, b_panel, staging,
                product.b_steps,
            )  # fmt: skip

        done = read or (lambda: None)
        if read_a and read_b and alongside is not None and self.together:
            a_read = alongside(lambda: (part_a(), done()))  # each part's step as it ends
            try:
                part_b()
            finally:  # A's part ends before this load does, whatever B's did
                wait([a_read])
            done()
            a_read.result()
        else:
            if read_a:
                part_a()
            done()
            if read_b:
                part_b()
            done()
        if is_diagonal(job, task):
            a_panel, b_panel = (b_panel.T, b_panel) if product.transpose_a else (a_panel, a_panel.T)
        if self.sums is not None:  # loads run one at a time, each panel once
            self.sums.add(a_panel, b_panel, same=is_diagonal(job, task))
        return a_panel, b_panel, decoded_bytes(job, task, k0, k1, read_a, read_b)

    def drop(self) -> None:
        """Let go of every buffer (the plan's memory contract before a whole-tile write)."""
        self.a.clear()
        self.b.clear()

    def keep_for_next_task(self, job: TileJob, task: TileTask) -> None:
        """In a Dask worker keep the last panels for this thread's next task; else free all."""
        in_worker = panel_cache.in_dask_worker()
        if self.a and self.b and in_worker and not is_diagonal(job, task):  # (one slot unread)
            last = (len(self.order) - 1) % PANELS_IN_FLIGHT
            last_a, last_b = self.a[last], self.b[last]
            others = [x for x in self.a + self.b if x is not last_a and x is not last_b]
            a_entry, b_entry = operand_entries(job, task)
            identity = panel_cache.PanelIdentity(
                job_id=job.job_id,
                dtype=job.product.types.compute.str,
                panel=job.panels[self.order[-1]],
                rows=(task.row0, task.row1),
                cols=(task.col0, task.col1),
                a_entry=a_entry,
                b_entry=b_entry,
            )
            worker_context().keep_panels(
                panel_cache.KeptPanels(identity, job.backend, last_a, last_b, tuple(others))
            )
        elif not in_worker:  # an in-process run frees everything when it returns
            worker_context().release_thread()
        self.drop()


def _panel_view(buffer: np.ndarray, shape: tuple[int, int], transposed: bool) -> np.ndarray:
    """The ``shape`` panel over a flat buffer: row-major, or for a transposed operand the
    transpose of a row-major ``shape[::-1]`` block (its stored layout, read as is)."""
    rows, cols = shape
    flat = buffer[: rows * cols]
    return flat.reshape(cols, rows).T if transposed else flat.reshape(rows, cols)


class _PanelLoop:
    """One tile's panel loop: read ahead, multiply, and write C (overlapped where it can).

    The next panel is decoded in the reader thread while the engine multiplies
    the current one.  On an engine with the ``row_blocks`` capability, the last panels are
    multiplied block by block of whole output-chunk rows and each finished
    block is written by the writer thread while BLAS works on the next one.
    """

    def __init__(
        self,
        job: TileJob,
        task: TileTask,
        engine: TileEngine,
        panels: TilePanels,
        reader: ThreadPoolExecutor,
        writer: ThreadPoolExecutor,
        before_write: Callable[[], None] | None,
        sink: RowSink | None = None,
    ) -> None:
        self.job, self.task, self.engine, self.panels = job, task, engine, panels
        self.reader, self.writer, self.before_write = reader, writer, before_write
        #: Digests of the output objects written (the default sink's and the mirror's).
        written: Digests = {}
        self.written = written
        # Closes over the dict, not over self: a cycle would keep the loop, and with it the
        # tile's panels, alive until the garbage collector runs (into the next task).
        self.sink = sink or (
            lambda r0, rows: written.update(write_finished_rows(job, task, r0, rows))
        )
        #: Whether this task finishes its tile (not a part of a split tile).
        self.finishes = sink is None
        #: Whether this task writes the mirror of its tile too (not a part of a split tile).
        self.mirror = sink is None and job.product.symmetric and task.i != task.j
        self.block = write_block_rows(output_grid(job)[0], task.shape[0])
        self.read_wait = self.compute = self.write = 0.0
        self.bytes_read = 0
        #: Steps of the tile's work done (each panel's A read, B read, product), told to
        #: the job's progress as they end (the reader and the loop each add theirs).
        self.steps = 0
        self._steps_lock = threading.Lock()
        self.decode_cpu, self.write_cpu = CpuMeter(), CpuMeter()

    def multiply_and_write(self) -> np.ndarray:
        """Run every panel through the engine, write the tile; return the tile written."""
        count = len(self.job.panels)
        diagonal = is_diagonal(self.job, self.task)
        capabilities = self.engine.capabilities
        gram = self.engine.accumulate_gram if diagonal and capabilities.gram else None
        streams = capabilities.row_blocks and not diagonal  # a diagonal tile is mirrored first
        streamed_from = count - (min(STREAMED_PANELS, count) if streams else 0)
        types = self.job.product.types
        self.engine.start_tile(self.task.shape, types.compute, types.limbs)
        pending = self.reader.submit(self._load, 0)
        streamed: list[tuple[np.ndarray, np.ndarray]] = []
        ahead: set[int] = set()  # row blocks the first streamed panel was added to early
        writes: list[Future] = []
        for s in range(count):
            t0 = time.perf_counter()
            a_panel, b_panel, nbytes = pending.result()
            t1 = time.perf_counter()
            if s + 1 < count:
                pending = self.reader.submit(self._load, s + 1)
            if gram is not None:
                gram(a_panel)  # the upper triangle only (syrk): half the work
            elif s < streamed_from:
                self.engine.accumulate(a_panel, b_panel)
            else:
                streamed.append((a_panel, b_panel))
            if s == streamed_from > 0 and s + 1 < count:
                ahead = self._add_while_waiting(a_panel, b_panel, pending)
            if streamed and s + 1 == count:
                writes = self._multiply_last_and_write(streamed, ahead)
            self.compute += time.perf_counter() - t1
            self.read_wait += t1 - t0
            self.bytes_read += nbytes
            self._step()
        t0 = time.perf_counter()
        tile = self.engine.finish_tile()
        if diagonal:
            mirror_upper(tile)  # exactly symmetric, whichever engine computed it
        self.compute += time.perf_counter() - t0
        t0 = time.perf_counter()
        if not writes:
            self.panels.drop()  # the plan's memory contract: panels are gone before the write
            for r0 in range(0, tile.shape[0], self.block):
                self._write_rows(r0, tile[r0 : r0 + self.block])
        for future in writes:
            future.result()
        if self.mirror:
            self.written.update(write_mirror(self.job, self.task, tile, self.before_write))
        self.write = time.perf_counter() - t0  # the part of writing not hidden behind compute
        return tile

    def _add_while_waiting(
        self, a_panel: np.ndarray, b_panel: np.ndarray, pending: Future
    ) -> set[int]:
        """Add the first streamed panel to row blocks until the next panel arrives.

        Rather than wait for the last panel, the loop multiplies this one into
        row blocks (the accumulator is not fresh: beta = 1).  Returns the row
        blocks done early, which the last step then leaves this panel out of.
        """
        ahead = set()
        for r0 in range(0, self.task.shape[0], self.block):
            if pending.done():
                break
            self.engine.accumulate_rows(r0, [(a_panel[r0 : r0 + self.block], b_panel)])
            ahead.add(r0)
        return ahead

    def _multiply_last_and_write(
        self, streamed: list[tuple[np.ndarray, np.ndarray]], ahead: set[int]
    ) -> list[Future]:
        """Multiply the last panels block of rows by block; queue each finished block's write."""
        writes = []
        for r0 in range(0, self.task.shape[0], self.block):
            parts = [
                (a[r0 : r0 + self.block], b)
                for position, (a, b) in enumerate(streamed)
                if not (position == 0 and r0 in ahead)
            ]
            rows = self.engine.accumulate_rows(r0, parts)
            writes.append(self.writer.submit(self._write_rows, r0, rows))
        return writes

    def _load(self, position: int) -> tuple[np.ndarray, np.ndarray, int]:
        """:meth:`TilePanels.load`, its CPU seconds measured, each operand read a step, A's
        part read alongside in the reader's second thread (one load runs at a time)."""
        with self.decode_cpu.span():
            return self.panels.load(position, self._step, self._alongside)

    def _alongside(self, part: Callable[[], None]) -> Future:
        """``part`` in the reader's other thread, its CPU seconds measured there."""

        def metered() -> None:
            with self.decode_cpu.span():
                part()

        return self.reader.submit(metered)

    def _step(self) -> None:
        """One more step of :attr:`steps` done, reported
        (:func:`outofcore.compute.panel_progress.report`: of ``STEPS_PER_PANEL`` a panel),
        so that the job's progress moves while a panel is read, not once it is multiplied."""
        with self._steps_lock:
            self.steps += 1
            done = self.steps
        total = STEPS_PER_PANEL * len(self.job.panels)
        panel_progress.report(self.job.job_id, self.task.key, done, total)

    def _write_rows(self, r0: int, rows: np.ndarray) -> None:
        """Hand finished ``rows`` at row ``r0`` of the tile to the sink (after the owner
        check), centred first where the panel sums centre them (every panel is read)."""
        if self.before_write is not None:
            self.before_write()
        with self.write_cpu.span():
            if self.panels.sums is not None and self.finishes:
                self.panels.sums.correct(r0, rows, self.job.product.k)
            self.sink(r0, rows)
            if self.finishes:
                self.engine.wrote(rows.nbytes)  # the timed device's modelled write


def write_finished_rows(job: TileJob, task: TileTask, r0: int, rows: np.ndarray) -> Digests:
    """Write accumulated ``rows`` at row ``r0`` of ``task``'s tile: scaled (in place), addend
    added, converted to the output dtype.  Returns what
    :func:`~outofcore.storage.writing.write_region` does: the digests of what it wrote."""
    origin = (task.row0 + r0, task.col0)
    values = job.product.finish_rows(rows, origin, task.batch) if job.product.scaled else rows
    out = job.product.matrix("out", task.batch)
    return write_region(job.c, out.start(*origin), out.view(values))


#: The steps of a panel the job's progress counts: its A read, its B read, its product.
STEPS_PER_PANEL = 3

#: The last panels of a tile are multiplied row block by row block, so that the
#: write of C overlaps their compute: all the panels in memory at once (two
#: overlap the write with a quarter of an 8-panel tile's compute, not an eighth).
STREAMED_PANELS = PANELS_IN_FLIGHT

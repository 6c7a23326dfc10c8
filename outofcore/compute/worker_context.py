"""The worker context: everything outofcore keeps in a process between tasks, in one place.

A Dask worker runs many tasks, of one job and then of the next, and a few things
outlive a task because making them again costs more than keeping them:

* each thread's **engines** (one per backend; a GPU engine holds device buffers and
  pinned host memory) and the **panels** its last task kept for the next tile of the
  same row or column (:mod:`outofcore.compute.panel_cache` decides what a task may reuse);
* the **buffer sets** of the chunk-file threads, kept by :mod:`outofcore.storage.chunk_io`
  (with the threads and the arrays' read paths, below the storage modules that use
  them): a task drops those too large for its job, and they count in what a worker
  keeps;
* zarr's **I/O settings** (requests in flight, decoding threads): zarr's own
  process-wide configuration, set by every task to its job's values
  (:meth:`WorkerContext.start_task`), compared with zarr's current values and never
  with what an earlier job set;
* **BLAS's threads**, also the process's (threadpoolctl), held at the running tasks'
  count from the first task's start to the last one's end
  (:meth:`WorkerContext.blas_threads`).

:func:`worker_context` is the process's one context.  Tasks of one job may use
what an earlier task left only as :mod:`outofcore.compute.panel_cache` allows (panel
contents only within one job); a task starts by dropping buffer sets too large for
its job, so what an earlier job left never sits on top of this job's budget.  An
in-process job (``client="sync"``) runs its tasks in the caller's thread and calls
:meth:`WorkerContext.release_thread` when it ends, well or not.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import zarr

from outofcore.backends import blas
from outofcore.backends.protocol import TileEngine
from outofcore.backends.registry import make_engine
from outofcore.compute.panel_cache import KeptPanels
from outofcore.runtime.cores import usable_cores
from outofcore.storage.chunk_io import chunk_io


@dataclass
class ThreadState:
    """One thread's engines (one per backend) and the panels its last task kept."""

    engines: dict[str, TileEngine] = field(default_factory=dict)
    panels: KeptPanels | None = None

    @property
    def kept_bytes(self) -> int:
        """Host bytes this thread keeps: its kept panels and its engines' accumulators."""
        panels = self.panels.nbytes if self.panels is not None else 0
        return panels + sum(engine.kept_bytes() for engine in list(self.engines.values()))


class WorkerContext:
    """What one process keeps between tasks (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: weakref.WeakKeyDictionary[threading.Thread, ThreadState] = (
            weakref.WeakKeyDictionary()
        )
        self._blas_requests: list[int] = []  # the BLAS threads of every running task
        self._blas_limits: Any = None  # threadpoolctl's limits while tasks run
        self._blas_applied: int | None = None  # None: as before the first task

    # -- a task's start -------------------------------------------------------------

    def start_task(self, io_concurrency: int, largest_buffer: int) -> None:
        """Set this process up for a task of a job: its I/O settings, its buffers.

        ``io_concurrency`` chunk requests in flight (many on object stores), decoded
        by at most one thread per core; buffer sets holding a buffer larger than
        ``largest_buffer`` bytes (the job's largest chunk, padded) are freed, so sets
        grown by an earlier job with larger chunks do not stay on top of this job's
        budget.
        """
        self.configure_io(io_concurrency)
        chunk_io().drop_buffers_over(largest_buffer)

    @contextlib.contextmanager
    def blas_threads(self, threads: int) -> Iterator[None]:
        """Run a task with BLAS at ``threads`` threads in this process.

        BLAS's limit belongs to the process, not a thread: two tasks at once in one
        process (a worker of several threads, or several workers in this process) that
        each set and then restored it undid each other's limit, and threadpoolctl (3.8)
        ignores every thread's limit but the first setter's.  BLAS then gave every call
        all the cores (a Gram product on two workers in one process: tasks 4.8 s
        instead of 2.6 s).  Here the first task to start sets the limit and the last
        to end restores what was there; while tasks asking for different counts run
        together, the smallest holds.
        """
        with self._lock:
            self._blas_requests.append(threads)
            try:
                self._set_blas(min(self._blas_requests))
            except BaseException:
                self._blas_requests.remove(threads)
                raise
        try:
            yield
        finally:
            with self._lock:
                self._blas_requests.remove(threads)
                self._set_blas(min(self._blas_requests) if self._blas_requests else None)

    def _set_blas(self, threads: int | None) -> None:
        """BLAS at ``threads`` threads, or (None) back to what it was before the first
        task; called with the lock held."""
        if threads == self._blas_applied:
            return
        from threadpoolctl import threadpool_limits  # noqa: PLC0415

        if threads is not None:  # SciPy's BLAS, which tasks call, too: load it to limit it
            blas.load()
        with _any_thread_sets_blas():
            if threads is None:
                self._blas_limits.restore_original_limits()
                self._blas_limits = None
            elif self._blas_limits is None:  # remembers what to restore
                self._blas_limits = threadpool_limits(limits=threads, user_api="blas")
            else:
                threadpool_limits(limits=threads, user_api="blas")
        self._blas_applied = threads

    @staticmethod
    def configure_io(io_concurrency: int) -> None:
        """Cap zarr's own concurrency in this process, so decoding leaves cores to BLAS.

        Compared with zarr's settings now, not with what was ever set: a worker that ran
        a local job (2 requests) and then an S3 one (16) must not keep the first value.
        """
        threads = min(io_concurrency, usable_cores())
        wanted = {"async.concurrency": io_concurrency, "threading.max_workers": threads}
        if any(zarr.config.get(key) != value for key, value in wanted.items()):
            zarr.config.set(wanted)

    # -- threads: engines and kept panels -------------------------------------------

    def thread(self) -> ThreadState:
        """The calling thread's state, created on first use."""
        thread = threading.current_thread()
        with self._lock:
            state = self._threads.get(thread)
            if state is None:
                state = self._threads[thread] = ThreadState()
            return state

    def engine(self, backend: str) -> TileEngine:
        """The engine for ``backend`` in this thread, created on first use and reused.

        An engine holds one tile at a time, and a worker with several threads runs
        several tiles at once: each thread has its own.
        """
        engines = self.thread().engines
        engine = engines.get(backend)
        if engine is None:
            engine = engines[backend] = make_engine(backend)
        return engine

    def take_panels(self) -> KeptPanels | None:
        """Remove and return what this thread's last task kept (None if nothing)."""
        state = self.thread()
        kept, state.panels = state.panels, None
        return kept

    def keep_panels(self, kept: KeptPanels) -> None:
        """Keep ``kept`` for this thread's next task."""
        self.thread().panels = kept

    # -- what is kept, and letting it go --------------------------------------------

    def kept_bytes(self) -> int:
        """Host bytes this process keeps between tasks: every thread's panels and engine
        accumulators, and the chunk-file buffer sets."""
        with self._lock:
            states = list(self._threads.values())
        return sum(state.kept_bytes for state in states) + chunk_io().buffer_bytes()

    def release_in_process(self) -> None:
        """Free what a job whose tasks ran in this process left: the calling thread's share
        (:meth:`release_thread`; its tasks ran in this thread) and that of threads that have
        ended (an in-process LocalCluster's worker threads, once it is closed)."""
        with self._lock:
            ended = [t for t in self._threads if not t.is_alive()]
            states = [self._threads.pop(t) for t in ended]
        for state in states:
            state.panels = None
            for engine in state.engines.values():
                engine.release()
        self.release_thread()

    def release_thread(self) -> None:
        """Free what the calling thread's tasks kept (its panels, its engines' buffers) and
        the chunk-file buffer sets: an in-process job's end."""
        state = self.thread()
        state.panels = None
        for engine in state.engines.values():
            engine.release()
        chunk_io().clear_buffers()


_CONTEXT = WorkerContext()


@contextlib.contextmanager
def _any_thread_sets_blas() -> Iterator[None]:
    """Let this thread's threadpoolctl calls change OpenBLAS's limit.

    threadpoolctl 3.8 lets one thread at a time set OpenBLAS's process-wide limit
    (the first to set it, while it lives, or until a ``with threadpool_limits``
    of it ends); every other thread's call does nothing.  The worker context makes
    its changes one at a time under its lock, so it clears that owner before and
    after each (``OpenBLASController.clear_controlling_thread``; older versions
    have no owner).
    """
    import threadpoolctl  # noqa: PLC0415

    controller = getattr(threadpoolctl, "OpenBLASController", None)
    clear = getattr(controller, "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)
    try:
        yield
    finally:
        if clear is not None:
            clear(force=True)


def worker_context() -> WorkerContext:
    """This process's :class:`WorkerContext`."""
    return _CONTEXT

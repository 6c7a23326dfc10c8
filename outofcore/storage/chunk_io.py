"""What reading and writing chunk files keep in a process: threads, buffer sets, read paths.

Chunk files are read and written by a pool of threads, each chunk with a set of
reusable buffers (an aligned file buffer, a chunk buffer): fresh buffers per
chunk or per panel would cost page faults (Dask workers return freed memory to
the system at once).  How an array is read (its chunk files' layout, or its
bounded twin for zarr) is remembered for the array while it is in use.  All
three outlive a task, so they are kept here, once per process
(:func:`chunk_io`); the storage modules (:mod:`outofcore.storage.chunkfiles`,
:mod:`outofcore.storage.writing`) use them, and the worker context
(:mod:`outofcore.compute.worker_context`) counts and frees the buffer sets between tasks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import numpy as np
import zarr

#: Threads for chunk files when zarr's configuration does not say.
CHUNK_FILE_THREADS = 2
#: Layouts remembered before the oldest are forgotten (arrays of earlier jobs).
LAYOUTS_KEPT = 64

#: A chunk file's reusable buffers by name (a file buffer, a chunk buffer).
BufferSet = dict[str, np.ndarray]


class ChunkIO:
    """The chunk-file threads, buffer sets and remembered read paths of one process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: dict[int, ThreadPoolExecutor] = {}
        self._buffer_sets: list[BufferSet] = []
        self._layouts: dict[int, tuple[Any, Any]] = {}
        #: CPU seconds of the chunk work each thread handed to the pool, by its ident.
        self._cpu_by_caller: dict[int, float] = {}

    # -- threads ------------------------------------------------------------------

    def chunk_pool(self) -> ThreadPoolExecutor:
        """This process's threads for chunk files: as many as zarr's ``threading.max_workers``
        (set per task by :meth:`outofcore.compute.worker_context.WorkerContext.start_task`), never
        the count an earlier job set; no pool is shut down under a running task."""
        threads = zarr.config.get("threading.max_workers") or CHUNK_FILE_THREADS
        with self._lock:
            pool = self._pools.get(threads)
            if pool is None:
                pool = self._pools[threads] = ThreadPoolExecutor(
                    max_workers=threads, thread_name_prefix="outofcore-chunks"
                )
            return pool

    def run_per_chunk(
        self,
        jobs: list[tuple[int, ...]],
        work: Callable[[tuple[int, ...], BufferSet], None],
    ) -> None:
        """``work(index, scratch)`` for every chunk index in ``jobs`` (one entry an axis),
        in the process's chunk-file threads.

        Each running call gets a ``scratch`` set of buffers kept here (one set per chunk
        read or written at once: at most the pool's thread count, each an aligned file
        buffer and a chunk buffer) that later chunks, reads and writes alike, reuse.
        """
        pool = self.chunk_pool()
        caller = threading.get_ident()

        def run(index: tuple[int, ...]) -> None:
            scratch = self.take_buffers()
            started = time.thread_time()
            try:
                work(index, scratch)
            finally:
                self.return_buffers(scratch)
                spent = time.thread_time() - started
                with self._lock:
                    self._cpu_by_caller[caller] = self._cpu_by_caller.get(caller, 0.0) + spent

        futures = [pool.submit(run, tuple(index)) for index in jobs]
        try:
            for future in futures:
                future.result()
        finally:  # a failed chunk: the others end (or are cancelled) before the caller goes on
            for future in futures:
                future.cancel()
            wait(futures)

    def caller_cpu_seconds(self) -> float:
        """CPU seconds the pool's threads have spent on chunks the calling thread asked for
        (:meth:`run_per_chunk`: decoding and encoding), over the process's life: take the
        difference over a span (:class:`outofcore.compute.cpu_meter.CpuMeter`)."""
        with self._lock:
            return self._cpu_by_caller.get(threading.get_ident(), 0.0)

    # -- buffer sets --------------------------------------------------------------

    def take_buffers(self) -> BufferSet:
        """A kept buffer set for one chunk being read or written (an empty one if none)."""
        with self._lock:
            return self._buffer_sets.pop() if self._buffer_sets else {}

    def return_buffers(self, buffers: BufferSet) -> None:
        """Keep ``buffers`` for the next chunk, panel or task."""
        with self._lock:
            self._buffer_sets.append(buffers)

    def drop_buffers_over(self, largest_buffer: int) -> None:
        """Free the kept buffer sets holding a buffer larger than ``largest_buffer`` bytes."""
        with self._lock:
            self._buffer_sets[:] = [
                buffers
                for buffers in self._buffer_sets
                if all(b.nbytes <= largest_buffer for b in buffers.values())
            ]

    def clear_buffers(self) -> None:
        """Free every kept buffer set."""
        with self._lock:
            self._buffer_sets.clear()

    def buffer_bytes(self) -> int:
        """Bytes of the buffer sets kept for the next chunk (those not in use)."""
        with self._lock:
            sets = list(self._buffer_sets)
        return sum(buffer.nbytes for buffers in sets for buffer in buffers.values())

    # -- read paths ---------------------------------------------------------------

    def layout(self, array: Any, make: Callable[[Any], Any]) -> Any:
        """``make(array)``, remembered for ``array`` (the very object) while it is in use."""
        key: Hashable = id(array)
        with self._lock:
            entry = self._layouts.get(key)
            if entry is not None and entry[0] is array:
                return entry[1]
        layout = make(array)
        with self._lock:
            if len(self._layouts) >= LAYOUTS_KEPT:
                self._layouts.clear()
            self._layouts[key] = (array, layout)
        return layout


_CHUNK_IO = ChunkIO()


def chunk_io() -> ChunkIO:
    """This process's :class:`ChunkIO`."""
    return _CHUNK_IO

"""CPU seconds a thread spends on a span of work, the chunk work it hands off included.

A panel's read runs in the task's reader thread, which hands each chunk to the
process's chunk-file threads (:meth:`outofcore.storage.chunk_io.ChunkIO.run_per_chunk`):
its CPU cost is the reader's own CPU time plus what those threads spent on its chunks.
The same holds for a block's write (encoding).  :class:`CpuMeter` adds both up over
each span measured; a task reports them as ``decode_cpu_seconds`` and
``write_cpu_seconds`` (:class:`outofcore.compute.tile.TaskIO`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from outofcore.storage.chunk_io import chunk_io


class CpuMeter:
    """CPU seconds added up over every span measured with :meth:`span` (any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds = 0.0

    @contextlib.contextmanager
    def span(self) -> Iterator[None]:
        """Measure the calling thread's CPU time in the block, and the chunk threads'
        time on the chunks it handed them."""
        io = chunk_io()
        own, handed = time.thread_time(), io.caller_cpu_seconds()
        try:
            yield
        finally:
            spent = time.thread_time() - own + io.caller_cpu_seconds() - handed
            with self._lock:
                self.seconds += spent

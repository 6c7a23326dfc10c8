"""The per-tile task: stream k-panels of A and B through an engine, write C_ij once.

This is the only code that runs on workers, whichever executor schedules it.
The next panel is decoded in a background thread while the engine multiplies
the current one; the tile is written as whole chunks of C, so running a task
twice (a retry, a lost worker) gives the same result.
"""

from __future__ import annotations

import os
import resource
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import zarr
from threadpoolctl import threadpool_limits

from outofcore.engines import TileEngine, make_engine
from scheduler.plan import PANELS_IN_FLIGHT, TileTask, chunk_span


@dataclass(frozen=True)
class TileJob:
    """What every task of one job shares: the arrays, the panels and how to compute."""

    a: zarr.Array
    b: zarr.Array
    c: zarr.Array
    panels: tuple[tuple[int, int], ...]
    tm: int
    tn: int
    tk: int
    backend: str
    blas_threads: int
    io_concurrency: int


@dataclass(frozen=True)
class TileResult:
    """What a task measured; the client adds these up for the job summary."""

    key: str
    bytes_read: int
    bytes_written: int
    read_wait_seconds: float
    compute_seconds: float
    write_seconds: float
    seconds: float
    peak_rss_bytes: int
    worker: str


_engines: dict[str, TileEngine] = {}
_engines_lock = threading.Lock()
_configured: set[int] = set()


def worker_engine(backend: str) -> TileEngine:
    """The engine for ``backend`` in this process, created on first use and reused."""
    with _engines_lock:
        engine = _engines.get(backend)
        if engine is None:
            engine = _engines[backend] = make_engine(backend)
        return engine


def configure_io(io_concurrency: int) -> None:
    """Cap zarr's own concurrency in this process, so decoding leaves cores to BLAS."""
    if io_concurrency in _configured:
        return
    zarr.config.set({"async.concurrency": io_concurrency, "threading.max_workers": io_concurrency})
    _configured.add(io_concurrency)


def compute_tile(job: TileJob, task: TileTask) -> TileResult:
    """Compute ``C[task] = A[rows, :] @ B[:, cols]`` and write it as whole chunks.

    Returns what it read, wrote and how long each part took.
    """
    started = time.perf_counter()
    configure_io(job.io_concurrency)
    engine = worker_engine(job.backend)
    tm, tn = task.shape
    dtype = np.dtype(job.a.dtype)
    a_buffers = [engine.host_buffer(tm * job.tk, dtype) for _ in range(PANELS_IN_FLIGHT)]
    b_buffers = [engine.host_buffer(job.tk * tn, dtype) for _ in range(PANELS_IN_FLIGHT)]

    def read_panel(s: int) -> tuple[np.ndarray, np.ndarray, int]:
        k0, k1 = job.panels[s]
        slot = s % PANELS_IN_FLIGHT
        a_panel = a_buffers[slot][: tm * (k1 - k0)].reshape(tm, k1 - k0)
        b_panel = b_buffers[slot][: (k1 - k0) * tn].reshape(k1 - k0, tn)
        _read_into(job.a, (slice(task.row0, task.row1), slice(k0, k1)), a_panel)
        _read_into(job.b, (slice(k0, k1), slice(task.col0, task.col1)), b_panel)
        return a_panel, b_panel, _decoded_bytes(job, task, k0, k1)

    read_wait = compute = 0.0
    bytes_read = 0
    with (
        threadpool_limits(limits=job.blas_threads, user_api="blas"),
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="outofcore-read") as reader,
    ):
        engine.start_tile((tm, tn), dtype)
        pending = reader.submit(read_panel, 0)
        for s in range(len(job.panels)):
            t0 = time.perf_counter()
            a_panel, b_panel, nbytes = pending.result()
            t1 = time.perf_counter()
            if s + 1 < len(job.panels):
                pending = reader.submit(read_panel, s + 1)
            engine.accumulate(a_panel, b_panel)
            compute += time.perf_counter() - t1
            read_wait += t1 - t0
            bytes_read += nbytes
        t0 = time.perf_counter()
        tile = engine.finish_tile()
        compute += time.perf_counter() - t0
    a_buffers.clear()  # the plan's memory contract: panels are gone before the write
    b_buffers.clear()

    t0 = time.perf_counter()
    job.c[task.row0 : task.row1, task.col0 : task.col1] = tile
    write = time.perf_counter() - t0
    return TileResult(
        key=task.key,
        bytes_read=bytes_read,
        bytes_written=tile.nbytes,
        read_wait_seconds=read_wait,
        compute_seconds=compute,
        write_seconds=write,
        seconds=time.perf_counter() - started,
        peak_rss_bytes=peak_rss_bytes(),
        worker=f"{socket.gethostname()}:{os.getpid()}",
    )


def _read_into(array: zarr.Array, selection: tuple[slice, slice], out: np.ndarray) -> None:
    buffer = zarr.core.buffer.default_buffer_prototype().nd_buffer.from_numpy_array(out)
    array.get_basic_selection(selection, out=buffer)


def _decoded_bytes(job: TileJob, task: TileTask, k0: int, k1: int) -> int:
    """Bytes of A and B decoded to read this panel (whole chunks along k)."""
    itemsize = np.dtype(job.a.dtype).itemsize
    a_k = chunk_span(k0, k1, job.a.chunks[1], job.a.shape[1])
    b_k = chunk_span(k0, k1, job.b.chunks[0], job.b.shape[0])
    rows, cols = task.shape
    return itemsize * (rows * a_k + b_k * cols)


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024

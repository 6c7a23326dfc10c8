"""A short probe of this machine: the rates the time model needs, measured.

``outofcore plan`` predicts a job on this machine from figures measured here
rather than from presets: BLAS ``sgemm`` (two sizes) and ``dgemm`` through the
job's own engine (:class:`~outofcore.backends.cpu.CpuEngine`, under ``threadpoolctl``
with the threads a LocalCluster worker gives BLAS); zstd and uncompressed chunk
files read and written through the job's own chunk-file path
(:func:`outofcore.storage.chunkfiles.read_region` /
:func:`~outofcore.storage.chunkfiles.write_region`
on small temporary arrays); how much of the decoding hides behind BLAS when a
reader thread decodes while BLAS multiplies, as in a tile task; the disk's
unbuffered read rate; and the share of a core a thread gets.  About 2 s on an idle 2-core
machine, 2 to 4 s on a busy one.

The figures are kept by :mod:`outofcore.machine.probe_cache` (keyed by the machine's identity),
and :mod:`outofcore.machine.prediction` turns them into the time model's machine.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

#: Bump when what the probe measures, or how, changes: older cache files are then ignored.
PROBE_VERSION = 1
#: The BLAS products timed, ``(m, k, n)``: a large one like a tile task's (8.6 GFLOP in
#: sgemm) and a small one (2.1 GFLOP; dgemm is timed at this size only).  A job's kernel
#: rate is taken between the two by the size of its products
#: (:func:`outofcore.machine.prediction.kernel_flops`).
GEMM_LARGE = (2048, 1024, 2048)
GEMM_SMALL = (1024, 1024, 1024)
#: The chunk-file array read and written: 16 MiB of float32, four 4 MiB chunks.
CODEC_SHAPE = (2048, 2048)
CODEC_CHUNKS = (1024, 1024)
#: The probe's rounds (every measurement once each) run for at least this long, and at
#: least :data:`MIN_ROUNDS` of them, after one untimed warm-up round.
PROBE_SECONDS = 1.0
MIN_ROUNDS = 3
#: Default seed of the probe's values (standard normal float32, like ``outofcore random``).
SEED = 20261123
#: Standard normal numbers drawn in each round to time a thread's share of a core (about
#: 15 ms of CPU: long enough to be preempted on a busy machine).
SHARE_DRAWS = 2**20


@dataclass(frozen=True)
class Figures:
    """What the probe measured with ``threads`` threads (one worker's share of the cores)."""

    #: When, in UTC (ISO 8601, seconds).
    measured: str
    #: BLAS threads and chunk-file threads the probe used: a LocalCluster worker's share.
    threads: int
    #: BLAS rates through :class:`~outofcore.backends.cpu.CpuEngine`, FLOP/s (2·m·k·n per
    #: product): sgemm at :data:`GEMM_LARGE` and :data:`GEMM_SMALL`, dgemm at the small.
    sgemm_flops: float
    sgemm_small_flops: float
    dgemm_small_flops: float
    #: zstd chunk files read and decoded (:func:`~outofcore.storage.chunkfiles.read_region`),
    #: decoded bytes/s; and encoded and written
    #: (:func:`~outofcore.storage.chunkfiles.write_region`).
    zstd_decode_bps: float
    zstd_encode_bps: float
    #: Uncompressed chunk files read and written (unbuffered where the file system allows).
    raw_read_bps: float
    raw_write_bps: float
    #: Unbuffered (``O_DIRECT``) reads of the temporary folder's disk, bytes/s; buffered
    #: (the page cache) where the file system refuses ``O_DIRECT`` (see ``disk_unbuffered``).
    disk_read_bps: float
    disk_unbuffered: bool
    #: Stored bytes per decoded byte of the probe's zstd chunks (random normal float32).
    compression: float
    #: The part of the decoding time hidden behind BLAS when a reader thread decodes the
    #: zstd array while the caller runs the small sgemm (as a tile task does): (alone +
    #: alone - together) over the shorter alone, from 0 (the cores add up) to 1
    #: (decoding costs BLAS nothing).
    overlap: float
    #: The share of a core one busy thread got: its CPU time over the time passed (1 on an
    #: idle machine); the job's start and its tasks' own costs are scaled by it
    #: (:func:`outofcore.machine.prediction.local_machine`).
    cpu_share: float
    #: Rounds of measurements timed.
    rounds: int
    #: The 1-minute load average when the probe started (None where the system has none).
    load: float | None
    #: How long the probe took, seconds.
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Figures:
        """The figures of a cache entry; ``ValueError`` when it is not one."""
        names = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or set(data) != names:
            raise ValueError(f"not probe figures: {data!r:.200}")
        figures = cls(**data)
        rates = (figures.sgemm_flops, figures.sgemm_small_flops, figures.dgemm_small_flops)
        rates += (figures.zstd_decode_bps, figures.zstd_encode_bps, figures.raw_read_bps)
        rates += (figures.raw_write_bps, figures.disk_read_bps, figures.compression)
        rates += (figures.cpu_share,)
        if not all(isinstance(x, int | float) and x > 0 for x in rates):
            raise ValueError(f"probe figures with a rate that is not positive: {data!r:.200}")
        if not (isinstance(figures.overlap, int | float) and 0 <= figures.overlap <= 1):
            raise ValueError(f"probe figures with an overlap outside [0, 1]: {data!r:.200}")
        return figures


# -- measuring ---------------------------------------------------------------------------


def probe(threads: int) -> Figures:
    """Measure this machine with ``threads`` BLAS and chunk-file threads (a few seconds).

    Every measurement runs once untimed (a warm-up: BLAS's threads started, the files
    written and in the page cache), then all of them in turn, round after round, for
    :data:`PROBE_SECONDS` and at least :data:`MIN_ROUNDS` rounds: each figure is its
    median round's, its rounds spread over the whole probe rather than one slice of it,
    so on a machine others use it is the share the probe usually got, not a burst's.  The chunk
    files live in a temporary folder (``tempfile``'s), removed at the end.
    """
    from threadpoolctl import threadpool_limits  # noqa: PLC0415

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="outofcore-probe-") as folder,
        _io_threads(threads),
        _released(),
        threadpool_limits(limits=threads, user_api="blas"),
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="outofcore-probe") as reader,
    ):
        measured, zstd, disk = _measurements(Path(folder), reader)
        for measurement in measured.values():
            measurement.run()  # the warm-up
        rounds, round_started = 0, time.perf_counter()
        while rounds < MIN_ROUNDS or time.perf_counter() - round_started < PROBE_SECONDS:
            for measurement in measured.values():
                measurement.timed()
            rounds += 1
        rate = {name: m.rate() for name, m in measured.items()}
        names = ("sgemm_small", "zstd_read", "together")
        hidden = statistics.median(
            (gemm + decode - both) / min(gemm, decode)
            for gemm, decode, both in zip(*(measured[x].times for x in names), strict=True)
        )
        compression = zstd.stored / zstd.nbytes
    return Figures(
        measured=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        threads=threads,
        sgemm_flops=rate["sgemm"],
        sgemm_small_flops=rate["sgemm_small"],
        dgemm_small_flops=rate["dgemm_small"],
        zstd_decode_bps=rate["zstd_read"],
        zstd_encode_bps=rate["zstd_write"],
        raw_read_bps=rate["raw_read"],
        raw_write_bps=rate["raw_write"],
        disk_read_bps=rate["disk"],
        disk_unbuffered=disk.unbuffered,
        compression=compression,
        overlap=min(1.0, max(0.0, hidden)),
        cpu_share=rate["share"],
        rounds=rounds,
        load=load,
        seconds=time.perf_counter() - started,
    )


class _Measurement:
    """One thing the probe times: ``run()`` does ``work`` units (flops, bytes) of it."""

    def __init__(self, run: Callable[[], object], work: float) -> None:
        self.run, self.work = run, work
        #: Seconds of each timed run (one per round).
        self.times: list[float] = []

    def timed(self) -> None:
        started = time.perf_counter()
        self.run()
        self.times.append(time.perf_counter() - started)

    def rate(self) -> float:
        """Work per second of the median round: a burst of other work in one round (a
        process starting elsewhere) does not move it."""
        return self.work / statistics.median(self.times)


def _measurements(
    folder: Path, reader: ThreadPoolExecutor
) -> tuple[dict[str, _Measurement], _ChunkFiles, _DiskRead]:
    """What a round times, in order: BLAS, chunk files written and read, BLAS while a
    reader thread decodes, the disk, and the share of a core one thread gets; and the
    zstd input and the disk's measurements by themselves (for their other figures)."""
    values = _values()
    zstd_read = _ChunkFiles(folder / "zstd-in.zarr", values, compressed=True)
    raw_read = _ChunkFiles(folder / "raw-in.zarr", values, compressed=False)
    zstd_write = _ChunkFiles(folder / "zstd-out.zarr", values, compressed=True)
    raw_write = _ChunkFiles(folder / "raw-out.zarr", values, compressed=False)
    zstd_read.write()  # the inputs: written once, then read in every round
    raw_read.write()
    small = _gemm(GEMM_SMALL, np.float32)

    def together() -> None:  # a tile task's loop: the next panel decoded while BLAS works
        pending = reader.submit(zstd_read.run)
        small.run()  # about as long as the decoding: their overlap is measured best
        pending.result()

    disk = _DiskRead(raw_read.files)
    measurements = {
        "sgemm": _gemm(GEMM_LARGE, np.float32),
        "sgemm_small": small,
        "dgemm_small": _gemm(GEMM_SMALL, np.float64),
        "zstd_write": _Measurement(zstd_write.write, values.nbytes),
        "raw_write": _Measurement(raw_write.write, values.nbytes),
        "zstd_read": zstd_read,
        "raw_read": raw_read,
        "together": _Measurement(together, 1.0),
        "disk": disk,
        "share": _CoreShare(),
    }
    return measurements, zstd_read, disk


def _gemm(shape: tuple[int, int, int], dtype: type) -> _Measurement:
    """``C += A @ B`` of ``shape`` ``(m, k, n)`` through the job's CPU engine, as a tile
    task multiplies its panels (under the caller's ``threadpool_limits``)."""
    from outofcore.backends.cpu import CpuEngine  # noqa: PLC0415

    m, k, n = shape
    rng = np.random.default_rng(SEED)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    engine = CpuEngine()
    engine.start_tile((m, n), np.dtype(dtype))
    return _Measurement(lambda: engine.accumulate(a, b), 2 * m * k * n)


@contextlib.contextmanager
def _io_threads(threads: int) -> Iterator[None]:
    """zarr's and the chunk files' thread count set as a task of a local job sets it
    (:meth:`~outofcore.compute.worker_context.WorkerContext.configure_io`), capped at ``threads``;
    zarr's settings as they were afterwards."""
    import zarr  # noqa: PLC0415

    from outofcore.compute.worker_context import worker_context  # noqa: PLC0415
    from outofcore.planner.plan import DEFAULT_IO_CONCURRENCY  # noqa: PLC0415

    keys = ("async.concurrency", "threading.max_workers")
    before = {key: zarr.config.get(key) for key in keys}
    worker_context().configure_io(min(DEFAULT_IO_CONCURRENCY, threads))
    try:
        yield
    finally:
        zarr.config.set(before)


@contextlib.contextmanager
def _released() -> Iterator[None]:
    """Free the chunk-file buffers the probe's reads and writes kept, as an in-process job
    does at its end (:meth:`~outofcore.compute.worker_context.WorkerContext.release_thread`)."""
    from outofcore.compute.worker_context import worker_context  # noqa: PLC0415

    try:
        yield
    finally:
        worker_context().release_thread()


def _values() -> np.ndarray:
    """The probe's array: standard normal float32 (as ``outofcore random`` writes)."""
    from outofcore.operands.random_values import random_values  # noqa: PLC0415

    return random_values(np.random.default_rng(SEED), CODEC_SHAPE, np.dtype(np.float32))


class _ChunkFiles(_Measurement):
    """A new zarr array of ``values`` (zarr's default zstd, or no compressor) written and
    read through the job's chunk-file path; a measurement of its reads."""

    def __init__(self, path: Path, values: np.ndarray, *, compressed: bool) -> None:
        import zarr  # noqa: PLC0415

        from outofcore.storage import chunkfiles  # noqa: PLC0415

        options = {} if compressed else {"compressors": None}
        array = zarr.create_array(
            str(path), shape=values.shape, chunks=CODEC_CHUNKS, dtype=values.dtype, **options
        )
        layout = chunkfiles.plain_layout(array)
        if layout is None:  # zarr changed its defaults: the probe cannot time the job's path
            raise RuntimeError(f"the probe's array {path} is not in the plain chunk-file layout")
        whole = (slice(0, values.shape[0]), slice(0, values.shape[1]))
        out = np.empty_like(values)
        super().__init__(lambda: chunkfiles.read_region(layout, whole, out), values.nbytes)
        self.write = lambda: chunkfiles.write_region(layout, (0, 0), values)
        self.nbytes = values.nbytes
        self.files = tuple(Path(layout.path(index)) for index in layout.chunk_grid(whole))

    @property
    def stored(self) -> int:
        """Bytes of the chunk files as stored."""
        return sum(f.stat().st_size for f in self.files)


class _DiskRead(_Measurement):
    """``files`` read unbuffered (``O_DIRECT``: from the disk, not the page cache); buffered
    where the file system refuses that (``unbuffered`` then False)."""

    def __init__(self, files: tuple[Path, ...]) -> None:
        from outofcore.storage.chunkfiles import DIRECT_ALIGNMENT  # noqa: PLC0415

        sizes = [f.stat().st_size for f in files]
        padded = -(-max(sizes) // DIRECT_ALIGNMENT) * DIRECT_ALIGNMENT
        raw = np.empty(padded + DIRECT_ALIGNMENT, dtype=np.uint8)
        offset = -raw.ctypes.data % DIRECT_ALIGNMENT
        self._buffer = memoryview(raw[offset : offset + padded])
        self._files = files
        self.unbuffered = bool(getattr(os, "O_DIRECT", 0))
        super().__init__(self._read_all, sum(sizes))

    def _read_all(self) -> None:
        flags = os.O_RDONLY | (os.O_DIRECT if self.unbuffered else 0)
        try:
            for f in self._files:
                fd = os.open(f, flags)
                try:
                    while os.readv(fd, [self._buffer]):
                        pass
                finally:
                    os.close(fd)
        except OSError:
            if not self.unbuffered:
                raise
            self.unbuffered = False  # a file system without O_DIRECT (tmpfs, ...)
            self._read_all()


class _CoreShare(_Measurement):
    """The share of a core one busy thread of this process gets: its CPU time over the
    time passed while it draws :data:`SHARE_DRAWS` random numbers (1 on an idle machine)."""

    def __init__(self) -> None:
        rng = np.random.default_rng(SEED)
        super().__init__(lambda: rng.standard_normal(SHARE_DRAWS), 1.0)
        #: The share of each timed run: its thread's CPU seconds over its seconds.
        self.shares: list[float] = []

    def timed(self) -> None:
        cpu = time.thread_time()
        super().timed()
        self.shares.append((time.thread_time() - cpu) / self.times[-1])

    def rate(self) -> float:
        return min(1.0, statistics.median(self.shares))

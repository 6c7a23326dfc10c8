"""A short probe of this machine: the rates the time model needs, measured and cached.

``outofcore plan`` predicts a job on this machine from figures measured here
rather than from presets: BLAS ``sgemm`` (two sizes) and ``dgemm`` through the
job's own engine (:class:`~outofcore.engines.CpuEngine`, under ``threadpoolctl``
with the threads a LocalCluster worker gives BLAS); zstd and uncompressed chunk
files read and written through the job's own chunk-file path
(:func:`outofcore.chunkfiles.read_region` / :func:`~outofcore.chunkfiles.write_region`
on small temporary arrays); how much of the decoding hides behind BLAS when a
reader thread decodes while BLAS multiplies, as in a tile task; the disk's
unbuffered read rate; and the share of a core a thread gets.  About 2 s on an idle 2-core
machine, 2 to 4 s on a busy one.

The figures are cached in ``machine.json`` under the user's cache folder
(``$XDG_CACHE_HOME/outofcore``, ``~/.cache/outofcore``; see :func:`cache_path`),
keyed by the machine's identity (:func:`machine_identity`: CPU model, cores,
memory, the BLAS libraries and versions, numpy, SciPy, numcodecs and Python):
figures measured under another identity, or a file that cannot be read, are
never used, and the probe runs again.  ``outofcore plan --reprobe`` measures
again whatever the cache holds (the figures are the share of the machine the
probe got: on a machine others use, they change with the load).

:func:`local_machine` turns the figures into a :class:`scheduler.model.Machine`
for one job (its workers, compute dtype, panel sizes and codecs): the model stays
arithmetic.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from outofcore import blas as blas_module
from scheduler.cluster import local_blas_threads
from scheduler.model import Machine, predict

if TYPE_CHECKING:
    from outofcore.product import Product
    from scheduler.plan import Plan

#: Bump when what the probe measures, or how, changes: older cache files are then ignored.
PROBE_VERSION = 1
#: The BLAS products timed, ``(m, k, n)``: a large one like a tile task's (8.6 GFLOP in
#: sgemm) and a small one (2.1 GFLOP; dgemm is timed at this size only).  A job's kernel
#: rate is taken between the two by the size of its products (:func:`kernel_flops`).
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
#: CPU seconds a job on a LocalCluster pays besides its streams: once (Dask's first
#: submission, the first BLAS call), once more where its workers are processes (each
#: one's first task imports zarr, SciPy's BLAS and outofcore's task modules; a single
#: CPU worker runs in the job's process, which has them), and per task (scheduling,
#: opening its arrays, its journal record).  Measured here (2026-11-24,
#: docs/performance.md) with a thread's whole core: a one-tile 512² job took 0.06 s with
#: the worker in the job's process and 0.3 s with a worker process, 32 such tiles 0.4 s
#: more; under load (a thread getting 0.4 to 0.55 of a core) the demo's job spent 0.5 to
#: 1 s besides its BLAS calls and read waits with a worker process.  Each is divided by
#: the probe's ``cpu_share``.
JOB_START_CPU_SECONDS = 0.05
WORKER_START_CPU_SECONDS = 0.25
TASK_CPU_SECONDS = 0.005
#: The cache file's name in :func:`cache_dir`.
CACHE_NAME = "machine.json"


@dataclass(frozen=True)
class Figures:
    """What the probe measured with ``threads`` threads (one worker's share of the cores)."""

    #: When, in UTC (ISO 8601, seconds).
    measured: str
    #: BLAS threads and chunk-file threads the probe used: a LocalCluster worker's share.
    threads: int
    #: BLAS rates through :class:`~outofcore.engines.CpuEngine`, FLOP/s (2·m·k·n per
    #: product): sgemm at :data:`GEMM_LARGE` and :data:`GEMM_SMALL`, dgemm at the small.
    sgemm_flops: float
    sgemm_small_flops: float
    dgemm_small_flops: float
    #: zstd chunk files read and decoded (:func:`~outofcore.chunkfiles.read_region`),
    #: decoded bytes/s; and encoded and written (:func:`~outofcore.chunkfiles.write_region`).
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
    #: (:func:`local_machine`).
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


# -- the machine's identity and the cache ------------------------------------------------


def machine_identity() -> dict[str, Any]:
    """What the figures belong to: a cache written under another identity is not used.

    The CPU model, logical and usable cores, a cgroup's CPU quota, physical memory, the
    BLAS libraries ``threadpoolctl`` sees once SciPy's BLAS (the one
    :mod:`outofcore.blas` calls) and numpy's are loaded, with their versions and
    kernels, and the versions of numpy, SciPy, numcodecs (zstd) and Python.  No host
    name: two machines alike in all of these run at the same rates.
    """
    import numcodecs  # noqa: PLC0415
    import psutil  # noqa: PLC0415
    import scipy  # noqa: PLC0415
    from threadpoolctl import threadpool_info  # noqa: PLC0415

    blas_module.load()  # SciPy's BLAS, without scipy.linalg's imports (0.27 s)
    blas = sorted(
        {
            f"{info.get('internal_api')} {info.get('version')} {info.get('architecture')} "
            f"{Path(info.get('filepath') or '').name}"
            for info in threadpool_info()
            if info.get("user_api") == "blas"
        }
    )
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "probe_version": PROBE_VERSION,
        "cpu": _cpu_model(),
        "machine": platform.machine(),
        "system": platform.system(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable,
        "cpu_quota": _cpu_quota(),
        "memory_bytes": int(psutil.virtual_memory().total),
        "blas": blas,
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "numcodecs": numcodecs.__version__,
        "python": platform.python_version(),
    }


def _cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name (Linux's ``/proc/cpuinfo``), else what ``platform`` says."""
    with contextlib.suppress(OSError):
        for line in Path(cpuinfo).read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Hardware", "cpu model"):
                return value.strip()
    return platform.processor() or platform.machine() or "unknown"


def _cpu_quota(path: str = "/sys/fs/cgroup/cpu.max") -> str | None:
    """A cgroup v2 CPU quota (``"200000 100000"``: two cores' time), None where none is read."""
    with contextlib.suppress(OSError):
        return Path(path).read_text().strip()
    return None


def cache_dir() -> Path:
    """The user's cache folder for outofcore.

    ``$XDG_CACHE_HOME/outofcore`` where that is set; else ``~/Library/Caches/outofcore``
    on macOS, ``%LOCALAPPDATA%\\outofcore\\Cache`` on Windows, ``~/.cache/outofcore``
    elsewhere (the platformdirs conventions, without the dependency).
    """
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "outofcore"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "outofcore"
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "outofcore" / "Cache"
    return Path.home() / ".cache" / "outofcore"


def cache_path() -> Path:
    """The cache file of the probe's figures (:func:`cache_dir` / ``machine.json``)."""
    return cache_dir() / CACHE_NAME


@dataclass(frozen=True)
class Probed:
    """Figures for one thread count, whether they were measured now, and the cache file."""

    figures: Figures
    #: True: measured by this call; False: read from the cache.
    fresh: bool
    cache: Path
    #: The machine's identity the figures are cached under (:func:`machine_identity`).
    identity: dict[str, Any]
    #: Why the probe ran (None: the cache was used).
    why: str | None = None

    @property
    def load_per_core(self) -> float | None:
        """The load average the probe started under, per usable core (None: unknown)."""
        if self.figures.load is None:
            return None
        cores = self.identity.get("usable_cpus") or self.identity.get("logical_cpus") or 1
        return self.figures.load / cores

    @property
    def under_load(self) -> bool:
        """Whether other work held the cores when the probe started (a load average over
        :data:`BUSY_LOAD_PER_CORE` per core): its rates are then the share it got, often
        well below the machine's, and predictions from them too slow."""
        per_core = self.load_per_core
        return per_core is not None and per_core > BUSY_LOAD_PER_CORE


#: A load average per usable core above which a probe is said to be taken under load.
BUSY_LOAD_PER_CORE = 0.5


def machine_figures(
    threads: int,
    *,
    reprobe: bool = False,
    path: Path | None = None,
    identity: dict[str, Any] | None = None,
    measure: Callable[[int], Figures] | None = None,
) -> Probed:
    """This machine's figures for ``threads`` threads: cached, or measured and cached.

    The cache file (``path``, default :func:`cache_path`) is used only when it was
    written under this ``identity`` (default :func:`machine_identity`) and holds figures
    for ``threads``; else (a missing, unreadable or corrupt file, another identity,
    ``reprobe``) ``measure(threads)`` (default :func:`probe`) runs and its figures
    replace the file's, or join them for another thread count of the same identity.
    A cache that cannot be written is not an error: the figures are still returned.
    """
    if threads < 1:
        raise ValueError(f"threads = {threads}: need at least 1")
    path = cache_path() if path is None else Path(path)
    identity = machine_identity() if identity is None else identity
    measure = probe if measure is None else measure
    entries, why = _read_cache(path, identity)
    key = str(threads)
    if not reprobe and key in entries:
        return Probed(entries[key], fresh=False, cache=path, identity=identity)
    if reprobe:
        why = "asked to measure again"
    elif why is None:
        why = f"no figures for {threads} thread(s) yet"
    figures = measure(threads)
    entries[key] = figures
    _write_cache(path, identity, entries)
    return Probed(figures, fresh=True, cache=path, identity=identity, why=why)


def cached_figures(
    threads: int, *, path: Path | None = None, identity: dict[str, Any] | None = None
) -> Figures | None:
    """This machine's cached figures for ``threads`` threads, or None: never measures
    (a job asks this for its own decisions, where a probe's seconds would be its cost)."""
    path = cache_path() if path is None else Path(path)
    entries, _ = _read_cache(path, machine_identity() if identity is None else identity)
    return entries.get(str(threads))


def _read_cache(path: Path, identity: dict[str, Any]) -> tuple[dict[str, Figures], str | None]:
    """The cache's figures by thread count, or none and why (missing, corrupt, another
    machine)."""
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return {}, "no cache yet"
    except (OSError, ValueError) as exc:
        return {}, f"the cache could not be read ({type(exc).__name__})"
    if not isinstance(document, dict) or not isinstance(document.get("figures"), dict):
        return {}, "the cache is not a probe's"
    if document.get("identity") != identity:
        return {}, "the cache was written under another machine identity"
    try:
        entries = {str(k): Figures.from_dict(v) for k, v in document["figures"].items()}
    except (TypeError, ValueError):
        return {}, "the cache holds figures that are not a probe's"
    return entries, None


def _write_cache(path: Path, identity: dict[str, Any], entries: dict[str, Figures]) -> None:
    """Write the cache atomically (a temporary file renamed over it); quietly give up on
    a folder that cannot be written."""
    document = {
        "identity": identity,
        "figures": {k: v.as_dict() for k, v in sorted(entries.items())},
    }
    partial = path.with_name(f"{path.name}.{uuid.uuid4().hex}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(document, indent=2) + "\n")
        os.replace(partial, path)
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink()


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
    from outofcore.engines import CpuEngine  # noqa: PLC0415

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
    (:meth:`~outofcore.worker_context.WorkerContext.configure_io`), capped at ``threads``;
    zarr's settings as they were afterwards."""
    import zarr  # noqa: PLC0415

    from outofcore.worker_context import worker_context  # noqa: PLC0415
    from scheduler.plan import DEFAULT_IO_CONCURRENCY  # noqa: PLC0415

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
    does at its end (:meth:`~outofcore.worker_context.WorkerContext.release_thread`)."""
    from outofcore.worker_context import worker_context  # noqa: PLC0415

    try:
        yield
    finally:
        worker_context().release_thread()


def _values() -> np.ndarray:
    """The probe's array: standard normal float32 (as ``outofcore random`` writes)."""
    from outofcore.generate import random_values  # noqa: PLC0415

    return random_values(np.random.default_rng(SEED), CODEC_SHAPE, np.dtype(np.float32))


class _ChunkFiles(_Measurement):
    """A new zarr array of ``values`` (zarr's default zstd, or no compressor) written and
    read through the job's chunk-file path; a measurement of its reads."""

    def __init__(self, path: Path, values: np.ndarray, *, compressed: bool) -> None:
        import zarr  # noqa: PLC0415

        from outofcore import chunkfiles  # noqa: PLC0415

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
        self.files = tuple(Path(layout.path(i, j)) for i, j in layout.chunk_grid(*whole))

    @property
    def stored(self) -> int:
        """Bytes of the chunk files as stored."""
        return sum(f.stat().st_size for f in self.files)


class _DiskRead(_Measurement):
    """``files`` read unbuffered (``O_DIRECT``: from the disk, not the page cache); buffered
    where the file system refuses that (``unbuffered`` then False)."""

    def __init__(self, files: tuple[Path, ...]) -> None:
        from outofcore.chunkfiles import DIRECT_ALIGNMENT  # noqa: PLC0415

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


# -- figures to a machine of the model ---------------------------------------------------


def kernel_flops(figures: Figures, compute_dtype: np.dtype, size: float) -> float:
    """The BLAS rate of a job whose products are about ``size`` on a side, FLOP/s.

    ``size`` is the geometric mean of a product's sides (``(m·k·n)^(1/3)``: a tile task
    multiplies ``tm x tk`` by ``tk x tn``).  sgemm's rate is taken between the small
    and the large product measured (:data:`GEMM_SMALL`, :data:`GEMM_LARGE`) by the
    size's logarithm, and no further than either: BLAS runs small products slower.
    float16 and int8 products are multiplied in float32.  float64 (and the exact
    integer products): dgemm's small rate, grown as sgemm's grows with the size.  A
    complex product counts ``2·m·n·k`` flops like a real one and does four real
    multiply-adds per complex one, so it runs at a quarter of the real rate.
    """
    small, large = np.log2(_side(GEMM_SMALL)), np.log2(_side(GEMM_LARGE))
    where = min(1.0, max(0.0, float((np.log2(max(size, 1.0)) - small) / (large - small))))
    growth = (figures.sgemm_flops / figures.sgemm_small_flops) ** where
    dtype = np.dtype(compute_dtype)
    small_rate = figures.sgemm_small_flops
    if dtype in (np.float64, np.complex128):
        small_rate = figures.dgemm_small_flops
    real = small_rate * growth
    return real / 4 if dtype.kind == "c" else real


def _side(shape: tuple[int, int, int]) -> float:
    """The geometric mean of a product's sides."""
    return float(np.prod(shape, dtype=np.float64)) ** (1 / 3)


def local_machine(
    figures: Figures,
    workers: int,
    compute_dtype: np.dtype,
    product_size: float,
    *,
    inputs_compressed: bool = True,
    output_compressed: bool = False,
    worker_processes: bool = True,
    name: str = "this machine",
) -> Machine:
    """The :class:`~scheduler.model.Machine` of ``workers`` LocalCluster workers here.

    Each worker gets ``figures.threads`` threads (measure with
    :func:`scheduler.cluster.local_blas_threads`); where the workers' threads outnumber
    the cores, each worker's rates are its share.
    The kernel rate is :func:`kernel_flops` for the plan's ``product_size`` (the
    geometric mean of its tiles' sides and panel depth).  Decoding is zstd's or the uncompressed
    read's (``inputs_compressed``), writing likewise (``output_compressed``); the part
    of them hidden behind BLAS is the probe's ``overlap``.  The job's start and each
    task's own cost are :data:`JOB_START_CPU_SECONDS` (and :data:`WORKER_START_CPU_SECONDS`
    with ``worker_processes``) and :data:`TASK_CPU_SECONDS` over the share of a core a
    thread got.
    """
    share = min(1.0, (os.cpu_count() or 1) / (workers * figures.threads))
    start = JOB_START_CPU_SECONDS + (WORKER_START_CPU_SECONDS if worker_processes else 0.0)
    decode = figures.zstd_decode_bps if inputs_compressed else figures.raw_read_bps
    encode = figures.zstd_encode_bps if output_compressed else figures.raw_write_bps
    return Machine(
        name=name,
        nodes=1,
        workers_per_node=workers,
        kernel_flops=kernel_flops(figures, compute_dtype, product_size) * share,
        decode_bps=decode * share,
        encode_bps=encode * share,
        scratch_write_bps=figures.raw_write_bps * share,  # partial tiles are raw .npy
        scratch_read_bps=figures.raw_read_bps * share,
        pcie_bps=None,
        disk_bps=figures.disk_read_bps,
        network_bps=None,
        compression=figures.compression if inputs_compressed else 1.0,
        overlap=figures.overlap,
        start_seconds=start / figures.cpu_share,
        task_seconds=TASK_CPU_SECONDS / figures.cpu_share,
    )


#: Figures of a slow machine, for a job's own decisions where this one has not been
#: probed yet (:func:`predicted_seconds`): about a third of the rates measured on this
#: project's 2-core EPYC (docs/performance.md), so that a job is rather thought long.
ASSUMED_FIGURES = Figures(
    measured="assumed",
    threads=1,
    sgemm_flops=20e9,
    sgemm_small_flops=15e9,
    dgemm_small_flops=7e9,
    zstd_decode_bps=250e6,
    zstd_encode_bps=120e6,
    raw_read_bps=700e6,
    raw_write_bps=350e6,
    disk_read_bps=500e6,
    disk_unbuffered=False,
    compression=0.92,
    overlap=0.0,
    cpu_share=1.0,
    rounds=0,
    load=None,
    seconds=0.0,
)


def plan_machine(
    figures: Figures, plan: Plan, product: Product, output_codec: str, worker_processes: bool
) -> Machine:
    """The :func:`local_machine` that runs ``plan`` of ``product`` here: its workers, its
    compute dtype and tile size, its inputs' codecs and ``output_codec``."""
    return local_machine(
        figures,
        plan.workers,
        product.types.compute,
        _side((plan.tm, plan.tk, plan.tn)),
        inputs_compressed=any(bool(x.compressors) for x in (product.a, product.b)),
        output_compressed=output_codec != "none",
        worker_processes=worker_processes,
    )


def predicted_seconds(
    plan: Plan, product: Product, output_codec: str, worker_processes: bool
) -> float:
    """The job's seconds the model predicts here, from the cached figures (never a probe:
    :func:`cached_figures`), or from :data:`ASSUMED_FIGURES` where there are none."""
    figures = cached_figures(local_blas_threads(plan.workers)) or ASSUMED_FIGURES
    machine = plan_machine(figures, plan, product, output_codec, worker_processes)
    return predict(plan, machine).seconds

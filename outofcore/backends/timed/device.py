"""The timed device: a GPU runtime on the host that only takes the time a GPU would.

:class:`TimedDevice` is a :class:`~outofcore.backends.device.runtime.DeviceRuntime` with
no GPU library.  Every copy and kernel queued on one of its streams is executed as a real
wait of its modelled time (:class:`TimedModel`: bytes / PCIe rate each way, ``2·m·n·k`` /
the kernel's FLOP/s, a transpose's bytes / the device memory's rate) on the stream's own
worker thread, and events order the streams as CUDA's do, so streams overlap as they do
on a GPU and a 2-core machine can measure a GPU schedule (design.md, "The device
pipeline and the timed device").

Like a GPU it has one engine per kind of work: copies host to device, copies device to
host, and the compute engine (kernels and transposes).  Work on different engines
overlaps; work on one engine runs one piece at a time, in the order it becomes ready.

**Two clocks.**  The device keeps a :class:`Ledger`: the modelled schedule of every piece
of work (its stream, engine, start and end in modelled seconds), computed when the work
is queued from the streams' order, the events waited for, the engines' occupation and
each host thread's own modelled time (which advances only when it waits for the device:
the host counts as infinitely fast).  The ledger is exact and does not depend on the
machine's load: tests and predictions read it.  The wall clock is the real waits, which
a busy host can only lengthen: benchmarks read that, with the host's real decoding and
writing beside it.

**Data.**  With ``arithmetic=True`` (the default) copies really copy and kernels really
multiply (numpy, in the inputs' dtype), so products are right; the real work is done
inside the wait and is not counted in the ledger (a numpy product slower than its modelled
kernel makes the wall time longer, never the ledger).  With ``arithmetic=False`` nothing
is touched: copies and kernels are waits only (for benchmarks of large products, where
the host's cores are for decoding), and pinned host memory a copy from the device lands
in is filled once with seeded noise (when the first such copy is queued), so a written
tile compresses like real data.  Device arrays are numpy arrays in host memory either way
(untouched ones take no memory: nor do pinned panels the decoder never wrote).
"""

from __future__ import annotations

import math
import queue
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from outofcore.errors import BackendError, InputError
from outofcore.planner.device_plan import kernel_block
from outofcore.planner.gpu_rates import DeviceRates

__all__ = ["ENGINES", "Ledger", "TimedDevice", "TimedEvent", "TimedModel", "TimedStream", "Work"]

#: The device's engines: copies host to device, device to host, and compute.
ENGINES = ("h2d", "d2h", "compute")
#: Bytes of the noise pattern pinned memory starts with (``arithmetic=False``): longer
#: than any zstd window, and no power of two, so chunks of a tile do not repeat it.
NOISE_BYTES = (16 << 20) + 3 * 4096


@dataclass(frozen=True)
class TimedModel:
    """The modelled device: what each copy and kernel costs.

    Parameters
    ----------
    kernel_flops
        The GEMM's FLOP/s by compute dtype name, counted ``2·m·n·k`` for every dtype
        (as :class:`~outofcore.planner.gpu_rates.DeviceRates` counts).
    pcie_bps
        Host-device copies of pinned memory, bytes/s each way.
    blocks
        The kernel's block tile ``(bm, bn, bk)`` by element size (device tiles are cut in
        its multiples).
    memory_bps
        The device memory's bytes/s: a transpose reads and writes each byte once.
    memory_bytes
        The device's memory: an H100's 80 GiB by default.  Host memory stands in for it,
        and only what the engine allocates (its device plan's buffers, not its budget) is
        taken; with ``arithmetic=False`` untouched device arrays take none.
    launch_seconds
        A fixed cost per kernel and transpose (0: none).
    write_bps
        The node's disk as the tasks write finished tiles, bytes/s (``math.inf``: no
        modelled write, only the real one): :meth:`TimedDevice.host_write` waits
        ``bytes / write_bps`` on the writing host thread, one write at a time.
    """

    kernel_flops: Mapping[str, float]
    pcie_bps: float
    blocks: Mapping[int, tuple[int, int, int]]
    memory_bps: float = 3.0e12
    memory_bytes: int = 80 << 30
    launch_seconds: float = 0.0
    write_bps: float = math.inf

    def __post_init__(self) -> None:
        rates = (self.pcie_bps, self.memory_bps, *self.kernel_flops.values())
        if not self.kernel_flops or min(rates) <= 0 or not all(map(math.isfinite, rates)):
            raise InputError(f"the timed device's rates must be positive and finite: {self}")
        if not self.write_bps > 0:  # inf: no modelled write
            raise InputError(f"the timed device's write rate must be positive: {self}")
        if self.memory_bytes < 1 or self.launch_seconds < 0:
            raise InputError(f"the timed device's memory and launch cost: {self}")

    @classmethod
    def from_rates(cls, rates: DeviceRates, **changes: Any) -> TimedModel:
        """The model of a backend's rates table (its kernel, PCIe and blocks), ``changes``
        applied (``kernel_flops={"float32": 1e9}``, ``memory_bytes=...``)."""
        model = cls(
            kernel_flops=dict(rates.kernel_flops), pcie_bps=rates.pcie_bps, blocks=rates.blocks
        )
        return replace(model, **changes)

    def kernel_seconds(self, m: int, n: int, k: int, dtype: np.dtype) -> float:
        """Modelled seconds of ``C (+)= A·B`` with ``A`` ``m×k`` and ``B`` ``k×n``."""
        name = np.dtype(dtype).name
        if name not in self.kernel_flops:
            raise BackendError(
                f"the timed device's kernel multiplies {', '.join(self.kernel_flops)}, not {name}"
            )
        return self.launch_seconds + 2.0 * m * n * k / self.kernel_flops[name]

    def copy_seconds(self, nbytes: int) -> float:
        """Modelled seconds of a copy of ``nbytes`` across PCIe (either way)."""
        return nbytes / self.pcie_bps

    def write_seconds(self, nbytes: int) -> float:
        """Modelled seconds of writing ``nbytes`` of a finished tile to the node's disk."""
        return nbytes / self.write_bps

    def transpose_seconds(self, nbytes: int) -> float:
        """Modelled seconds of a device transpose of ``nbytes``."""
        return self.launch_seconds + 2.0 * nbytes / self.memory_bps


@dataclass(frozen=True)
class Work:
    """One piece of the device's modelled schedule."""

    #: The stream it was queued on (0: the host, a modelled write).
    stream: int
    #: The engine it occupies (:data:`ENGINES`, or ``"write"``: the node's disk).
    engine: str
    #: What it was: ``"h2d"``, ``"h2d-rows"``, ``"d2h"``, ``"gemm"``, ``"transpose"``,
    #: ``"write"``.
    kind: str
    #: Its bytes (copies, transposes) or FLOPs (``2·m·n·k``, GEMMs).
    amount: float
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class Ledger:
    """The device's modelled schedule: every piece of work, in modelled seconds."""

    _work: list[Work] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, work: Work) -> None:
        with self._lock:
            self._work.append(work)

    def work(self) -> tuple[Work, ...]:
        """Every piece of work so far, in the order it was queued."""
        with self._lock:
            return tuple(self._work)

    def clear(self) -> None:
        """Forget the work so far (the clocks go on)."""
        with self._lock:
            self._work.clear()

    def span(self) -> float:
        """Modelled seconds from the first piece of work's start to the last one's end."""
        work = self.work()
        return max(w.end for w in work) - min(w.start for w in work) if work else 0.0

    def busy(self) -> dict[int, float]:
        """Modelled seconds of work by stream."""
        totals: dict[int, float] = {}
        for w in self.work():
            totals[w.stream] = totals.get(w.stream, 0.0) + w.seconds
        return totals

    def by_engine(self) -> dict[str, float]:
        """Modelled seconds of work by engine (``h2d``, ``d2h``, ``compute``, and ``write``
        where the model writes)."""
        totals = dict.fromkeys(ENGINES, 0.0)
        for w in self.work():
            totals[w.engine] = totals.get(w.engine, 0.0) + w.seconds
        return totals

    def overlap(self) -> float:
        """Modelled seconds of work done beside other work: the streams' busy seconds
        together less the span (0 where everything ran in series)."""
        return sum(self.busy().values()) - self.span()


class TimedStream:
    """An in-order queue of the timed device's work, run by its own worker thread."""

    def __init__(self, device: TimedDevice, index: int) -> None:
        self.index = index
        #: Modelled time at which the work queued so far ends.
        self.clock = 0.0
        self._device = device
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._waits: list[threading.Event] = []  # points the next piece of work waits for
        self._last: threading.Event | None = None  # set when the work queued so far is done
        worker = threading.Thread(
            target=_run_stream,
            args=(self._queue, device.errors),
            name=f"timed-device-stream-{index}",
            daemon=True,
        )
        worker.start()
        weakref.finalize(self, self._queue.put, None)  # the worker ends with its stream

    def synchronize(self) -> None:
        """Block until the work queued so far on this stream is done."""
        if self._last is not None:
            self._last.wait()
        self._device.host_reaches(self.clock)

    def __repr__(self) -> str:
        return f"TimedStream({self.index}, clock={self.clock:.6f})"


class TimedEvent:
    """A point in a timed stream's work, with CUDA's semantics."""

    def __init__(self, device: TimedDevice) -> None:
        self._device = device
        self._point: tuple[float, threading.Event | None] | None = None

    @property
    def time(self) -> float | None:
        """Modelled time of the last recorded point (None before the first record)."""
        return None if self._point is None else self._point[0]

    def record(self, stream: TimedStream) -> None:
        self._point = self._device.point(stream)

    def wait(self, stream: TimedStream) -> None:
        if self._point is not None:
            self._device.make_wait(stream, *self._point)

    def synchronize(self) -> None:
        if self._point is None:
            return
        moment, done = self._point
        if done is not None:
            done.wait()
        self._device.host_reaches(moment)

    def elapsed_time(self, end: TimedEvent) -> float:
        """Modelled milliseconds from this event's point to ``end``'s (-1 if one of them
        was never recorded)."""
        if self.time is None or end.time is None:
            return -1.0
        return (end.time - self.time) * 1000.0


class TimedDevice:
    """A device that executes each copy and kernel as a real wait of its modelled time.

    Parameters
    ----------
    model
        What each copy and kernel costs (:class:`TimedModel`).
    arithmetic
        True: copies copy and kernels multiply (numpy), so products are right; False:
        nothing is touched (waits only), pinned memory starts as seeded noise.

    Attributes
    ----------
    ledger
        The modelled schedule of the work queued so far (:class:`Ledger`).
    errors
        Exceptions raised by work on the streams: every synchronisation after one raises
        BackendError (the device is broken, as a GPU after a failed kernel).
    """

    name = "timed device"

    def __init__(self, model: TimedModel, *, arithmetic: bool = True) -> None:
        self.model = model
        self.arithmetic = arithmetic
        self.ledger = Ledger()
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._free = dict.fromkeys(ENGINES, 0.0)  # modelled time each engine is free again
        self._engine_locks = {engine: threading.Lock() for engine in ENGINES}
        self._disk = threading.Lock()  # one modelled write at a time
        self._disk_free = 0.0  # modelled time the disk is free again
        self._hosts = threading.local()  # each host thread's modelled time
        self._streams = 0
        self._noise: np.ndarray | None = None
        #: arithmetic=False: pinned allocations not yet filled with noise, by id.
        self._unfilled: dict[int, weakref.ref] = {}

    # -- clocks ------------------------------------------------------------------------------
    def host_time(self) -> float:
        """The calling host thread's modelled time: the latest point it waited for."""
        return getattr(self._hosts, "clock", 0.0)

    def host_reaches(self, moment: float) -> None:
        """The calling host thread has waited for the device up to ``moment``."""
        if self.errors:
            raise BackendError(f"work on the timed device failed: {self.errors[0]!r}")
        self._hosts.clock = max(self.host_time(), moment)

    def point(self, stream: TimedStream) -> tuple[float, threading.Event | None]:
        """The point now reached by the work queued on ``stream``: its modelled time and
        what is set when it is reached in wall time."""
        with self._lock:
            return max(stream.clock, self.host_time()), stream._last

    def make_wait(self, stream: TimedStream, moment: float, done: threading.Event | None) -> None:
        """Make the work queued later on ``stream`` wait for a point (:meth:`point`)."""
        with self._lock:
            stream.clock = max(stream.clock, moment)
            if done is not None:
                stream._waits.append(done)

    def queue_work(
        self,
        stream: TimedStream,
        engine: str,
        kind: str,
        amount: float,
        seconds: float,
        work: Callable[[], object] | None,
    ) -> None:
        """Queue ``work`` (None: nothing to do but wait) taking ``seconds`` on ``engine``."""
        with self._lock:
            start = max(stream.clock, self.host_time(), self._free[engine])
            end = start + seconds
            stream.clock = self._free[engine] = end
            self.ledger.add(Work(stream.index, engine, kind, amount, start, end))
            waits, stream._waits = stream._waits, []
            done = stream._last = threading.Event()
        stream._queue.put((waits, self._engine_locks[engine], seconds, work, done))

    def host_write(self, nbytes: int) -> None:
        """The calling host thread writes ``nbytes`` of a finished tile: a real wait of the
        model's write time (none where ``write_bps`` is infinite), one write at a time (the
        node's disk), in the ledger as ``write`` work on stream 0 from the thread's time."""
        seconds = self.model.write_seconds(nbytes)
        if seconds <= 0:
            return
        with self._disk:
            with self._lock:
                start = max(self.host_time(), self._disk_free)
                self._disk_free = end = start + seconds
                self.ledger.add(Work(0, "write", "write", nbytes, start, end))
            time.sleep(seconds)
        self._hosts.clock = end

    # -- the runtime -------------------------------------------------------------------------
    def stream(self) -> TimedStream:
        with self._lock:
            self._streams += 1
            index = self._streams
        return TimedStream(self, index)

    def event(self) -> TimedEvent:
        return TimedEvent(self)

    def pinned(self, nbytes: int) -> np.ndarray:
        out = np.empty(nbytes, dtype=np.uint8)
        if not self.arithmetic:
            with self._lock:
                self._unfilled[id(out)] = weakref.ref(out)
        return out

    def device(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, dtype=np.uint8)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.empty(shape, dtype=dtype)

    def to_device(self, src: np.ndarray, dst: np.ndarray, stream: TimedStream) -> None:
        self._copy("h2d", "h2d", src, dst, stream)

    def rows_to_device(self, src: np.ndarray, dst: np.ndarray, stream: TimedStream) -> None:
        self._copy("h2d", "h2d-rows", src, dst, stream)

    def to_host(self, src: np.ndarray, dst: np.ndarray, stream: TimedStream) -> None:
        if not self.arithmetic:
            self._fill_once(dst)
        self._copy("d2h", "d2h", src, dst, stream)

    def transpose(self, src: np.ndarray, dst: np.ndarray, stream: TimedStream) -> None:
        r, c = src.shape
        if dst.shape != (c, r):
            raise InputError(f"transpose of a {r}x{c} array into {dst.shape}: need ({c}, {r})")
        work = (lambda: np.copyto(dst, src.T)) if self.arithmetic else None
        seconds = self.model.transpose_seconds(src.nbytes)
        self.queue_work(stream, "compute", "transpose", src.nbytes, seconds, work)

    def gemm(
        self, a: np.ndarray, b: np.ndarray, c: np.ndarray, accumulate: bool, stream: TimedStream
    ) -> None:
        (m, k), n = a.shape, b.shape[1]
        seconds = self.model.kernel_seconds(m, n, k, c.dtype)
        work = None
        if self.arithmetic and accumulate:
            work = lambda: np.add(c, a @ b, out=c)  # noqa: E731
        elif self.arithmetic:
            work = lambda: np.matmul(a, b, out=c)  # noqa: E731
        self.queue_work(stream, "compute", "gemm", 2.0 * m * n * k, seconds, work)

    def block(self, dtype: np.dtype) -> tuple[int, int, int]:
        return kernel_block(np.dtype(dtype).itemsize, self.model.blocks)

    def free_bytes(self) -> int:
        return self.model.memory_bytes

    def device_key(self) -> int:
        return id(self)

    # -- internals ---------------------------------------------------------------------------
    def _copy(
        self, engine: str, kind: str, src: np.ndarray, dst: np.ndarray, stream: TimedStream
    ) -> None:
        if src.size != dst.size:
            raise InputError(f"a copy of {src.shape} into {dst.shape}: the sizes differ")
        work = (lambda: np.copyto(dst, src.reshape(dst.shape))) if self.arithmetic else None
        self.queue_work(stream, engine, kind, src.nbytes, self.model.copy_seconds(src.nbytes), work)

    def _fill_once(self, dst: np.ndarray) -> None:
        """Fill the pinned allocation ``dst`` views with noise, unless it was already."""
        allocation = _allocation(dst)
        with self._lock:
            ref = self._unfilled.pop(id(allocation), None)
        if ref is not None and ref() is allocation:
            self._fill_noise(allocation)

    def _fill_noise(self, out: np.ndarray) -> None:
        """Fill ``out`` with the device's seeded noise (standard normal float32 values)."""
        if self._noise is None:
            values = np.random.default_rng(7).standard_normal(NOISE_BYTES // 4, np.float32)
            self._noise = values.view(np.uint8)
        for start in range(0, out.size, self._noise.size):
            part = out[start : start + self._noise.size]
            part[...] = self._noise[: part.size]


def _allocation(view: np.ndarray) -> np.ndarray | None:
    """The array ``view`` is a view of, at the end of its chain of bases (through the
    ``memoryview`` a pinned pool hands blocks out by); None where it ends elsewhere."""
    base: Any = view
    while True:
        if isinstance(base, memoryview):
            base = base.obj
        elif isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        else:
            return base if isinstance(base, np.ndarray) else None


def _run_stream(work_queue: queue.SimpleQueue, errors: list[BaseException]) -> None:
    """A timed stream's worker: each piece of work waits for the points it follows and its
    engine, runs, and holds the engine until its modelled seconds have passed."""
    while (item := work_queue.get()) is not None:
        waits, engine_lock, seconds, work, done = item
        try:
            for point in waits:
                point.wait()
            with engine_lock:
                started = time.perf_counter()
                if work is not None and not errors:
                    work()
                left = started + seconds - time.perf_counter()
                if left > 0:
                    time.sleep(left)
        except BaseException as exc:  # reported at the host's next synchronisation
            errors.append(exc)
        finally:
            done.set()

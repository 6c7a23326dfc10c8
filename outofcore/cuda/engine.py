"""The CUDA tile engine: ``C_ij`` stays on the device while k-panels stream in.

One :class:`CudaEngine` per worker thread owns two streams, two device panel
slots (double buffering), the device accumulator and a pinned host copy of it;
all are allocated once and grown when a larger tile arrives.  Per panel::

    copy stream:     wait(slot consumed) -> H2D A, B -> record(slot copied)
    compute stream:  wait(slot copied)   -> kernel   -> record(slot consumed)
    host:            synchronize(slot copied) and return

so the caller may decode panel s+1 into the same host buffers while the kernel
of panel s runs, and the copy of s+1 overlaps that kernel too.  The first
panel of a tile overwrites ``C`` (no memset); a tile with no panel is zero.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from distributed import WorkerPlugin
from numba import cuda

from outofcore.cuda import SUPPORTED_DTYPES, is_available, simulator_enabled
from outofcore.cuda.kernels import PRODUCTION, TileParams, build_gemm_kernel, launch
from outofcore.errors import BackendError, InputError

BACKENDS = ("cuda", "cupy")
_GROWTH = 1 << 21  # device buffers grow in steps of 2 MiB


def free_device_bytes() -> int:
    """Free memory of the current device in bytes (available host memory under the simulator)."""
    free, _total = cuda.current_context().get_memory_info()
    if not math.isfinite(free):  # the simulator reports inf
        import psutil  # noqa: PLC0415

        return int(psutil.virtual_memory().available)
    return int(free)


def _import_cupy():
    try:
        import cupy  # noqa: PLC0415
        import cupy.cublas  # noqa: F401, PLC0415
    except ImportError as exc:
        raise BackendError(
            f"backend 'cupy' needs CuPy with cuBLAS ({exc}); install the 'cupy' extra "
            "(pip install 'outofcore[cupy]') or use backend 'cuda'"
        ) from exc
    return cupy


class _DeviceBuffer:
    """A reusable flat device allocation viewed as arrays of any shape and dtype."""

    def __init__(self) -> None:
        self._raw = None

    def view(self, shape: tuple[int, ...], dtype: np.dtype, before_grow=None):
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        if nbytes == 0:
            return cuda.device_array(shape, dtype=dtype)  # allocates nothing
        if self._raw is None or self._raw.size < nbytes:
            if before_grow is not None and self._raw is not None:
                before_grow()  # the old allocation may still be in use on a stream
            size = max(_GROWTH, -(-nbytes // _GROWTH) * _GROWTH)
            self._raw = None
            self._raw = cuda.device_array(size, dtype=np.uint8)
        return self._raw[:nbytes].view(dtype).reshape(shape)


@dataclass
class _Slot:
    """One of the two device panel slots, with the events that guard it."""

    a: _DeviceBuffer = field(default_factory=_DeviceBuffer)
    b: _DeviceBuffer = field(default_factory=_DeviceBuffer)
    copied: Any = field(default_factory=cuda.event)
    consumed: Any = field(default_factory=cuda.event)
    in_use: bool = False  # ``consumed`` has been recorded at least once


class CudaEngine:
    """Tile engine on the current CUDA device (see ``outofcore.engines.TileEngine``).

    Parameters
    ----------
    backend
        ``"cuda"`` for our numba kernel, ``"cupy"`` for cuBLAS through CuPy.
    params
        Tile parameters of the numba kernel (both dtypes); the production ones
        per dtype when None.  Tests under the simulator pass tiny ones.
    """

    def __init__(self, backend: str = "cuda", *, params: TileParams | None = None) -> None:
        if backend not in BACKENDS:
            raise BackendError(f"unknown GPU backend {backend!r}; choose one of {BACKENDS}")
        if not is_available():
            raise BackendError(f"backend {backend!r} needs a usable CUDA GPU, and none is")
        self.name = backend
        self._cupy = _import_cupy() if backend == "cupy" else None
        if params is not None:
            params.check()
        self._params = params
        self._copy_stream = cuda.stream()
        self._compute_stream = cuda.stream()
        self._slots = (_Slot(), _Slot())
        self._next_slot = 0
        self._c_dev = _DeviceBuffer()
        self._c_host: np.ndarray | None = None  # flat pinned array, grown when needed
        self._c = None  # device view of the current tile
        self._fresh = True

    def host_buffer(self, size: int, dtype: np.dtype) -> np.ndarray:
        """Return a flat pinned host array of ``size`` elements to decode panels into."""
        return cuda.pinned_array(int(size), dtype=np.dtype(dtype))

    def start_tile(self, shape: tuple[int, int], dtype: np.dtype) -> None:
        """Begin a tile of ``shape``; the device accumulator starts at zero."""
        dtype = np.dtype(dtype)
        if dtype not in SUPPORTED_DTYPES:
            raise InputError(f"unsupported dtype {dtype}; use float32 or float64")
        m, n = (int(s) for s in shape)
        if m < 0 or n < 0:
            raise InputError(f"tile shape must be non-negative, got {tuple(shape)}")
        self._c = self._c_dev.view((m, n), dtype, before_grow=self._compute_stream.synchronize)
        self._fresh = True

    def accumulate(self, a_panel: np.ndarray, b_panel: np.ndarray) -> None:
        """``C += a_panel @ b_panel`` on the device; the host panels are free on return."""
        c = self._require_tile()
        m, n = c.shape
        a_panel, b_panel = np.asarray(a_panel), np.asarray(b_panel)
        if a_panel.ndim != 2 or b_panel.ndim != 2:
            raise InputError(f"panels must be 2-D, got a {a_panel.shape} and b {b_panel.shape}")
        if a_panel.shape[0] != m or b_panel.shape[1] != n or a_panel.shape[1] != b_panel.shape[0]:
            raise InputError(
                f"panels a {a_panel.shape} and b {b_panel.shape} do not fit the "
                f"{m}x{n} tile (need a: ({m}, s), b: (s, {n}))"
            )
        if a_panel.dtype != c.dtype or b_panel.dtype != c.dtype:
            raise InputError(
                f"panel dtypes a {a_panel.dtype}, b {b_panel.dtype} "
                f"differ from the tile's {c.dtype}"
            )
        if a_panel.shape[1] == 0 or m == 0 or n == 0:
            return
        a_panel = np.ascontiguousarray(a_panel)
        b_panel = np.ascontiguousarray(b_panel)

        slot = self._slots[self._next_slot]
        self._next_slot ^= 1
        copy, compute = self._copy_stream, self._compute_stream
        if slot.in_use:  # the kernel that last read this slot must be done first
            slot.consumed.wait(copy)
        a_dev = slot.a.view(a_panel.shape, c.dtype, before_grow=compute.synchronize)
        b_dev = slot.b.view(b_panel.shape, c.dtype, before_grow=compute.synchronize)
        a_dev.copy_to_device(a_panel, stream=copy)
        b_dev.copy_to_device(b_panel, stream=copy)
        slot.copied.record(copy)
        slot.copied.wait(compute)
        self._multiply(a_dev, b_dev, c, accumulate=not self._fresh)
        slot.consumed.record(compute)
        slot.in_use = True
        self._fresh = False
        slot.copied.synchronize()  # host panels are read: the caller may reuse them

    def finish_tile(self) -> np.ndarray:
        """Copy the tile to pinned host memory and return it (valid until the next start_tile)."""
        c = self._require_tile()
        m, n = c.shape
        size = m * n
        if self._c_host is None or self._c_host.dtype != c.dtype or self._c_host.size < size:
            self._c_host = cuda.pinned_array(max(size, 1), dtype=c.dtype)
        out = self._c_host[:size].reshape(m, n)
        if self._fresh:  # no panel was multiplied (k == 0): the product is zero
            out[...] = 0
        elif size:
            c.copy_to_host(out, stream=self._compute_stream)
            self._compute_stream.synchronize()
        self._c = None
        return out

    def _multiply(self, a_dev, b_dev, c_dev, accumulate: bool) -> None:
        stream = self._compute_stream
        if self._cupy is None:
            params = self._params or PRODUCTION[np.dtype(c_dev.dtype)]
            launch(a_dev, b_dev, c_dev, accumulate, stream=stream, params=params)
            return
        cp = self._cupy
        with cp.cuda.ExternalStream(int(stream)):
            a, b, c = cp.asarray(a_dev), cp.asarray(b_dev), cp.asarray(c_dev)
            cp.cublas.gemm("N", "N", a, b, out=c, alpha=1.0, beta=1.0 if accumulate else 0.0)

    def _require_tile(self):
        if self._c is None:
            raise RuntimeError("CudaEngine: start_tile() was not called")
        return self._c


_engines = threading.local()


def get_engine(backend: str = "cuda", *, params: TileParams | None = None) -> CudaEngine:
    """Return this thread's engine for ``(backend, current device, params)``, made once.

    An engine is not shared between threads: its buffers hold one tile at a time.
    """
    if backend not in BACKENDS:
        raise BackendError(f"unknown GPU backend {backend!r}; choose one of {BACKENDS}")
    if not is_available():
        raise BackendError(f"backend {backend!r} needs a usable CUDA GPU, and none is")
    cache = getattr(_engines, "cache", None)
    if cache is None:
        cache = _engines.cache = {}
    key = (backend, getattr(cuda.get_current_device(), "id", 0), params)
    engine = cache.get(key)
    if engine is None:
        engine = cache[key] = CudaEngine(backend, params=params)
    return engine


def warm_up(dtypes=SUPPORTED_DTYPES, params: TileParams | None = None) -> None:
    """Compile the kernels for ``dtypes`` now, so the first tile does not wait for it."""
    if simulator_enabled():  # the simulator runs the Python function: nothing to compile
        return
    for dtype in dtypes:
        dt = np.dtype(dtype)
        kernel = build_gemm_kernel(params or PRODUCTION[dt], dt)
        kernel.compile(f"void({dt.name}[:, ::1], {dt.name}[:, ::1], {dt.name}[:, ::1], boolean)")


class CudaEnginePlugin(WorkerPlugin):
    """Dask worker plugin: check the GPU and compile the kernels when a worker starts.

    Register it with ``client.register_plugin(CudaEnginePlugin("cuda"))``.  Tasks
    then get their thread's engine with ``outofcore.cuda.make_engine(backend)``;
    :attr:`budget_bytes` holds the device budget measured at start.
    """

    name = "outofcore-cuda-engine"

    def __init__(self, backend: str = "cuda", fraction: float = 0.8) -> None:
        if backend not in BACKENDS:
            raise BackendError(f"unknown GPU backend {backend!r}; choose one of {BACKENDS}")
        self.backend = backend
        self.fraction = fraction
        self.budget_bytes: int | None = None

    def setup(self, worker) -> None:
        from outofcore.cuda import device_budget_bytes  # noqa: PLC0415

        if not is_available():
            raise BackendError(f"worker {worker.address}: no usable CUDA GPU for {self.backend!r}")
        if self.backend == "cupy":
            _import_cupy()
        else:
            warm_up()
        self.budget_bytes = device_budget_bytes(self.fraction)

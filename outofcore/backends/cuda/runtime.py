"""numba-cuda as a device runtime: the CUDA backend's side of the device seam.

:class:`NumbaRuntime` is the :class:`~outofcore.backends.device.runtime.DeviceRuntime` the
CUDA engine (:class:`outofcore.backends.cuda.engine.CudaEngine`) runs the device engine
over: numba streams (non-blocking, :func:`outofcore.backends.cuda.buffers.make_stream`) and
events, ``cuda.pinned_array`` and ``cuda.device_array``, ``copy_to_device`` /
``copy_to_host`` and ``cuMemcpy2DAsync`` copies, the transpose kernel and the GEMM launch:
our tiled kernel (backend ``"cuda"``) or cuBLAS through CuPy (``"cupy"``).  It runs on a
GPU and on numba's CUDA simulator alike (whose events time nothing: their elapsed time
is -1).

numba's simulator runs a kernel's blocks as threads that see the kernel's module with
``cuda`` swapped for the simulator's fake while the launch runs; two launches from two
host threads at once (two tiles in flight on one device) undo each other's swap, so on
the simulator launches take :data:`SIMULATOR_LAUNCH` one at a time (on a GPU they are
queued on their streams and run as the streams allow).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import numpy as np
from numba import cuda
from numba.cuda import config as cuda_config

from outofcore.backends.cuda.buffers import copy_rows_to_device, make_stream
from outofcore.backends.cuda.device_choice import select_for_this_thread
from outofcore.backends.cuda.device_share import free_device_bytes
from outofcore.backends.cuda.kernels import PRODUCTION, TileParams, launch
from outofcore.backends.cuda.probe import import_cupy
from outofcore.backends.cuda.transpose import launch_transpose

__all__ = ["SIMULATOR_LAUNCH", "NumbaRuntime"]

#: Held by every kernel launch on numba's simulator (see the module docstring).
SIMULATOR_LAUNCH = threading.Lock()


def _launching() -> contextlib.AbstractContextManager[Any]:
    """One launch at a time on the simulator; no lock on a GPU."""
    return SIMULATOR_LAUNCH if cuda_config.ENABLE_CUDASIM else contextlib.nullcontext()


class NumbaRuntime:
    """The current CUDA device (or numba's simulator) through numba-cuda.

    Parameters
    ----------
    backend
        ``"cuda"``: GEMMs run our numba kernel; ``"cupy"``: cuBLAS through CuPy.
    params
        Tile parameters of the numba kernel (both dtypes); the production ones per dtype
        when None.  Their block tile is the device tiling's granularity (:meth:`block`).
    """

    name = "numba-cuda"

    def __init__(self, backend: str = "cuda", *, params: TileParams | None = None) -> None:
        select_for_this_thread()  # a single GPU's job in this process: its GPU
        self._cupy = import_cupy() if backend == "cupy" else None
        if params is not None:
            params.check()
        self._params = params

    def stream(self) -> Any:
        return make_stream()

    def event(self) -> Any:
        return cuda.event()

    def pinned(self, nbytes: int) -> np.ndarray:
        return cuda.pinned_array(nbytes, dtype=np.uint8)

    def device(self, nbytes: int) -> Any:
        return cuda.device_array(nbytes, dtype=np.uint8)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        return cuda.device_array(shape, dtype=dtype)

    def to_device(self, src: np.ndarray, dst: Any, stream: Any) -> None:
        dst.copy_to_device(src, stream=stream)

    def rows_to_device(self, src: np.ndarray, dst: Any, stream: Any) -> None:
        copy_rows_to_device(src, dst, stream)

    def to_host(self, src: Any, dst: np.ndarray, stream: Any) -> None:
        src.copy_to_host(dst, stream=stream)

    def transpose(self, src: Any, dst: Any, stream: Any) -> None:
        with _launching():
            launch_transpose(src, dst, stream=stream)

    def params(self, dtype: np.dtype) -> TileParams:
        """The kernel's tile parameters for ``dtype``."""
        return self._params or PRODUCTION[np.dtype(dtype)]

    def block(self, dtype: np.dtype) -> tuple[int, int, int]:
        params = self.params(dtype)
        return params.bm, params.bn, params.bk

    def gemm(self, a: Any, b: Any, c: Any, accumulate: bool, stream: Any) -> None:
        if self._cupy is None:
            with _launching():
                launch(a, b, c, accumulate, stream=stream, params=self.params(c.dtype))
            return
        cp = self._cupy
        with cp.cuda.ExternalStream(int(stream)):
            a, b, c = cp.asarray(a), cp.asarray(b), cp.asarray(c)
            cp.cublas.gemm("N", "N", a, b, out=c, alpha=1.0, beta=1.0 if accumulate else 0.0)

    def free_bytes(self) -> int:
        return free_device_bytes()

    def device_key(self) -> int:
        return 0 if cuda_config.ENABLE_CUDASIM else int(cuda.get_current_device().id)

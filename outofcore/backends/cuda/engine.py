"""The CUDA tile engine: the device engine over numba-cuda.

The engine's logic (panel slots and double buffering, resident and sub-tiled device
plans, the device ``C`` buffers, the stager, event timings) is the device engine's
(:class:`outofcore.backends.device.engine.DeviceEngine`), written against the device
seam; here it runs over :class:`outofcore.backends.cuda.runtime.NumbaRuntime`, on the
current CUDA device or numba's simulator, with our numba kernel (backend ``"cuda"``) or
cuBLAS through CuPy (``"cupy"``).
"""

from __future__ import annotations

from outofcore.backends.cuda.availability import is_available
from outofcore.backends.cuda.kernels import TileParams
from outofcore.backends.cuda.runtime import NumbaRuntime
from outofcore.backends.device.engine import DeviceEngine
from outofcore.backends.device.share import DEVICE_FRACTION
from outofcore.errors import BackendError, InputError

__all__ = ["CudaEngine"]


class CudaEngine(DeviceEngine):
    """Tile engine on the current CUDA device (see ``outofcore.backends.protocol.TileEngine``).

    Parameters
    ----------
    backend
        ``"cuda"`` for our numba kernel, ``"cupy"`` for cuBLAS through CuPy.
    params
        Tile parameters of the numba kernel (both dtypes); the production ones
        per dtype when None.  Tests under the simulator pass tiny ones.  Their
        block tile also sets the device tiling's granularity.
    fraction
        Share of the device's free memory the engines of this process may use
        together (:class:`~outofcore.backends.device.share.DeviceShare`; the first engine
        on the device sets it).
    device_memory
        A further limit in bytes (``--device-memory``); see :meth:`set_device_memory`.
    """

    def __init__(
        self,
        backend: str = "cuda",
        *,
        params: TileParams | None = None,
        fraction: float = DEVICE_FRACTION,
        device_memory: int | None = None,
    ) -> None:
        if backend != "cuda" and backend != "cupy":  # our kernel, or cuBLAS through CuPy
            raise BackendError(
                f"unknown GPU backend {backend!r}; the CUDA engine serves 'cuda' and 'cupy'"
            )
        if not is_available():
            raise BackendError(f"backend {backend!r} needs a usable CUDA GPU, and none is")
        if not 0 < fraction <= 1:
            raise InputError(f"fraction must be in (0, 1], got {fraction!r}")
        runtime = NumbaRuntime(backend, params=params)
        super().__init__(backend, runtime, fraction=fraction, device_memory=device_memory)

"""GPU backend: a numba CUDA GEMM kernel and the CUDA tile engine.

Importing ``outofcore.backends.cuda`` does not import ``numba.cuda``: the functions here
import it when called, so that ``NUMBA_ENABLE_CUDASIM`` (numba's CPU simulator
of CUDA) can still be chosen by whoever imports numba first.

* :func:`is_available`: whether a GPU, or the simulator, can run kernels here.
* :func:`gemm`: ``C += A · B`` (or ``C = A · B``) with our kernel, on device or
  host arrays.
* :func:`make_engine`: a tile engine (``outofcore.backends.protocol.TileEngine``) for
  ``"cuda"`` (our kernel) or ``"cupy"`` (cuBLAS through CuPy).
* :func:`device_budget_bytes`: how much device memory a plan may use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from outofcore.backends.cuda.availability import is_available
from outofcore.backends.cuda.probe import require_numba_cuda, simulator_enabled
from outofcore.backends.device.share import DEVICE_FRACTION
from outofcore.errors import BackendError, InputError
from outofcore.operands.dtypes import check_product

if TYPE_CHECKING:  # pragma: no cover
    from outofcore.backends.cuda.engine import CudaEngine
    from outofcore.backends.cuda.kernels import TileParams

__all__ = ["device_budget_bytes", "gemm", "is_available", "make_engine", "simulator_enabled"]

_MAX_DIM = 2**31 - 1  # the kernel indexes with 32-bit integers


def _require_cuda(backend: str = "cuda"):
    """Return the ``numba.cuda`` module, or raise BackendError if no GPU is usable."""
    require_numba_cuda(backend)
    if not is_available():
        raise BackendError(
            "no CUDA GPU is usable here (numba.cuda.is_available() is False); "
            "set NUMBA_ENABLE_CUDASIM=1 before numba is imported to use the simulator"
        )
    from numba import cuda  # noqa: PLC0415

    return cuda


def _as_operand(name: str, x: Any, cuda) -> tuple[Any, bool]:
    """Return ``(array, on_device)`` for a numpy array or a CUDA array of any library."""
    from numba.cuda.cudadrv import devicearray  # noqa: PLC0415

    if isinstance(x, np.ndarray):
        return x, False
    if devicearray.is_cuda_ndarray(x):
        return x, True
    if hasattr(x, "__cuda_array_interface__"):
        return cuda.as_cuda_array(x), True
    raise InputError(f"{name} must be a numpy array or a CUDA device array, not {type(x).__name__}")


def _is_c_contiguous(x: Any, on_device: bool) -> bool:
    return bool(x.is_c_contiguous()) if on_device else bool(x.flags.c_contiguous)


def check_operands(a: Any, b: Any, c: Any) -> tuple[int, int, int]:
    """Check that ``c += a @ b`` is well formed for the kernel; return ``(m, n, k)``.

    The shapes and dtypes as every engine checks them
    (:func:`outofcore.operands.dtypes.check_product`), and the kernel's 32-bit index limit.

    Raises
    ------
    InputError
        Naming the offending shapes, dtypes or sizes.
    """
    m, n, k = check_product(a, b, c)
    if max(m, n, k) > _MAX_DIM:
        raise InputError(f"dimensions m={m}, n={n}, k={k} exceed {_MAX_DIM}")
    return m, n, k


def gemm(
    a: Any,
    b: Any,
    c: Any,
    *,
    accumulate: bool = True,
    stream: Any = 0,
    params: TileParams | None = None,
) -> Any:
    """Compute ``c += a @ b`` (``c = a @ b`` if not ``accumulate``) with the tiled kernel.

    Parameters
    ----------
    a, b, c
        2-D C-contiguous arrays of one dtype (float32, float64, complex64, complex128), ``(m, k)``,
        ``(k, n)`` and ``(m, n)``: numba device arrays, any array with
        ``__cuda_array_interface__`` (CuPy, ...), or numpy arrays, which are
        copied to the device (and ``c`` back into place).
    accumulate
        Add to ``c`` when true; overwrite it when false.  With ``k == 0`` nothing
        is launched: ``c`` is set to zero, or left as it is when accumulating.
    stream
        numba stream to run on; 0 is the default stream.  Host ``c`` is
        complete when this returns; device ``c`` once ``stream`` is done.
    params
        Tile parameters of the kernel (``outofcore.backends.cuda.kernels.TileParams``);
        the production ones for the dtype when None.

    Returns
    -------
    The ``c`` that was passed in.

    Raises
    ------
    InputError
        For mismatched shapes, mixed or unsupported dtypes, non-contiguous arrays.
    BackendError
        When no GPU (nor the simulator) is usable.
    """
    cuda = _require_cuda()
    from outofcore.backends.cuda import kernels  # noqa: PLC0415

    operands, k = _checked_operands(a, b, c, cuda)
    if params is not None:
        params.check()
    m, n = operands["c"][0].shape
    if m == 0 or n == 0:
        return c
    if k == 0:  # a @ b is zero: no launch, no copy, no slice of an empty device array
        if not accumulate:
            c_arr, c_on_device = operands["c"]
            if c_on_device:
                kernels.zero(c_arr, stream)
            else:
                c_arr[...] = 0
        return c

    def to_device(name: str, copy: bool = True):
        arr, on_device = operands[name]
        if on_device:
            return arr
        if copy:
            return cuda.to_device(arr, stream=stream)
        return cuda.device_array(arr.shape, dtype=arr.dtype, stream=stream)

    c_host = not operands["c"][1]
    a_d, b_d = to_device("a"), to_device("b")
    c_d = to_device("c", copy=bool(accumulate))
    kernels.launch(a_d, b_d, c_d, accumulate, stream=stream, params=params)
    if c_host:
        c_d.copy_to_host(operands["c"][0], stream=stream)
        if stream:
            stream.synchronize()
    return c


def _checked_operands(a: Any, b: Any, c: Any, cuda: Any) -> tuple[dict[str, Any], int]:
    """``{name: (array, on_device)}`` of :func:`gemm`'s operands and their inner size,
    refused when their shapes or dtypes do not make a product or one is not C-contiguous."""
    operands = {}
    for name, x in (("a", a), ("b", b), ("c", c)):
        operands[name] = _as_operand(name, x, cuda)
    _, _, k = check_operands(*(arr for arr, _ in operands.values()))
    for name, (arr, on_device) in operands.items():
        if not _is_c_contiguous(arr, on_device):
            raise InputError(
                f"{name} must be C-contiguous (strides {tuple(arr.strides)} for shape "
                f"{tuple(arr.shape)}); pass numpy.ascontiguousarray({name})"
            )
    return operands, k


def make_engine(backend: str = "cuda", *, params: TileParams | None = None) -> CudaEngine:
    """Return a new tile engine for ``backend`` (``"cuda"`` or ``"cupy"``).

    An engine (streams, device and pinned buffers) holds one tile at a time and
    is costly to make: the caller keeps it for its thread.  A tile task's
    thread makes its engine on first use and reuses it
    (``outofcore.compute.worker_context.WorkerContext.engine``).

    Raises
    ------
    BackendError
        For an unknown backend, no usable GPU, or ``"cupy"`` without CuPy.
    """
    _require_cuda(backend)
    from outofcore.backends.cuda.engine import CudaEngine  # noqa: PLC0415

    return CudaEngine(backend, params=params)


def device_budget_bytes(fraction: float = DEVICE_FRACTION) -> int:
    """Return ``fraction`` of the free memory of the current device, in bytes.

    Under the simulator the "device" is host memory: the fraction of the
    available host memory.

    Raises
    ------
    InputError
        Unless ``0 < fraction <= 1``.
    BackendError
        When no GPU (nor the simulator) is usable.
    """
    if not 0 < fraction <= 1:
        raise InputError(f"fraction must be in (0, 1], got {fraction!r}")
    _require_cuda()
    from outofcore.backends.cuda.device_share import free_device_bytes  # noqa: PLC0415

    return int(free_device_bytes() * fraction)

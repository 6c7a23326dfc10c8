"""numba-cuda's streams and 2-D copies, for the CUDA runtime of the device seam.

* :func:`make_stream`: a stream that does not synchronise with the legacy default stream.
* :func:`copy_rows_to_device`: host rows at a pitch into a C-contiguous device array in
  one ``cuMemcpy2DAsync`` (:func:`describe_2d_copy` is its descriptor).

The buffers, the pinned pool and the layouts of host views are the device engine's
(:mod:`outofcore.backends.device.buffers`), written against the runtime
(:class:`outofcore.backends.cuda.runtime.NumbaRuntime`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda
from numba.cuda import config as cuda_config

__all__ = ["copy_rows_to_device", "describe_2d_copy", "make_stream"]


def make_stream() -> Any:
    """A new CUDA stream created non-blocking (no implicit wait on the legacy default stream).

    numba's ``cuda.stream()`` makes streams that synchronise with stream 0, so any
    library's work on the default stream would stall the engine's copies and kernels.
    Falls back to ``cuda.stream()`` on the simulator or where numba's driver differs.
    """
    if cuda_config.ENABLE_CUDASIM:
        return cuda.stream()
    try:
        from numba.cuda.cudadrv import driver as drv  # noqa: PLC0415

        context = cuda.current_context()
        flags = drv.binding.CUstream_flags.CU_STREAM_NON_BLOCKING.value
        handle = drv.driver.cuStreamCreate(flags)
        return drv.Stream(handle, finalizer=drv._stream_finalizer(context.deallocations, handle))
    except (AttributeError, TypeError):  # another numba-cuda: its own (blocking) streams
        return cuda.stream()


def copy_rows_to_device(src: np.ndarray, dst: Any, stream: Any) -> None:
    """Copy a ``"rows"`` (or contiguous) host view into C-contiguous ``dst`` in one 2-D copy."""
    if cuda_config.ENABLE_CUDASIM:  # the simulator's device arrays are numpy arrays
        dst.copy_to_device(np.ascontiguousarray(src), stream=stream)
        return
    from numba.cuda.cudadrv import driver as drv  # noqa: PLC0415

    copy = describe_2d_copy(src, int(dst.device_ctypes_pointer.value))
    drv.driver.cuMemcpy2DAsync(copy, drv._stream_handle(stream))


def describe_2d_copy(src: np.ndarray, device_pointer: int):
    """The ``CUDA_MEMCPY2D`` that copies the ``"rows"`` view ``src`` to a C-contiguous
    device array at ``device_pointer``: the host's whole share of the copy (needs
    cuda-bindings, not a GPU; ``benchmarks/host_packing.py`` times it)."""
    from cuda.bindings import driver as binding  # noqa: PLC0415

    rows, cols = src.shape
    width = cols * src.itemsize
    copy = binding.CUDA_MEMCPY2D()
    copy.srcMemoryType = binding.CUmemorytype.CU_MEMORYTYPE_HOST
    copy.srcHost = src.ctypes.data
    copy.srcPitch = int(src.strides[0]) if rows > 1 else width
    copy.dstMemoryType = binding.CUmemorytype.CU_MEMORYTYPE_DEVICE
    copy.dstDevice = binding.CUdeviceptr(device_pointer)
    copy.dstPitch = width
    copy.WidthInBytes = width
    copy.Height = rows
    return copy

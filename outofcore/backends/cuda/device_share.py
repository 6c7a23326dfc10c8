"""The free memory of the current CUDA device (the CUDA runtime's share of the device seam).

Engines on one device divide it among themselves
(:class:`outofcore.backends.device.share.DeviceShare`).
"""

from __future__ import annotations

import math

import psutil
from numba import cuda

__all__ = ["free_device_bytes"]


def free_device_bytes() -> int:
    """Free memory of the current device in bytes (available host memory under the simulator)."""
    free, _total = cuda.current_context().get_memory_info()
    if not math.isfinite(free):  # the simulator reports inf
        return int(psutil.virtual_memory().available)
    return int(free)

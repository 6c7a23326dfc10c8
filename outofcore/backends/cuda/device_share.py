"""The device memory that CUDA engines share: one budget per process and device.

:class:`DeviceShare` measures the device's free memory (:func:`free_device_bytes`)
when the first engine on it is made and divides it among the engines alive on it,
one per task thread (:class:`outofcore.backends.cuda.engine.CudaEngine` joins it).
"""

from __future__ import annotations

import math
import threading
import weakref

from numba import cuda

from outofcore.backends.cuda import simulator_enabled


def free_device_bytes() -> int:
    """Free memory of the current device in bytes (available host memory under the simulator)."""
    free, _total = cuda.current_context().get_memory_info()
    if not math.isfinite(free):  # the simulator reports inf
        import psutil  # noqa: PLC0415

        return int(psutil.virtual_memory().available)
    return int(free)


class DeviceShare:
    """One device budget per process and device, divided among the engines alive on it.

    The budget is ``fraction`` of the device's free memory when the first engine on
    the device is made; every engine made later on the same device in this process
    (another task thread's) joins it, and each gets an equal share.  An engine
    that is garbage-collected leaves, and the others' shares grow again.
    """

    _lock = threading.Lock()
    _shares: dict[int, DeviceShare] = {}

    def __init__(self, total: int) -> None:
        self.total = total
        self.engines: weakref.WeakSet = weakref.WeakSet()

    @classmethod
    def join(cls, engine: object, fraction: float) -> DeviceShare:
        """Add ``engine`` to the share of the current device (measured if it is the first)."""
        device = 0 if simulator_enabled() else int(cuda.get_current_device().id)
        with cls._lock:
            share = cls._shares.get(device)
            if share is None or not share.engines:  # none alive: measure the device anew
                share = cls._shares[device] = cls(max(1, int(free_device_bytes() * fraction)))
            share.engines.add(engine)
        return share

    def per_engine(self) -> int:
        """Device bytes of one engine's share."""
        return max(1, self.total // max(1, len(self.engines)))

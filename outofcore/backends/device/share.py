"""The device memory that device engines share: one budget per process and device.

:class:`DeviceShare` measures the device's free memory (the runtime's
:meth:`~outofcore.backends.device.runtime.DeviceRuntime.free_bytes`) when the first
engine on it is made and divides it among the engines alive on it, one per task thread
(:class:`outofcore.backends.device.engine.DeviceEngine` joins it).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable
from typing import ClassVar

from outofcore.backends.device.runtime import DeviceRuntime

__all__ = ["DEVICE_FRACTION", "DeviceShare"]

#: Share of the free device memory an engine uses unless told otherwise.
DEVICE_FRACTION = 0.8


class DeviceShare:
    """One device budget per process and device, divided among the engines alive on it.

    The budget is ``fraction`` of the device's free memory when the first engine on
    the device is made; every engine made later on the same device in this process
    (another task thread's) joins it, and each gets an equal share.  An engine
    that is garbage-collected leaves, and the others' shares grow again.
    """

    _lock = threading.Lock()
    _shares: ClassVar[dict[Hashable, DeviceShare]] = {}

    def __init__(self, total: int) -> None:
        self.total = total
        self.engines: weakref.WeakSet = weakref.WeakSet()
        #: The engines the latest job said would share the device at once (its worker's
        #: tiles in flight): each share is at most ``total`` over that many, even before
        #: they are all made (the first engine must not plan with the whole device).
        self.expected = 1

    def expect(self, engines: int) -> None:
        """A job's tasks run ``engines`` at once on this device, each with its own engine."""
        self.expected = max(1, int(engines))

    @classmethod
    def join(cls, engine: object, fraction: float, runtime: DeviceRuntime) -> DeviceShare:
        """Add ``engine`` to the share of ``runtime``'s device (measured if it is the first)."""
        device = (runtime.name, runtime.device_key())
        with cls._lock:
            share = cls._shares.get(device)
            if share is None or not share.engines:  # none alive: measure the device anew
                share = cls._shares[device] = cls(max(1, int(runtime.free_bytes() * fraction)))
            share.engines.add(engine)
        return share

    def per_engine(self) -> int:
        """Device bytes of one engine's share."""
        return max(1, self.total // max(1, len(self.engines), self.expected))

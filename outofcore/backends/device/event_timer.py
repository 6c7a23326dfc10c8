"""A tile's kernel and copy time on the device, from the runtime's events.

:meth:`EventTimer.timed` records an event before and after work queued on a stream;
:meth:`EventTimer.collect` reads the pairs once the tile's streams are synchronized
(reading an event pair never waits then) and adds them up by name.  Where events time
nothing (numba's CUDA simulator says -1) those pairs are skipped.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from outofcore.backends.device.runtime import DeviceRuntime, Event

__all__ = ["EventTimer"]


class EventTimer:
    """Named device seconds of one tile, and the engine's first launch (wall seconds)."""

    def __init__(self, runtime: DeviceRuntime) -> None:
        self._runtime = runtime
        self._pairs: list[tuple[str, Event, Event]] = []
        #: Wall seconds of the engine's first kernel launch (compile or cache load
        #: included); None until it launched, reported once.
        self.first_launch: float | None = None
        self._first_reported = False

    @contextlib.contextmanager
    def timed(self, name: str, stream: Any) -> Iterator[None]:
        """Time the work the block queues on ``stream`` under ``name``."""
        start = self._runtime.event()
        start.record(stream)
        yield
        end = self._runtime.event()
        end.record(stream)
        self._pairs.append((name, start, end))

    @contextlib.contextmanager
    def launch(self, stream: Any) -> Iterator[None]:
        """Time a kernel launch on ``stream``: its device time as ``kernel_seconds``, and
        the wall time of the engine's first launch."""
        first = self.first_launch is None
        started = time.perf_counter()
        with self.timed("kernel_seconds", stream):
            yield
        if first:
            self.first_launch = time.perf_counter() - started

    def collect(self) -> dict[str, float]:
        """The seconds timed since the last call, by name (call it after synchronizing the
        streams), and ``first_launch_seconds`` the first time after the first launch."""
        totals = {"kernel_seconds": 0.0, "copy_seconds": 0.0}
        for name, start, end in self._pairs:
            milliseconds = start.elapsed_time(end)
            if milliseconds >= 0:  # the simulator's events say -1
                totals[name] = totals.get(name, 0.0) + milliseconds / 1000
        self._pairs.clear()
        if self.first_launch is not None and not self._first_reported:
            totals["first_launch_seconds"] = self.first_launch
            self._first_reported = True
        return totals

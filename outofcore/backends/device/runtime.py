"""The device runtime seam: everything a device engine asks of a GPU runtime.

Tiled-MM and COSMA put every vendor call behind one small runtime header and run one
algorithm over it; here :class:`DeviceRuntime` is that header.  The device engine
(:class:`outofcore.backends.device.engine.DeviceEngine`) and its buffers
(:mod:`outofcore.backends.device.buffers`) talk only to a runtime object: streams,
events, pinned host and device allocations, asynchronous copies (1-D, and 2-D for host
rows at a pitch), the device transpose and the GEMM launch on a stream.

Implementations:

- :class:`outofcore.backends.cuda.runtime.NumbaRuntime`: numba-cuda, on the chip or on
  numba's CUDA simulator (the only one that imports ``numba.cuda``).
- :class:`outofcore.backends.timed.device.TimedDevice`: the timed device, on the host
  with no GPU library: every copy and kernel is a real wait of its modelled time on
  per-stream worker threads, with a ledger of the modelled schedule.

Device arrays are whatever the runtime makes (numba device arrays, numpy arrays on the
timed device); the engine only slices, ``view``\\s and ``reshape``\\s them, and hands
them back to the runtime.  Semantics follow CUDA's: work on one stream runs in order,
an event marks the point of its stream at :meth:`Event.record`, and
:meth:`Event.wait` makes a stream's later work wait for that point.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["DeviceArray", "DeviceRuntime", "Event", "Stream"]

#: A device array as the engine sees it: sliceable, with ``shape``, ``dtype``,
#: ``view(dtype)`` and ``reshape(shape)`` (a numba device array, or a numpy array on the
#: timed device).
DeviceArray = Any


@runtime_checkable
class Stream(Protocol):
    """An in-order queue of device work."""

    def synchronize(self) -> None:
        """Block the host until the work queued so far on this stream is done."""


@runtime_checkable
class Event(Protocol):
    """A point in a stream's work (CUDA event semantics)."""

    def record(self, stream: Any) -> None:
        """Mark the end of the work queued so far on ``stream``."""

    def wait(self, stream: Any) -> None:
        """Make the work queued later on ``stream`` wait for the last recorded point."""

    def synchronize(self) -> None:
        """Block the host until the last recorded point is reached (at once if none)."""

    def elapsed_time(self, end: Any) -> float:
        """Milliseconds from this event to ``end`` (both reached); negative where the
        runtime cannot time events (numba's simulator)."""


@runtime_checkable
class DeviceRuntime(Protocol):
    """One device, as a device engine uses it."""

    #: What the runtime is, in words (``"numba-cuda"``, ``"timed device"``).
    name: str

    def stream(self) -> Stream:
        """A new stream that does not synchronise with any other (non-blocking)."""

    def event(self) -> Event:
        """A new event, not yet recorded."""

    def pinned(self, nbytes: int) -> np.ndarray:
        """A flat ``uint8`` host array of ``nbytes`` that copies may use asynchronously."""

    def device(self, nbytes: int) -> DeviceArray:
        """A flat ``uint8`` device allocation of ``nbytes`` (> 0)."""

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> DeviceArray:
        """A device array of ``shape`` (used for arrays of zero bytes: allocates nothing)."""

    def to_device(self, src: np.ndarray, dst: DeviceArray, stream: Any) -> None:
        """Queue a copy of the C-contiguous host array ``src`` into ``dst`` (same size)."""

    def rows_to_device(self, src: np.ndarray, dst: DeviceArray, stream: Any) -> None:
        """Queue one 2-D copy of ``src`` (rows contiguous, at a positive pitch) into the
        C-contiguous device array ``dst`` of its shape."""

    def to_host(self, src: DeviceArray, dst: np.ndarray, stream: Any) -> None:
        """Queue a copy of the C-contiguous device array ``src`` into host ``dst``."""

    def transpose(self, src: DeviceArray, dst: DeviceArray, stream: Any) -> None:
        """Queue ``dst = src.T`` on the device (``src`` ``(r, c)``, ``dst`` ``(c, r)``)."""

    def gemm(
        self, a: DeviceArray, b: DeviceArray, c: DeviceArray, accumulate: bool, stream: Any
    ) -> None:
        """Queue ``c (+)= a @ b`` on C-contiguous device arrays (``c = a @ b`` unless
        ``accumulate``)."""

    def block(self, dtype: np.dtype) -> tuple[int, int, int]:
        """The GEMM's block tile ``(bm, bn, bk)`` for ``dtype``: device tiles are cut in
        its multiples."""

    def free_bytes(self) -> int:
        """Free device memory now, in bytes."""

    def device_key(self) -> Hashable:
        """What names this device in this process (engines on one device share its
        memory: :class:`outofcore.backends.device.share.DeviceShare`)."""

"""Device and pinned host buffers of a device engine, and the copies between them.

Everything here talks to a :class:`~outofcore.backends.device.runtime.DeviceRuntime`,
never to a GPU library:

* :class:`DeviceBuffer`: a flat device allocation viewed as arrays of any shape.
* :class:`PinnedBuffer`: a flat pinned host allocation viewed as flat arrays
  (the engine's host ``C``).
* :class:`PinnedPool`: pinned host blocks the engine hands out for panels and takes
  back when the last view of one is gone; it only grows, so tiles of new sizes
  (edge tiles, diagonal Gram tiles) reuse blocks instead of pinning memory again.
* :class:`PanelSlot`: one of the two device panel slots (double buffering) and
  the events that guard it.
* :func:`copy_to_device`: a host view of any layout into a C-contiguous device
  array without packing it on the host: rows with a pitch go as one 2-D copy, a
  transposed view as a 2-D copy of its transpose into a device scratch slice and a
  device transpose; only a view strided both ways goes through the :class:`Stager`'s
  ring of pinned buffers.

Each engine holds its own; nothing here is shared between threads.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from outofcore.backends.device.runtime import DeviceArray, DeviceRuntime, Event

__all__ = [
    "GROWTH",
    "STAGE_BUFFERS",
    "STAGE_BYTES",
    "DeviceBuffer",
    "PanelSlot",
    "PinnedBuffer",
    "PinnedPool",
    "Stager",
    "copy_to_device",
    "layout",
]

GROWTH = 1 << 16  # device buffers grow in steps of 64 KiB
#: Pinned staging buffers in the ring, and the bytes of each.
STAGE_BUFFERS = 4
STAGE_BYTES = 8 << 20


class DeviceBuffer:
    """A reusable flat device allocation viewed as arrays of any shape and dtype."""

    def __init__(self, runtime: DeviceRuntime) -> None:
        self._runtime = runtime
        self._raw: DeviceArray | None = None

    @property
    def nbytes(self) -> int:
        return 0 if self._raw is None else int(self._raw.size)

    def view(
        self,
        shape: tuple[int, ...],
        dtype: np.dtype,
        before_grow: Callable[[], None] | None = None,
    ) -> DeviceArray:
        """A C-contiguous device array of ``shape`` over the allocation, grown (in steps of
        :data:`GROWTH`) when too small; ``before_grow`` runs before an allocation in use is
        dropped (it may still be in use on a stream)."""
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        if nbytes == 0:
            return self._runtime.empty(shape, np.dtype(dtype))  # allocates nothing
        if self._raw is None or self._raw.size < nbytes:
            if before_grow is not None and self._raw is not None:
                before_grow()
            size = -(-nbytes // GROWTH) * GROWTH
            self._raw = None
            self._raw = self._runtime.device(size)
        return self._raw[:nbytes].view(dtype).reshape(shape)

    def free(self) -> None:
        """Drop the allocation (the caller has synchronised every stream that used it)."""
        self._raw = None


class PinnedBuffer:
    """A reusable flat pinned host allocation viewed as flat arrays of any dtype."""

    def __init__(self, runtime: DeviceRuntime) -> None:
        self._runtime = runtime
        self._raw: np.ndarray | None = None  # flat pinned uint8, grown when needed

    @property
    def nbytes(self) -> int:
        return 0 if self._raw is None else int(self._raw.nbytes)

    def view(self, size: int, dtype: np.dtype) -> np.ndarray:
        """A flat array of ``size`` elements of ``dtype`` (reused across tiles)."""
        nbytes = max(1, size * dtype.itemsize)
        if self._raw is None or self._raw.size < nbytes:
            self._raw = None
            self._raw = self._runtime.pinned(nbytes)
        return self._raw[: size * dtype.itemsize].view(dtype)


class PinnedPool:
    """Pinned host blocks handed out as arrays and taken back when their last view is gone.

    :meth:`take` returns a flat array over the smallest free block that is large
    enough, pinning a new block only when none is.  Every array derived from the
    one returned (reshapes, slices, dtype views) keeps the block busy: the array
    handed out owns a ``memoryview`` of the block, and numpy ties every derived
    view to it, so the block is free again exactly when all of them are gone.
    Blocks are never unpinned (numba frees pinned memory lazily and a free
    synchronises the device): the pool grows to the most panels ever held at once.
    """

    def __init__(self, runtime: DeviceRuntime) -> None:
        self._runtime = runtime
        # Re-entrant: pinning a block may run the garbage collector, whose finalizers
        # give blocks back (_give_back) in this same thread.
        self._lock = threading.RLock()
        self._blocks: list[np.ndarray] = []
        self._busy: set[int] = set()
        self.allocations = 0  # blocks pinned so far

    @property
    def nbytes(self) -> int:
        """Pinned bytes the pool holds, busy or free."""
        with self._lock:
            return sum(int(block.nbytes) for block in self._blocks)

    @property
    def free_bytes(self) -> int:
        """Pinned bytes of the blocks no array uses now."""
        with self._lock:
            return sum(
                int(block.nbytes) for i, block in enumerate(self._blocks) if i not in self._busy
            )

    def take(self, nbytes: int) -> np.ndarray:
        """Return a flat writable ``uint8`` array of ``nbytes`` bytes of pinned memory."""
        nbytes = int(nbytes)
        with self._lock:
            free = [
                (int(block.size), i)
                for i, block in enumerate(self._blocks)
                if i not in self._busy and block.size >= max(nbytes, 1)
            ]
            if free:
                _, index = min(free)
            else:
                self._blocks.append(self._runtime.pinned(max(nbytes, 1)))
                self.allocations += 1
                index = len(self._blocks) - 1
            self._busy.add(index)
            block = self._blocks[index]
        handed = np.frombuffer(memoryview(block)[:nbytes], dtype=np.uint8)
        weakref.finalize(handed, self._give_back, index)
        return handed

    def _give_back(self, index: int) -> None:
        with self._lock:
            self._busy.discard(index)


class PanelSlot:
    """One of the two device panel slots, with the events that guard it."""

    def __init__(self, runtime: DeviceRuntime) -> None:
        self.a = DeviceBuffer(runtime)
        self.b = DeviceBuffer(runtime)
        self.copied: Event = runtime.event()
        self.consumed: Event = runtime.event()
        self.in_use = False  # ``consumed`` has been recorded at least once


def layout(src: np.ndarray) -> str:
    """How a 2-D host view can reach the device without packing it on the host.

    ``"contiguous"`` (one copy), ``"rows"`` (each row contiguous, rows at a positive
    pitch: one 2-D copy), ``"columns"`` (its transpose is ``"rows"``: a 2-D copy and a
    device transpose), or ``"strided"`` (packed on the host).
    """
    rows, cols = src.shape
    w = src.itemsize
    s0, s1 = src.strides
    if src.flags.c_contiguous:
        return "contiguous"
    if (cols == 1 or s1 == w) and (rows == 1 or s0 >= cols * w):
        return "rows"
    if (rows == 1 or s0 == w) and (cols == 1 or s1 >= rows * w):
        return "columns"
    return "strided"


def copy_to_device(
    runtime: DeviceRuntime,
    src: np.ndarray,
    dst: DeviceArray,
    stream: Any,
    *,
    scratch: DeviceBuffer,
    stager: Stager,
    before_grow: Callable[[], None] | None = None,
) -> str:
    """Copy the host view ``src`` into the C-contiguous device array ``dst`` on ``stream``.

    ``scratch`` is a :class:`DeviceBuffer` a ``"columns"`` view goes through (its
    transpose lands there, then the device transposes it into ``dst``; ``before_grow``
    runs before it is made larger, as :meth:`DeviceBuffer.view` says); ``stager``
    packs a ``"strided"`` view.  Returns the layout (:func:`layout`).  ``src`` may be
    reused once the stream has passed these copies.
    """
    kind = layout(src)
    if kind == "contiguous":
        runtime.to_device(src, dst, stream)
    elif kind == "rows":
        runtime.rows_to_device(src, dst, stream)
    elif kind == "columns":
        rows, cols = src.shape
        staged = scratch.view((cols, rows), src.dtype, before_grow=before_grow)
        runtime.rows_to_device(src.T, staged, stream)
        runtime.transpose(staged, dst, stream)
    else:
        stager.to_device(src, dst, stream)
    return kind


class Stager:
    """Copies strided host views to contiguous device arrays through a ring of pinned buffers.

    Rows of the view are packed into the next free buffer (waiting for the
    copy that last used it) and copied from there, so the host packs one part
    while the previous one crosses PCIe.  The view may be reused on return.
    Only views strided in both directions come here (:func:`copy_to_device`).
    """

    def __init__(
        self, runtime: DeviceRuntime, buffers: int = STAGE_BUFFERS, nbytes: int = STAGE_BYTES
    ) -> None:
        self._runtime = runtime
        self._nbytes = nbytes
        self._ring: list[np.ndarray | None] = [None] * buffers
        self._events = [runtime.event() for _ in range(buffers)]
        self._used = [False] * buffers
        self._next = 0

    def to_device(self, src: np.ndarray, dst: DeviceArray, stream: Any) -> None:
        rows, cols = src.shape
        per = max(1, self._nbytes // max(1, cols * src.itemsize))
        for r0 in range(0, rows, per):
            part = src[r0 : r0 + per]
            i = self._next
            self._next = (i + 1) % len(self._ring)
            if self._used[i]:
                self._events[i].synchronize()
            staged = self._buffer(i, part.nbytes)[: part.nbytes].view(src.dtype)
            staged = staged.reshape(part.shape)
            np.copyto(staged, part)
            self._runtime.to_device(staged, dst[r0 : r0 + part.shape[0]], stream)
            self._events[i].record(stream)
            self._used[i] = True

    @property
    def nbytes(self) -> int:
        return sum(buffer.nbytes for buffer in self._ring if buffer is not None)

    def _buffer(self, i: int, nbytes: int) -> np.ndarray:
        buffer = self._ring[i]
        if buffer is None or buffer.size < nbytes:  # free: its last copy was waited for
            self._ring[i] = buffer = self._runtime.pinned(max(nbytes, self._nbytes))
        return buffer

"""Device and pinned host buffers of the CUDA tile engine, allocated once and grown.

* :class:`DeviceBuffer`: a flat device allocation viewed as arrays of any shape.
* :class:`PinnedBuffer`: a flat pinned host allocation viewed as flat arrays
  (the engine's host ``C``).
* :class:`PanelSlot`: one of the two device panel slots (double buffering) and
  the events that guard it.
* :class:`Stager`: strided host views copied to the device through a ring of
  pinned staging buffers.

Each engine holds its own; nothing here is shared between threads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import cuda

GROWTH = 1 << 16  # device buffers grow in steps of 64 KiB
#: Pinned staging buffers in the ring, and the bytes of each.
STAGE_BUFFERS = 4
STAGE_BYTES = 8 << 20


class DeviceBuffer:
    """A reusable flat device allocation viewed as arrays of any shape and dtype."""

    def __init__(self) -> None:
        self._raw = None

    @property
    def nbytes(self) -> int:
        return 0 if self._raw is None else int(self._raw.size)

    def view(self, shape: tuple[int, ...], dtype: np.dtype, before_grow=None):
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        if nbytes == 0:
            return cuda.device_array(shape, dtype=dtype)  # allocates nothing
        if self._raw is None or self._raw.size < nbytes:
            if before_grow is not None and self._raw is not None:
                before_grow()  # the old allocation may still be in use on a stream
            size = -(-nbytes // GROWTH) * GROWTH
            self._raw = None
            self._raw = cuda.device_array(size, dtype=np.uint8)
        return self._raw[:nbytes].view(dtype).reshape(shape)


class PinnedBuffer:
    """A reusable flat pinned host allocation viewed as flat arrays of any dtype."""

    def __init__(self) -> None:
        self._raw: np.ndarray | None = None  # flat pinned uint8, grown when needed

    @property
    def nbytes(self) -> int:
        return 0 if self._raw is None else int(self._raw.nbytes)

    def view(self, size: int, dtype: np.dtype) -> np.ndarray:
        """A flat array of ``size`` elements of ``dtype`` (reused across tiles)."""
        nbytes = max(1, size * dtype.itemsize)
        if self._raw is None or self._raw.size < nbytes:
            self._raw = None
            self._raw = cuda.pinned_array(nbytes, dtype=np.uint8)
        return self._raw[: size * dtype.itemsize].view(dtype)


@dataclass
class PanelSlot:
    """One of the two device panel slots, with the events that guard it."""

    a: DeviceBuffer = field(default_factory=DeviceBuffer)
    b: DeviceBuffer = field(default_factory=DeviceBuffer)
    copied: Any = field(default_factory=cuda.event)
    consumed: Any = field(default_factory=cuda.event)
    in_use: bool = False  # ``consumed`` has been recorded at least once


class Stager:
    """Copies strided host views to contiguous device arrays through a ring of pinned buffers.

    Rows of the view are packed into the next free buffer (waiting for the
    copy that last used it) and copied from there, so the host packs one part
    while the previous one crosses PCIe.  The view may be reused on return.
    """

    def __init__(self, buffers: int = STAGE_BUFFERS, nbytes: int = STAGE_BYTES) -> None:
        self._nbytes = nbytes
        self._ring: list[np.ndarray | None] = [None] * buffers
        self._events = [cuda.event() for _ in range(buffers)]
        self._used = [False] * buffers
        self._next = 0

    def to_device(self, src: np.ndarray, dst, stream) -> None:
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
            dst[r0 : r0 + part.shape[0]].copy_to_device(staged, stream=stream)
            self._events[i].record(stream)
            self._used[i] = True

    @property
    def nbytes(self) -> int:
        return sum(buffer.nbytes for buffer in self._ring if buffer is not None)

    def _buffer(self, i: int, nbytes: int) -> np.ndarray:
        buffer = self._ring[i]
        if buffer is None or buffer.size < nbytes:  # free: its last copy was waited for
            self._ring[i] = buffer = cuda.pinned_array(max(nbytes, self._nbytes), dtype=np.uint8)
        return buffer

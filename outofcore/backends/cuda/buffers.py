"""Device and pinned host buffers of the CUDA tile engine, and the copies between them.

* :class:`DeviceBuffer`: a flat device allocation viewed as arrays of any shape.
* :class:`PinnedBuffer`: a flat pinned host allocation viewed as flat arrays
  (the engine's host ``C``).
* :class:`PinnedPool`: pinned host blocks the engine hands out for panels and takes
  back when the last view of one is gone; it only grows, so tiles of new sizes
  (edge tiles, diagonal Gram tiles) reuse blocks instead of pinning memory again.
* :class:`PanelSlot`: one of the two device panel slots (double buffering) and
  the events that guard it.
* :func:`copy_to_device`: a host view of any layout into a C-contiguous device
  array without packing it on the host: rows with a pitch go as one 2-D copy
  (``cuMemcpy2DAsync``), a transposed view as a 2-D copy of its transpose into a
  device scratch slice and a transpose kernel; only a view strided both ways goes
  through the :class:`Stager`'s ring of pinned buffers.
* :func:`make_stream`: a stream that does not synchronise with the legacy default stream.

Each engine holds its own; nothing here is shared between threads.
"""

from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import cuda
from numba.cuda import config as cuda_config

from outofcore.backends.cuda.transpose import launch_transpose

GROWTH = 1 << 16  # device buffers grow in steps of 64 KiB
#: Pinned staging buffers in the ring, and the bytes of each.
STAGE_BUFFERS = 4
STAGE_BYTES = 8 << 20


def make_stream():
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

    def free(self) -> None:
        """Drop the allocation (the caller has synchronised every stream that used it)."""
        self._raw = None


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

    def __init__(self) -> None:
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
                self._blocks.append(cuda.pinned_array(max(nbytes, 1), dtype=np.uint8))
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


@dataclass
class PanelSlot:
    """One of the two device panel slots, with the events that guard it."""

    a: DeviceBuffer = field(default_factory=DeviceBuffer)
    b: DeviceBuffer = field(default_factory=DeviceBuffer)
    copied: Any = field(default_factory=cuda.event)
    consumed: Any = field(default_factory=cuda.event)
    in_use: bool = False  # ``consumed`` has been recorded at least once


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


def copy_rows_to_device(src: np.ndarray, dst, stream) -> None:
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


def copy_to_device(
    src: np.ndarray, dst, stream, *, scratch, stager: Stager, before_grow=None
) -> str:
    """Copy the host view ``src`` into the C-contiguous device array ``dst`` on ``stream``.

    ``scratch`` is a :class:`DeviceBuffer` a ``"columns"`` view goes through (its
    transpose lands there, then a kernel transposes it into ``dst``; ``before_grow``
    runs before it is made larger, as :meth:`DeviceBuffer.view` says); ``stager``
    packs a ``"strided"`` view.  Returns the layout (:func:`layout`).  ``src`` may be
    reused once the stream has passed these copies.
    """
    kind = layout(src)
    if kind == "contiguous":
        dst.copy_to_device(src, stream=stream)
    elif kind == "rows":
        copy_rows_to_device(src, dst, stream)
    elif kind == "columns":
        rows, cols = src.shape
        staged = scratch.view((cols, rows), src.dtype, before_grow=before_grow)
        copy_rows_to_device(src.T, staged, stream)
        launch_transpose(staged, dst, stream=stream)
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

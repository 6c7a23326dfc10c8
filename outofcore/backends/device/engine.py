"""The device tile engine: host tiles stream through device memory in device tiles.

Written once against the device seam (:class:`~outofcore.backends.device.runtime.
DeviceRuntime`): it runs on numba-cuda (:class:`outofcore.backends.cuda.engine.CudaEngine`,
the chip or numba's simulator) and on the timed device
(:class:`outofcore.backends.timed.TimedEngine`), and imports no GPU library.

One :class:`DeviceEngine` per worker thread owns four non-blocking streams (operand
copies, compute, and one per device ``C`` buffer), two device panel slots (double
buffering), two device ``C`` buffers, a device scratch slice for transposed
operands, a pinned host ``C`` buffer, a pool of pinned panel blocks and a small
ring of pinned staging buffers (:mod:`outofcore.backends.device.buffers`); all are
allocated once and grown when a larger tile arrives.

The device tiling of each host tile comes from :func:`outofcore.planner.device_plan.plan_device`
with the engine's device budget: the smaller of its share of the process's device
budget (:class:`~outofcore.backends.device.share.DeviceShare`: ``fraction`` of the free
device memory, measured when the first engine on the device is made, divided among the
engines alive on it, one per task thread) and the job's setting
(:meth:`DeviceEngine.set_device_memory`, ``--device-memory``).

**Resident** (the whole host tile fits): ``C`` stays on the device across all
host panels; each host panel is streamed in ``dk``-deep slices::

    copy stream:     wait(slot consumed) -> H2D A slice, B slice -> record(slot copied)
    compute stream:  wait(slot copied)   -> kernel                -> record(slot consumed)

and ``finish_tile`` copies ``C`` back once.

**Sub-tiled** (it does not fit): the host accumulator is pinned host memory,
laid out device tile by device tile (each one contiguous, so every ``C`` copy
is one DMA).  Device tiles alternate between two device ``C`` buffers, each with
its own stream, so one tile's store and the next one's load overlap the kernels.
For each host panel and each device tile ``i`` (buffer ``j = i % 2``)::

    C stream j:      [H2D C_sub, unless first panel] -> record(C ready j)
    compute stream:  wait(C ready j), then the slices as above -> record(C done j)
    C stream j:      wait(C done j) -> D2H C_sub

The same device tile always uses the same buffer and stream, so its load of the
next panel follows its store of this one; a buffer's next load follows its store.

``finish_tile`` rearranges the accumulator into a row-major tile, one strip of
device-tile rows at a time (:mod:`outofcore.backends.device.accumulator`).

Either way ``accumulate`` returns once the copies that read the host panels
are done, so the caller may decode the next panel into the same buffers while
kernels still run.  Host views that are not contiguous are not packed on the host
(:func:`outofcore.backends.device.buffers.copy_to_device`): a slice shallower than its
panel or narrower than its tile is one 2-D copy, a transposed panel (``--transpose-a``,
a Gram tile) a 2-D copy of its transpose and a device transpose.  The first panel
of a tile overwrites ``C`` (no memset); a tile with no panel is zero.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from outofcore.backends.device import buffers
from outofcore.backends.device.accumulator import device_tile_block, to_row_major
from outofcore.backends.device.buffers import (
    DeviceBuffer,
    PanelSlot,
    PinnedBuffer,
    PinnedPool,
    Stager,
    copy_to_device,
    layout,
)
from outofcore.backends.device.event_timer import EventTimer
from outofcore.backends.device.runtime import DeviceArray, DeviceRuntime
from outofcore.backends.device.share import DEVICE_FRACTION, DeviceShare
from outofcore.backends.protocol import EngineCapabilities, unsupported
from outofcore.errors import InputError
from outofcore.operands.dtypes import COMPUTE_DTYPES, Limbs
from outofcore.planner.device_plan import DevicePlan, plan_device

__all__ = ["DeviceEngine"]


@dataclass
class _Tile:
    """The tile being computed: its shape, dtype and (from the first panel) device plan."""

    shape: tuple[int, int]
    dtype: np.dtype
    plan: DevicePlan | None = None
    fresh: bool = True  # no panel multiplied yet
    host: np.ndarray | None = None  # sub-tiled: the flat pinned accumulator


class DeviceEngine:
    """Tile engine on one device behind a runtime (see ``outofcore.backends.protocol``).

    Parameters
    ----------
    name
        The backend name the engine was made for (``"cuda"``, ``"cupy"``, ``"timed"``).
    runtime
        The device's runtime: every stream, event, buffer, copy and kernel goes through it.
    fraction
        Share of the device's free memory the engines of this process may use
        together (:class:`~outofcore.backends.device.share.DeviceShare`; the first engine
        on the device sets it).
    device_memory
        A further limit in bytes (``--device-memory``); see :meth:`set_device_memory`.

    Attributes
    ----------
    device_plan
        The device tiling of the current (or last) tile, made at its first
        panel for the job's panel depth (:meth:`configure`).
    transfer_bytes
        ``{"h2d": ..., "d2h": ...}``: bytes the current (or last) tile moved
        across PCIe so far.
    copy_layouts
        How many operand slices went to the device in each way
        (:func:`outofcore.backends.device.buffers.layout`), over the engine's life.
    """

    #: The whole tile comes back from the device at :meth:`finish_tile` (a device tiling
    #: cuts C into sub-tiles, so finished row blocks do not exist earlier); no syrk kernel
    #: (a Gram tile's panels go through :meth:`accumulate`) and no limbs (the CPU's).
    capabilities = EngineCapabilities(timings=True, device=True)

    def __init__(
        self,
        name: str,
        runtime: DeviceRuntime,
        *,
        fraction: float = DEVICE_FRACTION,
        device_memory: int | None = None,
    ) -> None:
        if not 0 < fraction <= 1:
            raise InputError(f"fraction must be in (0, 1], got {fraction!r}")
        self.name = name
        self.runtime = runtime
        self._share = DeviceShare.join(self, fraction, runtime)
        self._limit: int | None = None
        self._panel_depth: int | None = None
        self.set_device_memory(device_memory)
        self._copy_stream = runtime.stream()
        self._compute_stream = runtime.stream()
        self._c_streams = (runtime.stream(), runtime.stream())
        self._slots = (PanelSlot(runtime), PanelSlot(runtime))
        self._next_slot = 0
        self._c_dev = (DeviceBuffer(runtime), DeviceBuffer(runtime))
        self._c_ready = (runtime.event(), runtime.event())
        self._c_done = (runtime.event(), runtime.event())
        self._scratch = DeviceBuffer(runtime)
        self._c_host = PinnedBuffer(runtime)
        self._pool = PinnedPool(runtime)
        self._stager = Stager(runtime)
        self._tile: _Tile | None = None
        self.device_plan: DevicePlan | None = None
        self.transfer_bytes = {"h2d": 0, "d2h": 0}
        self.copy_layouts: Counter[str] = Counter()
        self._timer = EventTimer(runtime)
        self._timings: dict[str, float] = {}

    @property
    def budget_bytes(self) -> int:
        """Device bytes a tile may use: this engine's share, capped by the setting."""
        share = self._share.per_engine()
        return share if self._limit is None else min(share, self._limit)

    def set_device_memory(self, device_memory: int | None) -> None:
        """Cap the device bytes of the following tiles at ``device_memory`` (None: no cap).

        Raises
        ------
        InputError
            Unless ``device_memory`` is None or a positive integer.
        """
        if device_memory is not None and (
            isinstance(device_memory, bool)
            or not isinstance(device_memory, int)
            or device_memory < 1
        ):
            raise InputError(f"device_memory = {device_memory!r}: need a positive number of bytes")
        self._limit = device_memory

    def configure(
        self,
        *,
        device_memory: int | None = None,
        panel_depth: int | None = None,
        tiles_in_flight: int = 1,
    ) -> None:
        """Settings of a job for the tiles that follow (a tile task calls this first).

        Parameters
        ----------
        device_memory
            Cap on the device bytes (:meth:`set_device_memory`); None: no cap.
        panel_depth
            Depth of the job's host k-panels (the plan's ``tk``), which bounds
            the device slices; None: the depth of each tile's first panel.
        tiles_in_flight
            Tasks of the worker on this device at once, each with its own engine: each
            engine's share is at most the device budget over that many
            (:meth:`~outofcore.backends.device.share.DeviceShare.expect`).
        """
        if panel_depth is not None and (
            isinstance(panel_depth, bool) or not isinstance(panel_depth, int) or panel_depth < 1
        ):
            raise InputError(f"panel_depth = {panel_depth!r}: need an integer >= 1")
        if (
            isinstance(tiles_in_flight, bool)
            or not isinstance(tiles_in_flight, int)
            or tiles_in_flight < 1
        ):
            raise InputError(f"tiles_in_flight = {tiles_in_flight!r}: need an integer >= 1")
        self.set_device_memory(device_memory)
        self._panel_depth = panel_depth
        self._share.expect(tiles_in_flight)

    def host_buffer(self, size: int, dtype: np.dtype) -> np.ndarray:
        """Return a flat pinned host array of ``size`` elements to decode panels into.

        It comes from the engine's pool (:class:`outofcore.backends.device.buffers.PinnedPool`)
        and goes back to it when the array and every view of it are gone.
        """
        dtype = np.dtype(dtype)
        return self._pool.take(int(size) * dtype.itemsize).view(dtype)

    def start_tile(
        self, shape: tuple[int, int], dtype: np.dtype, limbs: Limbs | None = None
    ) -> None:
        """Begin a tile of ``shape``; the accumulator starts at zero.  Integer products
        split into limbs (``limbs``) run on the CPU engine: the job plans them there, and
        ``limbs`` here raises BackendError (no ``limbs`` capability)."""
        dtype = np.dtype(dtype)
        if limbs is not None:
            raise unsupported(self.name, "limbs")
        if dtype not in COMPUTE_DTYPES:
            names = ", ".join(str(d) for d in COMPUTE_DTYPES)
            raise InputError(f"unsupported dtype {dtype}; the GPU engine takes {names}")
        m, n = (int(s) for s in shape)
        if m < 0 or n < 0:
            raise InputError(f"tile shape must be non-negative, got {tuple(shape)}")
        self._tile = _Tile((m, n), dtype)
        self._timings = {}
        self.device_plan = None
        self.transfer_bytes = {"h2d": 0, "d2h": 0}

    def accumulate(self, a_panel: np.ndarray, b_panel: np.ndarray) -> None:
        """``C += a_panel @ b_panel`` on the device; the host panels are free on return."""
        tile = self._require_tile()
        a_panel, b_panel = np.asarray(a_panel), np.asarray(b_panel)
        _check_panels(tile, a_panel, b_panel)
        (m, n), depth = tile.shape, a_panel.shape[1]
        if depth == 0 or m == 0 or n == 0:
            return
        if tile.plan is None:  # the job's panel depth (else this first panel's) bounds the slices
            transposed = "columns" in (layout(a_panel), layout(b_panel))
            depth_bound = max(depth, self._panel_depth or 0)
            tile.plan = self.device_plan = self._plan(tile, depth_bound, transposed)
            self._fit_device_buffers(tile.plan)
        plan = tile.plan
        last = None
        for index, (r0, r1, c0, c1) in enumerate(plan.subtiles()):
            # A device tile keeps its C buffer (and stream) from panel to panel: its load
            # for this panel is ordered after its store of the last one on that stream.
            which = index % 2 if not plan.resident else 0
            c = self._c_dev[which].view(
                (r1 - r0, c1 - c0), tile.dtype, before_grow=self._synchronize
            )
            if not plan.resident:
                self._begin_subtile(tile, c, r0, c0, which)
            for d0 in range(0, depth, plan.dk):
                d1 = min(depth, d0 + plan.dk)
                last = self._slice(
                    a_panel[r0:r1, d0:d1], b_panel[d0:d1, c0:c1], c, not (tile.fresh and d0 == 0)
                )
            if not plan.resident:
                self._end_subtile(tile, c, r0, c0, which)
        tile.fresh = False
        last.copied.synchronize()  # every host panel read is done: the caller may reuse them

    def accumulate_rows(
        self, row0: int, panels: Sequence[tuple[np.ndarray, np.ndarray]]
    ) -> np.ndarray:
        """Not on this engine (no ``row_blocks`` capability): tasks use :meth:`accumulate`."""
        raise unsupported(self.name, "row_blocks")

    def accumulate_gram(self, a_panel: np.ndarray) -> None:
        """Not on this engine (no ``gram`` capability): a Gram tile's panels go through
        :meth:`accumulate`."""
        raise unsupported(self.name, "gram")

    def finish_tile(self) -> np.ndarray:
        """Return the tile as a C-ordered pinned host array, valid until the next start_tile."""
        tile = self._require_tile()
        (m, n), dtype = tile.shape, tile.dtype
        self._tile = None
        if tile.fresh:  # no panel was multiplied (k == 0): the product is zero
            out = self._c_host.view(m * n, dtype).reshape(m, n)
            out[...] = 0
            return out
        plan = tile.plan
        if plan.resident:
            out = self._c_host.view(m * n, dtype).reshape(m, n)
            c = self._c_dev[0].view((m, n), dtype)
            with self._timer.timed("copy_seconds", self._compute_stream):
                self.runtime.to_host(c, out, self._compute_stream)
            self.transfer_bytes["d2h"] += out.nbytes
            self._synchronize()
            self._timings = self._timer.collect()
            return out
        self._synchronize()  # every store has landed in the accumulator
        self._timings = self._timer.collect()
        return to_row_major(tile.host, m, n, plan)

    def timings(self) -> dict[str, float]:
        """The last tile's kernel and copy seconds (the runtime's events) and, once, the
        engine's first launch (:class:`outofcore.backends.device.event_timer.EventTimer`)."""
        return dict(self._timings)

    def wrote(self, nbytes: int) -> None:
        """Nothing to do on a real device: the write took what it took."""

    def release(self) -> None:
        """Keep every buffer: pinned and device allocations are too slow to repeat per task."""

    def kept_bytes(self) -> int:
        """Pinned host bytes kept between tiles: the host ``C`` buffer, the staging ring and
        the pool's free panel blocks (blocks in use are the task's panels, counted there)."""
        return self._c_host.nbytes + self._stager.nbytes + self._pool.free_bytes

    def device_buffer_bytes(self) -> int:
        """Device bytes the engine holds now (its buffers grow in 64 KiB steps)."""
        held = [*self._c_dev, self._scratch]
        held += [slot.a for slot in self._slots] + [slot.b for slot in self._slots]
        return sum(buffer.nbytes for buffer in held)

    # -- internals ---------------------------------------------------------------------------
    def _plan(self, tile: _Tile, depth: int, transposed: bool = False) -> DevicePlan:
        m, n = tile.shape
        return plan_device(
            m,
            n,
            depth,
            tile.dtype.itemsize,
            self.budget_bytes,
            block=self.runtime.block(tile.dtype),
            transposed=transposed,
        )

    def _fit_device_buffers(self, plan: DevicePlan) -> None:
        """Free the device buffers when they hold more than ``plan``'s budget.

        A smaller share (another thread's engine joined), a lower ``--device-memory``
        or a mode that needs fewer buffers: the buffers are made again at their new
        sizes, so the engine never holds more than the budget (up to the 64 KiB steps).
        """
        count = len(self._c_dev) + 1 + 2 * len(self._slots)
        if self.device_buffer_bytes() <= plan.budget_bytes + count * buffers.GROWTH:
            return  # within the budget, up to each buffer's last step
        self._synchronize()
        for buffer in (*self._c_dev, self._scratch):
            buffer.free()
        for slot in self._slots:
            slot.a.free()
            slot.b.free()

    def _slice(self, a: np.ndarray, b: np.ndarray, c: DeviceArray, accumulate: bool) -> PanelSlot:
        """Copy one slice pair into the next slot and queue ``c (+)= a @ b`` behind it."""
        slot = self._slots[self._next_slot]
        self._next_slot ^= 1
        copy, compute = self._copy_stream, self._compute_stream
        if slot.in_use:  # the kernel that last read this slot must be done first
            slot.consumed.wait(copy)
        a_dev = slot.a.view(a.shape, a.dtype, before_grow=self._synchronize)
        b_dev = slot.b.view(b.shape, b.dtype, before_grow=self._synchronize)
        with self._timer.timed("copy_seconds", copy):
            self._to_device(a, a_dev, copy)
            self._to_device(b, b_dev, copy)
        slot.copied.record(copy)
        slot.copied.wait(compute)
        with self._timer.launch(compute):
            self.runtime.gemm(a_dev, b_dev, c, accumulate, compute)
        slot.consumed.record(compute)
        slot.in_use = True
        return slot

    def _to_device(self, src: np.ndarray, dst: DeviceArray, stream: Any) -> None:
        kind = copy_to_device(
            self.runtime,
            src,
            dst,
            stream,
            scratch=self._scratch,
            stager=self._stager,
            before_grow=self._synchronize,
        )
        self.copy_layouts[kind] += 1
        self.transfer_bytes["h2d"] += src.nbytes

    def _begin_subtile(self, tile: _Tile, c: DeviceArray, r0: int, c0: int, which: int) -> None:
        """Load ``C_sub`` into buffer ``which`` (after the first panel).

        Its kernels wait for that load and for the last store from the same buffer,
        both on the buffer's own stream.
        """
        if tile.host is None:
            m, n = tile.shape
            tile.host = self._c_host.view(m * n, tile.dtype)
        stream = self._c_streams[which]
        if not tile.fresh:
            block = device_tile_block(tile.host, tile.shape[1], c.shape, r0, c0)
            self.runtime.to_device(block, c, stream)
            self.transfer_bytes["h2d"] += block.nbytes
        self._c_ready[which].record(stream)
        self._c_ready[which].wait(self._compute_stream)

    def _end_subtile(self, tile: _Tile, c: DeviceArray, r0: int, c0: int, which: int) -> None:
        """Store ``C_sub`` from buffer ``which`` once its kernels are done."""
        stream = self._c_streams[which]
        self._c_done[which].record(self._compute_stream)
        self._c_done[which].wait(stream)
        block = device_tile_block(tile.host, tile.shape[1], c.shape, r0, c0)
        self.runtime.to_host(c, block, stream)
        self.transfer_bytes["d2h"] += block.nbytes

    def _synchronize(self) -> None:
        for stream in (self._copy_stream, *self._c_streams, self._compute_stream):
            stream.synchronize()

    def _require_tile(self) -> _Tile:
        if self._tile is None:
            raise RuntimeError(f"{type(self).__name__}: start_tile() was not called")
        return self._tile


def _check_panels(tile: _Tile, a_panel: np.ndarray, b_panel: np.ndarray) -> None:
    """Raise InputError unless the panels are 2-D, of the tile's dtype, and fit its shape."""
    m, n = tile.shape
    if a_panel.ndim != 2 or b_panel.ndim != 2:
        raise InputError(f"panels must be 2-D, got a {a_panel.shape} and b {b_panel.shape}")
    if a_panel.shape[0] != m or b_panel.shape[1] != n or a_panel.shape[1] != b_panel.shape[0]:
        raise InputError(
            f"panels a {a_panel.shape} and b {b_panel.shape} do not fit the "
            f"{m}x{n} tile (need a: ({m}, s), b: (s, {n}))"
        )
    if a_panel.dtype != tile.dtype or b_panel.dtype != tile.dtype:
        raise InputError(
            f"panel dtypes a {a_panel.dtype}, b {b_panel.dtype} differ from the tile's {tile.dtype}"
        )

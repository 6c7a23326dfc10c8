"""The device level of the two-level plan: cutting a host tile into device tiles.

Pure arithmetic, like :mod:`outofcore.planner.plan`: nothing here imports Dask, numba
or zarr.  A host tile ``tm×tn`` (within the host budget) is multiplied by a
GPU engine whose device memory may be smaller.  :func:`plan_device` chooses a
device tiling ``(dm, dn, dk)`` whose device bytes::

    w * (c*dm*dn + 2*dk*(dm + dn) + t*dk*max(dm, dn))

fit the device budget: ``c`` C buffers (1 resident, 2 sub-tiled: one is stored while the
next is computed), two panel slots (double buffering) and, when an operand arrives
transposed (``t = 1``), one slice of scratch it is copied into before a device transpose:

* **resident** (preferred): ``dm = tm, dn = tn``.  ``C`` stays on the device
  across every k-panel and is copied back once; host panels deeper than
  ``dk`` are streamed in ``dk`` slices.
* **sub-tiled**: ``dm×dn`` sub-tiles that minimise the ``A`` and ``B`` bytes
  crossing PCIe (``cols*tm + rows*tn`` per unit of k; square when ``dm*dn``
  is the limit, full-height or full-width strips when those read less).
  For each host panel and each sub-tile the engine loads ``C_sub`` (after
  the first panel), streams ``dk`` slices of ``A_sub``/``B_sub``,
  multiplies, and stores ``C_sub``.

Sizes are multiples of the kernel's block tile ``(bm, bn, bk)`` unless they
take the whole host extent.  PCIe bytes per host tile of inner dimension
``k`` in ``P`` host panels, with ``R×Q`` device tiles::

    H2D  w * (Q*tm*k + R*k*tn)  +  w * (P - 1) * tm*tn   (C loads, sub-tiled only)
    D2H  w * tm*tn              (resident)   or   w * P * tm*tn   (sub-tiled)

Each ``A`` host panel crosses PCIe once per device-tile column and each ``B``
host panel once per device-tile row; zarr is still read once per host tile.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from outofcore.errors import BudgetError, InputError
from outofcore.planner.memory import mib, round_up

if TYPE_CHECKING:
    from outofcore.planner.plan import Plan

#: Device panels in flight (one multiplied, one being copied).
DEVICE_PANELS = 2
#: Device C buffers of a sub-tiled host tile: one device tile's C is stored while the
#: next one is loaded and multiplied (a resident tile has one).
SUBTILE_C_BUFFERS = 2
#: Slice depth a sub-tiling starts from before its sub-tiles are sized; the
#: budget left over after sizing deepens it (up to the host panel depth).
#: Every launch reads and writes its C tile in device memory: ``dk / w``
#: multiply-adds per byte, so 256 keeps that traffic well under the kernel's
#: time (an H100 needs about 15 flops per byte of HBM to stay compute-bound).
SUBTILE_DK = 256


def device_bytes(
    dm: int, dn: int, dk: int, itemsize: int, *, c_buffers: int = 1, transposed: bool = False
) -> int:
    """Device bytes of ``c_buffers`` ``dm×dn`` C tiles with two ``dk``-deep panel slots.

    ``transposed`` adds the scratch slice a transposed operand is copied into.
    """
    scratch = dk * max(dm, dn) if transposed else 0
    return itemsize * (c_buffers * dm * dn + DEVICE_PANELS * dk * (dm + dn) + scratch)


def kernel_block(itemsize: int, blocks: Mapping[int, tuple[int, int, int]]) -> tuple[int, int, int]:
    """The kernel's block tile ``(bm, bn, bk)`` for ``itemsize``-byte elements, from a
    backend's block table ``blocks`` (:attr:`outofcore.planner.gpu_rates.DeviceRates.blocks`).

    Raises
    ------
    InputError
        For an element size the table has no kernel for.
    """
    try:
        return blocks[itemsize]
    except KeyError:
        sizes = ", ".join(str(size) for size in sorted(blocks)) or "none"
        raise InputError(
            f"itemsize = {itemsize}: the GPU kernels take elements of {sizes} bytes"
        ) from None


@dataclass(frozen=True)
class DevicePlan:
    """How one host tile goes through device memory; see the module docstring."""

    tm: int
    tn: int
    tk: int
    k: int
    itemsize: int
    budget_bytes: int
    block: tuple[int, int, int]
    dm: int
    dn: int
    dk: int
    transposed: bool = False

    @property
    def c_buffers(self) -> int:
        """Device C buffers: one resident, :data:`SUBTILE_C_BUFFERS` sub-tiled."""
        return 1 if self.resident else SUBTILE_C_BUFFERS

    @property
    def resident(self) -> bool:
        """True when the whole host tile stays on the device."""
        return self.dm >= self.tm and self.dn >= self.tn

    @property
    def rows(self) -> int:
        """Device tiles down the host tile."""
        return math.ceil(self.tm / self.dm)

    @property
    def cols(self) -> int:
        """Device tiles across the host tile."""
        return math.ceil(self.tn / self.dn)

    @property
    def host_panels(self) -> int:
        """Host k-panels of one tile."""
        return math.ceil(self.k / self.tk)

    @property
    def device_bytes(self) -> int:
        """Device bytes the tiling needs (at most :attr:`budget_bytes`)."""
        return device_bytes(
            self.dm,
            self.dn,
            self.dk,
            self.itemsize,
            c_buffers=self.c_buffers,
            transposed=self.transposed,
        )

    @property
    def h2d_bytes(self) -> int:
        """Host-to-device bytes per host tile: A and B slices, and C loads when sub-tiled."""
        w, panels = self.itemsize, self.host_panels
        operands = w * (self.cols * self.tm * self.k + self.rows * self.k * self.tn)
        c_loads = 0 if self.resident else w * (panels - 1) * self.tm * self.tn
        return operands + c_loads

    @property
    def d2h_bytes(self) -> int:
        """Device-to-host bytes per host tile: C once (resident) or once per host panel."""
        stores = 1 if self.resident else self.host_panels
        return self.itemsize * stores * self.tm * self.tn

    @property
    def pcie_bytes(self) -> int:
        """Bytes across PCIe per host tile, both directions."""
        return self.h2d_bytes + self.d2h_bytes

    def subtiles(self) -> list[tuple[int, int, int, int]]:
        """``(row0, row1, col0, col1)`` of every device tile, row by row."""
        return [
            (r0, min(r0 + self.dm, self.tm), c0, min(c0 + self.dn, self.tn))
            for r0 in range(0, self.tm, self.dm)
            for c0 in range(0, self.tn, self.dn)
        ]

    def summary(self) -> dict:
        """The tiling and its predicted traffic as plain JSON-ready values."""
        return {
            "device_budget_bytes": self.budget_bytes,
            "mode": "resident" if self.resident else "sub-tiled",
            "host_tile": [self.tm, self.tn],
            "host_tk": self.tk,
            "device_tile": [self.dm, self.dn],
            "dk": self.dk,
            "device_tiles": [self.rows, self.cols],
            "device_bytes": self.device_bytes,
            "c_buffers": self.c_buffers,
            "transposed_scratch": self.transposed,
            "kernel_block": list(self.block),
            "h2d_bytes_per_tile": self.h2d_bytes,
            "d2h_bytes_per_tile": self.d2h_bytes,
            "pcie_bytes_per_tile": self.pcie_bytes,
        }


def plan_device(
    tm: int,
    tn: int,
    tk: int,
    itemsize: int,
    budget_bytes: int,
    *,
    block: tuple[int, int, int],
    k: int | None = None,
    transposed: bool = False,
) -> DevicePlan:
    """Choose the device tiling of a ``tm×tn`` host tile with ``tk``-deep host panels.

    Parameters
    ----------
    tm, tn
        Host tile shape.
    tk
        Depth of the host k-panels (the deepest one).
    itemsize
        Bytes per element.
    budget_bytes
        Device memory the engine may use.
    k
        Inner dimension of the product (the host panels together); ``tk``
        (one panel) when None.  Only the predicted PCIe bytes use it.
    block
        The kernel's block tile ``(bm, bn, bk)`` (:func:`kernel_block` of its backend's table).
    transposed
        An operand arrives transposed (a strided view whose rows are the panel's
        columns): its slices go through a device scratch slice (:func:`device_bytes`).

    Returns
    -------
    DevicePlan
        Resident when one C tile with ``min(tk, bk)``-deep slices fits, with the
        deepest slices that fit; otherwise the sub-tiles (two C buffers) that
        move the fewest bytes.

    Raises
    ------
    BudgetError
        When even one kernel block with ``min(tk, bk)``-deep slices does not fit.
    InputError
        For sizes below 1.
    """
    k = tk if k is None else k
    for name, value in (("tm", tm), ("tn", tn), ("tk", tk), ("k", k), ("itemsize", itemsize)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{name} = {value!r}: need an integer >= 1")
    if budget_bytes < 1:
        raise InputError(f"device budget = {budget_bytes} bytes: need at least 1")
    if min(block) < 1:
        raise InputError(f"kernel block = {tuple(block)}: every size must be >= 1")
    room = DeviceRoom(tm, tn, tk, itemsize, budget_bytes, tuple(block), transposed)
    bm, bn, bk = room.block

    def plan(dm: int, dn: int, dk: int) -> DevicePlan:
        return DevicePlan(tm, tn, tk, k, itemsize, budget_bytes, room.block, dm, dn, dk, transposed)

    if room.fits(tm, tn, min(tk, bk)):
        return plan(tm, tn, room.deepest(tm, tn))
    small_m, small_n, small_k = min(tm, bm), min(tn, bn), min(tk, bk)
    if not room.fits(small_m, small_n, small_k):
        raise room.too_small()
    # Slices start SUBTILE_DK deep (shallower if even the smallest tile needs it).
    dk = min(tk, max(small_k, _round_down(SUBTILE_DK, bk)))
    while dk > small_k and not room.fits(small_m, small_n, dk):
        dk = max(small_k, _round_down(dk // 2, bk))
    dm, dn = room.fewest_bytes(dk)
    return plan(dm, dn, max(dk, room.deepest(dm, dn)))


@dataclass(frozen=True)
class DeviceRoom:
    """The arithmetic of a ``tm×tn`` host tile's device budget: which device tiles fit with
    how deep slices, and the tiling that moves the fewest bytes (:func:`plan_device`)."""

    tm: int
    tn: int
    tk: int
    itemsize: int
    budget_bytes: int
    block: tuple[int, int, int]
    transposed: bool

    @property
    def elements(self) -> int:
        """Elements the budget holds."""
        return self.budget_bytes // self.itemsize

    def per_k(self, dm: int, dn: int) -> int:
        """Elements per unit of slice depth: the panel slots and the transpose scratch."""
        scratch = max(dm, dn) if self.transposed else 0
        return DEVICE_PANELS * (dm + dn) + scratch

    def c_buffers(self, dm: int, dn: int) -> int:
        """Device C buffers of a ``dm×dn`` device tile: one if it holds the host tile."""
        return 1 if dm >= self.tm and dn >= self.tn else SUBTILE_C_BUFFERS

    def fits(self, dm: int, dn: int, dk: int) -> bool:
        """Whether ``dm×dn`` C buffers with ``dk``-deep slices fit the budget."""
        return self.c_buffers(dm, dn) * dm * dn + dk * self.per_k(dm, dn) <= self.elements

    def deepest(self, dm: int, dn: int) -> int:
        """Deepest slice that fits beside the ``dm×dn`` C buffers (0 if none)."""
        room = (self.elements - self.c_buffers(dm, dn) * dm * dn) // self.per_k(dm, dn)
        return self.tk if room >= self.tk else _round_down(room, self.block[2])

    def fewest_bytes(self, dk: int) -> tuple[int, int]:
        """The sub-tiles ``(dm, dn)`` with ``dk``-deep slices that move the fewest bytes.

        Per unit of k, A crosses PCIe once per device column and B once per device row:
        minimise ``cols*tm + rows*tn`` over the heights, each with the widest width that
        fits (with ``dm*dn`` bounded, the optimum is square).  Ties: larger tiles.
        """
        (bm, bn, _), tm, tn = self.block, self.tm, self.tn
        best: tuple[tuple[int, int], int, int] | None = None
        heights = {
            min(tm, round_up(math.ceil(tm / r), bm)) for r in range(1, math.ceil(tm / bm) + 1)
        }
        for dm in sorted(heights, reverse=True):
            dn = widest(dm, bn, tn, lambda height, width: self.fits(height, width, dk))
            if dn == 0:
                continue
            dn = min(tn, round_up(math.ceil(tn / math.ceil(tn / dn)), bn))  # spread evenly
            score = (math.ceil(tn / dn) * tm + math.ceil(tm / dm) * tn, -dm * dn)
            if best is None or score < best[0]:
                best = (score, dm, dn)
        if best is None:  # unreachable: the smallest tile fits  # pragma: no cover
            raise BudgetError(f"no device tile fits {self.budget_bytes} bytes")
        return best[1], best[2]

    def too_small(self) -> BudgetError:
        """The error of a budget in which not even one kernel block fits, naming the bytes."""
        (bm, bn, bk), tm, tn, itemsize = self.block, self.tm, self.tn, self.itemsize
        small_m, small_n, small_k = min(tm, bm), min(tn, bn), min(self.tk, bk)
        small_c = self.c_buffers(small_m, small_n)
        needed = device_bytes(
            small_m, small_n, small_k, itemsize, c_buffers=small_c, transposed=self.transposed
        )
        whole = device_bytes(tm, tn, small_k, itemsize, transposed=self.transposed)
        extra = f" + {small_k}*{max(small_m, small_n)}" if self.transposed else ""
        buffers = f"{small_c}*" if small_c > 1 else ""
        budget = self.budget_bytes
        return BudgetError(
            f"device budget of {budget} bytes ({mib(budget)}) is too small: the "
            f"smallest device tile, {small_m}x{small_n} with {small_k}-deep double-buffered "
            f"panels, needs {needed} bytes ({mib(needed)}) = {itemsize}*({buffers}{small_m}*"
            f"{small_n} + 2*{small_k}*({small_m}+{small_n}){extra}); the whole {tm}x{tn} host "
            f"tile would need {whole} bytes ({mib(whole)}); raise the device memory "
            "(--device-memory)"
        )


def job_pcie_bytes(
    shapes: Iterable[tuple[int, int]],
    tk: int,
    k: int,
    itemsize: int,
    budget_bytes: int,
    block: tuple[int, int, int],
    transposed: bool = False,
) -> int:
    """Predicted PCIe bytes of a whole job: :attr:`DevicePlan.pcie_bytes` over its host tiles,
    cut in the kernel's ``block`` tiles."""
    cache: dict[tuple[int, int], int] = {}
    total = 0
    for tm, tn in shapes:
        if tm < 1 or tn < 1:
            continue
        if (tm, tn) not in cache:
            device = plan_device(
                tm, tn, tk, itemsize, budget_bytes, k=k, block=block, transposed=transposed
            )
            cache[(tm, tn)] = device.pcie_bytes
        total += cache[(tm, tn)]
    return total


def widest(height: int, unit: int, extent: int, within: Callable[[int, int], bool]) -> int:
    """Widest width beside ``height`` rows ``within`` the budget: ``extent``, a ``unit``
    multiple, or 0.

    Binary search over the multiples of ``unit`` (exact when ``within`` is
    monotone in the width); 0 when not even one ``unit`` fits.
    """
    if not within(height, min(extent, unit)):
        return 0
    low, high = 1, math.ceil(extent / unit)  # in units; ``low`` fits
    while low < high:
        middle = (low + high + 1) // 2
        if within(height, min(extent, middle * unit)):
            low = middle
        else:
            high = middle - 1
    return min(extent, low * unit)


def _round_down(value: int, unit: int) -> int:
    return (value // unit) * unit


def device_summary(
    plan: Plan,
    device_memory: int,
    transposed: bool,
    blocks: Mapping[int, tuple[int, int, int]],
) -> dict[str, Any]:
    """The device tiling of the plan's (largest) host tile and the job's predicted PCIe bytes.

    ``transposed``: an operand's panels reach the engine transposed (``--transpose-a/b``,
    a Gram product), so its device plan keeps a scratch slice for them.  ``blocks``: the
    backend's kernel block table (:func:`kernel_block`).
    """
    p = plan.problem
    block = kernel_block(p.itemsize, blocks)
    options = {"k": p.k, "transposed": transposed, "block": block}
    device = plan_device(plan.tm, plan.tn, plan.tk, p.itemsize, device_memory, **options)
    shapes = (t.shape for t in plan.tasks)
    pcie = job_pcie_bytes(
        shapes, plan.tk, p.k, p.itemsize, device_memory, block, transposed=transposed
    )
    return {**device.summary(), "pcie_bytes": pcie}

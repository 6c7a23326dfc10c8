"""The GPU worker the plan is made for: the rates of a device, as the plan uses them.

Pure arithmetic, like :mod:`outofcore.planner.plan`: nothing here imports Dask, numba or zarr.
A GPU job's tiles are ranked (:mod:`outofcore.planner.tiling`) and predicted
(:func:`outofcore.planner.model.gpu_machine`, :mod:`outofcore.machine.prediction`) with the rates
of a :class:`GpuTarget`: the kernel's FLOP/s for the job's compute dtype, the PCIe copies,
and the host's decode rate per thread times the task's decode threads (the plan's
``io_concurrency``).  On a GPU the kernel is fast and the host's decoding slow, so the
streams that decide are decoding and, for a split of k, the partial tiles written and
read back (:func:`gpu_seconds`).

The figures themselves are a backend's (:class:`DeviceRates`, handed in): the CUDA
backend's, measured on lent H100/H200 nodes, are ``outofcore.backends.cuda.rates``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from outofcore.errors import InputError
from outofcore.planner.device_plan import device_bytes, kernel_block
from outofcore.planner.io_model import touched
from outofcore.planner.plan import Panels
from outofcore.planner.problem import Problem
from outofcore.planner.workload import busiest_worker, tile_count


@dataclass(frozen=True)
class DeviceRates:
    """One GPU backend's table of rates, as the plan and the time model use them.

    The planner knows no device: a backend (``outofcore.backends.registry``) hands its own
    table in (the CUDA backend's measured H100/H200 figures are in
    ``outofcore.backends.cuda.rates``), and every GPU figure of a plan comes from it.
    """

    #: What multiplies, in words (``"kernel"``, ``"cuBLAS"``, ``"timed device"``).
    engine: str
    #: The kernel's sustained FLOP/s by compute dtype name, counted ``2·m·n·k`` for every
    #: dtype (complex products' ``8·m·n·k`` divided by 4).
    kernel_flops: Mapping[str, float]
    #: Host-device copies of pinned memory, bytes/s each way.
    pcie_bps: float
    #: Decoded bytes/s of one host decode thread.
    decode_bps_per_thread: float
    #: The output written by one worker's host thread, raw, bytes/s.
    write_bps: float
    #: Partial tiles of a split of k written next to the output and read back, bytes/s.
    scratch_write_bps: float
    scratch_read_bps: float
    #: Seconds before a single GPU's tasks flow when its worker runs in the job's process.
    start_seconds: float
    #: Seconds more where the GPUs' workers are processes of a cluster the command starts.
    cluster_start_seconds: float
    #: The kernel's block tile ``(bm, bn, bk)`` by element size: device tiles are cut in
    #: its multiples (:func:`outofcore.planner.device_plan.plan_device`).
    blocks: Mapping[int, tuple[int, int, int]]
    #: Where the figures come from, in words (for ``outofcore plan``).
    source: str = ""

    def __post_init__(self) -> None:
        rates = (self.pcie_bps, self.decode_bps_per_thread, self.write_bps)
        rates += (self.scratch_write_bps, self.scratch_read_bps, *self.kernel_flops.values())
        if not self.kernel_flops or min(rates) <= 0:
            raise InputError(f"a device's rates must be positive: {self}")


@dataclass(frozen=True)
class GpuTarget:
    """One GPU worker as the plan sees it: the rates of its kernel, copies and host."""

    #: The dtype the kernel multiplies in (a key of its :attr:`DeviceRates.kernel_flops`).
    dtype: str
    kernel_flops: float
    pcie_bps: float
    #: Decoded bytes/s of one of the host's decode threads.
    decode_bps_per_thread: float
    write_bps: float
    scratch_write_bps: float
    scratch_read_bps: float
    #: Device memory one engine may use (``--device-memory``); None: not known when the
    #: job is planned, and no tile is required to stay resident.
    device_memory: int | None = None
    #: An operand's panels reach the engine transposed (a device scratch slice each).
    transposed: bool = False
    #: The backend's name (``cuda``, ``cupy``, ...).
    backend: str = "cuda"
    #: What multiplies, in words (:attr:`DeviceRates.engine`).
    engine: str = "kernel"
    #: The kernel's block tile by element size (:attr:`DeviceRates.blocks`).
    blocks: Mapping[int, tuple[int, int, int]] = field(default_factory=dict)
    #: Where the rates come from, in words.
    source: str = ""
    #: Seconds before a single GPU's tasks flow (its worker in the job's process), and more
    #: where the GPUs' workers are processes of a cluster the command starts.
    start_seconds: float = 0.0
    cluster_start_seconds: float = 0.0
    #: Output tiles each GPU worker keeps in flight (``outofcore.planner.model.Machine``).
    tiles_in_flight: int = 1

    def __post_init__(self) -> None:
        rates = (self.kernel_flops, self.pcie_bps, self.decode_bps_per_thread)
        rates += (self.write_bps, self.scratch_write_bps, self.scratch_read_bps)
        if min(rates) <= 0:
            raise InputError(f"a GPU's rates must be positive: {self}")
        if isinstance(self.tiles_in_flight, bool) or not isinstance(self.tiles_in_flight, int):
            raise InputError(f"tiles in flight = {self.tiles_in_flight!r}: need an integer")
        if self.tiles_in_flight < 1:
            raise InputError(f"tiles in flight = {self.tiles_in_flight}: need at least 1")
        if self.device_memory is not None and self.device_memory < 1:
            raise InputError(f"device memory = {self.device_memory}: need at least 1 byte")

    def decode_bps(self, threads: int) -> float:
        """Decoded bytes/s of one worker's ``threads`` decode threads."""
        return self.decode_bps_per_thread * max(1, threads)

    def resident(self, tm: int, tn: int, tk: int, itemsize: int) -> bool:
        """Whether a ``tm×tn`` C tile stays on the device for all its panels
        (:func:`outofcore.planner.device_plan.plan_device`'s resident mode); True without a
        device budget."""
        if self.device_memory is None:
            return True
        depth = min(tk, kernel_block(itemsize, self.blocks)[2])
        needed = device_bytes(tm, tn, depth, itemsize, transposed=self.transposed)
        return needed <= self.device_memory

    def basis(self, threads: int) -> str:
        """The rates a GPU prediction rests on, in words."""
        return (
            f"{self.source or 'stated'}: {self.engine} "
            f"{self.kernel_flops / 1e12:.1f} TFLOP/s {self.dtype}, PCIe "
            f"{self.pcie_bps / 1e9:.0f} GB/s, decode {self.decode_bps_per_thread / 1e9:.2f} "
            f"GB/s a thread x {threads}; assumed: writes {self.write_bps / 1e9:.1f} GB/s"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def gpu_target(
    dtype: str,
    rates: DeviceRates,
    *,
    device_memory: int | None = None,
    transposed: bool = False,
    backend: str = "cuda",
    tiles_in_flight: int = 1,
) -> GpuTarget:
    """The :class:`GpuTarget` of a job whose kernel multiplies in ``dtype`` (its compute
    dtype's name: float16 and int8 products multiply in float32, exact integer ones in
    float64) on a device of ``rates`` (a backend's table), for ``backend``, each GPU worker
    keeping ``tiles_in_flight`` output tiles in flight.

    Raises
    ------
    InputError
        For a dtype the device's kernel does not multiply in.
    """
    if dtype not in rates.kernel_flops:
        raise InputError(
            f"compute dtype {dtype!r}: the {rates.engine} multiplies in "
            f"{', '.join(rates.kernel_flops)}"
        )
    return GpuTarget(
        dtype=dtype,
        kernel_flops=rates.kernel_flops[dtype],
        pcie_bps=rates.pcie_bps,
        decode_bps_per_thread=rates.decode_bps_per_thread,
        write_bps=rates.write_bps,
        scratch_write_bps=rates.scratch_write_bps,
        scratch_read_bps=rates.scratch_read_bps,
        device_memory=device_memory,
        transposed=transposed,
        backend=backend,
        engine=rates.engine,
        blocks=rates.blocks,
        source=rates.source,
        start_seconds=rates.start_seconds,
        cluster_start_seconds=rates.cluster_start_seconds,
        tiles_in_flight=tiles_in_flight,
    )


def device_pipeline(
    loop: float, output: float, tiles: int, tiles_in_flight: int
) -> tuple[float, float]:
    """A GPU worker's ``(slowest stream, exposed)`` seconds over its ``tiles`` tiles: the
    loops (``loop``: the slowest of kernel, decode, PCIe and storage over every tile) and the
    tiles' copies back and writes (``output``).

    With one tile in flight the device idles while each tile is copied back and written:
    the loops, then every write (exposed: all of ``output``).  With two or more the writes
    are a stream beside the loops: the slower of the two, plus the other's share of one
    tile (the last tile's write after the loops, or the first tile's loop before the
    writes), so that more tiles per device hide more.
    """
    if tiles_in_flight <= 1:
        return loop, output
    tiles = max(1, tiles)
    if loop >= output:
        return loop, output / tiles
    return output, loop / tiles


def gpu_seconds(
    p: Problem, tm: int, tn: int, tk: int, workers: int, splits: int, threads: int, gpu: GpuTarget
) -> float:
    """Estimated seconds of a ``tm×tn`` tiling (panels ``tk`` deep, k in ``splits`` parts)
    on ``workers`` GPU workers with ``threads`` decode threads a task: the slowest of the
    busiest GPU's kernel time, its host's decoding, its PCIe copies, its writes and its
    partial tiles' round trip, plus each task's first panel (decoded and copied before
    the kernel can start) and the copies back and writes the next tiles do not hide (with
    one tile in flight all of them, with more the last tile's: the plan then prefers tiles
    enough per device to hide the write), as :func:`outofcore.planner.model.predict` counts
    a GPU machine."""
    busy = min(workers, tile_count(p, tm, tn) * splits)
    panels = Panels(p.k, min(tk, p.k))
    rows, cols = math.ceil(p.m / tm), math.ceil(p.n / tn)
    wa, wb = p.read_sizes
    read = wa * cols * p.m * touched(panels, p.a_chunks[1]) * p.chunk_batch[0]
    if not p.symmetric:  # a symmetric product reads one panel per tile row and column
        read += wb * rows * p.n * touched(panels, p.b_chunks[0]) * p.chunk_batch[1]
    read *= p.entries
    written = p.entries * p.written_itemsize * p.m * p.n
    scratch = splits * p.entries * p.m * p.n * p.itemsize if splits > 1 else 0
    decode_bps = gpu.decode_bps(threads)
    loop = max(
        2 * p.k * busiest_worker(p, tm, tn, workers, splits) / gpu.kernel_flops,
        read / busy / decode_bps,
        (read + written + scratch) / busy / gpu.pcie_bps,
        scratch / busy * (1 / gpu.scratch_write_bps + 1 / gpu.scratch_read_bps),
    )
    tiles = math.ceil(tile_count(p, tm, tn) * splits / busy)
    output = written / busy * (1 / gpu.write_bps + 1 / gpu.pcie_bps)  # copies back, writes
    slowest, exposed = device_pipeline(loop, output, tiles, gpu.tiles_in_flight)
    first = p.itemsize * min(tk, p.k) * (tm + tn) * (1 / decode_bps + 1 / gpu.pcie_bps)
    return slowest + exposed + tiles * first

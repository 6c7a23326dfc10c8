"""The GPU worker the plan is made for: the one home of the GPU figures the model uses.

Pure arithmetic, like :mod:`outofcore.planner.plan`: nothing here imports Dask, numba or zarr.
A GPU job's tiles are ranked (:mod:`outofcore.planner.tiling`) and predicted
(:func:`outofcore.planner.model.gpu_machine`, :mod:`outofcore.machine.prediction`) with the rates
of a :class:`GpuTarget`: the kernel's FLOP/s for the job's compute dtype, the PCIe copies,
and the host's decode rate per thread times the task's decode threads (the plan's
``io_concurrency``).  On a GPU the kernel is fast and the host's decoding slow, so the
streams that decide are decoding and, for a split of k, the partial tiles written and
read back (:func:`gpu_seconds`).

Measured on lent H100/H200 nodes (docs/gpu.md, design.md "The GPU pipeline, by the
numbers"): :data:`KERNEL_FLOPS`, :data:`PCIE_BPS`, :data:`DECODE_BPS_PER_THREAD`,
:data:`START_SECONDS`, :data:`CLUSTER_START_SECONDS`, cuBLAS's :data:`CUBLAS_FLOPS`
(backend ``cupy``; its complex rates inferred).  Assumed, not yet measured on a
GPU node: :data:`WRITE_BPS`, :data:`SCRATCH_WRITE_BPS`, :data:`SCRATCH_READ_BPS`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from outofcore.errors import InputError
from outofcore.planner.device_plan import device_bytes, kernel_block
from outofcore.planner.io_model import touched
from outofcore.planner.plan import Panels
from outofcore.planner.problem import Problem
from outofcore.planner.workload import busiest_worker, tile_count

#: Our kernel's sustained rate on one H100/H200 at 8192³ (docs/gpu.md, four nodes,
#: 2026-11), FLOP/s counted as ``2·m·n·k`` for every dtype, as the model counts: the
#: complex kernels' measured rates (counted ``8·m·n·k``) divided by 4.
KERNEL_FLOPS: dict[str, float] = {
    "float32": 37.0e12,
    "float64": 14.6e12,
    "complex64": 42.7e12 / 4,
    "complex128": 18.5e12 / 4,
}
#: cuBLAS's rate on the same devices, for backend ``cupy`` (docs/gpu.md: float32 50.2-51.5,
#: float64 57.3-57.4 TFLOP/s at 8192³, measured; complex ones inferred from our kernel's
#: measured rate and its measured fraction of cuBLAS at 4096³: 42.7 / 0.80, 18.5 / 0.32).
CUBLAS_FLOPS: dict[str, float] = {
    "float32": 50.5e12,
    "float64": 57.3e12,
    "complex64": 53.4e12 / 4,
    "complex128": 57.8e12 / 4,
}
#: Pinned host-device copies, bytes/s each way (docs/gpu.md: 54.1-55.2 GB/s).
PCIE_BPS = 55e9
#: zstd decoding of one host core, decoded bytes/s (design.md: 0.8-0.9 GB/s a core).
DECODE_BPS_PER_THREAD = 0.85e9
#: Assumed: the output written by one worker's host thread, raw, bytes/s (the GPU
#: check's ``perf`` phase assumes the same).
WRITE_BPS = 1e9
#: Assumed: partial tiles of a split of k written as raw ``.npy`` files next to the
#: output, and read back by the reductions, bytes/s of one worker.
SCRATCH_WRITE_BPS = 1e9
SCRATCH_READ_BPS = 2e9
#: Seconds before a single GPU's tasks flow when its worker runs in the job's process:
#: the CUDA context (0.2-0.4 s) and the cached kernels' load (0.05 s) (design.md).
START_SECONDS = 0.35
#: Seconds more where the GPUs' workers are processes of a dask-cuda cluster the command
#: starts and stops (2.5-4 s, with the workers' imports) (design.md).
CLUSTER_START_SECONDS = 3.0


@dataclass(frozen=True)
class GpuTarget:
    """One GPU worker as the plan sees it: the rates of its kernel, copies and host."""

    #: The dtype the kernel multiplies in (a key of :data:`KERNEL_FLOPS`).
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
    #: ``cuda`` (our kernel) or ``cupy`` (cuBLAS).
    backend: str = "cuda"

    def __post_init__(self) -> None:
        rates = (self.kernel_flops, self.pcie_bps, self.decode_bps_per_thread)
        rates += (self.write_bps, self.scratch_write_bps, self.scratch_read_bps)
        if min(rates) <= 0:
            raise InputError(f"a GPU's rates must be positive: {self}")
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
        depth = min(tk, kernel_block(itemsize)[2])
        needed = device_bytes(tm, tn, depth, itemsize, transposed=self.transposed)
        return needed <= self.device_memory

    def basis(self, threads: int) -> str:
        """The rates a GPU prediction rests on, in words."""
        return (
            f"GPU rates (docs/gpu.md, measured on H100/H200): "
            f"{'cuBLAS' if self.backend == 'cupy' else 'kernel'} "
            f"{self.kernel_flops / 1e12:.1f} TFLOP/s {self.dtype}, PCIe "
            f"{self.pcie_bps / 1e9:.0f} GB/s, decode {self.decode_bps_per_thread / 1e9:.2f} "
            f"GB/s a thread x {threads}; assumed: writes {self.write_bps / 1e9:.1f} GB/s"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def gpu_target(
    dtype: str,
    *,
    device_memory: int | None = None,
    transposed: bool = False,
    backend: str = "cuda",
) -> GpuTarget:
    """The :class:`GpuTarget` of a job whose kernel multiplies in ``dtype`` (its compute
    dtype's name: float16 and int8 products multiply in float32, exact integer ones in
    float64), from the measured figures above: our kernel's rate (:data:`KERNEL_FLOPS`)
    for ``backend`` ``cuda``, cuBLAS's (:data:`CUBLAS_FLOPS`) for ``cupy``.

    Raises
    ------
    InputError
        For a dtype no GPU kernel multiplies in, or a backend other than these two.
    """
    if backend not in ("cuda", "cupy"):
        raise InputError(f"backend {backend!r}: a GPU multiplies with 'cuda' or 'cupy'")
    if dtype not in KERNEL_FLOPS:
        raise InputError(
            f"compute dtype {dtype!r}: the GPU kernels multiply in {', '.join(KERNEL_FLOPS)}"
        )
    return GpuTarget(
        dtype=dtype,
        kernel_flops=(CUBLAS_FLOPS if backend == "cupy" else KERNEL_FLOPS)[dtype],
        pcie_bps=PCIE_BPS,
        decode_bps_per_thread=DECODE_BPS_PER_THREAD,
        write_bps=WRITE_BPS,
        scratch_write_bps=SCRATCH_WRITE_BPS,
        scratch_read_bps=SCRATCH_READ_BPS,
        device_memory=device_memory,
        transposed=transposed,
        backend=backend,
    )


def gpu_seconds(
    p: Problem, tm: int, tn: int, tk: int, workers: int, splits: int, threads: int, gpu: GpuTarget
) -> float:
    """Estimated seconds of a ``tm×tn`` tiling (panels ``tk`` deep, k in ``splits`` parts)
    on ``workers`` GPU workers with ``threads`` decode threads a task: the slowest of the
    busiest GPU's kernel time, its host's decoding, its PCIe copies, its writes and its
    partial tiles' round trip, plus each task's first panel (decoded and copied before
    the kernel can start), as :func:`outofcore.planner.model.predict` counts a GPU machine."""
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
    streams = (
        2 * p.k * busiest_worker(p, tm, tn, workers, splits) / gpu.kernel_flops,
        read / busy / decode_bps,
        (read + written + scratch) / busy / gpu.pcie_bps,
        written / busy / gpu.write_bps,
        scratch / busy * (1 / gpu.scratch_write_bps + 1 / gpu.scratch_read_bps),
    )
    first = p.itemsize * min(tk, p.k) * (tm + tn) * (1 / decode_bps + 1 / gpu.pcie_bps)
    return max(streams) + math.ceil(tile_count(p, tm, tn) * splits / busy) * first


def job_gpu_target(
    backend: str,
    gpu_workers: bool,
    dtype: str,
    *,
    device_memory: int | None = None,
    transposed: bool = False,
) -> GpuTarget | None:
    """The GPU a job's tiles are multiplied on, as the plan sees it, or None (a CPU job).

    A job is on GPUs when its ``backend`` is ``cuda`` or ``cupy``, or ``auto`` with
    ``gpu_workers`` (``--gpus``, or a cluster's workers that declare a GPU); its kernel
    multiplies in ``dtype``, the product's compute dtype (wide integer products have no GPU
    kernel: None), at our kernel's rate, or cuBLAS's for ``cupy``, on ``device_memory``
    (None: each engine's own share, unknown here), with a device scratch slice where an
    operand is ``transposed``."""
    on_gpu = backend in ("cuda", "cupy") or (backend == "auto" and gpu_workers)
    if not on_gpu or dtype not in KERNEL_FLOPS:
        return None
    chosen = "cupy" if backend == "cupy" else "cuda"  # auto with GPUs: our kernel
    return gpu_target(dtype, backend=chosen, device_memory=device_memory, transposed=transposed)

"""The CUDA backend's rates: the GPU figures the plan and the time model use.

Measured on lent H100/H200 nodes (docs/gpu.md, design.md "The GPU pipeline, by the
numbers"): the kernels' rates, the pinned copies, the host's decoding, the start of a
single GPU's worker and of a dask-cuda cluster; cuBLAS's rates for backend ``cupy`` (its
complex rates inferred).  Assumed, not yet measured on a GPU node: the write and scratch
rates.  Pure data: importing it imports no GPU library.
"""

from __future__ import annotations

from outofcore.backends.cuda.blocks import KERNEL_BLOCKS
from outofcore.planner.gpu_rates import DeviceRates

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

_SOURCE = "docs/gpu.md, measured on H100/H200"
_HOST = {
    "pcie_bps": PCIE_BPS,
    "decode_bps_per_thread": DECODE_BPS_PER_THREAD,
    "write_bps": WRITE_BPS,
    "scratch_write_bps": SCRATCH_WRITE_BPS,
    "scratch_read_bps": SCRATCH_READ_BPS,
    "start_seconds": START_SECONDS,
    "cluster_start_seconds": CLUSTER_START_SECONDS,
    "blocks": KERNEL_BLOCKS,
    "source": _SOURCE,
}
#: Backend ``cuda``: our numba kernel.
OUR_KERNEL = DeviceRates(engine="kernel", kernel_flops=KERNEL_FLOPS, **_HOST)
#: Backend ``cupy``: cuBLAS through CuPy.
CUBLAS = DeviceRates(engine="cuBLAS", kernel_flops=CUBLAS_FLOPS, **_HOST)

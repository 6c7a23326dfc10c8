"""The CUDA kernels' block tiles: the one table of them.

``outofcore.backends.cuda.kernels.PRODUCTION`` builds the production kernels from it, and the
CUDA backend hands it to the planner (:class:`outofcore.planner.gpu_rates.DeviceRates`), whose
device tiles are cut in its multiples.  Pure data: importing it imports no GPU library.
"""

from __future__ import annotations

#: Kernel block tile ``(bm, bn, bk)`` per element size.
#: 4: float32; 8: float64 and complex64; 16: complex128.  16 deep where the registers and
#: shared memory allow (issue 54: the loop's fixed instructions over twice the FMAs);
#: complex128 keeps 8 (16 would need 64 KiB of shared memory, over the 48 KiB of a static
#: allocation).
KERNEL_BLOCKS: dict[int, tuple[int, int, int]] = {
    4: (128, 128, 16),
    8: (64, 64, 16),
    16: (64, 64, 8),
}

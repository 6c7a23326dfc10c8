"""The textbook CUDA kernel for ``C += A · B``: one thread per element of ``C``.

Kept simple and fixed: tests compare the tiled kernel (:mod:`outofcore.backends.cuda.kernels`)
with it, and the GPU check and ``benchmarks/gpu.py`` time it once for scale.
:func:`launch_reference` launches it on device arrays the caller has checked.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import cuda

REFERENCE_BLOCK = (16, 16)


@cache
def build_reference_kernel(dtype: np.dtype):
    """Return the textbook kernel: one thread per element of ``C``, no shared memory.

    Launch it with ``block = REFERENCE_BLOCK`` and
    ``grid = (ceil(m / 16), ceil(n / 16))`` (x runs along the rows of ``C``).
    """
    dt = np.dtype(dtype).type

    def gemm_reference(a, b, c, accumulate):
        row, col = cuda.grid(2)
        if row < c.shape[0] and col < c.shape[1]:
            total = dt(0)
            for s in range(a.shape[1]):
                total += a[row, s] * b[s, col]
            if accumulate:
                c[row, col] += total
            else:
                c[row, col] = total

    return cuda.jit(gemm_reference)


def launch_reference(
    a, b, c, accumulate: bool, stream=0, block: tuple[int, int] = REFERENCE_BLOCK
) -> None:
    """Run the textbook kernel on checked device arrays.

    The arguments are those of :func:`outofcore.backends.cuda.kernels.launch`; ``block`` is the
    thread block (x along the rows of ``c``).
    """
    m, n = c.shape
    bx, by = block
    kernel = build_reference_kernel(np.dtype(c.dtype))
    kernel[(-(-m // bx), -(-n // by)), block, stream](a, b, c, bool(accumulate))

"""The CUDA transpose kernel: ``dst = src.T`` through shared memory.

A transposed operand (``--transpose-a``, a Gram tile) reaches the device as one 2-D
copy of the panel as stored, then this kernel
(:func:`outofcore.backends.cuda.buffers.copy_to_device`); the GEMM kernel takes no transpose flag.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import cuda
from numba.cuda import config as cuda_config

from outofcore.backends.cuda.kernels import cached
from outofcore.errors import InputError

#: Tile of the transpose kernel (``TRANSPOSE_TILE`` square, ``TRANSPOSE_ROWS`` rows of threads);
#: smaller on the simulator, which runs one Python thread per CUDA thread.
TRANSPOSE_TILE = 8 if cuda_config.ENABLE_CUDASIM else 32
TRANSPOSE_ROWS = 2 if cuda_config.ENABLE_CUDASIM else 8


@cache
def build_transpose_kernel(dtype: np.dtype):
    """Return the kernel ``transpose(src, dst)``: ``dst = src.T`` for 2-D device arrays.

    A ``TRANSPOSE_TILE`` square of ``src`` goes through shared memory (one padding
    column, so that the transposed reads hit distinct banks); both global reads
    and writes run along rows.
    """
    function = make_transpose_function(dtype)
    if cuda_config.ENABLE_CUDASIM:
        return cuda.jit(function)
    return cuda.jit(function, cache=cached(), lto=False)


def make_transpose_function(dtype: np.dtype):
    """The Python function of the transpose kernel (for ``cuda.jit`` or ``compile_ptx``)."""
    tile, rows = TRANSPOSE_TILE, TRANSPOSE_ROWS
    padded = tile + 1  # a constant here: numba needs the shared array's shape as literals
    element = numba_type(np.dtype(dtype))

    def transpose(src, dst):
        buf = cuda.shared.array((tile, padded), dtype=element)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        col = cuda.blockIdx.x * tile + tx
        row = cuda.blockIdx.y * tile + ty
        for j in range(0, tile, rows):
            if row + j < src.shape[0] and col < src.shape[1]:
                buf[ty + j, tx] = src[row + j, col]
        cuda.syncthreads()
        col = cuda.blockIdx.y * tile + tx
        row = cuda.blockIdx.x * tile + ty
        for j in range(0, tile, rows):
            if row + j < dst.shape[0] and col < dst.shape[1]:
                dst[row + j, col] = buf[tx, ty + j]

    # Its name carries what shapes it (the on-disk cache entry is found by the name)
    transpose.__name__ = transpose.__qualname__ = f"transpose_{np.dtype(dtype).name}_{tile}x{rows}"
    return transpose


def numba_type(dtype: np.dtype):
    """The numba scalar type of ``dtype`` (for shared arrays)."""
    from numba import from_dtype  # noqa: PLC0415

    return from_dtype(np.dtype(dtype))


def launch_transpose(src, dst, stream=0) -> None:
    """``dst = src.T`` on ``stream``: C-contiguous device arrays ``(r, c)`` and ``(c, r)``."""
    r, c = src.shape
    if dst.shape != (c, r):
        raise InputError(f"transpose of a {r}x{c} array into {dst.shape}: need ({c}, {r})")
    if r == 0 or c == 0:
        return
    tile = TRANSPOSE_TILE
    kernel = build_transpose_kernel(np.dtype(src.dtype))
    grid = (-(-c // tile), -(-r // tile))
    kernel[grid, (tile, TRANSPOSE_ROWS), stream](src, dst)

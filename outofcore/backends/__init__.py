"""Backends: what multiplies a tile's panels, each behind the tile-engine protocol.

- ``engines``: the tile-engine protocol, the CPU engine and the choice of a backend.
- ``blas``: ``gemm`` and ``syrk`` through ctypes.
- ``limbs``: exact 64-bit integer products through 16-bit limbs.
- ``cuda/``: the CUDA backend, everything that imports ``numba.cuda`` or names NVIDIA's
  tools (the kernels, the CUDA engine, its probe and compile report).

May import: operands, storage, outofcore.errors and outofcore.config, planner and runtime;
never compute, journal, jobs, machine or the front-ends.
"""

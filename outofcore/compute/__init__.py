"""Compute: one tile's products, knowing no journal.

- ``tile``: the per-tile task: stream the k-panels of A and B through an engine, write C_ij
  once.
- ``tile_job``: what every task of one job shares on a worker (``TileJob``).
- ``tile_io``: what a tile task reads and writes, and the bytes it counts.
- ``engines``: the tile-engine protocol and the CPU engine.
- ``blas``: ``gemm`` and ``syrk`` through ctypes.
- ``limbs``: exact 64-bit integer products through 16-bit limbs.
- ``worker_context`` and ``panel_cache``: what a worker keeps between tasks.
- ``panel_progress``: each panel done, told to whoever shows the job's progress.
- ``peaks``: a task's peak memory; ``cpu_meter``: the CPU seconds of its reads and writes.
- ``cuda/``: everything that imports ``numba.cuda`` (the kernels and the CUDA engine).

May import: operands, storage, outofcore.errors and outofcore.config, scheduler; never
journal, jobs, machine or the front-ends.
"""

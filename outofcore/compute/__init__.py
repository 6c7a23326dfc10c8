"""Compute: one tile's products through an engine, knowing no journal.

- ``tile``: the per-tile task: stream the k-panels of A and B through an engine, write C_ij
  once.
- ``tile_job``: what every task of one job shares on a worker (``TileJob``).
- ``tile_io``: what a tile task reads and writes, and the bytes it counts.
- ``worker_context`` and ``panel_cache``: what a worker keeps between tasks.
- ``panel_progress``: each panel done, told to whoever shows the job's progress.
- ``peaks``: a task's peak memory; ``cpu_meter``: the CPU seconds of its reads and writes.

The engines themselves (CPU BLAS, the CUDA kernel) are the backends' (``outofcore.backends``).

May import: backends, operands, storage, outofcore.errors and outofcore.config, planner and
runtime; never journal, jobs, machine or the front-ends.
"""

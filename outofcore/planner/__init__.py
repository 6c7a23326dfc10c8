"""The plan: pure data, made and checked against the budget before anything runs.

- ``problem``: the shapes, chunk grids and element sizes of one product.
- ``plan``: the plan of ``C = A @ B`` (tiles, panels, tasks); ``tiles`` and ``lazy``: its
  tile tasks and the sequences that make them when asked.
- ``tiling``: the tile search (tile, panel depth, split of k).
- ``memory``: the peak bytes of each kind of task, and the one budget test.
- ``device_plan``: a host tile cut into device tiles (a GPU worker's second level).
- ``io_model``: the bytes a plan reads and the lower bound; ``workload``: how its tasks load
  the workers; ``model``: its time on paper; ``gpu_rates``: the GPU figures the model uses.

May import: outofcore.errors; never Dask, the runtime or any layer above.
"""

"""The front-ends: how people reach a job besides the Python faces.

The command line's options (``cli_parser``) and output (``cli_output``); dask.array's
product at the top of a graph (``dask_products``) and ``outofcore.to_zarr``
(``dask_store``); ``verify`` (Freivalds' check); ``generate`` (seeded random arrays).

May import: jobs, machine, compute, journal, operands, storage, outofcore.errors and
outofcore.config, scheduler.  Imported only by the faces (``outofcore/__init__``, ``api``,
``cli``, ``generate``, ``xarray``, ``gpu_check``).  ``tests/test_layers.py`` holds it.
"""

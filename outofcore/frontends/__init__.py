"""The front-ends: how people reach a job besides the Python faces.

- ``cli_parser``: the ``outofcore`` command line's commands, options and value types.
- ``cli_output``: what the command prints, as JSON or as text; ``status_output``: what
  ``outofcore status`` prints.
- ``cli_suggestions``: the parser's manners: the command's usage and "did you mean" on a
  mistake, no abbreviations, each command's description and examples; ``cli_examples``:
  those examples (they run as written: tests/outofcore/frontends/test_cli_examples.py).
- ``plan_report``: ``outofcore.plan``, a job's plan not run, that prints as ``outofcore plan``.
- ``dask_products``: the matrix product at the top of a dask array's graph, as operands.
- ``dask_store``: ``outofcore.to_zarr``, a dask array stored, its product by a job.
- ``xarray_dot``: the machinery of ``outofcore.xarray.dot`` (alignment, windows, output).
- ``verify``, ``verify_report``, ``verify_exact``: Freivalds' check, its report, and its
  exact-integer verdicts.
- ``generate``: seeded random zarr arrays written chunk by chunk (``outofcore generate``).

May import: jobs, machine, compute, journal, operands, storage, outofcore.errors and
outofcore.config, scheduler.  Imported only by the faces (``outofcore/__init__``, ``api``,
``cli``, ``generate``, ``xarray``).  ``tests/test_layers.py`` holds it.
"""

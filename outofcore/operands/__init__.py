"""Operands: what a job computes, as data.

- ``product``: ``alpha * op(A) @ op(B) + beta * addend``, checked once (no I/O of its own).
- ``operand_checks``: the opened operands checked before the model holds them.
- ``arrays``: opening and checking a job's zarr arrays, A and B in, C out.
- ``interop``: dask and numpy arrays given as job arguments.
- ``dask_graph``: operands found in a dask graph, on the client.
- ``steps``, ``windows``, ``joined``: operands computed, sliced or joined as they are read.
- ``stacking``: numpy's matmul shape rules.
- ``dtypes`` and ``scales``: accumulation and output dtypes; alpha and beta as numpy takes
  them.
- ``centring``: centring over k from panel sums.
- ``reading``: input panels for tile tasks.
- ``random_values``: seeded random values (``outofcore generate`` and the machine probe).

May import: storage, outofcore.errors and outofcore.config, scheduler; never journal,
compute, jobs or the front-ends.
"""

"""Operands: what a job computes, as data.

``product`` (``alpha * op(A) @ op(B) + beta * addend``, checked once), ``arrays`` (opening
a job's arrays), ``interop`` (dask and numpy arguments), ``derived``, ``windows`` and
``joined`` (operands computed, sliced or joined as they are read), ``stacking`` (numpy's
matmul shape rules), ``dtypes`` (accumulation and output dtypes), ``centring``,
``reading`` (input panels for tile tasks), ``random_values``.

May import: storage, outofcore.errors and outofcore.config, scheduler; never journal,
compute, jobs or the front-ends.
"""

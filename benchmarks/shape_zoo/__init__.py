"""The shape zoo's parts (the case is ``python -m benchmarks.shapes``).

* :mod:`~benchmarks.shape_zoo.cases`: the five shapes, their inputs and issue 11's targets;
* :mod:`~benchmarks.shape_zoo.systems`: numpy, dask.array, outofcore, and the internal
  read and write floors, each set up in a child process;
* :mod:`~benchmarks.shape_zoo.report`: the figures of a run, its targets, table and plot.
"""

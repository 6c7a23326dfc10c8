"""The one benchmark harness: what every case script shares, one copy of each helper.

* :mod:`~benchmarks.harness.processes`: fresh processes, their JSON, wall time and peak RSS;
* :mod:`~benchmarks.harness.inputs`: seeded zarr inputs, cached, and their stored bytes;
* :mod:`~benchmarks.harness.checking`: the float32 tolerance and the output check;
* :mod:`~benchmarks.harness.systems`: the rival systems' children (numpy, dask, outofcore);
* :mod:`~benchmarks.harness.timing`: one system timed in a child process, sampled;
* :mod:`~benchmarks.harness.races`: product races over rounds, their summary and table;
* :mod:`~benchmarks.harness.children`: one baseline of a race, in its own process;
* :mod:`~benchmarks.harness.sampling`: a process tree's RSS, bytes read and CPU, from inside;
* :mod:`~benchmarks.harness.reports`: summaries of timed runs, byte counts;
* :mod:`~benchmarks.harness.cgroup`: a cgroup v1 memory cap for a process tree.

It imports the public ``outofcore`` API, ``outofcore.config``, ``outofcore.planner`` and
``outofcore.runtime``, and one
internal module: ``outofcore.compute.worker_context``, which ``systems.warm_outofcore``
loads on every worker as a service's warm workers have it.  A case that measures an
internal floor imports that module itself and says so in its docstring.
"""

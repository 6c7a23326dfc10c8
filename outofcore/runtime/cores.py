"""The cores a process may run on: its CPU affinity, not the machine's count.

A worker pinned to the cores of its GPU's NUMA node (a GPU vendor's cluster), a container limited to
some cores (``docker run --cpuset-cpus``) or a batch job's allocation (``taskset``, Slurm)
sees every core in :func:`os.cpu_count` but may run on only some: threads sized from the
machine's count oversubscribe them.  Every thread count of outofcore (BLAS threads, decode
threads, the LocalCluster's workers) starts from :func:`usable_cores`.
"""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (``os.sched_getaffinity``; the machine's count
    where the platform has no affinity, as on macOS and Windows), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)

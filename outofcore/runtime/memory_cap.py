"""The memory cap of this process tree: its cgroup's limit or the machine's memory.

Processes started here (a LocalCluster's scheduler, nannies and workers) share
the cgroup of this process, so the memory they may use together is the
smallest of:

* :func:`distributed.system.memory_limit`: the machine's memory (psutil), the
  cgroup limit files at the root of the mounted hierarchy
  (``/sys/fs/cgroup/memory/memory.limit_in_bytes`` for cgroup v1,
  ``/sys/fs/cgroup/memory.max`` for v2: a container's own cgroup) and
  ``RLIMIT_RSS``;
* the hard limit of the cgroup this process is in and of each of its
  ancestors, found from ``/proc/self/cgroup``: Dask reads only the root of the
  mount, so a process placed in a nested group (``mkdir
  /sys/fs/cgroup/memory/GROUP``, as ``benchmarks/capped.py`` does, or a
  systemd slice without a cgroup namespace) would go unseen by it.

:func:`memory_cap` returns the smallest, and where it comes from, for messages.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psutil

#: Mount points of the cgroup v1 memory controller and of the v2 hierarchy.
CGROUP_V1_MEMORY = Path("/sys/fs/cgroup/memory")
CGROUP_V2 = Path("/sys/fs/cgroup")
#: A cgroup v1 limit at or above this means "no limit" (the kernel's PAGE_COUNTER_MAX).
UNLIMITED = 2**62


@dataclass(frozen=True)
class MemoryCap:
    """A memory cap in bytes, what it is and where it was read."""

    nbytes: int
    #: What the cap is, e.g. ``"cgroup memory limit"`` or ``"memory of this machine"``
    #: (messages put "the" before it).
    what: str
    #: Where it was read: a cgroup file, ``psutil.virtual_memory().total``, ...
    where: str

    def describe(self) -> str:
        """``"cgroup memory limit 1.5 GiB (/sys/fs/cgroup/memory/x/memory.limit_in_bytes)"``."""
        return f"{self.what} {gib(self.nbytes)} ({self.where})"


def memory_cap(proc_cgroup: str | os.PathLike = "/proc/self/cgroup") -> MemoryCap:
    """The memory this process and the processes it starts may use together.

    Parameters
    ----------
    proc_cgroup
        The file naming this process's cgroups (tests pass another process's).

    Returns
    -------
    MemoryCap
        The smallest of the machine's memory, Dask's reading of the cgroup and
        ``RLIMIT_RSS`` limits, and the limits of this process's own cgroup and
        its ancestors; on a tie the cgroup is named.
    """
    from distributed.system import memory_limit  # noqa: PLC0415 (loads distributed)

    total = psutil.virtual_memory().total
    candidates = [MemoryCap(total, "memory of this machine", "psutil.virtual_memory().total")]
    candidates += own_cgroup_limits(Path(proc_cgroup))
    dask_limit = memory_limit()
    if dask_limit < min(cap.nbytes for cap in candidates):
        candidates.append(
            MemoryCap(
                dask_limit,
                "memory limit",
                "distributed.system.memory_limit(): a cgroup limit at the root of "
                "/sys/fs/cgroup or RLIMIT_RSS",
            )
        )
    # Smallest first; among equals prefer the most specific source (cgroups come after psutil).
    return min(reversed(candidates), key=lambda cap: cap.nbytes)


def own_cgroup_limits(proc_cgroup: Path) -> list[MemoryCap]:
    """Hard memory limits of the cgroup named in ``proc_cgroup`` and of its ancestors.

    cgroup v1: ``memory.limit_in_bytes`` under :data:`CGROUP_V1_MEMORY` (values
    of :data:`UNLIMITED` or more mean none); v2: ``memory.max`` under
    :data:`CGROUP_V2` (``max`` means none).  Files that cannot be read are
    skipped: no cgroups, another OS, a hierarchy not mounted here.
    """
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return []
    limits = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if "memory" in controllers.split(","):
            limits += _chain(CGROUP_V1_MEMORY, path, "memory.limit_in_bytes")
        elif controllers == "" and path:
            limits += _chain(CGROUP_V2, path, "memory.max")
    return limits


def _chain(mount: Path, path: str, name: str) -> list[MemoryCap]:
    """The limits in file ``name`` of cgroup ``path`` and its ancestors under ``mount``."""
    found = []
    parts = [part for part in path.strip("/").split("/") if part]
    for depth in range(len(parts), -1, -1):
        file = mount.joinpath(*parts[:depth], name)
        try:
            text = file.read_text().strip()
        except OSError:
            continue
        if not text.isdigit() or int(text) >= UNLIMITED:
            continue
        found.append(MemoryCap(int(text), "cgroup memory limit", str(file)))
    return found


def gib(nbytes: int) -> str:
    """``nbytes`` as ``"1.5 GiB"`` (or MiB below 1 GiB) for messages."""
    if nbytes >= 2**30:
        return f"{nbytes / 2**30:.3g} GiB"
    return f"{nbytes / 2**20:.4g} MiB"

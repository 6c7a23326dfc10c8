"""The cluster of a multi-GPU node: one worker process per GPU, whatever its vendor.

Each worker runs ``tiles_in_flight`` tasks at once (threads of its own, each with its engine
on the worker's one device) and advertises as many of the ``GPU`` resource, so that tile
tasks submitted with ``resources={"GPU": 1}`` land only on GPU workers, ``tiles_in_flight``
of them on each at once: tile i's copy back, write and record overlap tile i+1's copies and
kernels (the device pipeline, design.md).  What a vendor's GPUs need
of their workers (which device each sees, how devices are numbered, a cluster class of the
vendor's own) a GPU backend says through a :class:`GpuNode`, handed in by the job (the
CUDA backend's is ``outofcore.backends.cuda.workers.CUDA_NODE``): the runtime names no
vendor.

:func:`start_gpu_cluster` starts the node's own cluster where it offers one, else a
``distributed.SpecCluster`` of Nannies from :func:`gpu_worker_specs`, plain dictionaries
built without a GPU (what the tests here start).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from outofcore.errors import ClusterError
from outofcore.runtime.blas_idle import IDLE_SPIN
from outofcore.runtime.loopback import LOCAL_DASHBOARD_ADDRESS, LOCAL_HOST

GPU_RESOURCE = "GPU"
#: The largest GPU index ``--gpus`` takes (a node has a few GPUs; they are numbered from 0).
MAX_GPU_INDEX = 1023
#: How the start of a cluster names outofcore's own (a LocalCluster or a SpecCluster).
LOCAL_KIND = "LocalCluster"


class GpuNode(Protocol):
    """What a GPU backend tells the runtime about the GPUs of a node and their workers."""

    def worker_env(self, gpus: Sequence[int], position: int) -> Mapping[str, str]:
        """The environment of the worker of ``gpus[position]`` (the device it sees first,
        the order devices are numbered in), beside :data:`IDLE_SPIN`."""

    def numbers_devices_as_listed(self) -> bool:
        """Whether this process numbers devices as a job's GPU indices mean them (then a
        single GPU's worker may be a thread of this process)."""

    def own_cluster(
        self,
        gpus: Sequence[int],
        memory_limit: int,
        silence_logs: int,
        dashboard: bool,
        tiles_in_flight: int = 1,
    ) -> Any | None:
        """The vendor's own cluster of one worker per GPU in ``gpus`` (each with
        ``tiles_in_flight`` threads and as many of the ``GPU`` resource), or None where
        outofcore's :func:`gpu_worker_specs` serve."""

    def cluster_kind(self, cluster: Any) -> str | None:
        """How the start of ``cluster`` names it where it is the vendor's own, else None."""

    def check_usable(self, gpus: Sequence[int]) -> None:
        """Refuse ``gpus`` (ClusterError naming them) where none of the vendor's GPUs is
        usable in this process, before any work."""


def parse_gpus(text: str) -> tuple[int, ...]:
    """Read ``"0,1,2,3"`` as GPU indices; refuse duplicates and non-integers."""
    try:
        gpus = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ClusterError(f"--gpus {text!r}: give GPU indices like 0,1,2,3") from None
    if not gpus or min(gpus) < 0 or len(set(gpus)) != len(gpus):
        raise ClusterError(f"--gpus {text!r}: need distinct non-negative GPU indices")
    if max(gpus) > MAX_GPU_INDEX:
        raise ClusterError(f"--gpus {text!r}: GPU indices go from 0 to {MAX_GPU_INDEX} at most")
    return gpus


def check_tiles_in_flight(tiles_in_flight: int) -> int:
    """``tiles_in_flight`` where it is a whole number of tiles a GPU worker may keep in
    flight (at least 1).

    Raises
    ------
    ClusterError
        Naming the value, where it is not an integer >= 1.
    """
    if isinstance(tiles_in_flight, bool) or not isinstance(tiles_in_flight, int):
        raise ClusterError(f"tiles in flight per GPU = {tiles_in_flight!r}: need an integer >= 1")
    if tiles_in_flight < 1:
        raise ClusterError(f"tiles in flight per GPU = {tiles_in_flight}: need at least 1")
    return tiles_in_flight


def gpu_worker_specs(
    gpus: Sequence[int],
    memory_limit: int,
    node: GpuNode,
    silence_logs: int = logging.ERROR,
    tiles_in_flight: int = 1,
) -> dict[str, dict[str, Any]]:
    """``SpecCluster`` worker specs: one Nanny per GPU in ``gpus`` with ``tiles_in_flight``
    threads and as many of the ``GPU`` resource, with the environment ``node`` gives it,
    whose worker logs below ``silence_logs`` are dropped (as a LocalCluster's)."""
    check_tiles_in_flight(tiles_in_flight)
    specs = {}
    for position, gpu in enumerate(gpus):
        name = f"gpu-{gpu}"
        specs[name] = {
            "cls": "distributed.Nanny",
            "options": {
                "name": name,
                "host": LOCAL_HOST,
                "nthreads": tiles_in_flight,
                "memory_limit": memory_limit,
                "resources": {GPU_RESOURCE: tiles_in_flight},
                "env": {**IDLE_SPIN, **node.worker_env(gpus, position)},
                "silence_logs": silence_logs,
            },
        }
    return specs


def start_gpu_cluster(
    gpus: Sequence[int],
    memory_limit: int,
    node: GpuNode,
    silence_logs: int = logging.ERROR,
    dashboard: bool = True,
    tiles_in_flight: int = 1,
) -> Any:
    """Start one worker per GPU in ``gpus``, each with ``memory_limit`` bytes,
    ``tiles_in_flight`` threads and as many of the ``GPU`` resource: ``node``'s own cluster
    where it offers one, else a ``SpecCluster`` of :func:`gpu_worker_specs`.  Its dashboard
    is on a free port (``dashboard`` False: none, its web server still on a free port).
    """
    check_tiles_in_flight(tiles_in_flight)
    own = node.own_cluster(gpus, memory_limit, silence_logs, dashboard, tiles_in_flight)
    if own is not None:
        return own
    from distributed import Scheduler, SpecCluster  # noqa: PLC0415

    return SpecCluster(
        workers=gpu_worker_specs(gpus, memory_limit, node, silence_logs, tiles_in_flight),
        scheduler={
            "cls": Scheduler,
            "options": {
                "host": LOCAL_HOST,
                "dashboard_address": LOCAL_DASHBOARD_ADDRESS,
                "dashboard": dashboard,
            },
        },
        silence_logs=silence_logs,
    )


def cluster_kind(cluster: Any, node: GpuNode | None = None) -> str:
    """How the start of ``cluster`` names it: ``node``'s name for a cluster of its own, or
    a LocalCluster (a ``LocalCluster`` or outofcore's own ``SpecCluster`` of GPU workers)."""
    own = node.cluster_kind(cluster) if node is not None else None
    return own or LOCAL_KIND

"""Worker specs for a multi-GPU node: one worker process per GPU.

Each worker sees every GPU, rotated so that its own GPU is device 0
(``CUDA_VISIBLE_DEVICES=1,2,3,0`` for the second of four, as dask-cuda does),
runs one task at a time, and advertises a ``GPU`` resource so that tile tasks
submitted with ``resources={"GPU": 1}`` land only on GPU workers.  Building
the specs needs no GPU; they are plain dictionaries for
``distributed.SpecCluster``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.errors import ClusterError

GPU_RESOURCE = "GPU"


def parse_gpus(text: str) -> tuple[int, ...]:
    """Read ``"0,1,2,3"`` as GPU indices; refuse duplicates and non-integers."""
    try:
        gpus = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ClusterError(f"--gpus {text!r}: give GPU indices like 0,1,2,3") from None
    if not gpus or min(gpus) < 0 or len(set(gpus)) != len(gpus):
        raise ClusterError(f"--gpus {text!r}: need distinct non-negative GPU indices")
    return gpus


def gpu_worker_specs(gpus: Sequence[int], memory_limit: int) -> dict[str, dict[str, Any]]:
    """``SpecCluster`` worker specs: one single-threaded Nanny per GPU in ``gpus``."""
    specs = {}
    for position, gpu in enumerate(gpus):
        rotated = [*gpus[position:], *gpus[:position]]
        name = f"gpu-{gpu}"
        specs[name] = {
            "cls": "distributed.Nanny",
            "options": {
                "name": name,
                "nthreads": 1,
                "memory_limit": memory_limit,
                "resources": {GPU_RESOURCE: 1},
                "env": {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in rotated)},
            },
        }
    return specs

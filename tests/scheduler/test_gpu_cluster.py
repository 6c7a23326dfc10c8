"""Multi-GPU node worker specs, checked without a GPU.

The devices each worker sees are checked on real worker processes (each has
its own environment); the routing of GPU tasks on in-process workers
(distributed's gen_cluster), as it needs no separate processes.
"""

from __future__ import annotations

import os
import time

import pytest
from distributed import get_worker
from distributed.utils_test import gen_cluster

from outofcore.errors import ClusterError
from scheduler.cluster import open_executor
from scheduler.executors import DaskExecutor
from scheduler.gpu_cluster import GPU_RESOURCE, gpu_worker_specs, parse_gpus
from scheduler.plan import TileTask
from tests.helpers import with_sync_client


def test_specs_rotate_visible_devices_one_thread_and_a_gpu_resource():
    specs = gpu_worker_specs((0, 1, 2, 3), memory_limit=2**30)
    assert list(specs) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    visible = [spec["options"]["env"]["CUDA_VISIBLE_DEVICES"] for spec in specs.values()]
    assert visible == ["0,1,2,3", "1,2,3,0", "2,3,0,1", "3,0,1,2"]
    for spec in specs.values():
        assert spec["options"]["nthreads"] == 1
        assert spec["options"]["resources"] == {"GPU": 1}
        assert spec["options"]["memory_limit"] == 2**30


@pytest.mark.parametrize("text", ["", "a,b", "0,0", "-1"])
def test_bad_gpu_lists(text):
    with pytest.raises(ClusterError, match="--gpus"):
        parse_gpus(text)


def test_gpu_workers_start_with_their_own_device_first():
    with open_executor(None, budget_bytes=64 * 2**20, gpus=(3, 5), announce=False) as executor:
        assert isinstance(executor, DaskExecutor)
        shape = executor.worker_shape()
        assert shape.workers == 2 and shape.gpu_workers == 2 and shape.threads_per_worker == 1
        seen = executor.client.run(lambda: os.environ["CUDA_VISIBLE_DEVICES"])
        assert sorted(seen.values()) == ["3,5", "5,3"]


def _worker_address(job, task):
    return get_worker().address


def _slow_worker_address(job, task):
    time.sleep(0.1)
    return _worker_address(job, task)


@gen_cluster(
    nthreads=[("127.0.0.1", 1, {"resources": {GPU_RESOURCE: 1}}), ("127.0.0.1", 1)],
)
async def test_tile_tasks_that_ask_for_a_gpu_land_only_on_gpu_workers(s, gpu, cpu):
    tasks = [TileTask(index=i, i=i, j=0, row0=0, row1=1, col0=0, col1=1) for i in range(8)]

    def run(client):
        executor = DaskExecutor(client)
        assert executor.worker_shape().gpu_workers == 1
        on_gpu = executor.run(
            _worker_address, None, tasks, on_result=lambda _: None, resources={GPU_RESOURCE: 1}
        )
        # Without the resource request both kinds of worker take tasks.
        anywhere = executor.run(_slow_worker_address, None, tasks, on_result=lambda _: None)
        return on_gpu, anywhere

    on_gpu, anywhere = await with_sync_client(s, run)
    assert on_gpu == [gpu.address] * 8
    assert set(anywhere) == {gpu.address, cpu.address}

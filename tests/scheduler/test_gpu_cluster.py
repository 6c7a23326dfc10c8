"""Multi-GPU node worker specs, checked without a GPU on real worker processes."""

from __future__ import annotations

import os

import pytest
from distributed import Client, Nanny, Scheduler, SpecCluster

from outofcore.errors import ClusterError
from scheduler.cluster import open_executor
from scheduler.executors import DaskExecutor
from scheduler.gpu_cluster import gpu_worker_specs, parse_gpus
from scheduler.plan import TileTask


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


def _where(job, task):
    return os.environ.get("OUTOFCORE_TEST_ROLE", "plain")


def test_tile_tasks_that_ask_for_a_gpu_land_only_on_gpu_workers():
    specs = gpu_worker_specs((0,), memory_limit=2**30)
    specs["gpu-0"]["options"]["env"]["OUTOFCORE_TEST_ROLE"] = "gpu"
    specs["cpu"] = {
        "cls": Nanny,
        "options": {"nthreads": 1, "env": {"OUTOFCORE_TEST_ROLE": "cpu"}},
    }
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": ":0"}}
    with SpecCluster(workers=specs, scheduler=scheduler) as cluster, Client(cluster) as client:
        client.wait_for_workers(2, timeout=60)
        executor = DaskExecutor(client)
        assert executor.worker_shape().gpu_workers == 1
        tasks = [TileTask(index=i, i=i, j=0, row0=0, row1=1, col0=0, col1=1) for i in range(8)]
        roles = executor.run(_where, None, tasks, on_result=lambda _: None, resources={"GPU": 1})
        assert roles == ["gpu"] * 8
        # Without the resource request both kinds of worker take tasks.
        anywhere = executor.run(_slow_where, None, tasks, on_result=lambda _: None)
        assert set(anywhere) == {"gpu", "cpu"}


def _slow_where(job, task):
    import time

    time.sleep(0.2)
    return _where(job, task)

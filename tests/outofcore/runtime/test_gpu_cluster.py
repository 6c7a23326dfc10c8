"""Multi-GPU node clusters (the runtime's, on the CUDA backend's node): the choice of
dask-cuda or outofcore's own specs, the specs.

The devices each worker sees are checked on real worker processes (each has
its own environment); the routing of GPU tasks on in-process workers
(distributed's gen_cluster), as it needs no separate processes.  Without a GPU
(this project's machines) dask-cuda's LocalCUDACluster cannot start: the test
that starts one runs only where NVML shows a GPU.
"""

from __future__ import annotations

import logging
import os
import time

import pytest
from distributed import LocalCluster, SpecCluster, get_worker
from distributed.utils_test import gen_cluster

from outofcore.backends.cuda.workers import (
    CUDA_NODE,
    DASK_CUDA_KIND,
    GPU_EXTRA,
    GPU_WORKER_ENV,
    check_gpus_usable,
    choose_gpu_cluster,
    dask_cuda_installed,
    local_cuda_cluster_class,
    nvml_gpu_count,
    probe_gpu_cluster,
)
from outofcore.errors import ClusterError
from outofcore.planner.plan import TileTask
from outofcore.runtime.cluster import open_executor
from outofcore.runtime.executors import DaskExecutor, WorkerShape
from outofcore.runtime.gpu_cluster import (
    GPU_RESOURCE,
    cluster_kind,
    gpu_worker_specs,
    parse_gpus,
)
from outofcore.runtime.memory_cap import memory_cap
from outofcore.runtime.worker_sizing import (
    GPU_WORKER_OVERHEAD_BYTES,
    PAUSE_HEADROOM,
    WORKER_OVERHEAD_BYTES,
    check_worker_memory,
    local_worker_count,
    local_worker_limit,
    worker_allowance,
)
from tests.helpers import with_sync_client

#: Where dask-cuda is installed and NVML shows a GPU, ``gpus`` start a LocalCUDACluster.
DASK_CUDA_STARTS = dask_cuda_installed() and nvml_gpu_count()[0] > 0


def test_specs_rotate_visible_devices_one_thread_and_a_gpu_resource():
    specs = gpu_worker_specs((0, 1, 2, 3), memory_limit=2**30, node=CUDA_NODE)
    assert list(specs) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    visible = [spec["options"]["env"]["CUDA_VISIBLE_DEVICES"] for spec in specs.values()]
    assert visible == ["0,1,2,3", "1,2,3,0", "2,3,0,1", "3,0,1,2"]
    for spec in specs.values():
        assert spec["options"]["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # nvidia-smi's
        assert spec["options"]["nthreads"] == 1
        assert spec["options"]["resources"] == {"GPU": 1}
        assert spec["options"]["memory_limit"] == 2**30
        assert spec["options"]["silence_logs"] == logging.ERROR


@pytest.mark.parametrize("text", ["", "a,b", "0,0", "-1"])
def test_bad_gpu_lists(text):
    with pytest.raises(ClusterError, match="--gpus"):
        parse_gpus(text)


def test_without_dask_cuda_the_specs_are_chosen_and_the_extra_named():
    for nvml_gpus in (0, 8):  # NVML is not asked: pynvml comes with dask-cuda
        choice = choose_gpu_cluster((0, 1), dask_cuda_installed=False, nvml_gpus=nvml_gpus)
        assert not choice.dask_cuda and not choice.warn
        assert "dask-cuda is not installed" in choice.reason and GPU_EXTRA in choice.reason


def test_dask_cuda_without_a_gpu_falls_back_with_a_warning_saying_why():
    choice = choose_gpu_cluster(
        (0,), dask_cuda_installed=True, nvml_gpus=0, nvml_note="NVML: Shared Library Not Found"
    )
    assert not choice.dask_cuda and choice.warn
    assert "NVML shows no GPU on this node (NVML: Shared Library Not Found)" in choice.reason
    assert "cannot start without one" in choice.reason


def test_dask_cuda_with_the_listed_gpus_is_chosen():
    choice = choose_gpu_cluster((3, 0, 1), dask_cuda_installed=True, nvml_gpus=4)
    assert choice.dask_cuda and not choice.warn
    assert "NVML shows 4 GPU(s)" in choice.reason


def test_a_gpu_that_nvml_does_not_show_is_refused_naming_the_count():
    with pytest.raises(ClusterError, match=r"--gpus 0,2,5: NVML shows 2 GPU\(s\) .* 0 to 1, "):
        choose_gpu_cluster((0, 2, 5), dask_cuda_installed=True, nvml_gpus=2)
    with pytest.raises(ClusterError, match="there is no GPU 2, 5 "):
        choose_gpu_cluster((0, 2, 5), dask_cuda_installed=True, nvml_gpus=2)


def test_the_probe_of_this_node_chooses_dask_cuda_only_where_nvml_shows_a_gpu():
    count, note = nvml_gpu_count()
    choice = probe_gpu_cluster((0,))
    assert choice.dask_cuda == (dask_cuda_installed() and count > 0)
    if dask_cuda_installed() and count == 0:  # this project's machines: no GPU
        assert choice.warn and note.startswith("NVML: ") and note in choice.reason


def test_a_gpu_workers_memory_limit_holds_the_gpu_allowance():
    budget = 64 * 2**20
    assert worker_allowance() == WORKER_OVERHEAD_BYTES
    assert worker_allowance(gpu=True) == WORKER_OVERHEAD_BYTES + GPU_WORKER_OVERHEAD_BYTES
    assert local_worker_limit(budget) == int(budget * PAUSE_HEADROOM) + WORKER_OVERHEAD_BYTES
    assert local_worker_limit(budget, gpu=True) == (
        local_worker_limit(budget) + GPU_WORKER_OVERHEAD_BYTES
    )


def test_the_checks_of_a_gpu_workers_memory_count_the_gpu_allowance():
    # A cluster of GPU workers only: each task has its limit less both allowances.
    limit = worker_allowance(gpu=True) + 4 * 2**20
    gpu = WorkerShape(2, 1, 1, gpu_workers=2, memory_limits=(("tcp://a:1", limit, 1),) * 2)
    check_worker_memory(gpu, 4 * 2**20)
    with pytest.raises(ClusterError) as refused:
        check_worker_memory(gpu, 4 * 2**20 + 1)
    assert f"after the {worker_allowance(gpu=True)} bytes a GPU worker needs" in str(refused.value)
    cpu = WorkerShape(2, 1, 1, memory_limits=(("tcp://a:1", limit, 1),) * 2)
    check_worker_memory(cpu, GPU_WORKER_OVERHEAD_BYTES + 4 * 2**20)  # no GPU: more per task
    # The memory cap of this machine: a budget that fits a CPU worker, not a GPU worker.
    budget = memory_cap().nbytes - WORKER_OVERHEAD_BYTES
    assert local_worker_count(budget, 1) == 1
    with pytest.raises(ClusterError, match=rf"the {worker_allowance(gpu=True)} bytes of a GPU"):
        local_worker_count(budget, 1, gpu=True)


def test_gpus_are_refused_where_the_driver_shows_no_device_unless_simulated():
    with pytest.raises(ClusterError) as refused:
        check_gpus_usable((0, 1), device_count=0, simulator=False)
    assert str(refused.value).startswith(
        "--gpus 0,1: no CUDA GPU is usable here (the CUDA driver shows 0 devices)"
    )
    check_gpus_usable((0, 1), device_count=0, simulator=True)  # the tests' stand-in GPU
    check_gpus_usable((0, 1), device_count=1, simulator=False)  # NVML checks the indices


@pytest.mark.skipif(
    DASK_CUDA_STARTS,
    reason="dask-cuda is installed and NVML shows a GPU here, so gpus=(3, 5) would start a "
    "LocalCUDACluster (refused: no GPU 3, 5 on this node), not outofcore's own workers",
)
def test_gpus_without_a_node_are_refused_before_any_cluster_starts():
    with (
        pytest.raises(ClusterError, match=r"GPU workers for GPUs \[0\] need a GPU backend's node"),
        open_executor(None, budget_bytes=64 * 2**20, gpus=(0,)),
    ):
        pass


def test_gpu_workers_start_with_their_own_device_first(caplog, capfd):
    with (
        caplog.at_level(logging.INFO, logger="outofcore"),
        open_executor(None, budget_bytes=64 * 2**20, gpus=(3, 5), node=CUDA_NODE) as executor,
    ):
        assert isinstance(executor, DaskExecutor)
        shape = executor.worker_shape()
        assert shape.workers == 2 and shape.gpu_workers == 2 and shape.threads_per_worker == 1
        seen = executor.client.run(
            lambda: (os.environ["CUDA_VISIBLE_DEVICES"], os.environ.get("CUDA_DEVICE_ORDER"))
        )
        assert sorted(seen.values()) == [("3,5", "PCI_BUS_ID"), ("5,3", "PCI_BUS_ID")]
        limits = {limit for _, limit, _ in shape.memory_limits}
        assert limits == {local_worker_limit(64 * 2**20, gpu=True)}
    # No GPU here: outofcore's own workers, with the reason logged (a warning where dask-cuda
    # is installed, as in the test install on Linux) and the start line naming the kind.
    [record] = [r for r in caplog.records if "GPU workers" in r.message]
    assert record.message.startswith(
        "starting outofcore's own GPU workers, not dask-cuda's LocalCUDACluster: "
    )
    if dask_cuda_installed():
        assert record.levelno == logging.WARNING and "NVML shows no GPU" in record.message
    else:
        assert record.levelno == logging.INFO and GPU_EXTRA in record.message
    stderr = capfd.readouterr().err  # the worker processes' too
    assert "Started a LocalCluster: 2 worker(s), " in stderr
    assert "distributed.worker - INFO" not in stderr  # silence_logs reaches the workers


def test_cluster_kind_names_the_cluster_that_started():
    # Its own cluster: the cluster started is what is tested.
    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster:
        assert isinstance(cluster, SpecCluster) and cluster_kind(cluster) == "LocalCluster"
    dask_cuda = pytest.importorskip("dask_cuda", reason="dask-cuda is the [gpu] extra")
    # dask-cuda's own class, made but not started (its __init__ reads NVML: no GPU here).
    unstarted = object.__new__(dask_cuda.LocalCUDACluster)
    assert cluster_kind(unstarted, CUDA_NODE) == DASK_CUDA_KIND == "LocalCUDACluster (dask-cuda)"
    assert cluster_kind(unstarted) == "LocalCluster"  # no node: no vendor's cluster known
    # What gpus start: dask-cuda's class, with nvidia-smi's device order for its workers.
    ordered = local_cuda_cluster_class()
    assert issubclass(ordered, dask_cuda.LocalCUDACluster)
    assert cluster_kind(object.__new__(ordered), CUDA_NODE) == DASK_CUDA_KIND


@pytest.mark.skipif(
    not DASK_CUDA_STARTS,
    reason="a LocalCUDACluster needs dask-cuda and a GPU that NVML shows (none here)",
)
def test_on_a_gpu_node_gpus_start_a_local_cuda_cluster_with_the_same_guarantees(capsys):
    budget = 64 * 2**20
    with open_executor(None, budget_bytes=budget, gpus=(0,), node=CUDA_NODE) as executor:
        assert isinstance(executor, DaskExecutor)
        shape = executor.worker_shape()
        assert shape.workers == 1 and shape.gpu_workers == 1 and shape.threads_per_worker == 1
        assert {limit for _, limit, _ in shape.memory_limits} == {
            local_worker_limit(budget, gpu=True)
        }
        seen = executor.client.run(
            lambda: (os.environ["CUDA_VISIBLE_DEVICES"], os.environ.get("CUDA_DEVICE_ORDER"))
        )
        assert list(seen.values()) == [("0", GPU_WORKER_ENV["CUDA_DEVICE_ORDER"])]
        # dask-cuda's CPU affinity: the worker runs on the cores NVML names for its GPU
        # (within this process's own, which Linux intersects them with).
        from dask_cuda.utils import get_cpu_affinity  # noqa: PLC0415

        near = set(get_cpu_affinity(0)) & os.sched_getaffinity(0)
        affinity = executor.client.run(lambda: sorted(os.sched_getaffinity(0)))
        assert [set(cores) for cores in affinity.values()] == [near]
    assert f"Started a {DASK_CUDA_KIND}: 1 worker(s), " in capsys.readouterr().err


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

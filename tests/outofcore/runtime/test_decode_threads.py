"""Decode threads sized from the worker's CPU affinity (issue 44, item 3): a task decodes
one chunk a core it may use, within its budget, and every thread count follows the
affinity mask, not the machine's count."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from outofcore.jobs.inputs import open_product
from outofcore.jobs.planning import plan_job
from outofcore.jobs.spec import JobSpec
from outofcore.planner.memory import (
    DECODE_BUFFER_SHARE,
    GPU_DECODE_BUFFER_SHARE,
    decode_threads,
    input_chunk_bytes,
)
from outofcore.planner.plan import DEFAULT_IO_CONCURRENCY
from outofcore.planner.problem import Problem
from outofcore.runtime.executors import WorkerShape
from tests.helpers import ROOT, write_zarr

#: float32 operands in 2048-square chunks: 16 MiB decoded a chunk.
BIG_CHUNKS = Problem(
    m=8192, k=6144, n=7168, itemsize=4, a_chunks=(2048, 2048), b_chunks=(2048, 2048)
)


def test_a_thread_a_core_within_an_eighth_of_the_budget():
    chunk = input_chunk_bytes(BIG_CHUNKS)
    assert chunk == 16 * 2**20
    # A GPU node's worker: 16 cores and room for their buffers.
    assert decode_threads(BIG_CHUNKS, 16 * 2**30, 16, DEFAULT_IO_CONCURRENCY) == 16
    # 1 GiB: an eighth is 128 MiB, four threads of two 16 MiB buffers.
    assert decode_threads(BIG_CHUNKS, 2**30, 16, DEFAULT_IO_CONCURRENCY) == 4
    assert 4 * 2 * chunk <= 2**30 * DECODE_BUFFER_SHARE < 5 * 2 * chunk
    # Never fewer than the least asked (the plan's default), even with one core.
    assert decode_threads(BIG_CHUNKS, 2**30, 1, DEFAULT_IO_CONCURRENCY) == DEFAULT_IO_CONCURRENCY
    assert decode_threads(BIG_CHUNKS, 2**20, 16, 2) == 2


def test_a_gpu_task_decodes_on_its_cores_within_half_its_budget():
    """Issue 52: the 721 GFLOP job's GPU worker decoded 4 chunks at once on a 16-core node
    (an eighth of 1 GiB); its kernel waits on zstd, so a GPU's task takes every core of
    its share that half its budget holds buffers for."""
    chunk = input_chunk_bytes(BIG_CHUNKS)
    assert decode_threads(BIG_CHUNKS, 2**30, 16, DEFAULT_IO_CONCURRENCY, gpu=True) == 16
    # Two tiles in flight on the GPU: 512 MiB and 8 cores a task.
    assert decode_threads(BIG_CHUNKS, 2**29, 8, DEFAULT_IO_CONCURRENCY, gpu=True) == 8
    assert decode_threads(BIG_CHUNKS, 2**29, 8, DEFAULT_IO_CONCURRENCY) == 2  # BLAS's share
    # 256 MiB: half of it holds four threads' buffers, not the 8 cores'.
    assert decode_threads(BIG_CHUNKS, 2**28, 8, DEFAULT_IO_CONCURRENCY, gpu=True) == 4
    assert 4 * 2 * chunk <= 2**28 * GPU_DECODE_BUFFER_SHARE < 5 * 2 * chunk


def test_a_gpu_plan_decodes_on_more_cores_than_a_cpu_plan_of_the_same_budget(tmp_path):
    write_zarr(tmp_path / "a.zarr", np.ones((2048, 1024), "float32"), (512, 512))
    write_zarr(tmp_path / "b.zarr", np.ones((1024, 2048), "float32"), (512, 512))
    shape = {"workers": 1, "threads_per_worker": 1, "blas_threads": 16}
    cpu_spec, gpu_spec = JobSpec(memory="64MiB"), JobSpec(memory="64MiB", backend="cuda")
    product = open_product(str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr"), cpu_spec)
    cpu = plan_job(product, cpu_spec, WorkerShape(**shape))
    gpu = plan_job(product, gpu_spec, WorkerShape(**shape, gpu_workers=1))
    assert cpu.gpu is None and gpu.gpu is not None
    # 1 MiB chunks, 2 MiB a thread: an eighth of 64 MiB holds 4; half of it holds 16.
    assert (cpu.plan.io_concurrency, gpu.plan.io_concurrency) == (4, 16)
    assert gpu.plan.task_bytes <= 64 * 2**20  # the buffers in the budget with the tile


def test_the_plan_decodes_with_the_cores_of_its_workers(tmp_path):
    rng = np.random.default_rng(44)
    write_zarr(tmp_path / "a.zarr", rng.standard_normal((256, 192)).astype("float32"), (64, 64))
    write_zarr(tmp_path / "b.zarr", rng.standard_normal((192, 128)).astype("float32"), (64, 64))
    spec = JobSpec(memory=256 * 2**20)
    product = open_product(str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr"), spec)
    sixteen = plan_job(product, spec, WorkerShape(workers=1, threads_per_worker=1, blas_threads=16))
    assert sixteen.plan.io_concurrency == 16
    # Four tasks at once a worker of 16 cores: each task's share, 4 cores.
    shared = plan_job(product, spec, WorkerShape(workers=1, threads_per_worker=4, blas_threads=4))
    assert shared.plan.io_concurrency == 4
    one = plan_job(product, spec, WorkerShape(workers=1, threads_per_worker=1, blas_threads=1))
    assert one.plan.io_concurrency == DEFAULT_IO_CONCURRENCY


AFFINITY = """
import json, os, zarr
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
from outofcore.runtime.cores import usable_cores
from outofcore.runtime.executors import SynchronousExecutor
from outofcore.runtime.worker_sizing import local_blas_threads
from outofcore.compute.worker_context import worker_context
worker_context().configure_io(8)
print(json.dumps({
    "usable": usable_cores(),
    "sync_blas": SynchronousExecutor().worker_shape().blas_threads,
    "local_blas": local_blas_threads(1),
    "decode": zarr.config.get("threading.max_workers"),
    "machine": os.cpu_count(),
}))
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this OS")
def test_thread_counts_follow_the_affinity_mask_not_the_machine():
    result = subprocess.run(
        [sys.executable, "-c", AFFINITY],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=True,
    )
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["usable"] == seen["sync_blas"] == seen["local_blas"] == seen["decode"] == 1
    assert seen["machine"] >= 1

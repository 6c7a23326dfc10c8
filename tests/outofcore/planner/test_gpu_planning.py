"""GPU-aware planning (issue 44, item 5): a GPU job's plan is ranked with the GPU's rates.

For 32768³ float32 on 8 GPU workers with 8 GiB each, the CPU ranking picked 2 tiles
split 4 ways over k (16 GiB of partial tiles written and read back); with the GPU's
kernel rate, PCIe rate and decode threads the plan keeps whole-k tiles, one or more a
GPU, each resident on the device budget.  A CPU job's plans are those pinned below,
computed with the planner before the GPU ranking existed (2026-11-29).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from outofcore.backends.cuda.rates import (
    CUBLAS_FLOPS,
    DECODE_BPS_PER_THREAD,
    KERNEL_FLOPS,
    PCIE_BPS,
)
from outofcore.backends.registry import job_gpu_target
from outofcore.errors import InputError
from outofcore.planner.gpu_rates import gpu_seconds
from outofcore.planner.memory import round_up
from outofcore.planner.model import (
    GPU_NODE_THREADS,
    assumed_plans,
    gpu_machine,
    gpu_node,
    predict,
)
from outofcore.planner.problem import Problem
from outofcore.planner.tiling import make_output_plan
from tests.helpers import cuda_device_plan, cuda_target

GPU_NODE = gpu_node(cuda_target("float32"))

GiB, MiB = 2**30, 2**20


def chunked(m: int, k: int, n: int, itemsize: int, chunks: tuple[int, int], **extra) -> Problem:
    """A product whose A and B are stored in ``chunks``."""
    return Problem(m, k, n, itemsize, a_chunks=chunks, b_chunks=chunks, **extra)


#: name: (problem, task budget, workers, io_concurrency, options) -> (tm, tn, tk, splits,
#: tiles), as the CPU planner chose before the GPU ranking was added.
CPU_PINS = {
    "cube 32768, 8 workers, 8 GiB": (
        (chunked(32768, 32768, 32768, 4, (2048, 2048)), 8 * GiB, 8, 2, {}),
        (32768, 16384, 2048, 4, 2),
    ),
    "cube 16384, 1 worker, 1 GiB": (
        (chunked(16384, 16384, 16384, 4, (2048, 2048)), GiB, 1, 2, {}),
        (16384, 8192, 2048, 1, 2),
    ),
    "the 8192x6144x7168 job, 4 workers": (
        (chunked(8192, 6144, 7168, 4, (2048, 2048)), GiB, 4, 2, {}),
        (4096, 7168, 2048, 2, 2),
    ),
    "tall and skinny float64, 2 workers": (
        (Problem(200000, 512, 300, 8, (5000, 512), (512, 300)), 512 * MiB, 2, 2, {}),
        (25000, 300, 512, 1, 8),
    ),
    "deep k, 4 workers": (
        (Problem(4096, 262144, 4096, 4, (1024, 4096), (4096, 1024)), 512 * MiB, 4, 4, {}),
        (4096, 4096, 4096, 4, 1),
    ),
    "Gram float64, 16 workers": (
        (
            Problem(20000, 50000, 20000, 8, (1000, 5000), (5000, 1000), symmetric=True),
            2 * GiB,
            16,
            2,
            {},
        ),
        (5000, 5000, 5000, 2, 10),
    ),
    "a stack of 8, 3 workers": (
        (
            chunked(3000, 2000, 2500, 4, (500, 500), batch=8, a_matrices=8, b_matrices=8),
            128 * MiB,
            3,
            2,
            {},
        ),
        (1500, 2500, 1000, 1, 16),
    ),
    "forced tile, 8 workers": (
        (chunked(8192, 32768, 8192, 4, (1024, 1024)), 2 * GiB, 8, 2, {"tile": (8192, 8192)}),
        (8192, 8192, 1024, 8, 1),
    ),
}


@pytest.mark.parametrize("name", list(CPU_PINS))
def test_a_cpu_jobs_plan_is_unchanged(name):
    (problem, budget, workers, io, options), expected = CPU_PINS[name]
    plan = make_output_plan(problem, budget, workers, io_concurrency=io, **options)
    assert (plan.tm, plan.tn, plan.tk, plan.splits, len(plan.tasks)) == expected


#: The issue's case: 32768³ float32 in zstd 2048² chunks, 8 GPU workers with 8 GiB each.
CUBE = chunked(32768, 32768, 32768, 4, (2048, 2048))


def gpu_plan(problem: Problem, budget: int, workers: int, device: int | None, io: int = 2):
    """The plan of a float32 GPU job with ``device`` bytes of device memory an engine."""
    gpu = cuda_target(problem_dtype(problem), device_memory=device)
    return make_output_plan(problem, budget, workers, io_concurrency=io, gpu=gpu)


def problem_dtype(problem: Problem) -> str:
    return {4: "float32", 8: "float64"}[problem.itemsize]


def device_plans(plan, device: int):
    """The device tiling of every host tile shape of ``plan`` on ``device`` bytes."""
    shapes = {task.shape for task in plan.tasks}
    k = plan.problem.k
    return [
        cuda_device_plan(tm, tn, plan.tk, plan.problem.itemsize, device, k=k) for tm, tn in shapes
    ]


@pytest.mark.parametrize("threads", [2, 16])
def test_the_issues_cube_on_8_gpus_plans_8_resident_whole_k_tiles(threads):
    """The CPU ranking splits 2 tiles 4 ways (pinned above); the GPU's keeps whole k."""
    plan = gpu_plan(CUBE, 8 * GiB, 8, 8 * GiB, io=threads)
    assert len(plan.tasks) >= 8 and plan.splits == 1 and plan.scratch_bytes == 0
    for device in device_plans(plan, 8 * GiB):
        assert device.resident and device.device_bytes <= 8 * GiB
    assert plan.task_bytes <= 8 * GiB  # the host budget holds as ever


def test_the_gpu_ranking_rates_the_split_plan_slower():
    """The seconds behind the choice: the 2-tile split reads half as much but moves 16 GiB
    of partial tiles twice, beside a kernel that needs a quarter of a second."""
    gpu = cuda_target("float32", device_memory=8 * GiB)
    chosen = gpu_plan(CUBE, 8 * GiB, 8, 8 * GiB)
    split = gpu_seconds(CUBE, 32768, 16384, 2048, 8, 4, 2, gpu)
    whole = gpu_seconds(CUBE, chosen.tm, chosen.tn, chosen.tk, 8, 1, 2, gpu)
    assert whole < split
    assert 2 * 32768**3 / 8 / KERNEL_FLOPS["float32"] < whole  # decode-bound, not compute


@pytest.mark.parametrize("device", [64 * MiB, 256 * MiB, 512 * MiB, GiB])
@pytest.mark.parametrize("workers", [1, 8])
def test_the_tile_is_the_largest_the_device_budget_keeps_resident(device, workers):
    """Every tile stays on the device; a tiling of fewer tile rows or columns would not."""
    plan = gpu_plan(CUBE, 8 * GiB, workers, device)
    gpu = cuda_target("float32", device_memory=device)
    assert plan.splits == 1 and len(plan.tasks) >= workers
    assert all(d.resident and d.device_bytes <= device for d in device_plans(plan, device))
    rows, cols = plan.tiles_down, plan.tiles_across
    if len(plan.tasks) > workers:  # fewer tiles would still keep every GPU busy
        taller = round_up(-(-CUBE.m // (rows - 1)), 2048) if rows > 1 else None
        wider = round_up(-(-CUBE.n // (cols - 1)), 2048) if cols > 1 else None
        assert taller is None or not gpu.resident(taller, plan.tn, plan.tk, 4)
        assert wider is None or not gpu.resident(plan.tm, wider, plan.tk, 4)


@pytest.mark.parametrize("workers", [2, 4, 8, 16])
def test_no_split_of_k_where_whole_k_tiles_keep_every_gpu_busy(workers):
    """The 8192x6144x7168 job of the issue: its CPU plan splits k from 4 workers on."""
    problem = chunked(8192, 6144, 7168, 4, (2048, 2048))
    plan = gpu_plan(problem, GiB, workers, None)
    assert plan.splits == 1 and len(plan.tasks) >= workers
    if workers >= 4:
        assert make_output_plan(problem, GiB, workers).splits > 1  # the CPU's choice differs


def test_k_is_still_split_where_the_tiles_cannot_keep_the_gpus_busy():
    """One 2048² tile of a deep k: the chunk grid allows no more tiles, so 8 GPUs share
    its k (the partial tiles are small beside the panels each part decodes)."""
    problem = chunked(2048, 262144, 2048, 4, (2048, 2048))
    plan = gpu_plan(problem, GiB, 8, 8 * GiB)
    assert len(plan.tasks) == 1 and plan.splits == 8


def test_without_a_device_budget_no_tile_is_required_resident():
    """The device budget unknown when planning (each engine's own share): the ranking
    alone decides, as with a budget that holds every candidate."""
    assert cuda_target("float32").resident(32768, 32768, 2048, 4)
    unknown = gpu_plan(CUBE, 8 * GiB, 8, None)
    ample = gpu_plan(CUBE, 8 * GiB, 8, 64 * GiB)
    assert (unknown.tm, unknown.tn, unknown.splits) == (ample.tm, ample.tn, ample.splits)


def test_a_device_budget_too_small_for_any_resident_tile_leaves_the_tiles_sub_tiled():
    """Not even the smallest aligned tile fits: the plan is the unconstrained one, and the
    engine sub-tiles it (outofcore.planner.device_plan)."""
    tiny = gpu_plan(CUBE, 8 * GiB, 8, 4 * MiB)
    free = gpu_plan(CUBE, 8 * GiB, 8, None)
    assert (tiny.tm, tiny.tn) == (free.tm, free.tn)
    assert not any(d.resident for d in device_plans(tiny, 4 * MiB))


def test_a_larger_kernel_rate_or_more_decode_threads_estimates_less_time():
    gpu = cuda_target("float32")
    args = (CUBE, 16384, 8192, 2048, 8, 1)
    slow_kernel = replace(gpu, kernel_flops=1e12)  # compute-bound at 1 TFLOP/s
    assert gpu_seconds(*args, 2, slow_kernel) > gpu_seconds(*args, 2, gpu)
    assert gpu_seconds(*args, 16, gpu) < gpu_seconds(*args, 2, gpu)


def test_the_gpu_figures_have_one_home():
    """The assumed GPU node and a job's GPU machine take the same measured rates."""
    assert GPU_NODE.kernel_flops == KERNEL_FLOPS["float32"] == 37e12
    assert GPU_NODE.pcie_bps == PCIE_BPS == cuda_target("float64").pcie_bps
    assert GPU_NODE.decode_bps == GPU_NODE_THREADS * DECODE_BPS_PER_THREAD
    assert gpu_node(cuda_target("float64")).kernel_flops == KERNEL_FLOPS["float64"]
    machine = gpu_machine(cuda_target("complex64"), 4, 3, name="x", disk_bps=1e9)
    assert machine.kernel_flops == KERNEL_FLOPS["complex64"] and machine.workers == 4
    assert machine.decode_bps == pytest.approx(3 * DECODE_BPS_PER_THREAD)


def test_the_gpu_node_what_if_is_planned_with_its_gpus_rates():
    plan = make_output_plan(CUBE, 8 * GiB, 8, io_concurrency=2)  # a CPU job's plan
    (gpu_machine_, replanned), *_ = assumed_plans(plan, gpu=cuda_target("float32"))
    assert gpu_machine_.pcie_bps and replanned.splits == 1 and len(replanned.tasks) >= 8
    assert plan.splits == 4  # the CPU plan, for the CPU what-ifs


def test_a_gpu_target_refuses_what_no_kernel_multiplies_and_rates_that_are_not_positive():
    with pytest.raises(InputError, match="kernel multiplies in float32"):
        cuda_target("int64")
    with pytest.raises(InputError, match="positive"):
        replace(cuda_target("float32"), pcie_bps=0.0)
    with pytest.raises(InputError, match="at least 1 byte"):
        cuda_target("float32", device_memory=0)


@pytest.mark.parametrize(("threads", "disk_bps"), [(2, 3e9), (16, 25e9)])
def test_the_time_model_agrees_with_the_ranking(threads, disk_bps):
    """:func:`outofcore.planner.model.predict` on the same GPUs (and a disk the ranking does not
    know) predicts the GPU plan faster than the CPU ranking's split one."""
    gpu = cuda_target("float32", device_memory=8 * GiB)
    machine = gpu_machine(gpu, 8, threads, name="8 GPUs", disk_bps=disk_bps)
    cpu_plan = make_output_plan(CUBE, 8 * GiB, 8, io_concurrency=threads)
    gpu_plan_ = gpu_plan(CUBE, 8 * GiB, 8, 8 * GiB, io=threads)
    assert cpu_plan.splits == 4 and gpu_plan_.splits == 1
    assert predict(gpu_plan_, machine).seconds < predict(cpu_plan, machine).seconds


def test_cupy_multiplies_at_cublass_rate_and_other_backends_are_refused():
    cupy = cuda_target("float64", backend="cupy")
    assert cupy.kernel_flops == CUBLAS_FLOPS["float64"] > cuda_target("float64").kernel_flops
    assert "cuBLAS 57.3 TFLOP/s float64" in cupy.basis(4)
    assert job_gpu_target("cpu", True, "float32") is None  # a CPU backend has no GPU

"""The time model on paper: pure, monotone in the rates, bottlenecks named."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from outofcore.planner.model import (
    CI_2CORE,
    CPU_CLUSTER_NODE,
    assumed_plans,
    gpu_node,
    predict,
    what_ifs,
)
from outofcore.planner.problem import Problem
from outofcore.planner.tiling import make_output_plan, make_plan
from tests.helpers import cuda_target

GPU_NODE = gpu_node(cuda_target("float32"))


def square(size: int, chunk: int) -> Problem:
    return Problem(
        m=size, k=size, n=size, itemsize=4, a_chunks=(chunk, chunk), b_chunks=(chunk, chunk)
    )


def test_compute_bound_job_on_the_ci_machine():
    plan = make_plan(square(16384, 2048), 2**30)
    p = predict(plan, CI_2CORE)
    assert p.bottleneck == "cores"  # BLAS, decoding and writing share the two cores
    assert p.compute == pytest.approx(2 * 16384**3 / CI_2CORE.kernel_flops)
    assert p.decode == pytest.approx(3 * 2**30 / CI_2CORE.decode_bps)
    assert p.seconds == pytest.approx(p.compute + p.decode + p.write + p.fill)
    assert p.pcie == 0 and p.network == 0


def test_streams_scale_with_their_rates():
    plan = make_plan(square(16384, 2048), 2**30)
    base = predict(plan, GPU_NODE)
    slow_pcie = predict(plan, replace(GPU_NODE, pcie_bps=GPU_NODE.pcie_bps / 10))
    assert slow_pcie.pcie == pytest.approx(10 * base.pcie)
    assert slow_pcie.seconds >= base.seconds
    fast_kernel = predict(plan, replace(GPU_NODE, kernel_flops=GPU_NODE.kernel_flops * 2))
    assert fast_kernel.compute == pytest.approx(base.compute / 2, rel=1e-6)


def test_pcie_bytes_are_the_plans_reads_plus_the_output_and_partials():
    plan = make_plan(square(8192, 1024), 2**28, workers=8)
    assert plan.splits > 1  # 4 tiles for 8 GPUs: k is split, partial tiles cross PCIe too
    p = predict(plan, GPU_NODE)
    moved = plan.bytes_read + plan.bytes_written + plan.scratch_bytes
    expected = moved / GPU_NODE.workers / GPU_NODE.pcie_bps
    assert p.pcie == pytest.approx(expected)


def test_more_nodes_is_never_slower_and_network_shares_out():
    plan = make_plan(square(65536, 4096), 8 * 2**30, workers=16)
    four = predict(plan, CPU_CLUSTER_NODE.scaled(4))
    sixteen = predict(plan, CPU_CLUSTER_NODE.scaled(16))
    assert sixteen.seconds <= four.seconds
    assert sixteen.network == pytest.approx(four.network / 4)
    assert sixteen.workers == 16


def test_busiest_worker_counts_ragged_tiles():
    plan = make_plan(square(10000, 1000), 2**30, tile=(3000, 10000))  # 4 tiles: 3,3,3,1
    one = predict(plan, CI_2CORE)
    assert one.compute == pytest.approx(2 * 10000**3 / CI_2CORE.kernel_flops)
    two = predict(plan, replace(CI_2CORE, workers_per_node=2))
    # Largest first: 3+1 and 3+3 thousand rows -> the busiest worker has 6 of 10.
    assert two.compute == pytest.approx(0.6 * one.compute)


def test_million_square_problem_plans_and_predicts_in_under_a_second():
    started = time.perf_counter()
    plan = make_plan(square(10**6, 4096), 8 * 2**30, workers=64)
    predictions = [predict(plan, CI_2CORE), *what_ifs(plan, gpu=cuda_target("float32"))]
    assert time.perf_counter() - started < 1
    assert [p.machine for p in predictions][:2] == [CI_2CORE.name, GPU_NODE.name]
    assert all(p.seconds > 0 for p in predictions)


def test_no_more_workers_are_busy_than_the_plan_has_tasks():
    """One 1024x1024 tile from k = 524288: unsplit, 16 workers are no faster than one."""
    problem = Problem(
        m=1024, k=524288, n=1024, itemsize=4, a_chunks=(1024, 2048), b_chunks=(2048, 1024)
    )
    machine = CPU_CLUSTER_NODE.scaled(16)
    one_task = predict(make_plan(problem, 2**30, 16, splits=1), machine)
    alone = predict(make_plan(problem, 2**30, 1), CPU_CLUSTER_NODE)
    assert one_task.busy_workers == 1 and one_task.workers == 16
    assert one_task.compute == pytest.approx(alone.compute)
    assert one_task.decode == pytest.approx(alone.decode)
    split = predict(make_plan(problem, 2**30, 16), machine)
    assert split.busy_workers == 16
    assert split.compute == pytest.approx(alone.compute / 16, rel=0.01)


def test_the_cpu_streams_add_up_or_overlap_as_measured():
    """h = 0: BLAS, codecs and writer add up on the cores; h = 1: only the longest counts;
    between, the hidden part of the shorter is taken off.  The first panel's decoding is
    in T_fill only for its hidden part."""
    plan = make_plan(square(8192, 2048), 2**30)
    base = replace(CI_2CORE, kernel_flops=20e9, decode_bps=0.3e9, encode_bps=0.5e9)
    added = predict(plan, base)
    assert added.cores == pytest.approx(added.compute + added.decode + added.write)
    first = 4 * plan.tk * (plan.tm + plan.tn)
    assert added.fill == pytest.approx(first * base.compression / base.disk_bps)
    hidden = predict(plan, replace(base, overlap=1.0))
    assert hidden.cores == pytest.approx(max(hidden.compute, hidden.decode + hidden.write))
    assert hidden.fill == pytest.approx(added.fill + first / base.decode_bps)
    half = predict(plan, replace(base, overlap=0.5))
    codecs = half.decode + half.write
    assert half.cores == pytest.approx(half.compute + codecs / 2)  # codecs < compute here
    assert half.seconds == pytest.approx(half.cores + half.fill + half.start)


def test_the_start_and_each_tasks_own_cost_are_added_once_per_busy_worker():
    plan = make_plan(square(10000, 1000), 2**30, tile=(3000, 10000))  # 4 tiles
    base = predict(plan, CI_2CORE)
    assert base.start == 0
    costly = predict(plan, replace(CI_2CORE, start_seconds=2.0, task_seconds=0.25))
    assert costly.start == pytest.approx(2.0 + 4 * 0.25)
    assert costly.seconds == pytest.approx(base.seconds + 3.0)
    two = predict(plan, replace(CI_2CORE, workers_per_node=2, start_seconds=2.0, task_seconds=0.25))
    assert two.start == pytest.approx(2.0 + 2 * 0.25)  # 4 tiles on 2 workers


def test_split_plans_count_their_parts_and_reductions_as_tasks():
    problem = Problem(
        m=1024, k=524288, n=1024, itemsize=4, a_chunks=(1024, 2048), b_chunks=(2048, 1024)
    )
    plan = make_plan(problem, 2**30, 4)
    assert plan.splits > 1 and len(plan.tasks) == 1
    machine = replace(CPU_CLUSTER_NODE.scaled(4), task_seconds=1.0)
    tasks = plan.splits + 1  # the parts, then the reduction
    assert predict(plan, machine).start == pytest.approx(-(-tasks // 4))


def test_partial_tiles_are_written_and_read_back_on_the_cores():
    """Split-k's partial tiles cost a raw write and a raw read per byte, on the cores a
    CPU worker multiplies with: the issue-20 job (4096² from k = 4096 in 32 parts) was
    predicted 1.8 s with them in the disk stream only, and took 7.7 s."""
    problem = Problem(m=4096, k=4096, n=4096, itemsize=4, a_chunks=(4096, 64), b_chunks=(64, 4096))
    plan = make_plan(problem, 160 * 2**20, splits=32)
    machine = replace(CI_2CORE, scratch_write_bps=0.6e9, scratch_read_bps=2.8e9)
    p = predict(plan, machine)
    assert plan.scratch_bytes == 32 * 4096 * 4096 * 4
    assert p.scratch == pytest.approx(plan.scratch_bytes * (1 / 0.6e9 + 1 / 2.8e9))
    assert p.cores == pytest.approx(p.compute + p.decode + p.write + p.scratch)
    assert p.bottleneck == "cores" and p.seconds > p.scratch
    # Without raw rates of its own a machine's codec rates stand in.
    assumed = predict(plan, CI_2CORE)
    rates = 1 / CI_2CORE.encode_bps + 1 / CI_2CORE.decode_bps
    assert assumed.scratch == pytest.approx(plan.scratch_bytes * rates)
    assert predict(make_plan(problem, 160 * 2**20, splits=1), machine).scratch == 0


def test_what_ifs_keep_the_jobs_forced_tile_depth_and_split():
    """The assumed machines get the job's options: a forced tile, panel depth and split
    of k stay forced on every machine (issue 29: they were dropped)."""
    problem = square(8192, 512)
    forced = {"tile": (1024, 2048), "tk": 1024, "splits": 2}
    plan = make_output_plan(problem, 2**30, 1, **forced)
    replans = assumed_plans(plan, **forced)
    assert [machine.workers for machine, _ in replans] != [plan.workers] * len(replans)
    for machine, replanned in replans:
        assert (replanned.tm, replanned.tn, replanned.tk) == (1024, 2048, 1024), machine.name
        assert replanned.splits == 2
        assert replanned.workers == machine.workers
        assert replanned.task_budget_bytes == plan.task_budget_bytes
    assert len(what_ifs(plan, **forced)) == len(replans)
    # Without the options each machine's own search chooses (its split differs here).
    free = assumed_plans(plan)
    assert any((p.tm, p.tn, p.tk, p.splits) != (1024, 2048, 1024, 2) for _, p in free)


def test_limb_products_cost_their_gemms():
    """A wide integer product is several float64 ``gemm`` a panel (int32 4, int64 10:
    outofcore.backends.limbs); the model counts them (issue 45: ``plan`` predicted 229 ms
    for an int32 job whose tasks took 1.93 s)."""
    import dataclasses  # noqa: PLC0415

    wide = dataclasses.replace(square(4096, 1024), itemsize=8)
    plain = predict(make_plan(wide, 2**30), CI_2CORE)
    for limbs, gemms in ((2, 4), (4, 10)):
        problem = dataclasses.replace(wide, limbs=limbs)
        assert problem.limb_gemms == gemms
        limbed = predict(make_plan(problem, 2**30), CI_2CORE)
        assert limbed.compute == pytest.approx(gemms * plain.compute, rel=0.3)

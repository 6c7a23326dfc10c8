"""GPU-aware planning (issue 44, item 5): a GPU job's plan is ranked with the GPU's rates.

For 32768³ float32 on 8 GPU workers with 8 GiB each, the CPU ranking picked 2 tiles
split 4 ways over k (16 GiB of partial tiles written and read back); with the GPU's
kernel rate, PCIe rate and decode threads the plan keeps whole-k tiles, one or more a
GPU, each resident on the device budget.  A CPU job's plans are those pinned below,
computed with the planner before the GPU ranking existed (2026-11-29).
"""

from __future__ import annotations

import pytest

from scheduler.problem import Problem
from scheduler.tiling import make_output_plan

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

"""Plan time bounded by the grid's description, not its size (issue 42, item 6).

``outofcore plan X X --transpose-b`` of an X in 1x1 chunks took 2 s at 10**4 rows, 83 s
at 10**6 and over 120 s at 10**7: :func:`outofcore.planner.memory.output_chunk` stepped through
the tile edge one divisor candidate at a time, about 54,000 times a plan (most from the
what-if plans).  The plans chosen are unchanged: ``plans_2d.json`` pins the ordinary
ones (tests/outofcore/planner/test_plan_batch.py), and :func:`output_chunk` is checked here
against its definition.
"""

from __future__ import annotations

import time

import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st

from outofcore.jobs.planning import plan_job
from outofcore.jobs.spec import JobSpec
from outofcore.planner.memory import MAX_OUTPUT_CHUNK, output_chunk
from outofcore.planner.model import what_ifs
from outofcore.planner.problem import Problem
from outofcore.planner.tiling import make_output_plan
from outofcore.runtime.cluster import worker_shape_of
from tests.helpers import cuda_target

#: Seconds a plan of any grid may take here (measured about 0.3 s at 10**7 rows; the
#: 2-core CI machine runs other tests beside it).
PLAN_SECONDS = 10.0


def largest_divisor_within(edge: int, cap: int = MAX_OUTPUT_CHUNK) -> int:
    """The definition: the largest divisor of ``edge`` no bigger than ``cap``."""
    return max(size for size in range(1, min(edge, cap) + 1) if edge % size == 0)


def timed(function, *args, **kwargs):
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - started


@given(
    st.one_of(
        st.integers(1, 10**7),
        st.integers(1, 2**62),
        st.sampled_from([9_999_991, 1031 * 1033, 2 * 1031 * 1033, 2039 * 2029, 2**61 - 1]),
        st.builds(lambda a, b: a * b, st.integers(1, 5000), st.integers(1, 5000)),
    )
)
def test_output_chunk_is_the_largest_divisor_within_the_cap(edge):
    assert output_chunk(edge) == largest_divisor_within(edge)


@pytest.mark.parametrize("rows", [10**4, 10**6, 10**7, 9_999_991])
def test_the_plan_and_its_what_ifs_of_a_huge_grid_of_1x1_chunks_are_quick(rows):
    """The 1x1-chunked Gram product ``X @ X.T`` of the issue, pure planning."""
    problem = Problem(
        m=rows, k=2, n=rows, itemsize=4, a_chunks=(1, 1), b_chunks=(1, 1), symmetric=True
    )
    plan, seconds = timed(make_output_plan, problem, 2**30, 1)
    assumed, more = timed(what_ifs, plan, gpu=cuda_target("float32"))
    assert seconds + more < PLAN_SECONDS, (seconds, more)
    assert plan.tm == plan.tn and len(plan.tasks) > 1
    assert all(p.seconds > 0 for p in assumed) and len(assumed) == 3
    assert plan.out_chunks[0] == output_chunk(plan.tm) <= MAX_OUTPUT_CHUNK


def test_planning_ten_million_rows_in_1x1_chunks_through_the_job(tmp_path):
    """What ``outofcore plan X X --transpose-b`` plans (metadata only: no chunk is
    written), with the what-if plans it prints; over 120 s before."""
    x = tmp_path / "x.zarr"
    zarr.create_array(x, shape=(10**7, 2), chunks=(1, 1), dtype="float32")
    from outofcore.jobs.inputs import open_product  # noqa: PLC0415

    spec = JobSpec(transpose_b=True, memory="1GiB", progress=False)
    started = time.perf_counter()
    product = open_product(str(x), str(x), spec)
    workers = worker_shape_of("sync", budget_bytes=spec.memory, workers=None, gpus=None)
    job = plan_job(product, spec, workers)
    assumed = what_ifs(job.plan, gpu=cuda_target("float32"))
    seconds = time.perf_counter() - started
    assert seconds < PLAN_SECONDS, seconds
    assert job.plan.problem.symmetric and job.plan.problem.m == 10**7
    assert len(assumed) == 3

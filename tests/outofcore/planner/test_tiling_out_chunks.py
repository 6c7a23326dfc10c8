"""Output chunks (and shards) asked of a created output: the plan's tiles fall on them.

``Problem.out_chunks`` is the ``chunks=`` a job asks; ``out_grid`` beside it the shards
asked.  Every tile is a whole number of the grid the output is written in (except where
it meets the array's edge), so each output chunk (or shard) is written by one task.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from outofcore.errors import BudgetError, InputError
from outofcore.planner import tiling
from outofcore.planner.memory import output_shards
from outofcore.planner.plan import Plan
from outofcore.planner.problem import Problem
from outofcore.planner.tiling import make_output_plan, make_plan

dims = st.integers(min_value=1, max_value=3000)
depth = st.integers(min_value=1, max_value=600)
chunk = st.integers(min_value=1, max_value=120)


@st.composite
def asked(draw: st.DrawFn) -> Problem:
    """A product with output chunks asked (clipped to the output, as a job clips them),
    and half the time shards of whole chunks."""
    m, k, n = draw(dims), draw(depth), draw(dims)
    out_chunks = (min(m, draw(st.integers(16, 120))), min(n, draw(st.integers(16, 120))))
    shards = None
    if draw(st.booleans()):
        shards = tuple(c * draw(st.integers(1, 4)) for c in out_chunks)
    return Problem(
        m=m,
        k=k,
        n=n,
        itemsize=draw(st.sampled_from([4, 8])),
        a_chunks=(draw(chunk), draw(chunk)),
        b_chunks=(draw(chunk), draw(chunk)),
        out_chunks=out_chunks,
        out_grid=shards,
    )


def writes_per_object(plan: Plan, grid: tuple[int, int]) -> np.ndarray:
    """How many tasks write each stored object (chunk or shard) of ``grid``."""
    p = plan.problem
    counts = np.zeros((math.ceil(p.m / grid[0]), math.ceil(p.n / grid[1])), int)
    for task in plan.tasks:
        rows = slice(task.row0 // grid[0], math.ceil(task.row1 / grid[0]))
        cols = slice(task.col0 // grid[1], math.ceil(task.col1 / grid[1]))
        counts[rows, cols] += 1
    return counts


@given(asked(), st.integers(1, 6), st.integers(19, 23))
@example(  # the issue's: inputs in 37x50 chunks, the output asked in 64x29
    Problem(m=203, k=151, n=117, itemsize=4, a_chunks=(37, 50), b_chunks=(50, 41),
            out_chunks=(64, 29)),
    2, 17,
)  # fmt: skip
@example(  # many tiles, shards of 2x3 chunks on inputs of other chunks
    Problem(m=2900, k=300, n=2500, itemsize=4, a_chunks=(37, 50), b_chunks=(50, 41),
            out_chunks=(64, 29), out_grid=(128, 87)),
    3, 21,
)  # fmt: skip
def test_tiles_are_whole_output_chunks_and_each_is_written_once(problem, workers, log2_budget):
    budget = 2**log2_budget
    try:
        plan = make_output_plan(problem, budget, workers)
    except BudgetError as exc:
        assert str(budget) in str(exc)
        return
    assert plan.out_chunks == problem.out_chunks
    grid = problem.out_grid or problem.out_chunks  # what a task writes whole
    for task in plan.tasks:
        assert task.row0 % grid[0] == 0 and task.col0 % grid[1] == 0
        assert task.row1 % grid[0] == 0 or task.row1 == problem.m
        assert task.col1 % grid[1] == 0 or task.col1 == problem.n
    assert (writes_per_object(plan, grid) == 1).all()
    assert (writes_per_object(plan, plan.out_chunks) == 1).all()
    assert plan.task_bytes <= budget
    if problem.m == 2900:  # the example of many tiles has them
        assert len(plan.tasks) > 10
    shards = output_shards(plan.problem, plan.tm, plan.tn, plan.out_chunks)
    if problem.out_grid is not None:
        assert shards == problem.out_grid
    if shards is not None:  # a shard holds whole chunks
        assert shards[0] % plan.out_chunks[0] == 0 and shards[1] % plan.out_chunks[1] == 0


def test_tiles_stay_on_the_inputs_chunks_too_where_their_common_multiple_fits():
    problem = Problem(
        m=4000, k=300, n=4000, itemsize=4, a_chunks=(100, 100), b_chunks=(100, 100),
        out_chunks=(64, 64),
    )  # fmt: skip
    plan = make_plan(problem, 64 * 2**20, 4)
    assert plan.tm % 1600 == 0 or plan.tm == 4000  # lcm(100, 64)
    assert plan.tn % 1600 == 0 or plan.tn == 4000


def test_the_output_grid_alone_where_the_common_multiple_does_not_fit():
    """lcm(37, 64) is past the 203 rows: the whole column would be the smallest tile on
    both grids; under a small budget the tiles keep to the output's chunks alone."""
    problem = Problem(
        m=203, k=151, n=117, itemsize=4, a_chunks=(37, 50), b_chunks=(50, 41),
        out_chunks=(64, 29),
    )  # fmt: skip
    whole = make_plan(problem, 2**24, 1)
    assert (whole.tm, whole.tn) == (203, 117)
    small = make_plan(problem, 2**17, 1)
    assert small.tm % 64 == 0 and small.tn % 29 == 0
    assert small.tm < 203 and small.tn < 117
    assert small.task_bytes <= 2**17


def test_a_symmetric_product_has_square_tiles_on_the_asked_chunks():
    problem = Problem(
        m=300, k=90, n=300, itemsize=8, a_chunks=(30, 45), b_chunks=(45, 30),
        symmetric=True, out_chunks=(40, 40),
    )  # fmt: skip
    plan = make_plan(problem, 2**20, 2)
    assert plan.tm == plan.tn and plan.tm % 120 == 0 or plan.tm == 300  # lcm(30, 40)
    assert plan.out_chunks == (40, 40)


def test_without_chunks_asked_the_plan_is_as_before():
    base = Problem(m=999, k=500, n=777, itemsize=4, a_chunks=(100, 100), b_chunks=(100, 70))
    plan = make_plan(base, 2**22, 2)
    assert plan.problem.out_chunks is None
    asked = make_plan(replace(base, out_chunks=plan.out_chunks), 2**22, 2)
    assert (asked.tm, asked.tn, asked.tk) == (plan.tm, plan.tn, plan.tk)


def test_a_large_output_with_chunks_asked_gets_a_shard_a_tile_of_whole_chunks(monkeypatch):
    monkeypatch.setattr(tiling, "SHARD_OVER_CHUNKS", 10)
    problem = Problem(
        m=203, k=60, n=117, itemsize=4, a_chunks=(37, 50), b_chunks=(50, 41), out_chunks=(16, 13)
    )
    plan = make_output_plan(problem, 2**18, 1)
    assert plan.problem.shard_tiles and plan.out_chunks == (16, 13)
    shards = output_shards(plan.problem, plan.tm, plan.tn, plan.out_chunks)
    assert shards[0] % 16 == 0 and shards[1] % 13 == 0  # rounded up at the array's edge
    assert shards[0] >= plan.tm and shards[1] >= plan.tn
    assert (writes_per_object(plan, (plan.tm, plan.tn)) == 1).all()
    plain = make_output_plan(problem, 2**18, 1, shards=False)
    assert not plain.problem.shard_tiles
    assert output_shards(plain.problem, plain.tm, plain.tn, plain.out_chunks) is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"out_chunks": (0, 4)}, r"out_chunks = \(0, 4\): need two chunk sizes >= 1"),
        ({"out_chunks": (4, 4), "out_grid": (10, 8)}, r"\(10, 8\).*not a multiple of"),
        ({"out_chunks": (4, 4), "out_grid": (8, 8), "shard_tiles": True}, "cannot go with"),
    ],
)
def test_the_problem_refuses_asked_grids_that_cannot_be(extra, message):
    with pytest.raises(InputError, match=message):
        Problem(m=50, k=50, n=50, itemsize=4, a_chunks=(5, 5), b_chunks=(5, 5), **extra)


def test_a_forced_tile_off_the_asked_chunks_is_refused():
    problem = Problem(
        m=300, k=60, n=300, itemsize=4, a_chunks=(10, 10), b_chunks=(10, 10), out_chunks=(30, 25)
    )
    with pytest.raises(InputError, match="multiple of 30"):
        make_plan(problem, 2**24, tile=(40, 50))
    plan = make_plan(problem, 2**24, tile=(60, 50))
    assert (plan.tm, plan.tn) == (60, 50)


def test_a_forced_tile_on_the_output_grid_alone_is_taken_whatever_the_budget():
    """A resumed journal's tile may have been planned on the output's chunks alone (the
    common multiple with the inputs' did not fit then); with a budget where it fits now,
    that tile is still taken."""
    problem = Problem(
        m=203, k=151, n=117, itemsize=4, a_chunks=(37, 50), b_chunks=(50, 41),
        out_chunks=(64, 29),
    )  # fmt: skip
    planned = make_plan(problem, 2**17, 1)
    resumed = make_plan(problem, 2**24, 1, tile=(planned.tm, planned.tn), tk=planned.tk)
    assert (resumed.tm, resumed.tn) == (planned.tm, planned.tn)


def test_the_output_grid_alone_where_the_common_multiple_leaves_workers_idle():
    """lcm(1000, 1024) = 128000 is past the 20000 rows: on both grids one tile would fit
    this budget, and 15 of 16 workers would wait (or k be split); on the output's chunks
    alone every worker gets a tile."""
    problem = Problem(
        m=20000, k=2000, n=20000, itemsize=4, a_chunks=(1000, 1000), b_chunks=(1000, 1000),
        out_chunks=(1024, 1024),
    )  # fmt: skip
    plan = make_plan(problem, 2**34, 16)
    assert len(plan.tasks) >= 16 and plan.splits == 1
    assert plan.tm % 1024 == 0 and plan.tn % 1024 == 0
    aligned = make_plan(replace(problem, out_chunks=(500, 500)), 2**34, 16)
    assert aligned.tm % 1000 == 0 and aligned.tn % 1000 == 0  # both grids where they meet

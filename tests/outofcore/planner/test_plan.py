"""The plan: pure data, aligned to the chunk grids, within the budget."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from outofcore.errors import BudgetError, InputError
from outofcore.planner.io_model import io_lower_bound
from outofcore.planner.memory import task_bytes
from outofcore.planner.problem import Problem
from outofcore.planner.tiling import make_output_plan, make_plan, panel_depth_unit
from tests.helpers import ROOT, cuda_target

dims = st.integers(min_value=1, max_value=3000)
chunk = st.integers(min_value=1, max_value=700)


@st.composite
def problems(draw: st.DrawFn) -> Problem:
    m, k, n = draw(dims), draw(dims), draw(dims)
    return Problem(
        m=m,
        k=k,
        n=n,
        itemsize=draw(st.sampled_from([4, 8])),
        a_chunks=(draw(chunk), draw(chunk)),
        b_chunks=(draw(chunk), draw(chunk)),
    )


@pytest.mark.parametrize(
    "module",
    [
        "outofcore.planner.plan",
        "outofcore.planner.problem",
        "outofcore.planner.tiles",
        "outofcore.planner.memory",
        "outofcore.planner.io_model",
        "outofcore.planner.tiling",
        "outofcore.planner.model",
        "outofcore.planner.device_plan",
        "outofcore.jobs.planning",
    ],
)
def test_pure_modules_import_neither_dask_nor_numba_nor_zarr(module):
    code = (
        f"import sys, {module}; "
        "bad = [m for m in ('dask', 'distributed', 'numba', 'zarr') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@given(problems(), st.integers(min_value=1, max_value=6), st.integers(min_value=20, max_value=28))
def test_plan_tiles_cover_output_once_on_the_grids_within_budget(problem, workers, log2_budget):
    budget = 2**log2_budget
    try:
        plan = make_plan(problem, budget, workers)
    except BudgetError as exc:
        assert str(budget) in str(exc)
        return
    covered = [[0] * plan.tiles_across for _ in range(plan.tiles_down)]
    for task in plan.tasks:
        covered[task.i][task.j] += 1
        assert task.row0 % problem.a_chunks[0] == 0 or task.row0 == 0
        assert task.col0 % problem.b_chunks[1] == 0 or task.col0 == 0
        assert task.row0 % plan.out_chunks[0] == 0
        assert task.col0 % plan.out_chunks[1] == 0
        assert 0 < task.row1 - task.row0 <= plan.tm and task.row1 <= problem.m
        assert 0 < task.col1 - task.col0 <= plan.tn and task.col1 <= problem.n
    assert all(count == 1 for row in covered for count in row)
    assert sum(t.shape[0] * t.shape[1] for t in plan.tasks) == problem.m * problem.n
    assert plan.panels[0][0] == 0 and plan.panels[-1][1] == problem.k
    assert all(a[1] == b[0] for a, b in zip(plan.panels, plan.panels[1:], strict=False))
    assert plan.task_bytes <= budget
    assert plan.bytes_read >= plan.io_lower_bound or plan.bytes_read >= problem.itemsize * (
        problem.m * problem.k + problem.k * problem.n
    )
    if len(plan.tasks) < workers:  # only when no aligned split is left
        assert plan.tm <= math.lcm(problem.a_chunks[0], plan.out_chunks[0]) or plan.tm >= problem.m


def test_bigger_budget_reads_less():
    problem = Problem(m=8192, k=8192, n=8192, itemsize=4, a_chunks=(512, 512), b_chunks=(512, 512))
    small = make_plan(problem, 64 * 2**20)
    large = make_plan(problem, 1024 * 2**20)
    assert large.tm * large.tn > small.tm * small.tn
    assert large.bytes_read < small.bytes_read
    # Output-stationary with near-square tiles stays close to the lower bound.
    assert large.bytes_read <= 2.0 * large.io_lower_bound


def test_bytes_read_formula_for_aligned_panels():
    problem = Problem(m=1000, k=600, n=900, itemsize=8, a_chunks=(100, 200), b_chunks=(200, 300))
    plan = make_plan(problem, 64 * 2**20, tile=(500, 300), tk=400)
    assert (plan.tiles_down, plan.tiles_across) == (2, 3)
    # Panels [0,400) and [400,600): both fall on the 200-wide chunk grid, nothing read twice.
    expected = 8 * (3 * 1000 * 600 + 2 * 600 * 900)
    assert plan.bytes_read == expected


def test_panel_that_splits_a_chunk_is_counted_twice():
    problem = Problem(m=10, k=10, n=10, itemsize=4, a_chunks=(10, 4), b_chunks=(4, 10))
    plan = make_plan(problem, 2**20, tile=(10, 10), tk=4)
    assert plan.panels == ((0, 4), (4, 8), (8, 10))
    assert plan.bytes_read == 4 * (10 * 10 + 10 * 10)
    odd = Problem(m=10, k=10, n=10, itemsize=4, a_chunks=(10, 3), b_chunks=(5, 10))
    # lcm(3, 5) = 15 > k: panels follow the coarser (5) grid; A's 3-wide chunks that a
    # panel edge cuts are decoded by both panels.
    plan = make_plan(odd, 2**20, tile=(10, 10))
    assert plan.tk == 10 or plan.panels == ((0, 5), (5, 10))
    plan = make_plan(odd, 2**20, tile=(10, 10), tk=5)
    a_touched = (6 - 0) + (10 - 3)  # chunks [0,6) for the first panel, [3,10) for the second
    assert plan.bytes_read == 4 * (10 * a_touched + 10 * 10)


def test_budget_too_small_names_the_numbers():
    problem = Problem(
        m=4096, k=4096, n=4096, itemsize=4, a_chunks=(1024, 1024), b_chunks=(1024, 1024)
    )
    with pytest.raises(BudgetError) as info:
        make_plan(problem, 8 * 2**20)
    message = str(info.value)
    assert str(8 * 2**20) in message
    assert "1024x1024" in message
    needed = task_bytes(problem, 1024, 1024, 1024, 2)
    assert str(needed) in message


def test_forced_tile_must_fall_on_the_grid():
    problem = Problem(m=100, k=100, n=100, itemsize=4, a_chunks=(30, 10), b_chunks=(10, 25))
    with pytest.raises(InputError, match="multiple of 30"):
        make_plan(problem, 2**30, tile=(40, 50))
    with pytest.raises(InputError, match="multiple of 25"):
        make_plan(problem, 2**30, tile=(60, 40))


def test_lower_bound_formula():
    problem = Problem(
        m=16384, k=16384, n=16384, itemsize=4, a_chunks=(2048,) * 2, b_chunks=(2048,) * 2
    )
    budget = 64 * 2**20  # the communication term dominates: 8 GiB - 128 MiB
    expected = 2 * 16384**3 * 4 / math.sqrt(budget / 4) - 2 * budget
    assert expected > 2 * 16384**2 * 4
    assert io_lower_bound(problem, budget) == int(expected)
    # With a large budget the inputs themselves are the bound.
    assert io_lower_bound(problem, 512 * 2**20) == 2 * 16384**2 * 4
    tiny = Problem(m=10, k=10, n=10, itemsize=4, a_chunks=(10, 10), b_chunks=(10, 10))
    assert io_lower_bound(tiny, 2**30) == 4 * 200


def test_plan_splits_tiles_for_workers():
    problem = Problem(m=1024, k=256, n=1024, itemsize=4, a_chunks=(128, 128), b_chunks=(128, 128))
    assert len(make_plan(problem, 2**30, workers=1).tasks) == 1
    assert len(make_plan(problem, 2**30, workers=4).tasks) >= 4


def test_task_order_keeps_neighbours_adjacent():
    problem = Problem(m=400, k=10, n=400, itemsize=4, a_chunks=(100, 10), b_chunks=(10, 100))
    plan = make_plan(problem, 2**30, tile=(100, 100))
    for before, after in zip(plan.tasks, plan.tasks[1:], strict=False):
        assert before.i == after.i or before.j == after.j  # shares an A or a B panel


def test_plan_of_a_million_square_problem_is_fast():
    import time

    problem = Problem(
        m=10**6, k=10**6, n=10**6, itemsize=4, a_chunks=(4096, 4096), b_chunks=(4096, 4096)
    )
    started = time.perf_counter()
    plan = make_plan(problem, 8 * 2**30, workers=64)
    assert time.perf_counter() - started < 1
    assert plan.task_bytes <= 8 * 2**30
    assert len(plan.tasks) == plan.tiles_down * plan.tiles_across


@pytest.mark.parametrize("bad", [{"m": 0}, {"a_chunks": (0, 1)}])
def test_problem_rejects_nonsense(bad):
    fields = dict(m=5, k=5, n=5, itemsize=4, a_chunks=(5, 5), b_chunks=(5, 5)) | bad
    with pytest.raises(InputError):
        Problem(**fields)


def test_task_bytes_matches_the_documented_formula():
    # w * (tm*tn + depth*tk*(tm + tn) + c*2*max(input chunk, output chunk))
    problem = Problem(
        m=16384, k=16384, n=16384, itemsize=4, a_chunks=(2048, 1024), b_chunks=(1024, 2048)
    )
    codec = 2 * 2 * 2048 * 2048  # io_concurrency 2, a file and a chunk buffer each
    expected = 4 * (16384 * 8192 + 2 * 2048 * (16384 + 8192) + codec)  # out chunks 2048²
    assert task_bytes(problem, 16384, 8192, 2048, 2) == expected
    # Larger input chunks than output chunks: the buffers are the input chunk's size.
    wide = Problem(
        m=16384, k=16384, n=16384, itemsize=4, a_chunks=(4096, 4096), b_chunks=(4096, 4096)
    )
    codec = 2 * 2 * 4096 * 4096
    expected = 4 * (16384 * 8192 + 2 * 4096 * (16384 + 8192) + codec)
    assert task_bytes(wide, 16384, 8192, 4096, 2) == expected


def test_plan_prefers_tiles_that_read_less_over_square_ones():
    # 1 GiB: a 16384x8192 tile (2 tiles, A read twice, B once: 3 GiB) fits, and
    # beats the squarer 12288² (4 tiles with ragged edges: 4 GiB read).
    problem = Problem(
        m=16384, k=16384, n=16384, itemsize=4, a_chunks=(2048, 2048), b_chunks=(2048, 2048)
    )
    plan = make_plan(problem, 2**30, workers=1)
    assert sorted((plan.tm, plan.tn)) == [8192, 16384]
    assert plan.bytes_read == 3 * 2**30
    assert plan.task_bytes <= 2**30


def test_the_plan_imports_nothing_but_the_errors():
    """The plan is pure data: no module of ``outofcore.planner`` imports any of outofcore but
    ``outofcore.errors``, nor Dask (at any depth)."""
    import ast

    root = ROOT / "outofcore" / "planner"
    found = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            found += [
                f"{path.name}: {n}"
                for n in names
                if n.split(".")[0] in ("outofcore", "dask", "distributed")
                and not n.startswith(("outofcore.errors", "outofcore.planner"))
            ]
    assert len(list(root.glob("*.py"))) >= 7
    assert found == []


def test_conversion_buffers_and_stored_sizes_are_in_the_contract():
    """int8 inputs accumulated in float64, written as int32 with an int32 addend."""
    base = dict(m=3000, k=2000, n=2500, itemsize=8, a_chunks=(500, 400), b_chunks=(400, 500))
    plain = Problem(**base)
    converted = Problem(
        **base,
        read_itemsizes=(1, 1),
        staging=(1, 1),
        out_itemsize=4,
        block_extra=4 + 8 + 4,  # int32 output block, float64 addend block, int32 staging
        addend_itemsize=4,
    )
    tm, tn, tk = 1000, 1500, 800

    # Staging: one int8 panel of each; a write block of 1000 rows (WRITE_BLOCK_ROWS) x tn.
    def codec(p: Problem) -> int:
        """task_bytes less the tile, the panels, the staging and the write block."""
        tile_and_panels = p.itemsize * (tm * tn + 2 * tk * (tm + tn))
        staging = tk * (tm * p.staging[0] + tn * p.staging[1])
        return task_bytes(p, tm, tn, tk, 2) - tile_and_panels - staging - p.block_extra * 1000 * tn

    # Codec buffers: two I/O threads, each a file and a chunk buffer of the largest input
    # chunk (500x400) at its stored size, grown to the 1000x1500 output chunk in one writer.
    assert codec(plain) == 2 * 2 * 8 * 500 * 400 + 2 * 8 * (1000 * 1500 - 500 * 400)
    assert codec(converted) == 2 * 2 * 1 * 500 * 400 + 2 * (4 * 1000 * 1500 - 500 * 400)
    plan, stored = make_plan(plain, 2**30), make_plan(converted, 2**30)
    # One tile either way: A and B read once, at their stored sizes, plus the addend once.
    assert len(plan.tasks) == len(stored.tasks) == 1
    assert plan.bytes_read == 8 * (3000 * 2000 + 2000 * 2500)
    assert stored.bytes_read == 3000 * 2000 + 2000 * 2500 + 4 * 3000 * 2500
    assert stored.bytes_written == 4 * 3000 * 2500
    assert stored.io_lower_bound >= 3000 * 2000 + 2000 * 2500 + 4 * 3000 * 2500
    assert stored.task_bytes <= 2**30
    with pytest.raises(InputError, match="element sizes"):
        Problem(**base, staging=(-1, 0))


@given(problems(), st.integers(min_value=1, max_value=16), st.integers(min_value=20, max_value=28))
def test_split_parts_cover_every_panel_of_every_tile_once(problem, workers, log2_budget):
    try:
        plan = make_plan(problem, 2**log2_budget, workers)
    except BudgetError:
        return
    assert 1 <= plan.splits <= len(plan.panels)
    assert plan.busy_workers == min(workers, len(plan.tasks) * plan.splits)
    if workers == 1:
        assert plan.splits == 1  # nothing to balance: splitting would only add work
    if plan.splits == 1:
        assert plan.partial_tasks == () and plan.scratch_bytes == 0
        return
    for task in plan.tasks:
        parts = [p for p in plan.partial_tasks if p.tile == task]
        assert [p.part for p in parts] == list(range(plan.splits))
        covered = [i for p in parts for i in range(*p.panels)]
        assert covered == list(range(len(plan.panels)))  # in order, each panel once
    keys = [p.key for p in plan.partial_tasks]
    assert len(set(keys)) == len(keys)
    assert plan.scratch_bytes == plan.splits * problem.m * problem.n * problem.itemsize


@given(problems(), st.integers(min_value=2, max_value=16), st.integers(min_value=14, max_value=24))
def test_a_plan_never_chooses_a_split_whose_tasks_are_over_the_budget(
    problem, workers, log2_budget
):
    """The split was chosen after the tile by its speed alone: a part or a reduction over
    the budget then refused a plan whose smallest tile fitted (``outofcore plan``'s
    predictions for other machines, 40x60 tiles in 160 KiB)."""
    budget = 2**log2_budget
    try:
        plan = make_plan(problem, budget, workers)
    except BudgetError as exc:
        assert "the smallest tile" in str(exc)  # only a budget too small for any tile
        return
    assert max(plan.projections.values()) == plan.task_bytes <= budget
    assert set(plan.projections) == ({"tile"} if plan.splits == 1 else {"part", "reduction"})


@given(problems(), st.integers(min_value=2, max_value=8), st.integers(2**14, 2**22))
@example(
    Problem(
        m=97, k=1200, n=83, itemsize=4, a_chunks=(20, 100), b_chunks=(100, 20),
        out_itemsize=2, block_extra=2,
    ),
    3,
    160 * 1024,
)  # fmt: skip
def test_a_forced_split_that_fits_with_the_thinnest_panels_is_never_refused(
    problem, splits, budget
):
    """The panel depth is chosen before the tile: it was checked against the tile's
    projection only, so a forced split whose parts fitted with shallower panels was
    refused (the example: 20x20 tiles, --splits 3, 160 KiB, 400-deep panels, the
    parts 1 KiB over)."""
    thinnest = panel_depth_unit(problem)
    try:
        make_plan(problem, budget, splits=splits, tk=thinnest)
    except (BudgetError, InputError):
        return  # nothing to compare: even the thinnest panels do not allow this split
    plan = make_plan(problem, budget, splits=splits)
    assert plan.tk >= thinnest and plan.task_bytes <= budget


def large_k(m: int, k: int, n: int) -> Problem:
    return Problem(m=m, k=k, n=n, itemsize=4, a_chunks=(m, 2048), b_chunks=(2048, n))


@pytest.mark.parametrize("workers", [2, 3, 8, 16])
def test_one_tile_from_a_large_k_is_split_to_keep_every_worker_busy(workers):
    """The issue's case: C 1024x1024 from k = 524288 was one task, one busy worker."""
    plan = make_plan(large_k(1024, 524288, 1024), 2**30, workers)
    assert len(plan.tasks) == 1 and plan.splits >= workers
    assert plan.busy_workers == workers
    assert plan.bytes_read == plan.io_lower_bound  # the parts read every panel once
    summary = plan.summary()
    assert summary["partial_tasks"] == plan.splits and summary["busy_workers"] == workers


def test_forced_splits_are_checked_against_the_panels():
    problem = large_k(64, 8192, 64)
    assert make_plan(problem, 2**30, 4, splits=1).splits == 1
    assert make_plan(problem, 2**30, 1, splits=3).splits == 3
    with pytest.raises(InputError, match=r"splits = 5: k = 8192 in panels 2048 deep .* 1 to 4"):
        make_plan(problem, 2**30, 2, tk=2048, splits=5)


@given(
    st.integers(min_value=1, max_value=3000),
    st.integers(min_value=1, max_value=3000),
    st.integers(min_value=1, max_value=700),
    st.integers(min_value=1, max_value=700),
    st.integers(min_value=1, max_value=8),
    st.integers(min_value=20, max_value=26),
)
def test_symmetric_plans_cover_the_upper_triangle_once_with_square_tiles(
    n, k, n_chunk, k_chunk, workers, log2_budget
):
    """X.T @ X with X k x n: tiles (i, j), j >= i, each writing (j, i) too."""
    problem = Problem(
        m=n,
        k=k,
        n=n,
        itemsize=4,
        a_chunks=(n_chunk, k_chunk),
        b_chunks=(k_chunk, n_chunk),
        symmetric=True,
    )
    try:
        plan = make_plan(problem, 2**log2_budget, workers)
    except BudgetError:
        return
    assert plan.tm == plan.tn and plan.tiles_down == plan.tiles_across
    t = plan.tiles_down
    covered = {(task.i, task.j) for task in plan.tasks}
    assert covered == {(i, j) for i in range(t) for j in range(i, t)}
    assert len(plan.tasks) == t * (t + 1) // 2
    general = make_plan(
        replace(problem, symmetric=False),
        2**log2_budget,
        workers,
        tile=(plan.tm, plan.tn),
        tk=plan.tk,
        splits=plan.splits,  # the same tasks: a split's parts are not the tile's task
    )
    assert 2 * plan.bytes_read == general.bytes_read  # one panel per tile row and column
    assert plan.task_bytes >= general.task_bytes  # plus the mirror's transposed block
    assert plan.bytes_read >= plan.io_lower_bound or plan.bytes_read == problem.m * k * 4


def test_a_symmetric_problem_needs_one_array_times_its_transpose():
    with pytest.raises(InputError, match="symmetric product needs op\\(A\\) = op\\(B\\).T"):
        Problem(m=10, k=5, n=10, itemsize=4, a_chunks=(5, 5), b_chunks=(5, 2), symmetric=True)
    problem = Problem(m=10, k=5, n=10, itemsize=4, a_chunks=(5, 5), b_chunks=(5, 5), symmetric=True)
    with pytest.raises(InputError, match="square tiles"):
        make_plan(problem, 2**30, tile=(5, 10))


def test_a_large_created_output_is_planned_in_shards_of_one_tile(monkeypatch):
    from outofcore.planner import tiling  # noqa: PLC0415

    problem = Problem(
        m=9000, k=4096, n=7000, itemsize=4, a_chunks=(1000, 512), b_chunks=(512, 1000)
    )
    budget = 600 * 2**20
    plain = make_plan(problem, budget)
    monkeypatch.setattr(tiling, "SHARD_OVER_CHUNKS", plain.out_chunk_count - 1)
    sharded = make_output_plan(problem, budget)
    assert sharded.out_shards == (sharded.tm, sharded.tn) != sharded.out_chunks
    assert sharded.tm % sharded.out_chunks[0] == 0 and sharded.tn % sharded.out_chunks[1] == 0
    # The shard is encoded whole: its buffers are in the contract, and within the budget.
    assert sharded.task_bytes == task_bytes(
        Problem(**{**vars(problem), "out_grid": (sharded.tm, sharded.tn)}),
        sharded.tm,
        sharded.tn,
        sharded.tk,
        sharded.io_concurrency,
    )
    assert sharded.task_bytes <= budget
    assert sharded.summary()["out_shards"] == [sharded.tm, sharded.tn]
    # Not asked, or not large, or an existing output's grid: plain chunks.
    assert make_output_plan(problem, budget, shards=False).out_shards is None
    monkeypatch.setattr(tiling, "SHARD_OVER_CHUNKS", plain.out_chunk_count)
    assert make_output_plan(problem, budget).out_shards is None
    monkeypatch.setattr(tiling, "SHARD_OVER_CHUNKS", 1)
    existing = Problem(**{**vars(problem), "out_grid": (1000, 1000)})
    assert make_output_plan(existing, budget).out_shards is None
    with pytest.raises(InputError, match=r"out_grid = \(1000, 1000\).*cannot go with shard_tiles"):
        Problem(**{**vars(existing), "shard_tiles": True})


def test_a_shard_of_one_chunk_is_not_made(monkeypatch):
    from outofcore.planner import tiling  # noqa: PLC0415

    monkeypatch.setattr(tiling, "SHARD_OVER_CHUNKS", 1)
    problem = Problem(m=3000, k=512, n=3000, itemsize=4, a_chunks=(100, 512), b_chunks=(512, 100))
    small = make_output_plan(problem, 2 * 2**20)  # tiles of a few hundred: one chunk each
    assert small.out_chunks == (small.tm, small.tn) and small.out_shards is None


def test_panels_are_as_deep_as_the_budget_allows_not_the_thinnest():
    """A 4096² tile (the chunks allow no smaller) in 160 MiB: 1024-deep panels do not fit;
    the plan took the chunks' 64 (every panel reads and writes the whole tile) where 512
    fit; a forced split of k keeps a panel per part."""
    problem = Problem(m=4096, k=4096, n=4096, itemsize=4, a_chunks=(4096, 64), b_chunks=(64, 4096))
    budget = 160 * 2**20
    assert task_bytes(problem, 4096, 4096, 1024, 2) > budget
    plan = make_plan(problem, budget)
    assert plan.tk == 512 and plan.task_bytes <= budget
    assert task_bytes(problem, 4096, 4096, 2 * plan.tk, 2) > budget
    split = make_plan(problem, budget, splits=32)
    assert split.tk == 128 and len(split.panels) == 32
    assert make_plan(problem, 2**30).tk == 1024  # the preferred depth where it fits
    # Depth is not bought with a smaller tile: 256x512 tiles with the chunks' 256-deep
    # panels read less than 256² tiles with 512-deep ones (a first version took those).
    small = Problem(m=256, k=1024, n=1024, itemsize=4, a_chunks=(256, 256), b_chunks=(256, 256))
    kept = make_plan(small, 4 * 2**20)
    assert (kept.tm, kept.tn, kept.tk) == (256, 512, 256)


# -- planning cost: independent of the chunk grid (issue 28, item 5) ----------------------
@given(
    st.integers(1, 400),
    st.integers(1, 70),
    st.integers(1, 90),
    st.data(),
)
def test_panels_and_their_decoded_extent_match_the_listed_panels(k, tk, chunk_size, data):
    from outofcore.planner.io_model import chunk_span, touched  # noqa: PLC0415
    from outofcore.planner.plan import Panels  # noqa: PLC0415

    listed = tuple((k0, min(k0 + tk, k)) for k0 in range(0, k, tk))
    panels = Panels(k, tk)
    assert panels == listed and tuple(panels) == listed and len(panels) == len(listed)
    first = data.draw(st.integers(0, len(listed)))
    stop = data.draw(st.integers(first, len(listed)))
    part = panels[first:stop]
    assert part == listed[first:stop] and tuple(part) == listed[first:stop]
    assert touched(part, chunk_size) == sum(chunk_span(a, b, chunk_size, k) for a, b in part)
    for position, panel in enumerate(listed):
        assert panel in panels and panels.index(panel) == position
    assert (0, 0) not in panels and (1, k + 1) not in panels
    assert panels[-1] == listed[-1] and panels[::2] == listed[::2]


def test_planning_a_huge_gram_lists_no_panel_and_no_chunk(monkeypatch):
    """Issue 28: planning a 10^10-row Gram took 67-88 s, 10^12 rows past 300 s (panels
    listed one by one for every candidate tile).  Now nothing is enumerated per panel:
    the plan of a 10^12-row Gram, its summary and its predictions read a handful of
    panels (timings: benchmarks/plan_cost.py)."""
    from outofcore.planner import model  # noqa: PLC0415
    from outofcore.planner.plan import Panels  # noqa: PLC0415

    made = []
    real = Panels.__getitem__

    def counted(self, index):
        made.append(index)
        return real(self, index)

    monkeypatch.setattr(Panels, "__getitem__", counted)
    monkeypatch.setattr(Panels, "__iter__", lambda self: pytest.fail("panels listed"))
    for rows in (10**10, 10**12):
        x = Problem(
            m=64, k=rows, n=64, itemsize=8, a_chunks=(64, 100_000), b_chunks=(100_000, 64),
            symmetric=True,
        )  # fmt: skip
        for workers in (1, 4):
            plan = make_output_plan(x, 2**30, workers)
            summary = plan.summary()
            assert summary["panels_per_tile"] == len(plan.panels) >= rows // 100_000
            assert summary["bytes_read"] == 8 * 64 * rows
            assert len(model.what_ifs(plan, gpu=cuda_target("float64"))) == 3
    assert len(made) < 100, len(made)


def listed_tiles(m: int, n: int, tm: int, tn: int, symmetric: bool) -> tuple:
    """The tile tasks as the planner listed them before issue 28 (the reference)."""
    from outofcore.planner.plan import TileTask  # noqa: PLC0415

    tasks = []
    down, across = math.ceil(m / tm), math.ceil(n / tn)
    for i in range(down):
        first = i if symmetric else 0
        columns = range(first, across) if i % 2 == 0 else range(across - 1, first - 1, -1)
        for j in columns:
            tasks.append(
                TileTask(
                    len(tasks), i, j, i * tm, min((i + 1) * tm, m), j * tn, min((j + 1) * tn, n)
                )
            )
    return tuple(tasks)


@given(
    st.integers(1, 60), st.integers(1, 60), st.integers(1, 25), st.integers(1, 25), st.booleans()
)
def test_tiles_are_the_listed_tasks_made_on_demand(m, n, tm, tn, symmetric):
    from outofcore.planner.plan import Tiles  # noqa: PLC0415

    if symmetric:
        n, tn = m, tm
    listed = listed_tiles(m, n, tm, tn, symmetric)
    tiles = Tiles(m, n, tm, tn, symmetric)
    assert len(tiles) == len(listed) and tiles == listed and tuple(tiles) == listed
    assert [tiles[i] for i in range(len(listed))] == list(listed)
    assert tiles[-1] == listed[-1] and tiles[1::3] == listed[1::3]
    for task in listed:
        assert task in tiles and tiles.index(task) == task.index
    assert replace(listed[0], i=len(listed) + 5) not in tiles


@given(problems(), st.integers(min_value=1, max_value=6), st.booleans())
def test_a_plans_flops_are_the_sum_of_its_tasks_flops(problem, workers, symmetric):
    if symmetric:
        problem = replace(problem, n=problem.m, b_chunks=problem.a_chunks[::-1], symmetric=True)
    try:
        plan = make_plan(problem, 2**26, workers)
    except BudgetError:
        return
    assert plan.flops == sum(plan.task_flops().values())


def test_planning_a_huge_output_lists_no_tile():
    """A 10^8 x 10^8 product (10^8 tiles): planning it ran past 5 minutes listing tiles."""
    x = Problem(m=10**8, k=100, n=10**8, itemsize=8, a_chunks=(1000, 100), b_chunks=(100, 1000))
    plan = make_plan(x, 2**30, 4)
    assert len(plan.tasks) > 10**7 and plan.summary()["tiles"] == len(plan.tasks)
    assert plan.flops == 2 * 10**16 * 100
    last = plan.tasks[-1]
    assert last.row1 == 10**8 and (last.col1 == 10**8 if last.i % 2 == 0 else last.col0 == 0)


def test_shards_zarr_reads_count_their_blocks_and_the_plan_still_fits():
    """Issue 28: a panel read through zarr's sharding codec holds a shard's part of it,
    stored and decoded (tests/outofcore/jobs/test_memory.py measures it)."""
    from outofcore.planner.memory import shard_read_bytes  # noqa: PLC0415

    chunks = Problem(m=4096, k=4096, n=4096, itemsize=4, a_chunks=(256, 256), b_chunks=(256, 256))
    shards = replace(chunks, read_shards=((1024, 1024), (1024, 1024)))
    assert shard_read_bytes(None, (256, 256), 4, (1024, 1024), 2) == 0
    # One whole shard a panel: its block three times, two inner chunks and their bytes.
    assert shard_read_bytes((1024, 1024), (256, 256), 4, (1024, 1024), 2) == (
        3 * 1024 * 1024 * 4 + 2 * 2 * 256 * 256 * 4
    )
    assert task_bytes(shards, 1024, 1024, 1024, 2) > task_bytes(chunks, 1024, 1024, 1024, 2)
    budget = 64 * 2**20
    plan = make_plan(shards, budget)
    assert plan.task_bytes <= budget and plan.projections["tile"] == task_bytes(
        shards, plan.tm, plan.tn, plan.tk, plan.io_concurrency
    )
    with pytest.raises(InputError, match="a_shards"):
        replace(chunks, read_shards=((0, 1024), None))

"""A batch axis in the plan (issue 30): stacks of matrices, numpy.matmul's leading dimensions.

A stack's tasks are every tile of every entry, entry by entry; the tile, panels and
memory per task are one matrix's, the totals the stack's.  Without a batch, plans,
keys and summaries are those frozen in ``plans_2d.json`` (computed before the axis).
"""

from __future__ import annotations

import json
import math
import pickle
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outofcore.errors import BudgetError, InputError
from outofcore.planner.io_model import io_lower_bound
from outofcore.planner.memory import loop_bytes, projections, shard_read_bytes, task_bytes
from outofcore.planner.model import CPU_CLUSTER_NODE, predict
from outofcore.planner.plan import PartialTask, Plan, Tiles, TileTask, tile_parts
from outofcore.planner.problem import Problem
from outofcore.planner.tiling import busiest_worker, make_output_plan, make_plan

FROZEN = Path(__file__).with_name("plans_2d.json")
#: The 2-D cases of ``plans_2d.json``: problem fields, budget, workers, plan options.
CASES = {
    "general": (
        dict(m=5000, k=3000, n=4000, itemsize=8, a_chunks=[500, 300], b_chunks=[300, 400]),
        2**26, 4, {},
    ),
    "symmetric": (
        dict(m=3000, k=7000, n=3000, itemsize=4, a_chunks=[1000, 700], b_chunks=[700, 1000],
             symmetric=True),
        2**25, 3, {},
    ),
    "split": (
        dict(m=1000, k=200000, n=1000, itemsize=4, a_chunks=[1000, 1000],
             b_chunks=[1000, 1000]),
        2**27, 8, {},
    ),
    "mixed": (
        dict(m=3000, k=5000, n=2500, itemsize=8, a_chunks=[250, 500], b_chunks=[500, 250],
             out_grid=[500, 500], read_itemsizes=[2, 4], staging=[2, 0], out_itemsize=4,
             block_extra=12, addend_itemsize=4, addend_chunk_bytes=1000000, request_bytes=65536,
             read_shards=[[1000, 1000], None]),
        2**27, 5, {},
    ),
    "sharded": (
        dict(m=800000, k=100, n=800000, itemsize=4, a_chunks=[1000, 100],
             b_chunks=[100, 1000]),
        2**29, 4, {"output": True},
    ),
    "forced_split": (
        dict(m=4000, k=8000, n=4000, itemsize=8, a_chunks=[500, 500], b_chunks=[500, 500]),
        2**28, 2, {"splits": 3},
    ),
}  # fmt: skip
SMALL = dict(m=4, k=4, n=4, itemsize=8, a_chunks=(2, 2), b_chunks=(2, 2))


def problem_of(fields: dict) -> Problem:
    fields = dict(fields)
    for key in ("a_chunks", "b_chunks", "out_grid", "read_itemsizes", "staging"):
        if fields.get(key) is not None:
            fields[key] = tuple(fields[key])
    if "read_shards" in fields:
        fields["read_shards"] = tuple(s if s is None else tuple(s) for s in fields["read_shards"])
    return Problem(**fields)


def plan_of(case: str, **batch: int | tuple[int, int]) -> Plan:
    fields, budget, workers, options = CASES[case]
    options = dict(options)
    maker = make_output_plan if options.pop("output", False) else make_plan
    return maker(problem_of(fields | batch), budget, workers, **options)


@pytest.mark.parametrize("case", sorted(CASES))
def test_plans_without_a_batch_are_those_made_before_it(case):
    plan, frozen = plan_of(case), json.loads(FROZEN.read_text())[case]
    tasks = list(plan.tasks)
    assert json.loads(json.dumps(plan.summary())) == frozen["summary"]
    assert [t.key for t in tasks[:6]] + [t.key for t in tasks[-3:]] == frozen["keys_head"]
    assert [p.key for p in plan.partial_tasks[:5]] == frozen["partial_keys_head"]
    assert [p.index for p in plan.partial_tasks[-2:]] == frozen["partial_index_tail"]
    if frozen["task_flops_total"] is not None:
        assert sum(plan.task_flops().values()) == frozen["task_flops_total"]
    predicted = predict(plan, CPU_CLUSTER_NODE.scaled(4)).as_dict()
    assert predicted.pop("exposed") == 0.0  # a CPU hides its writes behind BLAS (row blocks)
    assert predicted.pop("tiles_in_flight") == 1
    assert predicted == frozen["prediction"]
    assert repr(plan.tasks) == frozen["tiles_repr"]
    assert all(t.batch is None for t in tasks[:50])


def test_keys_name_the_entry_of_a_stack_and_only_then():
    task = TileTask(7, 3, 4, 0, 10, 0, 10)
    assert task.key == "tile-3-4" and task.batch is None
    stacked = replace(task, batch=12)
    assert stacked.key == "tile-3-4-b12" and stacked != task
    part = PartialTask(tile=stacked, part=0, parts=2, panels=(0, 3))
    assert part.key == "tile-3-4-b12-k0of2" and part.index == 14
    assert PartialTask(tile=task, part=1, parts=2, panels=(3, 6)).key == "tile-3-4-k1of2"


def listed_tiles(
    m: int, n: int, tm: int, tn: int, symmetric: bool, batch: int | None
) -> list[TileTask]:
    """The tasks of :class:`Tiles`, listed by hand: entry by entry, row by row, alternating."""
    down, across, tasks = math.ceil(m / tm), math.ceil(n / tn), []
    for entry in [None] if batch is None else range(batch):
        for i in range(down):
            first = i if symmetric else 0
            columns = list(range(first, across))
            for j in columns if i % 2 == 0 else columns[::-1]:
                rows, cols = (i * tm, min((i + 1) * tm, m)), (j * tn, min((j + 1) * tn, n))
                tasks.append(TileTask(len(tasks), i, j, *rows, *cols, batch=entry))
    return tasks


@given(
    st.integers(1, 40),
    st.integers(1, 40),
    st.integers(1, 15),
    st.integers(1, 15),
    st.booleans(),
    st.one_of(st.none(), st.integers(1, 5)),
)
def test_the_tiles_of_a_stack_are_every_entrys_listed_by_hand(m, n, tm, tn, symmetric, batch):
    if symmetric:
        n, tn = m, tm
    listed = listed_tiles(m, n, tm, tn, symmetric, batch)
    tiles = Tiles(m, n, tm, tn, symmetric, batch)
    assert len(tiles) == len(listed) == tiles.per_matrix * (batch or 1)
    assert tiles == listed and tuple(tiles) == tuple(listed)
    assert [tiles[i] for i in range(len(listed))] == listed and tiles[-1] == listed[-1]
    assert tiles[1::3] == tuple(listed[1::3])
    for task in listed:
        assert tiles.index(task) == task.index and task in tiles
    assert len({t.key for t in listed}) == len(listed)
    entries = list(range(batch)) if batch else [None]
    assert [t.batch for t in listed[:: tiles.per_matrix]] == entries
    wrong = [99, -1, None] if batch else [0, 1]
    assert all(replace(listed[0], batch=entry) not in tiles for entry in wrong)
    assert pickle.loads(pickle.dumps(tiles)) == tiles
    assert tiles != Tiles(m, n, tm, tn, symmetric, (batch or 0) + 1)
    with pytest.raises(IndexError):
        tiles[len(listed)]


def test_tiles_refuse_a_batch_of_nothing():
    for batch in (0, -2, True):
        with pytest.raises(InputError, match="batch"):
            Tiles(4, 4, 2, 2, batch=batch)


@st.composite
def stacks(draw: st.DrawFn) -> Problem:
    """Problems of stacks: broadcast operands, chunks of several entries, symmetric ones."""
    batch = draw(st.integers(1, 6))
    divisors = [d for d in range(1, batch + 1) if batch % d == 0]
    a = draw(st.sampled_from(divisors))
    b = draw(st.sampled_from([d for d in divisors if a * d >= batch]))
    m, k, n = (draw(st.integers(1, 900)) for _ in range(3))
    chunk = st.integers(1, 300)
    fields = dict(
        m=m, k=k, n=n, itemsize=draw(st.sampled_from([4, 8])),
        a_chunks=(draw(chunk), draw(chunk)), b_chunks=(draw(chunk), draw(chunk)),
        batch=batch, a_matrices=a, b_matrices=b,
        chunk_batch=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
    )  # fmt: skip
    if draw(st.booleans()):
        fields |= dict(n=m, b_chunks=fields["a_chunks"][::-1], symmetric=True)
        fields |= dict(
            a_matrices=batch, b_matrices=batch, chunk_batch=(fields["chunk_batch"][0],) * 2
        )
    return Problem(**fields)


@given(stacks(), st.integers(1, 6), st.one_of(st.none(), st.integers(1, 3)))
def test_a_stacks_flops_are_the_sum_of_its_tasks_and_its_keys_are_unique(problem, workers, splits):
    try:
        plan = make_plan(problem, 2**22, workers, splits=splits)
    except (BudgetError, InputError):
        return
    flops = plan.task_flops()
    assert plan.flops == sum(flops.values())
    assert len(plan.tasks) == problem.batch * plan.tasks_per_matrix
    assert len(flops) == len(plan.tasks) * plan.splits
    if plan.splits > 1:
        parts = plan.partial_tasks
        assert [p.index for p in parts] == list(range(len(parts)))
        assert len({p.key for p in parts}) == len(parts)
        assert all(p.key.startswith(f"{p.tile.key}-k") for p in parts)
        assert parts[-1].tile.batch == problem.batch - 1
        assert tile_parts(plan.tasks[-1], len(plan.panels), plan.splits) == parts[-plan.splits :]


def test_a_stacks_totals_are_its_entries_and_its_tasks_one_matrixs():
    flat = problem_of(CASES["mixed"][0])
    options = dict(tile=(1000, 500), tk=1000, splits=2)
    two_d = make_plan(flat, 2**28, 5, **options)
    stacked = replace(flat, batch=6, a_matrices=3, b_matrices=2, chunk_batch=(1, 2))
    plan = make_plan(stacked, 2**28, 5, **options)
    assert (plan.tm, plan.tn, plan.tk, plan.splits) == (1000, 500, 1000, 2)
    assert plan.flops == 6 * two_d.flops and plan.bytes_written == 6 * two_d.bytes_written
    assert plan.scratch_bytes == 6 * two_d.scratch_bytes
    assert plan.out_chunk_count == 6 * two_d.out_chunk_count
    assert len(plan.tasks) == 6 * len(two_d.tasks) and plan.tasks_per_matrix == len(two_d.tasks)
    assert plan.busy_workers == 5 and two_d.busy_workers == 5
    a_once = 2 * plan.tiles_across * flat.m * flat.k  # the chunks fall on the panels
    b_once = 4 * plan.tiles_down * flat.k * flat.n
    assert two_d.bytes_read == a_once + b_once + 4 * flat.m * flat.n
    assert plan.bytes_read == 6 * (a_once + 2 * b_once + 4 * flat.m * flat.n)
    summary, flat_summary = plan.summary(), two_d.summary()
    added = {"batch": 6, "tasks_per_matrix": 15, "matrices": [3, 2], "chunk_batch": [1, 2]}
    assert {key: summary.pop(key) for key in added} == added
    assert summary.keys() == flat_summary.keys() and not added.keys() & flat_summary.keys()
    assert summary["tiles"] == 90 and summary["partial_tasks"] == 180
    flat_stack = make_plan(replace(stacked, chunk_batch=(1, 1)), 2**28, 5, **options)
    assert flat_stack.projections == two_d.projections  # one entry's tile, panels, chunks
    one = replace(flat, batch=1)  # a stack of one: the 2-D figures, keys naming entry 0
    assert make_plan(one, 2**28, 5, **options).summary() == flat_summary | {
        "batch": 1, "tasks_per_matrix": 15, "matrices": [1, 1], "chunk_batch": [1, 1],
    }  # fmt: skip
    assert make_plan(one, 2**28, 5, **options).tasks[0].key == "tile-0-0-b0"


def test_the_lower_bound_reads_stored_inputs_and_counts_every_entrys_products():
    flat = Problem(m=1000, k=2000, n=3000, itemsize=8, a_chunks=(100, 100), b_chunks=(100, 100))
    words = 2**24 / 8
    term = (2 * 6 * 1000 * 3000 * 2000 / math.sqrt(words) - 2 * words) * 8
    stack = replace(flat, batch=6, a_matrices=6, b_matrices=1)
    one = (2 * 1000 * 3000 * 2000 / math.sqrt(words) - 2 * words) * 8
    assert io_lower_bound(stack, 2**24) == int(term) > 6 * one
    budget = 2**40  # the inputs as stored: B broadcast is read once at least
    assert io_lower_bound(stack, budget) == 8 * (6 * 1000 * 2000 + 2000 * 3000)
    assert io_lower_bound(flat, budget) == 8 * (1000 * 2000 + 2000 * 3000)
    gram = Problem(m=1000, k=2000, n=1000, itemsize=8, a_chunks=(100, 100),
                   b_chunks=(100, 100), symmetric=True)  # fmt: skip
    gram_stack = replace(gram, batch=4, a_matrices=4, b_matrices=4)
    assert io_lower_bound(gram_stack, budget) == 4 * io_lower_bound(gram, budget)


def test_chunks_of_several_entries_are_decoded_whole():
    flat = Problem(m=4096, k=4096, n=4096, itemsize=4, a_chunks=(512, 512), b_chunks=(512, 512))
    stack = replace(flat, batch=8, a_matrices=8, b_matrices=8)
    tile = (2048, 2048, 1024, 2)
    assert task_bytes(stack, *tile) == task_bytes(flat, *tile)  # one entry's tile and panels
    assert projections(stack, *tile, splits=2) == projections(flat, *tile, splits=2)
    wide = replace(stack, chunk_batch=(4, 1))
    codec = 2 * 2 * 4 * 512 * 512  # a file and a chunk buffer per I/O thread, of one entry
    assert loop_bytes(wide, *tile) - loop_bytes(flat, *tile) == 4 * codec - codec
    assert task_bytes(wide, *tile) > task_bytes(flat, *tile)  # less left to grow to write
    assert task_bytes(replace(stack, chunk_batch=(1, 4)), *tile) == task_bytes(wide, *tile)
    shards = ((1024, 1024), None)
    sharded, sharded_wide = replace(stack, read_shards=shards), replace(wide, read_shards=shards)
    one_entry = shard_read_bytes((1024, 1024), (512, 512), 4, (2048, 1024), 2)
    assert one_entry > codec  # zarr's shard reads are the larger codec term
    assert loop_bytes(sharded_wide, *tile) - loop_bytes(sharded, *tile) == 3 * one_entry
    with pytest.raises(BudgetError):
        make_plan(replace(stack, chunk_batch=(64, 64)), 64 * 2**20)
    assert make_plan(replace(stack, chunk_batch=(2, 2)), 64 * 2**20).task_bytes <= 64 * 2**20


def test_a_stack_fills_the_workers_before_k_is_split_or_tiles_shrink():
    # One tile of a deep k: alone it is split in 8 (the frozen case "split").
    assert plan_of("split").splits == 8
    fields, budget = CASES["split"][0], CASES["split"][1]
    stack = problem_of(fields | dict(batch=16, a_matrices=16, b_matrices=16))
    plan = make_plan(stack, budget, 2)
    assert plan.splits == 1 and (plan.tm, plan.tn) == (1000, 1000)
    assert len(plan.tasks) == 16 and plan.busy_workers == 2
    assert make_plan(problem_of(fields), budget, 2).splits > 1
    # A 2-D product on 4 workers is cut in smaller tiles and split; a stack of 4 is not.
    square = Problem(m=2000, k=2000, n=2000, itemsize=8, a_chunks=(250, 250), b_chunks=(250, 250))
    flat = make_plan(square, 2**28, 4)
    assert len(flat.tasks) * flat.splits >= 4 and (flat.splits, flat.tn) != (1, 2000)
    stacked = make_plan(replace(square, batch=4, a_matrices=4, b_matrices=4), 2**28, 4)
    assert (stacked.tm, stacked.tn, stacked.splits, len(stacked.tasks)) == (2000, 2000, 1, 4)
    p = replace(square, batch=3, a_matrices=3, b_matrices=1)
    assert busiest_worker(p, 1000, 1000, 1) == 3 * busiest_worker(square, 1000, 1000, 1)
    assert busiest_worker(p, 1000, 1000, 12) == 1000 * 1000


@pytest.mark.parametrize(
    "bad",
    [
        dict(batch=0),
        dict(batch=-3),
        dict(batch=True),
        dict(batch=2.0),
        dict(batch=6, a_matrices=4),
        dict(batch=6, a_matrices=2, b_matrices=1),
        dict(batch=4, a_matrices=0),
        dict(a_matrices=2),
        dict(b_matrices=3),
        dict(chunk_batch=(1, 2)),
        dict(batch=2, chunk_batch=(0, 1)),
        dict(batch=2, chunk_batch=(1,)),
        dict(batch=4, a_matrices=4, b_matrices=2, symmetric=True),
        dict(batch=4, a_matrices=4, b_matrices=4, chunk_batch=(2, 1), symmetric=True),
    ],
)
def test_problem_refuses_a_stack_no_operands_can_make_naming_its_values(bad):
    with pytest.raises(InputError) as refused:
        Problem(**SMALL | bad)
    named = [v for k, v in bad.items() if k in ("batch", "a_matrices", "b_matrices")]
    assert all(str(value) in str(refused.value) for value in named)


def test_problem_takes_numpy_integers_as_ints():
    np = pytest.importorskip("numpy")
    p = Problem(**SMALL, batch=np.int64(6), a_matrices=np.int32(2), b_matrices=3,
                chunk_batch=[np.int64(2), 1])  # fmt: skip
    assert (p.batch, p.a_matrices, p.chunk_batch, p.entries) == (6, 2, (2, 1), 6)
    assert type(p.batch) is int and type(p.chunk_batch[0]) is int
    assert Problem(**SMALL).entries == 1


def test_a_plan_refuses_tiles_of_another_batch():
    plan = make_plan(Problem(**SMALL, batch=2, a_matrices=2, b_matrices=2), 2**20)
    with pytest.raises(InputError, match="batch"):
        replace(plan, tasks=Tiles(4, 4, plan.tm, plan.tn))

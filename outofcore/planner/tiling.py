"""The tile search: the tile, panel depth and split of k a plan uses.

Pure arithmetic, like :mod:`outofcore.planner.plan`: nothing here imports Dask, numba or
zarr.  Every candidate is held to the memory model's one budget test
(:func:`outofcore.planner.memory.fits`) and ranked by its estimated time (:func:`_estimate`; a
GPU job's by its GPU's rates, :func:`outofcore.planner.gpu_rates.gpu_seconds`, its tiles resident
on the device budget where the smallest one is, and k split only where whole-k tiles
cannot keep every GPU busy).
A stack of matrices (``Problem.batch``) has every tile of every entry as tasks: they
fill the workers before k is split or the tiles are made smaller (:func:`tile_count`).
"""

from __future__ import annotations

import math
from dataclasses import replace

from outofcore.errors import BudgetError, InputError
from outofcore.planner.device_plan import widest
from outofcore.planner.gpu_rates import GpuTarget, gpu_seconds
from outofcore.planner.io_model import touched
from outofcore.planner.memory import check_fits, fits, mib, output_chunk, round_up, task_bytes
from outofcore.planner.plan import DEFAULT_IO_CONCURRENCY, Panels, Plan, Tiles
from outofcore.planner.problem import Problem
from outofcore.planner.workload import busiest_worker, tile_count

#: Preferred k-panel depth: deep enough for BLAS to run near peak.
TARGET_TK = 1024
#: Core time to decode one element, in multiply-adds of the same core: zstd
#: decodes about 1 GB/s (0.25 G float32/s) where sgemm runs about 50 G
#: multiply-adds/s per core (measured on the 2-core CI machine).  Only used to
#: rank tile shapes against each other.
DECODE_COST_FMAS = 200
#: Tile counts along one side tried one by one before the search goes geometric.
MAX_EDGE_CANDIDATES = 256
#: An output a job creates with more chunks than this is sharded, one shard per
#: tile (zarr v3 ``shards=``), so that the store holds a few large objects and
#: each tile still writes whole ones: :func:`make_output_plan`.
SHARD_OVER_CHUNKS = 10**5
#: Core time to write and read back one element of a partial tile (split-k), in
#: multiply-adds: raw bytes to the output's store and back, no codec.
SCRATCH_COST_FMAS = 50


def make_plan(
    problem: Problem,
    task_budget_bytes: int,
    workers: int = 1,
    *,
    tile: tuple[int, int] | None = None,
    tk: int | None = None,
    io_concurrency: int = DEFAULT_IO_CONCURRENCY,
    splits: int | None = None,
    gpu: GpuTarget | None = None,
) -> Plan:
    """Choose tile sizes for ``problem`` within ``task_budget_bytes`` per task.

    The tile shape and the split of k minimise the estimated time of the
    busiest worker, compute plus decoding plus partial tiles moved
    (:func:`_best_tile`): tiles as large as the budget allows, since that
    minimises bytes read, with whole-grid ceilings and the balance over
    ``workers`` counted.  When there are too few tiles to keep every worker
    busy, k is split (each tile's panels divided into ``splits`` parts whose
    partial sums a reduction adds) or, where that costs less, the tiles are
    made smaller.  Tile edges fall on A's row chunks, B's column chunks and
    the output grid; k-panel edges on the chunks of A's columns and B's rows
    where their common multiple fits.

    Parameters
    ----------
    problem
        Shapes, element size and chunk grids.
    task_budget_bytes
        Memory one task may use: a worker's budget shared by its threads (one task each).
    workers
        Workers that will run tasks; the plan makes at least this many tiles
        when the shapes allow.
    tile, tk
        Force the tile shape or panel depth (tests and experiments); they are
        still checked against the chunk grids and the budget.
    io_concurrency
        Chunks decoded at once per task (sizes the codec buffers).
    splits
        Force the number of parts k is split into (1: no split); at most the
        number of panels.
    gpu
        The GPU each worker multiplies on (a ``cuda`` or ``cupy`` job), or None (a CPU
        job): candidates are ranked by :func:`~outofcore.planner.gpu_rates.gpu_seconds` with its
        rates and ``io_concurrency`` decode threads; with its device budget, tiles stay
        resident where the smallest one can; k is not split where the smallest tiles
        are at least as many as the workers.

    Raises
    ------
    BudgetError
        When even the smallest aligned tile does not fit, naming the bytes.
    """
    if workers < 1:
        raise InputError(f"workers = {workers}: need at least one worker")
    if io_concurrency < 1:
        raise InputError(f"io_concurrency = {io_concurrency}: need at least 1")
    p = problem
    k_unit = panel_depth_unit(p)
    row_unit, col_unit = _tile_units(p, k_unit, task_budget_bytes, io_concurrency, workers)
    if tk is None:
        tk = _choose_tk(
            p, k_unit, row_unit, col_unit, task_budget_bytes, io_concurrency, workers, splits, gpu
        )
    _check_depth(p, tk, k_unit, splits)
    if tile is None:
        tm, tn = _chosen_tile(
            p, row_unit, col_unit, tk, task_budget_bytes, io_concurrency, workers, splits, gpu
        )
    else:
        tm, tn = _forced_tile(p, tile, k_unit, row_unit, col_unit, io_concurrency)
    edges = (min(tm, p.m), min(tn, p.n))
    return _checked_plan(
        p, edges, min(tk, p.k), task_budget_bytes, workers, io_concurrency, splits, gpu
    )


def _checked_plan(
    p: Problem,
    tile: tuple[int, int],
    tk: int,
    task_budget_bytes: int,
    workers: int,
    io_concurrency: int,
    splits: int | None,
    gpu: GpuTarget | None,
) -> Plan:
    """The plan of a tile and panel depth: k's split chosen unless forced, the budget checked.

    Raises
    ------
    BudgetError
        When the task does not fit ``task_budget_bytes``
        (:func:`~outofcore.planner.memory.check_fits`).
    """
    tm, tn = tile
    if splits is None:
        splits = _best_splits(p, tm, tn, tk, workers, task_budget_bytes, io_concurrency, gpu)
    check_fits(p, tm, tn, tk, task_budget_bytes, io_concurrency, splits)
    return Plan(
        problem=p,
        task_budget_bytes=task_budget_bytes,
        workers=workers,
        tm=tm,
        tn=tn,
        tk=tk,
        out_chunks=p.out_chunks or p.out_grid or (output_chunk(tm), output_chunk(tn)),
        io_concurrency=io_concurrency,
        panels=Panels(p.k, tk),
        tasks=Tiles(p.m, p.n, tm, tn, p.symmetric, p.batch),
        splits=splits,
    )


def _check_depth(p: Problem, tk: int, k_unit: int, splits: int | None) -> None:
    """Refuse a panel depth off k's chunk grid, or a forced split into more parts than panels.

    Raises
    ------
    InputError
        Naming the depth or the split and what the grid allows.
    """
    _check_multiple("tk", tk, k_unit, p.k)
    panel_count = math.ceil(p.k / min(tk, p.k))
    if splits is not None and not 1 <= splits <= panel_count:
        raise InputError(
            f"splits = {splits}: k = {p.k} in panels {min(tk, p.k)} deep can be split "
            f"into 1 to {panel_count} parts"
        )


def _chosen_tile(
    p: Problem,
    row_unit: int,
    col_unit: int,
    tk: int,
    task_budget_bytes: int,
    io_concurrency: int,
    workers: int,
    splits: int | None,
    gpu: GpuTarget | None,
) -> tuple[int, int]:
    """The searched tile (:func:`_best_tile`), cut for the workers where k is not split.

    Returns
    -------
    tuple of int
        The tile's rows and columns, on the row and column units.
    """
    tm, tn, best_splits = _best_tile(
        p, row_unit, col_unit, tk, task_budget_bytes, io_concurrency, workers, splits, gpu
    )
    if best_splits == 1:
        tm, tn = _split_for_workers(p, tm, tn, row_unit, col_unit, workers)
    return tm, tn


def _forced_tile(
    p: Problem,
    tile: tuple[int, int],
    k_unit: int,
    row_unit: int,
    col_unit: int,
    io_concurrency: int,
) -> tuple[int, int]:
    """A tile the caller forces, checked against the chunk grids (the output's alone where
    it has one: a journal's tile) and, for a symmetric product, squareness.

    Raises
    ------
    InputError
        When an edge is off its grid, or a symmetric product's tile is not square.
    """
    tm, tn = tile
    if p.out_grid or p.out_chunks:  # on the output's grid alone (a journal's tile) too
        row_unit, col_unit = _tile_units(p, k_unit, None, io_concurrency)
    _check_multiple("tile rows", tm, row_unit, p.m)
    _check_multiple("tile columns", tn, col_unit, p.n)
    if p.symmetric and min(tm, p.m) != min(tn, p.n):
        raise InputError(f"tile = {tile}: a symmetric product needs square tiles")
    return tm, tn


def make_output_plan(
    problem: Problem,
    task_budget_bytes: int,
    workers: int = 1,
    *,
    tile: tuple[int, int] | None = None,
    tk: int | None = None,
    io_concurrency: int = DEFAULT_IO_CONCURRENCY,
    splits: int | None = None,
    shards: bool = True,
    gpu: GpuTarget | None = None,
) -> Plan:
    """:func:`make_plan` for a job that creates its output: sharded when it is large.

    An output of more than :data:`SHARD_OVER_CHUNKS` chunks is planned with
    ``shard_tiles`` (one shard per tile, whose encoding the memory contract
    counts, so the tile may come out smaller) when ``shards`` and when a tile
    then holds more than one chunk (a shard of one chunk would not make the
    store hold fewer objects).  A problem with an ``out_grid`` (an existing
    output) is planned as it is.
    """
    options = {"tile": tile, "tk": tk, "io_concurrency": io_concurrency, "splits": splits}
    options["gpu"] = gpu
    plan = make_plan(problem, task_budget_bytes, workers, **options)
    if not shards or problem.out_grid is not None or not is_large_output(plan):
        return plan
    sharded = make_plan(replace(problem, shard_tiles=True), task_budget_bytes, workers, **options)
    if sharded.out_shards == sharded.out_chunks:
        return plan
    return sharded


def is_large_output(plan: Plan) -> bool:
    """Whether the plan's output has more than :data:`SHARD_OVER_CHUNKS` chunks."""
    return plan.out_chunk_count > SHARD_OVER_CHUNKS


def _tile_units(
    p: Problem, k_unit: int, budget: int | None, io: int, workers: int = 1
) -> tuple[int, int]:
    """The steps of tile edges down and across: on A's row chunks, B's column chunks and
    the output's grid (its chunks or shards, existing or asked: whole ones a task).

    Where the output's grid is not the inputs' and the smallest tile on all of them
    (their least common multiple, up to the whole dimension) does not fit ``budget`` (with
    ``io`` decode threads; None: never), or leaves fewer tiles than ``workers`` where the
    output's grid has more, the output's grid alone: a tile edge may then cut an input
    chunk, which the tiles on both sides decode.  Square for a symmetric product (tile
    (i, j) mirrors onto (j, i))."""
    grid = p.out_grid or p.out_chunks  # shards asked are a multiple of the chunks asked

    def square(rows: int, cols: int) -> tuple[int, int]:
        return (_unit(p.m, rows, cols),) * 2 if p.symmetric else (rows, cols)

    rows = _unit(p.m, p.a_chunks[0], grid[0] if grid else None)
    rows, cols = square(rows, _unit(p.n, p.b_chunks[1], grid[1] if grid else None))
    if grid is None:
        return rows, cols
    alone = square(_unit(p.m, grid[0]), _unit(p.n, grid[1]))
    enough = min(workers, tile_count(p, *alone)) <= tile_count(p, rows, cols)
    if budget is not None and enough and fits(p, rows, cols, k_unit, budget, io):
        return rows, cols
    return alone


def _unit(extent: int, *grids: int | None) -> int:
    """Smallest tile edge step that keeps tile edges on every grid (capped at ``extent``)."""
    unit = math.lcm(*(g for g in grids if g))
    return min(unit, extent)


def panel_depth_unit(p: Problem) -> int:
    """Panel depth step: a common multiple of both chunkings when one fits in k."""
    common = math.lcm(p.a_chunks[1], p.b_chunks[0])
    if common <= p.k:
        return common
    # The grids do not meet inside k: panels follow the coarser chunking and the
    # finer one is read twice where a panel edge cuts its chunk (bytes_read says so).
    return min(max(p.a_chunks[1], p.b_chunks[0]), p.k)


def _choose_tk(
    p: Problem,
    k_unit: int,
    row_unit: int,
    col_unit: int,
    budget: int,
    io_concurrency: int,
    workers: int,
    splits: int | None,
    gpu: GpuTarget | None = None,
) -> int:
    """The panel depth: :data:`TARGET_TK` rounded to ``k_unit`` where the smallest tile
    fits ``budget`` with it (its parts and reduction too, when k is split).  Otherwise
    the tile the thinnest panels leave room for is kept, with the deepest panels
    (halving, in whole units) it still fits with: a large tile is not multiplied by the
    thinnest panels when deeper ones fit (each panel reads and writes the whole tile).
    A forced split of k leaves at least one panel a part."""
    if k_unit >= p.k:
        return p.k
    steps = max(1, TARGET_TK // k_unit)
    if splits:
        steps = max(1, min(steps, p.k // splits // k_unit))
    if fits(p, row_unit, col_unit, steps * k_unit, budget, io_concurrency, splits or 1):
        return min(steps * k_unit, p.k)
    try:
        tm, tn, parts = _best_tile(
            p, row_unit, col_unit, k_unit, budget, io_concurrency, workers, splits, gpu
        )
    except BudgetError:
        return k_unit  # the plan refuses the budget with the thinnest panels' figures
    steps //= 2
    while steps > 1 and not fits(p, tm, tn, steps * k_unit, budget, io_concurrency, parts):
        steps //= 2
    return min(steps * k_unit, p.k)


def _check_multiple(name: str, value: int, unit: int, extent: int) -> None:
    if value < 1 or (value < extent and value % unit):
        raise InputError(
            f"{name} = {value} does not fall on the chunk grid: use a multiple of {unit} "
            f"(or {extent} or more for the whole dimension)"
        )


def _best_tile(
    p: Problem,
    row_unit: int,
    col_unit: int,
    tk: int,
    budget: int,
    io_concurrency: int,
    workers: int,
    splits: int | None = None,
    gpu: GpuTarget | None = None,
) -> tuple[int, int, int]:
    """The aligned tile within ``budget``, and the split of k, that minimise the job time.

    For every count of tile rows ``R`` the tile height is the smallest aligned
    one giving ``R`` rows; its width is the widest that fits, or a narrower one
    with a few more columns (better balance over workers); when the tiles are
    too few for the workers, each split of k is tried too (``splits`` forces
    one).  Each candidate is scored by :func:`_score`.  On a GPU (``gpu``) tiles stay
    resident on its device budget where the smallest one can, and k is split only where
    the smallest tiles are fewer than the workers.  Returns ``(tm, tn, splits)``.
    """
    tk = min(tk, p.k)

    def host(tm: int, tn: int) -> bool:  # a task of a whole tile (no split) fits
        return fits(p, tm, tn, tk, budget, io_concurrency)

    resident = gpu is not None and gpu.resident(row_unit, col_unit, tk, p.itemsize)

    def whole(tm: int, tn: int) -> bool:  # ... and its C tile stays on the device
        return host(tm, tn) and (not resident or gpu.resident(tm, tn, tk, p.itemsize))

    keep_k = gpu is not None and tile_count(p, row_unit, col_unit) >= workers
    if not host(row_unit, col_unit):
        smallest = task_bytes(p, row_unit, col_unit, tk, io_concurrency)
        raise BudgetError(
            f"budget of {budget} bytes ({mib(budget)}) is too small: the smallest tile "
            f"the chunking allows ({row_unit}x{col_unit}, panels {tk} deep, "
            f"A chunks {p.a_chunks}, B chunks {p.b_chunks}) needs {smallest} bytes "
            f"({mib(smallest)}) per task; raise the budget or rechunk the inputs smaller"
        )
    best: tuple[float, int, int, int] | None = None
    for tm in _candidate_edges(p.m, row_unit):
        if not whole(tm, col_unit):
            continue
        widest_tn = widest(tm, col_unit, p.n, whole)
        first = math.ceil(p.n / widest_tn)
        widths = (
            [tm]
            if p.symmetric
            else [
                min(p.n, round_up(math.ceil(p.n / columns), col_unit))
                for columns in range(first, first + 4)
            ]
        )
        for tn in widths:
            if not whole(tm, tn):
                continue
            tries = [1] if keep_k else _split_candidates(p, tm, tn, tk, workers)
            for parts in [splits] if splits else tries:
                if parts > 1 and not fits(p, tm, tn, tk, budget, io_concurrency, parts):
                    continue  # a part or its reduction would not fit
                score = _score(p, tm, tn, tk, workers, parts, io_concurrency, gpu)
                if best is None or score < best[0]:
                    best = (score, tm, tn, parts)
    if best is None:  # the smallest tile fits, so some candidate does unless splits is forced
        raise BudgetError(
            f"no tile fits the budget of {budget} bytes ({mib(budget)})"
            + (f" with k split in {splits} parts (its parts and their reduction)" if splits else "")
        )
    return best[1], best[2], best[3]


def _score(
    p: Problem,
    tm: int,
    tn: int,
    tk: int,
    workers: int,
    splits: int,
    io_concurrency: int,
    gpu: GpuTarget | None,
) -> float:
    """A candidate's estimated time: :func:`_estimate` on CPU workers, seconds by
    :func:`~outofcore.planner.gpu_rates.gpu_seconds` on ``gpu`` (only compared among themselves)."""
    if gpu is None:
        return _estimate(p, tm, tn, tk, workers, splits)
    return gpu_seconds(p, tm, tn, tk, workers, splits, io_concurrency, gpu)


def _estimate(p: Problem, tm: int, tn: int, tk: int, workers: int, splits: int) -> float:
    """Estimated time of a plan, in multiply-adds of its busiest worker.

    The compute of the busiest worker (tasks largest first to the least loaded
    one), plus decoding the bytes read at :data:`DECODE_COST_FMAS` an element
    and, for a split of k, writing and reading back the partial tiles at
    :data:`SCRATCH_COST_FMAS` an element, both shared by the workers that have
    a task.  Whole-grid ceilings are counted, so a ragged edge that adds a
    tile row or column costs what it reads.
    """
    panels = Panels(p.k, min(tk, p.k))
    rows, cols = math.ceil(p.m / tm), math.ceil(p.n / tn)
    decoded = cols * p.m * touched(panels, p.a_chunks[1]) * p.chunk_batch[0]
    if not p.symmetric:  # a symmetric product reads one panel per tile row and column
        decoded += rows * p.n * touched(panels, p.b_chunks[0]) * p.chunk_batch[1]
    decoded *= p.entries  # every entry of a stack reads its own (whole chunks)
    scratch = 2 * splits * p.entries * p.m * p.n if splits > 1 else 0
    busy = min(workers, tile_count(p, tm, tn) * splits)
    compute = busiest_worker(p, tm, tn, workers, splits) * p.k
    return compute + (DECODE_COST_FMAS * decoded + SCRATCH_COST_FMAS * scratch) / busy


def _split_candidates(p: Problem, tm: int, tn: int, tk: int, workers: int) -> range:
    """Splits of k worth trying for ``tm×tn`` tiles: 1, and when the tiles are fewer
    than twice the workers, up to four tasks a worker (at most one part a panel)."""
    tiles = tile_count(p, tm, tn)
    if workers == 1 or tiles >= 2 * workers:
        return range(1, 2)
    most = min(math.ceil(p.k / min(tk, p.k)), math.ceil(4 * workers / tiles))
    return range(1, most + 1)


def _best_splits(
    p: Problem,
    tm: int,
    tn: int,
    tk: int,
    workers: int,
    budget: int,
    io_concurrency: int,
    gpu: GpuTarget | None = None,
) -> int:
    """The split of k that :func:`_score` rates fastest for fixed ``tm×tn`` tiles,
    among those whose parts and reduction fit ``budget`` (no split: the tile fits)."""
    candidates = [
        parts
        for parts in _split_candidates(p, tm, tn, tk, workers)
        if parts == 1 or fits(p, tm, tn, tk, budget, io_concurrency, parts)
    ]
    return min(
        candidates, key=lambda parts: _score(p, tm, tn, tk, workers, parts, io_concurrency, gpu)
    )


def _candidate_edges(extent: int, unit: int) -> list[int]:
    """Aligned tile edges, one per count of tiles along ``extent`` (capped for speed)."""
    most = math.ceil(extent / unit)
    counts = list(range(1, min(most, MAX_EDGE_CANDIDATES) + 1))
    count = float(MAX_EDGE_CANDIDATES)
    while count < most:  # geometric beyond the first few hundred counts
        count *= 1.05
        counts.append(min(most, math.ceil(count)))
    edges = {min(extent, round_up(math.ceil(extent / c), unit)) for c in counts}
    return sorted(edges, reverse=True)


def _split_for_workers(
    p: Problem, tm: int, tn: int, row_unit: int, col_unit: int, workers: int
) -> tuple[int, int]:
    """Shrink the tile until every worker gets one, while the grid allows (square stays square)."""
    while tile_count(p, tm, tn) < workers:
        rows_can = tm > row_unit
        cols_can = tn > col_unit
        if not (rows_can or cols_can):
            break
        if p.symmetric:
            tm = tn = max(row_unit, round_up(math.ceil(tm / 2), row_unit))
        elif rows_can and (tm >= tn or not cols_can):
            tm = max(row_unit, round_up(math.ceil(tm / 2), row_unit))
        else:
            tn = max(col_unit, round_up(math.ceil(tn / 2), col_unit))
    return tm, tn

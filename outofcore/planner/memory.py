"""The memory model: the peak bytes of each kind of task a plan runs, and the one budget test.

Pure arithmetic, like :mod:`outofcore.planner.plan`: nothing here imports Dask, numba or zarr.
Every search of the planner (:mod:`outofcore.planner.tiling`) asks :func:`fits`; the job's
workers are held to the same projections (:attr:`outofcore.planner.plan.Plan.projections`).

Memory contract of one task (bytes)::

    w * (tm*tn + depth * tk * (tm + tn))  +  staging  +  write block  +  codec buffers

with ``w`` the accumulation dtype's size (float32 for float16 inputs, float64
for exact integer products, int64 for those through limbs, which add their limb
temporaries: :func:`limb_bytes`), ``depth = 2`` panels in flight (one multiplied,
one being decoded), staging: the panel of an input stored in another dtype,
decoded there before it is converted (``tk * (tm + tn)`` at the stored size,
for each input that needs it), write block: the output rows written at once
(``write_block_rows``) when they are converted to the output dtype or an
addend is read for them, and codec buffers: a file and a chunk buffer per I/O
thread (``io_concurrency`` of them), of the input chunk's size, grown to the
output chunk's size in the threads that write; the same buffers serve reads and writes and are kept
between tasks.  The CPU engine writes the tile's finished rows while it multiplies
the last panels, so the panels are still live while output chunks are
written (:func:`task_bytes`).  A stack of matrices (``Problem.batch``) holds one
entry's tile and panels per task, but decodes whole chunks: the input chunk (and a
shard read) of an operand whose chunks hold ``chunk_batch`` entries is that many
entries' (:func:`input_chunk_bytes`).
"""

from __future__ import annotations

import functools
import math

from outofcore.errors import BudgetError
from outofcore.planner.problem import Problem

PANELS_IN_FLIGHT = 2
#: Elements of a panel an operand's elementwise steps are applied to at once
#: (:func:`outofcore.operands.steps.apply`): the size of their temporaries.
STEP_SLAB_ELEMENTS = 2**14
#: Largest side of an output chunk we create (a tile may hold several).
MAX_OUTPUT_CHUNK = 2048
#: Rows of C written at once (whole rows of output chunks, at least this many):
#: the CPU engine multiplies a tile's last panels block by block and writes each
#: finished block while it multiplies the next.
WRITE_BLOCK_ROWS = 1024


def task_bytes(problem: Problem, tm: int, tn: int, tk: int, io_concurrency: int) -> int:
    """Projected peak bytes of one task with a ``tm×tn`` tile and ``tk``-deep panels.

    The tile loop (:func:`loop_bytes`), and what finishing and writing the tile adds:
    one write block's conversion and addend buffers, the addend's chunk buffers
    (``io_concurrency`` read at a time), the codec buffers grown to the output
    chunk's size in the threads that write (at most ``c = io_concurrency``, and at
    most the tile's output chunks), and for a symmetric product the transposed
    blocks its mirror tile is written from.
    """
    p = problem
    tm, tn = min(tm, p.m), min(tn, p.n)
    input_chunk = input_chunk_bytes(p)
    out_rows, out_cols = out_grid(p, tm, tn)
    block = p.block_extra * write_block_rows(out_rows, tm) * tn
    out_chunk = p.written_itemsize * min(out_rows, tm) * min(out_cols, tn)
    writers = min(io_concurrency, math.ceil(tm / out_rows) * math.ceil(tn / out_cols))
    codec_buffers = writers * 2 * max(0, out_chunk - input_chunk)
    codec_buffers += io_concurrency * 2 * p.addend_chunk_bytes
    if p.symmetric:  # the mirror tile is written from transposed blocks of the tile's columns
        block += max(p.itemsize, p.written_itemsize) * tm * write_block_rows(out_cols, tn)
    return loop_bytes(p, tm, tn, tk, io_concurrency) + block + codec_buffers


def loop_bytes(problem: Problem, tm: int, tn: int, tk: int, io_concurrency: int) -> int:
    """Projected peak bytes of the tile loop over its panels, before anything is written.

    ``w * (tm*tn + depth*tk*(tm + tn))`` for the tile and the panels in flight,
    live throughout (the last panels' rows are written while they are
    multiplied); the staging panels of inputs stored in another dtype, and the slabs
    an operand's elementwise steps are applied in (``step_slabs``); the vectors
    of operands computed as they are read (``held_bytes``); and the
    codec buffers, kept from reads to writes and task to task: a file and a chunk
    buffer for each of the ``c = io_concurrency`` I/O threads, of the largest input
    chunk, and on object stores each request's own objects (``request_bytes``); or,
    where zarr reads shards (``read_shards``), what its reads hold at once
    (:func:`shard_read_bytes`) if that is more.
    """
    p = problem
    tm, tn, tk = min(tm, p.m), min(tn, p.n), min(tk, p.k)
    wa, wb = p.read_sizes
    input_chunk = input_chunk_bytes(p)
    panels = p.itemsize * PANELS_IN_FLIGHT * tk * (tm + tn)
    staging = tk * (tm * p.staging[0] + tn * p.staging[1])
    staging += min(STEP_SLAB_ELEMENTS, tm * tk) * p.step_slabs[0]  # computed operands' steps
    staging += min(STEP_SLAB_ELEMENTS, tk * tn) * p.step_slabs[1]
    shard_reads = max(  # of whole inner chunks: ``chunk_batch`` entries each
        shard_read_bytes(p.read_shards[0], p.a_chunks, wa, (tm, tk), io_concurrency)
        * p.chunk_batch[0],
        shard_read_bytes(p.read_shards[1], p.b_chunks, wb, (tk, tn), io_concurrency)
        * p.chunk_batch[1],
    )
    codec_buffers = max(2 * io_concurrency * input_chunk, shard_reads)
    codec_buffers += io_concurrency * p.request_bytes
    held = p.held_bytes  # the vectors of operands computed as they are read
    return (
        p.itemsize * tm * tn + panels + staging + codec_buffers + limb_bytes(p, tm, tn, tk) + held
    )


def input_chunk_bytes(problem: Problem) -> int:
    """Decoded bytes of the larger stored chunk of A and B, at their stored sizes: the
    size of each codec buffer.  A stack's chunk holds ``chunk_batch`` entries of it."""
    p = problem
    wa, wb = p.read_sizes
    a_chunk = wa * p.a_chunks[0] * p.a_chunks[1] * p.chunk_batch[0]
    return max(a_chunk, wb * p.b_chunks[0] * p.b_chunks[1] * p.chunk_batch[1])


#: A task's codec buffers (two a decode thread) take at most this share of its budget
#: when :func:`decode_threads` chooses how many chunks it decodes at once.
DECODE_BUFFER_SHARE = 1 / 8

#: The same for a task whose tiles a GPU multiplies: its kernel outruns any number of
#: decoding cores (a 721 GFLOP product is 0.02 s of an H200 and seconds of zstd), so
#: its cores all decode where half its budget holds their buffers; the host tile it
#: streams to the device is the other half.
GPU_DECODE_BUFFER_SHARE = 1 / 2


def decode_threads(
    problem: Problem, task_budget: int, cores: int, least: int, *, gpu: bool = False
) -> int:
    """Chunks a task reads and decodes at once from a local disk: one a core it may use
    (``cores``, its share of the worker's CPU affinity), at least ``least``, and no more
    than keep their codec buffers (two of :func:`input_chunk_bytes` each, counted by
    :func:`loop_bytes`) within :data:`DECODE_BUFFER_SHARE` of ``task_budget``, or
    :data:`GPU_DECODE_BUFFER_SHARE` for a task whose tiles a GPU multiplies (``gpu``).

    Decoding zstd costs about 1.3 CPU s a GiB: a GPU's tiles are fed only with many
    cores decoding (design.md, "The GPU pipeline"), and a CPU worker's next panel is
    decoded while BLAS multiplies the last one."""
    per_thread = 2 * max(1, input_chunk_bytes(problem))
    share = GPU_DECODE_BUFFER_SHARE if gpu else DECODE_BUFFER_SHARE
    within = int(task_budget * share) // per_thread
    return max(least, min(cores, within))


def limb_bytes(problem: Problem, tm: int, tn: int, tk: int) -> int:
    """Bytes a wide integer product's multiply holds beside its panels
    (:mod:`outofcore.backends.limbs`): every float64 limb of B's panel, one of A's, a 64-bit
    scratch buffer of the larger panel, and one shift's float64 sum with its integer
    conversion (``tm x tn`` each); 0 for other products."""
    if not problem.limbs:
        return 0
    return 8 * (tk * tn * problem.limbs + tm * tk + tk * max(tm, tn) + 2 * tm * tn)


def shard_read_bytes(
    shards: tuple[int, int] | None,
    chunks: tuple[int, int],
    itemsize: int,
    panel: tuple[int, int],
    io_concurrency: int,
) -> int:
    """Bytes zarr's sharding codec holds while it reads a ``panel`` (rows, columns) of an
    input in ``shards`` of ``chunks``; 0 without shards.

    zarr reads up to ``io_concurrency`` shards at once (the shards the panel touches, at
    most); each holds its part of the panel (in whole inner chunks) three times: its
    stored bytes, the decoded block it returns, and the previous read's block, which
    glibc's allocator keeps in a thread's arena after zarr frees it (its mmap threshold
    grows to the largest block freed: measured 4-11 % over the live bytes without this
    term, 23 % under them with ``MALLOC_MMAP_THRESHOLD_`` fixed); and it decodes up to
    ``io_concurrency`` inner chunks at once, each beside its stored bytes.  Measured in
    benchmarks/task_memory.py (case ``sharded-zarr``).
    """
    if shards is None:
        return 0
    block, touched = itemsize, 1
    for extent, shard, chunk in zip(panel, shards, chunks, strict=True):
        block *= min(shard, round_up(extent, chunk))
        touched *= math.ceil(extent / shard) + (1 if extent % shard else 0)
    chunk_bytes = itemsize * chunks[0] * chunks[1]
    inner = 2 * min(io_concurrency, math.prod(shards) // math.prod(chunks)) * chunk_bytes
    return min(io_concurrency, touched) * (3 * block + inner)


def part_bytes(problem: Problem, tm: int, tn: int, tk: int, io_concurrency: int) -> int:
    """Projected peak bytes of one part of a split tile (:mod:`outofcore.jobs.splitk`).

    The tile loop over the part's panels (:func:`loop_bytes`; a part neither finishes
    nor writes output chunks), and the block of rows being kept: serialized once
    (``.npy``), and copied once more by stores that send a body as ``bytes``.
    """
    p = problem
    tm, tn = min(tm, p.m), min(tn, p.n)
    rows = write_block_rows(out_grid(p, tm, tn)[0], tm)
    return loop_bytes(p, tm, tn, tk, io_concurrency) + 2 * p.itemsize * rows * tn


def reduction_bytes(problem: Problem, tm: int, tn: int, io_concurrency: int) -> int:
    """Projected peak bytes of the reduction of a split tile (:mod:`outofcore.jobs.splitk`).

    Per write block of rows, whatever the number of parts: the running sum, the part
    just read and a store's copy of it (three blocks in the accumulation dtype), the
    block's conversion and addend buffers, and the output codec buffers; an
    off-diagonal tile of a symmetric product also keeps its whole sum for the mirror.
    """
    p = problem
    tm, tn = min(tm, p.m), min(tn, p.n)
    out_rows, out_cols = out_grid(p, tm, tn)
    rows = write_block_rows(out_rows, tm)
    sums = 3 * p.itemsize * rows * tn + p.block_extra * rows * tn
    out_chunk = p.written_itemsize * min(out_rows, tm) * min(out_cols, tn)
    writers = min(io_concurrency, math.ceil(rows / out_rows) * math.ceil(tn / out_cols))
    mirror = p.itemsize * tm * tn if p.symmetric else 0
    addend = io_concurrency * 2 * p.addend_chunk_bytes
    requests = io_concurrency * p.request_bytes
    return sums + writers * 2 * out_chunk + mirror + addend + requests


#: What each kind of task is called in messages (the keys of :func:`projections`).
KIND_NAMES = {"tile": "task", "part": "part of a split tile", "reduction": "reduction task"}


def projections(
    problem: Problem, tm: int, tn: int, tk: int, io_concurrency: int, splits: int = 1
) -> dict[str, int]:
    """Projected peak bytes of each kind of task a plan with these tiles runs, by kind:
    ``tile`` (a whole tile), or when k is split ``part`` (the tile loop over a part's
    panels, keeping its sum) and ``reduction``.  The plan is checked against the budget
    for each."""
    if splits == 1:
        return {"tile": task_bytes(problem, tm, tn, tk, io_concurrency)}
    return {
        "part": part_bytes(problem, tm, tn, tk, io_concurrency),
        "reduction": reduction_bytes(problem, tm, tn, io_concurrency),
    }


def fits(
    problem: Problem,
    tm: int,
    tn: int,
    tk: int,
    budget_bytes: int,
    io_concurrency: int,
    splits: int = 1,
) -> bool:
    """Whether every kind of task of ``tm×tn`` tiles with ``tk``-deep panels (k split in
    ``splits`` parts) fits ``budget_bytes`` per task: the one budget test of the planner."""
    kinds = projections(problem, tm, tn, tk, io_concurrency, splits)
    return max(kinds.values()) <= budget_bytes


def check_fits(
    problem: Problem,
    tm: int,
    tn: int,
    tk: int,
    budget_bytes: int,
    io_concurrency: int,
    splits: int = 1,
) -> None:
    """Refuse tiles that do not :func:`fits`, naming the kind of task and its bytes.

    Raises
    ------
    BudgetError
        When a kind of task's projection is over ``budget_bytes``.
    """
    for kind, projected in projections(problem, tm, tn, tk, io_concurrency, splits).items():
        if projected > budget_bytes:
            what = KIND_NAMES[kind] + (f" (k split in {splits} parts)" if splits > 1 else "")
            raise BudgetError(
                f"a {tm}x{tn} tile with {tk}-deep panels needs {projected} bytes per {what} "
                f"({mib(projected)}), over the budget of {budget_bytes} bytes "
                f"({mib(budget_bytes)}) per task"
            )


def out_grid(p: Problem, tm: int, tn: int) -> tuple[int, int]:
    """Rows and columns of the output's write grid for tiles of ``tm×tn``: the grid fixed
    before the plan (an existing output's, the shards asked), else a shard a tile
    (``shard_tiles``), else its chunks (asked, or :func:`output_chunk` of the tile's)."""
    if p.out_grid:
        return p.out_grid
    if p.shard_tiles:
        return (tm, tn)
    return p.out_chunks or (output_chunk(tm), output_chunk(tn))


def output_shards(p: Problem, tm: int, tn: int, chunks: tuple[int, int]) -> tuple[int, int] | None:
    """The shard shape of an output the job creates in ``chunks`` with ``tm×tn`` tiles, or
    None (unsharded, or an existing output): the shards asked (``out_grid`` beside asked
    ``out_chunks``), or one a tile (``shard_tiles``), rounded up to whole chunks where the
    tile is clipped to the array's edge (a shard holds whole chunks)."""
    if p.shard_tiles:
        return (round_up(tm, chunks[0]), round_up(tn, chunks[1]))
    if p.out_grid is not None and p.out_chunks is not None:
        return p.out_grid
    return None


def write_block_rows(grid_rows: int, tile_rows: int) -> int:
    """Rows of a tile written at once: whole rows of output chunks (or shards).

    At least :data:`WRITE_BLOCK_ROWS` (rounded up to the output grid), at most the tile.
    """
    block = grid_rows * max(1, -(-WRITE_BLOCK_ROWS // grid_rows))
    return min(block, tile_rows)


def output_chunk(tile_edge: int) -> int:
    """Largest divisor of the tile edge no bigger than ``MAX_OUTPUT_CHUNK``.

    In bounded time, whatever the edge (the planner asks for tens of thousands of
    edges): see :func:`_largest_divisor_within`.  The cap is read at each call, so a
    test may lower it.
    """
    return _largest_divisor_within(tile_edge, MAX_OUTPUT_CHUNK)


@functools.lru_cache(maxsize=2**14)
def _largest_divisor_within(edge: int, cap: int) -> int:
    """The largest divisor of ``edge`` no bigger than ``cap``: the divisors of ``edge``
    up to the cap are those of its greatest common divisor with the least common
    multiple of 1..cap, which is the answer when it is within the cap, else has one
    found in at most ``cap`` steps down from the cap."""
    if edge <= cap:
        return edge
    common = math.gcd(edge, _multiple_of_all_up_to(cap))
    if common <= cap:
        return common
    return next(size for size in range(cap, 0, -1) if common % size == 0)


@functools.cache
def _multiple_of_all_up_to(cap: int) -> int:
    """The least common multiple of 1..cap."""
    return math.lcm(*range(1, cap + 1))


def round_up(value: int, unit: int) -> int:
    """``value`` rounded up to a multiple of ``unit``."""
    return math.ceil(value / unit) * unit


def mib(nbytes: int) -> str:
    """``nbytes`` as ``"12.3 MiB"`` for messages (scheduler/ may not import dask's format_bytes)."""
    return f"{nbytes / 2**20:.1f} MiB"

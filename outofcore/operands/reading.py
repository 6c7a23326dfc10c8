"""Reading input panels for tile tasks: retries, and a fast path for plain chunks.

:func:`read_panel` reads ``array[selection]`` (one slice an axis: ``rows, cols`` of a
matrix) into a preallocated buffer.  For zarr's default layout (local store, zarr v3,
bytes + zstd, unsharded or zarr's shards) it reads the chunk files and decodes them
with the same codec zarr uses (:mod:`outofcore.storage.chunkfiles`), at about half zarr's CPU
cost per GiB; any other layout goes through zarr, with every chunk's decoding bounded
by its size (:mod:`outofcore.storage.bounded`).  Transient I/O errors and chunks that do not
decode (truncated or corrupt bytes, or bytes that decode to more or less than the
chunk) are retried; when the retries run out, :class:`ReadError` names the array, the
region and the failing chunk's key.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable

import numpy as np
import zarr

from outofcore import config
from outofcore.errors import ReadError
from outofcore.operands.joined import Joined
from outofcore.operands.stacking import Matrix
from outofcore.operands.steps import Step
from outofcore.operands.steps import apply as apply_steps
from outofcore.runtime.cores import usable_cores
from outofcore.storage import chunkfiles, stored_arrays
from outofcore.storage.chunk_layout import check_selection, index_text, region_text
from outofcore.storage.chunkfiles import DECODE_ERRORS, ChunkDecodeError

#: Errors worth retrying: I/O and network failures (timeouts, resets, unreadable or
#: undecodable chunks: :class:`~outofcore.storage.chunkfiles.ChunkDecodeError` is an OSError).
TRANSIENT_READ_ERRORS = (OSError, TimeoutError)
#: Where outofcore says what is not the result: here, each retried read.
logger = logging.getLogger("outofcore")


def read_retry_settings() -> tuple[int, float]:
    """Extra attempts after a failed read (default 3) and the first delay (0.2 s, doubling).

    The settings ``read-retries`` and ``read-retry-delay`` (:mod:`outofcore.config`,
    ``$OUTOFCORE_READ_RETRIES``, ``$OUTOFCORE_READ_RETRY_DELAY``), read where the
    task runs: set them in the workers' environment.
    """
    return int(config.number("read-retries", integer=True)), config.number("read-retry-delay")


def _read_into(array: zarr.Array, selection: tuple[slice, ...], out: np.ndarray) -> None:
    buffer = zarr.core.buffer.default_buffer_prototype().nd_buffer.from_numpy_array(out)
    bounded = chunkfiles.bounded_array(array)  # chunks decode to their size, never more

    def read() -> None:
        try:
            bounded.get_basic_selection(selection, out=buffer)
        except DECODE_ERRORS as exc:  # zarr's codecs on damaged bytes
            raise ChunkDecodeError(f"{type(exc).__name__}: {exc}") from exc

    with_retries(read, lambda: _region(array, selection))


def with_retries(read: Callable[[], object], region: Callable[[], str]) -> None:
    """Call ``read``, retrying transient errors, then raise :class:`ReadError` naming the region."""
    retries, delay = read_retry_settings()
    for attempt in range(retries + 1):
        try:
            read()
            return
        except TRANSIENT_READ_ERRORS as exc:
            if attempt == retries:
                raise ReadError(
                    f"reading {region()} failed {retries + 1} time(s); last error: "
                    f"{type(exc).__name__}: {exc} "
                    f"(retries: ${config.env_name('read-retries')}={retries})"
                ) from exc
            logger.warning(
                "a read failed (%s: %s); retry %d of %d in %g s",
                type(exc).__name__,
                exc,
                attempt + 1,
                retries,
                delay * 2**attempt,
            )
            time.sleep(delay * 2**attempt)


def _region(array: zarr.Array, selection: tuple[slice, ...]) -> str:
    """``rows a:b, columns c:d of ARRAY`` (``[a:b, c:d, e:f] of ARRAY`` for other than two
    axes), and which of its stored objects fail to read now (at most three named).

    The objects are chunks, or shards in a sharded array (zarr's block grid).
    """
    grid = tuple(array.shards or array.chunks)
    bounded = chunkfiles.bounded_array(array)  # each block read again, bounded as before
    blocks = itertools.product(
        *(
            range(part.start // size, max(part.start, part.stop - 1) // size + 1)
            for part, size in zip(selection, grid, strict=True)
        )
    )
    failing = []
    for block in blocks:
        try:
            bounded.get_block_selection(block)
        except (*TRANSIENT_READ_ERRORS, *DECODE_ERRORS) as exc:
            failing.append(_failing_block(array, grid, block, exc))
            if len(failing) == FAILING_NAMED:
                break
    found = "; ".join(failing) if failing else "no single chunk fails when read again"
    return f"{region_text(selection)} of {stored_arrays.describe(array)} ({found})"


#: Most failing chunks (shards) a read error names.
FAILING_NAMED = 3


def _failing_block(
    array: zarr.Array, grid: tuple[int, ...], block: tuple[int, ...], exc: BaseException
) -> str:
    """``chunk (3, 2), key c/3/2 (rows 30:40, columns 20:30), fails with E: ...``."""
    key = array.metadata.encode_chunk_key(block)
    extent = tuple(
        slice(i * size, min((i + 1) * size, n))
        for i, size, n in zip(block, grid, array.shape, strict=True)
    )
    return (
        f"{'shard' if array.shards else 'chunk'} {index_text(block)}, key "
        f"{f'{array.path}/' if array.path else ''}{key} ({region_text(extent)}), "
        f"fails with {type(exc).__name__}: {exc}"
    )


def read_converted(
    array: zarr.Array,
    selection: tuple[slice, ...],
    out: np.ndarray,
    staging: np.ndarray | None = None,
    compute: Callable[[np.ndarray, np.ndarray], None] | None = None,
) -> None:
    """Read ``array[selection]`` into ``out``, converting when ``out`` has another dtype.

    ``selection`` is one slice an axis; ``out`` has the region's shape.

    The region is decoded into ``staging`` (a flat buffer of the stored dtype
    with room for it; allocated when None) and then converted into ``out``.
    ``compute(values, out)`` writes ``out`` from the decoded values instead (an operand
    computed as it is read, :func:`outofcore.operands.steps.apply`; ``values`` may be ``out``).
    """
    if out.dtype == array.dtype:
        read_panel(array, selection, out)
        if compute is not None:
            compute(out, out)
        return
    if staging is None:
        staging = np.empty(out.size, dtype=array.dtype)
    stage = staging[: out.size].reshape(out.shape)
    read_panel(array, selection, stage)
    if compute is not None:
        compute(stage, out)
    else:
        np.copyto(out, stage, casting="unsafe")


def read_operand(
    array: zarr.Array | Joined,
    matrix: Matrix,
    transposed: bool,
    rows: slice,
    cols: slice,
    out: np.ndarray,
    staging: np.ndarray | None = None,
    steps: tuple[Step, ...] = (),
) -> None:
    """Read ``op(M)[rows, cols]`` into the 2-D ``out``, where ``M`` is ``matrix`` of
    ``array`` (a stack's entry, or a vector as a one-row or one-column matrix) and
    ``op`` is the identity or ``.T`` (``array`` may be stored arrays joined along one
    axis, :mod:`outofcore.operands.joined`); with ``steps`` (an operand computed as it is read,
    :mod:`outofcore.operands.dask_graph`) ``out`` holds the steps applied to the decoded values, as
    numpy computes them.

    A transposed operand's region is ``M[cols, rows]``, read as stored into
    ``out.T`` (``out`` is then a column-major view over a row-major buffer).
    """
    stored, (r, c) = (out.T, (cols, rows)) if transposed else (out, (rows, cols))
    r0, c0 = r.start or 0, c.start or 0

    def computing(at: tuple[int, int]) -> Callable[[np.ndarray, np.ndarray], None] | None:
        if not steps:
            return None
        return lambda values, into: apply_steps(steps, values, into, *at, read=read_converted)

    if isinstance(array, Joined):  # arrays joined along one axis: each part's piece
        _read_joined(array, matrix.selection(r, c), stored, staging, computing, (r0, c0))
    else:
        view = matrix.view(stored)
        read_converted(array, matrix.selection(r, c), view, staging, computing((r0, c0)))


def _read_joined(
    joined: Joined,
    selection: tuple[slice, ...],
    out: np.ndarray,
    staging: np.ndarray | None,
    computing: Callable[[tuple[int, int]], Callable[[np.ndarray, np.ndarray], None] | None],
    at: tuple[int, int],
) -> None:
    """Read ``selection`` (rows, cols of the joined arrays, starting ``at``) into the 2-D
    ``out``, each part's piece from that part (``computing(start)``: what computes a
    piece's values from those decoded)."""
    axis = joined.axis
    span = selection[axis]
    for index, start, stop, offset in joined.pieces(span.start, span.stop):
        piece = list(selection)
        piece[axis] = slice(start, stop)
        where = [slice(None), slice(None)]
        where[axis] = slice(offset, offset + stop - start)
        begin = list(at)
        begin[axis] += offset
        steps = computing((begin[0], begin[1]))
        read_converted(joined.arrays[index], tuple(piece), out[tuple(where)], staging, steps)


def zarr_read_shards(array: zarr.Array, transposed: bool = False) -> tuple[int, int] | None:
    """The shards of ``array`` (of its transpose, ``transposed``) when zarr's sharding codec
    reads them (:func:`read_panel`), whose reads hold a shard's part of a panel at once
    (:func:`outofcore.planner.memory.shard_read_bytes`); None when it is read chunk by chunk."""
    if array.shards is None or chunkfiles.read_layout(array) is not None:
        return None
    shards = tuple(array.shards)
    return (shards[1], shards[0]) if transposed else (shards[0], shards[1])


def read_panel(array: zarr.Array, selection: tuple[slice, ...], out: np.ndarray) -> None:
    """Read ``array[selection]`` into ``out``: directly from chunk files where we can.

    ``selection`` is one slice ``start:stop`` an axis of the array, any number of axes
    (:func:`~outofcore.storage.chunk_layout.check_selection`); ``out`` has the region's shape.
    For zarr's default layout on a local disk the chunk files are read and
    decoded by :mod:`outofcore.storage.chunkfiles` (about half zarr's CPU cost per
    GiB); anything else goes through zarr.  Both retry transient errors.

    Raises
    ------
    ValueError
        For a selection that is not one slice an axis inside the array.
    ReadError
        When the read kept failing after every retry.
    """
    check_selection(selection, array.shape)
    layout = chunkfiles.read_layout(array)  # plain chunk files, or local shard files
    if layout is None:
        _read_into(array, selection, out)
        return
    with_retries(
        lambda: chunkfiles.read_region(layout, selection, out), lambda: _region(array, selection)
    )


def reads_chunk_files(array: zarr.Array | Joined) -> bool:
    """Whether :func:`read_panel` reads ``array`` (every part of a joined one) from its
    chunk files: reads whose chunks in flight the process's chunk-file threads bound
    (:meth:`outofcore.storage.chunk_io.ChunkIO.run_per_chunk`), so that two at once hold
    no more codec buffers than one (zarr's reads hold their own requests each)."""
    parts = array.arrays if isinstance(array, Joined) else (array,)
    return all(
        isinstance(part, zarr.Array) and chunkfiles.read_layout(part) is not None for part in parts
    )


#: Bytes of one block :func:`sums_along` reads at a time, in each of its threads.
SUM_BLOCK_BYTES = 64 * 2**20


def sums_along(array: zarr.Array, axis: int, extent: int | None = None) -> np.ndarray:
    """Sums of a stored 2-D array along ``axis`` (0: one a column), in float64 (complex128
    for complex values): blocks of
    whole chunk rows read with :func:`read_panel` in this process's threads (a column
    mean for an operand that computes, :mod:`outofcore.operands.dask_graph`).  ``extent``: only the
    first ``extent`` entries along ``axis`` are summed (None: all)."""
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    rows, cols = array.shape
    if extent is not None:
        rows, cols = (min(rows, extent), cols) if axis == 0 else (rows, min(cols, extent))
    step = max(array.chunks[0], 1)
    step *= max(1, SUM_BLOCK_BYTES // max(1, step * cols * array.dtype.itemsize))
    starts = range(0, rows, step)
    wide = np.complex128 if array.dtype.kind == "c" else np.float64

    def block(r0: int) -> np.ndarray:
        values = np.empty((min(step, rows - r0), cols), dtype=array.dtype)
        read_panel(array, (slice(r0, r0 + len(values)), slice(0, cols)), values)
        return values.sum(axis=axis, dtype=wide)

    threads = max(1, min(len(starts), usable_cores()))
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="outofcore-sum") as pool:
        parts = list(pool.map(block, starts))
    if axis == 0:
        return np.sum(parts, axis=0) if parts else np.zeros(cols, wide)
    return np.concatenate(parts) if parts else np.zeros(0, wide)


#: The least share of a stored array :func:`sample_means` reads: a shift from the
#: exact mean is then at most ``sqrt(SAMPLE_SHARE - 1)`` standard deviations (the
#: sample is part of the data), so centring from panel sums cancels at most
#: ``log2(SAMPLE_SHARE)`` bits (:mod:`outofcore.operands.centring`).
SAMPLE_SHARE = 16


def sample_means(array: zarr.Array, axis: int) -> np.ndarray:
    """Means over ``axis`` of a stored 2-D array's first ``1/SAMPLE_SHARE`` along it
    (whole chunks, at least one), in float64: the shift of an operand centred from its
    panel sums (:attr:`outofcore.operands.steps.Step.shift`)."""
    length = array.shape[axis]
    chunk = max(array.chunks[axis], 1)
    share = -(-length // SAMPLE_SHARE)  # rounded up
    extent = min(length, -(-share // chunk) * chunk)  # whole chunks: at least one
    return sums_along(array, axis, extent) / max(extent, 1)

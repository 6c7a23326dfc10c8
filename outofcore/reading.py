"""Reading input panels for tile tasks: retries, and a fast path for plain chunks.

:func:`read_panel` reads ``array[rows, cols]`` into a preallocated buffer.  For
zarr's default layout (local store, zarr v3, no shards, bytes + zstd) it reads
the chunk files and decodes them with the same zstd codec zarr uses, in a
shared thread pool, at about half zarr's CPU cost per GiB (buffers are reused
from chunk to chunk, and a chunk that is a contiguous block of the panel
is decoded in place); any other layout goes through zarr.  Transient I/O
errors are retried; when the retries run out, :class:`ReadError` names the
array, the region and the failing chunk.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import zarr

from outofcore import arrays
from outofcore.errors import OutOfCoreError

#: Extra attempts after a failed read of an input region (default 3).
READ_RETRIES_ENV = "OUTOFCORE_READ_RETRIES"
#: Seconds before the first retry; each further retry waits twice as long (default 0.2).
READ_RETRY_DELAY_ENV = "OUTOFCORE_READ_RETRY_DELAY"
#: Errors worth retrying: I/O and network failures (timeouts, resets, unreadable chunks).
TRANSIENT_READ_ERRORS = (OSError, TimeoutError)


class ReadError(OutOfCoreError, OSError):
    """Reading an input region kept failing after every retry."""


def read_retry_settings() -> tuple[int, float]:
    """Retries and first delay from ``$OUTOFCORE_READ_RETRIES`` / ``$OUTOFCORE_READ_RETRY_DELAY``.

    Read where the task runs, so set them in the workers' environment.
    """
    try:
        retries = int(os.environ.get(READ_RETRIES_ENV, "3"))
        delay = float(os.environ.get(READ_RETRY_DELAY_ENV, "0.2"))
    except ValueError as exc:
        raise ReadError(f"{READ_RETRIES_ENV} / {READ_RETRY_DELAY_ENV}: {exc}") from None
    if retries < 0 or delay < 0:
        raise ReadError(
            f"{READ_RETRIES_ENV}={retries}, {READ_RETRY_DELAY_ENV}={delay}: need values >= 0"
        )
    return retries, delay


def _read_into(array: zarr.Array, selection: tuple[slice, slice], out: np.ndarray) -> None:
    buffer = zarr.core.buffer.default_buffer_prototype().nd_buffer.from_numpy_array(out)
    with_retries(
        lambda: array.get_basic_selection(selection, out=buffer),
        lambda: _region(array, selection),
    )


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
                    f"{type(exc).__name__}: {exc} (retries: ${READ_RETRIES_ENV}={retries})"
                ) from exc
            time.sleep(delay * 2**attempt)


def _region(array: zarr.Array, selection: tuple[slice, slice]) -> str:
    """``rows a:b, columns c:d of ARRAY``, and which of its chunks fail to read now."""
    rows, cols = selection
    (r0, r1), (c0, c1) = (
        (part.start // size, max(part.start, part.stop - 1) // size)
        for part, size in zip(selection, array.chunks, strict=True)
    )
    failing = []
    for i in range(r0, r1 + 1):
        for j in range(c0, c1 + 1):
            try:
                array.get_block_selection((i, j))
            except TRANSIENT_READ_ERRORS as exc:
                failing.append(
                    f"chunk ({i}, {j}) (rows {i * array.chunks[0]}:"
                    f"{min((i + 1) * array.chunks[0], array.shape[0])}, columns "
                    f"{j * array.chunks[1]}:{min((j + 1) * array.chunks[1], array.shape[1])}) "
                    f"fails with {type(exc).__name__}: {exc}"
                )
    found = "; ".join(failing[:3]) if failing else "no single chunk fails when read again"
    return (
        f"rows {rows.start}:{rows.stop}, columns {cols.start}:{cols.stop} of "
        f"{arrays.describe(array)} ({found})"
    )


def read_panel(array: zarr.Array, selection: tuple[slice, slice], out: np.ndarray) -> None:
    """Read ``array[selection]`` into ``out``: directly from chunk files where we can.

    zarr's read path costs about 5 CPU-seconds per GiB here, against under 1 s
    for reading the chunk files and zstd-decoding them with numcodecs (the
    same library zarr calls).  For the plain layout (local store, zarr v3, no
    shards, little-endian bytes + zstd: zarr's default) the chunks are read
    and decoded in this thread pool; anything else goes through zarr.
    """
    direct = _direct_reader(array)
    if direct is None:
        _read_into(array, selection, out)
        return
    with_retries(lambda: direct(selection, out), lambda: _region(array, selection))


_direct_readers: dict[int, object] = {}
_direct_pool: list[tuple[ThreadPoolExecutor, int]] = []
_direct_lock = threading.Lock()


def _direct_reader(array: zarr.Array):  # noqa: ANN202 (a closure or None)
    key = id(array)
    with _direct_lock:
        if key in _direct_readers:
            entry = _direct_readers[key]
            return entry[1] if entry[0] is array else None
        reader = _make_direct_reader(array)
        if len(_direct_readers) >= 64:  # arrays of old jobs
            _direct_readers.clear()
        _direct_readers[key] = (array, reader)
        return reader


def _make_direct_reader(array: zarr.Array):  # noqa: ANN202, C901
    try:
        from zarr.codecs import BytesCodec, ZstdCodec  # noqa: PLC0415
        from zarr.storage import LocalStore  # noqa: PLC0415

        meta = array.metadata
        codecs = tuple(meta.codecs)
        plain = (
            meta.zarr_format == 3
            and array.shards is None
            and isinstance(array.store, LocalStore)
            and len(codecs) == 2
            and type(codecs[0]) is BytesCodec
            and (codecs[0].endian is None or codecs[0].endian.value == sys.byteorder)
            and type(codecs[1]) is ZstdCodec
            and np.dtype(array.dtype).isnative
        )
        if not plain:
            return None
        codec = codecs[1]._zstd_codec
        root = os.path.join(os.fspath(array.store.root), array.path)
        encode_key = meta.encode_chunk_key
        fill = meta.fill_value
    except Exception:  # noqa: BLE001 (any surprise in zarr's internals: use zarr itself)
        return None
    dtype = np.dtype(array.dtype)
    chunk_rows, chunk_cols = array.chunks

    def read_chunk(
        i: int, j: int, rows: slice, cols: slice, out: np.ndarray, spare: queue.SimpleQueue
    ) -> None:
        scratch = spare.get()  # one set of buffers per chunk being decoded
        try:
            _read_chunk(i, j, rows, cols, out, scratch)
        finally:
            spare.put(scratch)

    def _read_chunk(
        i: int, j: int, rows: slice, cols: slice, out: np.ndarray, scratch: dict
    ) -> None:
        r0, c0 = i * chunk_rows, j * chunk_cols
        src = (
            slice(max(rows.start, r0) - r0, min(rows.stop, r0 + chunk_rows) - r0),
            slice(max(cols.start, c0) - c0, min(cols.stop, c0 + chunk_cols) - c0),
        )
        dst = (
            slice(r0 + src[0].start - rows.start, r0 + src[0].stop - rows.start),
            slice(c0 + src[1].start - cols.start, c0 + src[1].stop - cols.start),
        )
        path = os.path.join(root, *encode_key((i, j)).split("/"))
        try:
            compressed = _read_file(path, scratch)
        except FileNotFoundError:
            out[dst] = fill
            return
        target = out[dst]
        whole = target.shape == (chunk_rows, chunk_cols) and target.flags.c_contiguous
        if whole:  # the chunk is a contiguous block of the panel: decode straight into it
            codec.decode(compressed, out=target)
            return
        chunk = _scratch(scratch, "decoded", chunk_rows * chunk_cols * dtype.itemsize)
        codec.decode(compressed, out=chunk)
        target[...] = chunk.view(dtype).reshape(chunk_rows, chunk_cols)[src]

    def read(selection: tuple[slice, slice], out: np.ndarray) -> None:
        rows, cols = selection
        jobs = [
            (i, j)
            for i in range(rows.start // chunk_rows, -(-rows.stop // chunk_rows))
            for j in range(cols.start // chunk_cols, -(-cols.stop // chunk_cols))
        ]
        pool, threads = _shared_pool()
        # Buffers reused from chunk to chunk of this panel, one set per decoding
        # thread, and dropped when the panel is read (the plan counts them only
        # while reading).  A fresh buffer per chunk costs page faults.
        spare: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(min(threads, len(jobs))):
            spare.put({})
        for future in [pool.submit(read_chunk, i, j, rows, cols, out, spare) for i, j in jobs]:
            future.result()

    return read


def _scratch(buffers: dict[str, np.ndarray], name: str, nbytes: int) -> np.ndarray:
    """The first ``nbytes`` of the uint8 buffer ``name`` in ``buffers``, grown when too small."""
    buffer = buffers.get(name)
    if buffer is None or buffer.size < nbytes:
        buffer = buffers[name] = np.empty(nbytes, dtype=np.uint8)
    return buffer[:nbytes]


def _read_file(path: str, scratch: dict[str, np.ndarray]) -> np.ndarray:
    """The whole file at ``path``, read into the reusable buffer of ``scratch``."""
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        data = _scratch(scratch, "compressed", size)
        view = memoryview(data)
        done = 0
        while done < size:
            got = f.readinto(view[done:])
            if not got:
                raise OSError(f"{path}: file ended after {done} of {size} bytes")
            done += got
    return data


def _shared_pool() -> tuple[ThreadPoolExecutor, int]:
    """Decoding threads of this process (zarr's ``threading.max_workers``, set per job).

    Returns the pool and its number of threads.
    """
    with _direct_lock:
        if not _direct_pool:
            workers = zarr.config.get("threading.max_workers") or DIRECT_DECODE_THREADS
            pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="outofcore-decode")
            _direct_pool.append((pool, workers))
        return _direct_pool[0]


#: Decoding threads when zarr's configuration does not say.
DIRECT_DECODE_THREADS = 2

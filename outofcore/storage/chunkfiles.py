"""Chunk files of zarr's default layout, read and written without zarr's pipeline.

For an array in zarr's default layout on a local disk (zarr v3, no shards,
native-endian bytes, then zstd or no compressor; any number of axes) a chunk is
one file holding the codec's encoding of the chunk's bytes, edge chunks padded
to the full chunk shape with the fill value.  Reading and writing those files directly,
with the very codec object zarr would call, gives the same files as zarr at
well under half zarr's CPU cost per GiB here: no per-chunk buffers (page
faults), no async machinery.  Anything else (other codecs, shards, remote
stores, zarr v2) returns ``None`` from :func:`plain_layout` and callers go
through zarr, reading a twin of the array (:func:`bounded_array`).  Either
way no chunk decodes to more than its size: a bigger one is a corrupt chunk
(:func:`outofcore.storage.codecs.decode_bounded`, :mod:`outofcore.storage.bounded`).  The
layout is found by :mod:`outofcore.storage.chunk_layout`; the threads and the reusable
buffers the files are read and written with are :mod:`outofcore.storage.chunk_io`'s.

Writes are atomic like zarr's: each chunk goes to a temporary file that is
renamed over the chunk.  They bypass the page cache (``O_DIRECT``) where the
file system allows it.  Unlike zarr, a chunk equal to the fill value is
written rather than skipped; it reads back the same.
"""

from __future__ import annotations

import errno
import math
import os
import stat
import uuid
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import zarr

from outofcore import config
from outofcore.storage import bounded, codecs
from outofcore.storage.chunk_io import BufferSet, chunk_io
from outofcore.storage.chunk_layout import PlainLayout, index_text, layout_of, warn_once
from outofcore.storage.digests import Digests, object_digest
from outofcore.storage.documents import entry_kind

#: What codecs raise for bytes they cannot decode (truncated or corrupt chunks).
DECODE_ERRORS = (RuntimeError, ValueError)


class ChunkDecodeError(OSError):
    """A stored chunk's bytes could not be decoded: truncated or corrupt.

    An ``OSError``, so readers retry it: an object store may return a short
    or damaged body once and the right one the next time.
    """


@dataclass(frozen=True)
class ReadPaths:
    """How an array is read: its chunk files' :class:`PlainLayout` (or None: through
    zarr), and the twin of the array that zarr reads it through, its decoding bounded
    by the chunks' size (:func:`outofcore.storage.bounded.bounded_array`)."""

    layout: PlainLayout | None
    bounded: zarr.Array


def plain_layout(array: zarr.Array) -> PlainLayout | None:
    """The array's :class:`PlainLayout`, or None when zarr must read and write it
    (sharded arrays are written through zarr: see :func:`read_layout` for reads)."""
    layout = read_layout(array)
    return layout if layout is None or layout.shards is None else None


def read_layout(array: zarr.Array) -> PlainLayout | None:
    """The layout :func:`read_region` reads the array's chunk files with (shard files
    too), or None when zarr must read it."""
    return chunk_io().layout(array, _paths_of).layout


def bounded_array(array: zarr.Array) -> zarr.Array:
    """``array`` to read through zarr: a twin whose chunks never decode to more than
    their size (:mod:`outofcore.storage.bounded`), or the array itself where none can be made."""
    return chunk_io().layout(array, _paths_of).bounded


def _paths_of(array: zarr.Array) -> ReadPaths:
    try:
        twin = bounded.bounded_array(array)
    except Exception as exc:  # noqa: BLE001 (any surprise in zarr's internals: zarr decodes)
        warn_once(
            array,
            "decoding %s as zarr does, unbounded by its chunks' size: its codecs could not be "
            "wrapped (%s: %s)",
            type(exc).__name__,
            exc,
        )
        twin = array
    return ReadPaths(layout=layout_of(array), bounded=twin)


def buffer_limit(chunk_bytes: int) -> int:
    """The largest buffer reading or writing chunks of ``chunk_bytes`` keeps (padded for
    unbuffered writes): a task frees kept buffers larger than that for its job's chunks."""
    return chunk_bytes + 2 * DIRECT_ALIGNMENT


def _scratch(buffers: BufferSet, name: str, nbytes: int) -> np.ndarray:
    """The first ``nbytes`` of the uint8 buffer ``name`` in ``buffers``, grown when too small."""
    buffer = buffers.get(name)
    if buffer is None or buffer.size < nbytes:
        buffer = buffers[name] = np.empty(nbytes, dtype=np.uint8)
    return buffer[:nbytes]


def _open_chunk_file(path: str) -> BinaryIO:
    """The chunk or shard file at ``path``, opened for reading once it is known to be a
    regular file (an input's link followed): what outofcore opens from a store is a
    regular file (:func:`outofcore.storage.documents.entry_kind`), so a FIFO never blocks
    the read.  Checked by ``stat`` before a plain ``open`` (whose damaged reads the tests
    inject, ``tests/faults``); a FIFO swapped in between the two is a race outofcore does
    not guard.

    Raises
    ------
    FileNotFoundError
        When there is none (a chunk never written).
    OSError
        When it is not a regular file (a folder, a FIFO, a device), naming it: a read
        error, retried and reported as any other.
    """
    mode = os.stat(path).st_mode  # FileNotFoundError: none
    if not stat.S_ISREG(mode):
        raise OSError(
            errno.EINVAL, f"{path} is not a regular file ({entry_kind(mode)}); it is not read"
        )
    return open(path, "rb", buffering=0)  # noqa: SIM115 (the caller closes it)


def _read_file(path: str, scratch: BufferSet) -> np.ndarray:
    """The whole file at ``path``, read into the reusable file buffer of ``scratch``."""
    with _open_chunk_file(path) as f:
        size = os.fstat(f.fileno()).st_size
        data = _aligned_scratch(scratch, size)[:size]
        view = memoryview(data)
        done = 0
        while done < size:
            got = f.readinto(view[done:])
            if not got:
                raise OSError(f"{path}: file ended after {done} of {size} bytes")
            done += got
    return data


def read_region(layout: PlainLayout, selection: tuple[slice, ...], out: np.ndarray) -> None:
    """Read ``array[selection]`` into ``out`` from the chunk files; missing chunks read as fill.

    ``selection`` is one slice an axis (:func:`~outofcore.storage.chunk_layout.check_selection`),
    ``out`` exactly the region's shape.  In a sharded layout the indexes of the shards
    touched are read first, then each inner chunk by its byte range, as a chunk file is:
    one chunk's bytes and its decoding per thread at a time, never the shard's (the
    plan's codec buffers).

    Raises
    ------
    ValueError
        For a selection that is not one slice an axis, or an ``out`` of another shape.
    """
    grid = layout.chunk_grid(selection)  # checks the selection
    shape = tuple(part.stop - part.start for part in selection)
    if out.shape != shape:
        raise ValueError(f"out has shape {out.shape}; the region {selection!r} has {shape}")
    indexes = _shard_indexes(layout, grid) if layout.shards else None

    def read_chunk(index: tuple[int, ...], scratch: BufferSet) -> None:
        inside, region = layout.overlap(index, selection)
        target = out[(*region, ...)]  # a view, a 0-d one too
        where, stored = _stored_chunk(layout, indexes, index, scratch)
        if stored is None:
            target[...] = layout.fill
            return
        if target.shape == layout.chunks and target.flags.c_contiguous:
            decoded = target  # a contiguous block of the panel: decode straight into it
        else:
            decoded = _scratch(scratch, "chunk", layout.chunk_bytes)
        _decode(layout, where, stored, decoded)
        if decoded is not target:
            target[...] = decoded.view(layout.dtype).reshape(layout.chunks)[(*inside, ...)]

    chunk_io().run_per_chunk(grid, read_chunk)


def _stored_chunk(
    layout: PlainLayout,
    indexes: dict[tuple[int, ...], ShardIndex | None] | None,
    index: tuple[int, ...],
    scratch: BufferSet,
) -> tuple[str, np.ndarray | None]:
    """Where chunk ``index`` is named in messages, and its stored bytes (None: fill), read
    into the file buffer of ``scratch`` from its chunk file or (``indexes``) its shard."""
    if indexes is not None:
        return _read_inner_chunk(layout, indexes, index, scratch)
    where = layout.path(index)
    try:
        return where, _read_file(where, scratch)
    except FileNotFoundError:
        return where, None


def _decode(layout: PlainLayout, where: str, stored: np.ndarray, decoded: np.ndarray) -> None:
    """Decode a chunk's ``stored`` bytes into ``decoded`` (contiguous, the chunk's bytes).

    Raises
    ------
    ChunkDecodeError
        For bytes of another size (uncompressed), or bytes that do not decode to the chunk.
    """
    chunk_bytes = layout.chunk_bytes
    if layout.codec is None:
        if stored.size != chunk_bytes:
            raise ChunkDecodeError(f"{where}: {stored.size} bytes, expected {chunk_bytes}")
        decoded.reshape(-1).view(np.uint8)[...] = stored
        return
    try:  # never more than the chunk's bytes: a bomb is refused from its header
        codecs.decode_bounded(layout.codec, stored, chunk_bytes, out=decoded)
    except codecs.ChunkSizeError as exc:
        raise ChunkDecodeError(f"{where}: {exc}") from exc
    except DECODE_ERRORS as exc:
        raise ChunkDecodeError(f"{where}: cannot decode ({exc})") from exc


#: A shard index entry that marks an inner chunk never written (it reads as fill).
EMPTY_INNER_CHUNK = 2**64 - 1


@dataclass(frozen=True)
class ShardIndex:
    """One shard file's index: each inner chunk's byte offset and length."""

    path: str
    #: ``(*per_shard, 2)`` offsets and lengths, by the inner chunk's index in the shard.
    entries: np.ndarray
    #: Bytes of the shard file.
    size: int


def _shard_indexes(
    layout: PlainLayout, grid: list[tuple[int, ...]]
) -> dict[tuple[int, ...], ShardIndex | None]:
    """The indexes of the shards holding the chunks of ``grid`` (None: no shard file)."""
    shards = sorted({layout.shard_of(index)[0] for index in grid})
    return {shard: _shard_index(layout, shard) for shard in shards}


def _shard_index(layout: PlainLayout, shard: tuple[int, ...]) -> ShardIndex | None:
    """Read and check the index of shard ``shard``; None when the shard has no file."""
    import google_crc32c  # noqa: PLC0415 (zarr's own dependency, for its crc32c codec)

    path = layout.path(shard)
    table_bytes = 16 * math.prod(layout.per_shard)
    index_bytes = table_bytes + (4 if layout.index_checksum else 0)
    try:
        f = _open_chunk_file(path)
    except FileNotFoundError:
        return None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size < index_bytes:
            raise ChunkDecodeError(
                f"{path}: {size} bytes, shorter than its shard index of {index_bytes}"
            )
        raw = os.pread(
            f.fileno(), index_bytes, 0 if layout.index_location == "start" else size - index_bytes
        )
    if len(raw) != index_bytes:
        raise ChunkDecodeError(f"{path}: the shard index ended after {len(raw)} bytes")
    table = raw[:table_bytes]
    if layout.index_checksum and google_crc32c.value(table) != int.from_bytes(raw[-4:], "little"):
        raise ChunkDecodeError(
            f"{path}: the shard index's checksum does not match: a corrupt shard"
        )
    entries = np.frombuffer(table, dtype="<u8").reshape(*layout.per_shard, 2)
    return ShardIndex(path=path, entries=entries, size=size)


def _read_inner_chunk(
    layout: PlainLayout,
    indexes: dict[tuple[int, ...], ShardIndex | None],
    index: tuple[int, ...],
    scratch: BufferSet,
) -> tuple[str, np.ndarray | None]:
    """Where inner chunk ``index`` is named in messages, and its bytes (None: fill),
    read into the file buffer of ``scratch``."""
    shard, inner = layout.shard_of(index)
    found = indexes[shard]
    if found is None:
        return layout.path(shard), None
    where = f"{found.path}: inner chunk {index_text(inner)}"
    offset, length = (int(value) for value in found.entries[inner])
    if offset == length == EMPTY_INNER_CHUNK:
        return where, None
    chunk_bytes = layout.chunk_bytes
    most = chunk_bytes if layout.codec is None else codecs.loose_limit(chunk_bytes)
    if offset + length > found.size or length > most:
        raise ChunkDecodeError(
            f"{where}: the shard index gives bytes {offset} to {offset + length} of a "
            f"{found.size}-byte shard for a chunk of {chunk_bytes} bytes: a corrupt shard"
        )
    data = _aligned_scratch(scratch, length)[:length]
    with open(found.path, "rb", buffering=0) as f:
        f.seek(offset)
        view, done = memoryview(data), 0
        while done < length:
            got = f.readinto(view[done:])
            if not got:
                raise ChunkDecodeError(f"{where}: the shard ended after {done} of {length} bytes")
            done += got
    return where, data


def aligned(layout: PlainLayout, start: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether the region covers whole chunks (edge chunks up to the array's edge).

    Raises
    ------
    ValueError
        When ``start``, ``shape`` and the layout do not have as many axes.
    """
    for first, size, extent, chunk in zip(start, shape, layout.shape, layout.chunks, strict=True):
        end = first + size
        if first % chunk or (end % chunk and end != extent) or end > extent:
            return False
    return True


#: Alignment of buffers, offsets and sizes for unbuffered (``O_DIRECT``) writes.
DIRECT_ALIGNMENT = 4096


def _aligned_scratch(scratch: BufferSet, nbytes: int) -> np.ndarray:
    """A uint8 buffer of ``nbytes`` rounded up to :data:`DIRECT_ALIGNMENT`, aligned to it."""
    padded = -(-nbytes // DIRECT_ALIGNMENT) * DIRECT_ALIGNMENT
    raw = _scratch(scratch, "file", padded + DIRECT_ALIGNMENT)
    offset = -raw.ctypes.data % DIRECT_ALIGNMENT
    return raw[offset : offset + padded]


def _write_file(path: str, data: np.ndarray, size: int) -> None:
    """Write ``data[:size]`` to ``path`` atomically (a temporary file renamed over it).

    ``data`` is an aligned buffer (:func:`_aligned_scratch`).  Where the file
    system allows it the file is written unbuffered (``O_DIRECT``, padded to
    the alignment, then truncated to ``size``): new page-cache pages cost about
    3 CPU-seconds per GiB written on the machines measured, unbuffered writes
    about 0.03 (docs/performance.md).  Elsewhere, it is an ordinary write.
    """
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = f"{path}.{uuid.uuid4().hex}.partial"
    try:
        if not _write_unbuffered(partial, data, size):
            with open(partial, "wb") as f:
                f.write(memoryview(data[:size]))
        os.replace(partial, path)
    except BaseException:
        if os.path.exists(partial):
            os.remove(partial)
        raise


def _write_unbuffered(path: str, data: np.ndarray, size: int) -> bool:
    """Write with ``O_DIRECT``; False (nothing written) where that is not possible."""
    direct = getattr(os, "O_DIRECT", 0)
    if not direct or not _direct_writes_allowed():
        return False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | direct, 0o666)
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # a file system without O_DIRECT (tmpfs, ...)
            return False
        raise
    try:
        view = memoryview(data[: -(-size // DIRECT_ALIGNMENT) * DIRECT_ALIGNMENT])
        done = 0
        while done < len(view):
            try:
                done += os.write(fd, view[done:])
            except OSError as exc:
                if exc.errno == errno.EINVAL and done == 0:
                    return False  # refused at the first write: the caller writes it buffered
                raise
        os.ftruncate(fd, size)
    finally:
        os.close(fd)
    return True


def _direct_writes_allowed() -> bool:
    """The setting ``direct-writes`` (``$OUTOFCORE_DIRECT_WRITES=0`` turns them off)."""
    return config.flag("direct-writes")


def write_region(layout: PlainLayout, start: tuple[int, ...], values: np.ndarray) -> Digests:
    """Write ``values`` at ``start`` (one index an axis) as whole chunk files; the region
    must be :func:`aligned`.  Returns the digests of the files written (the bytes each
    holds), by chunk key.

    Raises
    ------
    ValueError
        For a region that is not whole chunks, or values of another dtype.
    """
    if (
        values.dtype != layout.dtype
        or len(start) != values.ndim
        or not aligned(layout, start, values.shape)
    ):
        raise ValueError(
            f"region at {start} of shape {values.shape} ({values.dtype}) is not whole chunks "
            f"{layout.chunks} of this {layout.shape} {layout.dtype} array"
        )
    selection = tuple(slice(s, s + n) for s, n in zip(start, values.shape, strict=True))

    written: Digests = {}

    def write_chunk(index: tuple[int, ...], scratch: BufferSet) -> None:
        _, region = layout.overlap(index, selection)
        out, size = _encoded_chunk(layout, values[(*region, ...)], scratch)
        _write_file(layout.path(index), out, size)
        # Hashed here, on the chunk threads beside the compute: no reading back later.
        written[layout.encode_key(tuple(index))] = object_digest(out[:size])

    chunk_io().run_per_chunk(layout.chunk_grid(selection), write_chunk)
    return written


def _encoded_chunk(
    layout: PlainLayout, part: np.ndarray, scratch: BufferSet
) -> tuple[np.ndarray, int]:
    """A chunk file's bytes for ``part`` (the chunk's values, short at the array's edge:
    padded with the fill value) in the aligned buffer of ``scratch``, and their size."""
    chunk_bytes = layout.chunk_bytes
    if layout.codec is None:  # the chunk is the file: assemble it in the aligned buffer
        out = _aligned_scratch(scratch, chunk_bytes)
        chunk = out[:chunk_bytes].view(layout.dtype).reshape(layout.chunks)
    elif part.shape == layout.chunks and part.flags.c_contiguous:
        chunk = part
    else:
        chunk = _scratch(scratch, "chunk", chunk_bytes).view(layout.dtype)
        chunk = chunk.reshape(layout.chunks)
    if chunk is not part:
        if part.shape != layout.chunks:  # an edge chunk: padded with the fill value
            chunk[...] = layout.fill
        chunk[(*(slice(0, n) for n in part.shape), ...)] = part
    if layout.codec is None:
        return out, chunk_bytes
    encoded = np.frombuffer(layout.codec.encode(chunk), dtype=np.uint8)
    out = _aligned_scratch(scratch, encoded.size)
    out[: encoded.size] = encoded
    return out, encoded.size

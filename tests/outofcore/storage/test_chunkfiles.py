"""Chunk files written and read without zarr's pipeline must be exactly zarr's."""

from __future__ import annotations

import copy
import enum
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import zarr

from outofcore.compute.worker_context import worker_context
from outofcore.operands.reading import read_panel
from outofcore.storage import chunk_layout, chunkfiles
from outofcore.storage.chunk_io import chunk_io
from outofcore.storage.writing import write_region

SHAPE, CHUNKS = (300, 250), (64, 48)  # ragged edges on both axes


def chunk_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "zarr.json"
    }


@pytest.fixture(params=["unbuffered", "buffered", "tmpfs"])
def write_mode(request, tmp_path, outofcore_settings):
    """Where and how chunk files are written: O_DIRECT, the page cache, or a tmpfs.

    On a tmpfs (no O_DIRECT) the writer falls back to ordinary writes by itself.
    """
    if request.param == "buffered":
        outofcore_settings(direct_writes=False)
    if request.param != "tmpfs":
        return tmp_path
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        pytest.skip("no writable /dev/shm here")
    folder = Path(tempfile.mkdtemp(dir=shm))
    request.addfinalizer(lambda: shutil.rmtree(folder, ignore_errors=True))
    return folder


@pytest.mark.parametrize("compressors", ["auto", None], ids=["zstd", "uncompressed"])
def test_written_chunk_files_are_the_files_zarr_writes(write_mode, compressors):
    tmp_path = write_mode
    rng = np.random.default_rng(11)
    values = (rng.standard_normal(SHAPE) * 50).astype(np.float32)
    ours, theirs = (
        zarr.create_array(
            tmp_path / name,
            shape=SHAPE,
            chunks=CHUNKS,
            dtype="float32",
            fill_value=np.nan,
            compressors=compressors,
        )
        for name in ("ours.zarr", "zarr.zarr")
    )
    theirs[...] = values
    layout = chunkfiles.plain_layout(ours)
    assert layout is not None
    # Blocks of whole chunk rows, as a tile task writes them; the last is ragged.
    for r0 in range(0, SHAPE[0], 128):
        chunkfiles.write_region(layout, (r0, 0), values[r0 : r0 + 128])
    assert chunk_files(tmp_path / "ours.zarr") == chunk_files(tmp_path / "zarr.zarr")
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "ours.zarr")[...], values)
    assert not list((tmp_path / "ours.zarr").rglob("*.partial"))
    # Reading them back directly, twice (the reused buffers), whole and in parts.
    for rows, cols in [(slice(0, 300), slice(0, 250)), (slice(64, 256), slice(48, 96))] * 2:
        out = np.empty((rows.stop - rows.start, cols.stop - cols.start), np.float32)
        chunkfiles.read_region(layout, (rows, cols), out)
        np.testing.assert_array_equal(out, values[rows, cols])


def test_regions_that_are_not_whole_chunks_are_refused_then_go_through_zarr(tmp_path):
    array = zarr.create_array(
        tmp_path / "c.zarr", shape=SHAPE, chunks=CHUNKS, dtype="float32", fill_value=np.nan
    )
    layout = chunkfiles.plain_layout(array)
    block = np.arange(10 * 48, dtype=np.float32).reshape(10, 48)
    assert not chunkfiles.aligned(layout, (5, 0), block.shape)
    with pytest.raises(ValueError, match=r"region at \(5, 0\) of shape \(10, 48\)"):
        chunkfiles.write_region(layout, (5, 0), block)
    write_region(array, (5, 0), block)  # the tile task's writer falls back to zarr
    np.testing.assert_array_equal(array[5:15, 0:48], block)
    assert np.isnan(array[0:5, 0:48]).all()


def test_only_the_plain_local_layout_is_handled_directly(tmp_path):
    blosc = zarr.create_array(
        tmp_path / "lz4.zarr",
        shape=(10, 10),
        chunks=(5, 5),
        dtype="float32",
        compressors=zarr.codecs.BloscCodec(cname="lz4"),
    )
    sharded = zarr.create_array(
        tmp_path / "sharded.zarr", shape=(10, 10), chunks=(5, 5), shards=(10, 10), dtype="float32"
    )
    in_memory = zarr.create_array(zarr.storage.MemoryStore(), shape=(10, 10), dtype="float32")
    assert [chunkfiles.plain_layout(a) for a in (blosc, sharded, in_memory)] == [None] * 3
    values = np.arange(100, dtype=np.float32).reshape(10, 10)
    write_region(blosc, (0, 0), values)  # through zarr
    np.testing.assert_array_equal(blosc[...], values)


def test_codec_settings_read_the_same_as_enums_and_as_plain_strings():
    """zarr 3.1 keeps ``BytesCodec.endian`` as an Enum, newer zarr (3.4.2) as a plain str."""

    class Endian(enum.Enum):  # zarr 3.1's zarr.codecs.bytes.Endian
        big = "big"
        little = "little"

    assert [chunk_layout.codec_setting(v) for v in (Endian.little, "little", Endian.big, None)] == [
        "little",
        "little",
        "big",
        None,
    ]


@pytest.mark.parametrize("compressors", ["auto", None], ids=["zstd", "uncompressed"])
@pytest.mark.parametrize("form", ["enum", "str", "none"])
def test_the_bytes_codecs_byte_order_as_any_zarr_keeps_it(tmp_path, caplog, compressors, form):
    """The chunk-file path is taken whether the bytes codec's ``endian`` is an Enum member
    (zarr 3.1), a plain string (zarr 3.4.2: ``.value`` raised AttributeError there and
    every array went through zarr, with a warning) or None, and says nothing; the other
    byte order, in the same form, goes through zarr, also without a word."""
    caplog.set_level(logging.DEBUG, logger="outofcore")
    values = np.random.default_rng(7).standard_normal(SHAPE).astype(np.float32)
    zarr.create_array(tmp_path / "x.zarr", data=values, chunks=CHUNKS, compressors=compressors)
    array = zarr.open_array(tmp_path / "x.zarr", mode="r")
    bytes_codec, *rest = array.metadata.codecs
    assert type(bytes_codec) is zarr.codecs.BytesCodec
    kept = type(bytes_codec.endian)
    if form == "enum" and not issubclass(kept, enum.Enum):
        pytest.skip(f"zarr {zarr.__version__} keeps endian as {kept.__name__}")
    stored = copy.copy(bytes_codec)
    object.__setattr__(array.metadata, "codecs", (stored, *rest))  # this array object only

    def keep(order: str) -> None:  # frozen: set as that zarr would keep it
        endian = {"enum": kept(order) if form == "enum" else None, "str": order}.get(form)
        object.__setattr__(stored, "endian", endian)

    keep(sys.byteorder)
    assert chunkfiles.plain_layout(array) is not None and caplog.records == []
    out = np.empty((100, 70), dtype=np.float32)
    read_panel(array, (slice(30, 130), slice(10, 80)), out)
    np.testing.assert_array_equal(out, values[30:130, 10:80])
    if form != "none":
        keep("big" if sys.byteorder == "little" else "little")
        assert chunk_layout.layout_of(array) is None and caplog.records == []


def test_a_fast_path_that_turns_itself_off_says_so(tmp_path, monkeypatch, caplog):
    """A surprise in zarr's internals (here: the layout cannot be built, as when a zarr
    release renames what it is built from) reads through zarr, the same values, and
    says so once through the `outofcore` logger; a layout zarr must read by design
    (blosc, shards) is not a fallback and says nothing."""
    caplog.set_level(logging.DEBUG, logger="outofcore")
    values = np.random.default_rng(5).standard_normal(SHAPE).astype(np.float32)
    zarr.create_array(tmp_path / "x.zarr", data=values, chunks=CHUNKS)
    blosc = zarr.create_array(
        tmp_path / "lz4.zarr", data=values, chunks=CHUNKS, compressors=zarr.codecs.BloscCodec()
    )
    assert chunkfiles.plain_layout(blosc) is None and caplog.records == []

    def renamed(*args, **kwargs):
        raise TypeError("PlainLayout.__init__() got an unexpected keyword argument 'fill'")

    monkeypatch.setattr(chunk_layout, "PlainLayout", renamed)
    array = zarr.open_array(tmp_path / "x.zarr", mode="r")
    out = np.empty((100, 70), dtype=np.float32)
    for _ in range(2):
        read_panel(array, (slice(30, 130), slice(10, 80)), out)
        np.testing.assert_array_equal(out, values[30:130, 10:80])
    said = [r for r in caplog.records if r.name == "outofcore"]
    assert len(said) == 1 and said[0].levelno == logging.WARNING, said
    where = f"file://{os.path.realpath(tmp_path)}/x.zarr"
    assert said[0].getMessage().startswith(f"reading and writing {where} "), said
    assert "through zarr" in said[0].getMessage() and "unexpected keyword" in said[0].getMessage()


def test_kept_buffers_larger_than_a_task_needs_are_freed(tmp_path):
    values = np.arange(256 * 256, dtype=np.float32).reshape(256, 256)
    big = zarr.create_array(tmp_path / "big.zarr", shape=(256, 256), chunks=(256, 256), dtype="f4")
    big[...] = values
    layout = chunkfiles.plain_layout(big)
    context = worker_context()
    context.release_thread()
    out = np.empty((256, 128), np.float32)
    chunkfiles.read_region(layout, (slice(0, 256), slice(0, 128)), out)  # not in place: 2 buffers
    np.testing.assert_array_equal(out, values[:, :128])
    kept = chunk_io().buffer_bytes()
    assert kept >= 256 * 256 * 4  # kept for the next chunk, panel or task
    # A task with chunks this large keeps them; one with smaller chunks frees them first.
    context.start_task(2, chunkfiles.buffer_limit(256 * 256 * 4))
    assert chunk_io().buffer_bytes() == kept
    context.start_task(2, chunkfiles.buffer_limit(64 * 64 * 4))
    assert chunk_io().buffer_bytes() == 0


def test_io_settings_follow_each_job_not_the_first_one(tmp_path):
    """Issue 20: jobs with 16, then 2, then 16 requests in flight; zarr's settings and the
    chunk-file pool follow each (they stayed at the first value seen twice before)."""
    keys = ("async.concurrency", "threading.max_workers")
    with zarr.config.set({key: zarr.config.get(key) for key in keys}):  # restored after
        cores = os.cpu_count() or 1
        seen = []
        for requests in (16, 2, 16, 1):
            worker_context().start_task(requests, 2**20)
            pool = chunk_io().chunk_pool()
            seen.append(
                (zarr.config.get("async.concurrency"), zarr.config.get("threading.max_workers"))
            )
            assert pool._max_workers == min(requests, cores)
            values = np.arange(12.0).reshape(3, 4)
            array = zarr.create_array(
                str(tmp_path / f"x{requests}{len(seen)}.zarr"), shape=(3, 4), chunks=(3, 2),
                dtype="f8", compressors=None,
            )  # fmt: skip
            write_region(array, (0, 0), values)  # the pool does the work
            assert np.array_equal(array[...], values)
        assert seen == [(n, min(n, cores)) for n in (16, 2, 16, 1)]

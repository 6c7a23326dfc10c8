"""The storage layer on arrays of any number of axes: reads, writes and errors as zarr's.

Reads (:func:`outofcore.operands.reading.read_panel`,
:func:`outofcore.storage.chunkfiles.read_region`)
must give what zarr's own ``array[selection]`` gives, writes
(:func:`outofcore.storage.writing.write_region`) what zarr reads back, leaving every other
element as it was, and a chunk that does not decode is named by its N-D key.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import zarr
from numcodecs import Zstd

from outofcore.compute.worker_context import worker_context
from outofcore.operands.reading import ReadError, read_converted, read_panel
from outofcore.storage import chunkfiles
from outofcore.storage.chunk_layout import check_selection
from outofcore.storage.writing import region_files, write_region

#: name: (shape, options of zarr.create_array); edges ragged on every axis of 1 to 4.
CASES = {
    "0-d": ((), {}),
    "1-D": ((37,), {"chunks": (8,)}),
    "1-D-sharded": ((37,), {"chunks": (4,), "shards": (8,)}),
    "2-D": ((30, 25), {"chunks": (8, 7)}),
    "2-D-uncompressed": ((30, 25), {"chunks": (8, 7), "compressors": None}),
    "3-D": ((5, 19, 13), {"chunks": (2, 4, 5)}),
    "3-D-uncompressed": ((5, 19, 13), {"chunks": (2, 4, 5), "compressors": None}),
    "3-D-sharded": ((5, 19, 13), {"chunks": (1, 4, 4), "shards": (2, 8, 8)}),
    "3-D-unit-chunks": ((3, 6, 5), {"chunks": (1, 3, 1)}),
    "3-D-v2": ((5, 19, 13), {"chunks": (2, 4, 5), "zarr_format": 2, "compressors": Zstd()}),
    "4-D": ((3, 4, 9, 7), {"chunks": (2, 3, 4, 3)}),
    "4-D-sharded": ((3, 4, 9, 7), {"chunks": (1, 2, 2, 3), "shards": (2, 2, 4, 6)}),
}
#: The cases read through zarr rather than chunk files.
THROUGH_ZARR = {"3-D-v2"}
FILL = 2.5


def make_array(path: Path, name: str, seed: int) -> tuple[zarr.Array, np.ndarray]:
    """Case ``name`` as a new float64 array at ``path`` holding fresh random values."""
    shape, options = CASES[name]
    array = zarr.create_array(str(path), shape=shape, dtype="float64", fill_value=FILL, **options)
    values = np.asarray(np.random.default_rng(seed).standard_normal(shape))
    array[...] = values
    return array, values


def random_selection(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[slice, ...]:
    """A slice an axis, empty ones now and then."""
    parts = []
    for extent in shape:
        start = int(rng.integers(0, extent + 1))
        parts.append(slice(start, int(rng.integers(start, extent + 1))))
    return tuple(parts)


def aligned_selection(
    rng: np.random.Generator, shape: tuple[int, ...], grid: tuple[int, ...]
) -> tuple[slice, ...]:
    """Whole chunks (shards) an axis, up to the array's edge."""
    parts = []
    for extent, size in zip(shape, grid, strict=True):
        blocks = -(-extent // size)
        first = int(rng.integers(0, blocks))
        last = int(rng.integers(first + 1, blocks + 1))
        parts.append(slice(first * size, min(last * size, extent)))
    return tuple(parts)


def stored_files(root: Path) -> set[str]:
    """The chunk (shard) files of an array, not its metadata."""
    metadata = {"zarr.json", ".zarray", ".zattrs", ".zgroup"}
    return {str(p) for p in root.rglob("*") if p.is_file() and p.name not in metadata}


def shape_of(selection: tuple[slice, ...]) -> tuple[int, ...]:
    return tuple(part.stop - part.start for part in selection)


@pytest.fixture(autouse=True)
def _release_buffers():
    yield
    worker_context().release_in_process()  # the chunk-file buffers of this thread


@pytest.mark.parametrize("name", list(CASES))
def test_the_chunk_file_path_takes_every_zarr_v3_case(tmp_path, name):
    array, _ = make_array(tmp_path / "x.zarr", name, 1)
    layout = chunkfiles.read_layout(array)
    assert (layout is None) == (name in THROUGH_ZARR)
    if layout is not None:
        assert layout.shape == array.shape and layout.chunks == array.chunks
        assert math.prod(layout.per_shard) * math.prod(layout.chunks) == math.prod(
            array.shards or array.chunks
        )


@pytest.mark.parametrize("name", list(CASES))
def test_reads_of_random_selections_are_zarrs(tmp_path, name):
    """read_panel and read_region of random slices, before and after a stored chunk
    (shard) is deleted (it reads as the fill value), equal zarr's own reads."""
    rng = np.random.default_rng(100 + len(name))
    array, values = make_array(tmp_path / "x.zarr", name, 2)
    files = sorted(stored_files(tmp_path / "x.zarr"))
    for deleted in (False, True):
        if deleted:
            Path(files[int(rng.integers(0, len(files)))]).unlink()
            array = zarr.open_array(str(tmp_path / "x.zarr"), mode="r")
            values = array[...]
            assert (values == FILL).any()
        layout = chunkfiles.read_layout(array)
        for _ in range(12):
            selection = random_selection(rng, array.shape)
            expected = array[selection]
            np.testing.assert_array_equal(expected, values[selection])
            out = np.full(shape_of(selection), np.nan)
            read_panel(array, selection, out)
            np.testing.assert_array_equal(out, expected)
            if layout is not None:
                out = np.full(shape_of(selection), np.nan)
                chunkfiles.read_region(layout, selection, out)
                np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("name", ["1-D", "3-D", "3-D-sharded", "3-D-v2", "4-D"])
def test_converted_reads_take_each_selection_as_zarr_does(tmp_path, name):
    rng = np.random.default_rng(7)
    array, values = make_array(tmp_path / "x.zarr", name, 3)
    for _ in range(6):
        selection = random_selection(rng, array.shape)
        out = np.empty(shape_of(selection), np.float32)
        read_converted(array, selection, out)
        np.testing.assert_array_equal(out, values[selection].astype(np.float32))


@pytest.mark.parametrize("name", list(CASES))
def test_written_regions_read_back_through_zarr_and_nothing_else_changes(tmp_path, name):
    """Whole chunks (the chunk-file writer where the layout allows) and arbitrary regions
    (zarr's), each leaving the rest of the array as it was."""
    rng = np.random.default_rng(200 + len(name))
    array, values = make_array(tmp_path / "x.zarr", name, 4)
    grid = tuple(array.shards or array.chunks)
    expected = values.copy()
    for aligned in (True, False, True, False):
        selection = (
            aligned_selection(rng, array.shape, grid)
            if aligned
            else random_selection(rng, array.shape)
        )
        block = np.asarray(rng.standard_normal(shape_of(selection)))
        start = tuple(part.start for part in selection)
        write_region(array, start, block)
        expected[selection] = block
        np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "x.zarr"))[...], expected)


@pytest.mark.parametrize("name", [n for n in CASES if "sharded" not in n and n not in THROUGH_ZARR])
def test_written_chunk_files_are_zarrs_byte_for_byte(tmp_path, name):
    ours, values = make_array(tmp_path / "ours.zarr", name, 5)
    theirs, _ = make_array(tmp_path / "theirs.zarr", name, 5)
    values = np.asarray(np.random.default_rng(6).standard_normal(values.shape))
    theirs[...] = values
    layout = chunkfiles.plain_layout(ours)
    assert layout is not None
    chunkfiles.write_region(layout, (0,) * values.ndim, values)

    def contents(root: Path) -> dict[str, bytes]:
        return {str(Path(p).relative_to(root)): Path(p).read_bytes() for p in stored_files(root)}

    assert contents(tmp_path / "ours.zarr") == contents(tmp_path / "theirs.zarr")


@pytest.mark.parametrize("name", list(CASES))
def test_region_files_are_the_stored_objects_of_the_region(tmp_path, name):
    array, _ = make_array(tmp_path / "x.zarr", name, 8)
    whole = region_files(array, (0,) * array.ndim, array.shape)
    assert set(whole) == stored_files(tmp_path / "x.zarr")
    if array.ndim:
        grid = tuple(array.shards or array.chunks)
        start = grid  # the second block of every axis, if any
        shape = tuple(
            max(0, min(size, extent - size)) for size, extent in zip(grid, array.shape, strict=True)
        )
        files = region_files(array, start, shape)
        if 0 in shape:
            assert files == []
        else:
            key = array.metadata.encode_chunk_key(tuple(1 for _ in grid))
            assert files == [str(tmp_path / "x.zarr" / key)]


#: name: (the chunk or shard broken, what the error calls it).
BROKEN = {
    "0-d": ((), "chunk (), key c ([()])"),
    "1-D": ((4,), "chunk (4), key c/4 ([32:37])"),
    "2-D": ((1, 1), "chunk (1, 1), key c/1/1 (rows 8:16, columns 7:14)"),
    "3-D": ((1, 0, 2), "chunk (1, 0, 2), key c/1/0/2 ([2:4, 0:4, 10:13])"),
    "3-D-sharded": ((1, 0, 1), "shard (1, 0, 1), key c/1/0/1 ([2:4, 0:8, 8:13])"),
    "3-D-v2": ((1, 0, 2), "chunk (1, 0, 2), key 1.0.2 ([2:4, 0:4, 10:13])"),
    "4-D": ((1, 0, 2, 1), "chunk (1, 0, 2, 1), key c/1/0/2/1 ([2:3, 0:3, 8:9, 3:6])"),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_corrupt_chunk_is_named_by_its_nd_key(tmp_path, name, outofcore_settings):
    outofcore_settings(read_retries=0)
    array, _ = make_array(tmp_path / "x.zarr", name, 9)
    block, named = BROKEN[name]
    key = array.metadata.encode_chunk_key(block)
    stored = tmp_path / "x.zarr" / key
    stored.write_bytes(b"\x01not a chunk\x02" * 16)  # garbage: decodes to nothing
    whole = tuple(slice(0, extent) for extent in array.shape)
    with pytest.raises(ReadError) as failed:
        read_panel(array, whole, np.empty(array.shape))
    assert named in str(failed.value), str(failed.value)
    region = "rows 0:30, columns 0:25" if array.ndim == 2 else None
    if region is not None:
        assert str(failed.value).startswith(f"reading {region} of file://")


def test_selections_that_are_not_one_slice_an_axis_are_refused(tmp_path):
    array, _ = make_array(tmp_path / "x.zarr", "3-D", 10)
    layout = chunkfiles.read_layout(array)
    out = np.empty((2, 3, 4))
    for wrong in [
        (slice(0, 2), slice(0, 3)),  # an axis short
        (slice(0, 2), slice(0, 3), slice(0, 4), slice(0, 1)),
        (slice(0, 2), slice(0, 3), slice(None, 4)),
        (slice(0, 2), slice(0, 6, 2), slice(0, 4)),
        (slice(0, 2), slice(3, 0), slice(0, 4)),
        (slice(4, 6), slice(0, 3), slice(0, 4)),  # past the edge
        (1, slice(0, 3), slice(0, 4)),
    ]:
        with pytest.raises(ValueError, match="one slice start:stop"):
            read_panel(array, wrong, out)
        with pytest.raises(ValueError, match="one slice start:stop"):
            check_selection(wrong, layout.shape)
    with pytest.raises(ValueError, match=r"out has shape \(2, 3, 3\)"):
        chunkfiles.read_region(layout, (slice(0, 2), slice(0, 3), slice(0, 4)), out[..., :3])
    with pytest.raises(ValueError, match="array of 3 axes"):
        write_region(array, (0, 0), np.zeros((2, 3)))


def test_chunk_grids_and_overlaps_tile_the_selection(tmp_path):
    """Every element of a selection is in exactly one chunk's overlap, in C order."""
    array, _ = make_array(tmp_path / "x.zarr", "4-D", 11)
    layout = chunkfiles.read_layout(array)
    rng = np.random.default_rng(12)
    for _ in range(10):
        selection = random_selection(rng, array.shape)
        grid = layout.chunk_grid(selection)
        assert grid == sorted(grid)
        seen = np.zeros(shape_of(selection), int)
        for index in grid:
            inside, region = layout.overlap(index, selection)
            seen[region] += 1
            axes = zip(inside, region, index, selection, layout.chunks, strict=True)
            for part, piece, i, whole, size in axes:
                assert part.stop - part.start == piece.stop - piece.start
                assert 0 <= part.start <= part.stop <= size
                assert i * size + part.start == whole.start + piece.start  # the same element
        assert (seen == 1).all()
    assert layout.chunk_grid(tuple(slice(0, 0) for _ in array.shape)) == []
    whole = tuple(slice(0, n) for n in array.shape)
    blocks = [range(-(-n // c)) for n, c in zip(array.shape, array.chunks, strict=True)]
    assert layout.chunk_grid(whole) == list(itertools.product(*blocks))

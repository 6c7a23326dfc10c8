"""``chunks=`` and ``shards=`` for the output a job creates (issue 45, item 3).

Real jobs on zarr arrays on disk in ragged chunks that are not the output's: the output
is created in the chunks (and shards) asked, every tile writes whole ones, and the
product is numpy's (float64 reference, within the rounding bound of k in float32).
"""

from __future__ import annotations

import inspect
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

import outofcore
from outofcore.errors import InputError
from outofcore.frontends.cli_output import format_plan
from outofcore.jobs.preview import plan_product
from outofcore.jobs.spec import JobSpec
from outofcore.operands.reading import ReadError
from tests.helpers import assert_product_close, break_chunk, random_matrix, restore_chunk

#: The issue's inputs: A in 37x50 chunks, B in 50x41, shapes no chunk divides.
A_SHAPE, B_SHAPE = (203, 151), (151, 117)
#: A budget that makes several tiles of these (the smallest fits in about 100 KiB).
MEMORY = "200KiB"


def stored(path: Path, data: np.ndarray, chunks: tuple[int, ...]) -> str:
    array = zarr.create_array(str(path), shape=data.shape, chunks=chunks, dtype=data.dtype)
    array[...] = data
    return str(path)


@pytest.fixture
def ragged(tmp_path):
    rng = np.random.default_rng(45)
    a, b = random_matrix(rng, A_SHAPE, "float32"), random_matrix(rng, B_SHAPE, "float32")
    paths = stored(tmp_path / "a.zarr", a, (37, 50)), stored(tmp_path / "b.zarr", b, (50, 41))
    return tmp_path, paths, a, b


def run(a: str, b: str, out: Path, **options):
    return outofcore.matmul(a, b, str(out), client="sync", progress=False, **options)


def test_the_output_is_created_in_the_chunks_asked_and_each_tile_writes_whole_ones(ragged):
    folder, (a_path, b_path), a, b = ragged
    c = run(a_path, b_path, folder / "c.zarr", chunks=(64, 29), memory=MEMORY)
    reopened = zarr.open_array(str(folder / "c.zarr"), mode="r")
    assert reopened.chunks == (64, 29) and reopened.shards is None
    assert_product_close(reopened[...], a, b)
    plan = c.attrs["outofcore"]["plan"]
    assert plan["out_chunks"] == [64, 29] and plan["tiles"] > 1
    tm, tn = plan["tile"]
    assert tm % 64 == 0 and tn % 29 == 0  # whole chunks a tile: no chunk has two writers
    assert tm % 37  # the inputs' grid gives way: lcm(37, 64) is past the 203 rows


def test_shards_asked_hold_the_chunks_asked_on_a_local_cluster(ragged, two_process_client):
    folder, (a_path, b_path), a, b = ragged
    c = outofcore.matmul(
        a_path, b_path, str(folder / "c.zarr"), chunks=(64, 29), shards=(128, 58),
        memory="400KiB", client=two_process_client,
    )  # fmt: skip
    reopened = zarr.open_array(str(folder / "c.zarr"), mode="r")
    assert reopened.chunks == (64, 29) and reopened.shards == (128, 58)
    assert_product_close(reopened[...], a, b)
    plan = c.attrs["outofcore"]["plan"]
    assert plan["out_shards"] == [128, 58]
    tm, tn = plan["tile"]
    assert (tm % 128 == 0 or tm == 203) and (tn % 58 == 0 or tn == 117)
    shard_files = [p for p in (folder / "c.zarr" / "c").rglob("*") if p.is_file()]
    assert len(shard_files) == 2 * 3  # one object a shard: 203/128 x 117/58, rounded up


def test_chunks_larger_than_the_output_are_clipped_to_it_and_one_number_is_both(ragged):
    folder, (a_path, b_path), a, b = ragged
    c = run(a_path, b_path, folder / "c.zarr", chunks=(1000, 1000), shards=False)
    assert c.chunks == (203, 117)
    d = run(a_path, b_path, folder / "d.zarr", chunks=np.int64(40), memory=MEMORY)
    assert d.chunks == (40, 40)
    assert_product_close(d[...], a, b)


def test_a_stack_is_chunked_one_matrix_a_chunk_and_a_vector_on_its_one_axis(tmp_path):
    rng = np.random.default_rng(7)
    a = random_matrix(rng, (3, 45, 38), "float32")
    b = random_matrix(rng, (3, 38, 27), "float32")
    v = random_matrix(rng, (38,), "float32")
    za = stored(tmp_path / "a.zarr", a, (2, 10, 9))
    zb = stored(tmp_path / "b.zarr", b, (1, 7, 5))
    zv = stored(tmp_path / "v.zarr", v, (7,))
    c = run(za, zb, tmp_path / "c.zarr", chunks=(16, 11), memory="64KiB")
    assert c.chunks == (1, 16, 11)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c[...], expected, rtol=1e-5, atol=1e-4)
    w = run(str(tmp_path / "a.zarr"), zv, tmp_path / "w.zarr", chunks=(16, 5))
    assert w.shape == (3, 45) and w.chunks == (1, 16)
    np.testing.assert_allclose(w[...], a.astype(np.float64) @ v, rtol=1e-5, atol=1e-4)


def test_a_gram_product_in_the_chunks_asked(tmp_path):
    x = random_matrix(np.random.default_rng(3), (90, 70), "float64")
    zx = stored(tmp_path / "x.zarr", x, (25, 15))
    g = outofcore.gram(zx, str(tmp_path / "g.zarr"), chunks=(20, 20), client="sync",
                       memory="96KiB")  # fmt: skip
    assert g.chunks == (20, 20)
    np.testing.assert_allclose(g[...], x.T @ x, rtol=1e-12, atol=1e-10)
    np.testing.assert_array_equal(g[...], g[...].T)


def test_an_empty_product_is_written_in_the_chunks_and_shards_asked(tmp_path):
    """k = 0: the sum of no terms, written whole in this process, in the layout asked."""
    a_path = stored(tmp_path / "a.zarr", np.ones((7, 0), "float32"), (3, 1))
    b_path = stored(tmp_path / "b.zarr", np.ones((0, 9), "float32"), (1, 4))
    c = run(a_path, b_path, tmp_path / "c.zarr", chunks=(3, 4), shards=(6, 8))
    assert c.chunks == (3, 4) and c.shards == (6, 8)
    np.testing.assert_array_equal(c[...], np.zeros((7, 9), "float32"))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"chunks": (0, 5)}, r"chunks = \(0, 5\): need two whole numbers >= 1"),
        ({"chunks": (1, 2, 3)}, r"chunks = \(1, 2, 3\).*batch axes are chunked 1"),
        ({"chunks": 2.5}, r"chunks = 2.5: need two whole numbers"),
        ({"chunks": (True, 4)}, r"chunks = \(True, 4\)"),
        ({"chunks": (4, 4), "shards": (10, 8)}, r"shards = \(10, 8\) is not a multiple of"),
        ({"shards": (64, 64)}, r"shards = \(64, 64\) needs chunks="),
        ({"chunks": (8, 8), "shards": (16, 16), "zarr_format": 2}, "format 2 has no shards"),
        ({"chunks": (8, 8), "shards": (0, 16)}, r"shards = \(0, 16\): need two whole"),
    ],
)
def test_a_layout_that_cannot_be_is_refused_before_any_write(ragged, options, message):
    folder, (a_path, b_path), _, _ = ragged
    with pytest.raises(InputError, match=message):
        run(a_path, b_path, folder / "c.zarr", **options)
    assert not (folder / "c.zarr").exists()


def test_the_signature_and_the_spec_document_chunks_and_shards():
    parameters = inspect.signature(outofcore.matmul).parameters
    assert parameters["chunks"].default is None and parameters["shards"].default is True
    assert parameters["chunks"].kind is inspect.Parameter.KEYWORD_ONLY
    assert "chunks" in inspect.signature(outofcore.gram).parameters
    assert "chunks" in inspect.signature(outofcore.plan).parameters
    assert "\n    chunks\n" in JobSpec.__doc__ and "\n    shards\n" in JobSpec.__doc__


def test_the_plan_shows_the_chunks_asked(ragged):
    folder, (a_path, b_path), _, _ = ragged
    layout = {"chunks": (64, 29), "shards": (128, 58)}
    product, job_plan = plan_product(a_path, b_path, None, layout, "sync")
    summary = job_plan.summary()
    assert summary["out_chunks"] == [64, 29] and summary["out_shards"] == [128, 58]
    assert summary["out_layout"] == "asked"
    again = outofcore.plan(a_path, b_path, client="sync", **layout).summary
    assert {key: again[key] for key in ("out_chunks", "out_shards", "tile")} == {
        key: summary[key] for key in ("out_chunks", "out_shards", "tile")
    }
    printed = format_plan({**summary, "product": product.summary()})  # as `outofcore plan`
    line = next(x for x in printed.splitlines() if "output chunks" in x)
    assert "of 64x29 as asked, in shards of 128x58" in line


def test_a_resume_keeps_the_output_grid_and_refuses_other_chunks(ragged, outofcore_settings):
    folder, (a_path, b_path), a, b = ragged
    outofcore_settings(read_retries=0)
    broken = break_chunk(folder / "a.zarr", "5/2")  # read by the last rows' tiles only
    with pytest.raises(ReadError):
        run(a_path, b_path, folder / "c.zarr", chunks=(64, 29), memory=MEMORY)
    assert outofcore.job_status(str(folder / "c.zarr"))["tiles_done"] > 0
    with pytest.raises(InputError, match=r"exists in chunks \(64, 29\), not the chunks \(32, 29\)"):
        run(a_path, b_path, folder / "c.zarr", chunks=(32, 29), memory=MEMORY)
    restore_chunk(broken)
    c = run(a_path, b_path, folder / "c.zarr", memory=MEMORY)  # no chunks=: the output's own
    assert c.chunks == (64, 29) and c.attrs["outofcore"]["summary"]["tiles_skipped"] > 0
    assert_product_close(c[...], a, b)


def test_a_resume_with_the_same_shards_asked_resumes(ragged, outofcore_settings):
    folder, (a_path, b_path), a, b = ragged
    outofcore_settings(read_retries=0)
    layout = {"chunks": (64, 29), "shards": (64, 58), "memory": MEMORY}
    broken = break_chunk(folder / "a.zarr", "5/2")
    with pytest.raises(ReadError):
        run(a_path, b_path, folder / "c.zarr", **layout)
    assert outofcore.job_status(str(folder / "c.zarr"))["tiles_done"] > 0
    restore_chunk(broken)
    c = run(a_path, b_path, folder / "c.zarr", **layout)
    assert c.shards == (64, 58) and c.attrs["outofcore"]["summary"]["tiles_skipped"] > 0


def test_an_array_the_user_made_is_refused_naming_the_way_to_get_its_layout(ragged):
    folder, (a_path, b_path), _, _ = ragged
    theirs = zarr.create_array(str(folder / "theirs.zarr"), shape=(203, 117), chunks=(64, 29),
                               dtype="float32")  # fmt: skip
    with pytest.raises(InputError) as refused:
        run(a_path, b_path, folder / "theirs.zarr")
    message = str(refused.value)
    assert "outofcore did not write" in message
    assert "chunks=(rows, cols)" in message and "--out-chunks" in message
    assert "zarr.open_array(path)" in message and "overwrite" not in message
    assert theirs.nchunks_initialized == 0  # nothing written into it


def test_to_zarr_of_a_dask_product_takes_chunks(ragged):
    folder, (a_path, b_path), a, b = ragged
    x, y = da.from_zarr(a_path), da.from_zarr(b_path)
    out = outofcore.to_zarr(x @ y, str(folder / "c.zarr"), chunks=(64, 29), client="sync")
    assert out.chunks == (64, 29)
    assert_product_close(out[...], a, b)


@settings(max_examples=8)
@given(
    st.integers(1, 60), st.integers(1, 40), st.integers(1, 60),
    st.tuples(st.integers(1, 25), st.integers(1, 25)),
    st.tuples(st.integers(1, 70), st.integers(1, 70)),
)  # fmt: skip
def test_any_chunks_asked_give_numpys_product(tmp_path_factory, m, k, n, in_chunks, out_chunks):
    folder = tmp_path_factory.mktemp("any")
    rng = np.random.default_rng(m * k * n)
    a, b = random_matrix(rng, (m, k), "float32"), random_matrix(rng, (k, n), "float32")
    a_path = stored(folder / "a.zarr", a, in_chunks)
    b_path = stored(folder / "b.zarr", b, in_chunks[::-1])
    c = run(a_path, b_path, folder / "c.zarr", chunks=out_chunks, memory="96KiB")
    assert c.chunks == (min(m, out_chunks[0]), min(n, out_chunks[1]))
    assert_product_close(c[...], a, b)


def test_xarray_dot_takes_chunks(tmp_path):
    xr = pytest.importorskip("xarray")
    import outofcore.xarray  # noqa: PLC0415

    rng = np.random.default_rng(9)
    a = xr.DataArray(random_matrix(rng, (50, 30), "float32"), dims=("sample", "feature"))
    b = xr.DataArray(random_matrix(rng, (30, 20), "float32"), dims=("feature", "target"))
    stored_a = stored(tmp_path / "a.zarr", a.values, (17, 7))
    stored_b = stored(tmp_path / "b.zarr", b.values, (7, 9))
    za = xr.DataArray(da.from_zarr(stored_a), dims=a.dims)
    zb = xr.DataArray(da.from_zarr(stored_b), dims=b.dims)
    product = outofcore.xarray.dot(za, zb, out=str(tmp_path / "c.zarr"), chunks=(16, 6),
                                   client="sync")  # fmt: skip
    written = zarr.open_group(str(tmp_path / "c.zarr"), mode="r")
    assert [array.chunks for _, array in written.arrays()] == [(16, 6)]
    assert product.dims == ("sample", "target")
    assert_product_close(product.values, a.values, b.values)

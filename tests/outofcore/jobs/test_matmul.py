"""End to end through the Python API, against a float64 numpy reference."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr
from distributed import Client
from hypothesis import given
from hypothesis import strategies as st

import outofcore
from outofcore.api import ATTRIBUTE, run_job
from outofcore.errors import BudgetError, InputError
from outofcore.frontends.generate import random_array
from outofcore.runtime.executors import DaskExecutor
from tests.helpers import assert_product_close, random_matrix, write_zarr

# 1, primes, and sizes that are multiples of nothing the plans use.
odd_dims = st.sampled_from([1, 2, 3, 7, 13, 31, 61, 97, 128, 131])
chunk_sizes = st.sampled_from([1, 2, 5, 16, 17, 64, 100])


@given(
    m=odd_dims,
    k=odd_dims,
    n=odd_dims,
    chunks=st.tuples(chunk_sizes, chunk_sizes, chunk_sizes, chunk_sizes),
    dtype=st.sampled_from(["float32", "float64"]),
    budget_kib=st.integers(min_value=64, max_value=4096),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_matches_numpy_for_odd_shapes_and_ragged_chunks(
    tmp_path_factory, m, k, n, chunks, dtype, budget_kib, seed
):
    folder = tmp_path_factory.mktemp("mm")
    rng = np.random.default_rng(seed)
    a = random_matrix(rng, (m, k), dtype)
    b = random_matrix(rng, (k, n), dtype)
    # A's column chunks differ from B's row chunks on purpose.
    write_zarr(folder / "a.zarr", a, (chunks[0], chunks[1]))
    write_zarr(folder / "b.zarr", b, (chunks[2], chunks[3]))
    try:
        result = run_job(
            folder / "a.zarr",
            folder / "b.zarr",
            folder / "c.zarr",
            memory=budget_kib * 1024,
            client="sync",
            progress=False,
        )
    except BudgetError:
        return  # a budget below the smallest tile is refused (tested in test_errors)
    c = zarr.open_array(str(folder / "c.zarr"), mode="r")
    assert_product_close(c[...], a, b)
    summary = result.summary
    assert summary["tiles"] == len(result.plan.tasks)
    # What the tasks measured is what the plan predicted.
    assert summary["bytes_read"] == result.plan.bytes_read
    assert summary["bytes_written"] == m * n * np.dtype(dtype).itemsize
    assert c.attrs[ATTRIBUTE]["complete"] is True


def test_several_tiles_and_panels_with_forced_small_tiles(tmp_path):
    rng = np.random.default_rng(7)
    a = random_matrix(rng, (97, 131), "float32")
    b = random_matrix(rng, (131, 61), "float32")
    write_zarr(tmp_path / "a.zarr", a, (10, 13))
    write_zarr(tmp_path / "b.zarr", b, (13, 7))
    result = run_job(
        tmp_path / "a.zarr",
        tmp_path / "b.zarr",
        tmp_path / "c.zarr",
        client="sync",
        progress=False,
        tile=(20, 14),
        tk=26,
    )
    assert len(result.plan.tasks) == 5 * 5 and len(result.plan.panels) == 6
    assert_product_close(zarr.open_array(str(tmp_path / "c.zarr"))[...], a, b)


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_output_codec_choice_gives_the_same_product(tmp_path, codec):
    rng = np.random.default_rng(13)
    a = random_matrix(rng, (83, 59), "float32")
    b = random_matrix(rng, (59, 71), "float32")
    write_zarr(tmp_path / "a.zarr", a, (16, 16))
    write_zarr(tmp_path / "b.zarr", b, (16, 16))
    c = outofcore.matmul(
        tmp_path / "a.zarr",
        tmp_path / "b.zarr",
        tmp_path / "c.zarr",
        client="sync",
        progress=False,
        output_codec=codec,
    )
    compressors = [type(x).__name__ for x in c.compressors]
    assert compressors == ([] if codec == "none" else ["ZstdCodec"])
    assert_product_close(c[...], a, b)


def test_unknown_output_codec_is_refused_before_anything_is_written(tmp_path):
    rng = np.random.default_rng(14)
    write_zarr(tmp_path / "a.zarr", random_matrix(rng, (8, 8), "float32"), (4, 4))
    with pytest.raises(InputError, match="output codec 'lz5': choose one of none, zstd"):
        run_job(
            tmp_path / "a.zarr",
            tmp_path / "a.zarr",
            tmp_path / "c.zarr",
            client="sync",
            output_codec="lz5",
        )
    assert not (tmp_path / "c.zarr").exists()


def test_k_equal_one_and_one_by_one(tmp_path):
    rng = np.random.default_rng(11)
    for m, k, n in [(1, 1, 1), (17, 1, 23)]:
        a = random_matrix(rng, (m, k), "float64")
        b = random_matrix(rng, (k, n), "float64")
        write_zarr(tmp_path / f"a{m}.zarr", a, (5, 1))
        write_zarr(tmp_path / f"b{m}.zarr", b, (1, 4))
        c = outofcore.matmul(
            tmp_path / f"a{m}.zarr",
            tmp_path / f"b{m}.zarr",
            tmp_path / f"c{m}.zarr",
            client="sync",
            progress=False,
        )
        assert_product_close(c[...], a, b)


def test_nan_and_inf_propagate_like_numpy(tmp_path):
    rng = np.random.default_rng(3)
    a = random_matrix(rng, (30, 20), "float64")
    b = random_matrix(rng, (20, 25), "float64")
    a[4, 7] = np.nan
    b[3, 11] = np.inf
    write_zarr(tmp_path / "a.zarr", a, (8, 6))
    write_zarr(tmp_path / "b.zarr", b, (6, 9))
    c = outofcore.matmul(
        tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr", client="sync", progress=False
    )
    expected = a @ b
    got = c[...]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(expected))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-12, atol=1e-12)


def test_writes_into_an_existing_zarr_array_with_its_own_chunks(tmp_path):
    rng = np.random.default_rng(5)
    a = random_matrix(rng, (60, 40), "float32")
    b = random_matrix(rng, (40, 50), "float32")
    write_zarr(tmp_path / "a.zarr", a, (12, 8))
    write_zarr(tmp_path / "b.zarr", b, (8, 10))
    # An array outofcore made (random's), given with overwrite: it keeps its chunks. One a
    # user made is never written (issue 28: tests/outofcore/storage/test_manifest.py).
    random_array(tmp_path / "c.zarr", (60, 50), (9, 25), "float32")
    out = zarr.open_array(str(tmp_path / "c.zarr"), mode="r+")
    result = run_job(
        tmp_path / "a.zarr",
        tmp_path / "b.zarr",
        out,
        memory=64 * 1024,
        client="sync",
        progress=False,
        overwrite=True,
    )
    # Tiles fall on both A's row chunks (12) and the output's (9): multiples of 36.
    assert all(task.row0 % 36 == 0 for task in result.plan.tasks)
    assert_product_close(out[...], a, b)


def test_in_memory_arrays_run_in_process(tmp_path):
    rng = np.random.default_rng(9)
    a_np = random_matrix(rng, (33, 21), "float32")
    b_np = random_matrix(rng, (21, 19), "float32")
    a = zarr.create_array(zarr.storage.MemoryStore(), shape=a_np.shape, chunks=(8, 8), dtype="f4")
    b = zarr.create_array(zarr.storage.MemoryStore(), shape=b_np.shape, chunks=(8, 8), dtype="f4")
    a[...], b[...] = a_np, b_np
    c = outofcore.matmul(a, b, tmp_path / "c.zarr", client="sync", progress=False)
    assert_product_close(c[...], a_np, b_np)


def test_localcluster_with_two_worker_processes(tmp_path, two_process_client):
    rng = np.random.default_rng(21)
    a = random_matrix(rng, (301, 211), "float32")
    b = random_matrix(rng, (211, 257), "float32")
    write_zarr(tmp_path / "a.zarr", a, (50, 37))
    write_zarr(tmp_path / "b.zarr", b, (41, 60))
    result = run_job(
        tmp_path / "a.zarr",
        tmp_path / "b.zarr",
        tmp_path / "c.zarr",
        memory="1MiB",
        client=two_process_client,
        progress=False,
    )
    assert result.summary["workers"] == 2
    assert len(result.plan.tasks) >= 2
    workers_used = {r.worker for r in result.results}
    assert len(workers_used) == 2  # both processes computed tiles
    assert_product_close(zarr.open_array(str(tmp_path / "c.zarr"))[...], a, b)


def test_in_memory_arrays_are_refused_on_a_cluster(tmp_path, two_process_client):
    a = zarr.create_array(zarr.storage.MemoryStore(), shape=(4, 4), chunks=(2, 2), dtype="f4")
    b = zarr.create_array(zarr.storage.MemoryStore(), shape=(4, 4), chunks=(2, 2), dtype="f4")
    with pytest.raises(InputError, match="client='sync'"):
        outofcore.matmul(a, b, tmp_path / "c.zarr", client=two_process_client, progress=False)
    assert not (tmp_path / "c.zarr").exists()


def test_worker_running_two_tiles_at_once_gives_the_right_product(tmp_path, local_cluster):
    # `dask worker` runs one task per core by default: engines must not be shared
    # between the tasks running at the same time on one worker.
    rng = np.random.default_rng(33)
    a = random_matrix(rng, (400, 300), "float32")
    b = random_matrix(rng, (300, 350), "float32")
    write_zarr(tmp_path / "a.zarr", a, (50, 60))
    write_zarr(tmp_path / "b.zarr", b, (60, 50))
    with Client(local_cluster(n_workers=1, threads_per_worker=2)) as client:
        shape = DaskExecutor(client).worker_shape()
        # Two tasks at once on this host: each gets half the cores for BLAS.
        assert shape.threads_per_worker == 2
        assert shape.blas_threads == max(1, (os.cpu_count() or 1) // 2)
        result = run_job(
            tmp_path / "a.zarr",
            tmp_path / "b.zarr",
            tmp_path / "c.zarr",
            memory="4MiB",
            client=client,
            progress=False,
            tile=(50, 50),
        )
    assert len(result.plan.tasks) == 8 * 7
    assert_product_close(zarr.open_array(str(tmp_path / "c.zarr"))[...], a, b)

"""Operands that are stored arrays joined along one axis (issue 31, item 2):
``da.concatenate([x, y])`` read part by part (:mod:`outofcore.operands.joined`), never stored.

numpy, in float64, is the reference; the parts have other chunks and ragged edges, so
panels span two parts; every part is an input of the job (fingerprinted, never the
output).
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import zarr

import outofcore
from outofcore.api import run_job
from outofcore.errors import InputError
from outofcore.frontends.verify import verify
from outofcore.journal.resume import ResumeError
from outofcore.operands.interop import layer_reads
from outofcore.operands.joined import joined_reads
from outofcore.operands.reading import ReadError
from tests.helpers import (
    assert_gemm_close,
    break_chunk,
    random_matrix,
    restore_chunk,
    smallest_budget,
    write_zarr,
)

SYNC = {"client": "sync", "progress": False}


@pytest.fixture
def parts(tmp_path):
    """x (203x47, chunks 31x17), y (50x47, chunks 20x13), z (203x29): float32."""
    rng = np.random.default_rng(91)
    x = random_matrix(rng, (203, 47), "float32")
    y = random_matrix(rng, (50, 47), "float32")
    z = random_matrix(rng, (203, 29), "float32")
    write_zarr(tmp_path / "x.zarr", x, (31, 17))
    write_zarr(tmp_path / "y.zarr", y, (20, 13))
    write_zarr(tmp_path / "z.zarr", z, (31, 10))
    return tmp_path, x, y, z


def dask_of(folder, *names):
    return [da.from_zarr(str(folder / f"{name}.zarr")) for name in names]


def found(x):
    result = joined_reads(x.__dask_graph__(), x.name, lambda g, n: layer_reads(g, n, 2))
    return None if result is None else (result[0].axis, len(result[0].arrays), result[1])


def test_a_concatenation_of_reads_is_found_with_its_axis_and_parts(parts):
    folder = parts[0]
    x, y, z = dask_of(folder, "x", "y", "z")
    assert found(da.concatenate([x, y])) == (0, 2, False)  # other chunks: rechunked below
    assert found(da.concatenate([x, z], axis=1)) == (1, 2, False)
    assert found(da.concatenate([x.T, y.T], axis=1)) == (0, 2, True)  # the stored axis
    assert found(da.concatenate([x, x, y])) == (0, 3, False)  # one array twice
    assert found(da.concatenate([x[:100], y])) is None  # a part that is a slice
    assert found(da.concatenate([x, y.astype("float64")])) is None  # a part that computes
    assert found(x + 1) is None


@pytest.mark.parametrize("form", ["gram", "rows of A", "columns of B", "k", "centred"])
def test_products_of_joined_operands_equal_numpy_under_the_smallest_budget(parts, form):
    folder, x, y, z = parts
    xd, yd, zd = dask_of(folder, "x", "y", "z")
    j, jd = np.concatenate([x, y]), da.concatenate([xd, yd])
    w, wd = np.concatenate([x, z], axis=1), da.concatenate([xd, zd], axis=1)
    cases = {
        "gram": (jd.T, jd, j.T, j),  # k runs across the two parts
        "rows of A": (jd, xd.T, j, x.T),
        "columns of B": (xd.T, wd, x.T, w),
        "k": (wd, wd.T, w, w.T),  # joined along k
        "centred": ((jd - jd.mean(axis=0)).T, jd - jd.mean(axis=0), None, None),
    }
    a, b, na, nb = cases[form]
    out = str(folder / "c.zarr")
    budget = smallest_budget(a, b, str(folder / "probe.zarr"))
    got = outofcore.matmul(a, b, out, memory=budget, **SYNC)
    if form == "centred":
        c = j.astype(np.float64) - j.astype(np.float64).mean(axis=0)
        expected = c.T @ c
        assert np.abs(got[...] - expected).max() <= 1e-5 * np.abs(expected).max()
    else:
        assert_gemm_close(got[...], na, nb, accumulated_in="float32")
    record = got.attrs["outofcore"]["product"]
    assert "a_joined" in record or "b_joined" in record
    assert verify(a, b, out, client="sync").passed
    for name, values in (("x", x), ("y", y), ("z", z)):  # the parts are never written
        np.testing.assert_array_equal(zarr.open_array(str(folder / f"{name}.zarr"))[...], values)


def test_a_joined_gram_is_symmetric_and_every_part_is_an_input(parts):
    folder, x, y, _ = parts
    xd, yd = dask_of(folder, "x", "y")
    jd = da.concatenate([xd, yd])
    result = run_job(jd.T, jd, folder / "g.zarr", memory="64KiB", **SYNC)
    assert result.output.attrs["outofcore"]["product"]["symmetric"] is True
    g = result.output[...]
    assert (g == g.T).all()
    with pytest.raises(InputError, match="is the same array as input A part 2"):
        outofcore.matmul(jd.T, jd, folder / "c.zarr", addend=str(folder / "y.zarr"), beta=1.0,
                         **SYNC)  # fmt: skip


def test_to_zarr_of_a_joined_product_runs_on_a_cluster(parts):
    from distributed import Client, LocalCluster, get_task_stream  # noqa: PLC0415

    folder, x, y, _ = parts
    xd, yd = dask_of(folder, "x", "y")
    jd = da.concatenate([xd, yd])
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
        get_task_stream(client) as stream,
    ):
        out = outofcore.to_zarr(jd.T @ jd, str(folder / "g.zarr"), client=client,
                                memory="64KiB", progress=False)  # fmt: skip
    assert any("tile-" in str(task["key"]) for task in stream.data)
    j = np.concatenate([x, y]).astype(np.float64)
    np.testing.assert_allclose(out[...], j.T @ j, rtol=1e-4, atol=1e-3)


def test_a_resume_refuses_a_changed_part(parts, outofcore_settings):
    folder, x, y, _ = parts
    xd, yd = dask_of(folder, "x", "y")
    jd = da.concatenate([xd, yd])
    out = folder / "g.zarr"
    options = {**SYNC, "memory": "64KiB"}
    outofcore_settings(read_retries=0)
    broken = break_chunk(folder / "y.zarr", "2/3")  # the second part's last chunk
    with pytest.raises(ReadError):
        run_job(jd.T, jd, out, **options)
    restore_chunk(broken)
    zarr.open_array(str(folder / "y.zarr"), mode="r+")[0, 0] = 1234.5  # the part rewritten
    jd = da.concatenate(dask_of(folder, "x", "y"))
    with pytest.raises(ResumeError, match="for other inputs or parameters"):
        run_job(jd.T, jd, out, **options)

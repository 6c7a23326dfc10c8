"""zarr-backed xarray DataArrays as operands, and ``outofcore.xarray.dot`` (issue 31, item 3).

The result of ``dot`` is opened by xarray as written (``xr.open_dataarray``) and
compared with ``xr.dot`` of the same DataArrays: values, dims and coordinates.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import zarr

import outofcore
import outofcore.xarray as ox
from outofcore.errors import InputError


def stored(folder, name, values, dims, chunks, coords=None, encoding=None):
    """``values`` as variable ``name`` of a zarr store written by xarray; opened back."""
    x = xr.DataArray(values, dims=dims, coords=coords or {}, name=name)
    enc = {name: {"chunks": chunks, **(encoding or {})}}
    x.to_dataset().to_zarr(folder / f"{name}.zarr", consolidated=False, encoding=enc)
    return folder / f"{name}.zarr"


@pytest.fixture
def pair(tmp_path):
    """x (sample, feature) with coordinates, and w (feature, target), ragged chunks."""
    rng = np.random.default_rng(41)
    x = rng.standard_normal((53, 17)).astype(np.float32)
    w = rng.standard_normal((17, 11)).astype(np.float32)
    xs = stored(tmp_path, "x", x, ("sample", "feature"), (10, 6), {"feature": np.arange(17) * 3})
    ws = stored(tmp_path, "w", w, ("feature", "target"), (6, 4), {"target": list("abcdefghijk")})
    return tmp_path, xs, ws


@pytest.mark.parametrize("chunks", [{}, None], ids=["dask", "lazy"])
def test_dot_equals_xr_dot_with_dims_and_coordinates(pair, chunks):
    folder, xs, ws = pair
    x = xr.open_dataarray(xs, engine="zarr", consolidated=False, chunks=chunks)
    w = xr.open_dataarray(ws, engine="zarr", consolidated=False, chunks=chunks)
    out = folder / "results.zarr"
    got = ox.dot(x, w, dim="feature", out=str(out), client="sync", progress=False)
    expected = xr.dot(x.astype(np.float64), w.astype(np.float64), dim="feature")
    assert got.dims == expected.dims == ("sample", "target")
    np.testing.assert_array_equal(got.coords["target"].values, list("abcdefghijk"))
    np.testing.assert_allclose(got.values, expected.values, rtol=1e-4, atol=1e-4)
    reopened = xr.open_dataarray(out, engine="zarr", consolidated=False)
    assert reopened.name == "dot" and reopened.dims == ("sample", "target")
    assert reopened.attrs["outofcore"]["complete"] is True  # the job's record comes along


def test_gram_by_a_renamed_dimension_is_symmetric_and_keeps_both_coordinates(pair):
    folder, xs, _ = pair
    x = xr.open_dataarray(xs, engine="zarr", consolidated=False, chunks={})
    y = x.rename(feature="feature_2")
    g = ox.dot(x, y, dim="sample", out=str(folder / "g.zarr"), client="sync", progress=False)
    assert g.dims == ("feature", "feature_2")
    assert (g.coords["feature"].values == np.arange(17) * 3).all()
    assert (g.coords["feature_2"].values == np.arange(17) * 3).all()
    values = g.values
    np.testing.assert_array_equal(values, values.T)
    assert g.attrs["outofcore"]["product"]["symmetric"] is True  # half the tiles computed
    plain = x.values.astype(np.float64)
    np.testing.assert_allclose(values, plain.T @ plain, rtol=1e-4, atol=1e-3)


def test_stacks_keep_their_batch_dimension(tmp_path):
    rng = np.random.default_rng(42)
    a = rng.standard_normal((3, 13, 7))
    b = rng.standard_normal((3, 7, 5))
    sa = stored(tmp_path, "a", a, ("run", "i", "k"), (1, 5, 3), {"run": [10, 20, 30]})
    sb = stored(tmp_path, "b", b, ("run", "k", "j"), (1, 3, 2))
    xa = xr.open_dataarray(sa, engine="zarr", consolidated=False, chunks={})
    xb = xr.open_dataarray(sb, engine="zarr", consolidated=False, chunks={})
    got = ox.dot(xa, xb, dim="k", out=str(tmp_path / "c.zarr"), client="sync", progress=False)
    assert got.dims == ("run", "i", "j") and list(got.coords["run"].values) == [10, 20, 30]
    np.testing.assert_allclose(got.values, a @ b, rtol=1e-12, atol=1e-12)


def test_matmul_and_gram_take_dataarrays(pair):
    folder, xs, ws = pair
    x = xr.open_dataarray(xs, engine="zarr", consolidated=False, chunks={})
    w = xr.open_dataarray(ws, engine="zarr", consolidated=False)
    c = outofcore.matmul(x, w, str(folder / "c.zarr"), client="sync", progress=False)
    np.testing.assert_allclose(c[...], x.values @ w.values, rtol=1e-4, atol=1e-4)
    assert c.metadata.dimension_names == ("sample", "target")
    g = outofcore.gram(x, str(folder / "g.zarr"), client="sync", progress=False)
    assert g.attrs["outofcore"]["product"]["symmetric"] is True
    np.testing.assert_allclose(g[...], x.values.T @ x.values, rtol=1e-4, atol=1e-3)
    in_memory = xr.DataArray(w.values, dims=w.dims)
    d = outofcore.matmul(x, in_memory, str(folder / "d.zarr"), client="sync", progress=False)
    np.testing.assert_allclose(d[...], c[...], rtol=0, atol=0)


def test_values_xarray_decodes_are_refused_naming_why(tmp_path):
    rng = np.random.default_rng(43)
    values = rng.standard_normal((8, 6))
    path = stored(tmp_path, "s", values, ("i", "k"), (4, 3), encoding={"scale_factor": 0.5})
    scaled = xr.open_dataarray(path, engine="zarr", consolidated=False, chunks={})
    with pytest.raises(InputError, match=r"values decoded on reading \(scale_factor\)"):
        outofcore.matmul(scaled, scaled, str(tmp_path / "c.zarr"), transpose_a=True)
    plain = stored(tmp_path, "p", values, ("i", "k"), (4, 3))
    sliced = xr.open_dataarray(plain, engine="zarr", consolidated=False)[:4]
    with pytest.raises(InputError, match="not one zarr array read whole"):
        outofcore.matmul(sliced, sliced, str(tmp_path / "c.zarr"), transpose_a=True)
    assert not (tmp_path / "c.zarr").exists()


def test_dot_refuses_what_is_no_matrix_product_and_never_writes_into_a_users_folder(pair):
    folder, xs, ws = pair
    x = xr.open_dataarray(xs, engine="zarr", consolidated=False, chunks={})
    w = xr.open_dataarray(ws, engine="zarr", consolidated=False, chunks={})
    cases = [
        ((x, x), {"dim": "sample"}, "both keep 'feature', which xr.dot matches"),
        ((x, w), {"dim": "sample"}, "dim='sample' is not one of the last two dims of both"),
        ((x, x.rename(sample="s2", feature="f2")), {}, "give dim=, the one dimension"),
    ]
    for (a, b), options, message in cases:
        with pytest.raises(InputError, match=message):
            ox.dot(a, b, out=str(folder / "r.zarr"), client="sync", **options)
    mine = folder / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="a folder that is not a zarr group"):
        ox.dot(x, w, out=str(mine), client="sync")
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    with pytest.raises(InputError, match="takes DataArrays"):
        ox.dot(x.values, w, out=str(folder / "r.zarr"))


def test_dot_again_with_overwrite_replaces_only_its_own_arrays(pair):
    folder, xs, ws = pair
    x = xr.open_dataarray(xs, engine="zarr", consolidated=False, chunks={})
    w = xr.open_dataarray(ws, engine="zarr", consolidated=False, chunks={})
    out = str(folder / "results.zarr")
    ox.dot(x, w, dim="feature", out=out, client="sync", progress=False)
    theirs = zarr.create_array(f"{out}/theirs", shape=(3,), dtype="i8", dimension_names=("t",))
    theirs[...] = np.arange(3)  # someone else's array in the group
    with pytest.raises(InputError, match="already exists"):
        ox.dot(x, w, dim="feature", out=out, client="sync", progress=False)
    again = ox.dot(x, 2 * w.load(), dim="feature", out=out, client="sync", overwrite=True,
                   progress=False)  # fmt: skip
    np.testing.assert_allclose(again.values, 2 * (x.values @ w.values), rtol=1e-4, atol=1e-4)
    assert (zarr.open_array(f"{out}/theirs")[...] == np.arange(3)).all()

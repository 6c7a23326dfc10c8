"""zarr-backed xarray DataArrays as operands, and ``outofcore.xarray.dot`` (issue 31, item 3).

The result of ``dot`` is opened by xarray as written (``xr.open_dataarray``) and
compared with ``xr.dot`` of the same DataArrays: values, dims and coordinates.
"""

from __future__ import annotations

import re
import warnings

import dask
import numpy as np
import pytest
import xarray as xr
import zarr

import outofcore
import outofcore.xarray as ox
from outofcore.errors import FallbackError, InputError, OutputExistsError
from outofcore.frontends.plan_report import DaskComputes


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
    assert got.name == reopened.name == expected.name == "x"  # xr.dot's name, as xarray gives it
    assert reopened.dims == ("sample", "target")
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
    with pytest.raises(InputError, match=r"values decoded on reading \(scale_factor\)") as no:
        outofcore.matmul(scaled, scaled, str(tmp_path / "c.zarr"), transpose_a=True)
    assert "mask_and_scale=False" in str(no.value) and "alpha=s_a*s_b" in str(no.value)
    # As the refusal says: the stored values, with the scales as alpha, give the product.
    raw = xr.open_dataarray(path, engine="zarr", consolidated=False, mask_and_scale=False)
    c = outofcore.matmul(raw, raw, str(tmp_path / "raw.zarr"), transpose_a=True, alpha=0.25)
    expected = scaled.values.T @ scaled.values
    np.testing.assert_allclose(c[...], expected, rtol=1e-5, atol=1e-5)
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


# Issue 42: alignment, coordinates and names as xr.dot gives them (or refused, saying why).


def opened(path, chunks=None):
    """The DataArray stored at ``path`` (one variable), opened lazily or with ``chunks``."""
    return xr.open_dataarray(path, engine="zarr", consolidated=False, chunks=chunks)


def small_ints(seed, shape):
    """Whole numbers as float64: every sum exact, so the comparisons are exact."""
    return np.random.default_rng(seed).integers(-9, 10, shape).astype(np.float64)


def assert_as_xr_dot(got, expected, tolerance=0.0):
    """Same values (exactly, or within ``tolerance`` of float32 sums), dims, coordinates
    (names and values) and name."""
    assert got.shape == expected.shape
    np.testing.assert_allclose(got.values, expected.values, rtol=tolerance, atol=tolerance)
    assert got.dims == expected.dims
    assert got.name == expected.name
    assert sorted(map(str, got.coords)) == sorted(map(str, expected.coords))
    for key in expected.coords:
        assert got.coords[key].dims == expected.coords[key].dims
        np.testing.assert_array_equal(got.coords[key].values, expected.coords[key].values)


@pytest.fixture
def feature_pair(tmp_path):
    """x (sample: 7, feature: 6 at 0..5) and a factory of w (feature at ``values``, target)."""
    xs = stored(tmp_path, "x", small_ints(1, (7, 6)), ("sample", "feature"), (3, 4),
                {"feature": np.arange(6), "sample": np.arange(7) * 10})  # fmt: skip

    def w_at(values, name="w"):
        values = np.asarray(values)
        data = small_ints(2, (len(values), 3))
        return stored(tmp_path, name, data, ("feature", "target"), (2, 2),
                      {"feature": values, "target": list("abc")})  # fmt: skip

    return tmp_path, xs, w_at


@pytest.mark.parametrize(
    ("chunks", "transpose"), [({}, False), ({}, True), (None, False)], ids=["dask", "w.T", "lazy"]
)
@pytest.mark.parametrize(
    "values",
    [[2, 3, 4, 5, 6, 7], [1, 2, 3], [-2, -1, 0, 1, 2, 3, 4, 5, 6, 7]],
    ids=["overlap-in-part", "subset", "superset"],
)
def test_summed_coordinates_that_differ_are_summed_over_the_shared_ones_as_xr_dot(
    feature_pair, chunks, transpose, values
):
    folder, xs, w_at = feature_pair
    x, w = opened(xs, chunks), opened(w_at(values), chunks)
    w = w.T if transpose else w
    got = ox.dot(x, w, dim="feature", out=str(folder / "c.zarr"), client="sync", progress=False)
    assert_as_xr_dot(got, xr.dot(x, w, dim="feature"))  # on 1251ef9: values up to 55 off


@pytest.mark.parametrize(
    ("values", "why"),
    [
        ([5, 4, 3, 2, 1, 0], r"the same values in another order \(a has 6 values, b 6, 6 shared"),
        ([1, 0, 2, 3, 4, 5], "the same values in another order"),
        ([0, 2, 4], r"they differ in length \(a has 6 values, b 3, 3 shared"),
        ([4, 5, 6, 7, 0], r"they overlap only in part \(a has 6 values, b 5, 3 shared"),
        ([10, 11, 12], "they share no value"),
    ],
    ids=["reversed", "swapped", "every-other", "wrapped", "disjoint"],
)
@pytest.mark.parametrize("chunks", [{}, None], ids=["dask", "lazy"])
def test_summed_coordinates_outofcore_cannot_read_aligned_are_xr_dots_by_dask_saying_why(
    feature_pair, values, why, chunks
):
    """Issue 53, item 6: an alignment that is no read of the stored arrays (the same labels
    in another order among them) gives xr.dot's answer, computed by dask.array, with a
    FallbackWarning naming the dimension and why; ``outofcore.xarray.plan`` says so;
    ``fallback="error"`` (or the setting) refuses it before anything is written, with the
    lines that align and store the operands first (on 1c76acf: refused in every case)."""
    folder, xs, w_at = feature_pair
    x, w = opened(xs, chunks), opened(w_at(values), chunks)
    expected = xr.dot(x.compute(), w.compute(), dim="feature")
    said = rf"dimension 'feature' differ between a and b: {why}"
    out = folder / "c.zarr"
    with pytest.warns(outofcore.FallbackWarning, match=said):
        got = ox.dot(x, w, dim="feature", out=str(out), client="sync", progress=False)
    assert_as_xr_dot(got, expected)
    product = zarr.open_group(out)[got.name]
    assert product.attrs["outofcore"] == {"complete": True, "stored_by": "dask.array.to_zarr"}
    report = ox.plan(x, w, dim="feature")
    assert isinstance(report, DaskComputes) and report.falls_back
    assert re.search(rf"dask.array computes xr.dot\(a, b, dim='feature'\).*{said}", str(report))
    for refusing in ({"fallback": "error"}, {}):
        refused = folder / "refused.zarr"
        setting = {} if refusing else {"outofcore.fallback": "error"}
        with dask.config.set(setting), pytest.raises(FallbackError, match=said) as caught:
            ox.dot(x, w, dim="feature", out=str(refused), client="sync", **refusing)
        assert "a, b = xr.align(a, b)" in str(caught.value)
        assert not refused.exists()
    with pytest.raises(InputError, match=r"\['memory'\] are options of an outofcore product"):
        ox.dot(x, w, dim="feature", out=str(folder / "m.zarr"), client="sync", memory="64MiB",
               fallback="allow")  # fmt: skip
    assert not (folder / "m.zarr").exists()


def test_what_xr_dot_refuses_is_refused_and_equal_duplicates_are_computed(feature_pair):
    folder, xs, w_at = feature_pair
    x = opened(xs, {})
    duplicated = x.assign_coords(feature=[0, 1, 1, 2, 3, 4])
    w = opened(w_at([0, 1, 2, 2, 3, 4]), {})
    with pytest.raises(ValueError, match="duplicate values"):
        xr.dot(duplicated, w, dim="feature")
    with pytest.raises(InputError, match="duplicate values; outofcore computes only what xr"):
        ox.dot(duplicated, w, dim="feature", out=str(folder / "c.zarr"), client="sync")
    with xr.set_options(arithmetic_join="exact"):  # xr.dot then refuses any difference
        w_part = opened(w_at([1, 2, 3], "w_part"), {})
        with pytest.raises(InputError, match="refuses a and b"):
            ox.dot(x, w_part, dim="feature", out=str(folder / "c.zarr"), client="sync")
    assert not (folder / "c.zarr").exists()
    same = opened(w_at([0, 1, 1, 2, 3, 4], "w_same"), {})  # the same duplicates, in order
    got = ox.dot(duplicated, same, dim="feature", out=str(folder / "d.zarr"), client="sync",
                 progress=False)  # fmt: skip
    assert_as_xr_dot(got, xr.dot(duplicated, same, dim="feature"))


def test_non_dimension_coordinates_are_kept_as_xr_dot_keeps_them(tmp_path):
    coords_a = {
        "feature": [1, 2, 3, 4, 5],
        "sample": [10, 20, 30, 40],
        "day": (
            "sample",
            np.array(["2000-01-01", "NaT", "2000-03-01", "2000-04-01"], dtype="datetime64[ns]"),
        ),  # fmt: skip
        "weight": ("sample", [0.5, np.nan, -0.0, np.inf]),
        "cell": (("sample", "feature"), np.ones((4, 5))),  # summed over: dropped
        "unit": ("feature", list("vwxyz")),  # summed over: dropped
        "run": 7,  # a scalar: kept
    }
    coords_b = {"feature": [0, 1, 2, 3, 4, 5], "label": ("target", ["p", "q", "r"])}
    xa = opened(stored(tmp_path, "a", small_ints(3, (4, 5)), ("sample", "feature"), (3, 2),
                       coords_a), {})  # fmt: skip
    xb = opened(stored(tmp_path, "b", small_ints(4, (6, 3)), ("feature", "target"), (4, 2),
                       coords_b))  # fmt: skip
    got = ox.dot(xa, xb, dim="feature", out=str(tmp_path / "c.zarr"), client="sync",
                 progress=False)  # fmt: skip
    expected = xr.dot(xa, xb, dim="feature")
    assert sorted(expected.coords) == ["day", "label", "run", "sample", "weight"]
    assert_as_xr_dot(got, expected)  # on 1251ef9: day, label, run and weight were lost
    assert_as_xr_dot(
        xr.open_dataarray(tmp_path / "c.zarr", engine="zarr", consolidated=False), expected
    )


def test_name_of_a_dimension_or_coordinate_or_outside_the_group_is_refused(pair):
    folder, xs, ws = pair
    x, w = opened(xs, {}), opened(ws, {})
    out = folder / "c.zarr"
    for name in ("sample", "target"):  # on 1251ef9 the product was the coordinate's values
        with pytest.raises(InputError, match=f"name '{name}' is the name of a dimension or"):
            ox.dot(x, w, dim="feature", out=str(out), name=name, client="sync")
    for name in ("..", "../c", "", "a/b"):
        with pytest.raises(InputError, match="is no name of an array in a zarr group"):
            ox.dot(x, w, dim="feature", out=str(out), name=name, client="sync")
    assert not out.exists() and sorted(p.name for p in folder.iterdir()) == ["w.zarr", "x.zarr"]
    named = ox.dot(x, w, dim="feature", out=str(out), name="y", client="sync", progress=False)
    assert (
        named.name == "y"
        and xr.open_dataset(out, engine="zarr", consolidated=False)["y"].dims == named.dims
    )


def test_unknown_keywords_are_a_type_error_as_in_python(pair):
    folder, xs, ws = pair
    x, w = opened(xs, {}), opened(ws, {})
    for key, value in (("optimize", True), ("transpose_a", True), ("dimension_names", None)):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{key}'"):
            ox.dot(x, w, dim="feature", out=str(folder / "c.zarr"), client="sync",
                   **{key: value})  # fmt: skip
    assert not (folder / "c.zarr").exists()


def test_stacks_are_summed_over_every_shared_dim_without_dim_so_refused(tmp_path):
    a = stored(tmp_path, "a", small_ints(5, (2, 3, 4)), ("run", "i", "k"), (1, 2, 2),
               {"run": [1, 2]})  # fmt: skip
    b = stored(tmp_path, "b", small_ints(6, (2, 4, 5)), ("run", "k", "j"), (1, 2, 2),
               {"run": [1, 2]})  # fmt: skip
    xa, xb = opened(a, {}), opened(b, {})
    assert xr.dot(xa, xb).dims == ("i", "j")  # run is summed too: no stack of products
    with pytest.raises(InputError, match=r"xr.dot sums over every dimension both have"):
        ox.dot(xa, xb, out=str(tmp_path / "c.zarr"), client="sync")
    # A stack's batch in another order, or a part of it: xr.dot's, by dask (issue 53).
    for label, runs in (("part", [2, 3]), ("reordered", [2, 1])):
        other_runs = xb.assign_coords(run=runs)
        out = str(tmp_path / f"{label}.zarr")
        with pytest.warns(outofcore.FallbackWarning, match=r"dimension 'run' differ.*stack only"):
            got = ox.dot(xa, other_runs, dim="k", out=out, client="sync", progress=False)
        assert_as_xr_dot(got, xr.dot(xa.compute(), other_runs.compute(), dim="k"))
    assert not (tmp_path / "c.zarr").exists()
    got = ox.dot(xa, xb, dim=["k"], out=str(tmp_path / "c.zarr"), client="sync", progress=False)
    assert_as_xr_dot(got, xr.dot(xa, xb, dim=["k"]))


def test_overwrite_leaves_no_coordinate_of_the_result_before(pair):
    folder, xs, ws = pair
    x, w = opened(xs, {}), opened(ws, {})
    out = str(folder / "c.zarr")
    with_sample = x.assign_coords(sample=np.arange(53) * 2, tag=("sample", np.arange(53) % 3))
    first = ox.dot(with_sample, w, dim="feature", out=out, client="sync", progress=False)
    assert {"sample", "tag", "target"} <= set(first.coords)
    with pytest.raises(OutputExistsError, match="already exists"):
        ox.dot(x, w, dim="feature", out=out, client="sync", progress=False)
    again = ox.dot(x, w, dim="feature", out=out, client="sync", overwrite=True, progress=False)
    assert_as_xr_dot(again, xr.dot(x, w, dim="feature"), 1e-4)  # on 1251ef9: sample stayed
    assert sorted(again.coords) == ["target"]


def test_coordinates_xarray_cannot_store_are_refused_before_the_job(tmp_path):
    import pandas as pd  # noqa: PLC0415

    kept = pd.MultiIndex.from_product([[1, 2], ["p", "q"]], names=("run", "arm"))
    a = xr.DataArray(small_ints(7, (4, 3)), dims=("i", "k"), coords={"i": kept}, name="a")
    b = xr.DataArray(small_ints(8, (3, 2)), dims=("k", "j"), name="b")
    assert xr.dot(a, b, dim="k").sizes == {"i": 4, "j": 2}  # xr.dot keeps the MultiIndex
    with pytest.raises(InputError, match=r"xarray cannot store the coordinates .* MultiIndex"):
        ox.dot(a, b, dim="k", out=str(tmp_path / "c.zarr"), client="sync")
    assert not (tmp_path / "c.zarr").exists()  # on 1251ef9: the product, then an error


def test_a_slice_of_the_users_and_the_alignment_are_read_as_one_window(feature_pair):
    folder, xs, w_at = feature_pair
    x, w = opened(xs, {}), opened(w_at([3, 4, 5, 6, 7]), {})
    for a, b in [
        (x.isel(feature=slice(1, 5)), w),  # features 1..4 of x; 3 and 4 shared
        (x.T.isel(feature=slice(2, 6)).T, w.isel(feature=slice(1, 3)).T),  # 4, 5 shared
        (x.isel(sample=slice(2, 6), feature=slice(3, 6)), w.load()),  # w in memory
    ]:
        out = folder / "c.zarr"
        got = ox.dot(a, b, dim="feature", out=str(out), client="sync", overwrite=True,
                     progress=False)  # fmt: skip
        assert_as_xr_dot(got, xr.dot(a.compute(), b.compute(), dim="feature"))


@pytest.mark.parametrize("holes", [False, True], ids=["finite", "nan"])
def test_a_centred_dataarray_runs_out_of_core_as_xr_dot(tmp_path, holes):
    """Issue 55, item 2: ``x - x.mean("sample")`` of a DataArray xarray opened (its mean
    given a new axis to broadcast, a NaN-skipping mean) is read from the stored x, by
    xarray.dot as by to_zarr, never handed to dask.array; NaN where xr.dot has NaN."""
    rng = np.random.default_rng(55)
    values = (rng.standard_normal((61, 13)) + 4).astype(np.float64)
    if holes:
        values[7, 2] = np.nan
    xs = stored(tmp_path, "x", values, ("sample", "feature"), (16, 5))
    x = opened(xs, chunks={})
    centred = x - x.mean("sample")
    other = centred.rename({"feature": "feature_2"})
    expected = xr.dot(centred, other, dim="sample").compute()
    got = ox.dot(centred, other, dim="sample", out=str(tmp_path / "cov.zarr"), client="sync")
    np.testing.assert_array_equal(np.isnan(got.values), np.isnan(expected.values))
    assert_as_xr_dot(got.fillna(0), expected.fillna(0), 1e-9)
    # to_zarr of the same product: out of core, no FallbackWarning (an error here).
    with warnings.catch_warnings():
        warnings.simplefilter("error", outofcore.FallbackWarning)
        gram = outofcore.to_zarr(
            centred.data.T @ centred.data, str(tmp_path / "g.zarr"), client="sync"
        )
    assert "outofcore" in gram.attrs
    np.testing.assert_allclose(
        np.nan_to_num(gram[...]), np.nan_to_num(expected.values), rtol=1e-9, atol=1e-9
    )


def test_plan_is_the_plan_dot_runs_and_writes_nothing(pair):
    """Issue 55, item 2: what xarray.dot takes, outofcore plans: the plan the job runs
    (the same tiles as dot's own job), naming the product; dot's refusals are its own."""
    folder, xs, ws = pair
    x, w = opened(xs, chunks={}), opened(ws, chunks={})
    planned = ox.plan(x, w, dim="feature", memory="64KiB", client="sync")
    assert isinstance(planned, outofcore.PlanReport)
    assert planned.runs == "xr.dot(a, b, dim='feature')"
    assert str(planned).startswith("outofcore runs xr.dot(a, b, dim='feature') as a job:\n")
    assert planned.shape == (53, 11)
    assert not (folder / "p.zarr").exists()
    got = ox.dot(x, w, dim="feature", out=str(folder / "p.zarr"), memory="64KiB", client="sync")
    summary = (
        got.attrs.get("outofcore")
        or zarr.open_group(folder / "p.zarr")[got.name].attrs["outofcore"]
    )
    assert summary["summary"]["tiles"] == planned.tiles
    with pytest.raises(InputError, match="xr.dot matches instead of multiplying"):
        ox.plan(x, x, dim="sample")
    with pytest.raises(TypeError, match="dot sets it from the dims"):
        ox.plan(x, w, dim="feature", transpose_a=True)

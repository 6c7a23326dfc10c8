"""Centring over k from panel sums (:mod:`outofcore.operands.centring`): one read of ``x``.

``xc.T @ xc`` with ``xc = x - x.mean(axis=0)`` is computed as ``x'.T @ x' - s s^T / n``
with ``x'`` shifted by a sample's means and ``s`` the panels' sums.  Compared with a
float64 numpy reference of the exact centring, on data where centring matters (means
far from 0), on data built to defeat the sample (the first rows far from the rest), on
split tiles and complex values; a damaged kept sum is computed again; anything else (a
cross-covariance of two arrays too) is centred by the exact means read first.
"""

from __future__ import annotations

import logging

import dask.array as da
import numpy as np
import pytest
import zarr

import outofcore
from outofcore.api import run_job
from outofcore.frontends.cli_output import format_summary
from outofcore.frontends.verify import verify
from outofcore.journal.records import JOURNAL_DIR, PARTIALS_DIR
from outofcore.operands.centring import PanelSums, centred_over_k
from outofcore.operands.reading import SAMPLE_SHARE, sample_means
from tests.helpers import break_chunk, restore_chunk, write_zarr

SYNC = {"client": "sync", "progress": False}


def centred(x: np.ndarray) -> np.ndarray:
    wide = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
    return wide - wide.mean(axis=0)


def assert_centred_gram(got: np.ndarray, x: np.ndarray, z: np.ndarray, bits: float) -> None:
    """``got`` equals ``xc.T @ zc`` within float32's accumulation bound over k, scaled by
    the terms' size and ``2**bits`` (the cancellation the data allows)."""
    xc, zc = centred(x), centred(z)
    expected = xc.T @ zc
    terms = (
        np.sqrt((np.abs(xc) ** 2).sum(axis=0))[:, None]
        * np.sqrt((np.abs(zc) ** 2).sum(axis=0))[None, :]
    )
    bound = 8 * np.sqrt(x.shape[0]) * 2.0**-24 * 2.0**bits * terms + 1e-30
    assert (np.abs(got - expected) <= bound).all(), np.abs(got - expected).max() / terms.max()


@pytest.fixture
def tall(tmp_path):
    """x: 997x61 float32, column means far from 0 (centring cancels about 4 bits)."""
    rng = np.random.default_rng(81)
    x = (rng.standard_normal((997, 61)) * 3 + rng.uniform(-50, 50, 61)).astype(np.float32)
    write_zarr(tmp_path / "x.zarr", x, (50, 13))
    return tmp_path, x


@pytest.mark.parametrize("splits", [None, 3, "tiles"])
def test_a_centred_gram_reads_x_once_and_equals_the_exact_centring(tall, splits):
    folder, x = tall
    xd = da.from_zarr(str(folder / "x.zarr"))
    xc = xd - xd.mean(axis=0)
    out = str(folder / "g.zarr")
    options = {"memory": "256KiB"} if splits is None else {"splits": splits}
    if splits == "tiles":  # off-diagonal tiles and their mirrors, rows written as streamed
        options = {"tile": (26, 26), "tk": 100}
        splits = None
    result = run_job(xc.T, xc, out, **SYNC, **options)
    record = result.output.attrs["outofcore"]["product"]
    (step,) = record["a_steps"]
    assert step["shift"] is True and record["symmetric"] is True
    got = result.output[...]
    assert (got == got.T).all()  # exactly symmetric, corrections included
    assert_centred_gram(got, x, x, bits=0)
    assert verify(xc.T, xc, out, client="sync").passed  # against dask's exact centring
    said = format_summary(result.summary).splitlines()[0]
    assert said.startswith("G = X.T @ X (X = stored - its mean over k, from the panel sums)")
    if splits:
        assert result.plan.splits == splits
        assert not (folder / "g.zarr" / JOURNAL_DIR / PARTIALS_DIR).exists()  # sums deleted


def test_data_built_to_defeat_the_sample_loses_at_most_its_bound(tmp_path):
    """The sample (a sixteenth of the rows, whole chunks) far from the rest: the shift is
    then at most sqrt(15) standard deviations off, so at most 4 bits cancel."""
    rng = np.random.default_rng(82)
    n = 16 * 64
    x = rng.standard_normal((n, 23)).astype(np.float32)
    x[:64] += 1000  # the sampled rows only
    write_zarr(tmp_path / "x.zarr", x, (64, 23))
    assert np.allclose(sample_means(zarr.open_array(str(tmp_path / "x.zarr")), 0),
                       x[: n // SAMPLE_SHARE].mean(axis=0))  # fmt: skip
    xd = da.from_zarr(str(tmp_path / "x.zarr"))
    xc = xd - xd.mean(axis=0)
    got = outofcore.matmul(xc.T, xc, str(tmp_path / "g.zarr"), splits=4, **SYNC)
    assert got.attrs["outofcore"]["product"]["a_steps"][0]["shift"] is True
    assert_centred_gram(got[...], x, x, bits=4)


@pytest.mark.parametrize("dtype", ["float64", "complex64"])
def test_a_cross_covariance_of_two_arrays_in_other_dtypes(tmp_path, dtype):
    rng = np.random.default_rng(83)
    x = rng.standard_normal((411, 29)) * 2 + 7
    z = rng.standard_normal((411, 17)) - 30
    if dtype == "complex64":
        x, z = x + 1j * x[::-1], z - 2j * z[::-1]
    x, z = x.astype(dtype), z.astype(dtype)
    xd = da.from_zarr(write_zarr(tmp_path / "x.zarr", x, (40, 10)))
    zd = da.from_zarr(write_zarr(tmp_path / "z.zarr", z, (30, 7)))
    xc, zc = xd - xd.mean(axis=0), zd - zd.mean(axis=0)
    out = str(tmp_path / "c.zarr")
    # 96 KiB: two tiles of panels and the slabs their elementwise steps are applied in
    got = outofcore.matmul(xc.T, zc, out, memory="96KiB", splits=2, **SYNC)
    record = got.attrs["outofcore"]["product"]
    # Two arrays: no sum of squares bounds a mean's overflow, so the means are exact.
    assert not record["a_steps"][0].get("shift") and not record["b_steps"][0].get("shift")
    sample = sample_means(zarr.open_array(str(tmp_path / "z.zarr")), 0)
    np.testing.assert_allclose(sample, z[:30].astype(complex).mean(axis=0))  # complex stays
    tolerance = 1e-12 if dtype == "float64" else 1e-5
    expected = centred(x).T @ centred(z)
    assert np.abs(got[...] - expected).max() <= tolerance * np.abs(expected).max() * 411
    assert verify(xc.T, zc, out, client="sync").passed


def test_anything_else_is_centred_by_the_exact_means(tall):
    folder, x = tall
    xd = da.from_zarr(str(folder / "x.zarr"))
    xc = xd - xd.mean(axis=0)
    cases = {
        "one side": (xc.T, xd, centred(x).T @ x.astype(np.float64)),
        "standardised": (
            (xc / xd.std(axis=0)).T,
            xc / xd.std(axis=0),
            (centred(x) / x.astype(np.float64).std(axis=0)).T
            @ (centred(x) / x.astype(np.float64).std(axis=0)),
        ),
        "means across k": (  # x's row means: a mean over the kept axis, not over k
            xd.T - xd.mean(axis=1),
            xd,
            (x.astype(np.float64).T - x.astype(np.float64).mean(axis=1)) @ x,
        ),
    }
    for number, (name, (a, b, expected)) in enumerate(cases.items()):
        got = outofcore.matmul(a, b, str(folder / f"e{number}.zarr"), memory="256KiB", **SYNC)
        record = got.attrs["outofcore"]["product"]
        steps = record.get("a_steps", []) + record.get("b_steps", [])
        assert not any(step.get("shift") for step in steps), name
        assert np.abs(got[...] - expected).max() <= 1e-4 * np.abs(expected).max(), name


def test_which_steps_centre_over_k():
    from outofcore.operands.steps import Step  # noqa: PLC0415

    shift = Step("sub", np.dtype("f4"), np.zeros(3, np.float32), axis=1, shift=True)
    exact = Step("sub", np.dtype("f4"), np.zeros(3, np.float32), axis=1)
    astype = Step("astype", np.dtype("f8"))
    assert centred_over_k((shift,), k_axis=0)
    assert centred_over_k((astype, shift), k_axis=0)
    assert not centred_over_k((shift,), k_axis=1)  # the mean runs over the other axis
    assert not centred_over_k((exact,), k_axis=0)
    assert not centred_over_k((shift, astype), k_axis=0)  # a step after the centring
    assert not centred_over_k((), k_axis=0)


def test_panel_sums_correct_a_symmetric_tile_symmetrically():
    rng = np.random.default_rng(84)
    panel = rng.standard_normal((7, 40)).astype(np.float32) + 3
    sums = PanelSums.zeros((7, 7), np.dtype("f4"))
    sums.add(panel, panel.T, same=True)
    tile = (panel @ panel.T).astype(np.float32)
    sums.correct(0, tile, 40)
    assert (tile == tile.T).all()
    wide = panel.astype(np.float64)
    wide -= wide.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(tile, wide @ wide.T, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("damage", ["flip", "delete"])
def test_a_damaged_kept_sum_is_computed_again(tall, outofcore_settings, caplog, damage):
    folder, x = tall
    xd = da.from_zarr(str(folder / "x.zarr"))
    xc = xd - xd.mean(axis=0)
    out = folder / "g.zarr"
    outofcore_settings(read_retries=0)
    broken = break_chunk(folder / "x.zarr", "19/0")  # the last rows: the last part stops
    with pytest.raises(Exception, match="19/0|decode|chunk"):
        run_job(xc.T, xc, out, splits=4, **SYNC)
    restore_chunk(broken)
    kept = sorted((out / JOURNAL_DIR / PARTIALS_DIR).glob("*/tile-0-0-k1of4/sums.npy"))
    assert kept, list((out / JOURNAL_DIR).rglob("*"))
    if damage == "flip":
        data = bytearray(kept[0].read_bytes())
        data[-8:] = bytes(b ^ 0x5A for b in data[-8:])
        kept[0].write_bytes(bytes(data))
    else:
        kept[0].unlink()
    with caplog.at_level(logging.WARNING, logger="outofcore"):
        rerun = run_job(xc.T, xc, out, splits=4, **SYNC)
    assert rerun.summary["damaged"] == ["tile-0-0-k1of4"]
    assert_centred_gram(rerun.output[...], x, x, bits=0)


def test_a_mean_of_another_array_or_axis_is_never_taken_for_the_operands_own(tmp_path):
    """Only an operand's own mean over k is centred from its panel sums: another array's
    mean, or a square array's row means broadcast along its columns, are subtracted as
    the exact vectors they are."""
    rng = np.random.default_rng(85)
    x = (rng.standard_normal((120, 120)) + 20).astype(np.float32)
    y = (rng.standard_normal((120, 120)) - 5).astype(np.float32)
    xd = da.from_zarr(write_zarr(tmp_path / "x.zarr", x, (32, 40)))
    yd = da.from_zarr(write_zarr(tmp_path / "y.zarr", y, (32, 40)))
    wide_x, wide_y = x.astype(np.float64), y.astype(np.float64)
    cases = {
        "another array's mean": (yd - xd.mean(axis=0), wide_y - wide_x.mean(axis=0)),
        "row means along columns": (xd - xd.mean(axis=1), wide_x - wide_x.mean(axis=1)),
        "the mean used twice": (  # a sample's values are never another step's vector
            (xd / xd.mean(axis=0)) - xd.mean(axis=0),
            wide_x / wide_x.mean(axis=0) - wide_x.mean(axis=0),
        ),
    }
    for number, (name, (operand, reference)) in enumerate(cases.items()):
        got = outofcore.matmul(operand.T, operand, str(tmp_path / f"c{number}.zarr"),
                               memory="128KiB", **SYNC)  # fmt: skip
        steps = got.attrs["outofcore"]["product"]["a_steps"]
        assert not any(step.get("shift") for step in steps), name
        expected = reference.T @ reference
        assert np.abs(got[...] - expected).max() <= 1e-5 * np.abs(expected).max(), name


def test_a_mean_subtracted_on_one_side_and_scaled_on_the_other_is_exact_on_both(tall):
    """One mean layer, a shift where it is subtracted, its exact values where it scales."""
    folder, x = tall
    xd = da.from_zarr(str(folder / "x.zarr"))
    m = xd.mean(axis=0)
    expression = (xd - m).T @ (xd * m)
    got = outofcore.to_zarr(expression, str(folder / "c.zarr"), memory="256KiB", **SYNC)
    steps = got.attrs["outofcore"]["product"]
    assert not any(s.get("shift") for s in steps["a_steps"] + steps["b_steps"])
    expected = expression.compute()  # dask's own float32 means, as the job's
    a, b = (np.abs(v.compute()).astype(np.float64) for v in ((xd - m).T, xd * m))
    bound = 4 * x.shape[0] * 2.0**-24 * (a @ b)  # float32 accumulation, both sides
    assert (np.abs(got[...] - expected) <= bound).all()


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, "both", "sampled"])
def test_a_centred_gram_of_x_with_nan_or_inf_is_dasks(tall, bad, dtype):
    """Issue 53: x holding NaN or ±Inf (outside the sampled rows) was refused; dask's
    compute answers NaN rows and columns where a column holds one, and the product is
    as dask's: the same NaN, the finite values close (a NaN in the sampled rows: the
    means are made exact first, the same answer).  float64 and complex128 were still
    refused on 1c76acf (sums as wide as the values: a NaN sum was taken for an overflow);
    a column holding NaN or Inf now makes its sums NaN in every dtype."""
    folder, x = tall
    x = x.astype(dtype)
    if bad == "both":
        x[900, 3], x[901, 3] = np.inf, -np.inf
    elif bad == "sampled":
        x[10, 3] = np.nan
    else:
        x[900, 3] = bad
    x[950, 40] = np.nan
    write_zarr(folder / "bad.zarr", x, (50, 13))
    xd = da.from_zarr(str(folder / "bad.zarr"))
    xc = xd - xd.mean(axis=0)
    want = (xc.T @ xc).compute()
    result = run_job(xc.T, xc, str(folder / "g.zarr"), **SYNC, memory="256KiB")
    shifted = result.output.attrs["outofcore"]["product"]["a_steps"][0].get("shift", False)
    assert shifted is (bad != "sampled")  # from the panel sums, or the exact means
    got = result.output[...]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    if dtype == "complex128":  # both parts NaN, as dask's
        np.testing.assert_array_equal(np.isnan(got.imag), np.isnan(want.imag))
    assert np.isnan(got[[3, 40], :]).all() and np.isnan(got[:, [3, 40]]).all()
    finite = np.isfinite(want)
    assert finite.sum() == (61 - 2) ** 2
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("door", ["run_job", "to_zarr"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("where", ["over k", "along k", "gram"])
def test_a_nanmean_subtracted_is_dasks_nanmean_not_a_mean(tall, where, dtype, door):
    """``x - da.nanmean(x, ...)`` skips NaN in the vector where ``x - x.mean(...)`` sums
    it: to_zarr took a nanmean for a mean and, for a mean along k, answered NaN in every
    row where dask answers NaN in one (exit status 0).  The nanmean's values are dask's."""
    folder, clean = tall
    x = clean.astype(dtype)
    x[37, 5] = np.nan
    write_zarr(folder / "nan.zarr", x, (50, 13))
    write_zarr(folder / "clean.zarr", clean.astype(dtype), (50, 13))
    xd, yd = da.from_zarr(str(folder / "nan.zarr")), da.from_zarr(str(folder / "clean.zarr"))
    if where == "over k":  # a column's nanmean, k the rows: C = xc.T @ y
        a, b = (xd - da.nanmean(xd, axis=0)).T, yd
    elif where == "along k":  # each row's nanmean, k the rows of x: A = x.T - those
        a, b = xd.T - da.nanmean(xd, axis=1), yd
    else:
        b = xd - da.nanmean(xd, axis=0)
        a = b.T
    want = (a @ b).compute()
    out = str(folder / f"{where}.zarr")
    if door == "to_zarr":
        got = outofcore.to_zarr(a @ b, out, client="sync", memory="256KiB")[...]
    else:
        got = run_job(a, b, out, **SYNC, memory="256KiB").output[...]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isfinite(want).sum() >= want.size // 2
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-3, atol=1e-2)

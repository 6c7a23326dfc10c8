"""What ``outofcore.to_zarr`` hands to dask.array is visible (issue 55, item 2): a product
it cannot run out of core is an ``outofcore.FallbackWarning`` naming the part and why (was
an INFO log record nobody sees), and an ``outofcore.errors.FallbackError`` under
``fallback="error"`` or ``dask.config.set({"outofcore.fallback": "error"})``, before
anything is written."""

from __future__ import annotations

import logging
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

import outofcore
from outofcore.errors import FallbackError, InputError
from tests.helpers import write_zarr


@pytest.fixture
def x(tmp_path):
    rng = np.random.default_rng(55)
    write_zarr(tmp_path / "x.zarr", rng.standard_normal((80, 30)).astype("float64"), (40, 15))
    return da.from_zarr(str(tmp_path / "x.zarr"))


def test_a_product_dask_computes_is_a_warning_naming_the_part_and_why(x, tmp_path, caplog):
    """The issue's ``outofcore.to_zarr((x ** 2).T @ x, "fb.zarr")``."""
    with pytest.warns(outofcore.FallbackWarning) as said:
        out = outofcore.to_zarr((x**2).T @ x, str(tmp_path / "fb.zarr"), client="sync")
    [warning] = said.list
    assert issubclass(outofcore.FallbackWarning, UserWarning)
    text = str(warning.message)
    assert "is a matmul whose operands compute" in text and "without outofcore's memory" in text
    assert "float64 30x30" in text  # the part: its name, dtype and shape
    assert "fallback='error' refuses it" in text  # and what to do
    assert warning.filename == __file__  # it points at the caller's line, not outofcore's
    np.testing.assert_allclose(out[...], ((x**2).T @ x).compute(), rtol=1e-12)


def test_a_product_below_the_top_is_a_fallback_too(x, tmp_path):
    with pytest.warns(outofcore.FallbackWarning, match="has a matmul below its top"):
        out = outofcore.to_zarr((x.T @ x) + 1, str(tmp_path / "fb.zarr"), client="sync")
    np.testing.assert_allclose(out[...], ((x.T @ x) + 1).compute(), rtol=1e-12)


def test_no_product_is_stored_by_dask_silently(x, tmp_path, caplog):
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="outofcore"):
        warnings.simplefilter("error")
        out = outofcore.to_zarr(x + 1, str(tmp_path / "plus.zarr"), client="sync")
    np.testing.assert_array_equal(out[...], (x + 1).compute())
    assert any("has no matrix product" in r.getMessage() for r in caplog.records)


def test_a_product_outofcore_runs_warns_of_nothing(x, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outofcore.to_zarr(x.T @ x, str(tmp_path / "g.zarr"), client="sync")


def test_fallback_error_refuses_before_anything_is_written(x, tmp_path):
    out = tmp_path / "refused.zarr"
    with pytest.raises(FallbackError, match="is a matmul whose operands compute") as refused:
        outofcore.to_zarr((x**2).T @ x, str(out), client="sync", fallback="error")
    assert isinstance(refused.value, InputError) and refused.value.exit_status == 2
    assert "fallback='error'" in str(refused.value)
    assert not out.exists()
    later = outofcore.to_zarr((x**2).T @ x, str(out), compute=False, fallback="error")
    with pytest.raises(FallbackError):
        later.compute(scheduler="sync")
    assert not out.exists()


def test_the_setting_is_dask_config_and_the_keyword_wins(x, tmp_path):
    out = tmp_path / "set.zarr"
    with dask.config.set({"outofcore.fallback": "error"}):
        with pytest.raises(FallbackError):
            outofcore.to_zarr((x**2).T @ x, str(out), client="sync")
        assert not out.exists()
        with pytest.warns(outofcore.FallbackWarning):
            outofcore.to_zarr((x**2).T @ x, str(out), client="sync", fallback="warn")
    with dask.config.set({"outofcore.fallback": "allow"}), warnings.catch_warnings():
        warnings.simplefilter("error")
        stored = outofcore.to_zarr((x**2).T @ x, str(out), client="sync", overwrite=True)
    assert zarr.open_array(str(out)).attrs["outofcore"]["stored_by"] == "dask.array.to_zarr"
    assert stored.shape == (30, 30)


def test_a_bad_fallback_is_a_value_error_and_a_wrong_type_a_type_error(x, tmp_path):
    with pytest.raises(ValueError, match="fallback = 'sometimes': need one of warn, error"):
        outofcore.to_zarr(x + 1, str(tmp_path / "a.zarr"), fallback="sometimes")
    with pytest.raises(TypeError, match="fallback = 1"):
        outofcore.to_zarr(x + 1, str(tmp_path / "a.zarr"), fallback=1)
    named = r"dask.config's outofcore.fallback='sometimes'"
    setting = dask.config.set({"outofcore.fallback": "sometimes"})
    with setting, pytest.raises(ValueError, match=named):
        outofcore.to_zarr(x + 1, str(tmp_path / "a.zarr"))
    assert not (tmp_path / "a.zarr").exists()


def test_plan_of_one_dask_array_says_what_to_zarr_runs_and_what_dask_computes(x, tmp_path):
    """Issue 55, item 2: ``outofcore.plan`` takes what ``to_zarr`` takes. Where the product
    at the top runs out of core, its plan (the same as of the stored operands, naming the
    product); else why dask.array computes it. Nothing is written."""
    from outofcore.frontends.plan_report import DaskComputes

    path = str(tmp_path / "x.zarr")
    centred = x - x.mean(axis=0)
    runs = outofcore.plan(centred.T @ centred / 79, memory="256KiB", client="sync")
    direct = outofcore.plan(path, path, transpose_a=True, memory="256KiB", client="sync")
    assert isinstance(runs, outofcore.PlanReport)
    assert (runs.tiles, runs.tile, runs.tk) == (direct.tiles, direct.tile, direct.tk)
    assert runs.summary["product"]["transpose_a"] is True
    assert runs.summary["product"]["alpha"] == pytest.approx(1 / 79)
    assert runs.runs.startswith("x's matmul of ") and ".T and " in runs.runs
    assert "x.zarr" in runs.runs
    assert str(runs).startswith(f"outofcore runs {runs.runs} as a job:\n")
    below = outofcore.plan((x.T @ x) + 1)
    assert isinstance(below, DaskComputes) and below.falls_back
    assert "has a matmul below its top" in below.why and "dask.array computes x" in str(below)
    none = outofcore.plan(x + 1)
    assert isinstance(none, DaskComputes) and not none.falls_back
    assert none.why == "has no matrix product"
    with pytest.raises(InputError, match="plan takes two operands, or one dask array"):
        outofcore.plan(np.ones((3, 3)))
    with pytest.raises(InputError, match="reads its transposes from the array"):
        outofcore.plan(x.T @ x, transpose_a=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.zarr"]  # nothing written

"""Computed operands in ``outofcore.to_zarr`` follow numpy's semantics (issue 42, item 1).

Each step's dtype and values are numpy's own for that ufunc (true division is float,
``astype`` rounds and overflows as numpy does), and a centred Gram that cannot reproduce
numpy's NaN/Inf is refused, never approximated.  dask's own compute is the reference.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import zarr

import outofcore
from outofcore.errors import InputError
from tests.helpers import write_zarr


def _stored(folder, x: np.ndarray, chunks: tuple[int, int]) -> da.Array:
    write_zarr(folder / "x.zarr", x, chunks)
    return da.from_zarr(str(folder / "x.zarr"))


def _complete(path) -> bool:
    try:
        return bool(zarr.open_array(str(path), mode="r").attrs["outofcore"].get("complete"))
    except (FileNotFoundError, KeyError):
        return False


def test_true_division_of_integers_is_float_as_numpys(tmp_path):
    x = np.arange(-30, 36, dtype=np.int32).reshape(11, 6) * 7
    xd = _stored(tmp_path, x, (4, 4))
    expr = (xd / 2).T @ xd
    out = outofcore.to_zarr(expr, str(tmp_path / "g.zarr"), client="sync", progress=False)
    want = expr.compute()
    assert want.dtype == np.float64 and out.dtype == want.dtype
    np.testing.assert_array_equal(out[...], want)  # halves kept: 3.5, not 3
    assert out.attrs["outofcore"]["product"]["exact"] is False  # the record is truthful


def test_astype_to_a_narrower_float_rounds_and_overflows_as_numpys(tmp_path):
    x = np.array([[1.0001, 70000.0, 3.0], [0.1, 2.0, -1e6], [5.0, 6.0, 7.0]], np.float64)
    xd = _stored(tmp_path, x, (2, 2))
    expr = xd.astype("float16").T @ xd
    out = outofcore.to_zarr(expr, str(tmp_path / "g.zarr"), client="sync", progress=False)
    want = expr.compute()
    assert out.dtype == want.dtype
    got = out[...]
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))  # 70000 -> inf in float16
    assert np.isinf(want).any()
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12)  # 1.0001 -> 1.0


def test_a_centred_gram_with_an_inf_outside_the_sample_is_numpys_or_refused(tmp_path):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((400, 24))
    x[300, 5] = np.inf  # far from the first sixteenth (the sample)
    xd = _stored(tmp_path, x, (50, 8))
    xc = xd - xd.mean(axis=0)
    expr = xc.T @ xc
    want = expr.compute()
    path = tmp_path / "g.zarr"
    try:
        out = outofcore.to_zarr(expr, str(path), client="sync", progress=False)
    except InputError as error:
        assert "non-finite" in str(error) and "x.mean(axis=0).compute()" in str(error)
        assert not _complete(path)
        mu = xd.mean(axis=0).compute()  # the way the message gives: numpy's NaN
        exact = (xd - mu).T @ (xd - mu)
        out = outofcore.to_zarr(exact, str(path), client="sync", progress=False, overwrite=True)
    got = out[...]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))  # 47 NaN
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    assert np.isnan(want).sum() == 47

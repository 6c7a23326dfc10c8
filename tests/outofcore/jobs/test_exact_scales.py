"""Whole-number scales of integer products are exact integers modulo 2**64 (issue 42).

``--alpha 9007199254740993`` (2**53 + 1) was rounded through float64 (40 of 40
elements wrong, exit 0, and verify rounded the same way and passed); ``2**63 - 1``
was wrong too and verify then exited 3 with an OverflowError.  The reference is
numpy's int64 arithmetic, which wraps modulo 2**64; a scale no 64-bit integer holds
is refused, naming it (numpy raises OverflowError for it too).
"""

from __future__ import annotations

import json
import logging

import dask.array as da
import numpy as np
import pytest
import zarr

import outofcore
from outofcore.errors import InputError
from outofcore.frontends.cli_parser import parse_scale
from outofcore.frontends.verify import verify
from outofcore.operands.dtypes import product_types
from outofcore.operands.scales import check_scale
from tests.helpers import cli, write_zarr

SYNC = {"client": "sync", "progress": False}
HUGE = [2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1, -(2**53) - 3]


def wrapped(value: int) -> np.uint64:
    """``value`` modulo 2**64, as a uint64 (numpy's int64 and uint64 products wrap so)."""
    return np.uint64(value % 2**64)


def scaled_reference(alpha: int, a: np.ndarray, b: np.ndarray, beta: int = 0, d=None):
    """``alpha * a @ b + beta * d`` in int64, modulo 2**64 (exact, never through float)."""
    product = (a.astype(np.int64) @ b.astype(np.int64)).view(np.uint64)
    with np.errstate(over="ignore"):
        out = product * wrapped(alpha)
        if d is not None:
            out = out + d.astype(np.int64).view(np.uint64) * wrapped(beta)
    return out.view(np.int64)


@pytest.fixture
def operands(tmp_path):
    rng = np.random.default_rng(42)
    a = rng.integers(-9, 9, size=(5, 8), dtype=np.int64)
    b = rng.integers(-9, 9, size=(8, 8), dtype=np.int64)
    d = rng.integers(-(2**62), 2**62, size=(5, 8), dtype=np.int64)
    paths = {
        n: write_zarr(tmp_path / f"{n}.zarr", x, (3, 3))
        for n, x in zip("abd", (a, b, d), strict=True)
    }
    return tmp_path, (a, b, d), paths


@pytest.mark.parametrize("alpha", HUGE)
def test_a_whole_scale_beyond_2_53_is_exact_and_verify_agrees(operands, alpha):
    folder, (a, b, _), paths = operands
    c = outofcore.matmul(paths["a"], paths["b"], str(folder / "c.zarr"), alpha=alpha, **SYNC)
    expected = scaled_reference(alpha, a, b)
    np.testing.assert_array_equal(c[...], expected)  # 40 of 40 were wrong at 2**53 + 1
    assert c.attrs["outofcore"]["product"]["alpha"] == alpha  # recorded exactly
    report = verify(paths["a"], paths["b"], c, alpha=alpha, seed=1)  # was OverflowError
    assert report.passed and report.exact, report
    # The product rounded through float (what was written before) fails.
    rounded = scaled_reference(int(float(alpha)), a, b)
    if (rounded != expected).any():
        c[...] = rounded
        assert not verify(paths["a"], paths["b"], c, alpha=alpha, seed=1).passed


@pytest.mark.parametrize("beta", [2**53 + 1, 2**63 - 1, 2**64 - 1])
def test_a_whole_beta_beyond_2_53_is_exact(operands, beta):
    folder, (a, b, d), paths = operands
    c = outofcore.matmul(
        paths["a"], paths["b"], str(folder / "c.zarr"), beta=beta, addend=paths["d"], **SYNC
    )
    np.testing.assert_array_equal(c[...], scaled_reference(1, a, b, beta, d))
    report = verify(paths["a"], paths["b"], c, beta=beta, addend=paths["d"], seed=2)
    assert report.passed, report
    c[1, 2] = c[1, 2] + 1
    assert not verify(paths["a"], paths["b"], c, beta=beta, addend=paths["d"], seed=2).passed


@pytest.mark.parametrize("alpha", [2**64, -(2**63) - 1, 10**30, float(2**70)])
def test_a_scale_no_64_bit_integer_holds_is_refused_naming_it(operands, alpha):
    folder, _, paths = operands
    with pytest.raises(InputError, match=rf"alpha = {int(alpha)} is beyond every 64-bit"):
        outofcore.matmul(paths["a"], paths["b"], str(folder / "c.zarr"), alpha=alpha, **SYNC)
    assert not (folder / "c.zarr").exists()
    with pytest.raises(InputError, match="beyond every 64-bit"):
        verify(paths["a"], paths["b"], paths["a"], alpha=alpha)


def test_a_small_integer_product_keeps_huge_scales_exact(tmp_path):
    """int8 inputs are accumulated in float64 while the bound allows; a huge scale moves
    them to the 64-bit path (exact), never to a float64 product of a rounded scale."""
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 127, size=(4, 6), dtype=np.int8)
    b = rng.integers(-128, 127, size=(6, 3), dtype=np.int8)
    za, zb = write_zarr(tmp_path / "a.zarr", a, (2, 4)), write_zarr(tmp_path / "b.zarr", b, (4, 2))
    c = outofcore.matmul(za, zb, str(tmp_path / "c.zarr"), alpha=2**53 + 1, **SYNC)
    np.testing.assert_array_equal(c[...], scaled_reference(2**53 + 1, a, b))
    assert product_types("int8", "int8", 6, alpha=2**53 + 1).limbs is not None


def test_scales_are_parsed_and_checked_exactly():
    assert parse_scale("9007199254740993") == 9007199254740993
    assert isinstance(parse_scale("9007199254740993"), int)
    assert parse_scale("9007199254740993.0") == 9007199254740993  # no float in between
    assert parse_scale(str(2**63 - 1)) == 2**63 - 1
    assert (
        parse_scale("2.5") == 2.5 and parse_scale("1+2j") == 1 + 2j and parse_scale("-0.5") == -0.5
    )
    assert check_scale(np.uint64(2**64 - 1), "alpha") == 2**64 - 1
    assert check_scale(2**63 - 1, "alpha") == 2**63 - 1
    with pytest.raises(InputError, match="alpha is an integer of 1101 bits"):
        check_scale(2**1100, "alpha")


def test_the_command_line_computes_verifies_and_says_a_huge_scale_exactly(operands):
    folder, (a, b, d), _ = operands
    inputs = [str(folder / "a.zarr"), str(folder / "b.zarr")]
    c = str(folder / "c.zarr")
    scale = [
        "--alpha", str(2**63 - 1), "--beta", "9007199254740993", "--addend",
        str(folder / "d.zarr"),
    ]  # fmt: skip
    done = cli("matmul", *inputs, "-o", c, *scale, "--scheduler", "sync", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["product"]["alpha"] == 2**63 - 1
    assert summary["product"]["beta"] == 9007199254740993
    expected = scaled_reference(2**63 - 1, a, b, 9007199254740993, d)
    np.testing.assert_array_equal(zarr.open_array(c, mode="r")[...], expected)
    checked = cli("verify", *inputs, c, *scale)
    assert checked.returncode == 0, checked.stdout + checked.stderr  # was 3: OverflowError
    assert "PASSED" in checked.stdout
    refused = cli("matmul", *inputs, "-o", str(folder / "e.zarr"), "--alpha", str(2**64))
    assert refused.returncode == 2, refused.stderr
    assert f"alpha = {2**64} is beyond every 64-bit integer" in refused.stderr
    refused = cli("verify", *inputs, c, "--alpha", str(2**64))
    assert refused.returncode == 2 and "beyond every 64-bit" in refused.stderr


def test_a_huge_scale_inside_to_zarr_is_exact(operands, caplog):
    folder, (a, b, _), _ = operands
    x, y = (da.from_zarr(str(folder / f"{n}.zarr")) for n in "ab")
    caplog.set_level(logging.INFO, logger="outofcore")
    for scale in (2**53 + 1, 2**63 - 1):
        out = outofcore.to_zarr((x @ y) * scale, folder / f"s{scale}.zarr", **SYNC)
        assert "runs as an outofcore job" in caplog.text
        np.testing.assert_array_equal(out[...], scaled_reference(scale, a, b))
        np.testing.assert_array_equal(out[...], ((x @ y) * scale).compute())  # dask's own


@pytest.mark.parametrize("scale", [np.inf, np.nan])
def test_a_non_finite_scale_inside_to_zarr_is_stored_by_dask(tmp_path, scale):
    """``(x.T @ x) * inf``: outofcore takes finite scales, so dask computes it (it was
    an OverflowError from ``int(inf)``)."""
    rng = np.random.default_rng(9)
    write_zarr(tmp_path / "x.zarr", rng.standard_normal((5, 3)), (2, 2))
    x = da.from_zarr(str(tmp_path / "x.zarr"))
    with pytest.warns(outofcore.FallbackWarning, match="finite scales") as said:
        out = outofcore.to_zarr((x.T @ x) * scale, tmp_path / "g.zarr", **SYNC)
    assert "dask.array" in str(said[0].message)
    np.testing.assert_array_equal(out[...], ((x.T @ x) * scale).compute())


def test_the_summary_line_says_a_huge_scale_exactly(operands):
    folder, _, _ = operands
    inputs = [str(folder / "a.zarr"), str(folder / "b.zarr")]
    done = cli(
        "matmul", *inputs, "-o", str(folder / "c.zarr"), "--alpha", "9007199254740993",
        "--scheduler", "sync",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "C = 9007199254740993*A @ B" in done.stdout, done.stdout


@pytest.mark.parametrize(
    "options",
    [{"alpha": 0}, {"alpha": 2}, {"alpha": 2**53 + 1}, {"beta": 1, "addend": "int8"}],
)
def test_a_scaled_bool_product_is_refused(tmp_path, options):
    """numpy's ``2 * (a @ b)`` of bool a, b scales the bool (whether any of the ands is
    true): 0 or 2.  outofcore wrote the bool, ignoring alpha (alpha = 0 gave True), or for
    alpha beyond 2**53 the count of the ands times alpha."""
    a = np.array([[True, True], [False, True]])
    za = write_zarr(tmp_path / "a.zarr", a, (1, 2))
    if "addend" in options:
        options = {
            **options,
            "addend": write_zarr(tmp_path / "d.zarr", np.ones((2, 2), "int8"), (1, 1)),
        }
    with pytest.raises(InputError, match="A and B are bool"):
        outofcore.matmul(za, za, str(tmp_path / "c.zarr"), **options, **SYNC)
    assert not (tmp_path / "c.zarr").exists()
    c = outofcore.matmul(za, za, str(tmp_path / "c.zarr"), **SYNC)  # alpha = 1: numpy's bool
    np.testing.assert_array_equal(c[...], a @ a)

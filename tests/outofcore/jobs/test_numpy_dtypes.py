"""numpy's matmul for every pair of bool, integer, float and complex dtypes (issue 30).

numpy is the reference: integer and bool results must equal, bit for bit, numpy's
product computed in 64 bits (``np.matmul(a.astype(W), b.astype(W))``, W uint64 where
numpy's result is unsigned, else int64; wrapping modulo 2**64), float and complex ones
the float64 / complex128 product within the rounding bound.  Every job runs on ragged
chunks under the smallest budget its chunks allow.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import numpy as np
import pytest
import zarr

import outofcore
from outofcore.api import run_job
from outofcore.errors import InputError
from outofcore.frontends.verify import verify
from outofcore.operands.dtypes import product_types
from outofcore.operands.random_values import random_values
from tests.helpers import assert_gemm_close, cli, smallest_budget, write_zarr

DTYPES = [
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]
PAIRS = list(itertools.product(DTYPES, DTYPES))
from tests.helpers import ROOT  # noqa: E402

#: Odd shapes, ragged chunks: m = 13, k = 17, n = 11 in chunks that divide none.
A_SHAPE, A_CHUNKS, B_SHAPE, B_CHUNKS = (13, 17), (5, 6), (17, 11), (7, 4)


def numpy_64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy's product of ``a`` and ``b`` computed in 64 bits (bool stays bool)."""
    result = np.result_type(a, b)
    if result.kind == "b":
        return np.matmul(a, b)
    wide = np.uint64 if result.kind == "u" else np.int64
    return np.matmul(a.astype(wide), b.astype(wide))


def values(rng: np.random.Generator, shape: tuple[int, int], dtype: str) -> np.ndarray:
    """Integers over the dtype's whole range (so 64-bit products wrap), normal floats."""
    return random_values(rng, shape, np.dtype(dtype))


@pytest.mark.parametrize(("a_dtype", "b_dtype"), PAIRS)
def test_every_pair_is_typed_as_numpy_types_it(a_dtype, b_dtype):
    types = product_types(a_dtype, b_dtype, 1000)
    result = np.result_type(a_dtype, b_dtype)
    if result.kind in "biu":  # exact: bool stays bool, integers are integers
        assert types.exact
        assert types.output.kind == ("b" if result.kind == "b" else types.output.kind)
        assert types.output.kind in ("b" if result.kind == "b" else "iu")
        if types.limbs is not None:  # wider than float64 holds: W, as numpy's 64 bits
            assert types.output == (np.uint64 if result.kind == "u" else np.int64)
    else:  # float16 is summed in float32, the rest in numpy's result dtype
        assert not types.exact
        assert types.compute == (np.float32 if result == np.float16 else result)


@pytest.mark.parametrize(("a_dtype", "b_dtype"), PAIRS)
def test_every_pair_equals_numpy(tmp_path, a_dtype, b_dtype):
    rng = np.random.default_rng(DTYPES.index(a_dtype) * 31 + DTYPES.index(b_dtype))
    a, b = values(rng, A_SHAPE, a_dtype), values(rng, B_SHAPE, b_dtype)
    za, zb = (
        write_zarr(tmp_path / "a.zarr", a, A_CHUNKS),
        write_zarr(tmp_path / "b.zarr", b, B_CHUNKS),
    )
    budget = smallest_budget(za, zb, str(tmp_path / "probe.zarr"))
    c = outofcore.matmul(
        za, zb, str(tmp_path / "c.zarr"), client="sync", memory=budget, progress=False
    )
    got = c[...]
    result = np.result_type(a_dtype, b_dtype)
    if result.kind in "biu":
        expected = numpy_64(a, b)
        if got.dtype != expected.dtype:  # a narrower output holds every value exactly
            assert got.dtype.kind in "iu" and not c.attrs["outofcore"]["product"].get("wraps")
            got = got.astype(expected.dtype)
        np.testing.assert_array_equal(got, expected)
    else:
        # numpy converts integers to the float result first (int64 with uint64: float64)
        accumulated = np.float32 if result == np.float16 else result
        assert_gemm_close(got, a.astype(result), b.astype(result), accumulated_in=accumulated)


@pytest.mark.parametrize("dtype", ["int64", "uint64", "int32", "uint32"])
def test_wrapping_products_equal_numpy_bit_for_bit(tmp_path, dtype):
    """Values at the ends of the range, k deep: sums far beyond 2**64 wrap as numpy's do."""
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype)
    ends = np.array([info.min, info.max, info.max - 1, info.min + 1], dtype=dtype)
    a = rng.choice(ends, size=(9, 301))
    b = rng.choice(ends, size=(301, 8))
    za, zb = (
        write_zarr(tmp_path / "a.zarr", a, (4, 37)),
        write_zarr(tmp_path / "b.zarr", b, (41, 3)),
    )
    job = run_job(za, zb, str(tmp_path / "c.zarr"), client="sync", memory="4MiB", progress=False)
    np.testing.assert_array_equal(job.output[...], numpy_64(a, b))
    product = job.output.attrs["outofcore"]["product"]
    assert product["wraps"] is True and product["limbs"] == [np.dtype(dtype).itemsize // 2] * 2
    assert product["exact"] is True and product["output"] == str(numpy_64(a, b).dtype)


def test_scales_and_addend_wrap_as_numpy(tmp_path):
    rng = np.random.default_rng(3)
    a, b = values(rng, (11, 29), "int64"), values(rng, (29, 7), "int32")
    d = values(rng, (11, 7), "int64")
    paths = [
        write_zarr(tmp_path / f"{n}.zarr", x, (5, 6)) for n, x in zip("abd", (a, b, d), strict=True)
    ]
    c = outofcore.matmul(
        paths[0],
        paths[1],
        str(tmp_path / "c.zarr"),
        alpha=-3,
        beta=5,
        addend=paths[2],
        client="sync",
        memory="4MiB",
        progress=False,
    )
    with np.errstate(over="ignore"):
        expected = np.int64(-3) * (a @ b.astype(np.int64)) + np.int64(5) * d
    np.testing.assert_array_equal(c[...], expected)


@pytest.mark.parametrize("splits", [1, 3])
def test_gram_and_split_k_of_wide_integers_are_exact(tmp_path, splits):
    rng = np.random.default_rng(5 + splits)
    x = values(rng, (97, 23), "int32")
    zx = write_zarr(tmp_path / "x.zarr", x, (10, 7))
    g = outofcore.gram(
        zx,
        str(tmp_path / "g.zarr"),
        client="sync",
        memory="64KiB",
        splits=splits,
        tile=(7, 7),
        progress=False,
    )
    np.testing.assert_array_equal(g[...], numpy_64(x.T, x))


def test_limb_temporaries_are_in_the_memory_contract(tmp_path):
    """A wide integer product's plan counts its limbs: it needs more than a float64 one."""
    rng = np.random.default_rng(1)
    narrow = write_zarr(tmp_path / "f.zarr", values(rng, (64, 64), "float64"), (16, 16))
    wide = write_zarr(tmp_path / "i.zarr", values(rng, (64, 64), "int64"), (16, 16))
    needs = [smallest_budget(x, x, str(tmp_path / "c.zarr")) for x in (narrow, wide)]
    assert needs[1] > needs[0]


def test_out_dtype_takes_what_numpy_out_takes(tmp_path):
    rng = np.random.default_rng(2)
    a, b = values(rng, (6, 5), "float32"), values(rng, (5, 4), "float32")
    za, zb = write_zarr(tmp_path / "a.zarr", a, (4, 4)), write_zarr(tmp_path / "b.zarr", b, (4, 4))
    c = outofcore.matmul(
        za, zb, str(tmp_path / "c.zarr"), out_dtype="complex64", client="sync", progress=False
    )
    assert c.dtype == np.complex64 and not c[...].imag.any()
    assert_gemm_close(c[...].real, a, b, accumulated_in="float32")
    ia, ib = values(rng, (6, 5), "int32"), values(rng, (5, 4), "int32")
    zi, zj = (
        write_zarr(tmp_path / "i.zarr", ia, (4, 4)),
        write_zarr(tmp_path / "j.zarr", ib, (4, 4)),
    )
    f = outofcore.matmul(
        zi, zj, str(tmp_path / "f.zarr"), out_dtype="float64", client="sync", progress=False
    )
    np.testing.assert_array_equal(f[...], numpy_64(ia, ib).astype(np.float64))
    with pytest.raises(InputError, match="int32 does not hold"):  # a narrowing that would wrap
        outofcore.matmul(zi, zj, str(tmp_path / "n.zarr"), out_dtype="int32", client="sync")
    with pytest.raises(InputError, match="float32 result"):  # numpy's same_kind refuses too
        outofcore.matmul(za, zb, str(tmp_path / "n.zarr"), out_dtype="int64", client="sync")


def test_integer_product_verifies_exactly_and_a_wrong_element_fails(tmp_path):
    rng = np.random.default_rng(4)
    a, b = values(rng, (21, 15), "uint32"), values(rng, (15, 12), "uint32")
    za, zb = write_zarr(tmp_path / "a.zarr", a, (8, 8)), write_zarr(tmp_path / "b.zarr", b, (8, 8))
    c = outofcore.matmul(za, zb, str(tmp_path / "c.zarr"), client="sync", progress=False)
    report = verify(za, zb, str(tmp_path / "c.zarr"), rounds=8, seed=1)
    assert report.passed and report.exact
    c[3, 4] = c[3, 4] + np.uint64(1)
    assert not verify(za, zb, str(tmp_path / "c.zarr"), rounds=8, seed=1).passed


def test_bool_product_is_any_of_the_ands_and_verify_says_why_it_cannot(tmp_path):
    rng = np.random.default_rng(8)
    a, b = rng.random((40, 300)) < 0.01, rng.random((300, 30)) < 0.01
    za, zb = (
        write_zarr(tmp_path / "a.zarr", a, (16, 64)),
        write_zarr(tmp_path / "b.zarr", b, (64, 16)),
    )
    c = outofcore.matmul(za, zb, str(tmp_path / "c.zarr"), client="sync", progress=False)
    assert c.dtype == np.bool_
    np.testing.assert_array_equal(c[...], a @ b)
    assert c[...].any() and not c[...].all()  # sparse enough that both values occur
    with pytest.raises(InputError, match="bool product"):
        verify(za, zb, str(tmp_path / "c.zarr"))


def test_bool_product_into_integers_is_numpys_zero_or_one(tmp_path):
    """numpy casts its bool product to an integer out=: 0 or 1, not a count of the ands."""
    rng = np.random.default_rng(9)
    a, b = rng.random((23, 40)) < 0.2, rng.random((40, 17)) < 0.2
    za, zb = (
        write_zarr(tmp_path / "a.zarr", a, (8, 16)),
        write_zarr(tmp_path / "b.zarr", b, (16, 8)),
    )
    c = outofcore.matmul(za, zb, str(tmp_path / "c.zarr"), out_dtype="int32", client="sync")
    expected = np.empty((23, 17), np.int32)
    np.matmul(a, b, out=expected)
    np.testing.assert_array_equal(c[...], expected)
    assert c[...].max() == 1 and (a.astype(int) @ b.astype(int)).max() > 1
    with pytest.raises(InputError, match="bool product"):
        verify(za, zb, str(tmp_path / "c.zarr"))


def test_products_typed_before_limbs_keep_their_job_identity():
    """A journal written before wide integers resumes: its product's record is unchanged."""
    keys = set(product_types("float32", "int16", 100).summary())
    assert keys == {"compute", "output", "exact", "bound"}
    assert set(product_types("int16", "int16", 100).summary()) == keys


@pytest.mark.parametrize("dtype", ["int32", "uint64", "bool"])
def test_command_line_random_matmul_plan_and_verify(tmp_path, dtype):
    a, b, c = (str(tmp_path / f"{n}.zarr") for n in "abc")
    for path, shape in ((a, "37,29"), (b, "29,23")):
        done = cli(
            "random", path, "--shape", shape, "--chunks", "10,7", "--dtype", dtype, "--seed", "3"
        )
        assert done.returncode == 0, done.stderr
    plan = cli("plan", a, b, "--memory", "1MiB", "--json")
    assert plan.returncode == 0, plan.stderr
    product = json.loads(plan.stdout)["product"]
    assert product["exact"] is True
    assert product.get("limbs") == (
        [4, 4] if dtype == "uint64" else [2, 2] if dtype == "int32" else None
    )
    run = cli("matmul", a, b, "-o", c, "--memory", "1MiB", "--quiet")
    assert run.returncode == 0, run.stderr
    za, zb = zarr.open_array(a, mode="r"), zarr.open_array(b, mode="r")
    np.testing.assert_array_equal(zarr.open_array(c, mode="r")[...], numpy_64(za[...], zb[...]))
    checked = cli("verify", a, b, c)
    if dtype == "bool":
        assert checked.returncode != 0 and "bool product" in checked.stderr
    else:
        assert checked.returncode == 0, checked.stderr


def test_wide_integer_benchmark_runs_and_agrees_with_numpy(tmp_path):
    """benchmarks/wide_integers.py, smallest size: every system's result equals numpy's."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.wide_integers",
            "--n",
            "96",
            "--chunk",
            "40",
            "--repeats",
            "1",
            "--data-dir",
            str(tmp_path / "data"),
            "--out-dir",
            str(tmp_path / "results"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "results" / "wide-integers-96.json").read_text())
    assert result["agree"] is True and set(result["median_seconds"]) == {
        "numpy",
        "dask",
        "outofcore",
    }

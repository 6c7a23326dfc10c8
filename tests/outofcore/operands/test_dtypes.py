"""Every dtype, mixed pairs, transposes, alpha/beta/addend: rules, jobs on a real cluster, verify.

The dtype rules (:mod:`outofcore.operands.dtypes`) are checked as a table; the jobs run
on one 2-worker LocalCluster (worker processes) against a float64 / complex128
numpy reference, exact for integers, on odd shapes and ragged chunks.
"""

from __future__ import annotations

import numpy as np
import pytest

import outofcore
from outofcore.errors import InputError
from outofcore.frontends.verify import verify
from outofcore.jobs.opening import open_product
from outofcore.journal.identity import differences, job_identity
from outofcore.operands.dtypes import product_types
from outofcore.operands.product import Product
from outofcore.operands.random_values import random_values
from tests.helpers import assert_gemm_close, write_zarr


@pytest.mark.parametrize(
    ("a", "b", "addend", "compute", "output", "bound"),
    [
        ("float16", "float16", None, "float32", "float32", None),
        ("float32", "float64", None, "float64", "float64", None),
        ("int8", "float32", None, "float32", "float32", None),
        ("int16", "float16", None, "float32", "float32", None),
        ("float16", "complex64", None, "complex64", "complex64", None),
        ("complex64", "float64", None, "complex128", "complex128", None),
        # int8: |a*b| <= 128*128 = 2**14, so k = 1000 reaches 16384000: int32.
        ("int8", "int8", None, "float64", "int32", 1000 * 2**14),
        ("uint8", "int8", None, "float64", "int32", 1000 * 255 * 128),
        # int16: 2**30 per product; two of them pass int32.
        ("int16", "int16", None, "float64", "int64", 1000 * 2**30),
        ("int8", "int8", "int32", "float64", "int64", 1000 * 2**14 + 2 * 2**31),
    ],
)
def test_dtype_rules(a, b, addend, compute, output, bound):
    types = product_types(a, b, 1000, addend=addend, beta=2 if addend else 0)
    assert (str(types.compute), str(types.output), types.bound) == (compute, output, bound)
    assert types.exact == (bound is not None)
    assert types.unit_roundoff() == (0.0 if types.exact else np.finfo(compute).eps / 2)


def test_exactness_rule_at_its_edge():
    # int16: 2**30 per product; k = 2**23 reaches exactly 2**53 (float64, exact there);
    # one more goes through 16-bit limbs in int64 (exact, modulo 2**64).
    assert product_types("int16", "int16", 2**23).bound == 2**53
    assert product_types("int16", "int16", 2**23).limbs is None
    wide = product_types("int16", "int16", 2**23 + 1)
    assert (str(wide.compute), str(wide.output), wide.limbs.counts) == ("int64", "int64", (1, 1))
    assert wide.exact and not wide.wraps  # 2**53 + 2**30 fits in int64
    # int8 goes through float64 for every k up to 2**39.
    assert product_types("int8", "int8", 2**39).limbs is None
    assert product_types("int8", "int8", 2**39 + 1).limbs is not None
    # alpha scales the bound; it must be a whole number.
    with pytest.raises(InputError, match="alpha = 2.5"):
        product_types("int8", "int8", 10, alpha=2.5)


def test_out_dtype_rules():
    assert product_types("float16", "float16", 5, out_dtype="float16").output_roundoff() == (
        np.finfo(np.float16).eps / 2
    )
    assert product_types("float32", "float32", 5).output_roundoff() == 0.0
    assert str(product_types("int8", "int8", 5, out_dtype="int64").output) == "int64"
    with pytest.raises(InputError, match="int16 does not hold"):
        product_types("int8", "int8", 2**20, out_dtype="int16")
    with pytest.raises(InputError, match="complex64 or complex128"):
        product_types("complex64", "complex64", 5, out_dtype="float32")


#: (A, B, addend, dtype the product must accumulate in (None: exact), output dtype, out_dtype)
CASES = [
    ("float16", "float16", None, "float32", "float32", None),
    ("float16", "float16", None, "float32", "float16", "float16"),
    ("float32", "float32", "float32", "float32", "float32", None),
    ("float64", "float64", "float64", "float64", "float64", None),
    ("complex64", "complex64", "complex64", "complex64", "complex64", None),
    ("complex128", "complex128", None, "complex128", "complex128", None),
    ("int8", "int8", None, None, "int32", None),
    ("uint8", "uint8", "int32", None, "int64", None),
    ("int16", "int16", None, None, "int64", None),
    ("uint8", "int8", None, None, "int32", None),
    ("int8", "float32", None, "float32", "float32", None),
    ("float32", "float64", None, "float64", "float64", None),
    ("float16", "complex64", None, "complex64", "complex64", None),
    ("int16", "float16", "float16", "float32", "float32", None),
]


@pytest.mark.parametrize(
    ("a_dtype", "b_dtype", "d_dtype", "accumulated", "output", "out_dtype"), CASES
)
def test_job_on_a_cluster_matches_numpy(
    two_process_client, tmp_path, a_dtype, b_dtype, d_dtype, accumulated, output, out_dtype
):
    seed = abs(hash((a_dtype, b_dtype, d_dtype, out_dtype))) % 2**32
    rng = np.random.default_rng(seed)
    transpose_a, transpose_b = bool(rng.integers(2)), bool(rng.integers(2))
    m, k, n = 53, 41, 29  # primes: no tile, chunk or panel size divides them
    a = random_values(rng, (k, m) if transpose_a else (m, k), np.dtype(a_dtype))
    b = random_values(rng, (n, k) if transpose_b else (k, n), np.dtype(b_dtype))
    write_zarr(tmp_path / "a.zarr", a, (7, 5) if transpose_a else (5, 7))
    write_zarr(tmp_path / "b.zarr", b, (6, 11))
    product = {"transpose_a": transpose_a, "transpose_b": transpose_b}
    if d_dtype is not None:
        addend = random_values(rng, (m, n), np.dtype(d_dtype))
        write_zarr(tmp_path / "d.zarr", addend, (13, 8))
        scales = (-3, 2) if accumulated is None else (0.5, -1.5)
        if accumulated and accumulated.startswith("complex"):
            scales = (0.5 - 1j, 2j)
        product.update(alpha=scales[0], beta=scales[1], addend=str(tmp_path / "d.zarr"))
    c = outofcore.matmul(
        tmp_path / "a.zarr",
        tmp_path / "b.zarr",
        tmp_path / "c.zarr",
        client=two_process_client,
        memory="96KiB",
        out_dtype=out_dtype,
        progress=False,
        **product,
    )
    assert str(c.dtype) == output
    record = c.attrs["outofcore"]
    assert record["complete"] and record["plan"]["tiles"] > 1
    assert record["product"]["output"] == output
    expected = {**product, "addend": addend} if d_dtype is not None else product
    assert_gemm_close(c[...], a, b, accumulated_in=accumulated, rounded_to=out_dtype, **expected)
    report = verify(tmp_path / "a.zarr", tmp_path / "b.zarr", c, rounds=3, **product)
    assert report.passed, report
    assert report.exact == (accumulated is None)
    # One wrong element is caught: off by one for integers, by half the largest |C| else
    # (the tolerance of a float16 output is a few thousandths of |a_i| |B|).
    row, col = m // 2, n // 3
    wrong = c[row, col]
    c[row, col] = wrong + (1 if accumulated is None else 0.5 * np.abs(c[...]).max())
    caught = verify(tmp_path / "a.zarr", tmp_path / "b.zarr", c, rounds=8, seed=1, **product)
    assert not caught.passed and caught.first_failing_row == row, caught


def test_gram_of_int8_genotypes_is_exact_from_the_stored_array(two_process_client, tmp_path):
    """``G.T @ G`` of 0/1/2 dosages read straight from G (no transposed copy)."""
    rng = np.random.default_rng(5)
    genotypes = rng.integers(0, 3, size=(997, 61), dtype=np.int8)
    write_zarr(tmp_path / "g.zarr", genotypes, (128, 16))
    c = outofcore.matmul(
        tmp_path / "g.zarr",
        tmp_path / "g.zarr",
        tmp_path / "gram.zarr",
        transpose_a=True,
        client=two_process_client,
        memory="96KiB",
        progress=False,
    )
    expected = genotypes.T.astype(np.int64) @ genotypes
    assert c.dtype == np.int32
    assert np.array_equal(c[...], expected)
    assert not (tmp_path / "g.zarr" / "_outofcore").exists()  # the input was never written


def test_resume_identity_names_a_changed_product(tmp_path):
    rng = np.random.default_rng(9)
    write_zarr(tmp_path / "a.zarr", random_values(rng, (9, 7), np.dtype("float32")), (4, 4))
    write_zarr(tmp_path / "d.zarr", random_values(rng, (7, 7), np.dtype("float32")), (4, 4))
    a, d = tmp_path / "a.zarr", tmp_path / "d.zarr"
    plain = open_product(a, a, transpose_a=True)
    scaled = open_product(a, a, transpose_a=True, alpha=2.0, beta=1.0, addend=d)
    then = job_identity(plain.inputs, _fingerprints(plain), 1 << 20, None, None, plain.summary())
    now = job_identity(scaled.inputs, _fingerprints(scaled), 1 << 20, None, None, scaled.summary())
    found = differences(then, now)
    assert any(line.startswith("alpha was 1.0, now 2.0") for line in found), found
    assert any(line.startswith("beta was 0.0, now 1.0") for line in found), found
    assert any("input addend was none" in line for line in found), found
    assert differences(then, then) == []


def _fingerprints(product: Product):
    from outofcore.storage.fingerprint import fingerprint

    return {name: fingerprint(array) for name, array in product.inputs.items()}

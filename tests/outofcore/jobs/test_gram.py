"""Symmetric products: ``outofcore.gram`` and ``matmul(x, x, transpose_a=True)``.

Only the tiles on and above the diagonal are computed (``syrk`` on the
diagonal), each written with its mirror: the output must be exactly
symmetric and equal to a float64 reference within the rounding bound, on a
real 2-worker LocalCluster and in-process, with ragged chunks, primes and 1s.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

import outofcore
from outofcore.api import run_job
from outofcore.backends.blas import gram_into, mirror_upper, syrk_accumulate
from outofcore.errors import InputError
from outofcore.jobs.opening import open_product
from outofcore.operands.random_values import random_values
from tests.helpers import assert_gemm_close, cli, random_matrix, write_zarr


def assert_symmetric(g: np.ndarray) -> None:
    mismatch = np.argwhere(g != g.T)
    assert mismatch.size == 0, f"{len(mismatch)} elements differ from their mirror: {mismatch[:2]}"


@settings(max_examples=10)
@given(
    k=st.sampled_from([1, 2, 97, 541, 1500]),
    n=st.sampled_from([1, 3, 31, 89, 150]),
    chunks=st.tuples(st.sampled_from([7, 64, 211]), st.sampled_from([1, 13, 40])),
    rows=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_gram_is_exactly_symmetric_and_right_on_two_workers(
    two_process_client, tmp_path_factory, k, n, chunks, rows, seed
):
    folder = tmp_path_factory.mktemp("gram")
    x = random_matrix(np.random.default_rng(seed), (k, n), "float32")
    stored = np.ascontiguousarray(x.T) if rows else x  # X @ X.T of the n x k array
    write_zarr(folder / "x.zarr", stored, chunks[::-1] if rows else chunks)
    result = run_job(
        folder / "x.zarr",
        folder / "x.zarr",
        folder / "g.zarr",
        client=two_process_client,
        transpose_a=not rows,
        transpose_b=rows,
        memory="1MiB",
        progress=False,
    )
    plan = result.plan
    assert plan.problem.symmetric and plan.tm == plan.tn
    assert len(plan.tasks) == plan.tiles_down * (plan.tiles_down + 1) // 2
    g = zarr.open_array(str(folder / "g.zarr"))[...]
    assert_symmetric(g)
    assert_gemm_close(
        g, stored, stored, accumulated_in="float32", transpose_a=not rows, transpose_b=rows
    )
    assert result.summary["bytes_read"] <= plan.bytes_read


def test_gram_reads_x_half_as_often_as_a_general_product(tmp_path):
    """In-process the measured bytes are the plan's: one panel per tile row and column."""
    x = random_matrix(np.random.default_rng(1), (600, 130), "float32")
    write_zarr(tmp_path / "x.zarr", x, (100, 20))
    write_zarr(tmp_path / "copy.zarr", x, (100, 20))
    options = {"client": "sync", "memory": "1MiB", "progress": False, "transpose_a": True}
    options["tile"] = (40, 40)
    gram = run_job(tmp_path / "x.zarr", tmp_path / "x.zarr", tmp_path / "g.zarr", **options)
    general = run_job(tmp_path / "x.zarr", tmp_path / "copy.zarr", tmp_path / "c.zarr", **options)
    assert not general.plan.problem.symmetric and gram.plan.problem.symmetric
    assert len(gram.plan.tasks) == 10 and len(general.plan.tasks) == 16
    assert gram.summary["bytes_read"] == gram.plan.bytes_read == 4 * x.nbytes
    assert general.summary["bytes_read"] == general.plan.bytes_read == 8 * x.nbytes
    g, c = (zarr.open_array(str(tmp_path / name))[...] for name in ("g.zarr", "c.zarr"))
    assert_symmetric(g)
    assert_gemm_close(g, x, x, accumulated_in="float32", transpose_a=True)
    assert_gemm_close(c, x, x, accumulated_in="float32", transpose_a=True)


@pytest.mark.parametrize(
    ("dtype", "accumulated_in"),
    [("int8", None), ("complex64", "complex64"), ("float16", "float32"), ("float64", "float64")],
)
def test_gram_of_every_dtype_with_alpha_and_split_k(tmp_path, dtype, accumulated_in):
    """Off-diagonal tiles mirrored by the reduction of a split plan; alpha applied once."""
    x = random_values(np.random.default_rng(2), (701, 53), dtype)
    write_zarr(tmp_path / "x.zarr", x, (100, 20))
    alpha = 3 if dtype == "int8" else 0.5
    g_array = outofcore.gram(
        tmp_path / "x.zarr",
        tmp_path / "g.zarr",
        client="sync",
        memory="1MiB",
        tile=(20, 20),
        tk=200,
        splits=2,
        alpha=alpha,
        progress=False,
    )
    record = g_array.attrs["outofcore"]["summary"]
    assert record["splits"] == 2 and record["tiles"] == 6  # 3x3 tiles of 20, upper triangle
    g = g_array[...]
    assert_symmetric(g)
    assert_gemm_close(g, x, x, accumulated_in=accumulated_in, transpose_a=True, alpha=alpha)


def test_gram_and_matmul_of_x_with_itself_are_the_same_job(tmp_path):
    x = random_matrix(np.random.default_rng(3), (257, 61), "float64")
    write_zarr(tmp_path / "x.zarr", x, (64, 16))
    options = {"client": "sync", "memory": "512KiB", "progress": False}
    g = outofcore.gram(tmp_path / "x.zarr", tmp_path / "g.zarr", **options)
    m = outofcore.matmul(
        tmp_path / "x.zarr", tmp_path / "x.zarr", tmp_path / "m.zarr", transpose_a=True, **options
    )
    assert np.array_equal(g[...], m[...])
    rows = outofcore.gram(tmp_path / "x.zarr", tmp_path / "r.zarr", rows=True, **options)
    assert rows.shape == (257, 257)
    assert_symmetric(rows[...])
    assert_gemm_close(rows[...], x, x, accumulated_in="float64", transpose_b=True)


def test_not_symmetric_unless_one_array_times_its_own_transpose(tmp_path):
    x = random_matrix(np.random.default_rng(4), (30, 30), "float32")
    write_zarr(tmp_path / "x.zarr", x, (10, 10))
    write_zarr(tmp_path / "y.zarr", x, (10, 10))
    write_zarr(tmp_path / "d.zarr", x, (10, 10))
    x_path, y_path = tmp_path / "x.zarr", tmp_path / "y.zarr"
    assert open_product(x_path, x_path, transpose_a=True).symmetric
    assert open_product(str(x_path), str(tmp_path / "." / "x.zarr"), transpose_b=True).symmetric
    assert not open_product(x_path, y_path, transpose_a=True).symmetric  # equal values, 2 arrays
    assert not open_product(x_path, x_path).symmetric  # X @ X is not symmetric
    assert not open_product(x_path, x_path, transpose_a=True, transpose_b=True).symmetric
    with_addend = open_product(
        x_path, x_path, transpose_a=True, beta=1.0, addend=tmp_path / "d.zarr"
    )
    assert not with_addend.symmetric  # beta * D need not be symmetric
    with pytest.raises(InputError, match="gram takes no addend"):
        outofcore.gram(x_path, tmp_path / "g.zarr", addend=tmp_path / "d.zarr", client="sync")
    assert not (tmp_path / "g.zarr").exists()


def test_gram_command_line_then_verify(tmp_path):
    x = random_matrix(np.random.default_rng(5), (500, 70), "float32")
    write_zarr(tmp_path / "x.zarr", x, (128, 32))
    x_path, g_path = str(tmp_path / "x.zarr"), str(tmp_path / "g.zarr")
    done = cli("gram", x_path, "-o", g_path, "--scheduler", "sync", "--memory", "512KiB")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("G = X.T @ X written to")
    assert "tiles (on and above the diagonal, mirrored)" in done.stdout
    g = zarr.open_array(g_path)[...]
    assert_symmetric(g)
    assert_gemm_close(g, x, x, accumulated_in="float32", transpose_a=True)
    checked = cli("verify", x_path, x_path, g_path, "--transpose-a", "--json")
    assert checked.returncode == 0 and json.loads(checked.stdout)["passed"] is True
    planned = cli("plan", x_path, x_path, "--transpose-a", "--memory", "512KiB", "--json")
    assert planned.returncode == 0, planned.stderr
    assert json.loads(planned.stdout)["symmetric"] is True
    human = cli("plan", x_path, x_path, "--transpose-a", "--memory", "512KiB").stdout
    assert "on and above the diagonal" in human and "exactly symmetric" in human


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("stored_transposed", [False, True])
def test_syrk_fills_the_upper_triangle_and_the_mirror_the_rest(dtype, stored_transposed):
    rng = np.random.default_rng(6)
    panel = random_values(rng, (113, 37), dtype)  # k x n, as stored
    a = panel.T if stored_transposed else np.ascontiguousarray(panel.T)  # n x k
    reference = a.astype(np.complex128) @ a.T.astype(np.complex128)
    c = np.full((37, 37), np.nan, dtype=dtype)
    assert syrk_accumulate(c, a, 0.0)
    upper = np.triu_indices(37)
    tolerance = 4 * 113 * np.finfo(dtype).eps * np.abs(a).max() ** 2
    assert np.abs(c[upper] - reference[upper]).max() <= tolerance
    assert np.isnan(c[np.tril_indices(37, -1)]).all()  # the lower triangle is not written
    gram_into(c, a, accumulate=True)  # beta = 1: twice the product on the upper triangle
    mirror_upper(c, block=8)
    assert_symmetric(c)
    assert np.abs(c - 2 * reference).max() <= 2 * tolerance

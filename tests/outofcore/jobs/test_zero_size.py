"""Products with a dimension of 0 follow numpy (issue 19, item 7): m or n = 0 gives an
empty output, k = 0 the sum of no terms (zeros, or beta times the addend)."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import outofcore
from tests.helpers import cli, random_matrix, write_zarr


@pytest.mark.parametrize(("m", "k", "n"), [(0, 7, 5), (5, 7, 0), (0, 0, 0), (13, 0, 11), (1, 0, 1)])
def test_zero_size_products_follow_numpy(tmp_path, m, k, n):
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    a, b = random_matrix(rng, (m, k), "float32"), random_matrix(rng, (k, n), "float32")
    write_zarr(tmp_path / "a.zarr", a, (max(1, min(m, 4)), max(1, min(k, 3))))
    write_zarr(tmp_path / "b.zarr", b, (max(1, min(k, 3)), max(1, min(n, 4))))
    c = outofcore.matmul(
        tmp_path / "a.zarr",
        tmp_path / "b.zarr",
        tmp_path / "c.zarr",
        client="sync",
        progress=False,
        alpha=3.0,
    )
    expected = 3.0 * (a @ b)
    assert c.shape == expected.shape == (m, n) and c.dtype == expected.dtype
    assert np.array_equal(c[...], expected)
    assert c.attrs["outofcore"]["complete"] is True
    assert outofcore.verify(tmp_path / "a.zarr", tmp_path / "b.zarr", c, alpha=3.0).passed


def test_k_zero_with_an_addend_is_beta_times_the_addend(tmp_path):
    rng = np.random.default_rng(3)
    d = random_matrix(rng, (13, 11), "float32")
    write_zarr(tmp_path / "a.zarr", np.zeros((13, 0), "f4"), (4, 1))
    write_zarr(tmp_path / "b.zarr", np.zeros((0, 11), "f4"), (1, 4))
    write_zarr(tmp_path / "d.zarr", d, (5, 5))
    done = cli(
        "matmul",
        str(tmp_path / "a.zarr"),
        str(tmp_path / "b.zarr"),
        "-o",
        str(tmp_path / "c.zarr"),
        "--beta",
        "-2",
        "--addend",
        str(tmp_path / "d.zarr"),
    )
    assert done.returncode == 0, done.stderr
    assert "an empty product" in done.stdout
    c = zarr.open_array(str(tmp_path / "c.zarr"), mode="r")[...]
    assert np.array_equal(c, -2 * d)
    plan = cli("plan", str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr"))
    assert plan.returncode == 0 and "an empty product" in plan.stdout

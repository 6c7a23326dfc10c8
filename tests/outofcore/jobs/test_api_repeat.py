"""The Python API is safe to call again and again in one process (issue 19, item 5)."""

from __future__ import annotations

import importlib

import numpy as np
import zarr

import outofcore
from tests.helpers import assert_gemm_close, assert_product_close, random_matrix, write_zarr


def test_matmul_verify_gram_verify_matmul_in_one_process(tmp_path):
    rng = np.random.default_rng(5)
    a = random_matrix(rng, (31, 17), "float32")
    b = random_matrix(rng, (17, 13), "float32")
    write_zarr(tmp_path / "a.zarr", a, (8, 5))
    write_zarr(tmp_path / "b.zarr", b, (5, 4))
    importlib.import_module("outofcore.frontends.verify")  # what used to shadow outofcore.verify
    for _ in range(2):
        c = outofcore.matmul(
            tmp_path / "a.zarr",
            tmp_path / "b.zarr",
            tmp_path / "c.zarr",
            client="sync",
            progress=False,
            overwrite=True,
        )
        assert_product_close(c[...], a, b)
        assert outofcore.verify(tmp_path / "a.zarr", tmp_path / "b.zarr", c).passed
        g = outofcore.gram(
            tmp_path / "a.zarr", tmp_path / "g.zarr", client="sync", progress=False, overwrite=True
        )
        assert_gemm_close(g[...], a, a, transpose_a=True, accumulated_in=np.float32)
        report = outofcore.verify(tmp_path / "a.zarr", tmp_path / "a.zarr", g, transpose_a=True)
        assert report.passed
    wrong = zarr.open_array(str(tmp_path / "c.zarr"), mode="r+")
    wrong[3, 4] += 1.0
    assert not outofcore.verify(tmp_path / "a.zarr", tmp_path / "b.zarr", wrong).passed
    assert callable(outofcore.verify) and callable(outofcore.matmul) and callable(outofcore.gram)

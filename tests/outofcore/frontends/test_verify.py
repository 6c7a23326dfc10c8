"""Freivalds verification: passes correct products, catches a planted wrong element."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from outofcore.errors import InputError
from outofcore.frontends.verify import verify
from outofcore.operands.reading import ReadError
from tests.helpers import random_matrix, write_zarr


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_correct_product_passes(tmp_path, dtype):
    rng = np.random.default_rng(2)
    a = random_matrix(rng, (301, 257), dtype)
    b = random_matrix(rng, (257, 199), dtype)
    write_zarr(tmp_path / "a.zarr", a, (64, 50))
    write_zarr(tmp_path / "b.zarr", b, (50, 64))
    write_zarr(tmp_path / "c.zarr", a @ b, (100, 100))  # computed in dtype, like our tasks
    report = verify(tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr", rounds=3)
    assert report.passed, report
    assert report.rounds == 3
    assert 0 < report.max_relative_residual < report.tolerance


def test_one_planted_wrong_element_in_a_large_c_is_caught(tmp_path):
    rng = np.random.default_rng(4)
    m, k, n = 2000, 1500, 1800
    a = random_matrix(rng, (m, k), "float32")
    b = random_matrix(rng, (k, n), "float32")
    c = a @ b
    write_zarr(tmp_path / "a.zarr", a, (512, 512))
    write_zarr(tmp_path / "b.zarr", b, (512, 512))
    stored = write_zarr(tmp_path / "c.zarr", c, (512, 512))
    assert verify(tmp_path / "a.zarr", tmp_path / "b.zarr", stored).passed
    # One element off by 5% of the largest |C|: one element in 3.6 million.
    row, col = 1234, 567
    stored[row, col] = c[row, col] + 0.05 * np.abs(c).max()
    report = verify(tmp_path / "a.zarr", tmp_path / "b.zarr", stored, rounds=2)
    assert not report.passed
    assert report.failing_rows == 1 and report.first_failing_row == row
    assert report.max_relative_residual > report.tolerance


def test_nan_where_numpy_has_nan_passes_and_a_stray_nan_fails(tmp_path):
    rng = np.random.default_rng(6)
    a = random_matrix(rng, (40, 30), "float64")
    b = random_matrix(rng, (30, 20), "float64")
    a[5, 3] = np.nan
    c = a @ b
    write_zarr(tmp_path / "a.zarr", a, (16, 16))
    write_zarr(tmp_path / "b.zarr", b, (16, 16))
    stored = write_zarr(tmp_path / "c.zarr", c, (16, 16))
    assert verify(tmp_path / "a.zarr", tmp_path / "b.zarr", stored).passed
    stored[9, 9] = np.nan
    report = verify(tmp_path / "a.zarr", tmp_path / "b.zarr", stored)
    assert not report.passed and report.nonfinite_mismatches == 1


def test_wrong_shape_of_c(tmp_path):
    rng = np.random.default_rng(8)
    write_zarr(tmp_path / "a.zarr", random_matrix(rng, (4, 3), "float32"), (2, 2))
    write_zarr(tmp_path / "b.zarr", random_matrix(rng, (3, 5), "float32"), (2, 2))
    write_zarr(tmp_path / "c.zarr", random_matrix(rng, (4, 4), "float32"), (2, 2))
    with pytest.raises(InputError, match=r"C is \(4, 4\) but the product \(A @ B\) is \(4, 5\)"):
        verify(tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr")


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_a_garbage_chunk_of_c_is_named(tmp_path, codec, outofcore_settings):
    """A chunk of C replaced by bytes that do not decode (the wrong size uncompressed, not
    a frame compressed) fails verify with one ReadError naming C, the region and the key
    (it said 'ValueError: When changing to a larger dtype ...', naming nothing)."""
    outofcore_settings(read_retries=0)
    rng = np.random.default_rng(6)
    a, b = random_matrix(rng, (60, 40), "float32"), random_matrix(rng, (40, 50), "float32")
    write_zarr(tmp_path / "a.zarr", a, (30, 20))
    write_zarr(tmp_path / "b.zarr", b, (20, 25))
    compressors = None if codec == "none" else "auto"
    c = zarr.create_array(
        tmp_path / "c.zarr", shape=(60, 50), chunks=(30, 25), dtype="float32",
        compressors=compressors,
    )  # fmt: skip
    c[...] = a @ b
    assert verify(tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr").passed
    (tmp_path / "c.zarr" / "c" / "1" / "0").write_bytes(b"garbage!x")
    with pytest.raises(ReadError) as failure:
        verify(tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr")
    message = str(failure.value)
    assert "c.zarr" in message and "key c/1/0 (rows 30:60, columns 0:25)" in message, message

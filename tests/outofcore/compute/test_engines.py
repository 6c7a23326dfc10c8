"""The CPU engine accumulates in place with BLAS beta = 1."""

from __future__ import annotations

import numpy as np
import pytest

from outofcore.backends.cpu import CpuEngine
from tests.helpers import assert_product_close, engine_protocol_gaps, random_matrix


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cpu_engine_accumulates_panels_in_place(dtype):
    rng = np.random.default_rng(13)
    a = random_matrix(rng, (37, 53), dtype)
    b = random_matrix(rng, (53, 29), dtype)
    engine = CpuEngine()
    engine.start_tile((37, 29), np.dtype(dtype))
    accumulator = engine._c
    for k0, k1 in [(0, 20), (20, 41), (41, 53)]:
        a_panel = np.ascontiguousarray(a[:, k0:k1])
        b_panel = np.ascontiguousarray(b[k0:k1, :])
        engine.accumulate(a_panel, b_panel)
        assert engine._c is accumulator  # no new array per panel
    tile = engine.finish_tile()
    assert tile is accumulator
    assert tile.flags.c_contiguous
    assert_product_close(tile, a, b)


def test_cpu_engine_with_no_panels_gives_zeros():
    engine = CpuEngine()
    engine.start_tile((3, 4), np.dtype("float32"))
    assert (engine.finish_tile() == 0).all()


def test_accumulate_before_start_is_an_error():
    with pytest.raises(RuntimeError, match="start_tile"):
        CpuEngine().accumulate(np.ones((2, 2), "f4"), np.ones((2, 2), "f4"))


def test_the_cpu_engine_has_the_whole_engine_protocol_and_streams_row_blocks():
    engine = CpuEngine()
    assert engine_protocol_gaps(engine) == set()
    assert engine.capabilities.row_blocks is True
    rng = np.random.default_rng(3)
    a, b = random_matrix(rng, (19, 11), "float64"), random_matrix(rng, (11, 7), "float64")
    engine.configure(device_memory=123, panel_depth=5)  # no device: changes nothing
    engine.start_tile((19, 7), np.dtype("float64"))
    engine.accumulate(np.ascontiguousarray(a[:, :6]), np.ascontiguousarray(b[:6]))
    for r0 in (0, 8, 16):  # the last panel, block of rows by block
        rows = engine.accumulate_rows(
            r0, [(np.ascontiguousarray(a[r0 : r0 + 8, 6:]), np.ascontiguousarray(b[6:]))]
        )
        assert_product_close(rows, a[r0 : r0 + 8], b)
    assert_product_close(engine.finish_tile(), a, b)

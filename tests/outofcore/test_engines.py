"""The CPU engine accumulates in place with BLAS beta = 1."""

from __future__ import annotations

import numpy as np
import pytest

from outofcore.engines import CpuEngine
from tests.helpers import assert_product_close, random_matrix


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

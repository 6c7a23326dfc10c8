"""The CPU engine accumulates in place with BLAS beta = 1.

What every engine keeps (products, dtypes, errors, capabilities, buffers) is checked by the
conformance suite, tests/outofcore/backends/test_engine_conformance.py; here what is the CPU
engine's own: one accumulator, kept for the next tile and freed by ``release``."""

from __future__ import annotations

import numpy as np
import pytest

from outofcore.backends.cpu import CpuEngine
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


def test_the_accumulator_is_kept_for_the_next_tile_of_its_shape_and_freed_by_release():
    engine = CpuEngine()
    assert engine.kept_bytes() == 0
    engine.start_tile((6, 5), np.dtype("float64"))
    engine.accumulate(np.ones((6, 2)), np.ones((2, 5)))
    first = engine.finish_tile()
    assert engine.kept_bytes() == first.nbytes
    engine.start_tile((6, 5), np.dtype("float64"))
    assert engine._c is first  # the same memory, overwritten by the first panel
    engine.finish_tile()
    engine.start_tile((3, 4), np.dtype("float32"))  # another shape: a new accumulator
    assert engine._c is not first and engine.kept_bytes() == 3 * 4 * 4
    engine.release()  # a tile left unfinished is freed too
    assert engine.kept_bytes() == 0

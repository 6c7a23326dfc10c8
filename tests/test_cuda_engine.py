"""The CUDA tile engine, end to end on numba's CUDA simulator (no GPU needed)."""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # before numba.cuda is imported

import threading  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import outofcore.cuda as ooc_cuda  # noqa: E402
from outofcore.errors import BackendError, InputError  # noqa: E402

if not ooc_cuda.simulator_enabled() and not ooc_cuda.is_available():
    pytest.skip(
        "numba.cuda was imported without NUMBA_ENABLE_CUDASIM=1 and no GPU is visible",
        allow_module_level=True,
    )

from outofcore.cuda.engine import CudaEngine, CudaEnginePlugin  # noqa: E402
from outofcore.cuda.kernels import TileParams  # noqa: E402

TINY = TileParams(bm=8, bn=8, bk=4, tm=2, tn=2)


def run_tile(engine, shape, widths, dtype, seed=0, scribble=True):
    """Drive the protocol like a tile task: decode each panel into the same host buffers."""
    m, n = shape
    rng = np.random.default_rng(seed)
    kmax = max(widths, default=1)
    a_buf = engine.host_buffer(m * kmax, dtype)
    b_buf = engine.host_buffer(kmax * n, dtype)
    engine.start_tile(shape, dtype)
    expected, magnitude = np.zeros(shape), np.zeros(shape)
    for s in widths:
        a = a_buf[: m * s].reshape(m, s)
        b = b_buf[: s * n].reshape(s, n)
        a[...] = rng.standard_normal(a.shape)
        b[...] = rng.standard_normal(b.shape)
        expected += a.astype(np.float64) @ b.astype(np.float64)
        magnitude += np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
        engine.accumulate(a, b)
        if scribble:  # the engine must not need the panels any more
            a_buf[...] = np.nan
            b_buf[...] = np.nan
    out = engine.finish_tile()
    bound = 2 * (sum(widths) + 1) * np.finfo(dtype).eps * magnitude
    return out, expected, bound


def assert_close(out, expected, bound):
    err = np.abs(out - expected)
    assert np.all(err <= bound), f"max error {err.max():.3g}"


@pytest.fixture
def engine():
    return ooc_cuda.make_engine("cuda", params=TINY)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_protocol_end_to_end(engine, dtype):
    out, expected, bound = run_tile(engine, (10, 13), [4, 5, 1], dtype)
    assert out.shape == (10, 13) and out.dtype == dtype and out.flags.c_contiguous
    assert_close(out, expected, bound)


def test_buffers_are_reused_across_tiles_of_any_size(engine):
    for i, (shape, widths) in enumerate([((9, 7), [3, 3]), ((17, 19), [8, 2]), ((2, 3), [5])]):
        assert_close(*run_tile(engine, shape, widths, np.float32, seed=i))
    assert_close(*run_tile(engine, (6, 5), [2, 7], np.float64, seed=9))


def test_tile_without_panels_is_zero(engine):
    engine.start_tile((3, 4), np.float32)
    np.testing.assert_array_equal(engine.finish_tile(), 0)
    run_tile(engine, (3, 4), [2], np.float32)  # the same buffers, now nonzero
    engine.start_tile((3, 4), np.float32)
    np.testing.assert_array_equal(engine.finish_tile(), 0)


@pytest.mark.parametrize("shape", [(0, 3), (4, 0)])
def test_empty_tile(engine, shape):
    engine.start_tile(shape, np.float32)
    engine.accumulate(np.ones((shape[0], 2), np.float32), np.ones((2, shape[1]), np.float32))
    assert engine.finish_tile().shape == shape


def test_empty_panel_is_skipped(engine):
    engine.start_tile((2, 2), np.float64)
    engine.accumulate(np.ones((2, 0)), np.ones((0, 2)))
    engine.accumulate(np.ones((2, 3)), np.ones((3, 2)))
    np.testing.assert_array_equal(engine.finish_tile(), 3.0)


def test_host_buffer_is_flat_and_typed(engine):
    buf = engine.host_buffer(12, np.float32)
    assert buf.shape == (12,) and buf.dtype == np.float32


def test_make_engine_reuses_one_engine_per_thread():
    first = ooc_cuda.make_engine("cuda", params=TINY)
    assert ooc_cuda.make_engine("cuda", params=TINY) is first
    other = []
    thread = threading.Thread(
        target=lambda: other.append(ooc_cuda.make_engine("cuda", params=TINY))
    )
    thread.start()
    thread.join()
    assert other[0] is not first


def test_outofcore_engines_builds_the_cuda_engine():
    from outofcore import engines

    engine = engines.make_engine("cuda")
    assert isinstance(engine, CudaEngine) and engine.name == "cuda"


def test_production_engine_small_tile():
    """The production kernel through the engine (one 128x128 block, 256 simulated threads)."""
    engine = ooc_cuda.make_engine("cuda")
    assert_close(*run_tile(engine, (5, 6), [9, 3], np.float32, seed=3))


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        (np.ones((4, 3)), np.ones((3, 5)), r"do not fit the 4x6 tile"),
        (np.ones((4, 3)), np.ones((2, 6)), r"panels a \(4, 3\) and b \(2, 6\)"),
        (np.ones((4, 3), np.float32), np.ones((3, 6)), "panel dtypes a float32, b float64"),
        (np.ones(4), np.ones((3, 6)), "panels must be 2-D"),
    ],
)
def test_bad_panels(engine, a, b, message):
    engine.start_tile((4, 6), np.float64)
    with pytest.raises(InputError, match=message):
        engine.accumulate(a, b)


def test_protocol_misuse(engine):
    with pytest.raises(RuntimeError, match="start_tile"):
        CudaEngine("cuda", params=TINY).accumulate(np.ones((1, 1)), np.ones((1, 1)))
    with pytest.raises(InputError, match="unsupported dtype int64"):
        engine.start_tile((2, 2), np.int64)


def test_unknown_backend():
    with pytest.raises(BackendError, match="unknown GPU backend 'tpu'"):
        ooc_cuda.make_engine("tpu")


def test_cupy_backend_without_cupy_is_a_clear_error():
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(BackendError, match="backend 'cupy' needs CuPy"):
            ooc_cuda.make_engine("cupy")
    else:  # pragma: no cover (a GPU node)
        pytest.skip("CuPy is installed")


def test_device_budget():
    budget = ooc_cuda.device_budget_bytes(0.5)
    assert isinstance(budget, int) and budget > 0
    assert ooc_cuda.device_budget_bytes(1.0) >= budget
    for bad in (0, -0.1, 1.5):
        with pytest.raises(InputError, match="fraction must be in"):
            ooc_cuda.device_budget_bytes(bad)


def test_worker_plugin_setup():
    plugin = CudaEnginePlugin("cuda", fraction=0.25)
    plugin.setup(SimpleNamespace(address="tcp://127.0.0.1:0"))
    assert plugin.budget_bytes and plugin.budget_bytes > 0
    with pytest.raises(BackendError, match="unknown GPU backend"):
        CudaEnginePlugin("opencl")

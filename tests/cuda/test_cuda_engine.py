"""The CUDA tile engine, end to end on numba's CUDA simulator (no GPU needed).

What every engine keeps (products, dtypes, errors, capabilities, buffers) is checked by
the conformance suite, tests/outofcore/backends/test_engine_conformance.py; here what is
the CUDA engine's own: device plans, copies, budgets, threads, jobs on the simulator."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

import outofcore.backends.cuda as ooc_cuda
from outofcore.api import run_job
from outofcore.backends.cuda.engine import CudaEngine
from outofcore.backends.cuda.kernels import TileParams
from outofcore.backends.device import buffers
from outofcore.compute.worker_context import worker_context
from outofcore.errors import BackendError, BudgetError, InputError
from outofcore.planner.device_plan import device_bytes
from tests.helpers import (
    assert_gemm_close,
    assert_product_close,
    random_matrix,
    write_zarr,
)

# tests/conftest.py turns numba's CUDA simulator on unless NUMBA_ENABLE_CUDASIM is set.
pytestmark = pytest.mark.skipif(
    not ooc_cuda.simulator_enabled() and not ooc_cuda.is_available(),
    reason="NUMBA_ENABLE_CUDASIM=0 and no GPU is visible to numba.cuda",
)

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


def test_each_task_thread_makes_its_engine_once(monkeypatch):
    """make_engine makes a new engine; a tile task's thread keeps the one it made first."""
    assert ooc_cuda.make_engine("cuda", params=TINY) is not ooc_cuda.make_engine(
        "cuda", params=TINY
    )
    monkeypatch.setattr(worker_context().thread(), "engines", {})
    mine = worker_context().engine("cuda")
    assert isinstance(mine, CudaEngine) and worker_context().engine("cuda") is mine
    other = []
    thread = threading.Thread(target=lambda: other.append(worker_context().engine("cuda")))
    thread.start()
    thread.join()
    assert isinstance(other[0], CudaEngine) and other[0] is not mine


def test_the_registry_builds_the_cuda_engine():
    from outofcore.backends import registry

    engine = registry.make_engine("cuda")
    assert isinstance(engine, CudaEngine) and engine.name == "cuda"


def test_production_engine_small_tile():
    """The production kernel through the engine (one 128x128 block, 256 simulated threads)."""
    engine = ooc_cuda.make_engine("cuda")
    assert_close(*run_tile(engine, (5, 6), [9, 3], np.float32, seed=3))


def test_a_dtype_the_gpu_engine_does_not_take(engine):
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


# -- the two-level plan: host tiles cut into device tiles ---------------------------------
def fresh_engine(device_memory=None):
    return CudaEngine("cuda", params=TINY, device_memory=device_memory)


def check_transfers(engine, widths):
    """The bytes the tile moved across PCIe are what its device plan predicts for ``widths``."""
    plan = dataclasses.replace(engine.device_plan, k=sum(widths))  # the engine saw one panel
    assert engine.transfer_bytes == {"h2d": plan.h2d_bytes, "d2h": plan.d2h_bytes}


def test_budget_is_the_smaller_of_the_device_and_the_setting():
    engine = fresh_engine()
    own = engine.budget_bytes
    assert own > 0
    engine.set_device_memory(1000)
    assert engine.budget_bytes == 1000
    engine.set_device_memory(own * 2)
    assert engine.budget_bytes == own
    engine.set_device_memory(None)
    assert engine.budget_bytes == own
    for bad in (0, -5, 1.5, "1GiB", True):
        with pytest.raises(InputError, match="device_memory = "):
            engine.set_device_memory(bad)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_resident_with_host_panels_deeper_than_the_device_slices(dtype):
    """The whole 11x13 tile stays on the device; 9-deep host panels go in 4-deep slices."""
    w = np.dtype(dtype).itemsize
    engine = fresh_engine(device_bytes(11, 13, 4, w) + w)
    assert_close(*run_tile(engine, (11, 13), [9, 5], dtype, seed=4))
    plan = engine.device_plan
    assert plan.resident and plan.dk == 4 and plan.tk == 9
    check_transfers(engine, [9, 5])


@pytest.mark.parametrize(
    ("shape", "widths", "dtype", "budget", "grid", "dk"),
    [
        ((19, 23), [9, 5], np.float32, 1024, (3, 3), 4),  # A and B slices staged
        ((19, 23), [9, 9, 5], np.float32, 2000, (3, 3), 9),  # A slices are whole rows
        ((19, 23), [9, 5], np.float64, 2600, (3, 3), 4),
        ((5, 23), [9, 3], np.float32, 800, (1, 3), 4),  # one row of device tiles
        ((30, 7), [9, 9, 2], np.float64, 2500, (4, 1), 4),  # whole-width strips
        ((17, 33), [6, 5], np.float32, 3600, (2, 3), 6),
    ],
)
def test_sub_tiled(shape, widths, dtype, budget, grid, dk):
    engine = fresh_engine(budget)
    assert_close(*run_tile(engine, shape, widths, dtype, seed=sum(shape)))
    plan = engine.device_plan
    assert not plan.resident and (plan.rows, plan.cols) == grid and plan.dk == dk
    assert plan.device_bytes <= budget
    check_transfers(engine, widths)


def test_views_strided_both_ways_go_through_a_small_staging_ring():
    """Only a view strided in both directions is packed on the host: here in parts that
    wrap around a ring of two 64-byte buffers."""
    engine = fresh_engine(1024)
    engine._stager = buffers.Stager(engine.runtime, buffers=2, nbytes=64)
    rng = np.random.default_rng(8)
    a = rng.standard_normal((38, 18)).astype(np.float32)[::2, ::2]  # 19x9, every other one
    b = rng.standard_normal((9, 23)).astype(np.float32)
    assert buffers.layout(a) == "strided"
    engine.start_tile((19, 23), np.float32)
    engine.accumulate(a, b)
    out = engine.finish_tile()
    assert not engine.device_plan.resident
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    assert engine.copy_layouts["strided"] > 0 and engine._stager.nbytes == 2 * 64


def test_slices_and_transposed_panels_are_not_packed_on_the_host():
    """Sub-tiled slices of contiguous panels are 2-D copies ("rows"); a transposed panel
    (a Gram tile, --transpose-a) is a 2-D copy of its transpose and a device transpose
    ("columns"); the staging ring is never used, and the products are right."""
    engine = fresh_engine(1024 + 4 * 4 * 8)  # room for the transpose scratch slice too
    rng = np.random.default_rng(21)
    stored_a = [rng.standard_normal((9, 19)).astype(np.float32) for _ in range(2)]  # k x m
    b = [rng.standard_normal((9, 23)).astype(np.float32) for _ in range(2)]
    engine.start_tile((19, 23), np.float32)
    for a_stored, b_panel in zip(stored_a, b, strict=True):
        engine.accumulate(a_stored.T, b_panel)
    out = engine.finish_tile()
    plan = engine.device_plan
    assert not plan.resident and plan.transposed and plan.device_bytes <= 1024 + 128
    expected = sum(x.T.astype(np.float64) @ y for x, y in zip(stored_a, b, strict=True))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    assert engine.copy_layouts["columns"] > 0 and engine.copy_layouts["rows"] > 0
    assert engine.copy_layouts["strided"] == 0 and engine._stager.nbytes == 0
    check_transfers(engine, [9, 9])


@pytest.mark.parametrize(
    ("view", "kind"),
    [
        (lambda x: x, "contiguous"),
        (lambda x: x[:, 2:5], "rows"),
        (lambda x: x[1:4, :1], "rows"),
        (lambda x: x.T, "columns"),
        (lambda x: x.T[:3, 1:], "columns"),
        (lambda x: np.asfortranarray(x), "columns"),
        (lambda x: x[::2, ::2], "strided"),
        (lambda x: x[::-1], "strided"),
    ],
)
def test_layout_of_host_views(view, kind):
    x = np.arange(42, dtype=np.float64).reshape(6, 7)
    assert buffers.layout(view(x)) == kind


def test_two_c_buffers_alternate_between_device_tiles():
    """Sub-tiled: consecutive device tiles use the other C buffer and its stream, and the
    same device tile keeps its buffer from panel to panel (its load follows its store)."""
    engine = fresh_engine(2000)
    calls = []
    for name in ("_begin_subtile", "_end_subtile"):
        method = getattr(engine, name)

        def logged(tile, c, r0, c0, which, _method=method, _name=name):
            calls.append((_name, (r0, c0), which))
            return _method(tile, c, r0, c0, which)

        setattr(engine, name, logged)
    assert_close(*run_tile(engine, (19, 23), [9, 9, 5], np.float32, seed=12))
    plan = engine.device_plan
    assert not plan.resident and plan.c_buffers == 2 and plan.rows * plan.cols == 9
    begins = [(place, which) for name, place, which in calls if name == "_begin_subtile"]
    ends = [(place, which) for name, place, which in calls if name == "_end_subtile"]
    assert begins == ends  # each device tile is stored from the buffer it was loaded into
    assert len(begins) == 3 * 9  # three panels of nine device tiles
    # A device tile keeps its buffer (and so its stream) in every panel: its load of a
    # panel is queued behind its own store of the one before, never on the other stream.
    buffers_of = {}
    for place, which in begins:
        buffers_of.setdefault(place, set()).add(which)
    assert all(len(used) == 1 for used in buffers_of.values())
    for panel in range(3):  # within a panel, consecutive device tiles alternate
        whiches = [which for _, which in begins[panel * 9 : (panel + 1) * 9]]
        assert whiches == [i % 2 for i in range(9)]
    assert engine._c_dev[0].nbytes > 0 and engine._c_dev[1].nbytes > 0
    assert engine._c_streams[0] is not engine._c_streams[1]


def test_two_engines_in_two_threads_share_one_device_budget():
    """Each task thread's engine gets an equal share of the process's device budget."""
    import gc  # noqa: PLC0415

    gc.collect()
    made = []
    threads = [
        threading.Thread(target=lambda: made.append(CudaEngine("cuda", params=TINY)))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first, second = made
    share = first._share
    assert second._share is share and len(share.engines) >= 2
    assert first.budget_bytes == second.budget_bytes == share.total // len(share.engines)
    assert first.budget_bytes + second.budget_bytes <= share.total
    together = first.budget_bytes
    made.clear()
    del second
    gc.collect()
    assert first.budget_bytes > together  # the other engine is gone: a larger share


def test_a_smaller_budget_frees_device_buffers_that_no_longer_fit(monkeypatch):
    """Buffers grown for a large tile are made again when the budget shrinks (a lower
    --device-memory, or another thread's engine joining the share)."""
    monkeypatch.setattr(buffers, "GROWTH", 64)  # 64-byte steps, so that tiny tiles show it
    engine = fresh_engine()
    run_tile(engine, (40, 40), [9], np.float32)
    assert engine.device_plan.resident and engine.device_buffer_bytes() >= 40 * 40 * 4
    engine.set_device_memory(1024)
    assert_close(*run_tile(engine, (19, 23), [9, 5], np.float32, seed=2))
    assert engine.device_plan.budget_bytes == 1024 and not engine.device_plan.resident
    assert engine.device_buffer_bytes() <= 1024 + 6 * 64  # the budget, up to the steps


def test_pinned_pool_reuses_blocks_across_tile_sizes():
    engine = fresh_engine()
    pool = engine._pool
    first = engine.host_buffer(1000, np.float32)
    address = first.__array_interface__["data"][0]
    panel = first[:600].reshape(20, 30)  # a view the task keeps: the block stays busy
    del first
    second = engine.host_buffer(500, np.float32)
    assert pool.allocations == 2 and second.__array_interface__["data"][0] != address
    del panel, second
    # A smaller tile (an edge tile) and then a float64 one reuse the first block.
    smaller = engine.host_buffer(700, np.float32)
    assert pool.allocations == 2
    assert smaller.__array_interface__["data"][0] in {
        address,
        *(b.__array_interface__["data"][0] for b in pool._blocks),
    }
    del smaller
    wider = engine.host_buffer(450, np.float64)
    assert pool.allocations == 2 and wider.dtype == np.float64 and wider.shape == (450,)
    assert engine.kept_bytes() >= pool.free_bytes > 0
    del wider
    assert pool.free_bytes == pool.nbytes == 4000 + 2000


def test_sub_tiled_with_strided_panels():
    """Panels that are not C-contiguous (a Fortran-ordered A, a transposed view of B):
    both go through the device transpose, with its scratch slice in the budget."""
    engine = fresh_engine(2600)
    rng = np.random.default_rng(5)
    a = [np.asfortranarray(rng.standard_normal((13, 6))) for _ in range(2)]
    b = [rng.standard_normal((11, 6)).T for _ in range(2)]
    engine.start_tile((13, 11), np.float64)
    for a_panel, b_panel in zip(a, b, strict=True):
        engine.accumulate(a_panel, b_panel)
    out = engine.finish_tile()
    assert not engine.device_plan.resident
    expected = sum(x @ y for x, y in zip(a, b, strict=True))
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def test_one_engine_switches_between_modes_and_dtypes():
    engine = fresh_engine(1024)
    cases = [
        ((17, 33), [6, 2], np.float32, False),
        ((6, 5), [7], np.float32, True),
        ((19, 9), [5, 4], np.float32, False),
    ]
    for i, (shape, widths, dtype, resident) in enumerate(cases):
        assert_close(*run_tile(engine, shape, widths, dtype, seed=i))
        assert engine.device_plan.resident is resident
        check_transfers(engine, widths)
    engine.set_device_memory(None)
    assert_close(*run_tile(engine, (19, 9), [9], np.float64, seed=7))
    assert engine.device_plan.resident


def test_the_job_panel_depth_bounds_the_slices_whatever_panel_comes_first():
    """A tile task may start with its shallow last panel; the slices follow the job's tk."""
    engine = fresh_engine()
    engine.configure(device_memory=2000, panel_depth=9)
    assert_close(*run_tile(engine, (19, 23), [5, 9], np.float32, seed=3))
    assert engine.device_plan.tk == 9 and engine.device_plan.dk == 9
    engine.configure()
    assert engine.budget_bytes > 2000
    with pytest.raises(InputError, match="panel_depth = 0"):
        engine.configure(panel_depth=0)


def test_sub_tiled_tile_without_panels_is_zero():
    engine = fresh_engine(1024)
    run_tile(engine, (19, 13), [4], np.float32)
    assert not engine.device_plan.resident
    engine.start_tile((19, 13), np.float32)
    np.testing.assert_array_equal(engine.finish_tile(), 0)


def test_device_budget_below_one_block_is_a_clear_error():
    engine = fresh_engine(700)
    engine.start_tile((19, 23), np.float32)
    # Two 8x8 C buffers (sub-tiled) and two 4-deep panel slots: 4*(2*64 + 2*4*16) bytes.
    with pytest.raises(BudgetError, match=r"device budget of 700 bytes .* needs 1024 bytes"):
        engine.accumulate(np.ones((19, 4), np.float32), np.ones((4, 23), np.float32))


#: A small job on the simulator: in this thread, 10x12 host tiles 8 deep, 1 KiB of device memory.
SIMULATED_JOB = {
    "memory": "1MiB",
    "backend": "cuda",
    "client": "sync",
    "progress": False,
    "tile": (10, 12),
    "tk": 8,
    "device_memory": 1024,
}


def test_run_job_on_the_simulator_cuts_host_tiles_into_device_tiles(tmp_path, monkeypatch):
    """run_job(backend="cuda", client="sync", device_memory=...) end to end on zarr arrays."""
    rng = np.random.default_rng(11)
    a = random_matrix(rng, (21, 17), "float32")
    b = random_matrix(rng, (17, 23), "float32")
    a_path, b_path = tmp_path / "a.zarr", tmp_path / "b.zarr"
    write_zarr(a_path, a, (5, 4))
    write_zarr(b_path, b, (4, 6))
    engine = fresh_engine()
    plans = []
    planner = engine._plan
    monkeypatch.setattr(engine, "_plan", lambda *args: plans.append(planner(*args)) or plans[-1])
    # run_job(client="sync") runs tasks in this thread: give it this engine.
    monkeypatch.setitem(worker_context().thread().engines, "cuda", engine)
    result = run_job(str(a_path), str(b_path), str(tmp_path / "c.zarr"), **SIMULATED_JOB)
    assert_product_close(result.output[...], a, b)
    assert len(plans) == len(result.plan.tasks) == 6
    assert not plans[0].resident  # a 10x12 host tile does not fit in 1024 bytes
    assert any(p.resident for p in plans)  # the 1-row tiles at the bottom do
    assert all(p.budget_bytes == 1024 and p.tk == 8 for p in plans)
    assert engine.budget_bytes == 1024


@pytest.mark.parametrize(
    ("a_dtype", "b_dtype", "accumulated"),
    [
        ("complex64", "complex64", "complex64"),
        ("complex128", "float64", "complex128"),
        ("float16", "float16", "float32"),
        ("int8", "int8", None),
    ],
)
def test_run_job_on_the_simulator_with_transposes_scales_and_dtypes(
    tmp_path, monkeypatch, a_dtype, b_dtype, accumulated
):
    """Transposed panels (strided host views) and every compute dtype through the CUDA engine."""
    from outofcore.operands.random_values import random_values

    rng = np.random.default_rng(12)
    a = random_values(rng, (17, 21), np.dtype(a_dtype))  # stored k x m: used as A.T
    b = random_values(rng, (19, 17), np.dtype(b_dtype))  # stored n x k: used as B.T
    d = random_values(rng, (21, 19), np.dtype(a_dtype))
    for name, x, chunks in (("a", a, (4, 5)), ("b", b, (6, 4)), ("d", d, (5, 6))):
        write_zarr(tmp_path / f"{name}.zarr", x, chunks)
    engine = fresh_engine()
    monkeypatch.setitem(worker_context().thread().engines, "cuda", engine)
    exact = accumulated is None
    scales = {"alpha": 3 if exact else 0.5, "beta": -2 if exact else 1.5}
    product = {"transpose_a": True, "transpose_b": True, **scales}
    paths = [str(tmp_path / f"{name}.zarr") for name in ("a", "b", "c")]
    result = run_job(
        *paths,
        addend=str(tmp_path / "d.zarr"),
        **{**SIMULATED_JOB, "device_memory": 5120},
        **product,
    )
    assert len(result.plan.tasks) == 6  # 21x19 in 10x12 tiles
    assert_gemm_close(result.output[...], a, b, accumulated_in=accumulated, addend=d, **product)


def test_gram_on_the_simulator_is_exactly_symmetric(tmp_path, monkeypatch):
    """A Gram product through the CUDA engine: diagonal tiles computed whole, then mirrored."""
    x = random_matrix(np.random.default_rng(13), (29, 22), "float32")
    write_zarr(tmp_path / "x.zarr", x, (8, 5))
    monkeypatch.setitem(worker_context().thread().engines, "cuda", fresh_engine())
    x_path = str(tmp_path / "x.zarr")
    options = {**SIMULATED_JOB, "tile": (10, 10), "device_memory": 4096}
    result = run_job(x_path, x_path, str(tmp_path / "g.zarr"), transpose_a=True, **options)
    assert result.plan.problem.symmetric and len(result.plan.tasks) == 6  # 3x3, upper
    g = result.output[...]
    assert (g == g.T).all()
    assert_gemm_close(g, x, x, accumulated_in="float32", transpose_a=True)


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "a_chunks", "b_chunks"),
    [
        ((23, 19), (19,), (6, 5), (7,)),  # matrix @ vector: tiles one column wide
        ((19,), (19, 13), (5,), (4, 6)),  # vector @ matrix: tiles one row high
        ((3, 11, 19), (19, 13), (2, 4, 5), (4, 6)),  # a stack times one matrix
    ],
)
def test_vectors_and_stacks_on_the_simulator(
    tmp_path, monkeypatch, a_shape, b_shape, a_chunks, b_chunks
):
    """numpy.matmul's shapes reach the CUDA engine as 2-D panels of each task's matrix."""
    from outofcore.operands.random_values import random_values

    rng = np.random.default_rng(14)
    a = random_values(rng, a_shape, np.dtype("float32"))
    b = random_values(rng, b_shape, np.dtype("float32"))
    write_zarr(tmp_path / "a.zarr", a, a_chunks)
    write_zarr(tmp_path / "b.zarr", b, b_chunks)
    monkeypatch.setitem(worker_context().thread().engines, "cuda", fresh_engine())
    paths = [str(tmp_path / f"{name}.zarr") for name in ("a", "b", "c")]
    job = {**SIMULATED_JOB, "tile": None, "tk": None, "memory": "64KiB", "device_memory": 4096}
    result = run_job(*paths, **job)
    assert result.output.shape == np.matmul(a, b).shape
    assert_gemm_close(result.output[...], a, b, accumulated_in="float32")


@pytest.mark.parametrize("splits", [None, 2])
def test_a_centred_gram_from_panel_sums_on_the_simulator(tmp_path, monkeypatch, splits):
    """A product centred from its panel sums (outofcore/operands/centring.py) through the CUDA
    engine: the sums come from the host panels, the correction from the finished rows."""
    import dask.array as da

    rng = np.random.default_rng(15)
    x = (rng.standard_normal((61, 22)) * 2 + 30).astype(np.float32)
    write_zarr(tmp_path / "x.zarr", x, (8, 5))
    monkeypatch.setitem(worker_context().thread().engines, "cuda", fresh_engine())
    xd = da.from_zarr(str(tmp_path / "x.zarr"))
    xc = xd - xd.mean(axis=0)
    options = {**SIMULATED_JOB, "tile": (10, 10), "device_memory": 4096}
    if splits:
        options["splits"] = splits
    result = run_job(xc.T, xc, str(tmp_path / "g.zarr"), **options)
    assert result.output.attrs["outofcore"]["product"]["a_steps"][0]["shift"] is True
    g = result.output[...]
    assert (g == g.T).all()
    c = x.astype(np.float64) - x.astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(g, c.T @ c, rtol=1e-4, atol=1e-3 * np.abs(c.T @ c).max())


def test_the_engine_times_its_first_launch_once_and_events_it_cannot_read_are_left_out():
    """The first tile reports the engine's first launch (compile and launch); later tiles
    do not.  The simulator's events time nothing: kernel and copy seconds stay 0."""
    engine = CudaEngine(params=TINY)
    run_tile(engine, (9, 7), [5], np.float32)
    first = engine.timings()
    assert first["first_launch_seconds"] > 0
    assert first["kernel_seconds"] == first["copy_seconds"] == 0.0
    run_tile(engine, (9, 7), [5], np.float32, seed=1)
    assert "first_launch_seconds" not in engine.timings()

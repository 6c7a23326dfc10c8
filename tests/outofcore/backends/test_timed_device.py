"""The timed device (issue 51, item 2): a GPU runtime on the host that only takes time.

What is checked is the device's own ledger of modelled seconds (a test of counted waits,
not of wall time under load): one tile takes its modelled time, streams overlap, events
order work across streams, and the products are right.  Wall time is only ever checked
from below: a wait is real, so the work cannot end sooner than its modelled seconds.
"""

from __future__ import annotations

import ast
import dataclasses
import time
from pathlib import Path

import numpy as np
import pytest

from outofcore.api import run_job
from outofcore.backends import registry
from outofcore.backends.device.runtime import DeviceRuntime, Event, Stream
from outofcore.backends.timed import RATES, TimedDevice, TimedEngine, TimedModel, process_device
from outofcore.compute.worker_context import worker_context
from outofcore.errors import BackendError, InputError
from outofcore.planner.gpu_rates import gpu_seconds, gpu_target
from outofcore.planner.problem import Problem
from tests.helpers import assert_product_close, random_matrix, write_zarr

#: A slow device, so that a piece of work lasts milliseconds: 1 GB/s each way, 1 GFLOP/s.
SLOW = TimedModel(
    kernel_flops={"float32": 1e9, "float64": 1e9, "complex64": 1e9, "complex128": 1e9},
    pcie_bps=1e9,
    blocks=RATES.blocks,
)


def test_the_timed_device_is_a_device_runtime():
    device = TimedDevice(SLOW)
    assert isinstance(device, DeviceRuntime)
    assert isinstance(device.stream(), Stream) and isinstance(device.event(), Event)


@pytest.mark.parametrize(
    ("side", "bound"),
    [(4096, "kernel"), (2048, "copies")],  # 4096² tiles are compute-bound at 37 TFLOP/s
)
def test_one_tile_takes_its_modelled_time(side, bound):
    """A tile of an H200's figures on the timed device: its ledger's span is the planner's
    time of that tile (the slowest stream plus the first panel) within 10 %, and the
    stage model's (first panel's copy + the slowest engine + the copy back) within 1 %."""
    device = TimedDevice(TimedModel.from_rates(RATES), arithmetic=False)
    engine = TimedEngine(device)
    tk, k, w = 2048, 32768 if side == 4096 else 65536, 4
    engine.configure(panel_depth=tk)
    a = engine.host_buffer(side * tk, np.float32).reshape(side, tk)
    b = engine.host_buffer(tk * side, np.float32).reshape(tk, side)
    started = time.perf_counter()
    engine.start_tile((side, side), np.float32)
    for _ in range(k // tk):
        engine.accumulate(a, b)
    engine.finish_tile()
    wall = time.perf_counter() - started
    ledger = device.ledger
    span, engines = ledger.span(), ledger.by_engine()

    kernel = 2 * side * side * k / RATES.kernel_flops["float32"]
    h2d = 2 * side * k * w / RATES.pcie_bps
    back = side * side * w / RATES.pcie_bps
    first = tk * 2 * side * w / RATES.pcie_bps
    assert engines["compute"] == pytest.approx(kernel, rel=1e-9)
    assert engines["h2d"] == pytest.approx(h2d, rel=1e-9)
    assert engines["d2h"] == pytest.approx(back, rel=1e-9)
    slowest = max(kernel, h2d)
    assert (kernel > h2d) == (bound == "kernel")
    assert span == pytest.approx(first + slowest + back, rel=0.01)

    # The planner's prediction of the same tile, its host infinitely fast.
    fast_host = dataclasses.replace(RATES, decode_bps_per_thread=1e18, write_bps=1e18)
    problem = Problem(side, k, side, w, a_chunks=(side, tk), b_chunks=(tk, side))
    planned = gpu_seconds(problem, side, side, tk, 1, 1, 1, gpu_target("float32", fast_host))
    assert span == pytest.approx(planned, rel=0.10)

    timings = engine.timings()  # the engine's events read the ledger
    assert timings["kernel_seconds"] == pytest.approx(kernel, rel=1e-9)
    assert wall >= 0.95 * span  # the waits are real


def test_streams_on_different_engines_overlap():
    """A copy on one stream and a kernel on another, 10 ms each: 10 ms in all, not 20; two
    copies the same way share the one copy engine and take 20."""
    device = TimedDevice(SLOW, arithmetic=False)
    copies, compute = device.stream(), device.stream()
    host = np.empty(10_000_000, np.uint8)  # 10 ms at 1 GB/s
    a, b, c = (device.empty(shape, np.float32) for shape in [(100, 500), (500, 100), (100, 100)])
    started = time.perf_counter()
    device.to_device(host, device.device(host.size), copies)
    device.gemm(a, b, c, False, compute)  # 2·100·100·500 = 1e7 FLOPs: 10 ms
    copies.synchronize()
    compute.synchronize()
    wall = time.perf_counter() - started
    ledger = device.ledger
    assert ledger.busy() == {copies.index: pytest.approx(0.01), compute.index: pytest.approx(0.01)}
    assert ledger.span() == pytest.approx(0.01)
    assert ledger.overlap() == pytest.approx(0.01)
    assert wall >= 0.0095

    ledger.clear()
    other = device.stream()
    device.to_device(host, device.device(host.size), copies)
    device.to_device(host, device.device(host.size), other)
    other.synchronize()
    work = ledger.work()
    assert work[1].start == pytest.approx(work[0].end)  # one engine: one copy after the other
    assert ledger.span() == pytest.approx(0.02) and ledger.overlap() == pytest.approx(0.0)
    # Copies the other way have an engine of their own.
    ledger.clear()
    device.to_device(host, device.device(host.size), copies)
    device.to_host(device.device(host.size), np.empty_like(host), other)
    copies.synchronize()
    other.synchronize()
    assert ledger.overlap() == pytest.approx(0.01)


def test_events_order_work_across_streams():
    """A kernel waiting for an event recorded after a copy on another stream starts when the
    copy ends, and reads the copied data; the event's elapsed time is the modelled one."""
    device = TimedDevice(SLOW)
    copies, compute = device.stream(), device.stream()
    rng = np.random.default_rng(3)
    a_host = rng.standard_normal((200, 300)).astype(np.float32)  # 240 kB: 0.24 ms
    b_host = rng.standard_normal((300, 100)).astype(np.float32)
    a, b = device.device(a_host.nbytes), device.device(b_host.nbytes)
    a, b = a.view(np.float32).reshape(200, 300), b.view(np.float32).reshape(300, 100)
    a[...] = 0
    b[...] = 0
    c = np.full((200, 100), np.nan, np.float32)
    start, copied, done = device.event(), device.event(), device.event()
    start.record(copies)
    device.to_device(a_host, a, copies)
    device.to_device(b_host, b, copies)
    copied.record(copies)
    copied.wait(compute)
    device.gemm(a, b, c, False, compute)  # 2·200·100·300 = 12 MFLOP: 12 ms
    done.record(compute)
    done.synchronize()
    np.testing.assert_allclose(c, a_host @ b_host, rtol=1e-5, atol=1e-4)
    copy_work, _, kernel = device.ledger.work()
    assert kernel.start == pytest.approx(device.ledger.work()[1].end)
    assert start.elapsed_time(copied) == pytest.approx(1000 * (a_host.nbytes + b_host.nbytes) / 1e9)
    assert copied.elapsed_time(done) == pytest.approx(12.0)
    assert device.event().elapsed_time(done) == -1.0  # an event never recorded times nothing
    # The host waited for `done`: work it queues now starts no earlier, even on an idle stream.
    late = device.stream()
    device.to_device(a_host, a, late)
    late.synchronize()
    assert device.ledger.work()[-1].start == pytest.approx(kernel.end)
    assert copy_work.start == pytest.approx(0.0)


def test_work_that_fails_breaks_the_device():
    device = TimedDevice(SLOW)
    stream = device.stream()
    a, b, c = np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), np.ones((5, 5), np.float32)
    device.gemm(a, b, c, False, stream)  # c is the wrong shape: numpy refuses, on the stream
    with pytest.raises(BackendError, match="work on the timed device failed"):
        stream.synchronize()
    with pytest.raises(InputError, match="the sizes differ"):
        device.to_device(np.ones(4, np.uint8), np.ones(5, np.uint8), stream)


def test_a_model_with_a_rate_that_is_not_positive_is_refused():
    with pytest.raises(InputError, match="must be positive"):
        dataclasses.replace(SLOW, pcie_bps=0.0)
    with pytest.raises(BackendError, match="multiplies float32"):
        TimedModel(kernel_flops={"float32": 1e9}, pcie_bps=1e9, blocks=RATES.blocks).kernel_seconds(
            1, 1, 1, np.float64
        )


def _bound(dtype: np.dtype, k: int, magnitude: np.ndarray) -> np.ndarray:
    """A rounding bound of a ``k``-deep product in ``dtype``: ``2·(k+1)·eps·(|A|·|B|)``."""
    return 2 * (k + 1) * np.finfo(dtype).eps * magnitude


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("resident", [True, False])
def test_products_are_right(dtype, resident):
    """The engine on the timed device (small blocks: a sub-tiled plan in a few kB), panels
    contiguous, sliced and transposed, against numpy in float64 (complex128)."""
    model = dataclasses.replace(SLOW, kernel_flops=dict.fromkeys(SLOW.kernel_flops, 1e15))
    model = dataclasses.replace(model, pcie_bps=1e15, blocks={w: (8, 8, 4) for w in (4, 8, 16)})
    device_memory = None if resident else 400 * np.dtype(dtype).itemsize  # sub-tiled
    engine = TimedEngine(TimedDevice(model), device_memory=device_memory)
    rng = np.random.default_rng(5)
    m, n, widths = 19, 23, [9, 5, 7]

    def values(shape):
        x = rng.standard_normal(shape)
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.standard_normal(shape)
        return x.astype(dtype)

    engine.start_tile((m, n), dtype)
    expected = np.zeros((m, n), np.complex128)
    magnitude = np.zeros((m, n))
    for i, s in enumerate(widths):
        a = values((m, s)) if i != 1 else values((s, m)).T  # a transposed view
        b = values((s, n + 3))[:, 1 : n + 1]  # rows at a pitch
        engine.accumulate(a, b)
        expected += a.astype(np.complex128) @ b.astype(np.complex128)
        magnitude += np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    out = engine.finish_tile()
    assert out.dtype == dtype and out.shape == (m, n)
    assert engine.device_plan.resident is resident
    assert np.all(np.abs(out - expected) <= _bound(np.dtype(dtype), sum(widths), magnitude))
    assert engine.copy_layouts["columns"] > 0 and engine.copy_layouts["rows"] > 0


def test_the_registry_runs_a_job_on_the_timed_device(tmp_path, monkeypatch):
    """Backend ``"timed"``: a GPU backend with the device engine's capabilities and the timed
    device's rates; a job on it (tasks in this thread) gives numpy's product, and its tiles'
    work is in the device's ledger."""
    backend = registry.get("timed")
    assert backend.gpu and backend.capabilities == TimedEngine.capabilities
    assert backend.rates is RATES and backend.usable(False)
    made = registry.make_engine("timed")
    assert isinstance(made, TimedEngine) and made.device is process_device()
    device = TimedDevice(TimedModel.from_rates(RATES))
    # The job's tasks run in this thread: give them an engine of their own device, which
    # keeps its pinned buffers as a worker's does (gone with the test).
    monkeypatch.setitem(worker_context().thread().engines, "timed", TimedEngine(device))
    rng = np.random.default_rng(9)
    a, b = random_matrix(rng, (70, 40), "float32"), random_matrix(rng, (40, 50), "float32")
    write_zarr(tmp_path / "a.zarr", a, (16, 16))
    write_zarr(tmp_path / "b.zarr", b, (16, 16))
    options = {"backend": "timed", "client": "sync", "progress": False, "memory": "16MiB"}
    result = run_job(
        str(tmp_path / "a.zarr"),
        str(tmp_path / "b.zarr"),
        str(tmp_path / "c.zarr"),
        tile=(32, 32),
        tk=16,
        **options,
    )
    assert_product_close(result.output[...], a, b)
    assert {"h2d", "gemm", "d2h"} <= {work.kind for work in device.ledger.work()}


def test_the_device_engine_and_the_timed_device_import_no_gpu_library():
    """The device engine (backends/device) and the timed device (backends/timed) run where
    numba-cuda is not installed: they import no numba, and of the CUDA backend only its
    tables (pure data)."""
    root = Path(__file__).resolve().parents[3] / "outofcore" / "backends"
    files = sorted((root / "device").glob("*.py")) + sorted((root / "timed").glob("*.py"))
    assert len(files) >= 8
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                names = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                assert not name.startswith(("numba", "cuda.", "cupy")), (path.name, name)
                if name.startswith("outofcore.backends.cuda"):
                    assert name in {"outofcore.backends.cuda.rates"}, (path.name, name)


def test_a_modelled_write_waits_its_time_one_at_a_time_and_is_in_the_ledger():
    """The timed device's disk (issue 52): a finished tile's write waits bytes / write_bps
    on the writing thread, writes of two threads one after the other, each in the ledger."""
    import threading  # noqa: PLC0415

    device = TimedDevice(dataclasses.replace(SLOW, write_bps=1e6))
    engine = TimedEngine(device)
    started = time.perf_counter()
    writers = [threading.Thread(target=engine.wrote, args=(20_000,)) for _ in range(2)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert time.perf_counter() - started >= 0.04  # 20 ms each, one at a time
    writes = [w for w in device.ledger.work() if w.kind == "write"]
    assert [(w.engine, w.stream, w.amount) for w in writes] == [("write", 0, 20_000)] * 2
    assert writes[1].start == pytest.approx(writes[0].end)
    assert device.ledger.by_engine()["write"] == pytest.approx(0.04)
    TimedEngine(TimedDevice(SLOW)).wrote(1 << 30)  # no modelled disk: no wait
    with pytest.raises(InputError, match="write rate"):
        dataclasses.replace(SLOW, write_bps=0.0)


def test_engines_on_one_device_take_a_share_for_the_tiles_in_flight_before_they_all_exist():
    """A worker of two tiles in flight: its first engine plans with half the device, not
    the whole, though the second is not made yet (issue 52)."""
    device = TimedDevice(dataclasses.replace(SLOW, memory_bytes=1 << 30))
    engine = TimedEngine(device, fraction=1.0)
    assert engine.budget_bytes == 1 << 30
    engine.configure(tiles_in_flight=2)
    assert engine.budget_bytes == 1 << 29
    second = TimedEngine(device, fraction=1.0)
    assert engine.budget_bytes == second.budget_bytes == 1 << 29
    with pytest.raises(InputError, match="tiles_in_flight"):
        engine.configure(tiles_in_flight=0)


def test_a_timed_worker_makes_its_device_as_the_jobs_process_describes_it(monkeypatch):
    """A timed GPU worker process makes its device from the job's process's description
    (the node's worker environment), model and arithmetic alike; a bad one is refused."""
    from outofcore.backends import timed  # noqa: PLC0415

    made = TimedDevice(dataclasses.replace(SLOW, write_bps=5e6), arithmetic=False)
    previous = timed.use_process_device(made)
    try:
        env = timed.TIMED_NODE.worker_env((0, 1), 1)
        timed.use_process_device(None)
        monkeypatch.setenv(timed.DEVICE_VARIABLE, env[timed.DEVICE_VARIABLE])
        again = timed.process_device()
        assert again is not made and again.model == made.model and not again.arithmetic
        timed.use_process_device(None)
        monkeypatch.setenv(timed.DEVICE_VARIABLE, "{}")
        with pytest.raises(InputError, match=timed.DEVICE_VARIABLE):
            timed.process_device()
    finally:
        timed.use_process_device(previous)

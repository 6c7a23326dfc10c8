"""``python -m benchmarks.compare`` end to end on tiny inputs, and what speed relies on."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from importlib import import_module

import numpy as np
import pytest

from outofcore.backends.blas import gemm_accumulate
from outofcore.backends.cpu import CpuEngine
from outofcore.planner.io_model import io_lower_bound
from outofcore.planner.problem import Problem
from outofcore.runtime.worker_sizing import WORKER_OVERHEAD_BYTES
from tests.helpers import ROOT


def test_compare_runs_numpy_and_outofcore_and_writes_json_and_png(tmp_path):
    compare = import_module("benchmarks.compare")
    out = tmp_path / "results"
    status = compare.main(
        [
            "--size",
            "256",
            "--chunk",
            "128",
            "--repeats",
            "1",
            "--systems",
            "numpy,outofcore",
            "--memory",
            "64MiB",
            "--data-dir",
            str(tmp_path / "data"),
            "--out-dir",
            str(out),
            "--blas",
            "inherit",  # tests keep this machine's OpenBLAS settings
        ]
    )
    assert status == 0
    result = json.loads((out / "compare-256.json").read_text())
    assert set(result["systems"]) == {"numpy", "outofcore"}
    square = Problem(m=256, k=256, n=256, itemsize=4, a_chunks=(128, 128), b_chunks=(128, 128))
    assert result["info"]["lower_bound_bytes"] == io_lower_bound(square, 64 * 2**20)
    ours = result["systems"]["outofcore"]
    assert ours["seconds_median"] > 0 and ours["peak_rss_bytes"] > 0
    assert ours["ratio_to_numpy"] > 0
    assert ours["blas"] and all("openblas" in k for k in ours["blas"])  # the kernel is recorded
    assert ours["runs"][0]["outofcore"]["bytes_read"] == 2 * 256 * 256 * 4
    assert (out / "compare-256.png").stat().st_size > 1000
    # Inputs are cached: a second call reuses them.
    assert (tmp_path / "data" / "a-256-128.zarr" / ".complete").exists()


def test_blas_call_releases_the_gil():
    """The reader thread must decode while BLAS multiplies (f2py's sgemm holds the GIL)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1024, 1024), dtype=np.float32)
    b = rng.standard_normal((1024, 1024), dtype=np.float32)
    c = np.zeros((1024, 1024), np.float32)
    assert gemm_accumulate(c, a, b, 0.0)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-3)
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(None)
            time.sleep(0)

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        started = time.perf_counter()
        calls = 0
        while time.perf_counter() - started < 0.3 or calls < 2:
            before = len(ticks)
            gemm_accumulate(c, a, b, 1.0)
            calls += 1
        during_last_call = len(ticks) - before
    finally:
        stop.set()
        thread.join()
    assert during_last_call > 0


def test_engine_streams_row_blocks_of_the_last_panel():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 48), dtype=np.float32)
    b = rng.standard_normal((48, 40), dtype=np.float32)
    engine = CpuEngine()
    engine.start_tile((64, 40), np.dtype(np.float32))
    engine.accumulate(np.ascontiguousarray(a[:, :16]), np.ascontiguousarray(b[:16]))
    last_a, last_b = np.ascontiguousarray(a[:, 16:]), np.ascontiguousarray(b[16:])
    blocks = [engine.accumulate_rows(r, [(last_a[r : r + 16], last_b)]) for r in range(0, 64, 16)]
    tile = engine.finish_tile()
    np.testing.assert_allclose(tile, a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.vstack(blocks), a @ b, rtol=1e-4, atol=1e-4)
    # A single panel streamed by rows: beta = 0 for every block.
    engine.start_tile((64, 40), np.dtype(np.float32))
    a1, b1 = np.ascontiguousarray(a[:, :8]), np.ascontiguousarray(b[:8])
    for r in range(0, 64, 32):
        engine.accumulate_rows(r, [(a1[r : r + 32], b1)])
    np.testing.assert_allclose(engine.finish_tile(), a1 @ b1, rtol=1e-4, atol=1e-4)
    # Two panels streamed together from a fresh tile: beta = 0 for the first only.
    engine.start_tile((64, 40), np.dtype(np.float32))
    a2, b2 = np.ascontiguousarray(a[:, 8:20]), np.ascontiguousarray(b[8:20])
    for r in range(0, 64, 24):  # 24 does not divide 64: a short last block
        engine.accumulate_rows(r, [(a1[r : r + 24], b1), (a2[r : r + 24], b2)])
    np.testing.assert_allclose(engine.finish_tile(), a[:, :20] @ b[:20], rtol=1e-4, atol=1e-4)


def sixteen_tiles_as_in_a_worker(tmp_path, monkeypatch, seed):
    """A 512x384 @ 384x448 job in 16 tiles of 128² (the last column ragged), run
    in-process as a Dask worker thread runs it: keeping buffers between tasks."""
    from outofcore.api import run_job
    from outofcore.compute import panel_cache
    from outofcore.compute.worker_context import worker_context
    from outofcore.frontends.generate import random_array

    monkeypatch.setattr(panel_cache, "in_dask_worker", lambda: True)
    a = random_array(tmp_path / "a.zarr", (512, 384), (64, 64), seed=seed)
    b = random_array(tmp_path / "b.zarr", (384, 448), (64, 64), seed=seed + 1)
    try:
        result = run_job(
            a,
            b,
            tmp_path / "c.zarr",
            memory=2**20,
            backend="cpu",
            client="sync",
            progress=False,
            tile=(128, 128),
            tk=64,
        )
    finally:
        worker_context().release_thread()
    return a, b, result


def test_consecutive_tiles_reuse_the_panel_their_predecessor_ended_on(tmp_path, monkeypatch):
    import zarr

    a, b, result = sixteen_tiles_as_in_a_worker(tmp_path, monkeypatch, seed=0)
    s = result.summary
    assert s["tiles"] == 16
    # Every tile after the first starts with a panel its predecessor holds: an
    # A panel (same tile row) or a B panel (the turn at the end of a row).
    saved = 0
    for before, after in zip(result.plan.tasks, result.plan.tasks[1:], strict=False):
        rows, cols = after.shape
        saved += 4 * 64 * (rows if before.i == after.i else cols)
    assert saved > 0
    assert s["bytes_read"] == s["bytes_read_predicted"] - saved
    c = zarr.open_array(tmp_path / "c.zarr", mode="r")[...]
    np.testing.assert_allclose(c, a[...] @ b[...], rtol=1e-4, atol=1e-3)


def test_rows_get_the_second_last_panel_while_the_last_one_loads(tmp_path, monkeypatch):
    import time

    import zarr

    import outofcore.operands.reading
    import outofcore.planner.memory
    from outofcore.api import run_job
    from outofcore.frontends.generate import random_array

    a = random_array(tmp_path / "a.zarr", (320, 256), (32, 64), seed=5)
    b = random_array(tmp_path / "b.zarr", (256, 96), (64, 96), seed=6)
    monkeypatch.setattr(outofcore.planner.memory, "WRITE_BLOCK_ROWS", 1)  # blocks of one chunk row
    read = outofcore.operands.reading.read_panel

    def slow_last_panel(array, selection, out):
        if selection[1 if array is a else 0].start == 192:  # the last k-panel
            time.sleep(0.5)
        read(array, selection, out)

    monkeypatch.setattr(outofcore.operands.reading, "read_panel", slow_last_panel)
    calls: list[int] = []
    accumulate_rows = CpuEngine.accumulate_rows
    monkeypatch.setattr(
        CpuEngine,
        "accumulate_rows",
        lambda self, r0, parts: calls.append(len(parts)) or accumulate_rows(self, r0, parts),
    )
    out = random_array(tmp_path / "c.zarr", (320, 96), (32, 96))  # an array outofcore made
    result = run_job(a, b, out, memory=2**20, client="sync", progress=False, tk=64, overwrite=True)
    assert len(result.plan.tasks) == 1 and len(result.plan.panels) == 4
    # Blocks given the third panel alone while the fourth loaded take the fourth
    # alone after it; the others take both at once: 10 blocks of 32 rows.
    early = calls.count(1) // 2
    assert early > 0 and calls.count(2) == 10 - early and len(calls) == 10 + early
    c = zarr.open_array(tmp_path / "c.zarr", mode="r")[...]
    np.testing.assert_allclose(c, a[...] @ b[...], rtol=1e-4, atol=1e-3)


def test_worker_threads_reuse_their_buffers_from_tile_to_tile(tmp_path, monkeypatch):
    import zarr

    sizes: list[int] = []
    allocate = CpuEngine.host_buffer
    monkeypatch.setattr(
        CpuEngine, "host_buffer", lambda self, n, dtype: sizes.append(n) or allocate(self, n, dtype)
    )
    a, b, result = sixteen_tiles_as_in_a_worker(tmp_path, monkeypatch, seed=2)
    # 16 tiles of 4 panel buffers each; without reuse every tile after the first
    # would allocate 3 (one held panel).  New ones only where the size changes:
    # the first tile and the turns at the ragged column.
    assert result.summary["tiles"] == 16
    assert 4 <= len(sizes) <= 16, sizes
    c = zarr.open_array(tmp_path / "c.zarr", mode="r")[...]
    np.testing.assert_allclose(c, a[...] @ b[...], rtol=1e-4, atol=1e-3)


def test_cpu_engine_reuses_its_accumulator_for_a_tile_of_the_same_shape():
    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal((24, 24), dtype=np.float32) for _ in range(2))
    engine = CpuEngine()
    engine.start_tile((24, 24), np.dtype(np.float32))
    engine.accumulate(a, b)
    first = engine.finish_tile()
    engine.start_tile((24, 24), np.dtype(np.float32))  # garbage from the last tile: beta = 0
    engine.accumulate(b, a)
    second = engine.finish_tile()
    assert second is first
    np.testing.assert_allclose(second, b @ a, rtol=1e-5, atol=1e-5)
    engine.start_tile((24, 16), np.dtype(np.float32))
    engine.accumulate(a, b[:, :16].copy())
    assert engine.finish_tile() is not first
    engine.release()
    engine.start_tile((24, 16), np.dtype(np.float32))  # k = 0 after a release: zeros
    assert not engine.finish_tile().any()


def test_direct_chunk_reader_matches_zarr_with_ragged_edges_and_missing_chunks(tmp_path):
    import os

    import zarr

    from outofcore.frontends.generate import random_array
    from outofcore.operands.reading import read_panel
    from outofcore.storage.chunkfiles import plain_layout

    path = tmp_path / "a.zarr"
    random_array(path, (300, 250), (64, 48), seed=3)
    os.remove(path / "c" / "1" / "2")  # a chunk never written reads as the fill value
    array = zarr.open_array(path, mode="r")
    assert plain_layout(array) is not None  # zarr's default layout takes the fast path
    full = array[...]
    selections = [
        (slice(0, 300), slice(0, 250)),
        (slice(64, 300), slice(48, 97)),
        (slice(0, 256), slice(48, 96)),  # whole chunks, contiguous in the panel: decoded in place
        (slice(0, 300), slice(192, 250)),
    ]
    for rows, cols in selections * 2:  # twice: the decoding threads' reused buffers
        out = np.empty((rows.stop - rows.start, cols.stop - cols.start), np.float32)
        read_panel(array, (rows, cols), out)
        np.testing.assert_array_equal(out, full[rows, cols])
    other = zarr.create_array(
        tmp_path / "lz4.zarr",
        shape=(10, 10),
        chunks=(5, 5),
        dtype="float32",
        compressors=zarr.codecs.BloscCodec(cname="lz4"),
    )
    other[...] = np.arange(100, dtype=np.float32).reshape(10, 10)
    assert plain_layout(other) is None  # anything else goes through zarr
    out = np.empty((10, 10), np.float32)
    read_panel(other, (slice(0, 10), slice(0, 10)), out)
    np.testing.assert_array_equal(out, other[...])


def test_latency_benchmark_runs_every_system_through_the_delaying_proxy(tmp_path, moto_server):
    """benchmarks.latency --quick: local, delayed S3 (two settings) and dask.array."""
    latency = import_module("benchmarks.latency")
    report = latency.main(["--quick", "--delay", "0.005", "--json", str(tmp_path / "l.json")])
    assert json.loads((tmp_path / "l.json").read_text()) == report
    systems = report["systems"]
    assert set(systems) == set(latency.SYSTEMS)
    assert systems["outofcore local"]["ratio_to_local"] == 1.0
    assert systems["outofcore local"]["runs"][0]["requests"] == 0  # never touched S3
    for name in ("outofcore S3", "outofcore S3, 2 in flight", "dask.array S3"):
        assert systems[name]["median_seconds"] > 0
        # At least every chunk of A and B (4x4 each) went through the proxy.
        assert systems[name]["runs"][0]["requests"] >= 32, (name, systems[name])
    assert "dask.array S3" in latency.latency_table(report)


def test_delay_proxy_delays_each_request_and_counts_it(moto_server):
    s3_local = import_module("benchmarks.s3_local")
    import s3fs  # noqa: PLC0415

    bucket = moto_server.bucket("proxy-probe").removeprefix("s3://")
    with s3_local.DelayProxy(("127.0.0.1", moto_server.port), 0.1) as proxy:
        fs = s3fs.S3FileSystem(
            **{**moto_server.options, "endpoint_url": proxy.endpoint}, skip_instance_cache=True
        )
        fs.pipe(f"{bucket}/x", b"abc")
        started = time.perf_counter()
        for _ in range(3):
            assert fs.cat_file(f"{bucket}/x", start=0, end=3) == b"abc"
        took = time.perf_counter() - started
    assert 0.3 <= took < 3, took  # three requests, 0.1 s each on the way in
    assert proxy.counts.requests >= 4 and proxy.counts.bytes_down > 0


def test_capped_benchmark_runs_every_system_inside_the_cgroup(tmp_path):
    """benchmarks.capped on 1024² inputs under a 1 GiB cap (its refusal, job, dask, numpy)."""
    cgroup = import_module("benchmarks.harness.cgroup")
    why = cgroup.unavailable()
    if why:
        pytest.skip(f"no capped cgroup here: {why}")
    capped = import_module("benchmarks.capped")
    out = tmp_path / "results"
    data = str(tmp_path / "data")
    sizes = ["--size", "1024", "--chunk", "256", "--cap", "1GiB"]
    report = capped.main([*sizes, "--data-dir", data, "--out-dir", str(out)])
    assert json.loads((out / "capped-1024.json").read_text()) == report
    refusal = report["refusal"]
    assert refusal["returncode"] == 2 and not refusal["output_created"]
    assert f"cgroup memory limit 1 GiB ({refusal['limit_file']})" in refusal["message"]
    ours = report["outofcore"]
    assert ours["returncode"] == 0 and ours["verified"] and ours["oom_kill"] == 0
    assert 0 < ours["max_usage_bytes"] <= 2**30 and ours["sampled_peak_rss_bytes"] > 0
    assert ours["summary"]["task_budget_bytes"] == 2**30 - WORKER_OVERHEAD_BYTES  # within the cap
    assert report["dask_array"]["outcome"] == "finished"
    assert report["numpy"]["seconds"] > 0 and ours["ratio_to_numpy"] > 0
    assert "dask.array" in capped.capped_table(report)
    assert not list((tmp_path / "data").glob("capped-*"))  # scratch outputs removed


def test_shape_zoo_runs_every_shape_and_checks_every_result(tmp_path):
    """benchmarks.shapes at 1/64 scale: every shape, system and floor, results checked."""
    shapes = import_module("benchmarks.shapes")
    out = tmp_path / "results"
    png = tmp_path / "zoo.png"
    status = shapes.main(
        [
            "--scale",
            "64",
            "--repeats",
            "1",
            "--memory",
            "256MiB",
            "--data-dir",
            str(tmp_path / "data"),
            "--out-dir",
            str(out),
            "--png",
            str(png),
            "--blas",
            "inherit",  # tests keep this machine's OpenBLAS settings
        ]
    )
    assert status == 0
    (path,) = out.glob("shapes-*-scale64.json")
    result = json.loads(path.read_text())
    assert list(result["shapes"]) == list(shapes.SHAPES)
    for name, entry in result["shapes"].items():
        for system in shapes.SYSTEMS:
            assert entry["systems"][system]["seconds_median"] > 0, (name, system)
        # dask.array's and outofcore's outputs matched numpy's within the float32 tolerance.
        for system in ("dask", "outofcore"):
            verified = entry["verified"][system]
            assert verified["ok"] and verified["checks"][0]["error_ratio"] <= 1, (name, verified)
        figures = entry["figures"]
        assert figures["tasks"] >= 1 and len(figures["workers"]) == 2
        assert figures["read_over_lower_bound"]["outofcore"] > 0
        assert {t["target"] for t in figures["targets"]} >= {
            "dask / outofcore",
            "read / lower bound",
        }
    assert result["shapes"]["skinny"]["figures"]["floor"]["seconds"] > 0
    assert result["shapes"]["flat"]["figures"]["floor"]["system"] == "write-floor"
    assert png.stat().st_size > 1000


def test_shape_zoo_check_fails_a_wrong_product(tmp_path):
    """The zoo's check tells a product missing one k-panel from float32 rounding."""
    import zarr

    checking = import_module("benchmarks.harness.checking")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 4096), dtype=np.float32)
    b = rng.standard_normal((4096, 48), dtype=np.float32)
    paths = {}
    for name, value in {
        "ref": a @ b,
        "reordered": (a[:, ::-1] @ b[::-1]).astype(np.float32),  # another summation order
        "missing": a[:, 256:] @ b[256:],  # one 256-deep panel lost
    }.items():
        paths[name] = str(tmp_path / f"{name}.zarr")
        zarr.create_array(paths[name], data=value, chunks=(32, 48))
    assert checking.compare_outputs(paths["reordered"], paths["ref"], 4096)["ok"]
    assert not checking.compare_outputs(paths["missing"], paths["ref"], 4096)["ok"]
    assert not checking.compare_outputs(str(tmp_path / "none.zarr"), paths["ref"], 4096)["ok"]


def test_task_memory_benchmark_measures_every_kind_of_task(tmp_path, moto_server):
    """benchmarks.task_memory at 1/16 scale: every case in its own process, each kind
    of task's peak RSS against its projection, every output verified."""
    task_memory = import_module("benchmarks.task_memory")
    out = tmp_path / "results"
    status = task_memory.main(["--scale", "16", "--out-dir", str(out)])
    assert status == 0
    (path,) = out.glob("task-memory-*-scale16.json")
    cases = json.loads(path.read_text())["cases"]
    kinds = {name: set(figures["kinds"]) for name, figures in cases.items()}
    assert kinds == {
        "tile": {"tile"},
        "split": {"split part", "reduction"},
        "gram": {"gram diagonal", "gram off-diagonal"},
        "staged": {"tile"},
        "wide-int": {"tile"},
        "s3": {"tile"},
        "sharded": {"tile"},
        "sharded-zarr": {"tile"},
        "vector": {"tile"},
        "centered": {"gram diagonal"},  # at 1/16 the Gram is one tile
        "stack": {"tile"},
    }
    for name, figures in cases.items():
        assert figures["verified"], name
        assert task_memory.check(figures, WORKER_OVERHEAD_BYTES) == [], name
        assert all(entry["projected"] > 0 for entry in figures["kinds"].values())
    assert cases["split"]["splits"] == 32 and cases["s3"]["io_concurrency"] == 16
    assert cases["tile"]["kinds"]["tile"]["measured"] > 0


def test_task_memory_check_fails_a_kind_over_its_projection_and_a_wrong_output():
    task_memory = import_module("benchmarks.task_memory")
    figures = {"verified": True, "kinds": {"tile": {"projected": 100, "measured": 150}}}
    assert task_memory.check(figures, 50) == []
    assert (
        "tile: 151 bytes"
        in task_memory.check(
            {**figures, "kinds": {"tile": {"projected": 100, "measured": 151}}}, 50
        )[0]
    )
    assert task_memory.check({**figures, "verified": False}, 50) == ["the output failed verify"]


def test_host_packing_benchmark_compares_packing_with_the_2d_copy(tmp_path):
    """benchmarks.host_packing on a small transposed panel: both figures, the ratio."""
    out = tmp_path / "packing.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.host_packing", "--rows", "2048", "--depth", "256",
         "--repeats", "3", "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
    )  # fmt: skip
    figures = json.loads(out.read_text())
    assert figures["panel"] == [2048, 256] and figures["bytes"] == 2048 * 256 * 4
    assert figures["packing_ms"] > 0 and figures["two_d_copy_host_ms"] > 0
    assert figures["ratio"] == pytest.approx(figures["packing_ms"] / figures["two_d_copy_host_ms"])
    assert result.returncode == (0 if figures["ratio"] >= 10 else 1), result.stdout
    assert "less host time" in result.stdout


def test_matvec_and_stack_benchmarks_check_every_system(tmp_path):
    """benchmarks.matvec and benchmarks.matmul_stack in their quick modes: every system ran,
    every output agreed with numpy's (issue 30)."""
    for name in ("matvec", "matmul_stack"):
        bench, out = import_module(f"benchmarks.{name}"), tmp_path / f"{name}.json"
        args = ["--quick", "--dir", str(tmp_path / "data"), "--json", str(out)]
        assert bench.main([*args, "--systems", "numpy,dask,outofcore"]) == 0, name
        report = json.loads(out.read_text())
        assert not report["failed"] and not report["wrong"], name
        assert "outofcore" in report["medians"], name


def test_centered_gram_benchmark_runs_both_systems_on_one_cluster(tmp_path):
    """benchmarks.centered_gram --quick: outofcore.to_zarr(xc.T @ xc) and dask's,
    agreeing with each other and with float64, within the memory projection (issue 31)."""
    out = tmp_path / "gram.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.centered_gram", "--quick", "--dir", str(tmp_path),
         "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    assert figures["symmetric"] is True and figures["within"] is True
    assert figures["error_vs_float64"] < 1e-5 and figures["outofcore_vs_dask"] < 1e-5
    assert figures["outofcore_s"] > 0 and figures["dask_s"] > 0

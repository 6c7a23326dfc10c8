"""The worker context (what a process keeps between tasks) and the recorded-task wrapper's
figures, for every kind of task (issue 20, items 4 and 5)."""

from __future__ import annotations

import os
import socket
import threading
import time

import numpy as np
import zarr

from outofcore.api import run_job
from outofcore.backends.cpu import CpuEngine
from outofcore.compute import panel_cache
from outofcore.compute.worker_context import worker_context
from outofcore.jobs import recorded, splitk
from outofcore.storage.chunk_io import chunk_io
from tests.helpers import assert_product_close, random_matrix, write_zarr


def test_every_task_kind_gets_its_figures_from_the_wrapper(tmp_path, monkeypatch):
    """Split parts, reductions and (in a second job) whole tiles: seconds, worker and memory
    come from run_recorded, the bytes from the task's own work, and each result is what its
    journal record keeps."""
    rng = np.random.default_rng(41)
    a, b = random_matrix(rng, (97, 613), "float32"), random_matrix(rng, (613, 89), "float32")
    write_zarr(tmp_path / "a.zarr", a, (50, 61))
    write_zarr(tmp_path / "b.zarr", b, (61, 40))
    slow = 0.05
    compute = recorded.compute_tile

    def slower(*args, **kwargs):  # the wrapper's clock must see time spent in compute
        time.sleep(slow)
        return compute(*args, **kwargs)

    monkeypatch.setattr(recorded, "compute_tile", slower)  # tiles
    monkeypatch.setattr(splitk, "compute_tile", slower)  # split parts
    split = run_job(
        tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
        client="sync", progress=False, splits=3, tk=61,
    )  # fmt: skip
    assert_product_close(zarr.open_array(str(tmp_path / "c.zarr"))[...], a, b)
    plan = split.plan
    tiles = {task.key for task in plan.tasks}
    parts = [r for r in split.results if r.key not in tiles]
    reductions = [r for r in split.results if r.key in tiles]
    assert len(parts) == 3 * len(plan.tasks) and len(reductions) == len(plan.tasks)
    me = f"{socket.gethostname()}:{os.getpid()}"
    for result in split.results:
        assert result.worker == me and result.peak_rss_bytes > 0 and result.seconds > 0
    for part in parts:  # a part keeps its sum as scratch and writes nothing of the output
        assert part.bytes_written == 0 and part.scratch_bytes > 0 and part.bytes_read > 0
        assert part.seconds >= slow  # the wrapper's clock, not the compute function's
    for reduction in reductions:  # the reduction reads the parts back and writes the tile
        task = next(t for t in plan.tasks if t.key == reduction.key)
        assert reduction.bytes_written == task.shape[0] * task.shape[1] * 4
        assert reduction.scratch_bytes == 3 * reduction.bytes_written
    whole = run_job(
        tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "d.zarr",
        client="sync", progress=False, tile=(50, 40),
    )  # fmt: skip
    assert {r.key for r in whole.results} == {t.key for t in whole.plan.tasks}
    assert sum(r.bytes_written for r in whole.results) == 97 * 89 * 4
    assert all(r.seconds >= slow and r.scratch_bytes == 0 for r in whole.results)


def test_the_context_owns_engines_panels_and_buffers_and_lets_them_go(tmp_path, monkeypatch):
    """Tasks run as in a Dask worker thread leave their engine's accumulator, their last
    panels and the chunk-file buffers in the context for the next task; the in-process
    job releases all three when it ends."""
    monkeypatch.setattr(panel_cache, "in_dask_worker", lambda: True)
    rng = np.random.default_rng(42)
    a, b = random_matrix(rng, (130, 70), "float64"), random_matrix(rng, (70, 110), "float64")
    write_zarr(tmp_path / "a.zarr", a, (64, 35))
    write_zarr(tmp_path / "b.zarr", b, (35, 64))
    context = worker_context()
    before = context.kept_bytes()
    seen = []
    compute = recorded.compute_tile

    def watched(*args, **kwargs):
        io = compute(*args, **kwargs)
        state = context.thread()
        engine = state.engines["cpu"]
        panels = state.panels
        seen.append((type(engine), engine.kept_bytes(), panels, chunk_io().buffer_bytes()))
        assert context.kept_bytes() >= before + engine.kept_bytes() + panels.nbytes
        return io

    monkeypatch.setattr(recorded, "compute_tile", watched)
    run_job(
        tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
        client="sync", progress=False, tile=(64, 64), tk=35,
    )  # fmt: skip
    assert len(seen) == 6  # 3 x 2 tiles
    for engine_type, accumulator, panels, buffers in seen:
        assert engine_type is CpuEngine and accumulator > 0 and buffers > 0
        assert panels is not None and panels.identity.dtype == "<f8"
    # Another thread has a state of its own, with nothing kept.
    other = []
    thread = threading.Thread(target=lambda: other.append(context.thread()))
    thread.start()
    thread.join()
    assert other[0] is not context.thread() and other[0].panels is None and not other[0].engines
    # The job ended: this thread's share is let go.
    assert context.thread().panels is None
    assert context.thread().engines["cpu"].kept_bytes() == 0
    assert chunk_io().buffer_bytes() == 0
    assert_product_close(zarr.open_array(str(tmp_path / "c.zarr"))[...], a, b)


def _blas_threads() -> set[int]:
    from threadpoolctl import threadpool_info  # noqa: PLC0415

    return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}


def test_tasks_running_together_keep_blas_at_their_threads_until_the_last_ends():
    """threadpoolctl's limits are the process's: the first of two overlapping tasks to end
    must not give BLAS back its cores under the other (it did: each task restored what it
    found, and two tasks in one process then ran BLAS on every core each)."""
    from threadpoolctl import threadpool_limits  # noqa: PLC0415

    np.ones((2, 2)) @ np.ones((2, 2))  # BLAS loaded
    context = worker_context()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, set[int]] = {}

    def first() -> None:
        with context.blas_threads(1):
            first_in.set()
            second_in.wait(10)
            seen["first, both running"] = _blas_threads()
        first_out.set()

    def second() -> None:
        first_in.wait(10)
        with context.blas_threads(1):
            second_in.set()
            first_out.wait(10)
            seen["second, after the first ended"] = _blas_threads()

    with threadpool_limits(limits=2, user_api="blas"):
        before = _blas_threads()
        threads = [threading.Thread(target=f) for f in (first, second)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        after = _blas_threads()
    assert before == {2} and after == {2}, (before, after)
    assert seen == {"first, both running": {1}, "second, after the first ended": {1}}, seen
    with context.blas_threads(2), context.blas_threads(1):  # different counts: the smallest
        assert _blas_threads() == {1}

"""Every second of a task measured (issue 44, item 6): its setup, the CPU seconds of
decoding and of writing (the chunk threads' share included), a GPU's kernel and copy
seconds; in each task's result, the job's summary and Dask's dashboard."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import zarr
from distributed import Client

from outofcore.api import run_job
from outofcore.compute.cpu_meter import CpuMeter
from outofcore.jobs.recorded import DASHBOARD_UNIT, TASK_FIGURES
from outofcore.storage.chunk_io import chunk_io
from tests.helpers import assert_product_close, wait_for, write_zarr


def inputs(folder, seed=44):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((300, 260)).astype("float32")
    b = rng.standard_normal((260, 220)).astype("float32")
    write_zarr(folder / "a.zarr", a, (64, 64))  # zstd: decoding costs CPU
    write_zarr(folder / "b.zarr", b, (64, 64))
    return a, b


def test_the_summary_adds_up_where_each_task_spent_its_time(tmp_path):
    a, b = inputs(tmp_path)
    result = run_job(
        tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
        client="sync", memory="4MiB", progress=False, tile=(128, 128),
    )  # fmt: skip
    assert_product_close(zarr.open_array(tmp_path / "c.zarr")[...], a, b)
    summary = result.summary
    assert len(result.results) > 1
    for name in TASK_FIGURES:
        values = [getattr(r, name) for r in result.results]
        assert all(math.isfinite(v) and v >= 0 for v in values), name
        assert summary[name] == sum(values)
    for r in result.results:
        assert r.decode_cpu_seconds > 0 and r.write_cpu_seconds > 0 and r.setup_seconds > 0
        assert r.kernel_seconds == r.copy_seconds == r.first_launch_seconds == 0  # CPU
        # A span of the task: setup, then reads, compute and writes after it.
        assert r.setup_seconds < r.seconds


def test_the_cpu_meter_counts_the_chunk_threads_work_for_the_caller():
    """Work handed to the chunk threads counts for the thread that handed it, not for
    another thread handing work at the same time."""

    def spin(_index, _scratch):
        end = time.thread_time() + 0.05
        while time.thread_time() < end:
            pass

    mine, theirs = CpuMeter(), CpuMeter()

    def other():
        with theirs.span():
            time.sleep(0.3)  # hands nothing to the chunk threads

    thread = threading.Thread(target=other)
    thread.start()
    with mine.span():
        chunk_io().run_per_chunk([(i,) for i in range(4)], spin)
    thread.join()
    assert mine.seconds >= 4 * 0.05 * 0.9
    assert theirs.seconds < 0.05


def test_the_dashboard_shows_the_task_figures(tmp_path, local_cluster):
    inputs(tmp_path, seed=45)
    cluster = local_cluster(n_workers=1)
    with Client(cluster) as client:
        run_job(
            tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
            client=client, memory="4MiB", progress=False, tile=(128, 128),
        )  # fmt: skip

        def shown():
            metrics = client.run_on_scheduler(
                lambda dask_scheduler: list(dask_scheduler.cumulative_worker_metrics)
            )
            return {
                key[-2]
                for key in metrics
                if isinstance(key, tuple) and key[0] == "execute" and key[-1] == DASHBOARD_UNIT
            }

        wanted = {"decode_cpu", "write_cpu", "setup"}
        wait_for(lambda: wanted <= shown(), 30, f"the dashboard's metrics {sorted(wanted)}")

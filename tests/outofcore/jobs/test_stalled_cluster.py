"""A job on a cluster whose only worker stops running tasks (paused, as Dask's memory
monitor pauses it) ends after the stall-timeout setting, naming the worker, its output
not complete and its finished tiles kept; the same command resumes once the worker runs
again.  A cluster paused before the job starts is refused naming its worker's state."""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np
import pytest
import zarr
from distributed import Client, LocalCluster
from distributed.core import Status

from outofcore import config
from outofcore.api import ATTRIBUTE, run_job
from outofcore.compute.worker_context import worker_context
from outofcore.errors import ClusterError
from outofcore.runtime.stall import ClusterStalledError
from tests.helpers import (
    assert_product_close,
    random_matrix,
    set_worker_status,
    tile_records,
    write_zarr,
)


@contextlib.contextmanager
def _paused_later_cluster():
    """One worker in this process with no memory monitor: its status is the test's."""
    options = {"processes": False, "dashboard_address": None, "memory_limit": 0}
    try:
        with (
            LocalCluster(n_workers=1, threads_per_worker=1, **options) as local,
            Client(local, set_as_default=False) as client,
        ):
            yield local, client
    finally:  # the tasks ran in this process: what they kept is the test's to free
        worker_context().release_in_process()


def _inputs(folder):
    rng = np.random.default_rng(21)
    a, b = random_matrix(rng, (400, 300), "float32"), random_matrix(rng, (300, 300), "float32")
    write_zarr(folder / "a.zarr", a, (20, 20))
    write_zarr(folder / "b.zarr", b, (20, 20))
    return a, b


def test_a_job_whose_worker_pauses_fails_then_resumes(tmp_path):
    a, b = _inputs(tmp_path)
    c = tmp_path / "c.zarr"
    job = (tmp_path / "a.zarr", tmp_path / "b.zarr", c)
    with _paused_later_cluster() as (local, client):
        worker = next(iter(local.workers.values()))

        def pause_after_the_first_record():
            deadline = time.monotonic() + 60
            while not (c.exists() and tile_records(c)) and time.monotonic() < deadline:
                time.sleep(0.002)
            client.run(set_worker_status(Status.paused))

        pauser = threading.Thread(target=pause_after_the_first_record)
        pauser.start()
        started = time.monotonic()
        with config.set({"stall-timeout": 2}), pytest.raises(ClusterStalledError) as raised:
            run_job(*job, client=client, progress=False, memory="48KiB", tile=(20, 20))
        pauser.join()
        assert time.monotonic() - started < 30
        assert f"{worker.address} paused by Dask's memory monitor" in str(raised.value)
        assert zarr.open_array(str(c)).attrs.get(ATTRIBUTE, {}).get("complete") is not True
        kept = len(tile_records(c))
        assert 0 < kept < 300
        client.run(set_worker_status(Status.running))
        result = run_job(*job, client=client, progress=False, memory="48KiB", tile=(20, 20))
    assert result.summary["tiles_skipped"] >= kept
    assert_product_close(result.output[...], a, b)
    assert zarr.open_array(str(c)).attrs[ATTRIBUTE]["complete"] is True


def test_a_cluster_paused_before_the_job_is_refused_naming_its_worker(tmp_path):
    _inputs(tmp_path)
    with _paused_later_cluster() as (local, client):
        worker = next(iter(local.workers.values()))
        client.run(set_worker_status(Status.paused))
        with config.set({"connect-timeout": 0.5}), pytest.raises(ClusterError) as raised:
            run_job(tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
                    client=client, progress=False)  # fmt: skip
    message = str(raised.value)
    assert "has 0 running worker(s)" in message
    assert f"not running: {worker.address} paused by Dask's memory monitor" in message
    assert not (tmp_path / "c.zarr").exists()

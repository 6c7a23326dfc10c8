"""Dask's conventions (issue 31, item 4): outofcore's settings are dask.config keys under
``outofcore.``, and numpy operands run where the workers share this process.

A value set with ``dask.config.set`` is the one this process and the worker processes a
job starts use (a nanny hands its worker process the configuration it started with);
``DASK_OUTOFCORE__*`` variables and the older ``OUTOFCORE_*`` aliases set them too.
"""

from __future__ import annotations

import os
import subprocess
import sys

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster

import outofcore
from outofcore import config
from tests.helpers import (
    assert_gemm_close,
    break_chunk,
    random_matrix,
    restore_chunk,
    write_zarr,
)


def _setting(name: str) -> float:
    from outofcore import config  # noqa: PLC0415 (in the worker process)

    return config.number(name)


def test_a_value_set_in_dask_config_is_the_one_worker_processes_use():
    with dask.config.set({"outofcore.read-retries": 7, "outofcore.remote-concurrency": 5}):
        assert config.number("read-retries") == 7
        with (
            LocalCluster(n_workers=1, processes=True, dashboard_address=None) as cluster,
            Client(cluster) as client,
        ):
            assert set(client.run(_setting, "read-retries").values()) == {7}
            assert set(client.run(_setting, "remote-concurrency").values()) == {5}
    assert config.number("read-retries") == 3  # the default again


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"DASK_OUTOFCORE__READ_RETRIES": "9"}, 9),
        ({"OUTOFCORE_READ_RETRIES": "4"}, 4),
        ({"OUTOFCORE_READ_RETRIES": "4", "DASK_OUTOFCORE__READ_RETRIES": "9"}, 9),
    ],
)
def test_variables_set_the_settings(variables, expected):
    code = "from outofcore import config; print(config.number('read-retries'))"
    env = {k: v for k, v in os.environ.items() if "READ_RETRIES" not in k}
    shown = subprocess.run(
        [sys.executable, "-c", code], env={**env, **variables}, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    assert float(shown.stdout) == expected


def test_a_job_started_cluster_reads_with_the_retries_dask_config_says(tmp_path):
    """A job's own LocalCluster of worker processes, inside dask.config.set: a damaged chunk
    is read as many times as the value set says, in the worker processes."""
    rng = np.random.default_rng(12)
    write_zarr(tmp_path / "a.zarr", random_matrix(rng, (40, 30), "float32"), (10, 10))
    write_zarr(tmp_path / "b.zarr", random_matrix(rng, (30, 20), "float32"), (10, 10))
    broken = break_chunk(tmp_path / "a.zarr", "1/0")
    settings = {"outofcore.read-retries": 1, "outofcore.read-retry-delay": 0.01}
    settings["outofcore.in-process-worker"] = False  # worker processes of their own
    try:
        with dask.config.set(settings), pytest.raises(Exception) as failed:
            outofcore.matmul(
                tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
                workers=1, memory="64MiB", progress=False,
            )  # fmt: skip
    finally:
        restore_chunk(broken)
    message = str(failed.value)
    assert "failed 2 time(s)" in message, message
    assert "$OUTOFCORE_READ_RETRIES=1" in message  # the worker's setting, named


def test_numpy_input_with_no_client_runs_on_the_jobs_cluster_in_this_process(tmp_path):
    """Issue 31: the job's own LocalCluster runs its CPU workers as threads of this
    process, which see a numpy array: client=None takes it."""
    rng = np.random.default_rng(8)
    a, b = random_matrix(rng, (41, 57), "float64"), random_matrix(rng, (57, 13), "float64")
    write_zarr(tmp_path / "b.zarr", b, (20, 7))
    c = outofcore.matmul(a, tmp_path / "b.zarr", tmp_path / "c.zarr", progress=False)
    assert_gemm_close(c[...], a, b, accumulated_in="float64")

"""`outofcore plan --scheduler ADDR` shows what `outofcore matmul --scheduler ADDR` runs
(issue 29): one planning function, for the workers the scheduler really has.

A real ``dask scheduler`` and two ``dask worker --nthreads 3`` processes on loopback;
ragged inputs written with numpy; the plan asks the scheduler for its workers and
divides the budget per worker by their threads, as the job does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr
from distributed import Client

from tests.helpers import cli, free_port, stop_processes, write_zarr

BIN = Path(sys.executable).parent
THREADS = 3
WORKERS = 2
#: The budget of one worker: 3 threads share it, so a task gets a third.
MEMORY = 3 * 2**20


@pytest.fixture(scope="module")
def scheduler_address(tmp_path_factory):
    """``dask scheduler`` and two ``dask worker --nthreads 3`` processes; the address."""
    port = free_port()
    logs = tmp_path_factory.mktemp("dask-logs")
    address = f"tcp://127.0.0.1:{port}"
    commands = {
        "scheduler": ["scheduler", "--host", "127.0.0.1", "--port", str(port)],
        **{
            f"worker-{n}": ["worker", address, "--nworkers", "1", "--nthreads", str(THREADS)]
            + ["--memory-limit", "1GiB", "--host", "127.0.0.1"]
            for n in range(WORKERS)
        },
    }
    processes = []
    try:
        for name, command in commands.items():
            log = open(logs / f"{name}.log", "w")  # noqa: SIM115 (closed by stop_processes)
            process = subprocess.Popen(
                [str(BIN / "dask"), *command, "--no-dashboard"],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
            processes.append((process, log))
        with Client(address, timeout=30) as client:
            client.wait_for_workers(WORKERS, timeout=60)
        yield address
    finally:
        stop_processes(processes)


@pytest.fixture
def ragged(tmp_path):
    """A (301x257) and B (257x173) float32 in chunks that fit neither shape."""
    rng = np.random.default_rng(29)
    a = rng.standard_normal((301, 257), dtype=np.float32)
    b = rng.standard_normal((257, 173), dtype=np.float32)
    write_zarr(tmp_path / "a.zarr", a, (40, 30))
    write_zarr(tmp_path / "b.zarr", b, (30, 50))
    return tmp_path, a, b


def test_plan_shows_what_the_job_on_the_scheduler_runs(scheduler_address, ragged):
    folder, a, b = ragged
    inputs = (str(folder / "a.zarr"), str(folder / "b.zarr"))
    options = ("--memory", str(MEMORY), "--scheduler", scheduler_address, "--json")
    planned = cli("plan", *inputs, *options)
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    job = cli("matmul", *inputs, "-o", str(folder / "c.zarr"), *options, "--quiet")
    assert job.returncode == 0, job.stderr
    summary = json.loads(job.stdout)

    # The plan was made for the scheduler's workers: two of three threads each.
    assert plan["workers"] == summary["workers"] == WORKERS
    assert plan["threads_per_worker"] == THREADS
    assert plan["worker_budget_bytes"] == summary["worker_budget_bytes"] == MEMORY
    assert plan["task_budget_bytes"] == summary["task_budget_bytes"] == MEMORY // THREADS
    for key in ("tile", "tk", "splits", "tiles"):
        assert plan[key] == summary[key], key
    assert plan["task_bytes"] == summary["task_bytes_projected"] <= MEMORY // THREADS
    assert plan["busy_workers"] == WORKERS  # both workers get a task
    where = f"the job runs on the workers of {scheduler_address}, not here"
    assert plan["machine"]["note"] == where

    got = zarr.open_array(str(folder / "c.zarr"), mode="r")[...]
    reference = a.astype(np.float64) @ b.astype(np.float64)
    k = a.shape[1]
    bound = 2 * k * np.finfo(np.float32).eps * (np.abs(a) @ np.abs(b)).astype(np.float64)
    assert np.all(np.abs(got.astype(np.float64) - reference) <= bound)

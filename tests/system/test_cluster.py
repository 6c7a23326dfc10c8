"""The compose cluster run natively: `dask scheduler`, two `dask worker` processes, jobs.

The command lines come from docker-compose.yml (only the scheduler's address,
the ports and the data folder are substituted, and JOB_* variables set as
compose would), so the file and this test cannot drift apart.  Then: a worker
process SIGKILLed mid-job, the client SIGKILLed mid-job and rerun, and a
resumed plan that keeps its tile sizes on a cluster of another size.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import zarr
from distributed import Client

from outofcore.frontends.generate import random_array
from outofcore.journal.records import JOURNAL_DIR
from tests.helpers import (
    assert_product_close,
    break_chunk,
    free_port,
    interpolate,
    restore_chunk,
    stop_processes,
    wait_for,
)

BIN = Path(sys.executable).parent


def native(parts: list, port: int, data: Path, env: dict[str, str] | None = None) -> list[str]:
    """A compose command line for this machine: executables, address, ports, data folder."""
    replace = {"8786": str(port), ":8787": ":0"}
    line = []
    for part in parts:
        text = interpolate(str(part), env)
        text = text.replace("tcp://scheduler:8786", f"tcp://127.0.0.1:{port}")
        text = replace.get(text, text)
        line.append(str(data / text.removeprefix("/data/")) if text.startswith("/data/") else text)
    if line[0] == "dask":
        return [str(BIN / "dask"), *line[1:]]
    if line[0] == "outofcore":
        return [sys.executable, "-m", "outofcore.cli", *line[1:]]
    raise AssertionError(f"unexpected executable {line[0]!r}")


@pytest.fixture(scope="module")
def cluster(compose, tmp_path_factory):
    """A scheduler and two workers started with the compose file's command lines."""
    logs = tmp_path_factory.mktemp("cluster-logs")
    port = free_port()
    services = compose["services"]
    processes = []

    def start(name: str, parts: list) -> None:
        log = open(logs / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
        processes.append((subprocess.Popen(native(parts, port, logs), stdout=log, stderr=log), log))

    try:
        start("scheduler", services["scheduler"]["command"])
        address = f"tcp://127.0.0.1:{port}"
        with Client(address, timeout=30) as client:
            for n in range(2):
                start(f"worker-{n}", services["worker"]["command"])
            client.wait_for_workers(2, timeout=60)
            yield {"address": address, "port": port, "client": client, "logs": logs}
    finally:
        stop_processes(processes)


def job_command(compose, cluster, data: Path, memory: str) -> list[str]:
    env = {"JOB_MEMORY": memory, "JOB_WORKERS": "2"}
    return [*native(compose["services"]["job"]["command"], cluster["port"], data, env), "--json"]


def records(c: Path) -> list[dict]:
    """The finished-tile records of the output ``c`` (whole files only)."""
    found = []
    for path in sorted((c / JOURNAL_DIR / "tiles").glob("*/tile-*.json")):
        try:
            found.append(json.loads(path.read_text()))
        except (FileNotFoundError, ValueError):
            continue
    return found


def inputs(data: Path, m: int, k: int, n: int) -> tuple:
    random_array(data / "a.zarr", (m, k), (100, 100), seed=1)
    random_array(data / "b.zarr", (k, n), (100, 100), seed=2)
    return zarr.open_array(str(data / "a.zarr"))[...], zarr.open_array(str(data / "b.zarr"))[...]


def run(command: list[str]) -> dict:
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_the_compose_job_runs_on_the_native_cluster(compose, cluster, tmp_path):
    a, b = inputs(tmp_path, 600, 500, 400)
    summary = run(job_command(compose, cluster, tmp_path, "1MiB"))
    assert summary["workers"] == 2
    assert summary["tiles"] >= 4 and summary["tiles_computed"] == summary["tiles"]
    assert summary["tiles_skipped"] == 0
    assert_product_close(zarr.open_array(str(tmp_path / "c.zarr"))[...], a, b)
    done = records(tmp_path / "c.zarr")
    assert len(done) == summary["tiles"]
    assert len({r["result"]["worker"] for r in done}) == 2  # both worker processes worked


def test_a_worker_killed_mid_job_costs_only_its_tiles(compose, cluster, tmp_path):
    a, b = inputs(tmp_path, 2000, 1000, 1100)
    c = tmp_path / "c.zarr"
    client = cluster["client"]
    job = subprocess.Popen(
        job_command(compose, cluster, tmp_path, "512KiB"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: len(records(c)) >= 8, 120, "8 tiles journaled")
    busy = {address: keys for address, keys in client.processing().items() if keys}
    pids = client.run(os.getpid)
    victim = sorted(busy)[0]
    os.kill(pids[victim], signal.SIGKILL)
    killed = f"{socket.gethostname()}:{pids[victim]}"
    at_kill = records(c)
    done_at_kill = len(at_kill)
    victim_done = sum(r["result"]["worker"] == killed for r in at_kill)
    assert job.poll() is None, "the job finished before the kill; make it longer"

    out, err = job.communicate(timeout=300)
    assert job.returncode == 0, err[-3000:]
    summary = json.loads(out)
    assert done_at_kill < summary["tiles"] == summary["tiles_computed"]
    assert_product_close(zarr.open_array(str(c))[...], a, b)
    done = records(c)
    assert len(done) == summary["tiles"]
    assert not psutil.pid_exists(pids[victim])
    # The tiles the dead worker had finished stay done (only results still in transit
    # to the client may be computed again); the others computed the rest.
    kept = sum(r["result"]["worker"] == killed for r in done)
    assert victim_done > 0 and kept >= victim_done - 2
    assert len(done) - kept > summary["tiles"] - done_at_kill - 2
    client.wait_for_workers(2, timeout=60)  # the nanny restarted it


def test_client_killed_mid_job_then_rerun_resumes(compose, cluster, tmp_path):
    a, b = inputs(tmp_path, 2000, 1000, 1100)
    c = tmp_path / "c.zarr"
    command = job_command(compose, cluster, tmp_path, "512KiB")
    job = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (c / JOURNAL_DIR / "job.json").exists(), 120, "the job to start")
        total = json.loads((c / JOURNAL_DIR / "job.json").read_text())["tiles_total"]
        wait_for(lambda: len(records(c)) >= total // 2, 120, "half the tiles journaled")
        assert job.poll() is None, "the job finished before the kill; make it longer"
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    done_at_kill = len(records(c))

    summary = run(command)  # the dead client's lease is taken over at once (same host)
    assert summary["tiles_skipped"] >= done_at_kill > 0
    assert summary["tiles_computed"] + summary["tiles_skipped"] == summary["tiles"]
    assert summary["tiles_computed"] > 0
    assert len(records(c)) == summary["tiles"]
    assert_product_close(zarr.open_array(str(c))[...], a, b)


def test_resume_keeps_the_journal_plan_on_a_bigger_cluster(compose, cluster, tmp_path):
    """Started in-process (one tile), resumed on two workers: still one tile."""
    a, b = inputs(tmp_path, 300, 200, 300)
    broken = break_chunk(tmp_path / "b.zarr", "1/1")  # the first run stops without a tile
    command = job_command(compose, cluster, tmp_path, "8MiB")
    in_process = [*command[: command.index("--scheduler")], "--scheduler", "sync", "--json"]
    failed = subprocess.run(
        in_process,
        capture_output=True,
        text=True,
        env={**os.environ, "OUTOFCORE_READ_RETRIES": "0"},
    )
    assert failed.returncode == 3 and "chunk (1, 1)" in failed.stderr  # a job failed
    restore_chunk(broken)

    planned = subprocess.run(
        [sys.executable, "-m", "outofcore.cli", "plan", str(tmp_path / "a.zarr"),
         str(tmp_path / "b.zarr"), "--memory", "8MiB", "--workers", "2", "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert json.loads(planned.stdout)["tiles"] == 2  # what a fresh plan for 2 workers makes
    summary = run(command)
    assert summary["workers"] == 2 and summary["tiles"] == 1 and summary["tile"] == [300, 300]
    assert_product_close(zarr.open_array(str(tmp_path / "c.zarr"))[...], a, b)

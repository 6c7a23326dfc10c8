"""A job's fixed cost (issue 22): the phases of its wall time, and the one local worker run
as threads of the job's own process."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
import tomllib

import numpy as np
import pytest
import zarr

from outofcore import cli, config
from outofcore.api import run_job
from outofcore.compute.worker_context import worker_context
from outofcore.jobs.phases import Phases
from tests.helpers import (
    ROOT,  # noqa: E402
    assert_product_close,
    random_matrix,
    write_zarr,
)

#: The phases of a job, in the order they run (outofcore/jobs/phases.py).
JOB_PHASES = [
    "open",
    "fingerprints",
    "lease",
    "cluster_start",
    "plan",
    "output",
    "tasks",
    "finish",
    "cluster_stop",
]


def inputs(tmp_path, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b = random_matrix(rng, (131, 97), "float32"), random_matrix(rng, (97, 89), "float32")
    write_zarr(tmp_path / "a.zarr", a, (40, 33))
    write_zarr(tmp_path / "b.zarr", b, (33, 30))
    return a, b


class Clock:
    """``time`` for :mod:`outofcore.jobs.phases`: seconds that pass when the test says
    (issue 55, item 5: the counted time, not the machine's under load)."""

    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now


def test_a_nested_phase_counts_for_itself_only(monkeypatch):
    from outofcore.jobs import phases as phases_module  # noqa: PLC0415

    clock = Clock()
    monkeypatch.setattr(phases_module, "time", clock)
    phases = Phases()
    with phases("outer"):
        clock.now += 0.02
        with phases("inner"):
            clock.now += 0.05
    with phases("outer"):  # a phase run again is added up
        clock.now += 0.01
    seconds = phases.as_dict()
    assert list(seconds) == ["outer", "inner"]  # the order phases start
    assert seconds["inner"] == pytest.approx(0.05)
    assert seconds["outer"] == pytest.approx(0.03)  # its own 0.03 s, not the inner 0.05 s


def test_one_local_worker_runs_in_this_process_and_the_phases_add_up(tmp_path):
    """The default LocalCluster's one worker is threads of this process (its tasks name
    this pid), leaves no worker state here once closed, and the summary's phases cover
    the call's wall time, the tasks being the job's seconds."""
    a, b = inputs(tmp_path, 51)
    before = worker_context().kept_bytes()
    started = time.perf_counter()
    result = run_job(
        tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr", tile=(40, 30),
        progress=False,
    )  # fmt: skip
    wall = time.perf_counter() - started
    assert_product_close(zarr.open_array(str(tmp_path / "c.zarr"))[...], a, b)
    assert len(result.results) > 2
    assert {r.worker.rsplit(":", 1)[1] for r in result.results} == {str(os.getpid())}
    assert worker_context().kept_bytes() <= before  # the worker threads' state is let go
    phases = result.summary["phases"]
    assert list(phases) == JOB_PHASES
    assert all(seconds >= 0 for seconds in phases.values())
    assert sum(phases.values()) <= wall
    assert sum(phases.values()) >= 0.9 * wall - 0.05  # nothing of note left out
    assert abs(phases["tasks"] - result.summary["seconds"]) < 0.05
    stored = zarr.open_array(str(tmp_path / "c.zarr")).attrs["outofcore"]["summary"]["phases"]
    assert list(stored) == JOB_PHASES[:-1]  # written before the cluster stopped


def test_a_worker_process_when_asked_for(tmp_path):
    """OUTOFCORE_IN_PROCESS_WORKER=0: the one worker gets a process of its own."""
    a, b = inputs(tmp_path, 52)
    with config.set({"in-process-worker": False}):
        result = run_job(
            tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr", tile=(40, 30),
            progress=False,
        )  # fmt: skip
    assert_product_close(zarr.open_array(str(tmp_path / "c.zarr"))[...], a, b)
    pids = {r.worker.rsplit(":", 1)[1] for r in result.results}
    assert len(pids) == 1 and pids != {str(os.getpid())}


def test_the_command_reports_its_startup_first(tmp_path):
    inputs(tmp_path, 53)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "outofcore.cli", "matmul", "a.zarr", "b.zarr", "-o", "c.zarr",
         "--memory", "1MiB", "--json"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    phases = json.loads(done.stdout)["phases"]
    assert list(phases) == ["startup", *JOB_PHASES]
    assert 0.05 < phases["startup"] < 60  # an interpreter and its imports take some time
    # Honest: the phases fit in the process's life (psutil's create_time, whose boot time
    # is rounded to the second, made the startup up to a second too long).
    assert sum(phases.values()) < time.perf_counter() - started
    text = subprocess.run(
        [sys.executable, "-m", "outofcore.cli", "matmul", "a.zarr", "b.zarr", "-o", "d.zarr",
         "--memory", "1MiB"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert text.returncode == 0, text.stderr
    out = text.stdout.splitlines()
    first = next(i for i, x in enumerate(out) if x.startswith("  wall time "))
    rest = [x.strip() for x in out[first + 1 :] if x.startswith(" " * 17)]  # its wrap
    line = " ".join([out[first], *rest])
    assert ": startup " in line and " tasks " in line and "--json: all" in line
    assert max(len(x) for x in out[1:]) <= 100  # the figures within 100 columns


def test_the_console_script_exits_with_mains_status_and_a_frozen_heap(tmp_path, monkeypatch):
    """``outofcore`` (pyproject's script) exits with :func:`cli.main`'s status, having
    frozen the heap so the interpreter's exit does not walk it for cycles."""
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entry["outofcore"] == "outofcore.cli:command"
    missing = str(tmp_path / "missing.zarr")
    monkeypatch.setattr(sys, "argv", ["outofcore", "plan", missing, missing, "--quiet"])
    gc.unfreeze()
    try:
        with pytest.raises(SystemExit) as exited:
            cli.command()
        assert exited.value.code == 2  # main's status for inputs that are not there
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_two_cpu_workers_run_in_this_process_and_leave_blas_as_it_was(tmp_path):
    """``workers=2`` on this machine: two workers, both threads of this process, whose
    tasks held BLAS at one thread each and gave back what was there when they ended."""
    from threadpoolctl import threadpool_info  # noqa: PLC0415

    def blas_threads() -> list[int]:
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    a, b = inputs(tmp_path, 54)
    before, kept = blas_threads(), worker_context().kept_bytes()
    result = run_job(
        tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr", tile=(40, 30),
        workers=2, progress=False,
    )  # fmt: skip
    assert_product_close(zarr.open_array(str(tmp_path / "c.zarr"))[...], a, b)
    assert result.summary["workers"] == 2 and len(result.results) > 2
    assert {r.worker.rsplit(":", 1)[1] for r in result.results} == {str(os.getpid())}
    assert worker_context().kept_bytes() <= kept
    assert blas_threads()[: len(before)] == before

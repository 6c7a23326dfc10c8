"""The GPU check (python -m tools.gpu_check) cannot rot: its dry run on the simulator.

A session that is lent a GPU runs ``scripts/gpu-check`` there as its one device call; CI runs
every phase here on numba's CUDA simulator at tiny sizes, so the check is known to work
before a GPU is ever lent again.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools.gpu_check import runner as check

REPO = Path(__file__).resolve().parents[2]


def test_the_dry_run_passes_every_phase_and_prints_each_phase_time(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "tools.gpu_check", "--dry-run", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / check.SUMMARY).read_text())
    assert summary["passed"] and summary["dry_run"]
    assert list(summary["phases"]) == [phase.name for phase in check.PHASES]
    for phase in check.PHASES:
        data = summary["phases"][phase.name]
        assert data["status"] == "passed", data
        assert re.search(rf"^{phase.name} +passed +[0-9.]+ s$", result.stdout, re.M)
    assert summary["phases"]["correctness"]["cases"] == 4 * 3 * 2
    engine = summary["phases"]["engine"]
    assert engine["transposed_a"]["copy_layouts"].get("columns", 0) > 0
    assert "strided" not in engine["sub_tiled"]["copy_layouts"]
    job = summary["phases"]["job"]
    assert job["shapes"]["s"] == ["3,21,17", "1,4,4"]  # a stack of 3 times one matrix
    assert job["stack"]["tasks"] > 3 and job["stack"]["verify_s"] > 0
    assert (tmp_path / check.LOG).stat().st_size > 0


def test_a_phase_over_its_time_is_recorded_and_fails_the_check(tmp_path):
    """A phase that hangs is killed at its timeout; the next one still runs."""
    phases = [check.Phase("env", 60, 0.2), check.Phase("bandwidth", 60, 60)]
    summary = check.run_check(tmp_path, phases, deadline_s=120, dry=True)
    assert summary["phases"]["env"]["status"] == "timeout"
    assert summary["phases"]["bandwidth"]["status"] == "passed"
    assert not summary["passed"]
    assert json.loads((tmp_path / check.SUMMARY).read_text())["passed"] is False


def test_phases_past_the_deadline_are_skipped_not_run(tmp_path):
    phases = [check.Phase("bandwidth", 60, 60), check.Phase("env", 60, 60)]
    summary = check.run_check(tmp_path, phases, deadline_s=4, dry=True)
    assert [p["status"] for p in summary["phases"].values()] == ["skipped", "skipped"]


def test_the_wheels_for_the_offline_node_are_one_command_and_fit_a_device_call(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("scripts/gpu-wheels is a bash script and bash is not installed")
    dest = tmp_path / "wheels"
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu-wheels"), str(dest)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        check=False,
    )
    if result.returncode and re.search(
        r"(?i)connection|network|resolve|No matching distribution", result.stderr
    ):
        pytest.skip(f"no package index reachable from here: {result.stderr.strip()[-300:]}")
    assert result.returncode == 0, result.stdout + result.stderr
    wheels = sorted(p.name for p in dest.glob("*.whl"))
    names = {re.split(r"-\d", name, maxsplit=1)[0].lower() for name in wheels}
    assert {"numpy", "dask", "distributed", "zarr", "numcodecs", "dask_cuda"} <= names
    assert sum(p.stat().st_size for p in dest.iterdir()) < 60 * 2**20
    assert all("cp312" in name or "py3" in name or "abi3" in name for name in wheels)

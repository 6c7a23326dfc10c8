"""The suite writes nothing in the user's home: run with HOME an empty folder, it leaves it
empty (tests/conftest.py gives the run and its processes a temporary HOME)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_run_with_an_empty_home_passes_and_leaves_it_empty(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTOFCORE_TEST_", "XDG_"))}
    env.pop("MPLCONFIGDIR", None)
    env["HOME"] = str(home)
    # The command-line job and plan (the probe cache), and the wheels' command (pip, whose user
    # agent starts rustc where rustup is installed), each wrote under HOME before.
    tests = [
        "tests/outofcore/frontends/test_cli.py::test_random_plan_matmul_verify_on_ragged_chunks_with_a_64mib_budget",
        "tests/cuda/test_gpu_check.py::test_the_wheels_for_the_offline_node_are_one_command_and_fit_a_device_call",
    ]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    left = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert left == [], f"the run left {left} in HOME"

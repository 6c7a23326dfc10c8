"""Jobs inside a real cgroup v1 memory group: the cap is learned, refused and fitted.

Each test starts ``outofcore`` processes inside a group made by
``benchmarks/harness/cgroup.py`` (root and ``/sys/fs/cgroup/memory`` needed; skipped
with the reason otherwise).
"""

from __future__ import annotations

import json
import os
import sys
from importlib import import_module

import numpy as np
import pytest
import zarr

from outofcore.runtime.worker_sizing import WORKER_OVERHEAD_BYTES
from tests.helpers import ROOT, write_zarr

cgroup = import_module("benchmarks.harness.cgroup")
pytestmark = pytest.mark.skipif(
    cgroup.unavailable() is not None, reason=f"no capped cgroup here: {cgroup.unavailable()}"
)

CAP = 2**30
CLI = [sys.executable, "-m", "outofcore.cli"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture
def inputs(tmp_path):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((300, 200)).astype(np.float32)
    b = rng.standard_normal((200, 260)).astype(np.float32)
    write_zarr(tmp_path / "a.zarr", a, (64, 64))
    write_zarr(tmp_path / "b.zarr", b, (64, 64))
    return tmp_path, a, b


def test_the_cap_is_the_nested_group_this_process_is_in():
    code = (
        "import json; from outofcore.runtime.memory_cap import memory_cap; c = memory_cap(); "
        "print(json.dumps([c.nbytes, c.what, c.where, c.describe()]))"
    )
    with cgroup.MemoryGroup(CAP) as group:
        run = group.run([sys.executable, "-c", code], timeout=120, env=ENV)
    assert run["returncode"] == 0, run["stderr"]
    nbytes, what, where, text = json.loads(run["stdout"])
    assert (nbytes, what, where) == (CAP, "cgroup memory limit", str(group.limit_file))
    assert text == f"cgroup memory limit 1 GiB ({group.limit_file})"


@pytest.mark.parametrize("face", ["cli", "api"])
def test_a_budget_over_the_cgroup_cap_is_refused_before_any_work(inputs, face):
    folder, _, _ = inputs
    a, b, c = (str(folder / name) for name in ("a.zarr", "b.zarr", "c.zarr"))
    if face == "cli":
        command = [*CLI, "matmul", a, b, "-o", c, "--memory", "1GiB"]
    else:
        code = f"import outofcore; outofcore.matmul({a!r}, {b!r}, {c!r}, memory='1GiB')"
        command = [sys.executable, "-c", code]
    with cgroup.MemoryGroup(CAP) as group:
        run = group.run(command, timeout=120, env=ENV)
    assert run["returncode"] != 0
    assert f"more than the cgroup memory limit 1 GiB ({group.limit_file})" in run["stderr"]
    assert f"lower --memory to at most {CAP - WORKER_OVERHEAD_BYTES} bytes" in run["stderr"]
    assert not (folder / "c.zarr").exists()  # no output, no journal, no lease
    assert "Started a LocalCluster" not in run["stderr"]  # refused before the cluster
    if face == "cli":
        assert run["returncode"] == 2
    else:
        assert "ClusterError" in run["stderr"]


def test_a_job_naming_no_budget_fits_the_cgroup_cap(inputs):
    folder, a, b = inputs
    paths = [str(folder / name) for name in ("a.zarr", "b.zarr")]
    with cgroup.MemoryGroup(CAP) as group:
        plan = group.run([*CLI, "plan", *paths, "--json"], timeout=120, env=ENV)
        job = group.run(
            [*CLI, "matmul", *paths, "-o", str(folder / "c.zarr"), "--json"], timeout=300, env=ENV
        )
    assert plan["returncode"] == 0, plan["stderr"]
    assert json.loads(plan["stdout"])["task_budget_bytes"] == CAP - WORKER_OVERHEAD_BYTES
    assert job["returncode"] == 0, job["stderr"]
    summary = json.loads(job["stdout"])
    assert summary["task_budget_bytes"] == CAP - WORKER_OVERHEAD_BYTES
    assert job["oom_kill"] == 0 and job["max_usage_bytes"] <= CAP
    got = zarr.open_array(str(folder / "c.zarr"), mode="r")[...]
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)

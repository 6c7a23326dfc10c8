"""The job's own LocalCluster, its worker a thread of this process, runs whatever else this
process holds: Dask's memory monitor reads the whole process, and a worker it paused for
the caller's arrays would never run a task (the job waiting for ever; the suite hung so
once its process had grown past the worker's limit)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import dask

from outofcore.runtime.worker_sizing import IN_PROCESS_MEMORY, local_worker_limit
from tests.helpers import ROOT

BUDGET = 64 * 2**20


def test_a_job_runs_beside_arrays_larger_than_its_workers_limit(tmp_path):
    held = 2 * local_worker_limit(BUDGET)  # well past the worker's pause at 80% of it
    script = textwrap.dedent(f"""
        import numpy as np
        import outofcore

        held = np.ones({held} // 8)  # the caller's data, every page touched
        a = outofcore.random_array("a.zarr", (300, 200), (64, 64), seed=1)
        b = outofcore.random_array("b.zarr", (200, 250), (64, 64), seed=2)
        c = outofcore.matmul(a, b, "c.zarr", memory="{BUDGET}B")
        want = a[:].astype(np.float64) @ b[:]
        print(np.allclose(c[:], want, rtol=1e-4, atol=1e-4), held.sum() > 0)
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"], done.stdout


def test_the_monitor_is_off_for_workers_in_this_process_only():
    assert set(IN_PROCESS_MEMORY.values()) == {False} and len(IN_PROCESS_MEMORY) == 4
    assert dask.config.get("distributed.worker.memory.pause") is not False  # others: Dask's

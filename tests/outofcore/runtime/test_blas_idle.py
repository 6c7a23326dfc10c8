"""OpenBLAS's idle threads sleep soon after a call in the processes outofcore starts
(outofcore/runtime/blas_idle.py): the command, its LocalCluster worker processes, the image."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from outofcore.backends.cuda.workers import GPU_WORKER_ENV
from outofcore.runtime.blas_idle import IDLE_SPIN, shorten_blas_spin
from outofcore.runtime.cluster import BLAS_THREAD_VARIABLES

ROOT = Path(__file__).resolve().parents[3]
VARIABLE = "OPENBLAS_THREAD_TIMEOUT"

#: Imports the command's module as the console script does, noting the variable at the
#: moment numpy and SciPy (whose OpenBLAS reads it as it loads) are first imported.
SEEN_AT_IMPORT = """
import json, os, sys
seen = {}
def hook(event, args):
    if event == "import" and args[0] in ("numpy", "scipy") and args[0] not in seen:
        seen[args[0]] = os.environ.get("OPENBLAS_THREAD_TIMEOUT")
sys.addaudithook(hook)
import outofcore.cli
from outofcore.backends import blas
blas.load()
print(json.dumps(seen))
"""

#: CPU seconds this process spends while it sleeps 0.4 s after a few 1024-cubed sgemms on
#: every core (SciPy's OpenBLAS, the one outofcore's tasks call): the idle threads' spin.
IDLE_CPU = """
import resource, time
import numpy as np
from outofcore.backends import blas
rng = np.random.default_rng(7)
a = rng.standard_normal((1024, 1024), dtype=np.float32)
b = rng.standard_normal((1024, 1024), dtype=np.float32)
c = np.zeros((1024, 1024), np.float32)
for _ in range(3):
    assert blas.gemm_accumulate(c, a, b, 0.0)
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
before = cpu()
time.sleep(0.4)
spent = cpu() - before
import os, threadpoolctl
threads = [p["num_threads"] for p in threadpoolctl.threadpool_info() if "scipy" in p["filepath"]]
print(spent, len(os.sched_getaffinity(0)), threads)
"""


def _python(script: str, **env: str | None) -> str:
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name, value in env.items():
        environ.pop(name, None)
        if value is not None:
            environ[name] = value
    done = subprocess.run(
        [sys.executable, "-c", script], env=environ, capture_output=True, text=True, timeout=120
    )
    if done.returncode:
        raise AssertionError(done.stderr)
    return done.stdout.strip().splitlines()[-1]


def test_the_command_sets_the_spin_before_numpy_and_scipy_load() -> None:
    seen = json.loads(_python(SEEN_AT_IMPORT, **{VARIABLE: None}))
    assert seen == {"numpy": IDLE_SPIN[VARIABLE], "scipy": IDLE_SPIN[VARIABLE]}


def test_a_value_the_user_set_is_kept() -> None:
    seen = json.loads(_python(SEEN_AT_IMPORT, **{VARIABLE: "22"}))
    assert seen == {"numpy": "22", "scipy": "22"}
    environ = {VARIABLE: "9"}
    shorten_blas_spin(environ)
    assert environ == {VARIABLE: "9"}
    environ = {}
    shorten_blas_spin(environ)
    assert environ == dict(IDLE_SPIN)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: OpenBLAS starts no threads")
def test_idle_blas_threads_stop_spinning() -> None:
    """The effect itself: after the calls, OpenBLAS's default spin burns CPU while the
    process sleeps (the decode threads' cores, on a worker); the shortened one does not."""
    # OpenBLAS on every core, whatever the suite's process has in its environment
    threads = {name: str(os.cpu_count()) for name in BLAS_THREAD_VARIABLES}
    default, cores, blas = _python(IDLE_CPU, **threads, **{VARIABLE: "28"}).split(" ", 2)
    shortened = _python(IDLE_CPU, **threads, **{VARIABLE: IDLE_SPIN[VARIABLE]}).split()[0]
    seen = f"({cores} cores usable, SciPy's OpenBLAS threads {blas})"
    assert float(default) > 0.03, f"the default spin used {float(default):.4f} CPU s {seen}"
    assert float(shortened) < 0.02, f"{float(shortened):.4f} CPU s asleep with the short spin"


def test_worker_processes_and_the_image_get_it() -> None:
    from distributed import Client

    from outofcore.runtime.cluster import start_local_cluster

    with (
        start_local_cluster(256 * 2**20, workers=1, dashboard=False) as cluster,
        Client(cluster) as client,
    ):
        values = client.run(lambda: os.environ.get("OPENBLAS_THREAD_TIMEOUT"))
    assert list(values.values()) == [IDLE_SPIN[VARIABLE]]
    assert GPU_WORKER_ENV[VARIABLE] == IDLE_SPIN[VARIABLE]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"{VARIABLE}={IDLE_SPIN[VARIABLE]}" in dockerfile

"""A CPU job imports no GPU library (issue 21 item 1, issue 22 item 2).

numba, numba.cuda (0.4 s), CuPy and the CUDA bindings are the ``[cuda]`` extra's, and
``scipy.linalg`` (0.3 s) is more of SciPy than BLAS needs: none of them may load in a CPU
job, neither through the CLI nor through the API, in-process (``client="sync"``) or on a
LocalCluster's worker process.  ``backend="auto"`` still probes for a GPU (through the CUDA
driver, :mod:`outofcore.backends.cuda.probe`).  Each case runs in a new process, so that nothing
this test session imported counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.helpers import ROOT, assert_product_close, random_matrix, write_zarr

#: Top-level packages a CPU job must not import (``cuda`` is cuda-bindings' package).
FORBIDDEN_PACKAGES = ("numba", "numba_cuda", "llvmlite", "cupy", "cupyx", "cuda")
#: Modules a CPU job must not import although their package may load.
FORBIDDEN_MODULES = ("scipy.linalg",)

#: A user's environment: tests/conftest.py turns numba's simulator on for this session.
USER_ENV = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}

#: Run as a script: one job through the API, then the forbidden modules loaded, as JSON.
API_SCRIPT = textwrap.dedent(
    """
    import json
    import sys

    import outofcore

    PACKAGES, MODULES = {packages!r}, {modules!r}


    def forbidden_loaded():
        import sys

        return sorted(
            name for name in sys.modules
            if name.split(".")[0] in PACKAGES or name in MODULES
        )


    if __name__ == "__main__":
        a, b, c, mode = sys.argv[1:]
        if mode == "sync":
            outofcore.matmul(a, b, c, client="sync", progress=False, memory="64MiB")
            print(json.dumps({{"client": forbidden_loaded()}}))
        else:
            from distributed import Client, LocalCluster

            with LocalCluster(
                n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster, Client(cluster) as client:
                outofcore.matmul(a, b, c, client=client, progress=False, memory="64MiB")
                workers = list(client.run(forbidden_loaded).values())
                print(json.dumps({{"client": forbidden_loaded(), "workers": workers}}))
    """
).format(packages=FORBIDDEN_PACKAGES, modules=FORBIDDEN_MODULES)


def forbidden(names) -> list[str]:
    return sorted(
        name
        for name in names
        if name.split(".")[0] in FORBIDDEN_PACKAGES or name in FORBIDDEN_MODULES
    )


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cpu-imports")
    rng = np.random.default_rng(21)
    a = random_matrix(rng, (70, 45), "float32")
    b = random_matrix(rng, (45, 33), "float32")
    write_zarr(folder / "a.zarr", a, (32, 20))
    write_zarr(folder / "b.zarr", b, (20, 16))
    return folder, a, b


#: Loaded at start-up by ``site`` (its folder first on PYTHONPATH): at exit, the names in
#: ``sys.modules`` go to the file named by $MODULES_FILE, one a line.
SITECUSTOMIZE = """
import atexit, os, sys

def _write_modules():
    with open(os.environ["MODULES_FILE"], "w") as f:
        f.write("\\n".join(name for name, m in list(sys.modules.items()) if m is not None))

atexit.register(_write_modules)
"""


def outofcore_command() -> list[str]:
    """The installed ``outofcore`` console script (``python -m outofcore.cli`` without one)."""
    script = Path(sys.executable).parent / "outofcore"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "outofcore.cli"]


@pytest.mark.parametrize("scheduler", [["--scheduler", "sync"], []])
def test_cli_cpu_job_imports_no_gpu_library(inputs, scheduler, tmp_path):
    """In this process or on its default LocalCluster, whose short job serves no
    dashboard: bokeh, 0.5 to 1 s to import, is not loaded either (issue 22)."""
    folder, a, b = inputs
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    modules_file = tmp_path / "modules.txt"
    path = os.pathsep.join(filter(None, [str(tmp_path / "site"), USER_ENV.get("PYTHONPATH")]))
    c = folder / f"c-cli-{len(scheduler)}.zarr"
    out = subprocess.run(
        [*outofcore_command(), "matmul", str(folder / "a.zarr"), str(folder / "b.zarr")]
        + ["-o", str(c), *scheduler],
        capture_output=True,
        text=True,
        timeout=300,
        env={**USER_ENV, "PYTHONPATH": path, "MODULES_FILE": str(modules_file)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "backend cpu" in out.stdout
    modules = modules_file.read_text().splitlines()
    assert (
        "outofcore.backends.blas" in modules and "outofcore.backends.cuda.probe" in modules
    )  # a real job ran
    assert forbidden(modules) == []
    assert not [name for name in modules if name.split(".")[0] == "bokeh"]
    if not scheduler:
        assert "distributed.deploy.local" in modules  # a LocalCluster ran the job
    assert_product_close(zarr.open_array(str(c))[...], a, b)


@pytest.mark.parametrize("mode", ["sync", "local-cluster"])
def test_api_cpu_job_imports_no_gpu_library(inputs, mode, tmp_path):
    folder, a, b = inputs
    script = tmp_path / "job.py"
    script.write_text(API_SCRIPT)
    c = folder / f"c-{mode}.zarr"
    out = subprocess.run(
        [sys.executable, str(script), str(folder / "a.zarr"), str(folder / "b.zarr"), str(c), mode],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=USER_ENV,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded["client"] == []
    if mode == "local-cluster":
        assert loaded["workers"] == [[]]  # one worker process, which ran the tile task
    summary = zarr.open_array(str(c)).attrs["outofcore"]["summary"]
    assert summary["backend"] == "cpu"
    assert_product_close(zarr.open_array(str(c))[...], a, b)


def test_forbidden_names_are_recognised():
    # The check above would pass vacuously if the names never matched: they do.
    assert forbidden(["numba", "numba.cuda", "cuda.bindings", "scipy.linalg", "cupy"]) == [
        "cuda.bindings",
        "cupy",
        "numba",
        "numba.cuda",
        "scipy.linalg",
    ]
    assert (
        forbidden(["scipy", "outofcore.backends.cuda", "outofcore.backends.cuda.probe", "numpy"])
        == []
    )

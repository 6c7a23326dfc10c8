"""``backend="auto"`` probes for a GPU without numba, and the CUDA backends without the
``[cuda]`` extra name what to install (issue 21 item 1, issue 22 item 2).

The probe (:mod:`outofcore.backends.cuda.probe`) asks the CUDA driver through ctypes; here, without
a GPU, it answers 0, and on a GPU machine it must agree with ``numba.cuda.is_available()``.
"A base install without numba-cuda" is a new process in which ``numba`` and
``numba_cuda`` cannot be imported (``sys.modules[name] = None``, Python's own way to
block an import), running the real job.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from outofcore.backends.cuda import probe
from outofcore.backends.registry import gpu_visible, resolve_backend
from tests.helpers import ROOT, random_matrix, write_zarr

#: A user's environment: tests/conftest.py turns numba's simulator on for this session.
USER_ENV = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}


def run_python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=USER_ENV if env is None else env,
    )


def test_auto_on_this_machine_probes_without_importing_numba():
    out = run_python(
        """
        import sys
        from outofcore.backends.registry import resolve_backend
        from outofcore.backends.cuda.probe import device_count
        print(resolve_backend("auto"), device_count())
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "cuda", "cupy")))
        """
    )
    assert out.returncode == 0, out.stderr
    choice, loaded = out.stdout.splitlines()
    backend, count = choice.split()
    assert backend == ("cuda" if int(count) > 0 else "cpu")
    assert loaded == "[]"


def test_probe_agrees_with_numba():
    # On a GPU machine both see it; here neither does.  numba on the chip, not its simulator.
    out = run_python(
        """
        from outofcore.backends.cuda.probe import device_count
        count = device_count()
        from numba import cuda
        print(count, cuda.is_available(), len(cuda.gpus) if cuda.is_available() else 0)
        """,
        env={**USER_ENV, "NUMBA_ENABLE_CUDASIM": "0"},
    )
    assert out.returncode == 0, out.stderr
    count, available, gpus = out.stdout.split()
    assert (int(count) > 0) == (available == "True")
    assert int(count) == int(gpus)


@pytest.mark.parametrize("driver", ["libc.so.6", "/nonexistent/libcuda.so.1"])
def test_probe_counts_nothing_without_a_cuda_driver(driver):
    if not sys.platform.startswith("linux"):
        pytest.skip("the stand-in libraries are Linux's")
    out = run_python(
        "from outofcore.backends.cuda.probe import device_count; print(device_count())",
        env={**USER_ENV, "NUMBA_CUDA_DRIVER": driver},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"


def test_the_simulator_counts_when_named_never_for_auto():
    assert probe.simulator_enabled()  # tests/conftest.py, unless a GPU run turned it off
    assert gpu_visible() and not gpu_visible(simulator_counts=False)
    assert resolve_backend("cuda") == "cuda"
    assert resolve_backend("auto") == ("cuda" if probe.device_count() > 0 else "cpu")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("probe")
    rng = np.random.default_rng(22)
    write_zarr(folder / "a.zarr", random_matrix(rng, (30, 20), "float32"), (16, 8))
    write_zarr(folder / "b.zarr", random_matrix(rng, (20, 10), "float32"), (8, 8))
    return folder


#: A process in which numba-cuda (and numba) are not installed, as after `pip install -e .`.
WITHOUT_NUMBA_CUDA = """
import sys
for name in ("numba", "numba_cuda", "numba.cuda"):
    sys.modules[name] = None  # `import numba` now raises ImportError; find_spec finds nothing
import outofcore
from outofcore.errors import BackendError
"""


@pytest.mark.parametrize(
    ("backend", "extra"), [("cuda", "pip install 'outofcore[cuda]'"), ("cupy", "[cupy]")]
)
def test_cuda_backends_without_numba_cuda_name_the_extra(inputs, backend, extra):
    folder = inputs
    out = run_python(
        WITHOUT_NUMBA_CUDA
        + textwrap.dedent(
            f"""
            try:
                outofcore.matmul("{folder / "a.zarr"}", "{folder / "b.zarr"}",
                                 "{folder / backend}.zarr", backend="{backend}", client="sync")
            except BackendError as exc:
                print(exc)
            """
        ),
        env={**USER_ENV, "NUMBA_ENABLE_CUDASIM": "1"},  # not even the simulator without it
    )
    assert out.returncode == 0, out.stderr
    assert f"backend '{backend}' needs numba-cuda, which is not installed" in out.stdout
    assert extra in out.stdout
    assert not (folder / f"{backend}.zarr").exists()


def test_auto_without_numba_cuda_runs_on_the_cpu(inputs):
    folder = inputs
    out = run_python(
        WITHOUT_NUMBA_CUDA
        + textwrap.dedent(
            f"""
            from outofcore.backends import cuda
            c = outofcore.matmul("{folder / "a.zarr"}", "{folder / "b.zarr"}",
                                 "{folder / "auto.zarr"}", client="sync", progress=False)
            print(c.attrs["outofcore"]["summary"]["backend"])
            try:
                cuda.make_engine("cuda")
            except BackendError as exc:
                print(exc)
            """
        )
    )
    assert out.returncode == 0, out.stderr
    backend, engine_error = out.stdout.splitlines()
    assert backend == "cpu"
    assert "pip install 'outofcore[cuda]'" in engine_error

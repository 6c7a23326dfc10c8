"""Test configuration: numba's CUDA simulator, hypothesis profiles (CI runs 'ci'), fixtures,
and a temporary cache folder for the run (the user's probe cache is never written).

Damaged reads for ``tests.helpers.break_chunk`` are set up here too (tests/faults).

The CUDA tests (tests/cuda) run on numba's CUDA simulator, which must be chosen
before anything imports ``numba.cuda``: this file is loaded before any test
module, so it sets ``NUMBA_ENABLE_CUDASIM=1`` here, for the whole session and
the processes it starts, unless the variable is already set.  On a GPU node,
``NUMBA_ENABLE_CUDASIM=0 python -m pytest tests/cuda`` runs them on the chip.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # before anything imports numba.cuda

import atexit
import contextlib
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.faults import sitecustomize as damaged_reads

# Damaged reads (tests.helpers.break_chunk): a registry folder for the session, and
# tests/faults first on PYTHONPATH so every process started here loads its sitecustomize.
if "OUTOFCORE_TEST_DAMAGED_READS" not in os.environ:  # this run's own registry, removed at exit
    os.environ["OUTOFCORE_TEST_DAMAGED_READS"] = tempfile.mkdtemp(prefix="damaged-reads-")
    atexit.register(shutil.rmtree, os.environ["OUTOFCORE_TEST_DAMAGED_READS"], True)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(Path(damaged_reads.__file__).parent)]
    + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
)
damaged_reads.install()

# The user's cache folder is never written: outofcore's probe cache
# (outofcore/machine/probe_cache.py,
# machine.json) goes to a temporary XDG_CACHE_HOME for the whole run and the processes it
# starts, removed at the end (outofcore.config.cache_dir reads the variable at each call). Figures
# probed under the suite's own load would otherwise be what `outofcore plan` predicts from
# afterwards. matplotlib's config and cache go there too (it makes ~/.config/matplotlib
# otherwise). The compose smoke (opt-in) keeps its image cache where it was.
_user_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
os.environ.setdefault("OUTOFCORE_SMOKE_CACHE", str(_user_cache / "outofcore" / "compose-smoke"))
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="outofcore-test-cache-")
os.environ.setdefault("MPLCONFIGDIR", os.path.join(os.environ["XDG_CACHE_HOME"], "matplotlib"))
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], ignore_errors=True)

# HOME itself is a temporary folder for the run and every process it starts, so that nothing
# a test runs writes the user's home: pip's user agent runs `rustc --version`, whose rustup
# proxy writes ~/.rustup/settings.toml into an empty HOME. What is installed in the real home
# stays reachable: Azurite (tests.helpers.AZURITE_PREFIX reads OUTOFCORE_TEST_REAL_HOME) and
# pyenv's shims (PYENV_ROOT).
os.environ.setdefault("OUTOFCORE_TEST_REAL_HOME", str(Path.home()))
if (Path(os.environ["OUTOFCORE_TEST_REAL_HOME"]) / ".pyenv").is_dir():
    os.environ.setdefault(
        "PYENV_ROOT", str(Path(os.environ["OUTOFCORE_TEST_REAL_HOME"]) / ".pyenv")
    )
os.environ["HOME"] = tempfile.mkdtemp(prefix="outofcore-test-home-")
atexit.register(shutil.rmtree, os.environ["HOME"], ignore_errors=True)

# Ctrl-C as a terminal gives it: a suite started with SIGINT ignored (a background job of a
# shell without job control, nohup, some CI runners) hands SIG_IGN to every process it
# starts, and tests/system/test_interrupt.py's commands would never see their Ctrl-C. A
# Python handler here is SIG_DFL again in each program this run execs.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

settings.register_profile(
    "default",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture
def outofcore_settings():
    """Override ``outofcore.config`` settings in this process until the test ends.

    ``outofcore_settings(read_retries=0)``; later calls override earlier ones.
    Worker processes read their own environment instead (``OUTOFCORE_*``).
    """
    from outofcore import config  # noqa: PLC0415

    with contextlib.ExitStack() as stack:

        def apply(**values: object) -> None:
            stack.enter_context(config.set({k.replace("_", "-"): v for k, v in values.items()}))

        yield apply


def _start_local_cluster(
    n_workers: int, threads_per_worker: int, processes: bool, **options: object
) -> Any:
    """A LocalCluster as the tests start them: its dashboard (if bokeh is here) on a free
    port, whatever else as ``options`` say (``memory_limit``, ...)."""
    from distributed import LocalCluster  # noqa: PLC0415

    options.setdefault("dashboard_address", ":0")
    return LocalCluster(
        n_workers=n_workers, threads_per_worker=threads_per_worker, processes=processes, **options
    )


@pytest.fixture(scope="module")
def local_cluster():
    """``local_cluster(n_workers=2, threads_per_worker=1, processes=True, **options)``: a
    small real LocalCluster, started at the first request of its shape and options and
    shared by every later test of the module that asks for the same (closed at its end).

    For tests that run jobs on it and need nothing fresh: a test that changes its cluster
    (kills a worker) or measures what a worker holds from its start takes
    :func:`own_local_cluster`.  Not shared by the whole run: distributed's ``gen_cluster``
    tests fail on worker processes left running by an earlier module.
    """
    started: dict[tuple[Any, ...], Any] = {}

    def get(
        n_workers: int = 2, threads_per_worker: int = 1, processes: bool = True, **options: object
    ) -> Any:
        key = (n_workers, threads_per_worker, processes, tuple(sorted(options.items())))
        if key not in started:
            started[key] = _start_local_cluster(n_workers, threads_per_worker, processes, **options)
        return started[key]

    yield get
    for cluster in started.values():
        cluster.close()


@pytest.fixture
def own_local_cluster():
    """``own_local_cluster(...)``, as :func:`local_cluster` takes it: a LocalCluster of the
    test's own, closed when the test ends, for a test that changes it or needs its workers
    fresh."""
    started: list[Any] = []

    def start(
        n_workers: int = 2, threads_per_worker: int = 1, processes: bool = True, **options: object
    ) -> Any:
        started.append(_start_local_cluster(n_workers, threads_per_worker, processes, **options))
        return started[-1]

    yield start
    for cluster in started:
        cluster.close()


@pytest.fixture(scope="session")
def moto_server():
    """One ``moto_server`` process (a real S3 API on loopback) for the session's tests."""
    pytest.importorskip("moto.server", reason="moto[server] (the test extra) is not installed")
    pytest.importorskip("s3fs", reason="s3fs (the s3 extra) is not installed")
    from tests.helpers import MotoServer  # noqa: PLC0415

    try:
        server = MotoServer()
    except RuntimeError as exc:
        pytest.skip(f"cannot start moto_server here: {exc}")
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(moto_server, request):
    """A fresh bucket on the session's moto server; its ``s3://`` URL."""
    import re  # noqa: PLC0415

    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    return moto_server.bucket(f"{name}-{os.getpid() % 10000}-{id(request) % 100000}")


@pytest.fixture(scope="session")
def azurite():
    """One Azurite blob service (Azure's emulator, from npm) for the session's tests;
    skips, saying why, when it is not installed or does not start."""
    pytest.importorskip("obstore", reason="obstore (the s3 extra) is not installed")
    from tests.helpers import (  # noqa: PLC0415
        AZURITE_PREFIX,
        AZURITE_VERSION,
        AzuriteServer,
        azurite_program,
    )

    program = azurite_program()
    if program is None:
        pytest.skip(
            "Azurite (Azure's blob emulator) is not installed: "
            f"npm install --prefix {AZURITE_PREFIX} azurite@{AZURITE_VERSION} (.ci/run does "
            "where npm is), or set OUTOFCORE_AZURITE to an azurite-blob program"
        )
    try:
        server = AzuriteServer(program)
    except RuntimeError as exc:
        pytest.skip(f"cannot start Azurite here: {exc}")
    yield server
    server.stop()


@pytest.fixture
def azure_container(azurite, request):
    """A fresh container on the session's Azurite; its name."""
    import re  # noqa: PLC0415

    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    return azurite.container(f"{name}-{os.getpid() % 10000}-{id(request) % 100000}")


# -- markers (registered in pyproject.toml; tests/README.md) -------------------------------


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Mark each test ``cluster``, ``system`` and ``slow`` (tests/markers.py)."""
    from tests.markers import mark  # noqa: PLC0415

    mark(items)

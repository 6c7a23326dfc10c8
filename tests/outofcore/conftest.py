"""Fixtures of the job tests: a client of a real 2-worker LocalCluster per test module
(``local_cluster``, tests/conftest.py)."""

from __future__ import annotations

import pytest
from distributed import Client


@pytest.fixture(scope="module")
def two_process_client(local_cluster):
    """A client (one per module) of the module's LocalCluster of two single-threaded worker
    processes."""
    with Client(local_cluster(n_workers=2, threads_per_worker=1, processes=True)) as client:
        yield client


#: Modules that call the worker's pieces directly, as a worker thread between tasks does,
#: and test_auto_backend, whose in-process jobs run device engines (they keep their pinned
#: buffers for the process's next job: outofcore.backends.device.engine.DeviceEngine.release).
KEEPS_WORKER_STATE = {"test_chunkfiles", "test_engines", "test_auto_backend"}


@pytest.fixture(autouse=True)
def worker_state_left_clean(request):
    """No test leaves more process-wide worker state than it found: kept panels,
    engines' accumulators and chunk-file buffers belong to worker threads between the
    tasks of one job, and an in-process job frees them when it returns (issue 20,
    item 5)."""
    from outofcore.compute.worker_context import worker_context  # noqa: PLC0415

    kept = worker_context().kept_bytes
    before = kept()
    yield
    if request.module.__name__.rsplit(".", 1)[-1] in KEEPS_WORKER_STATE:
        return
    after = kept()
    assert after <= before, f"the test left {after - before} bytes of worker state here"

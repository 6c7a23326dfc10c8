"""A run on a cluster that executes nothing ends (outofcore.runtime.stall); one that works waits.

Real in-process LocalClusters: a worker paused the way Dask's memory monitor pauses it
(its status set to paused), tasks asking for a resource no worker has, a cluster with
no worker; and, against those, a task longer than the stall timeout and a worker busy
with another client's task, which must not end the run.
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from distributed import Client, LocalCluster
from distributed.core import Status

from outofcore.errors import ClusterLostError, JobFailedError
from outofcore.planner.plan import TileTask
from outofcore.runtime.cluster import open_executor
from outofcore.runtime.executors import DaskExecutor
from outofcore.runtime.stall import ClusterStalledError, stalled_message
from tests.helpers import set_worker_status

TASKS = [TileTask(index=i, i=i, j=0, row0=i, row1=i + 1, col0=0, col1=1) for i in range(3)]
STALL = 1.5


def _index(job, task):
    return (job, task.index)


def _sleep_then_index(seconds, task):
    time.sleep(seconds)
    return task.index


@contextlib.contextmanager
def _cluster(memory_limit: int | str = 0):
    """One in-process worker; ``memory_limit`` 0: no memory monitor (its status is ours)."""
    options = {"processes": False, "dashboard_address": None, "memory_limit": memory_limit}
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, **options) as local,
        Client(local, set_as_default=False) as client,
    ):
        yield local, client


@pytest.fixture
def cluster():
    with _cluster() as pair:
        yield pair


def _timed_run(client, fn=_index, job="job", resources=None, timeout=STALL):
    started = time.monotonic()
    executor = DaskExecutor(client, stall_timeout=timeout)
    results = executor.run(fn, job, TASKS, on_result=lambda _: None, resources=resources)
    return results, time.monotonic() - started


def test_a_worker_paused_by_its_memory_monitor_ends_the_run_naming_it():
    """A worker in this process with a limit below the process's memory: Dask's memory
    monitor pauses it (the whole process counts), as in a user's large notebook."""
    with _cluster(memory_limit="24MiB") as (local, client):
        worker = next(iter(local.workers.values()))
        deadline = time.monotonic() + 10
        while worker.status != Status.paused and time.monotonic() < deadline:
            time.sleep(0.05)
        assert worker.status == Status.paused
        _assert_stalled_naming(client, worker.address, "paused by Dask's memory monitor, ")


def test_a_paused_worker_ends_the_run_naming_it(cluster):
    local, client = cluster
    worker = next(iter(local.workers.values()))
    client.run(set_worker_status(Status.paused))
    _assert_stalled_naming(client, worker.address, "paused by Dask's memory monitor")


def _assert_stalled_naming(client, address, state):
    started = time.monotonic()
    with pytest.raises(ClusterStalledError) as raised:
        _timed_run(client)
    waited = time.monotonic() - started
    assert STALL <= waited < STALL + 10
    message = str(raised.value)
    assert f"{address} {state}" in message
    assert "rerun the same command to resume" in message and "stall-timeout" in message
    assert isinstance(raised.value, ClusterLostError) and isinstance(raised.value, JobFailedError)


def test_tasks_no_worker_can_run_end_the_run(cluster):
    _, client = cluster
    with pytest.raises(ClusterStalledError, match="running"):
        _timed_run(client, resources={"GPU": 1})
    assert not any(client.processing().values())  # the run's tasks were cancelled


def test_a_cluster_without_workers_ends_the_run():
    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=None) as local,
        Client(local, set_as_default=False) as client,
        pytest.raises(ClusterStalledError, match="the cluster has no worker"),
    ):
        _timed_run(client)


def test_a_task_longer_than_the_timeout_is_waited_for(cluster):
    _, client = cluster
    results, waited = _timed_run(client, fn=_sleep_then_index, job=STALL * 2)
    assert sorted(results) == [0, 1, 2] and waited >= STALL * 6


def test_heartbeats_that_do_not_count_tasks_fall_back_to_the_scheduler(cluster, monkeypatch):
    """Workers of a Dask whose heartbeats carry no task counts: a long task assigned to a
    running worker is waited for; a paused worker with none still ends the run."""
    _, client = cluster
    info = client.scheduler_info

    def without_counts(**options):
        found = info(**options)
        for worker in found["workers"].values():
            worker["metrics"].pop("task_counts", None)
        return found

    monkeypatch.setattr(client, "scheduler_info", without_counts)
    results, waited = _timed_run(client, fn=_sleep_then_index, job=STALL * 2)
    assert sorted(results) == [0, 1, 2] and waited >= STALL * 6
    with pytest.raises(ClusterStalledError):
        _timed_run(client, resources={"GPU": 1})


def test_a_worker_busy_with_another_clients_task_is_waited_for(cluster):
    local, client = cluster
    with Client(local, set_as_default=False) as other:
        busy = other.submit(time.sleep, STALL * 3, pure=False)
        while not any(other.processing().values()):
            time.sleep(0.05)
        results, waited = _timed_run(client)
        assert busy.done()
    assert sorted(r[1] for r in results) == [0, 1, 2] and waited >= STALL * 2


def test_no_timeout_waits_and_resumes_when_the_worker_does(cluster):
    """stall_timeout None: a paused worker is waited for until it runs again."""
    _, client = cluster
    client.run(set_worker_status(Status.paused))
    resume = threading.Timer(STALL * 2, lambda: client.run(set_worker_status(Status.running)))
    resume.start()
    try:
        results, waited = _timed_run(client, timeout=None)
    finally:
        resume.cancel()
    assert sorted(r[1] for r in results) == [0, 1, 2] and waited >= STALL * 2


def test_open_executor_hands_its_bound_to_the_executor(cluster):
    _, client = cluster
    with open_executor(client, budget_bytes=2**30, announce=False, stall_timeout=7.0) as ex:
        assert ex.stall_timeout == 7.0


def test_the_message_names_a_few_workers_and_counts_the_rest():
    workers = {
        f"tcp://127.0.0.1:{port}": {
            "status": "paused",
            "memory_limit": 2**30,
            "metrics": {"memory": 2**30 + 2**29, "task_counts": {}},
        }
        for port in range(9000, 9020)
    }
    text = stalled_message(workers, 301.2)
    assert text.startswith("no worker ran any task for 301 s")
    assert (
        "tcp://127.0.0.1:9007 paused by Dask's memory monitor, 1.50 GiB of its 1.00 GiB limit"
        in text
    )
    assert "tcp://127.0.0.1:9008" not in text and "and 12 more" in text

"""Dask's local schedulers (issue 45, item 1): the in-process executor runs its tasks
through ``dask.local.get_sync`` or ``dask.threaded.get``, so dask's callbacks see them,
and ``dask.config.set(scheduler="threads")`` with no client opens it instead of a
LocalCluster."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import dask
import pytest
from dask.callbacks import Callback
from distributed import Client, LocalCluster

from outofcore.runtime.cluster import open_executor, worker_shape_of
from outofcore.runtime.executors import DaskExecutor, SynchronousExecutor
from outofcore.runtime.in_process import in_this_process, runs_in_threads, tasks_run_here
from outofcore.runtime.worker_sizing import local_blas_threads, local_worker_count

MIB = 2**20


@dataclass(frozen=True)
class _Task:
    index: int

    @property
    def key(self) -> str:
        return f"t-{self.index}"


class _Log:
    """What tasks saw: the order they started in, the threads they ran on, how many ran
    at once at most, and how many are running now."""

    def __init__(self, pause: float = 0.0) -> None:
        self.pause = pause
        self.started: list[int] = []
        self.threads: set[int] = set()
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()

    def __call__(self, job: str, task: _Task) -> tuple[str, int]:
        with self.lock:
            self.started.append(task.index)
            self.threads.add(threading.get_ident())
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            time.sleep(self.pause)
            if job == "fail" and task.index == 2:
                raise ZeroDivisionError("task 2")
            return job, task.index
        finally:
            with self.lock:
                self.running -= 1


SHUFFLED = [_Task(i) for i in (4, 0, 3, 1, 5, 2)]


@pytest.mark.parametrize("threads", [None, 1, 3])
def test_tasks_start_in_index_order_and_dask_callbacks_see_each(threads):
    log = _Log(pause=0.02)
    landed: list[tuple[str, int]] = []
    posted: list[tuple[object, object]] = []
    callback = Callback(posttask=lambda key, result, dsk, state, worker: posted.append(key))
    caller = threading.get_ident()

    def on_result(result: tuple[str, int]) -> None:
        assert threading.get_ident() == caller  # results are reported in the calling thread
        landed.append(result)

    with callback:
        results = SynchronousExecutor(threads).run(log, "job", SHUFFLED, on_result, kind="tile")
    assert log.started[: threads or 1] == list(range(threads or 1))
    if threads is None:  # dask's synchronous scheduler: in this thread, one at a time
        assert log.started == list(range(6)) and log.threads == {caller}
    else:  # threads of its own pool
        assert caller not in log.threads and len(log.threads) <= threads
        assert (log.most >= 2) == (threads > 1)
    assert sorted(results) == sorted(landed) == [("job", i) for i in range(6)]
    assert len(posted) == 6 and all(key[0].startswith("outofcore-tile-") for key in posted)


def test_a_failing_task_ends_the_run_with_no_task_left_running():
    log = _Log(pause=0.05)
    with pytest.raises(ZeroDivisionError, match="task 2"):
        SynchronousExecutor(3).run(log, "fail", SHUFFLED, lambda _: None)
    assert log.running == 0  # the tasks beside it were waited for
    assert len(log.started) < len(SHUFFLED)  # and none started after it failed


def test_an_abort_from_another_thread_stops_the_run():
    log = _Log(pause=0.05)
    executor = SynchronousExecutor(2)
    stop = threading.Timer(0.08, executor.abort, [KeyboardInterrupt("lease lost")])
    stop.start()
    with pytest.raises(KeyboardInterrupt, match="lease lost"):
        executor.run(log, "job", [_Task(i) for i in range(20)], lambda _: None)
    assert log.running == 0 and len(log.started) < 20


def test_the_worker_shape_counts_the_threads():
    shape = SynchronousExecutor(3, blas_threads=2).worker_shape()
    assert (shape.workers, shape.threads_per_worker, shape.blas_threads) == (3, 1, 2)
    assert SynchronousExecutor().worker_shape().workers == 1
    with pytest.raises(ValueError, match="at least 1"):
        SynchronousExecutor(0)


def test_dask_config_threads_opens_threads_here_not_a_cluster():
    budget = 64 * MIB
    count = local_worker_count(budget, None)
    with dask.config.set(scheduler="threads"):
        assert runs_in_threads(None) and not runs_in_threads(None, (0,))
        assert not runs_in_threads("sync") and tasks_run_here(None, None, in_process=False)
        with open_executor(None, budget_bytes=budget, announce=False) as executor:
            assert isinstance(executor, SynchronousExecutor) and executor.threads == count
            assert executor.worker_shape().blas_threads == local_blas_threads(count)
        with dask.config.set(num_workers=1):  # dask's own cap on its threads
            shape = worker_shape_of(None, budget_bytes=budget)
            assert (shape.workers, shape.blas_threads) == (1, local_blas_threads(1))
    for name in ("processes", "sync", None):
        with dask.config.set(scheduler=name):
            assert not runs_in_threads(None)


def test_dask_config_processes_starts_the_local_cluster_as_before():
    with (
        dask.config.set(scheduler="processes"),
        open_executor(
            None, budget_bytes=64 * MIB, workers=1, announce=False, in_process=True,
            dashboard=False,
        ) as executor,
    ):  # fmt: skip
        assert isinstance(executor, DaskExecutor)
        assert executor.run(_Log(), "job", SHUFFLED[:2], lambda _: None) is not None


def test_a_client_of_a_cluster_in_this_process_runs_tasks_here():
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        assert in_this_process(client) and tasks_run_here(client, None, in_process=False)
        log = _Log()
        results = DaskExecutor(client).run(log, "job", SHUFFLED, lambda _: None)
        assert sorted(results) == [("job", i) for i in range(6)]
    assert not in_this_process("tcp://127.0.0.1:8786") and not in_this_process(None)

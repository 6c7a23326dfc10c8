"""Executors and open_executor on in-process Dask clusters (distributed's gen_cluster).

The scheduler and workers run in this process, on one event loop: what is
checked here is scheduling (worker shapes, memory limits, retries, waiting for
workers), which needs no separate processes.  Killed worker processes are
tested in tests/system/test_cluster.py and tests/outofcore/jobs/test_integrity.py.
"""

from __future__ import annotations

import asyncio
import collections
import os
import re
import threading
from dataclasses import dataclass

import pytest
from distributed.utils_test import gen_cluster

from outofcore.errors import ClusterError, JobFailedError
from outofcore.planner.plan import TileTask
from outofcore.runtime.addresses import resolve_client
from outofcore.runtime.cluster import open_executor
from outofcore.runtime.executors import DaskExecutor, SynchronousExecutor, WorkerShape, check_kind
from outofcore.runtime.gpu_cluster import GPU_RESOURCE
from outofcore.runtime.worker_sizing import WORKER_OVERHEAD_BYTES, check_worker_memory
from tests.helpers import with_sync_client

GIB = 2**30
TASKS = [TileTask(index=i, i=i, j=0, row0=i, row1=i + 1, col0=0, col1=1) for i in range(6)]


def _index(job, task):
    return (job, task.index)


def test_synchronous_executor_runs_the_tasks_in_order():
    seen = []
    results = SynchronousExecutor().run(_index, "job", TASKS, on_result=seen.append)
    assert results == seen == [("job", i) for i in range(6)]
    shape = SynchronousExecutor().worker_shape()
    assert (shape.workers, shape.threads_per_worker, shape.gpu_workers) == (1, 1, 0)
    assert shape.blas_threads == (os.cpu_count() or 1)


@dataclass(frozen=True)
class _Named:
    """A task of a kind other than a tile: a key and an index are all an executor needs."""

    index: int

    @property
    def key(self) -> str:
        return f"named-{self.index}"


NAMED = [_Named(i) for i in range(4)]


def _keyed(job, task):
    return f"{job}:{task.key}"


def test_the_synchronous_executor_runs_any_kind_of_task():
    results = SynchronousExecutor().run(_keyed, "j", NAMED, lambda _: None, kind="named")
    assert results == [f"j:named-{i}" for i in range(4)]


@gen_cluster(nthreads=[("127.0.0.1", 1)])
async def test_the_dask_executor_runs_any_kind_of_task(s, a):
    def run(client):
        return DaskExecutor(client).run(_keyed, "j", NAMED, lambda _: None, kind="named")

    results = await with_sync_client(s, run)
    assert sorted(results) == [f"j:named-{i}" for i in range(4)]


@gen_cluster(
    nthreads=[
        ("127.0.0.1", 1, {"resources": {GPU_RESOURCE: 1}, "memory_limit": GIB}),
        ("127.0.0.1", 3, {"memory_limit": 0}),
    ]
)
async def test_worker_shape_of_unlike_workers(s, gpu, cpu):
    shape = await with_sync_client(s, lambda client: DaskExecutor(client).worker_shape())
    assert shape.workers == 2
    assert shape.threads_per_worker == 3  # the most threads of any worker
    assert shape.gpu_workers == 1
    # (address, memory limit or 0 for none, threads), by address.
    assert shape.memory_limits == tuple(sorted([(gpu.address, GIB, 1), (cpu.address, 0, 3)]))
    # Both on one host: 1 + 3 tasks at once share its cores; the busiest worker's share.
    assert shape.blas_threads == max(1, (os.cpu_count() or 1) // (2 * 3))


@gen_cluster(nthreads=[])
async def test_worker_shape_of_a_cluster_without_workers(s):
    shape = await with_sync_client(s, lambda client: DaskExecutor(client).worker_shape())
    assert shape == WorkerShape(workers=0, threads_per_worker=1, blas_threads=1)


SMALL_LIMIT = WORKER_OVERHEAD_BYTES + 4 * 2**20  # 4 MiB for tasks beside the worker's own


@gen_cluster(
    nthreads=[
        ("127.0.0.1", 2, {"memory_limit": SMALL_LIMIT}),
        ("127.0.0.1", 1, {"memory_limit": 0}),
    ]
)
async def test_workers_short_of_memory_per_thread_are_named(s, small, unlimited):
    shape = await with_sync_client(s, lambda client: DaskExecutor(client).worker_shape())
    check_worker_memory(shape, 2 * 2**20)  # 2 MiB per thread of the 4 MiB for tasks: fits
    with pytest.raises(ClusterError) as refused:
        check_worker_memory(shape, 2 * 2**20 + 1)
    message = str(refused.value)
    assert f"{small.address} ({SMALL_LIMIT} bytes for 2 thread(s): {2 * 2**20} per task" in message
    assert f"after the {WORKER_OVERHEAD_BYTES} bytes a worker needs beside its tasks" in message
    assert unlimited.address not in message  # no limit: never short


# In-process workers unpickle task functions from this module: they share these.
ATTEMPTS: collections.Counter[int] = collections.Counter()
ATTEMPTS_LOCK = threading.Lock()


def _fails_twice_on_odd_tiles(job, task):
    with ATTEMPTS_LOCK:
        ATTEMPTS[task.index] += 1
        tries = ATTEMPTS[task.index]
    if task.index % 2 and tries < 3:
        raise OSError(f"attempt {tries} of tile {task.index}")
    return (job, task.index)


@gen_cluster(nthreads=[("127.0.0.1", 1), ("127.0.0.1", 1)])
async def test_dask_executor_reports_every_result_once_and_retries_failed_tasks(s, a, b):
    ATTEMPTS.clear()
    reported = []

    def run(client):
        executor = DaskExecutor(client, retries=2)
        return executor.run(_fails_twice_on_odd_tiles, "job", TASKS, on_result=reported.append)

    results = await with_sync_client(s, run)
    assert sorted(results) == sorted(reported) == [("job", i) for i in range(6)]
    assert {i: 3 if i % 2 else 1 for i in range(6)} == ATTEMPTS


def _broken(job, task):
    raise OSError(f"tile {task.index} cannot be read")


@gen_cluster(nthreads=[("127.0.0.1", 1)])
async def test_dask_executor_raises_after_its_retries(s, a):
    def run(client):
        return DaskExecutor(client, retries=1).run(_broken, None, TASKS[:2], on_result=print)

    with pytest.raises(OSError, match="cannot be read"):
        await with_sync_client(s, run)


@gen_cluster(nthreads=[("127.0.0.1", 1), ("127.0.0.1", 2)])
async def test_open_executor_on_a_client_waits_for_enough_workers(s, a, b):
    def open_with(client, workers):
        with open_executor(client, budget_bytes=GIB, workers=workers, connect_timeout=0.1) as ex:
            return ex.worker_shape()

    shape = await with_sync_client(s, lambda client: open_with(client, 2))
    assert shape.workers == 2 and shape.threads_per_worker == 2
    with pytest.raises(ClusterError, match=r"has 2 running worker\(s\); waited 0.3 s for 3"):
        await with_sync_client(s, lambda client: open_with(client, 3))


@gen_cluster(nthreads=[("127.0.0.1", 1)])
async def test_open_executor_connects_to_a_scheduler_address(s, a):
    def open_address(_):
        with open_executor(s.address, budget_bytes=GIB, announce=False) as executor:
            assert isinstance(executor, DaskExecutor)
            return executor.worker_shape()

    shape = await with_sync_client(s, open_address)
    assert shape.workers == 1 and shape.memory_limits[0][0] == a.address


@gen_cluster(nthreads=[("127.0.0.1", 1), ("127.0.0.1", 1)])
async def test_keys_name_their_kind_and_a_span_holds_the_runs_inside_it(s, a, b):
    def run(client):
        executor = DaskExecutor(client)
        with executor.span("outofcore c.zarr"):
            parts = executor.run(_index, "job", TASKS[:4], print, kind="part")
            sums = executor.run(_index, "job", TASKS[:2], print, kind="reduce")
        return parts + sums + executor.run(_index, "job", TASKS[:3], print, kind="tile")

    results = await with_sync_client(s, run)
    assert sorted(results) == sorted([("job", i) for i in (0, 1, 2, 3, 0, 1, 0, 1, 2)])
    # key_split (the dashboard's progress bars) gives the kind; each run is a task group.
    finished = {name: p.state_counts["memory"] for name, p in s.task_prefixes.items()}
    assert finished == {"outofcore-part": 4, "outofcore-reduce": 2, "outofcore-tile": 3}
    groups = {
        span.name: sorted(g.prefix.name for g in span.groups)
        for span in s.extensions["spans"].spans.values()
    }
    # One group per run; the run after the span is in Dask's default span, not in it.
    assert groups == {
        ("outofcore c.zarr",): ["outofcore-part", "outofcore-reduce"],
        ("default",): ["outofcore-tile"],
    }


@pytest.mark.parametrize("kind", ["", "Tile", "tile-2", "tile_part", "-tile", "part-"])
def test_a_kind_that_key_split_would_cut_is_refused(kind):
    with pytest.raises(ValueError, match="lowercase words joined by '-'"):
        check_kind(kind)
    for executor in (SynchronousExecutor(), DaskExecutor(client=None)):  # before any task
        with pytest.raises(ValueError, match=re.escape(repr(kind))):
            executor.run(_index, "job", TASKS, print, kind=kind)
    assert check_kind("split-part") == "split-part"


def test_the_synchronous_executor_has_a_span_that_does_nothing():
    executor = SynchronousExecutor()
    with executor.span("outofcore c.zarr"):
        assert executor.run(_index, "job", TASKS[:2], lambda _: None, kind="tile") == [
            ("job", 0),
            ("job", 1),
        ]


@gen_cluster(nthreads=[("127.0.0.1", 1)])
async def test_resolve_client_takes_the_default_client_only_for_none(s, a):
    def resolve(client):
        assert resolve_client(None) is client  # the one distributed.default_client() gives
        assert resolve_client("sync") == "sync" and resolve_client(s.address) == s.address
        with pytest.raises(ClusterError, match=r"gpus=\[0, 1\] .*\(scheduler tcp://"):
            resolve_client(None, (0, 1))
        return True

    assert await with_sync_client(s, resolve)
    assert resolve_client(None) is None  # closed: no default Client left
    assert resolve_client(None, (0,)) is None  # a LocalCluster of GPU workers, as before


@gen_cluster(nthreads=[("127.0.0.1", 1)])
async def test_dask_executor_runs_on_a_client_that_is_not_the_default(s, a):
    # A job's own Clients are not made the default (another job would take them), so
    # nothing may fall back on distributed.default_client() (as_completed's loop did).
    from distributed import Client, default_client  # noqa: PLC0415

    def run():
        with Client(s.address, timeout=10, set_as_default=False) as client:
            with pytest.raises(ValueError, match="No clients found"):
                default_client()
            executor = DaskExecutor(client)
            with executor.span("outofcore c.zarr"):
                return executor.run(_index, "job", TASKS[:3], print, kind="tile")

    assert sorted(await asyncio.to_thread(run)) == [("job", i) for i in range(3)]


def _fails_on_purpose(job, task):
    with ATTEMPTS_LOCK:
        ATTEMPTS[task.index] += 1
    if task.index == 1:
        raise JobFailedError(f"tile {task.index}: an input read failed after its retries")
    return (job, task.index)


@gen_cluster(nthreads=[("127.0.0.1", 1)])
async def test_dask_executor_never_reruns_a_task_that_failed_on_purpose(s, a):
    """An OutOfCoreError is final (the task retried what it could itself): the job fails at
    the first attempt instead of the same error three times."""
    ATTEMPTS.clear()

    def run(client):
        return DaskExecutor(client, retries=2).run(_fails_on_purpose, "job", TASKS[:3], print)

    with pytest.raises(JobFailedError, match="tile 1: an input read failed"):
        await with_sync_client(s, run)
    assert ATTEMPTS[1] == 1

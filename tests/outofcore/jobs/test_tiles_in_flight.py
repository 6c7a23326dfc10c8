"""Two output tiles in flight per GPU (issue 52, item 1), proven on the timed device.

Real jobs (zarr inputs and outputs on disk, a real in-process Dask cluster) on backend
``"timed"``: a GPU worker runs ``gpu-tiles-in-flight`` task threads, each with its own
engine on the worker's one device, so one tile's write overlaps the next tile's kernels
in the device's ledger; the products are right; a worker's pinned buffers do not grow over
tiles and jobs; a bad count is refused, naming the setting.
"""

from __future__ import annotations

import threading
from collections import defaultdict

import numpy as np
import pytest
import zarr

from outofcore import config
from outofcore.api import run_job
from outofcore.backends.timed import (
    RATES,
    TIMED_NODE,
    TimedDevice,
    TimedModel,
    use_process_device,
)
from outofcore.compute.worker_context import worker_context
from outofcore.errors import ClusterError, InputError
from outofcore.runtime.gpu_cluster import GPU_RESOURCE, gpu_worker_specs
from tests.helpers import assert_product_close, write_zarr

#: Modelled seconds of one tile's kernels and of its write: long beside the host's work.
TILE_SECONDS = 0.04
TILE = 64
K = 32


class CountingDevice(TimedDevice):
    """A timed device that counts the pinned bytes each host thread allocates."""

    def __init__(self, model: TimedModel) -> None:
        super().__init__(model)
        self.pinned_by_thread: dict[str, list[int]] = defaultdict(list)
        self._count_lock = threading.Lock()

    def pinned(self, nbytes: int) -> np.ndarray:
        with self._count_lock:
            self.pinned_by_thread[threading.current_thread().name].append(nbytes)
        return super().pinned(nbytes)

    def pinned_counts(self) -> dict[str, int]:
        with self._count_lock:
            return {name: len(sizes) for name, sizes in self.pinned_by_thread.items()}


def model() -> TimedModel:
    """Kernels of :data:`TILE_SECONDS` a tile, and a disk writing a tile in as long."""
    flops = dict.fromkeys(RATES.kernel_flops, 2.0 * TILE * TILE * K / TILE_SECONDS)
    return TimedModel.from_rates(
        RATES, kernel_flops=flops, write_bps=TILE * TILE * 4 / TILE_SECONDS
    )


@pytest.fixture
def device():
    """A fresh counting timed device as the process's (the in-process worker's engines')."""
    made = CountingDevice(model())
    previous = use_process_device(made)
    yield made
    use_process_device(previous)


def operands(tmp_path, rows: int = 4 * TILE, cols: int = 2 * TILE, seed: int = 52):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((rows, K)).astype("float32")
    b = rng.standard_normal((K, cols)).astype("float32")
    write_zarr(tmp_path / "a.zarr", a, (TILE, K))
    write_zarr(tmp_path / "b.zarr", b, (K, TILE))
    return a, b


def overlapping(first, second) -> bool:
    """Whether two pieces of the ledger's work overlap in modelled time (not just touch)."""
    return first.start < second.end - 1e-9 and second.start < first.end - 1e-9


def timed_job(tmp_path, out: str, in_flight: int, **options):
    with config.set({"gpu-tiles-in-flight": in_flight}):
        return run_job(
            tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / out,
            backend="timed", gpus=(0,), tile=(TILE, TILE), progress=False, memory="64MiB",
            **options,
        )  # fmt: skip


@pytest.mark.parametrize("in_flight", [1, 2])
def test_a_tiles_write_overlaps_the_next_tiles_kernels_only_with_two_in_flight(
    tmp_path, device, in_flight
):
    a, b = operands(tmp_path)
    result = timed_job(tmp_path, "c.zarr", in_flight)
    assert_product_close(zarr.open_array(tmp_path / "c.zarr")[...], a, b)
    assert result.summary["tiles_computed"] == 8
    assert result.plan.task_budget_bytes == (64 << 20) // in_flight  # the budget per thread
    work = device.ledger.work()
    writes = [w for w in work if w.kind == "write"]
    gemms = [w for w in work if w.kind == "gemm"]
    assert len(writes) == 8  # one modelled write per finished tile (one block each)
    beside = [w for w in writes if any(overlapping(w, g) for g in gemms)]
    # A tile is written after its own kernels are done: a kernel beside its write is
    # another tile's.  One in flight: none; two: the writes of all but the last hide.
    if in_flight == 1:
        assert beside == []
        assert device.ledger.span() >= 16 * TILE_SECONDS * 0.999
    else:
        assert len(beside) >= 6
        assert device.ledger.span() <= 10 * TILE_SECONDS
    # Each task thread has its engine (its own pinned buffers) on the one device.
    assert len(device.pinned_counts()) == in_flight


def test_a_workers_pinned_buffers_do_not_grow_over_tiles_and_jobs(tmp_path, device):
    from distributed import Client, LocalCluster  # noqa: PLC0415

    a, b = operands(tmp_path)
    # A worker that outlives its jobs: two threads, two tiles in flight on its device.
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, resources={GPU_RESOURCE: 2},
            dashboard_address=":0", silence_logs=50,
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):  # fmt: skip
        counts = []
        for job in range(3):
            result = run_job(
                tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / f"c{job}.zarr",
                client=client, backend="timed", tile=(TILE, TILE), progress=False,
                memory="64MiB",
            )  # fmt: skip
            assert result.summary["tiles_computed"] == 8
            assert_product_close(zarr.open_array(tmp_path / f"c{job}.zarr")[...], a, b)
            counts.append(device.pinned_counts())
    worker_context().release_in_process()  # the worker's threads have ended with it
    threads = counts[0]
    assert 1 <= len(threads) <= 2  # the worker's task threads, each with its engine
    # Each thread's engine pins at its first tiles (C, two A and two B panel slots, and a
    # spare while the next tile starts from a kept panel) and reuses them for every tile
    # after, of this job and the next ones.
    c_bytes, panel_bytes = TILE * TILE * 4, TILE * K * 4
    for sizes in device.pinned_by_thread.values():
        assert sum(sizes) <= c_bytes + 5 * panel_bytes, sizes
    assert counts[1] == counts[2] == threads


def test_gpu_workers_offer_their_tiles_in_flight():
    specs = gpu_worker_specs((0, 1), 2**30, TIMED_NODE, tiles_in_flight=2)
    for spec in specs.values():
        assert spec["options"]["nthreads"] == 2
        assert spec["options"]["resources"] == {GPU_RESOURCE: 2}
    with pytest.raises(ClusterError, match="tiles in flight"):
        gpu_worker_specs((0,), 2**30, TIMED_NODE, tiles_in_flight=0)


@pytest.mark.parametrize("bad", [0, 9, "two", 1.5])
def test_a_bad_count_of_tiles_in_flight_is_refused_naming_the_setting(tmp_path, bad):
    operands(tmp_path)
    with pytest.raises(InputError, match="gpu-tiles-in-flight|GPU_TILES_IN_FLIGHT"):
        timed_job(tmp_path, "c.zarr", bad)


@pytest.mark.parametrize("in_flight", [1, 2])
def test_the_plan_of_a_gpu_job_knows_its_workers_tiles_in_flight(tmp_path, in_flight):
    from outofcore.jobs.opening import open_product  # noqa: PLC0415
    from outofcore.jobs.planning import job_workers, plan_job  # noqa: PLC0415
    from outofcore.jobs.spec import JobSpec  # noqa: PLC0415

    operands(tmp_path)
    spec = JobSpec(backend="timed", gpus=(0,), memory="64MiB")
    with config.set({"gpu-tiles-in-flight": in_flight}):
        workers = job_workers(spec, None)
        job_plan = plan_job(open_product(str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr")), spec)
    assert (workers.threads_per_worker, workers.gpu_workers) == (in_flight, 1)
    assert job_plan.gpu is not None and job_plan.gpu.tiles_in_flight == in_flight
    assert job_plan.plan.task_budget_bytes == (64 << 20) // in_flight


@pytest.mark.parametrize(("threads", "gpus", "in_flight"), [(2, 2, 2), (2, 1, 1), (1, 2, 1)])
def test_a_clusters_gpu_workers_keep_as_many_tiles_in_flight_as_resources_and_threads(
    threads, gpus, in_flight
):
    """A cluster started elsewhere: its GPU workers run as many tile tasks at once as they
    have GPU resources and threads both, and the tile tasks say so to their engines."""
    from distributed import Client, LocalCluster  # noqa: PLC0415

    from outofcore.runtime.executors import client_worker_shape  # noqa: PLC0415

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=threads, processes=False,
            resources={GPU_RESOURCE: gpus}, dashboard_address=":0", silence_logs=50,
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):  # fmt: skip
        shape = client_worker_shape(client)
    assert (shape.gpu_workers, shape.threads_per_worker) == (1, threads)
    assert shape.tiles_in_flight == in_flight

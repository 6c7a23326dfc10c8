"""Measured memory against the plan's projection, per kind of task (issue 20).

A job runs in-process (``client="sync"``: one task at a time) under tracemalloc,
which counts numpy's buffers; each task's own peak (over what was allocated when it
started) must stay within its kind's projection (:attr:`outofcore.planner.plan.Plan.projections`),
on shapes where the kind under test dominates.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import zarr

from outofcore.api import run_job
from outofcore.operands.steps import SLABS_ALIVE
from outofcore.runtime.executors import SynchronousExecutor
from outofcore.storage.stores import REQUEST_BYTES
from tests.helpers import assert_product_close, random_matrix, write_zarr

#: Allocations outside any projection: zarr metadata, journal records, Python objects.
SLACK_BYTES = 256 * 1024


@pytest.fixture
def task_peaks(monkeypatch, tmp_path_factory):
    """Peak traced bytes of every task the synchronous executor runs, by the task
    function's name, over what was allocated when the executor started them: a task's
    own memory and whatever earlier tasks of the job left (:mod:`outofcore.compute.panel_cache`,
    :mod:`outofcore.storage.chunkfiles`).

    A warm-up job first, untraced, so that imports and first-use set-up are not counted.
    """
    warm = tmp_path_factory.mktemp("warm")
    rng = np.random.default_rng(0)
    measured_job(
        warm,
        random_matrix(rng, (8, 8), "f4"),
        random_matrix(rng, (8, 8), "f4"),
        (8, 4),
        (4, 8),
        splits=2,
        tk=4,
    )
    peaks: dict[str, list[int]] = {}
    original = SynchronousExecutor.run

    def run(self, fn, job, tasks, on_result, *args, **kwargs):
        start, _ = tracemalloc.get_traced_memory()  # the test's own arrays, the client's state

        def measured(job, task):
            tracemalloc.reset_peak()
            result = fn(job, task)
            peaks.setdefault(fn.__name__, []).append(tracemalloc.get_traced_memory()[1] - start)
            return result

        return original(self, measured, job, tasks, on_result, *args, **kwargs)

    monkeypatch.setattr(SynchronousExecutor, "run", run)
    tracemalloc.start()
    yield peaks
    tracemalloc.stop()


def measured_job(tmp_path, a, b, chunks_a, chunks_b, **options):
    """Run ``a @ b`` in-process (the executor's tasks measured by ``task_peaks``)."""
    write_zarr(tmp_path / "a.zarr", a, chunks_a)
    write_zarr(tmp_path / "b.zarr", b, chunks_b)
    return run_job(
        tmp_path / "a.zarr",
        tmp_path / "b.zarr",
        tmp_path / "c.zarr",
        client="sync",
        progress=False,
        **options,
    )


def test_a_reduction_of_many_parts_holds_two_blocks_not_one_per_part(tmp_path, task_peaks):
    """Issue 20: 16 parts of a 1024x1024 tile; the reduction read all 16 row blocks at
    once (16 x 4 MiB), over its projection; it adds each part as it is read."""
    rng = np.random.default_rng(20)
    a = random_matrix(rng, (1024, 1024), "float32")
    b = random_matrix(rng, (1024, 1023), "float32")
    result = measured_job(
        tmp_path, a, b, (1024, 64), (64, 1023), memory=40 * 2**20, splits=16, tk=64
    )
    plan = result.plan
    assert plan.splits == 16 and len(plan.tasks) == 1
    kinds = plan.projections
    assert set(kinds) == {"part", "reduction"}
    assert kinds["reduction"] < 16 * 1024 * 1023 * 4  # fewer bytes than the parts' blocks
    assert len(task_peaks["compute_partial"]) == 16 and len(task_peaks["reduce_tile"]) == 1
    assert max(task_peaks["compute_partial"]) <= kinds["part"] + SLACK_BYTES, (task_peaks, kinds)
    assert task_peaks["reduce_tile"][0] <= kinds["reduction"] + SLACK_BYTES, (task_peaks, kinds)
    assert_product_close(zarr.open_array(str(tmp_path / "c.zarr"), mode="r")[...], a, b)
    assert result.summary["task_bytes_projected"] == plan.task_bytes


def test_a_whole_tile_stays_within_its_projection(tmp_path, task_peaks):
    rng = np.random.default_rng(21)
    a = random_matrix(rng, (601, 997), "float32")
    b = random_matrix(rng, (997, 509), "float32")
    result = measured_job(tmp_path, a, b, (100, 97), (97, 100), memory=8 * 2**20)
    assert result.plan.splits == 1 and set(result.plan.projections) == {"tile"}
    peaks = task_peaks["compute_and_record"]
    assert len(peaks) == len(result.plan.tasks) > 1
    assert max(peaks) <= result.plan.task_bytes + SLACK_BYTES, (peaks, result.plan.projections)
    assert_product_close(zarr.open_array(str(tmp_path / "c.zarr"), mode="r")[...], a, b)


def stored(tmp_path, name, data, chunks):
    write_zarr(tmp_path / f"{name}.zarr", data, chunks)
    return tmp_path / f"{name}.zarr"


def within_projection(task_peaks, plan, kind="compute_and_record"):
    peaks = task_peaks[kind]
    assert len(peaks) == len(plan.tasks) > 1
    assert max(peaks) <= plan.projections["tile"] + SLACK_BYTES, (peaks, plan.projections)


def test_a_gram_products_diagonal_and_mirrored_tiles(tmp_path, task_peaks):
    rng = np.random.default_rng(22)
    x = random_matrix(rng, (997, 600), "float32")
    path = stored(tmp_path, "x", x, (100, 100))
    result = run_job(
        path, path, tmp_path / "g.zarr", transpose_a=True, client="sync", progress=False,
        tile=(200, 200),
    )  # fmt: skip
    assert result.plan.problem.symmetric
    within_projection(task_peaks, result.plan)
    g = zarr.open_array(str(tmp_path / "g.zarr"), mode="r")[...]
    assert (g == g.T).all()


def test_staged_inputs_an_addend_and_a_narrower_output(tmp_path, task_peaks):
    """float16 inputs staged into float32 panels, a float64 addend in chunks larger than
    the inputs' (their read buffers were once missing from the projection), a float16
    output."""
    rng = np.random.default_rng(23)
    a = random_matrix(rng, (1201, 999), "float16")
    b = random_matrix(rng, (999, 1003), "float16")
    d = random_matrix(rng, (1201, 1003), "float64")
    result = run_job(
        stored(tmp_path, "a", a, (100, 100)), stored(tmp_path, "b", b, (100, 100)),
        tmp_path / "c.zarr", beta=0.5, addend=stored(tmp_path, "d", d, (200, 200)),
        out_dtype="float16", client="sync", progress=False, memory=12 * 2**20,
    )  # fmt: skip
    problem = result.plan.problem
    assert problem.staging != (0, 0) and problem.block_extra > 0
    assert problem.addend_chunk_bytes == 200 * 200 * 8
    within_projection(task_peaks, result.plan)


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_wide_integer_limbs_stay_within_their_projection(tmp_path, task_peaks, dtype):
    """Integers over their whole range through 16-bit limbs: the float64 limbs of a B
    panel, one of A's and a shift's sum are in the projection (int32 staged into int64)."""
    rng = np.random.default_rng(24)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, size=(601, 997), dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, size=(997, 509), dtype=dtype, endpoint=True)
    result = measured_job(tmp_path, a, b, (100, 97), (97, 100), memory=16 * 2**20)
    problem = result.plan.problem
    assert problem.limbs == np.dtype(dtype).itemsize // 2
    assert problem.staging == ((4, 4) if dtype == "int32" else (0, 0))
    within_projection(task_peaks, result.plan)
    expected = a.astype(np.int64) @ b.astype(np.int64)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "c.zarr"))[...], expected)


@pytest.mark.parametrize("chunk", [50, 100])
def test_requests_in_flight_on_an_object_store(moto_server, s3_bucket, task_peaks, chunk):
    """Inputs on S3: 16 chunk requests in flight per task, each with its chunk's buffers
    and its own objects (the request and response: ``stores.REQUEST_BYTES``) in the
    contract; with 10 KB chunks the requests' objects outweigh the chunks."""
    options = moto_server.options
    rng = np.random.default_rng(24)
    for name, shape in (("a", (800, 600)), ("b", (600, 700))):
        array = zarr.create_array(
            f"{s3_bucket}/{name}{chunk}.zarr", shape=shape, chunks=(chunk, chunk), dtype="f4",
            storage_options=options,
        )  # fmt: skip
        array[...] = random_matrix(rng, shape, "float32")
    a, b = f"{s3_bucket}/a{chunk}.zarr", f"{s3_bucket}/b{chunk}.zarr"
    result = run_job(
        a, b, f"{s3_bucket}/c{chunk}.zarr", client="sync", progress=False,
        memory=8 * 2**20, storage_options=options,
    )  # fmt: skip
    assert result.plan.io_concurrency == 16
    assert result.plan.problem.request_bytes == REQUEST_BYTES
    within_projection(task_peaks, result.plan)


@pytest.mark.parametrize("codec", ["zstd", "blosc"], ids=["shard-files", "zarr-sharding"])
def test_sharded_inputs_stay_within_their_projection(tmp_path, task_peaks, codec):
    """Issue 28: sharded inputs ran 40-50 % over their projection: zarr's sharding codec
    holds a shard's part of a panel, stored and decoded, where the plan counted inner
    chunks.  Local shards of zstd chunks are now read inner chunk by inner chunk (as chunk
    files); others (here blosc, as on object stores) go through zarr, counted as such."""
    from zarr.codecs import BloscCodec, ZstdCodec  # noqa: PLC0415

    rng = np.random.default_rng(27)
    paths = {}
    for name, shape in (("a", (800, 600)), ("b", (600, 700))):
        paths[name] = tmp_path / f"{name}.zarr"
        array = zarr.create_array(
            str(paths[name]), shape=shape, chunks=(50, 50), shards=(200, 200), dtype="f4",
            compressors=BloscCodec() if codec == "blosc" else ZstdCodec(),
        )  # fmt: skip
        array[...] = random_matrix(rng, shape, "float32")
    result = run_job(
        paths["a"], paths["b"], tmp_path / "c.zarr", client="sync", progress=False,
        memory=4 * 2**20,
    )  # fmt: skip
    shards = (200, 200) if codec == "blosc" else None
    assert result.plan.problem.read_shards == (shards, shards)
    within_projection(task_peaks, result.plan)
    a, b = (zarr.open_array(str(paths[name]))[...] for name in ("a", "b"))
    assert_product_close(zarr.open_array(str(tmp_path / "c.zarr"), mode="r")[...], a, b)


def test_a_jobs_peak_is_its_own_not_the_process_lifetimes(tmp_path):
    """Issue 20: on a reused process the summary reported an earlier peak (ru_maxrss)."""
    from outofcore.compute import peaks  # noqa: PLC0415

    if not peaks.resettable():
        pytest.skip("this kernel cannot reset a process's high-water mark (/proc/self/clear_refs)")
    import psutil  # noqa: PLC0415

    rss = psutil.Process().memory_info().rss
    earlier = np.ones(800 * 2**20 // 8)  # an earlier job's 800 MiB, then freed
    del earlier
    assert peaks.lifetime_peak() >= rss + 700 * 2**20  # what ru_maxrss would report
    result = measured_job(
        tmp_path,
        random_matrix(np.random.default_rng(25), (300, 200), "float32"),
        random_matrix(np.random.default_rng(26), (200, 100), "float32"),
        (50, 50),
        (50, 50),
        memory="1MiB",
    )
    summary = result.summary
    assert rss // 2 < summary["peak_worker_bytes"] < rss + 300 * 2**20
    # What a task grew its process by: 0 where freed memory of earlier work is reused.
    assert 0 <= summary["peak_task_bytes"] < 16 * 2**20


def test_a_gpu_worker_with_its_engine_stays_below_the_pause_threshold():
    """A GPU worker (outofcore's own spec: numba's simulator here, the chip where
    ``NUMBA_ENABLE_CUDASIM=0``) that makes the CUDA engine, as its first tile task does,
    stays below the fraction of its memory limit at which Dask pauses it: with a budget
    of 1 MiB its limit is nearly all allowance, so the allowance must cover the start."""
    import dask  # noqa: PLC0415
    from distributed import Client, Scheduler, SpecCluster  # noqa: PLC0415

    from outofcore.backends.cuda.workers import CUDA_NODE  # noqa: PLC0415
    from outofcore.runtime.gpu_cluster import gpu_worker_specs  # noqa: PLC0415
    from outofcore.runtime.worker_sizing import local_worker_limit  # noqa: PLC0415

    def engine_rss(dask_worker) -> dict[str, int]:  # client.run passes the worker
        import numpy  # noqa: PLC0415
        import psutil  # noqa: PLC0415

        import outofcore.backends.cuda  # noqa: PLC0415

        before = psutil.Process().memory_info().rss
        engine = outofcore.backends.cuda.make_engine("cuda")
        if not outofcore.backends.cuda.simulator_enabled():  # the chip: a tile too, as measured
            engine.start_tile((256, 256), numpy.float32)
            ones = numpy.ones((256, 64), numpy.float32)
            engine.accumulate(ones, numpy.ascontiguousarray(ones.T))
            engine.finish_tile()
        return {
            "before": before,
            "after": psutil.Process().memory_info().rss,
            "limit": int(dask_worker.memory_manager.memory_limit),
        }

    limit = local_worker_limit(2**20, gpu=True)
    pause = dask.config.get("distributed.worker.memory.pause")
    with (
        SpecCluster(
            workers=gpu_worker_specs((0,), limit, CUDA_NODE),
            scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}},
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        client.wait_for_workers(1, timeout=60)
        [measured] = client.run(engine_rss).values()
    assert measured["limit"] == limit
    assert measured["after"] < pause * limit, (measured, pause)


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "a_chunks", "b_chunks"),
    [
        # a matrix-vector product: tiles of 1 column (chunks of 100x97 peaked 14 KB over
        # the slack once in the full suite: the Python objects of 50 small chunk reads a
        # panel, and the file buffers' alignment padding the model does not count)
        ((1601, 997), (997,), (200, 194), (194,)),
        ((6, 301, 499), (499, 211), (2, 50, 97), (97, 50)),  # chunks of 2 matrices; B broadcast
    ],
    ids=["vector", "stack"],
)
def test_vectors_and_stacks_stay_within_their_projection(
    tmp_path, task_peaks, a_shape, b_shape, a_chunks, b_chunks
):
    """A matrix-vector product, and a stack whose A chunks hold two matrices each (an
    entry decodes whole chunks: the codec buffers count both)."""
    rng = np.random.default_rng(27)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    result = measured_job(tmp_path, a, b, a_chunks, b_chunks, memory=4 * 2**20)
    if len(a_shape) == 3:
        assert result.plan.problem.chunk_batch == (2, 1) and result.plan.problem.batch == 6
    within_projection(task_peaks, result.plan)
    got = zarr.open_array(str(tmp_path / "c.zarr"))[...]
    assert got.shape == np.matmul(a, b).shape
    np.testing.assert_allclose(got, np.matmul(a.astype(np.float64), b), rtol=1e-3, atol=1e-3)


def test_a_centred_region_of_a_stored_array_stays_within_its_projection(tmp_path, task_peaks):
    """A slice whose region starts and ends inside chunks (each panel decodes its edge
    chunks whole), centred by its column means (held by every task)."""
    import dask.array as da  # noqa: PLC0415

    rng = np.random.default_rng(28)
    x = random_matrix(rng, (1201, 803), "float32")
    xd = da.from_zarr(stored(tmp_path, "x", x, (200, 150)))
    part = xd[37:1190, 71:790]
    part = part - part.mean(axis=0)
    result = run_job(part.T, part, tmp_path / "g.zarr", client="sync", progress=False,
                     memory=4 * 2**20)  # fmt: skip
    assert result.plan.problem.held_bytes == 2 * 719 * 4
    assert result.plan.problem.step_slabs == (SLABS_ALIVE * 4, SLABS_ALIVE * 4)  # float32
    within_projection(task_peaks, result.plan)
    c = x[37:1190, 71:790].astype(np.float64)
    c -= c.mean(axis=0)
    got = zarr.open_array(str(tmp_path / "g.zarr"), mode="r")[...]
    np.testing.assert_allclose(got, c.T @ c, rtol=1e-4, atol=1e-2)


def test_a_product_of_two_stored_arrays_stays_within_its_projection(tmp_path, task_peaks):
    """``x * w.T`` (w float64, stored transposed): each B panel reads w's region into a
    buffer of its own (and its staging), counted as B's staging."""
    import dask.array as da  # noqa: PLC0415

    rng = np.random.default_rng(29)
    x = random_matrix(rng, (1201, 803), "float32")
    w = random_matrix(rng, (803, 1201), "float64")
    xd = da.from_zarr(stored(tmp_path, "x", x, (200, 150)))
    wd = da.from_zarr(stored(tmp_path, "w", w, (150, 200)))
    result = run_job(xd.T, xd * wd.T, tmp_path / "g.zarr", client="sync", progress=False,
                     memory=4 * 2**20)  # fmt: skip
    assert result.plan.problem.staging == (4, 4 + 8)
    within_projection(task_peaks, result.plan)
    p = x.astype(np.float64) * w.T
    got = zarr.open_array(str(tmp_path / "g.zarr"), mode="r")[...]
    np.testing.assert_allclose(got, x.astype(np.float64).T @ p, rtol=1e-8, atol=1e-8)

"""The shape zoo's systems, each set up in a child process: numpy, dask.array, outofcore.

It measures internal floors, so it imports outofcore internals: the plan
(``outofcore.jobs.planning.plan_job``, ``outofcore.jobs.inputs.open_product``,
``outofcore.jobs.spec.JobSpec``) to report the tiles, the read floor (every panel read
once with ``outofcore.operands.reading.read_panel``, or with zarr) and the write floor
(``outofcore.storage.writing.write_region`` into ``outofcore.operands.arrays.create_output``).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmarks.harness.systems import warm_outofcore
from benchmarks.shape_zoo.cases import (
    BIG,
    Shape,
)


def outofcore_plan(a_path: str, b_path: str, shape: Shape, per_worker: int, workers: int) -> Any:
    """The plan ``outofcore.matmul`` makes for ``shape`` on ``workers`` workers (the job's
    own planning function, :func:`outofcore.jobs.planning.plan_job`, for single-threaded
    workers as the LocalCluster's)."""
    from outofcore.jobs.inputs import open_product  # noqa: PLC0415
    from outofcore.jobs.planning import plan_job  # noqa: PLC0415
    from outofcore.jobs.spec import JobSpec  # noqa: PLC0415
    from outofcore.runtime.executors import WorkerShape  # noqa: PLC0415

    spec = JobSpec(transpose_a=shape.gram, memory=per_worker, backend="cpu")
    shape_of_workers = WorkerShape(workers, threads_per_worker=1, blas_threads=1)
    return plan_job(open_product(a_path, b_path, spec), spec, shape_of_workers).plan


def _shape(cfg: dict) -> Shape:
    spec = dict(cfg["shape"])
    spec["a_chunks"], spec["b_chunks"] = tuple(spec["a_chunks"]), tuple(spec["b_chunks"])
    return Shape(**spec)


def _numpy(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    import numpy as np  # noqa: PLC0415
    import zarr  # noqa: PLC0415

    shape = _shape(cfg)
    t0 = time.perf_counter()
    a = zarr.open_array(a_path, mode="r")[...]
    b = a if shape.gram else zarr.open_array(b_path, mode="r")[...]
    load = time.perf_counter() - t0
    held: dict[str, np.ndarray] = {}

    def timed() -> None:
        held["c"] = a.T @ a if shape.gram else np.matmul(a, b)

    def store() -> None:  # untimed: the reference the other systems are checked against
        c = held.pop("c")
        chunks = (min(c.shape[0], BIG), min(c.shape[1], BIG))
        ref = zarr.create_array(out, shape=c.shape, chunks=chunks, dtype=c.dtype, compressors=None)
        ref[...] = c

    return {"load_seconds": load, "_timed": timed, "_close": store}


def _dask(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    import dask  # noqa: PLC0415
    import dask.array as da  # noqa: PLC0415

    shape = _shape(cfg)

    def timed() -> None:
        a = da.from_zarr(a_path)
        product = a.T @ a if shape.gram else a @ da.from_zarr(b_path)
        with dask.config.set(scheduler="threads"):
            product.to_zarr(out, overwrite=True)

    return {"_timed": timed}


def _outofcore(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    import zarr  # noqa: PLC0415
    from distributed import Client, get_task_stream  # noqa: PLC0415

    import outofcore  # noqa: PLC0415
    from outofcore.runtime.cluster import start_local_cluster  # noqa: PLC0415

    shape = _shape(cfg)
    per_worker = cfg["memory"] // cfg["workers"]
    t0 = time.perf_counter()
    cluster = start_local_cluster(per_worker, cfg["workers"])
    client = Client(cluster)
    client.run(warm_outofcore)  # worker imports count as start-up
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    gram = outofcore.gram if shape.gram else None
    options = {
        "memory": per_worker,
        "backend": "cpu",
        "client": client,
        "overwrite": True,
        "progress": False,
        "output_codec": cfg["output_codec"],
    }
    extra: dict[str, Any] = {}

    def timed() -> None:
        started = time.perf_counter()
        with get_task_stream(client) as stream:
            if gram is not None:
                gram(a_path, out, **options)
            else:
                outofcore.matmul(a_path, b_path, out, transpose_a=shape.gram, **options)
        seconds = time.perf_counter() - started
        record = zarr.open_array(out, mode="r").attrs["outofcore"]
        extra["outofcore"] = {
            "api": "outofcore.gram" if gram is not None else "outofcore.matmul",
            "summary": record.get("summary", {}),
            "plan": record.get("plan", {}),
            "workers": worker_load(stream.data, workers, seconds),
        }

    return {
        "startup_seconds": time.perf_counter() - t0,
        "_timed": timed,
        "_close": lambda: (client.close(), cluster.close()),
        "_extra": extra,
    }


def worker_load(stream: list[dict], workers: list[str], seconds: float) -> dict:
    """Tasks and busy seconds of each worker from Dask's task stream, over ``seconds``.

    Parameters
    ----------
    stream
        ``distributed.get_task_stream(...).data``: one record per task run.
    workers
        Every worker's address, so that an idle worker shows up with no tasks.
    seconds
        The job's wall time, the denominator of the busy fractions.

    Returns
    -------
    dict
        ``tasks`` (all workers), and per worker address its ``tasks``,
        ``busy_seconds`` (time spent computing) and ``busy_fraction``.
    """
    per: dict[str, dict[str, float]] = {w: {"tasks": 0, "busy_seconds": 0.0} for w in workers}
    for record in stream:
        entry = per.setdefault(record.get("worker", "?"), {"tasks": 0, "busy_seconds": 0.0})
        entry["tasks"] += 1
        entry["busy_seconds"] += sum(
            s["stop"] - s["start"] for s in record.get("startstops", ()) if s["action"] == "compute"
        )
    for entry in per.values():
        entry["busy_fraction"] = entry["busy_seconds"] / seconds if seconds > 0 else 0.0
    return {"tasks": len(stream), "per_worker": per}


def _read_floor(a_path: str, b_path: str, out: str, cfg: dict, *, direct: bool = True) -> dict:
    """Read and decode every chunk of A and B, one thread per core, nothing else."""
    import numpy as np  # noqa: PLC0415
    import zarr  # noqa: PLC0415

    from outofcore.operands.reading import read_panel  # noqa: PLC0415

    shape = _shape(cfg)
    inputs = [zarr.open_array(a_path, mode="r")]
    if not shape.gram:
        inputs.append(zarr.open_array(b_path, mode="r"))
    blocks = [
        (x, slice(r0, min(r0 + x.chunks[0], x.shape[0])))
        for x in inputs
        for r0 in range(0, x.shape[0], x.chunks[0])
    ]
    cores = cfg["cores"]
    largest = max(x.chunks[0] * x.shape[1] for x in inputs)
    buffers = [np.empty(largest, np.float32) for _ in range(cores)]  # touched untimed
    for buffer in buffers:
        buffer.fill(0)

    def read(index: int) -> None:
        for x, rows in blocks[index::cores]:
            if direct:
                size = (rows.stop - rows.start) * x.shape[1]
                panel = buffers[index][:size].reshape(rows.stop - rows.start, x.shape[1])
                read_panel(x, (rows, slice(0, x.shape[1])), panel)
            else:
                x[rows, :]

    def timed() -> None:
        with ThreadPoolExecutor(cores) as pool:
            list(pool.map(read, range(cores)))

    return {"_timed": timed}


def _read_floor_zarr(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    return _read_floor(a_path, b_path, out, cfg, direct=False)


def _write_floor(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    """Encode and write an output of C's shape, dtype, chunks and codec, one thread per core."""
    import numpy as np  # noqa: PLC0415

    from outofcore.operands.arrays import create_output  # noqa: PLC0415
    from outofcore.storage.locations import locate  # noqa: PLC0415
    from outofcore.storage.writing import write_region  # noqa: PLC0415

    shape = _shape(cfg)
    per_worker = cfg["memory"] // cfg["workers"]
    chunks = outofcore_plan(a_path, b_path, shape, per_worker, cfg["workers"]).out_chunks
    c = create_output(
        locate(out), (shape.m, shape.n), np.dtype(np.float32), chunks, True, {}, cfg["output_codec"]
    )
    rows = chunks[0]
    # Values like a product's (random floats, so zstd sees what it would), made untimed.
    values = np.random.default_rng(3).standard_normal((min(rows, shape.m), shape.n), np.float32)
    starts = list(range(0, shape.m, rows))
    cores = cfg["cores"]

    def write(index: int) -> None:
        for r0 in starts[index::cores]:
            write_region(c, (r0, 0), values[: min(rows, shape.m - r0)])

    def timed() -> None:
        with ThreadPoolExecutor(cores) as pool:
            list(pool.map(write, range(cores)))

    return {"_timed": timed}


RUNNERS = {
    "numpy": _numpy,
    "dask": _dask,
    "outofcore": _outofcore,
    "read-floor": _read_floor,
    "read-floor-zarr": _read_floor_zarr,
    "write-floor": _write_floor,
}

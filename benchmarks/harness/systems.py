"""The rival systems of a timed run, each set up in a child process, its timed region returned.

numpy in memory, dask.array (threaded, or on a LocalCluster), cubed, and outofcore
(``outofcore.api.run_job`` on a LocalCluster); :data:`RUNNERS` names them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any


def _numpy(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    import numpy as np  # noqa: PLC0415
    import zarr  # noqa: PLC0415

    t0 = time.perf_counter()
    a = zarr.open_array(a_path, mode="r")[...]
    b = zarr.open_array(b_path, mode="r")[...]
    load = time.perf_counter() - t0
    return {"load_seconds": load, "_timed": lambda: np.matmul(a, b)}


def _dask(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    import dask  # noqa: PLC0415
    import dask.array as da  # noqa: PLC0415

    def timed() -> None:
        product = da.from_zarr(a_path) @ da.from_zarr(b_path)
        with dask.config.set(scheduler="threads"):
            product.to_zarr(out, overwrite=True)

    return {"_timed": timed}


def _dask_cluster(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    import dask.array as da  # noqa: PLC0415
    from distributed import Client, LocalCluster  # noqa: PLC0415

    t0 = time.perf_counter()
    cluster = LocalCluster(
        n_workers=os.cpu_count() or 1, threads_per_worker=1, dashboard_address=":0"
    )
    client = Client(cluster)
    client.run(_warm_dask)

    def timed() -> None:
        (da.from_zarr(a_path) @ da.from_zarr(b_path)).to_zarr(out, overwrite=True)

    return {
        "startup_seconds": time.perf_counter() - t0,
        "_timed": timed,
        "_close": lambda: (client.close(), cluster.close()),
    }


def _cubed(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    import cubed  # noqa: PLC0415
    import cubed.array_api as xp  # noqa: PLC0415

    work = tempfile.mkdtemp(prefix="cubed-", dir=cfg["scratch"])
    spec = cubed.Spec(work_dir=work, allowed_mem=cfg["memory"])

    def timed() -> None:
        a = cubed.from_zarr(a_path, spec=spec)
        b = cubed.from_zarr(b_path, spec=spec)
        cubed.to_zarr(xp.matmul(a, b), out, executor=_cubed_executor())

    return {"_timed": timed, "_close": lambda: shutil.rmtree(work, ignore_errors=True)}


def _cubed_executor() -> Any:
    try:
        from cubed.runtime.executors.local import ThreadsExecutor  # noqa: PLC0415

        return ThreadsExecutor(max_workers=os.cpu_count() or 1)
    except ImportError:  # older cubed: its default executor
        return None


def _outofcore(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    from outofcore import config  # noqa: PLC0415
    from outofcore.api import run_job  # noqa: PLC0415
    from outofcore.runtime.cluster import start_local_cluster  # noqa: PLC0415

    per_worker = cfg["memory"] // cfg["workers"]
    t0 = time.perf_counter()
    # The cluster a job with no client starts (the command, outofcore.matmul): its workers
    # are threads of this process unless the setting in-process-worker is 0;
    # "+processes" gives each worker a process of its own (a user's LocalCluster).
    in_process = config.flag("in-process-worker") and cfg.get("variant") != "processes"
    cluster = start_local_cluster(per_worker, cfg["workers"], in_process=in_process)
    from distributed import Client  # noqa: PLC0415

    client = Client(cluster)
    client.run(warm_outofcore)  # worker imports count as start-up, as for dask-cluster
    extra: dict[str, Any] = {}
    # outofcore's default output is uncompressed; "+zstd" asks for zarr's default codec,
    # the one dask.array and cubed write with.
    codec = "zstd" if cfg.get("variant") == "zstd" else "none"

    def job(output: Any, first: str = a_path, second: str = b_path) -> Any:
        return run_job(
            first,
            second,
            output,
            memory=per_worker,
            backend="cpu",
            client=client,
            overwrite=True,
            progress=False,
            output_codec=codec,
        )

    if cfg.get("variant") == "warm":  # a cluster that has run a job before: a service
        # B @ A: the same shapes and chunks (square inputs), so the same buffer sizes,
        # but no panel of the timed job is left in a worker's memory.
        job(out + "-warm-up", b_path, a_path)
        shutil.rmtree(out + "-warm-up")

    def timed() -> None:
        result = job(out)
        s = result.summary
        extra["outofcore"] = {
            key: s[key]
            for key in (
                "seconds",
                "tile",
                "tk",
                "tiles",
                "workers",
                "bytes_read",
                "bytes_read_predicted",
                "io_lower_bound",
                "read_over_lower_bound",
                "task_bytes_projected",
                "task_budget_bytes",
                "peak_worker_bytes",
                "read_wait_seconds",
                "compute_seconds",
                "write_seconds",
            )
            if key in s
        }

    return {
        "startup_seconds": time.perf_counter() - t0,
        "_timed": timed,
        "_close": lambda: (client.close(), cluster.close()),
        "_extra": extra,
    }


def warm_outofcore() -> None:
    from outofcore.compute.worker_context import worker_context  # noqa: PLC0415

    worker_context().engine("cpu")


def _warm_dask() -> None:
    import dask.array  # noqa: F401, PLC0415
    import zarr  # noqa: F401, PLC0415


RUNNERS = {
    "numpy": _numpy,
    "dask": _dask,
    "dask-cluster": _dask_cluster,
    "cubed": _cubed,
    "outofcore": _outofcore,
}

"""A race's children: one baseline system run in a fresh process, and the outofcore command."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness.processes import ROOT


def run_baseline(system: str, a: str, b: str, out: str, out_chunks: str) -> dict:
    """One baseline in this (fresh) process: its phases' seconds.  ``out_chunks`` is JSON."""
    t0 = time.perf_counter()
    import numpy as np  # noqa: PLC0415
    import zarr  # noqa: PLC0415

    phases: dict[str, float] = {}
    if system == "numpy":
        phases["import"] = time.perf_counter() - t0
        t = time.perf_counter()
        x = zarr.open_array(a, mode="r")[...]
        y = zarr.open_array(b, mode="r")[...]
        phases["read"] = time.perf_counter() - t
        t = time.perf_counter()
        c = x @ y
        phases["multiply"] = time.perf_counter() - t
    elif system in ("dask", "dask-cluster"):
        import dask  # noqa: PLC0415
        import dask.array as da  # noqa: PLC0415

        phases["import"] = time.perf_counter() - t0
        product = da.from_zarr(a) @ da.from_zarr(b)
        if system == "dask":
            t = time.perf_counter()
            with dask.config.set(scheduler="threads"):
                c = product.compute()
            phases["compute"] = time.perf_counter() - t
        else:
            from distributed import Client, LocalCluster  # noqa: PLC0415

            t = time.perf_counter()
            with LocalCluster(dashboard_address=None) as cluster, Client(cluster) as client:
                phases["cluster_start"] = time.perf_counter() - t
                t = time.perf_counter()
                c = client.compute(product).result()
                phases["compute"] = time.perf_counter() - t
                workers = len(cluster.workers)
                t = time.perf_counter()
            phases["cluster_stop"] = time.perf_counter() - t
            phases["workers"] = workers
    else:
        raise SystemExit(f"unknown system {system!r}")
    t = time.perf_counter()
    c = np.ascontiguousarray(c)
    zarr.create_array(out, data=c, chunks=tuple(json.loads(out_chunks)), compressors=None)
    phases["write"] = time.perf_counter() - t
    return {"phases": phases, "shape": list(c.shape), "dtype": str(c.dtype)}


def outofcore_command() -> list[str]:
    """The ``outofcore`` console script next to this Python (else ``python -m``)."""
    script = Path(sys.executable).with_name("outofcore")
    return [str(script)] if script.exists() else [sys.executable, "-m", "outofcore.cli"]


BASELINES = ("numpy", "dask", "dask-cluster")


SYSTEMS = (*BASELINES, "outofcore")


def compile_outofcore() -> None:
    """Compile outofcore's packages to bytecode where it is missing or stale.

    numpy, zarr and Dask were compiled when pip installed them; outofcore, installed
    editable, compiles a module on its first import, unless ``PYTHONDONTWRITEBYTECODE``
    is set (the Docker image and some sandboxes set it): then every timed run would
    compile about 60 modules again (0.1 s here) that a user's install has compiled.
    """
    import compileall  # noqa: PLC0415

    for package in ("outofcore", "scheduler"):
        compileall.compile_dir(ROOT / package, quiet=2)


def outofcore_json(stdout: str) -> Any:
    try:
        return json.loads(stdout)
    except ValueError:
        return None


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit("usage: python -m benchmarks.harness.children SYSTEM A B OUT OUT_CHUNKS_JSON")
    print(json.dumps(run_baseline(*sys.argv[1:6])))

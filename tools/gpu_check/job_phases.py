"""The GPU check's job phases: ``job`` (``random`` -> ``matmul --backend cuda`` ->
``verify``: a cold process, a warm one, more shapes, and jobs in the phase's own process)
and ``perf`` (a compute-bound job against the hand-tiled cupy script and the null-device
prediction).

Each runs in a process of its own, started by :mod:`tools.gpu_check`.  On the simulator
(the dry run) the jobs run :func:`dry_job` at tiny sizes and tiny kernel tiles, in this
process or a fresh one (:func:`dry_job_child`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tools.gpu_check.common import (
    Parts,
    cli_job,
    dry_run,
    job_figures,
    outofcore_cli,
    python_call,
    tile_params,
)

#: The job every GPU check has timed: 8192x6144 @ 6144x7168 float32, 2048^2 zstd chunks.
JOB_SHAPES = {
    "a": ("8192,6144", "2048,2048"),
    "b": ("6144,7168", "2048,2048"),
    "s": ("8,2048,6144", "1,2048,2048"),  # 8 matrices of 2048x6144, times B
    "v": ("6144", "2048"),  # A @ v: tiles one column wide
}
DRY_SHAPES = {"a": ("21,17", "4,4"), "b": ("17,23", "4,4"), "s": ("3,21,17", "1,4,4")}


def dry_job(a_url: str, b_url: str, c_url: str, tile: tuple[int, int] = (8, 12), tk: int = 8):
    """The dry run's matmul: run_job in this process on the simulator with tiny kernel tiles."""
    from outofcore.api import run_job  # noqa: PLC0415
    from outofcore.backends.cuda.engine import CudaEngine  # noqa: PLC0415
    from outofcore.compute.worker_context import worker_context  # noqa: PLC0415

    engines = worker_context().thread().engines
    engines["cuda"] = CudaEngine("cuda", params=tile_params(np.float32))
    t0 = time.perf_counter()
    result = run_job(
        a_url,
        b_url,
        c_url,
        memory="1MiB",
        backend="cuda",
        client="sync",
        progress=False,
        tile=tuple(tile),
        tk=tk,
        device_memory=1024,
        overwrite=True,
    )
    return {
        "s": time.perf_counter() - t0,
        "tasks": len(result.plan.tasks),
        "summary": job_figures(result.summary),
    }


def dry_job_child(a_url: str, b_url: str, c_url: str) -> dict:
    """:func:`dry_job` as a fresh process runs it (``python_call``): its imports timed too."""
    t0 = time.perf_counter()
    import outofcore.api  # noqa: F401, PLC0415
    from outofcore.backends.cuda import engine  # noqa: F401, PLC0415

    return {"imports_s": time.perf_counter() - t0, **dry_job(a_url, b_url, c_url)}


def in_process_job(a: str, b: str, c: str) -> dict:
    """``outofcore.run_job`` on GPU 0 from this process (the worker runs here too)."""
    from outofcore.api import run_job  # noqa: PLC0415

    t0 = time.perf_counter()
    result = run_job(
        a, b, c, backend="cuda", gpus=(0,), memory="1GiB", progress=False, overwrite=True
    )
    return {"s": time.perf_counter() - t0, "summary": job_figures(result.summary)}


def make_arrays(folder: Path, shapes: dict[str, tuple[str, str]]) -> tuple[dict, float]:
    """``outofcore random`` for each named shape (seeded 1, 2, ...): paths, seconds."""
    paths, seconds = {}, 0.0
    for seed, (name, (shape, chunks)) in enumerate(shapes.items(), start=1):
        paths[name] = str(folder / f"{name}.zarr")
        args = ("random", paths[name], "--shape", shape, "--chunks", chunks, "--seed", str(seed))
        seconds += outofcore_cli(*args)["s"]
    return paths, seconds


def _runs(p: dict[str, str]) -> dict[str, tuple[str, list[str], str, str]]:
    """The job phase's runs in order: how each runs, its extra options, A and B."""
    if dry_run():
        return {
            "cold": ("child", [], p["a"], p["b"]),  # a fresh process, an empty kernel cache
            "warm": ("child", [], p["a"], p["b"]),  # a second one, the same cache
            "in_process": ("here", [], p["a"], p["b"]),
            "stack": ("here", [], p["s"], p["b"]),
        }
    return {
        "cold": ("cli", [], p["a"], p["b"]),
        "warm": ("cli", [], p["a"], p["b"]),
        "sub_tiled": ("cli", ["--device-memory", "64MiB"], p["a"], p["b"]),
        "transposed_a": ("cli", ["--transpose-a"], p["a"], p["a"]),  # every panel transposed
        "stack": ("cli", [], p["s"], p["b"]),
        "vector": ("cli", [], p["a"], p["v"]),
        "in_process": ("here", [], p["a"], p["b"]),
        "in_process_again": ("here", [], p["a"], p["b"]),  # imports, context, kernels loaded
    }


def phase_job() -> dict:
    """``random`` -> ``matmul --backend cuda --gpus 0`` -> ``verify``: a cold process (an
    empty kernel cache), a warm one (the kernels cached), sub-tiled, ``A.T @ A``, a stack
    of matrices times one, a matrix-vector product, and jobs in this process."""
    folder = Path(tempfile.mkdtemp(prefix="gpu-check-job-"))
    os.environ["NUMBA_CACHE_DIR"] = str(folder / "kernels")  # fresh: the first run is cold
    try:
        shapes = DRY_SHAPES if dry_run() else JOB_SHAPES
        out: dict[str, Any] = {"shapes": dict(shapes), "kernel_cache": str(folder / "kernels")}
        paths, out["random_s"] = make_arrays(folder, shapes)

        def job(label: str, how: str, extra: list[str], first: str, second: str) -> dict:
            c = str(folder / f"c_{label}.zarr")
            if how == "child":
                row = python_call(
                    "tools.gpu_check.job_phases:dry_job_child", first, second, c, timeout=120
                )
            elif how == "here":
                row = dry_job(first, second, c) if dry_run() else in_process_job(first, second, c)
            else:
                options = ["--memory", "1GiB", "--backend", "cuda", "--gpus", "0", *extra]
                row = cli_job([first, second, "-o", c, *options], timeout=60)
            transposes = [flag for flag in extra if flag.startswith("--transpose")]
            verify = outofcore_cli("verify", first, second, c, *transposes, timeout=60)
            row["verify_s"] = verify["s"]
            return row

        parts = Parts(out)
        for label, (how, extra, first, second) in _runs(paths).items():
            parts.run(label, lambda a=(label, how, extra, first, second): job(*a))
        cached = folder / "kernels"
        out["cache_files"] = sum(1 for f in cached.rglob("*") if f.is_file())
        return parts.finish()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

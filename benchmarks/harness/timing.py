"""One system timed in a fresh child process.

Its set-up is untimed; the timed region is sampled (tree RSS, bytes read, CPU seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.harness.inputs import add_folder_arguments
from benchmarks.harness.processes import ROOT
from benchmarks.harness.sampling import TreeSampler
from benchmarks.harness.systems import RUNNERS


def blas_kernels() -> list[str]:
    """The BLAS libraries loaded in this process and the kernel each runs (threadpoolctl)."""
    from threadpoolctl import threadpool_info  # noqa: PLC0415

    return sorted(
        {
            f"{lib.get('internal_api')} {lib.get('version')} {lib.get('architecture', '?')}"
            for lib in threadpool_info()
            if lib.get("user_api") == "blas"
        }
    )


#: Set on some machines to work around old OpenBLAS builds; they pick a slower
#: kernel than the CPU has.  ``--blas native`` unsets both, together, for every
#: system's process, so numpy and the others all run the kernel OpenBLAS picks.
BLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

#: What a measuring child prints before its JSON (its other output is the systems' own).
RESULT = "RESULT "


def run_one(
    system: str, a_path: str, b_path: str, cfg: dict, runners: dict[str, Any] | None = None
) -> dict:
    """Run one system once in this process and return its measurements.

    ``runners`` maps a system's base name to its set-up function (default
    :data:`RUNNERS`); the output is removed afterwards unless ``cfg["keep_output"]``.
    """
    import dask.array  # noqa: F401, PLC0415 (imports before the baselines: their reads do not count)
    import distributed  # noqa: F401, PLC0415
    import zarr  # noqa: F401, PLC0415

    sampler = TreeSampler().start()
    out = os.path.join(cfg["scratch"], f"c-{system}.zarr")
    shutil.rmtree(out, ignore_errors=True)
    reads_before = sampler.read_chars()
    # "outofcore@2": on 2 workers; "outofcore+zstd": a zstd output;
    # "outofcore+warm": B @ A run once before, untimed, on the same cluster.
    base, _, workers = system.partition("@")
    base, _, variant = base.partition("+")
    cfg = {**cfg, "variant": variant}
    if workers:
        cfg = {**cfg, "workers": int(workers)}
    setup = (runners or RUNNERS)[base](a_path, b_path, out, cfg)
    if system != "numpy":  # numpy's reads are its load; the others read in the timed region
        reads_before = sampler.read_chars()
    sampler.peak_rss = 0  # the peak of the timed region only
    cpu_before = sampler.cpu_seconds()
    t0 = time.perf_counter()
    setup["_timed"]()
    seconds = time.perf_counter() - t0
    reads = sampler.read_chars() - reads_before
    cpu = sampler.cpu_seconds() - cpu_before
    peak = sampler.peak_rss
    if "_close" in setup:
        setup["_close"]()
    sampler.stop()
    if not cfg.get("keep_output"):
        shutil.rmtree(out, ignore_errors=True)
    result = {k: v for k, v in setup.items() if not k.startswith("_")}
    result.update(setup.get("_extra", {}))
    result["blas"] = blas_kernels()
    result.update(
        system=system, seconds=seconds, cpu_seconds=cpu, peak_rss_bytes=peak, read_chars=reads
    )
    return result


def measure(
    system: str,
    paths: tuple[Path, Path],
    cfg: dict,
    timeout: float,
    module: str = "benchmarks.compare",
) -> dict:
    """Run ``system`` once in a fresh process (``python -m MODULE --child``).

    Returns the child's measurements, or ``{"system", "error"}`` when it failed.
    """
    cmd = [
        sys.executable,
        "-m",
        module,
        "--child",
        system,
        str(paths[0]),
        str(paths[1]),
        json.dumps(cfg),
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if cfg.get("blas") == "native":
        for name in BLAS_OVERRIDES:
            env.pop(name, None)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout)[-2000:]
        return {"system": system, "error": f"exit {proc.returncode}: {tail}"}
    return json.loads(lines[-1][len(RESULT) :])


def measure_child(
    system: str, a_path: str, b_path: str, cfg: str, runners: dict[str, Any] | None = None
) -> dict:
    """One measurement in this fresh process, the child :func:`measure` starts.

    ``cfg`` is the run's settings as JSON; ``runners`` as for :func:`run_one`.  Its
    caller prints the result after :data:`RESULT`
    (``child_or_main(main, measure_child, prefix=RESULT)``).
    """
    return run_one(system, a_path, b_path, json.loads(cfg), runners)


def add_timing_arguments(parser: argparse.ArgumentParser, timeout: float) -> None:
    """The options of a timed run: ``--data-dir``, ``--out-dir``, ``--timeout``, ``--blas``."""
    add_folder_arguments(parser)
    parser.add_argument("--timeout", type=float, default=timeout, help="seconds per measurement")
    parser.add_argument(
        "--blas",
        choices=("native", "inherit"),
        default="native",
        help="native (default): unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE for every "
        "system, so OpenBLAS picks its kernel for this CPU; inherit: keep this environment's",
    )


def median_event_ms(fn: Callable[[], Any], repeats: int, sync: Callable[[], None]) -> float:
    """Median milliseconds of ``fn`` between two CUDA events, after one warm-up call
    (numba's CUDA events: the GPU benchmark and the GPU check time kernels with it)."""
    from numba import cuda  # noqa: PLC0415 (a GPU benchmark: numba-cuda is installed)

    fn()
    sync()
    times = []
    for _ in range(repeats):
        start, stop = cuda.event(), cuda.event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)

"""The GPU check's ``perf`` phase: a compute-bound job (32768^3 float32, zstd 2048^2
chunks, ``--device-memory 8GiB``, or the largest size the node's free disk and the
phase's time allow, printed) against the hand-tiled cupy script under the same device
cap, and the null-device prediction of its tasks (:mod:`benchmarks.null_device` on the
same data and tiles, the decode threads the job gets).

It runs in a process of its own, started by :mod:`tools.gpu_check`.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from outofcore.backends.cuda import rates as gpu_rates
from tools.gpu_check.common import Parts, cli_job, cupy_or_none, dry_run, python_call
from tools.gpu_check.job_phases import dry_job, make_arrays

SIZES = (32768, 24576, 16384, 12288, 8192)
CHUNK = 2048
DEVICE_CAP = 8 << 30
#: Host memory of the job's one worker: room for large resident tiles on a GPU node.
HOST_MEMORY = "16GiB"
#: Rates for choosing the size: random zstd inputs made at 0.1 GB/s a core (measured
#: here on 2 shared cores: 0.06 to 0.11), the kernel at the issue's target of 25 TFLOP/s,
#: decoding and writing as the model's GPU figures have them (:mod:`outofcore.backends.cuda.rates`).
MAKE_BPS_PER_CORE, FLOPS = 0.1e9, 25e12
DECODE_BPS_PER_CORE, WRITE_BPS = gpu_rates.DECODE_BPS_PER_THREAD, gpu_rates.WRITE_BPS
#: A size is taken when 1.5 times its estimate fits the time left.
SAFETY = 1.5
#: Seconds a run leaves the phase to record what it found before the phase's timeout.
MARGIN_S = 8


@dataclass(frozen=True)
class Choice:
    """The size chosen, why, and the estimate it rests on."""

    size: int
    estimate_s: float
    disk_bytes: int
    why: str


def estimate_seconds(size: int, cores: int, runs: int = 3) -> float:
    """Seconds (by the assumed rates above) to make A and B and run ``runs`` products of
    ``size``^3 with 16384^2 tiles (each tile reading its rows of A and columns of B)."""
    nbytes = 4 * size * size
    make = 2 * nbytes / (cores * MAKE_BPS_PER_CORE)
    tiles_across = max(1, size // 16384)
    one = (
        2 * nbytes * tiles_across / (cores * DECODE_BPS_PER_CORE)
        + 2 * size**3 / FLOPS
        + nbytes / WRITE_BPS
    )
    return make + runs * one


def choose_size(folder: Path, seconds_left: float, cores: int) -> Choice:
    """The largest of :data:`SIZES` whose inputs and outputs (A, B, three Cs: about 5x
    the bytes of one) fit the free disk less 4 GiB, and whose estimate (times
    :data:`SAFETY`) fits the time."""
    free = shutil.disk_usage(folder).free - (4 << 30)
    for size in SIZES:
        disk = 5 * 4 * size * size
        estimate = estimate_seconds(size, cores)
        if disk <= free and SAFETY * estimate <= seconds_left:
            why = f"fits {free >> 30} GiB free and {seconds_left:.0f} s left"
            return Choice(size, estimate, disk, why)
    size = SIZES[-1]
    return Choice(size, estimate_seconds(size, cores), 5 * 4 * size * size, "the smallest")


def _tasks_figures(summary: dict, flops: float) -> dict:
    """TFLOP/s of the tasks' seconds and their read wait share, from a job's summary."""
    tasks_s = summary.get("compute_seconds", 0) + summary.get("read_wait_seconds", 0)
    tasks_s += summary.get("write_seconds", 0) + summary.get("setup_seconds", 0)
    if tasks_s <= 0:
        return {}
    return {
        "tasks_s": tasks_s,
        "tasks_tflops": flops / tasks_s / 1e12,
        "read_wait_pct": 100 * summary.get("read_wait_seconds", 0) / tasks_s,
    }


def phase_perf(deadline: float) -> dict:
    """The compute-bound job, the hand-tiled cupy script, the null-device prediction."""
    from benchmarks import null_device  # noqa: PLC0415
    from outofcore.runtime.cores import usable_cores  # noqa: PLC0415

    folder = Path(tempfile.mkdtemp(prefix="gpu-check-perf-"))
    try:
        cores = usable_cores()
        if dry_run():
            choice = Choice(32, 0.0, 5 * 4 * 32 * 32, "dry run: tiny")
        else:
            choice = choose_size(folder, deadline - time.monotonic() - 10, cores)
        size, chunk = choice.size, (16 if dry_run() else CHUNK)
        print(f"perf: {size}^3 float32, chunks {chunk}^2 ({choice.why})", flush=True)
        out: dict[str, Any] = {"size": size, "chunk": chunk, "choice": vars(choice)}
        shapes = {name: (f"{size},{size}", f"{chunk},{chunk}") for name in ("a", "b")}
        paths, out["random_s"] = make_arrays(folder, shapes)
        a, b, flops = paths["a"], paths["b"], 2.0 * size**3
        parts = Parts(out)

        def job() -> dict:
            c = str(folder / "c.zarr")
            if dry_run():
                row = dry_job(a, b, c, tile=(16, 16), tk=16)
            else:
                options = ["--backend", "cuda", "--gpus", "0", "--memory", HOST_MEMORY]
                options += ["--device-memory", f"{DEVICE_CAP >> 30}GiB"]
                left = max(10, deadline - time.monotonic() - MARGIN_S)
                row = cli_job([a, b, "-o", c, *options], timeout=left)
            row.update(_tasks_figures(row.get("summary", {}), flops))
            return row

        parts.run("job", job)
        needed = 1.2 * out["job"].get("s", 0) if isinstance(out["job"], dict) else 0

        def time_for_another() -> str | None:
            left = deadline - time.monotonic()
            return None if left > needed + 5 else f"skipped: {left:.0f} s left, {needed:.0f} needed"

        if cupy_or_none() is None:
            out["tiled_cupy"] = "skipped: no cupy"
        elif (why := time_for_another()) is not None:
            out["tiled_cupy"] = why
        else:
            c = str(folder / "c_tiled.zarr")
            target = "tools.gpu_check.alternatives:tiled_cupy"
            left = max(10, deadline - time.monotonic() - MARGIN_S)
            parts.run("tiled_cupy", lambda: python_call(target, a, b, c, DEVICE_CAP, timeout=left))

        def prediction() -> dict:
            summary = out.get("job", {}).get("summary", {})
            tile = summary.get("tile", [16 if dry_run() else 16384])[0]
            sizes = null_device.Sizes(size, size, size, chunk, tile, summary.get("tk", chunk))
            shutil.rmtree(folder / "c.zarr", ignore_errors=True)  # room for its own output
            inputs = (Path(a), Path(b))
            row = null_device.measure(folder, sizes, cores, null_device.DeviceModel(), inputs)
            figures = row.as_dict()
            tasks = out.get("job", {}).get("tasks_s")
            if tasks:
                figures["measured_job_tasks_s"] = tasks
                figures["null_over_job"] = row.measured_s / tasks
            return figures

        if (why := time_for_another()) is not None:
            out["null_device"] = why
        else:
            parts.run("null_device", prediction)
        return parts.finish()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

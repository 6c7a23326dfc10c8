"""The null-device benchmark: the real panel loop fed to a device that only takes time.

A GPU task's time is its panel loop: chunks read and decoded by the chunk threads, the
panels handed to the engine, the tile written.  Here that loop is outofcore's own
(:func:`outofcore.compute.tile.compute_tile` with a real
:class:`~outofcore.compute.tile_job.TileJob` on zstd zarr inputs on disk), and the engine
is the CUDA engine's code on the timed device (:func:`make_engine`,
:mod:`outofcore.backends.timed`) with no arithmetic: each copy and kernel is a real wait
of its modelled time (``bytes / PCIe rate``, ``FLOPs / kernel rate``, by default the
float32 kernel's 37 TFLOP/s and pinned copies at 55 GB/s, docs/gpu.md) on the device's
streams, which overlap as a GPU's do (a panel's copies beside the last panel's kernel),
and the finished tile waits its copy back.  So a machine with no GPU measures what a GPU
worker's host side would give it: for each count of decode threads (1 to the usable
cores, :func:`outofcore.runtime.cores.usable_cores`), the decode rate, the read wait and
the task time, against the time model's prediction (:func:`outofcore.planner.model.predict`
on a :class:`~outofcore.planner.model.Machine` of the modelled device and the decode and write
rates measured here)::

    python -m benchmarks.null_device                        # 16384^3 float32, 2048^2 chunks
    python -m benchmarks.null_device --size 4096 --chunk 512 --tile 2048 --tk 512
    python -m benchmarks.null_device --kernel-tflops 0.2 --json out.json

The engine enters the loop as every engine does: the worker context's engine for the
job's backend (:meth:`outofcore.compute.worker_context.WorkerContext.engine`), here one
this benchmark puts in the calling thread's engines under its own backend name.

Internal floor: it runs ``outofcore.compute.tile.compute_tile`` itself, with the worker
context (``outofcore.compute.worker_context``), the chunk-file reader and writer
(``outofcore.storage.chunkfiles``, ``outofcore.storage.writing``) and the plan
(``outofcore.planner.tiling``).  ``python -m tools.gpu_check`` (its ``host`` phase) runs the same
functions on a GPU node, where the prediction is compared with the job.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from benchmarks.harness.inputs import add_tiling_arguments, ensure_pair
from benchmarks.harness.reports import markdown_table, save_json
from outofcore.backends.cuda import rates as gpu_rates
from outofcore.backends.timed import RATES, TimedDevice, TimedEngine, TimedModel
from outofcore.planner.gpu_rates import gpu_target

#: The modelled device: our float32 kernel's rate and pinned host<->device copies, as
#: measured on lent H100/H200 nodes (:mod:`outofcore.planner.gpu_rates`, their one home).
KERNEL_FLOPS = gpu_rates.KERNEL_FLOPS["float32"]
PCIE_BPS = gpu_rates.PCIE_BPS
#: The backend name the engine is kept under in the worker context: the timed device's.
BACKEND = "timed"


@dataclass(frozen=True)
class DeviceModel:
    """The modelled device: its kernel's FLOP/s and its copies' bytes/s each way."""

    kernel_flops: float = KERNEL_FLOPS
    pcie_bps: float = PCIE_BPS

    def __post_init__(self) -> None:
        if not (self.kernel_flops > 0 and self.pcie_bps > 0):
            raise ValueError(f"the device's rates must be positive: {self}")

    def timed(self) -> TimedModel:
        """The timed device's model: the CUDA backend's (:data:`outofcore.backends.timed.RATES`)
        with this kernel rate (every dtype) and these copies."""
        flops = dict.fromkeys(RATES.kernel_flops, self.kernel_flops)
        return TimedModel.from_rates(RATES, kernel_flops=flops, pcie_bps=self.pcie_bps)


def make_engine(model: DeviceModel) -> TimedEngine:
    """The engine the tasks run on: the device engine (the CUDA engine's code, its streams,
    slots and events) over a timed device of ``model`` that touches no data
    (:class:`~outofcore.backends.timed.device.TimedDevice`, ``arithmetic=False``): every
    copy and kernel is a real wait of its modelled time, and a tile handed back holds the
    device's seeded noise, so it compresses like real data."""
    return TimedEngine(TimedDevice(model.timed(), arithmetic=False))


def warm(engine: TimedEngine, shape: tuple[int, int], dtype: np.dtype) -> None:
    """Pin the engine's buffers for tiles of ``shape`` with one product one deep, as a
    worker's first task would: pinning is no part of a device's time per tile."""
    m, n = shape
    a = engine.host_buffer(m, dtype).reshape(m, 1)
    b = engine.host_buffer(n, dtype).reshape(1, n)
    engine.start_tile(shape, dtype)
    engine.accumulate(a, b)
    engine.finish_tile()


@dataclass(frozen=True)
class Sizes:
    """The product ``m x k @ k x n`` (float32, zstd chunks), and its forced tiling."""

    m: int
    k: int
    n: int
    chunk: int
    tile: int
    tk: int

    def __post_init__(self) -> None:
        if min(self.m, self.k, self.n, self.chunk, self.tile, self.tk) < 1:
            raise ValueError(f"sizes must be positive: {self}")


@dataclass(frozen=True)
class Row:
    """One decode-thread count's figures (seconds over the job's tasks, one at a time)."""

    threads: int
    decode_gb_s: float
    write_gb_s: float
    predicted_s: float
    measured_s: float
    read_wait_s: float
    device_s: float
    compute_s: float
    write_s: float
    setup_s: float
    tasks: int
    bottleneck: str

    @property
    def read_wait_pct(self) -> float:
        return 100.0 * self.read_wait_s / self.measured_s

    @property
    def ratio(self) -> float:
        """Measured task seconds over predicted ones."""
        return self.measured_s / self.predicted_s

    def as_dict(self) -> dict:
        return {**asdict(self), "read_wait_pct": self.read_wait_pct, "ratio": self.ratio}


def make_inputs(folder: Path, sizes: Sizes) -> tuple[Path, Path]:
    """A (``m x k``) and B (``k x n``), seeded float32 zstd zarr arrays, cached in ``folder``."""
    return ensure_pair(folder, "null", sizes.m, sizes.k, sizes.n, sizes.chunk)


def decode_rate(path: Path, threads: int, repeats: int = 2) -> float:
    """Decoded bytes/s of reading the whole array at ``path`` through outofcore's chunk-file
    reader with ``threads`` chunk threads (capped at the usable cores); best of ``repeats``."""
    import zarr  # noqa: PLC0415

    from outofcore.compute.worker_context import WorkerContext  # noqa: PLC0415
    from outofcore.storage.chunkfiles import read_layout, read_region  # noqa: PLC0415

    array = zarr.open_array(str(path), mode="r")
    layout = read_layout(array)
    if layout is None:
        raise ValueError(f"{path} is not read as chunk files (sharded or remote?)")
    WorkerContext.configure_io(threads)
    out = np.empty(array.shape, dtype=array.dtype)
    selection = tuple(slice(0, size) for size in array.shape)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        read_region(layout, selection, out)
        best = min(best, time.perf_counter() - t0)
    return out.nbytes / best


def write_rate(
    folder: Path, shape: tuple[int, int], chunks: tuple[int, int], threads: int
) -> float:
    """Bytes/s of writing one ``shape`` tile of float32 into a fresh array of ``chunks``
    in the output's default codec, with ``threads`` chunk threads."""
    import zarr  # noqa: PLC0415

    from outofcore.compute.worker_context import WorkerContext  # noqa: PLC0415
    from outofcore.storage.codecs import DEFAULT_OUTPUT_CODEC, zarr_compressors  # noqa: PLC0415
    from outofcore.storage.writing import write_region  # noqa: PLC0415

    WorkerContext.configure_io(threads)
    array = zarr.create_array(
        str(folder / "null-write-rate.zarr"),
        shape=shape,
        chunks=chunks,
        dtype="float32",
        compressors=zarr_compressors(DEFAULT_OUTPUT_CODEC),
        overwrite=True,
    )
    values = np.random.default_rng(3).standard_normal(shape, dtype=np.float32)
    t0 = time.perf_counter()
    write_region(array, (0, 0), values)
    return values.nbytes / (time.perf_counter() - t0)


def run_tasks(
    a: Path, b: Path, out: Path, sizes: Sizes, threads: int, model: DeviceModel
) -> tuple[object, dict[str, float]]:
    """Every tile task of ``A @ B`` through :func:`compute_tile` with the timed device's engine and
    ``threads`` decode threads, one task at a time; the plan and the summed figures."""
    import zarr  # noqa: PLC0415

    from outofcore.compute.tile import compute_tile  # noqa: PLC0415
    from outofcore.compute.tile_job import TileJob  # noqa: PLC0415
    from outofcore.compute.worker_context import worker_context  # noqa: PLC0415
    from outofcore.jobs.opening import open_product  # noqa: PLC0415
    from outofcore.planner.tiling import make_output_plan  # noqa: PLC0415
    from outofcore.storage.codecs import DEFAULT_OUTPUT_CODEC, zarr_compressors  # noqa: PLC0415

    product = open_product(str(a), str(b))
    plan = make_output_plan(
        product.problem(),
        8 << 30,
        1,
        tile=(sizes.tile, sizes.tile),
        tk=sizes.tk,
        io_concurrency=threads,
        shards=False,
    )
    c = zarr.create_array(
        str(out),
        shape=product.shape,
        chunks=plan.out_chunks,
        dtype=product.types.output,
        compressors=zarr_compressors(DEFAULT_OUTPUT_CODEC),
        overwrite=True,
    )
    job = TileJob(
        product=product,
        c=c,
        panels=plan.panels,
        tm=plan.tm,
        tn=plan.tn,
        tk=plan.tk,
        backend=BACKEND,
        blas_threads=1,
        io_concurrency=threads,
        job_id=uuid.uuid4().hex,
    )
    engines = worker_context().thread().engines
    engines[BACKEND] = make_engine(model)
    warm(engines[BACKEND], (plan.tm, plan.tn), product.types.compute)
    sums = dict.fromkeys(("task", "read_wait", "device", "compute", "write", "setup"), 0.0)
    try:
        for task in plan.tasks:
            t0 = time.perf_counter()
            io = compute_tile(job, task)
            sums["task"] += time.perf_counter() - t0
            sums["read_wait"] += io.read_wait_seconds
            sums["device"] += io.kernel_seconds + io.copy_seconds
            sums["compute"] += io.compute_seconds
            sums["setup"] += io.setup_seconds
            sums["write"] += io.write_seconds
    finally:
        engines.pop(BACKEND)
    return plan, sums


def predict_tasks(
    plan: object, model: DeviceModel, threads: int, decode_bps: float, write_bps: float
):
    """The time model's prediction (:func:`outofcore.planner.model.predict`) of ``plan`` on one GPU
    worker (:func:`outofcore.planner.model.gpu_machine`) with the modelled device, ``threads``
    decode threads at the host's measured decode and write rates; inputs in the page
    cache (no disk limit), no start or per-task costs."""
    from outofcore.planner.model import gpu_machine, predict  # noqa: PLC0415

    gpu = replace(
        gpu_target("float32", gpu_rates.OUR_KERNEL),
        kernel_flops=model.kernel_flops,
        pcie_bps=model.pcie_bps,
        decode_bps_per_thread=decode_bps / threads,
        write_bps=write_bps,
    )
    machine = gpu_machine(gpu, 1, threads, name="null-device", disk_bps=math.inf)
    return predict(plan, machine)


def measure(
    folder: Path,
    sizes: Sizes,
    threads: int,
    model: DeviceModel,
    inputs: tuple[Path, Path] | None = None,
) -> Row:
    """One row of the table: decode and write rates, then the tasks, at ``threads``.

    ``inputs``: A and B of ``sizes`` made elsewhere (zstd zarr arrays, float32); by
    default :func:`make_inputs` in ``folder``.
    """
    a, b = inputs or make_inputs(folder, sizes)
    decode = decode_rate(a, threads)
    write = write_rate(folder, (sizes.tile, sizes.tile), (sizes.chunk, sizes.chunk), threads)
    plan, sums = run_tasks(a, b, folder / "null-c.zarr", sizes, threads, model)
    prediction = predict_tasks(plan, model, threads, decode, write)
    return Row(
        threads=threads,
        decode_gb_s=decode / 1e9,
        write_gb_s=write / 1e9,
        predicted_s=prediction.seconds,
        measured_s=sums["task"],
        read_wait_s=sums["read_wait"],
        device_s=sums["device"],
        compute_s=sums["compute"],
        write_s=sums["write"],
        setup_s=sums["setup"],
        tasks=len(plan.tasks),
        bottleneck=prediction.bottleneck,
    )


def thread_counts(most: int | None = None) -> list[int]:
    """1 to ``most`` decode threads (default: the usable cores), doubling, and ``most``."""
    from outofcore.runtime.cores import usable_cores  # noqa: PLC0415

    top = max(1, min(most or usable_cores(), usable_cores()))
    counts = [1]
    while counts[-1] * 2 < top:
        counts.append(counts[-1] * 2)
    return sorted({*counts, top})


def run(folder: Path, sizes: Sizes, model: DeviceModel, most: int | None = None) -> list[Row]:
    """The table: one :class:`Row` per thread count (:func:`thread_counts`)."""
    folder.mkdir(parents=True, exist_ok=True)
    return [measure(folder, sizes, threads, model) for threads in thread_counts(most)]


def format_table(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table (docs/gpu.md keeps one)."""
    head = ("threads", "decode GB/s", "predicted task s", "measured task s", "read wait %", "ratio")
    cells = (
        (row.threads, f"{row.decode_gb_s:.2f}", f"{row.predicted_s:.2f}",
         f"{row.measured_s:.2f}", f"{row.read_wait_pct:.0f}", f"{row.ratio:.2f}")
        for row in rows
    )  # fmt: skip
    return markdown_table(head, "rrrrrr", cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=16384, help="m = k = n (default 16384)")
    add_tiling_arguments(parser, chunk=2048, tile=8192, tk=2048)
    parser.add_argument("--threads", type=int, help="most decode threads (default: the cores)")
    parser.add_argument("--kernel-tflops", type=float, default=KERNEL_FLOPS / 1e12)
    parser.add_argument("--pcie-gb-s", type=float, default=PCIE_BPS / 1e9)
    args = parser.parse_args(argv)
    sizes = Sizes(args.size, args.size, args.size, args.chunk, args.tile, args.tk)
    model = DeviceModel(args.kernel_tflops * 1e12, args.pcie_gb_s * 1e9)
    started = time.perf_counter()
    rows = run(args.data_dir / "null-device", sizes, model, args.threads)
    print(
        f"null device ({args.kernel_tflops:g} TFLOP/s, {args.pcie_gb_s:g} GB/s), "
        f"{sizes.m}x{sizes.k} @ {sizes.k}x{sizes.n} float32, zstd {sizes.chunk}^2 chunks, "
        f"tiles {sizes.tile}^2, tk {sizes.tk}; task seconds summed over {rows[0].tasks} tasks"
    )
    print(format_table(rows))
    print(f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    if args.json:
        report = {"sizes": asdict(sizes), "model": asdict(model), "rows": []}
        report["rows"] = [row.as_dict() for row in rows]
        save_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

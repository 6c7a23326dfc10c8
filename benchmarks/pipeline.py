"""The device pipeline on the timed device: one tile in flight per device against two.

A real job (``outofcore.api.run_job``: zstd zarr inputs on disk, a zarr output written,
made durable and recorded tile by tile) runs on backend ``"timed"`` with one GPU, whose
worker is a thread of this process (issue 52, items 1 and 5).  The timed device touches no
data (``arithmetic=False``): each copy and kernel is a real wait of its modelled time, and
each finished tile's write a real wait of a modelled disk (``write_bps``), chosen so that a
tile's write takes as long as its kernels, on top of the real zarr write and fsync.  So a
2-core machine measures what a GPU worker's schedule gives::

    python -m benchmarks.pipeline --json pipeline.json
    python -m benchmarks.pipeline --tile-seconds 0.2 --size 4096 --tile 1024

It writes

* ``serial_s``: the job's tasks with one tile in flight (``gpu-tiles-in-flight`` 1);
* ``pipelined_s``: the same with two (the default): tile i's copy back, write, fsync and
  record beside tile i+1's decoding, copies and kernels;
* ``bound_s``: the slowest stream over all tiles (the kernels, the copies, the decoding
  on the usable cores, the writes with their fsync and record), plus one fill (a tile's
  first panel: decoded and copied) and the last tile's write;
* ``stages``: that table, from the serial run's tasks (seconds summed over the tiles);

and says whether ``pipelined_s <= 1.15 * bound_s`` and ``pipelined_s <= 0.6 * serial_s``
(the issue's targets).  Then the same job on ``--devices`` timed devices (default 2; 1:
none), one worker process each made as this process's device is
(``outofcore.backends.timed.DEVICE_VARIABLE``), two tiles in flight on each:
``devices_s`` and ``devices_speedup`` (``pipelined_s`` over it; target at least 1.8 for
two).  Only the tasks' time is compared (the job's ``seconds``), not the cluster's start,
and every run is on warm workers (a service's): the same job once before, untimed, in this
process and on the devices' cluster (a fresh process's first tile pays its imports and the
device's first touch of its pinned memory, a second or more here).

Internal floor: it installs its own timed device as the process's
(``outofcore.backends.timed.use_process_device``) before each job, so the worker thread's
engines are made on it, and reads the device's ledger.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.inputs import add_tiling_arguments, ensure_pair
from benchmarks.harness.reports import markdown_table, save_json
from outofcore import config
from outofcore.api import run_job
from outofcore.backends.timed import (
    RATES,
    TIMED_NODE,
    TimedDevice,
    TimedModel,
    use_process_device,
)
from outofcore.runtime.cores import usable_cores
from outofcore.runtime.gpu_cluster import start_gpu_cluster

#: The issue's targets: pipelined within 15 % of the bound, and at most 0.6 of serial.
BOUND_RATIO = 1.15
SERIAL_RATIO = 0.6


@dataclass(frozen=True)
class Sizes:
    """The product ``size x k @ k x size`` (float32, zstd chunks), its tiles and panels."""

    size: int
    k: int
    chunk: int
    tile: int
    tk: int
    #: Modelled seconds of one tile's kernels, and of its write to the modelled disk.
    tile_seconds: float

    def __post_init__(self) -> None:
        if min(self.size, self.k, self.chunk, self.tile, self.tk) < 1 or self.tile_seconds <= 0:
            raise ValueError(f"sizes and seconds must be positive: {self}")

    def model(self) -> TimedModel:
        """The timed device: kernels of ``tile_seconds`` a tile, a disk writing a tile in
        ``tile_seconds``, the CUDA backend's PCIe."""
        flops = 2.0 * self.tile * self.tile * self.k / self.tile_seconds
        write_bps = self.tile * self.tile * 4 / self.tile_seconds
        kernel = dict.fromkeys(RATES.kernel_flops, flops)
        return TimedModel.from_rates(RATES, kernel_flops=kernel, write_bps=write_bps)


def make_inputs(folder: Path, sizes: Sizes) -> tuple[Path, Path]:
    """A and B, seeded float32 zstd arrays, cached in ``folder``."""
    return ensure_pair(folder, "pipeline", sizes.size, sizes.k, sizes.size, sizes.chunk)


def run_once(
    inputs: tuple[Path, Path], out: Path, sizes: Sizes, in_flight: int
) -> tuple[Any, TimedDevice]:
    """The job on a fresh timed device (its worker a thread of this process) with
    ``in_flight`` tiles in flight: its result and the device (its ledger)."""
    device = TimedDevice(sizes.model(), arithmetic=False)
    previous = use_process_device(device)
    try:
        with config.set({"gpu-tiles-in-flight": in_flight}):
            result = run_job(
                str(inputs[0]), str(inputs[1]), str(out),
                backend="timed", gpus=(0,), tile=(sizes.tile, sizes.tile), tk=sizes.tk,
                memory="1GiB", progress=False, overwrite=True,
            )  # fmt: skip
    finally:
        use_process_device(previous)
    return result, device


def run_on_devices(inputs: tuple[Path, Path], out: Path, sizes: Sizes, devices: int) -> Any:
    """The job on ``devices`` timed devices, one warm worker process each with two tiles
    in flight (the job run once before, untimed); the timed run's result."""
    previous = use_process_device(TimedDevice(sizes.model(), arithmetic=False))
    try:  # each worker's device is made as this process's is (the node's worker_env)
        cluster = start_gpu_cluster(
            tuple(range(devices)), 2 << 30, TIMED_NODE, dashboard=False, tiles_in_flight=2
        )
    finally:
        use_process_device(previous)
    from distributed import Client  # noqa: PLC0415

    with cluster, Client(cluster, set_as_default=False) as client:
        results = [
            run_job(
                str(inputs[0]),
                str(inputs[1]),
                str(out.with_suffix(f".{run}.zarr")),
                client=client,
                backend="timed",
                tile=(sizes.tile, sizes.tile),
                tk=sizes.tk,
                memory="1GiB",
                progress=False,
                overwrite=True,
            )  # fmt: skip
            for run in ("warm", "timed")
        ]
    return results[-1]


def stages(result: Any, sizes: Sizes) -> dict[str, float]:
    """The serial run's stages, seconds summed over its tiles: kernel and PCIe (the
    ledger's events), decode (CPU seconds over the usable cores), write (a task's time
    after its last panel: copy back, write, fsync, record), the fill of one tile, the last
    tile's write, and what is exposed beside the slowest stream (those two)."""
    tiles = result.results
    panels = -(-sizes.k // sizes.tk)
    decode = sum(r.decode_cpu_seconds for r in tiles) / usable_cores()
    kernel = sum(r.kernel_seconds for r in tiles)
    pcie = sum(r.copy_seconds for r in tiles)
    after = (r.seconds - r.setup_seconds - r.read_wait_seconds - r.compute_seconds for r in tiles)
    write = sum(after)
    fill = (sum(r.decode_cpu_seconds for r in tiles) / len(tiles) + pcie / len(tiles)) / panels
    last = write / len(tiles)
    return {"kernel": kernel, "pcie": pcie, "decode": decode, "write": write, "fill": fill,
            "last_write": last, "exposed": fill + last}  # fmt: skip


def run(folder: Path, sizes: Sizes, devices: int = 2) -> dict[str, Any]:
    """Both runs on one device, the bound and the verdicts; then ``devices`` devices."""
    inputs = make_inputs(folder, sizes)
    with tempfile.TemporaryDirectory(dir=folder, prefix="pipeline-out-") as out:
        run_once(inputs, Path(out) / "warm.zarr", sizes, 2)  # this process's first touches
        serial, serial_device = run_once(inputs, Path(out) / "serial.zarr", sizes, 1)
        pipelined, device = run_once(inputs, Path(out) / "pipelined.zarr", sizes, 2)
        several = None
        if devices > 1:
            several = run_on_devices(inputs, Path(out) / "devices", sizes, devices)
    table = stages(serial, sizes)
    slowest = max(("kernel", "pcie", "decode", "write"), key=table.__getitem__)
    bound = table[slowest] + table["exposed"]
    serial_s, pipelined_s = serial.summary["seconds"], pipelined.summary["seconds"]
    devices_s = several.summary["seconds"] if several is not None else None
    return {
        "devices": devices,
        "devices_s": devices_s,
        "devices_speedup": pipelined_s / devices_s if devices_s else None,
        "sizes": asdict(sizes),
        "tiles": serial.summary["tiles"],
        "cores": usable_cores(),
        "serial_s": serial_s,
        "pipelined_s": pipelined_s,
        "bound_s": bound,
        "slowest_stage": slowest,
        "stages": table,
        "pipelined_over_bound": pipelined_s / bound,
        "pipelined_over_serial": pipelined_s / serial_s,
        "meets_bound": pipelined_s <= BOUND_RATIO * bound,
        "meets_serial": pipelined_s <= SERIAL_RATIO * serial_s,
        "ledger_span_s": {"serial": serial_device.ledger.span(), "pipelined": device.ledger.span()},
        "ledger_overlap_s": {
            "serial": serial_device.ledger.overlap(),
            "pipelined": device.ledger.overlap(),
        },
    }


def format_report(report: dict[str, Any]) -> str:
    """The stage table and the three times, as Markdown."""
    rows = [(name, f"{seconds:.3f}") for name, seconds in report["stages"].items()]
    lines = [markdown_table(("stage", "seconds"), "lr", rows), ""]
    lines.append(
        f"serial {report['serial_s']:.2f} s, pipelined {report['pipelined_s']:.2f} s, "
        f"bound {report['bound_s']:.2f} s ({report['slowest_stage']}): pipelined/bound "
        f"{report['pipelined_over_bound']:.2f} (target <= {BOUND_RATIO}), pipelined/serial "
        f"{report['pipelined_over_serial']:.2f} (target <= {SERIAL_RATIO})"
    )
    if report["devices_s"] is not None:
        lines.append(
            f"{report['devices']} devices {report['devices_s']:.2f} s: "
            f"{report['devices_speedup']:.2f}x one device's throughput"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=4096, help="m = n (default 4096)")
    parser.add_argument("--k", type=int, default=1024, help="k (default 1024)")
    add_tiling_arguments(parser, chunk=512, tile=1024, tk=512)
    parser.add_argument("--tile-seconds", type=float, default=0.1, help="kernel = write a tile")
    parser.add_argument("--devices", type=int, default=2, help="timed devices after (1: none)")
    args = parser.parse_args(argv)
    sizes = Sizes(args.size, args.k, args.chunk, args.tile, args.tk, args.tile_seconds)
    started = time.perf_counter()
    folder = args.data_dir / "pipeline"
    folder.mkdir(parents=True, exist_ok=True)
    report = run(folder, sizes, args.devices)
    print(format_report(report))
    print(f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    if args.json:
        save_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The shape zoo: numpy in memory, dask.array and outofcore on five shapes of product.

Issue 11, item 5.  For each shape, one run makes (once, cached in
``benchmarks/data/``) seeded random float32 zarr inputs (zstd, zarr's default
codec) and times, over ``--repeats`` rounds with the order of systems reversed
every other round, each system in a fresh Python process
(:func:`benchmarks.harness.timing.run_one`, which samples the process tree's RSS, CPU time and
``read_chars``):

* ``numpy``: ``a @ b`` (``x.T @ x`` for the Gram shape: numpy's ``syrk``) on
  arrays already in memory; loading and storing are not timed;
* ``dask``: ``(da.from_zarr(a) @ da.from_zarr(b)).to_zarr(c)`` (``x.T @ x``),
  threaded scheduler, zarr to zarr;
* ``outofcore``: ``outofcore.matmul`` (``outofcore.gram`` for the Gram
  shape) on the
  LocalCluster ``outofcore.runtime.cluster.start_local_cluster`` starts with
  ``--workers`` single-thread workers (start-up not timed), ``--memory`` split
  evenly over them, output codec ``--output-codec`` (outofcore's default:
  uncompressed); Dask's task stream gives each worker's tasks and busy seconds;
* the floors of the I/O-bound shapes, with the same cores (one thread per
  core): ``read-floor`` reads and decodes every chunk of A and B and nothing
  else, with outofcore's chunk-file reader (``read-floor-zarr``: with zarr's
  own ``array[rows]``; the floor is the faster of the two); ``write-floor``
  encodes and writes an output of C's shape, dtype, chunks and codec.

The shapes (``--scale s`` divides every dimension of 2048 or more, and the
chunk edges along it, by ``s``):

========  ==============================  ==========  ====================
name      product                         chunks      bound by
========  ==============================  ==========  ====================
square    16384² @ 16384²                 2048²       compute
large-k   2048x262144 @ 262144x2048       2048²       compute
gram      X.T @ X, X 524288x512           8192x512    compute (syrk)
skinny    262144x4096 @ 4096x64           2048²       reading A
flat      32768x256 @ 256x32768           8192x256    writing C
========  ==============================  ==========  ====================

Every dask.array and outofcore output is compared with numpy's, element by
element, within a float32 tolerance that grows with k (:func:`tolerance`);
a wrong result fails the run.  Prints, per shape, time / numpy, dask.array /
outofcore, bytes read / the lower bound (``outofcore.planner.io_model.io_lower_bound``;
outofcore's exact decoded bytes, the others' ``read_chars`` scaled to decoded
bytes), time / floor for the I/O-bound shapes, each worker's tasks and busy
fraction, and the plan, with the issue's targets beside each figure.  Writes
``benchmarks/results/shapes-<date>.json`` and a grouped bar chart to ``--png``.

Usage::

    python -m benchmarks.shapes --scale 16 --repeats 1 --png /tmp/zoo.png   # minutes
    python -m benchmarks.shapes --repeats 3 --png docs/performance-shapes.png
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shutil
import sys
import tempfile
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.harness.checking import TOLERANCE_FACTOR, compare_outputs
from benchmarks.harness.inputs import stored_bytes
from benchmarks.harness.processes import child_or_main
from benchmarks.harness.reports import summarise
from benchmarks.harness.timing import RESULT, add_timing_arguments, measure, measure_child
from benchmarks.shape_zoo.cases import (
    BUSY_FRACTION,
    FLOORS,
    SHAPES,
    SYSTEMS,
    Shape,
    ensure_shape_inputs,
)
from benchmarks.shape_zoo.report import figures, plot, table
from benchmarks.shape_zoo.systems import RUNNERS, outofcore_plan

# --------------------------------------------------------------------------- inputs


# --------------------------------------------------------------------------- systems


# --------------------------------------------------------------------------- checking


# --------------------------------------------------------------------------- the run


def run_shape(shape: Shape, args: argparse.Namespace, systems: list[str]) -> dict:
    """Every system on ``shape`` over ``args.repeats`` rounds; its JSON entry."""
    from outofcore.planner.io_model import io_lower_bound  # noqa: PLC0415

    paths = ensure_shape_inputs(args.data_dir, shape)
    per_worker = args.memory_bytes // args.workers
    plan = outofcore_plan(str(paths[0]), str(paths[1]), shape, per_worker, args.workers)
    stored = [paths[0]] if shape.gram else list(paths)
    logical = 4 * math.prod(shape.a_shape) + (0 if shape.gram else 4 * math.prod(shape.b_shape))
    info = {
        "compression_ratio": logical / sum(stored_bytes(p) for p in stored),
        "lower_bound_bytes": io_lower_bound(plan.problem, per_worker),
    }
    floors = list(FLOORS.get(shape.bound, ())) if args.floors else []
    everyone = systems + floors
    scratch = tempfile.mkdtemp(prefix=f"shapes-{shape.name}-", dir=args.data_dir)
    cfg = {
        "memory": args.memory_bytes,
        "workers": args.workers,
        "cores": args.cores,
        "scratch": scratch,
        "blas": args.blas,
        "output_codec": args.output_codec,
        "shape": asdict(shape),
        "keep_output": True,
    }
    runs: dict[str, list[dict]] = {s: [] for s in everyone}
    checks: dict[str, list[dict]] = {s: [] for s in systems if s != "numpy"}
    try:
        for round_ in range(args.repeats):
            order = everyone if round_ % 2 == 0 else everyone[::-1]
            for system in order:
                r = measure(system, paths, cfg, args.timeout, module="benchmarks.shapes")
                runs[system].append(r)
                shown = f"{r['seconds']:.2f} s" if "seconds" in r else r["error"][-300:]
                print(f"{shape.name} round {round_ + 1} {system:>15}: {shown}", file=sys.stderr)
            reference = os.path.join(scratch, "c-numpy.zarr")
            for system in checks:
                if "numpy" in runs and os.path.exists(reference):
                    got = os.path.join(scratch, f"c-{system}.zarr")
                    checks[system].append(compare_outputs(got, reference, shape.k))
                    if not checks[system][-1]["ok"]:
                        print(
                            f"{shape.name}: {system} WRONG: {checks[system][-1]}", file=sys.stderr
                        )
            for system in everyone:
                shutil.rmtree(os.path.join(scratch, f"c-{system}.zarr"), ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "shape": asdict(shape),
        "flops": 2 * shape.m * shape.n * shape.k,
        "bytes_c": 4 * shape.m * shape.n,
        "inputs_bytes": logical,
        **info,
        "plan": plan.summary(),
        "systems": summarise(runs, info),
        "verified": {
            s: {"ok": all(c["ok"] for c in cs) and bool(cs), "checks": cs}
            for s, cs in checks.items()
        },
    }


# --------------------------------------------------------------------------- figures


# --------------------------------------------------------------------------- driver


def command_parser() -> argparse.ArgumentParser:
    """The zoo's options: shapes, systems, scale, rounds, outofcore's budget and workers,
    the output codec, the floors, the chart, and timing's."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma list of shapes")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma list of systems")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="divide dimensions >= 2048 by this"
    )
    parser.add_argument("--repeats", type=int, default=3, help="rounds (medians)")
    parser.add_argument(
        "--memory", default="2GiB", help="outofcore's budget over all workers (split evenly)"
    )
    parser.add_argument("--workers", type=int, default=2, help="outofcore's workers (1 thread)")
    parser.add_argument("--output-codec", default="none", help="outofcore's and the write floor's")
    parser.add_argument(
        "--no-floors", dest="floors", action="store_false", help="skip the I/O floors"
    )
    parser.add_argument("--png", type=Path, help="write the bar chart here")
    add_timing_arguments(parser, timeout=1800)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the zoo; exit status 1 if any system failed or any output was wrong."""
    parser = command_parser()
    args = parser.parse_args(argv)

    from outofcore.config import parse_size  # noqa: PLC0415

    names = [s for s in args.shapes.split(",") if s]
    systems = [s for s in args.systems.split(",") if s]
    unknown = (set(names) - set(SHAPES)) | (set(systems) - set(SYSTEMS))
    if unknown:
        parser.error(f"unknown {sorted(unknown)}; shapes {list(SHAPES)}, systems {SYSTEMS}")
    if args.scale <= 0 or args.repeats < 1 or args.workers < 1:
        parser.error("--scale must be > 0, --repeats and --workers >= 1")
    args.memory_bytes = parse_size(args.memory)
    args.cores = os.cpu_count() or 1
    args.data_dir.mkdir(parents=True, exist_ok=True)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    date = datetime.date.today().isoformat()
    suffix = "" if args.scale == 1 else f"-scale{args.scale:g}"
    json_path = args.out_dir / f"shapes-{date}{suffix}.json"
    result: dict[str, Any] = {"info": zoo_info(args, systems, date), "shapes": {}}
    for name in names:
        shape = SHAPES[name].scaled(args.scale)
        entry = run_shape(shape, args, systems)
        entry["figures"] = figures(entry)
        result["shapes"][name] = entry
        json_path.write_text(json.dumps(result, indent=2))  # a partial file survives
    print(table(result))
    if args.png:
        plot(result, args.png)
    print(f"\nwrote {json_path}" + (f" and {args.png}" if args.png else ""), file=sys.stderr)
    failed, wrong = failures(result)
    if failed or wrong:
        print(f"FAILED: {failed}; WRONG RESULTS: {wrong}", file=sys.stderr)
        return 1
    return 0


def zoo_info(args: argparse.Namespace, systems: list[str], date: str) -> dict[str, Any]:
    """What the results are of: the run's settings, the checks' limits, what is timed."""
    return {
        "date": date,
        "scale": args.scale,
        "repeats": args.repeats,
        "memory": args.memory_bytes,
        "workers": args.workers,
        "cores": args.cores,
        "output_codec": args.output_codec,
        "blas": args.blas,
        "systems": systems,
        "tolerance_factor": TOLERANCE_FACTOR,
        "busy_fraction": BUSY_FRACTION,
        "timed": {
            "numpy": "a @ b (x.T @ x) on loaded arrays; load and store not timed",
            "others": "zarr to zarr; cluster start-up not timed",
            "floors": "read: every input chunk read and decoded; write: C encoded and "
            "written; one thread per core",
        },
    }


def failures(result: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The ``"shape system"`` pairs that failed to run, and those whose output was wrong."""
    failed = [
        f"{name} {system}"
        for name, entry in result["shapes"].items()
        for system, s in entry["systems"].items()
        if "error" in s
    ]
    wrong = [
        f"{name} {system}"
        for name, entry in result["shapes"].items()
        for system, v in entry["verified"].items()
        if not v["ok"]
    ]
    return failed, wrong


if __name__ == "__main__":
    child_or_main(main, partial(measure_child, runners=RUNNERS), prefix=RESULT)

"""Each kind of task's memory on realistic shapes: the plan's projection against peak RSS.

Issue 20.  ``tests/outofcore/jobs/test_memory.py`` checks every kind of task against its
projection on small shapes, with tracemalloc (numpy's buffers only).  This benchmark
runs one realistic shape per kind, each case in a fresh Python process, and measures
what a worker's operating system sees: resident memory.

In each process: the imports and a small warm-up job first (libraries' lazy set-up,
BLAS's own buffers), then the baseline, the process's resident bytes; then the case's
job, in-process (``client="sync"``, one task at a time, as one worker thread runs
them).  Every task measures the process's peak while it ran
(:mod:`outofcore.compute.peaks`); a kind's figure is the largest of its tasks' peaks over the
baseline: the task's own memory plus what earlier tasks left for it (kept buffers,
which its projection counts too).  The job must fit its projection plus the allowance
beside the task, ``outofcore.runtime.worker_sizing.WORKER_OVERHEAD_BYTES``; a case over it, or whose
output fails :func:`outofcore.verify`, fails the run (exit status 1).

Cases (``--scale S`` divides every dimension and chunk by S, every budget by S²):

* ``tile``: 8192³ float32, 1024² chunks, the default 1 GiB budget;
* ``split``: the issue's reduction, 4096² from k = 4096 in 32 parts (A in 4096x64
  chunks, B in 64x4096), 160 MiB: the split parts and the reduction;
* ``gram``: ``X.T @ X`` of X 65536x4096 in 8192x1024 chunks, 512 MiB: diagonal tiles
  (syrk, then the mirror written from the tile) and off-diagonal ones (and theirs);
* ``staged``: float16 A and B (8192x4096 @ 4096x8192) staged into float32 panels,
  ``+ 0.5 * D`` with D float64 in 2048² chunks, written as float16, 512 MiB;
* ``wide-int``: int64 4096x2048 @ 2048x4096 over the whole int64 range (16-bit limbs:
  the limbs of a B panel held beside the panels, :func:`outofcore.planner.memory.limb_bytes`),
  256 MiB;
* ``s3``: 4096² float32 in 256² chunks on a local S3 server (moto, the test extra),
  16 requests in flight per task, 256 MiB;
* ``sharded``: the ``tile`` case's 8192³ float32 in 1024² chunks grouped in shards of
  4x4 chunks (zarr v3 ``shards=``), 512 MiB: outofcore reads the shard files' inner
  chunks one at a time, as chunk files;
* ``sharded-zarr``: the same with blosc inner chunks, which zarr's sharding codec reads
  (as it reads shards on object stores): a read holds a shard's part of a panel;
* ``vector``: a matrix-vector product, 16384x8192 float32 in 1024² chunks @ a vector of
  8192 in chunks of 1024, 256 MiB: tiles one column wide;
* ``centered``: the centred Gram ``xc.T @ xc`` of X 65536x2048 float32 in 4096x1024
  chunks, ``xc = x - x.mean(axis=0)`` from dask (issue 31: an operand that computes:
  the column means held by every task, subtracted from each panel as it is read),
  256 MiB;
* ``stack``: a stack of 16 products, A 16x1024x2048 in chunks of 2x512x512 (each chunk
  holds two matrices: both are decoded for either) @ one B 2048x1024 for all 16
  (broadcast), 128 MiB.  The batch dimension is not scaled.

Writes ``benchmarks/results/task-memory-<date>.json``.

Usage::

    python -m benchmarks.task_memory                     # every case, about 2 minutes
    python -m benchmarks.task_memory --cases split gram
    python -m benchmarks.task_memory --scale 16          # a smoke run (the tests')

Internal floor: each task's peak comes from ``outofcore.compute.peaks``; the output
is checked with ``outofcore.frontends.verify.verify``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness.inputs import DEFAULT_RESULTS
from benchmarks.harness.processes import ROOT
from benchmarks.harness.reports import markdown_table

MiB = 2**20


@dataclass(frozen=True)
class Operand:
    """An input the case writes: its name, shape, chunks and dtype."""

    name: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str = "float32"
    #: Shards of ``chunks`` (zarr v3), or None: plain chunks.
    shards: tuple[int, int] | None = None
    #: The shards' inner compressor: ``zstd`` (zarr's default) or ``blosc``.
    codec: str = "zstd"


@dataclass(frozen=True)
class Case:
    """One realistic job for a kind of task: its inputs, job options and budget."""

    what: str
    operands: tuple[Operand, ...]
    memory: int
    options: dict[str, Any] = field(default_factory=dict)
    #: The operands are on a local S3 server (moto) instead of the local disk.
    s3: bool = False


CASES: dict[str, Case] = {
    "tile": Case(
        "whole tiles, 8192^3 float32, 1024^2 chunks",
        (Operand("a", (8192, 8192), (1024, 1024)), Operand("b", (8192, 8192), (1024, 1024))),
        1024 * MiB,
    ),
    "split": Case(
        "4096^2 from k = 4096 in 32 parts (issue 20's command)",
        (Operand("a", (4096, 4096), (4096, 64)), Operand("b", (4096, 4096), (64, 4096))),
        160 * MiB,
        {"splits": 32, "tk": 64},
    ),
    "gram": Case(
        "X.T @ X, X 65536x4096 float32 in 8192x1024 chunks",
        (Operand("x", (65536, 4096), (8192, 1024)),),
        512 * MiB,
        {"transpose_a": True},
    ),
    "staged": Case(
        "float16 8192x4096 @ 4096x8192 + 0.5 * D (float64), written as float16",
        (
            Operand("a", (8192, 4096), (1024, 1024), "float16"),
            Operand("b", (4096, 8192), (1024, 1024), "float16"),
            Operand("d", (8192, 8192), (2048, 2048), "float64"),
        ),
        512 * MiB,
        {"beta": 0.5, "out_dtype": "float16"},
    ),
    "wide-int": Case(
        "int64 4096x2048 @ 2048x4096 over the whole range, 1024^2 chunks: 4 x 4 16-bit limbs",
        (
            Operand("a", (4096, 2048), (1024, 1024), "int64"),
            Operand("b", (2048, 4096), (1024, 1024), "int64"),
        ),
        256 * MiB,
    ),
    "s3": Case(
        "4096^2 float32 in 256^2 chunks on S3 (moto), 16 requests in flight",
        (Operand("a", (4096, 4096), (256, 256)), Operand("b", (4096, 4096), (256, 256))),
        256 * MiB,
        s3=True,
    ),
    "sharded": Case(
        "8192^3 float32, 1024^2 chunks in shards of 4x4 chunks",
        (
            Operand("a", (8192, 8192), (1024, 1024), shards=(4096, 4096)),
            Operand("b", (8192, 8192), (1024, 1024), shards=(4096, 4096)),
        ),
        512 * MiB,
    ),
    "sharded-zarr": Case(
        "8192^3 float32, blosc 1024^2 chunks in shards of 4x4 chunks, read by zarr",
        (
            Operand("a", (8192, 8192), (1024, 1024), shards=(4096, 4096), codec="blosc"),
            Operand("b", (8192, 8192), (1024, 1024), shards=(4096, 4096), codec="blosc"),
        ),
        512 * MiB,
    ),
    "vector": Case(
        "16384x8192 float32 @ a vector of 8192, 1024^2 chunks",
        (Operand("a", (16384, 8192), (1024, 1024)), Operand("b", (8192,), (1024,))),
        256 * MiB,
    ),
    "centered": Case(
        "xc.T @ xc, xc = x - x.mean(axis=0) from dask, X 65536x2048 float32",
        (Operand("x", (65536, 2048), (4096, 1024)),),
        256 * MiB,
        {"centered": True},
    ),
    "stack": Case(
        "16 x (1024x2048 @ 2048x1024) float32, A in 2x512x512 chunks, one B for all",
        (Operand("a", (16, 1024, 2048), (2, 512, 512)), Operand("b", (2048, 1024), (512, 512))),
        128 * MiB,
    ),
}


def scaled(case: Case, scale: int) -> Case:
    """``case`` with every dimension and chunk divided by ``scale``, its budget by scale²."""
    if scale == 1:
        return case

    def div(sizes: tuple[int, ...]) -> tuple[int, ...]:
        """The matrix (or vector) dimensions divided; a stack's batch dimensions kept."""
        batch = sizes[:-2] if len(sizes) > 2 else ()
        return batch + tuple(max(1, v // scale) for v in sizes[len(batch) :])

    operands = tuple(
        Operand(o.name, div(o.shape), div(o.chunks), o.dtype, o.shards and div(o.shards), o.codec)
        for o in case.operands
    )
    options = dict(case.options)
    if "tk" in options:  # as many panels, so as many parts
        options["tk"] = max(1, options["tk"] // scale)
    return Case(case.what, operands, max(4 * MiB, case.memory // scale**2), options, case.s3)


def task_kind(key: str, splits: int, symmetric: bool) -> tuple[str, str]:
    """The kind of a task from its result's key (``outofcore.planner.plan`` names the keys): a
    label, and the kind of :attr:`outofcore.planner.plan.Plan.projections` it is held to."""
    if "-k" in key:
        return "split part", "part"
    if splits > 1:
        return "reduction", "reduction"
    if symmetric:
        _, i, j, *_ = key.split("-")
        return ("gram diagonal" if i == j else "gram off-diagonal"), "tile"
    return "tile", "tile"


def measure(case: Case, data: Path) -> dict[str, Any]:
    """Run ``case`` in this process (a fresh one); return its kinds' figures."""
    import psutil  # noqa: PLC0415

    from outofcore.api import run_job  # noqa: PLC0415
    from outofcore.compute import peaks  # noqa: PLC0415
    from outofcore.frontends.verify import verify  # noqa: PLC0415

    server = None
    options: dict[str, Any] = {}
    root = str(data)
    if case.s3:
        from benchmarks.s3_local import MotoServer  # noqa: PLC0415

        server = MotoServer()
        options = {"storage_options": server.options}
        root = server.bucket("task-memory")
    try:
        a, b, job_options = job_operands(case, write_operands(case, root, options), options)
        warm_up(data / "warm")
        gc.collect()
        baseline = psutil.Process().memory_info().rss
        started = time.perf_counter()
        result = run_job(
            a, b, f"{root}/c.zarr", client="sync", progress=False, memory=case.memory,
            **job_options,
        )  # fmt: skip
        seconds = time.perf_counter() - started
        report = verify(
            a, b, result.output, seed=1, transpose_a=job_options.get("transpose_a", False),
            beta=case.options.get("beta", 0.0), addend=job_options.get("addend"), **options,
        )  # fmt: skip
    finally:
        if server is not None:
            server.stop()
    plan = result.plan
    return {
        "what": case.what,
        "shape": [plan.problem.m, plan.problem.k, plan.problem.n],
        "budget": case.memory,
        "tile": [plan.tm, plan.tn],
        "tk": plan.tk,
        "splits": plan.splits,
        "io_concurrency": plan.io_concurrency,
        "baseline_rss": baseline,
        "peaks_resettable": peaks.resettable(),
        "seconds": seconds,
        "verified": bool(report.passed),
        "kinds": kinds_measured(result, baseline),
    }


def write_operands(case: Case, root: str, options: dict[str, Any]) -> dict[str, str]:
    """Write ``case``'s operands under ``root`` (seeded by their order); each one's path."""
    from outofcore.frontends.generate import random_array  # noqa: PLC0415

    paths = {}
    for seed, operand in enumerate(case.operands):
        paths[operand.name] = f"{root}/{operand.name}.zarr"
        if operand.shards:
            sharded_random(paths[operand.name], operand, seed)
            continue
        random_array(
            paths[operand.name], operand.shape, operand.chunks, operand.dtype, seed=seed,
            overwrite=True, **options,
        )  # fmt: skip
    return paths


def job_operands(
    case: Case, paths: dict[str, str], options: dict[str, Any]
) -> tuple[Any, Any, dict[str, Any]]:
    """The job's A and B (``x`` for both where the case has one; a centred ``x`` as dask's
    expression) and its options (the addend ``d`` among them)."""
    a = paths.get("a", paths.get("x"))
    b = paths.get("b", paths.get("x"))
    job_options = {**case.options, **options}
    if job_options.pop("centered", False):  # an operand that computes: dask's expression
        import dask.array as da  # noqa: PLC0415

        x = da.from_zarr(a)
        b = x - x.mean(axis=0)
        a = b.T
    if "d" in paths:
        job_options["addend"] = paths["d"]
    return a, b, job_options


def warm_up(folder: Path) -> None:
    """A small job in ``folder``: imports, first-use set-up and BLAS's buffers, so the
    baseline holds them."""
    import numpy as np  # noqa: PLC0415

    from outofcore.api import run_job  # noqa: PLC0415
    from outofcore.frontends.generate import random_array  # noqa: PLC0415

    rng = np.random.default_rng(0)
    for name in ("wa", "wb"):
        random_array(folder / f"{name}.zarr", (64, 64), (32, 32), seed=int(rng.integers(9)))
    run_job(folder / "wa.zarr", folder / "wb.zarr", folder / "wc.zarr", client="sync",
            progress=False)  # fmt: skip


def kinds_measured(result: Any, baseline: int) -> dict[str, dict[str, Any]]:
    """Each kind of task's count, projection and largest peak RSS over ``baseline``."""
    plan = result.plan
    kinds: dict[str, dict[str, Any]] = {}
    for task in result.results:
        kind, held_to = task_kind(task.key, plan.splits, plan.problem.symmetric)
        entry = kinds.setdefault(
            kind, {"tasks": 0, "projected": plan.projections[held_to], "measured": 0}
        )
        entry["tasks"] += 1
        entry["measured"] = max(entry["measured"], task.peak_rss_bytes - baseline)
    return kinds


def sharded_random(path: str, operand: Operand, seed: int) -> None:
    """Write ``operand`` as a sharded zarr v3 array of random values, a shard at a time."""
    import numpy as np  # noqa: PLC0415
    import zarr  # noqa: PLC0415

    codec = {"zstd": zarr.codecs.ZstdCodec(), "blosc": zarr.codecs.BloscCodec()}[operand.codec]
    array = zarr.create_array(
        path, shape=operand.shape, chunks=operand.chunks, shards=operand.shards,
        dtype=operand.dtype, compressors=codec, overwrite=True,
    )  # fmt: skip
    rng = np.random.default_rng(seed)
    (rows, cols), (shard_rows, shard_cols) = operand.shape, operand.shards
    for r0 in range(0, rows, shard_rows):
        for c0 in range(0, cols, shard_cols):
            r1, c1 = min(r0 + shard_rows, rows), min(c0 + shard_cols, cols)
            block = rng.standard_normal((r1 - r0, c1 - c0), dtype=np.float32)
            array[r0:r1, c0:c1] = block.astype(operand.dtype, copy=False)


def run_case(name: str, scale: int, data: Path) -> dict[str, Any]:
    """Measure case ``name`` in a fresh Python process."""
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.task_memory",
            "--child",
            name,
            "--scale",
            str(scale),
            "--data-dir",
            str(data),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if process.returncode != 0:
        raise RuntimeError(f"case {name} failed ({process.returncode}):\n{process.stderr}")
    return json.loads(process.stdout.strip().splitlines()[-1])


def check(figures: dict[str, Any], allowance: int) -> list[str]:
    """What a case's figures break: a wrong output, a kind over projection + allowance."""
    problems = [] if figures["verified"] else ["the output failed verify"]
    for kind, entry in figures["kinds"].items():
        if entry["measured"] > entry["projected"] + allowance:
            problems.append(
                f"{kind}: {entry['measured']} bytes over the baseline, more than its "
                f"projection {entry['projected']} + the allowance {allowance}"
            )
    return problems


def memory_table(results: dict[str, dict[str, Any]]) -> str:
    """The closing note's table: case, kind, tasks, projected, measured, ratio."""
    columns = ("case", "kind", "tasks", "projected MiB", "peak RSS over baseline MiB")
    rows = [
        (
            name,
            kind,
            entry["tasks"],
            f"{entry['projected'] / MiB:.1f}",
            f"{entry['measured'] / MiB:.1f}",
            f"{entry['measured'] / entry['projected']:.2f}",
        )
        for name, figures in results.items()
        for kind, entry in figures["kinds"].items()
    ]
    return markdown_table((*columns, "measured / projected"), "llrrrr", rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--scale", type=int, default=1, help="divide dimensions by this")
    parser.add_argument("--data-dir", type=Path, default=None, help="inputs (default: a temp dir)")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.scale < 1:
        parser.error(f"--scale {args.scale}: need at least 1")
    if args.child:
        figures = measure(scaled(CASES[args.child], args.scale), args.data_dir)
        print(json.dumps(figures))
        return 0

    from outofcore.runtime.worker_sizing import WORKER_OVERHEAD_BYTES  # noqa: PLC0415

    data = args.data_dir or Path(tempfile.mkdtemp(prefix="task-memory-"))
    results, problems = {}, []
    try:
        for name in args.cases:
            case_dir = data / name
            case_dir.mkdir(parents=True, exist_ok=True)
            print(f"{name}: {CASES[name].what} (scale 1/{args.scale}) ...", flush=True)
            results[name] = run_case(name, args.scale, case_dir)
            problems += [f"{name}: {p}" for p in check(results[name], WORKER_OVERHEAD_BYTES)]
            shutil.rmtree(case_dir, ignore_errors=True)
    finally:
        if args.data_dir is None:
            shutil.rmtree(data, ignore_errors=True)
    print(memory_table(results))
    print(f"allowance beside the task: {WORKER_OVERHEAD_BYTES / MiB:.0f} MiB")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.date.today().isoformat()
    suffix = f"-scale{args.scale}" if args.scale > 1 else ""
    out = args.out_dir / f"task-memory-{stamp}{suffix}.json"
    out.write_text(json.dumps({"scale": args.scale, "cases": results}, indent=1))
    print(f"wrote {out}")
    for problem in problems:
        print(f"FAILED {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""Larger than RAM, for real: a job inside a memory cgroup smaller than its inputs.

Every process of a run (the ``outofcore matmul`` client, the LocalCluster's
scheduler, nanny and worker) is started inside one cgroup v1 memory group
capped at ``--cap`` (:mod:`cgroup`: ``memory.limit_in_bytes``, and
``memory.memsw.limit_in_bytes`` where present, so swap cannot hide an overrun).
By default A and B are 16384² float32 (1 GiB each, zstd, 2048² chunks, cached
in ``--data-dir``), C is 1 GiB, and the cap is 1.5 GiB: smaller than A and B
together.  In order:

1. **refusal**: ``outofcore matmul ... --memory CAP`` in the group: the plan
   must refuse it before any work (exit status 2, the message naming the cap,
   no output created);
2. **outofcore**: ``outofcore matmul A B -o C --json`` in the group, with no
   ``--memory`` (the default budget is chosen within the cap), timed as a
   whole command; then ``outofcore verify`` outside the group;
3. **dask.array**: ``da.from_zarr(A) @ da.from_zarr(B)`` ``.to_zarr(C2)`` on
   Dask's threaded scheduler in a fresh group with the same cap, killed after
   ``--dask-timeout`` seconds;
4. **numpy**: ``A @ B`` in memory, outside the cap (loading untimed).

For each capped run: exit status, wall time, the group's peak
(``memory.max_usage_in_bytes``, page cache included), the sampled peak of its
anonymous memory, how often the limit was hit (``memory.failcnt``) and the OOM
kills (``memory.oom_control``).  A killed worker shows as an OOM kill even when
its nanny restarts it and the job finishes.  The inputs are in the machine's
page cache from their generation (or an earlier run): pages charged to
another group are not charged again, so the cap bounds what the processes
allocate, not the cache of inputs.  JSON goes to ``--out-dir``.

Usage (root, cgroup v1)::

    python -m benchmarks.capped                              # 16384², cap 1.5 GiB
    python -m benchmarks.capped --size 1024 --chunk 256 --cap 1GiB   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness.cgroup import MemoryGroup, unavailable
from benchmarks.harness.inputs import add_folder_arguments, ensure_inputs, stored_bytes
from benchmarks.harness.processes import ROOT
from benchmarks.harness.reports import text_row

DASK_SCRIPT = """
import json, sys, time
import dask, dask.array as da
a, b, c = sys.argv[1:4]
started = time.perf_counter()
with dask.config.set(scheduler="threads"):
    (da.from_zarr(a) @ da.from_zarr(b)).to_zarr(c, overwrite=True)
print(json.dumps({"seconds": time.perf_counter() - started}))
"""

NUMPY_SCRIPT = """
import json, sys, time
import zarr
a, b = (zarr.open_array(p, mode="r")[...] for p in sys.argv[1:3])
started = time.perf_counter()
c = a @ b
print(json.dumps({"seconds": time.perf_counter() - started, "shape": list(c.shape)}))
"""


#: The outofcore command, run from this checkout.
CLI = (sys.executable, "-m", "outofcore.cli")
#: What the report keeps of the job's ``--json`` summary.
SUMMARY_KEYS = (
    "seconds",
    "tile",
    "tk",
    "tiles",
    "task_budget_bytes",
    "task_bytes_projected",
    "peak_worker_bytes",
    "bytes_read",
    "gflops",
)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the capped benchmark; return (and write) its report.

    Raises
    ------
    RuntimeError
        When no capped cgroup can be made here (not root, no cgroup v1 memory).
    """
    args = _parser().parse_args(argv)
    why = unavailable()
    if why:
        raise RuntimeError(f"benchmarks/capped.py needs a writable cgroup v1 memory group: {why}")
    from outofcore.config import parse_size  # noqa: PLC0415

    cap = parse_size(args.cap)
    a, b = ensure_inputs(args.data_dir, args.size, args.chunk)
    scratch = args.data_dir / f"capped-{os.getpid()}"
    scratch.mkdir(parents=True)
    try:
        report = _run(args, cap, a, b, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / f"capped-{args.size}.json"
    path.write_text(json.dumps(report, indent=2))
    print(capped_table(report))
    print(f"wrote {path}")
    return report


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=16384, help="m = k = n (16384)")
    parser.add_argument("--chunk", type=int, default=2048, help="input chunks (2048)")
    parser.add_argument("--cap", default="1.5GiB", help="memory cap of the group (1.5GiB)")
    parser.add_argument(
        "--memory", help="outofcore's --memory (default: none, the budget it picks under the cap)"
    )
    parser.add_argument("--timeout", type=float, default=1800, help="outofcore's limit, s")
    parser.add_argument("--dask-timeout", type=float, default=900, help="dask.array's limit, s")
    add_folder_arguments(parser)
    return parser


def _run(args: argparse.Namespace, cap: int, a: Path, b: Path, scratch: Path) -> dict[str, Any]:
    """Every run of the report, each in a group of its own capped at ``cap`` (numpy's
    uncapped): the refusal, outofcore's job, dask.array's, numpy's; then the ratios."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this tree's outofcore, in every child
    report: dict[str, Any] = {
        "inputs": {
            "shape": [args.size, args.size],
            "chunks": [args.chunk, args.chunk],
            "dtype": "float32",
            "bytes_each": 4 * args.size**2,
            "stored_bytes": {x.name: stored_bytes(x) for x in (a, b)},
        },
        "cap_bytes": cap,
        "refusal": _refusal(cap, (a, b), scratch / "refused.zarr", env),
        "outofcore": _outofcore_job(args, cap, (a, b), scratch / "c.zarr", env),
        "dask_array": _dask_array(args, cap, (a, b), scratch / "c-dask.zarr", env),
    }
    numpy = subprocess.run(
        [sys.executable, "-c", NUMPY_SCRIPT, str(a), str(b)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    report["numpy"] = {"seconds": json.loads(numpy.stdout)["seconds"], "capped": False}
    _add_ratios(report)
    return report


def _refusal(cap: int, inputs: tuple[Path, Path], out: Path, env: dict[str, str]) -> dict:
    """outofcore asked for ``--memory`` the whole cap: its refusal, and whether it made ``out``."""
    a, b = inputs
    with MemoryGroup(cap) as group:
        run = group.run(
            [*CLI, "matmul", str(a), str(b), "-o", str(out), "--memory", str(cap)],
            timeout=300,
            env=env,
        )
        return {
            **_brief(run),
            "message": run["stderr"].strip(),
            "output_created": out.exists(),
            "limit_file": str(group.limit_file),
        }


def _outofcore_job(
    args: argparse.Namespace, cap: int, inputs: tuple[Path, Path], out: Path, env: dict[str, str]
) -> dict[str, Any]:
    """outofcore's job under the cap: its run, its summary and its verdict (``out`` removed)."""
    a, b = inputs
    memory = ["--memory", args.memory] if args.memory else []
    with MemoryGroup(cap) as group:
        run = group.run(
            [*CLI, "matmul", str(a), str(b), "-o", str(out), "--json", *memory],
            timeout=args.timeout,
            env=env,
        )
    ours = _brief(run)
    if run["returncode"] == 0:
        summary = json.loads(run["stdout"])
        ours["summary"] = {key: summary[key] for key in SUMMARY_KEYS}
        check = subprocess.run(
            [*CLI, "verify", str(a), str(b), str(out), "--json"],
            capture_output=True,
            text=True,
            env=env,
        )
        ours["verify_returncode"] = check.returncode
        ours["verified"] = check.returncode == 0 and json.loads(check.stdout)["passed"]
    else:
        ours["stderr_tail"] = run["stderr"][-3000:]
        ours["verified"] = False
    shutil.rmtree(out, ignore_errors=True)
    return ours


def _dask_array(
    args: argparse.Namespace, cap: int, inputs: tuple[Path, Path], out: Path, env: dict[str, str]
) -> dict[str, Any]:
    """dask.array's product under the cap: its run and outcome (``out`` removed)."""
    a, b = inputs
    with MemoryGroup(cap) as group:
        run = group.run(
            [sys.executable, "-c", DASK_SCRIPT, str(a), str(b), str(out)],
            timeout=args.dask_timeout,
            env=env,
        )
    found = {**_brief(run), "outcome": _outcome(run)}
    if run["returncode"] != 0 and not run["timed_out"]:
        found["stderr_tail"] = run["stderr"][-2000:]
    shutil.rmtree(out, ignore_errors=True)
    return found


def _add_ratios(report: dict[str, Any]) -> None:
    """Each capped run's seconds over numpy's (the job's tiles' too; dask's if it finished)."""
    numpy_seconds = report["numpy"]["seconds"]
    ours = report["outofcore"]
    ours["ratio_to_numpy"] = ours["seconds"] / numpy_seconds
    if "summary" in ours:
        ours["tiles_ratio_to_numpy"] = ours["summary"]["seconds"] / numpy_seconds
    if report["dask_array"]["outcome"] == "finished":
        report["dask_array"]["ratio_to_numpy"] = report["dask_array"]["seconds"] / numpy_seconds


def _brief(run: dict[str, Any]) -> dict[str, Any]:
    """A capped run's figures without its output streams."""
    return {k: v for k, v in run.items() if k not in ("stdout", "stderr")}


def _outcome(run: dict[str, Any]) -> str:
    if run["timed_out"]:
        return "timed out"
    if run["returncode"] == 0:
        return "finished"
    if run["oom_kill"]:
        return "OOM-killed"
    return f"failed (exit status {run['returncode']})"


#: The table's columns: system, outcome, seconds, x numpy, group peak, anon peak, limit
#: hits, OOM kills.
COLUMNS = ("<12", "<12", ">9", ">8", ">11", ">10", ">10", ">9")


def capped_table(report: dict[str, Any]) -> str:
    """The report as a table: one row per system, then the refusal."""

    def gib(value: int | None) -> str:
        return "-" if value is None else f"{value / 2**30:.2f} GiB"

    size = report["inputs"]["shape"][0]
    heading = ("system", "outcome", "seconds", "x numpy", "group peak", "anon peak")
    lines = [
        f"{size}x{size} float32 A, B ({gib(report['inputs']['bytes_each'])} each), "
        f"cap {gib(report['cap_bytes'])}",
        text_row((*heading, "limit hits", "OOM kills"), COLUMNS),
    ]
    ours, dask_run = report["outofcore"], report["dask_array"]
    rows = [
        ("outofcore", "verified" if ours["verified"] else "FAILED", ours),
        ("dask.array", dask_run["outcome"], dask_run),
    ]
    for name, outcome, run in rows:
        ratio = run.get("ratio_to_numpy")
        peaks = (gib(run["max_usage_bytes"]), gib(run["sampled_peak_rss_bytes"]))
        ratio_text = "-" if ratio is None else f"{ratio:.2f}"
        cells = (name, outcome, f"{run['seconds']:.1f}", ratio_text, *peaks)
        lines.append(text_row((*cells, run["failcnt"], run["oom_kill"]), COLUMNS))
    numpy_seconds = f"{report['numpy']['seconds']:.1f}"
    lines.append(text_row(("numpy", "uncapped", numpy_seconds, "1.00"), COLUMNS))
    refusal = report["refusal"]
    lines.append(
        f"refusal (--memory {gib(report['cap_bytes'])}): exit status {refusal['returncode']}, "
        f"output created: {refusal['output_created']}: {refusal['message']}"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()

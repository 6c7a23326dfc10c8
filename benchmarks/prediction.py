"""``outofcore plan``'s predicted time on this machine against the job's measured time.

For each case (the demo's job: 4096² float32 in 512² chunks with 40 MiB per
worker; 8192² float32 in 2048² chunks with the default budget) the inputs are
written once, then ``--repeats`` times, back to back: ``outofcore plan
--reprobe --json`` (the probe measures this machine now, :mod:`outofcore.machine.probe`)
and ``outofcore matmul --json`` on a LocalCluster, whose summary's ``seconds``
(the tasks' time, without the cluster's start) is the measured time.  Each pair
is printed with its ratio; on a machine others use, the load moves both.

    python -m benchmarks.prediction [--repeats 3] [--cases demo,8192] [--dir DIR] [--cached]
    python -m benchmarks.prediction --scale 16 --repeats 1     # every size 16x smaller

Internals: the demo's sizes come from ``outofcore.frontends.cli_parser``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from outofcore.frontends.cli_parser import DEMO_CHUNK, DEMO_MEMORY, DEMO_SIZE


@dataclass(frozen=True)
class Case:
    name: str
    size: int
    chunk: int
    #: ``--memory`` of the job (None: the job's default budget).
    memory: str | None


CASES = {
    "demo": Case("demo", DEMO_SIZE, DEMO_CHUNK, DEMO_MEMORY),
    "8192": Case("8192", 8192, 2048, None),
}
CLI = [sys.executable, "-m", "outofcore.cli"]
STREAMS = ("compute", "decode", "disk", "write", "scratch", "cores", "fill", "start")


def run(*args: str) -> dict:
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"outofcore {' '.join(args)} failed:\n{done.stderr}")
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> list[dict]:
    """Run the pairs; print them and return them (``--json`` also writes them)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default="demo,8192", help="comma-separated: demo, 8192")
    parser.add_argument("--dir", type=Path, help="where the arrays go (default: a temporary dir)")
    parser.add_argument(
        "--scale", type=int, default=1, help="divide every size and chunk by this (a quick run)"
    )
    parser.add_argument(
        "--cached", action="store_true", help="predict from the cached figures (no --reprobe)"
    )
    parser.add_argument("--json", type=Path, help="also write every pair to this file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="outofcore-prediction-") as scratch:
        folder = args.dir or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        pairs = []
        for name in args.cases.split(","):
            case = CASES[name]
            pairs += measure(case, folder, args)
    print()
    print(f"{'case':<6} {'round':>5} {'predicted s':>12} {'measured s':>11} {'ratio':>7}  probe")
    for p in pairs:
        print(
            f"{p['case']:<6} {p['round']:>5} {p['predicted']:>12.2f} {p['measured']:>11.2f} "
            f"{p['ratio']:>7.2f}  {p['probe']}"
        )
    worst = max(max(p["ratio"], 1 / p["ratio"]) for p in pairs)
    print(f"worst ratio (either way): {worst:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(pairs, indent=2) + "\n")
    return pairs


def measure(case: Case, folder: Path, args: argparse.Namespace) -> list[dict]:
    """Write the case's inputs, then predict and run it ``args.repeats`` times."""
    size, chunk = max(1, case.size // args.scale), max(1, case.chunk // args.scale)
    paths = {x: str(folder / f"{case.name}-{x}.zarr") for x in ("a", "b", "c")}
    for seed, x in enumerate(("a", "b")):
        shape, chunks = f"{size},{size}", f"{chunk},{chunk}"
        done = subprocess.run(
            [*CLI, "random", paths[x], "--shape", shape, "--chunks", chunks]
            + ["--seed", str(seed + 1), "--overwrite"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(done.stderr)
    memory = ["--memory", case.memory] if case.memory else []
    if case.memory and args.scale > 1:
        memory = []  # a budget for full-size chunks; the default fits the smaller ones
    pairs = []
    for round_ in range(1, args.repeats + 1):
        started = time.perf_counter()
        reprobe = [] if args.cached else ["--reprobe"]
        plan = run("plan", paths["a"], paths["b"], *memory, *reprobe, "--json")
        planned = time.perf_counter() - started
        local = next(p for p in plan["predicted"] if p["basis"] == "measured")
        out = ["-o", paths["c"], "--overwrite", "--json"]
        job = run("matmul", paths["a"], paths["b"], *out, *memory)
        figures = plan["machine"]["figures"]
        pair = {
            "case": f"{case.name}" if args.scale == 1 else f"{case.name}/{args.scale}",
            "round": round_,
            "predicted": local["seconds"],
            "measured": job["seconds"],
            "ratio": job["seconds"] / local["seconds"],
            "plan_seconds": planned,
            "bottleneck": local["bottleneck"],
            "streams": {k: local[k] for k in STREAMS},
            "job": {
                k: job[k]
                for k in ("tiles", "tile", "tk", "gflops", "compute_seconds", "read_wait_seconds")
            },
            "figures": figures,
            "probe": (
                f"sgemm {figures['sgemm_flops'] / 1e9:.1f} GFLOP/s, zstd decode "
                f"{figures['zstd_decode_bps'] / 1e6:.0f} MB/s, load {figures['load']}"
            ),
        }
        print(
            f"{pair['case']} round {round_}: predicted {pair['predicted']:.2f} s, measured "
            f"{pair['measured']:.2f} s (x{pair['ratio']:.2f}; {pair['probe']}; job "
            f"{job['gflops']:.1f} GFLOP/s)",
            flush=True,
        )
        pairs.append(pair)
    return pairs


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()

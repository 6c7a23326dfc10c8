"""Product races: zarr inputs, a numpy reference, then rounds of every system, each fresh.

Processes are :mod:`benchmarks.harness.processes`'s.

Product races (``benchmarks.matvec``, ``benchmarks.matmul_stack``): :func:`race` writes seeded
float32 zarr inputs (zstd chunks), runs an untimed numpy reference first (which
also reads every input, so the page cache is warm for everyone alike: dropping it
needs root), then ``--repeat`` rounds of every system, each in a fresh process (every
other round in the reverse order, the page cache's dirty pages written before each):

* ``numpy``: a Python that reads A and B with zarr (``zarr.open_array(p)[...]``),
  computes ``A @ B`` and writes C (uncompressed, as outofcore writes it);
* ``dask``: ``(da.from_zarr(A) @ da.from_zarr(B)).compute()`` with the threaded
  scheduler, then C written as numpy's;
* ``dask-cluster``: the same on a ``LocalCluster`` with Dask's defaults (no
  dashboard), its start-up included;
* ``outofcore``: the command ``outofcore matmul A B -o C --json``.

The time of each is its process's whole wall time (interpreter start and imports
included, as a command-line user waits for it); numpy's and dask's are also given
without their write of C (their "job": read both, multiply).  Every output is
compared with the reference (float32 tolerance of depth ``k``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness.checking import compare_outputs
from benchmarks.harness.children import (
    SYSTEMS,
    compile_outofcore,
    outofcore_command,
    outofcore_json,
)
from benchmarks.harness.inputs import DEFAULT_DATA, Operand, stored_bytes, write_operand
from benchmarks.harness.processes import timed
from benchmarks.harness.reports import format_bytes

#: The module a race runs, in a fresh process from the checkout root, for one baseline.
CHILD = "benchmarks.harness.children"


@dataclass
class Race:
    """A product ``A @ B`` of two seeded operands, and what outofcore should reach."""

    name: str
    title: str
    a: Operand
    b: Operand
    k: int
    out_chunks: tuple[int, ...]
    #: Largest ``outofcore / system`` ratio of wall times passing, per system (and
    #: ``numpy-job``: numpy without its write of C).
    targets: dict[str, float]
    #: The rate column: its heading and the work of one product in its unit
    #: (e.g. ``("GFLOP/s", 2mnk / 1e9)``).
    rate: tuple[str, float]
    systems: list[str] = field(default_factory=lambda: list(SYSTEMS))


def add_common_arguments(parser: argparse.ArgumentParser, repeat: int) -> None:
    parser.add_argument("--repeat", type=int, help=f"rounds (default {repeat}; 1 with --quick)")
    parser.set_defaults(default_repeat=repeat)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"comma-separated, of {','.join(SYSTEMS)} (default: all)",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        help="folder for the inputs (kept there and reused) and scratch outputs (removed); "
        "default: a temporary folder under benchmarks/data, removed at the end",
    )
    parser.add_argument(
        "--outofcore-args",
        default="",
        help="more options for the outofcore command, e.g. '--workers 2 --memory 2GiB'",
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    parser.add_argument("--json", type=Path, help="write the results here")


@dataclass(frozen=True)
class Size:
    """One size option of a race case: its help, its default and its ``--quick`` default.

    None leaves the value to the case's spec (``--vector-chunk``: ``--chunk``'s).
    """

    help: str
    full: int | None = None
    quick: int | None = None


def race_main(
    argv: list[str] | None,
    description: str,
    repeat: int,
    sizes: dict[str, Size],
    make_spec: Callable[..., Race],
) -> int:
    """A race case's command: its size options and the common ones parsed, the race run.

    Parameters
    ----------
    argv, description
        The command line (None: ``sys.argv``) and the parser's description.
    repeat
        The rounds without ``--repeat`` (1 with ``--quick``).
    sizes
        Each size option (``"--vector-chunk"``) and its :class:`Size`.
    make_spec
        The race, from each size as a keyword (``vector_chunk=...``).

    Returns
    -------
    int
        :func:`race`'s exit status.
    """
    parser = argparse.ArgumentParser(description=description)
    for option, size in sizes.items():
        parser.add_argument(option, type=int, help=size.help)
    add_common_arguments(parser, repeat=repeat)
    args = parser.parse_args(argv)
    values = {}
    for option, size in sizes.items():
        name = option.lstrip("-").replace("-", "_")
        values[name] = getattr(args, name) or (size.quick if args.quick else None) or size.full
    return race(make_spec(**values), args)


def race(spec: Race, args: argparse.Namespace) -> int:
    """Run the race and print its table.  Returns 0: every system ran, every output
    verified and (full size, outofcore among the systems) every target met; 1: a
    system failed (outofcore refusing included) or a result was wrong; 2: a target
    missed."""
    if args.repeat is None:
        args.repeat = 1 if args.quick else args.default_repeat
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        print(f"unknown system(s) {unknown}; known: {', '.join(SYSTEMS)}", file=sys.stderr)
        return 1
    made_base = args.dir is None
    if made_base:
        DEFAULT_DATA.mkdir(parents=True, exist_ok=True)
        base = Path(tempfile.mkdtemp(prefix=f"{spec.name}-", dir=DEFAULT_DATA))
    else:
        base = args.dir.resolve()
        base.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{spec.name}-runs-", dir=base))
    try:
        return _race(spec, args, systems, base, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if made_base:
            shutil.rmtree(base, ignore_errors=True)


def _run(
    system: str, spec: Race, paths: tuple[Path, Path], out: Path, args: argparse.Namespace
) -> dict:
    a, b = map(str, paths)
    if system == "outofcore":
        extra = shlex.split(args.outofcore_args)
        command = [*outofcore_command(), "matmul", a, b, "-o", str(out), "--json", *extra]
    else:
        chunks = json.dumps(list(spec.out_chunks))
        command = [sys.executable, "-m", CHILD, system, a, b, str(out), chunks]
    run = timed(command, timeout=args.timeout)
    entry: dict[str, Any] = {
        "seconds": run.seconds,
        "peak_rss_bytes": run.peak_rss_bytes,
        "returncode": run.returncode,
    }
    printed = run.last_json() if system != "outofcore" else outofcore_json(run.stdout)
    if run.returncode != 0:
        entry["stderr_tail"] = run.stderr_tail()
        entry["command"] = command
        return entry
    if system == "outofcore":
        entry["summary"] = printed
        phases = (printed or {}).get("phases", {})
        entry["phases"] = phases
    else:
        entry["phases"] = printed["phases"]
        entry["seconds_without_write"] = run.seconds - printed["phases"]["write"]
    return entry


def _race(
    spec: Race, args: argparse.Namespace, systems: list[str], base: Path, scratch: Path
) -> int:
    paths = (base / spec.a.folder(), base / spec.b.folder())
    t = time.perf_counter()
    written = [write_operand(path, op) for path, op in zip(paths, (spec.a, spec.b), strict=True)]
    if any(written):
        print(f"wrote the inputs in {time.perf_counter() - t:.1f} s under {base}", flush=True)
    a_stored, b_stored = (stored_bytes(p) for p in paths)
    print(spec.title)
    print(
        f"  A {format_bytes(spec.a.nbytes)} ({format_bytes(a_stored)} stored), "
        f"B {format_bytes(spec.b.nbytes)} ({format_bytes(b_stored)} stored); "
        f"{os.cpu_count()} cores; {args.repeat} round(s), every run a fresh process"
    )
    compile_outofcore()  # as an install leaves them: no run compiles them again
    # The untimed reference run reads every input: the page cache is warm for all alike.
    reference = scratch / "reference.zarr"
    ref = _run("numpy", spec, paths, reference, args)
    if ref["returncode"] != 0:
        print(f"numpy reference failed:\n{ref['stderr_tail']}", file=sys.stderr)
        return 1
    print(
        "  page cache warm: an untimed numpy run read every input first "
        "(dropping the cache needs root); the same for every system"
    )
    runs: dict[str, list[dict]] = {s: [] for s in systems}
    failed: dict[str, dict] = {}
    for round_ in range(args.repeat):
        # Every other round in the reverse order; before each run the dirty pages of the
        # last (numpy's C, written through the page cache) go to disk, untimed, rather
        # than in the background of the next system's run.
        for system in systems if round_ % 2 == 0 else systems[::-1]:
            if system in failed:
                continue
            out = scratch / f"{system}-{round_}.zarr"
            os.sync()
            entry = _run(system, spec, paths, out, args)
            if entry["returncode"] != 0:
                failed[system] = entry
                print(
                    f"  {system}: refused/failed (exit {entry['returncode']}, "
                    f"{entry['seconds']:.1f} s): {' '.join(map(str, entry['command']))}\n"
                    "  its stderr ends:\n    " + entry["stderr_tail"].replace("\n", "\n    "),
                    flush=True,
                )
            else:
                entry["check"] = compare_outputs(out, reference, spec.k)
                runs[system].append(entry)
            shutil.rmtree(out, ignore_errors=True)
    report = summarize(spec, args, systems, runs, failed, (a_stored, b_stored))
    print_table(spec, report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
        print(f"  wrote {args.json}")
    return report["status"]


def summarize(
    spec: Race,
    args: argparse.Namespace,
    systems: list[str],
    runs: dict[str, list[dict]],
    failed: dict[str, dict],
    stored: tuple[int, int],
) -> dict:
    medians: dict[str, dict] = {}
    for system in systems:
        ok = runs[system]
        if system in failed or not ok:
            continue
        figures = {
            "seconds": statistics.median(r["seconds"] for r in ok),
            "peak_rss_bytes": max(r["peak_rss_bytes"] for r in ok),
            "phases": {
                name: statistics.median(r["phases"][name] for r in ok)
                for name in ok[0]["phases"]
                if isinstance(ok[0]["phases"][name], (int, float))
                and all(name in r["phases"] for r in ok)
            },
        }
        if "seconds_without_write" in ok[0]:
            figures["seconds_without_write"] = statistics.median(
                r["seconds_without_write"] for r in ok
            )
        medians[system] = figures
    wrong = sorted({s for s in systems for r in runs[s] if not r["check"]["ok"]})
    ratios: dict[str, float] = {}
    if "outofcore" in medians:
        ours = medians["outofcore"]["seconds"]
        for system, figures in medians.items():
            if system == "outofcore":
                continue
            ratios[system] = ours / figures["seconds"]
            if "seconds_without_write" in figures:
                ratios[f"{system}-job"] = ours / figures["seconds_without_write"]
    targets = {
        name: {"at_most": limit, "ratio": ratios.get(name), "met": _met(ratios.get(name), limit)}
        for name, limit in spec.targets.items()
        if name.removesuffix("-job") in systems and "outofcore" in systems
    }
    missed = [name for name, t in targets.items() if not t["met"]]
    if failed or wrong:
        status = 1
    elif missed and not args.quick:
        status = 2
    else:
        status = 0
    return {
        "benchmark": spec.name,
        "title": spec.title,
        "a": {"shape": spec.a.shape, "chunks": spec.a.chunks, "stored_bytes": stored[0]},
        "b": {"shape": spec.b.shape, "chunks": spec.b.chunks, "stored_bytes": stored[1]},
        "k": spec.k,
        "rate": {"unit": spec.rate[0], "work": spec.rate[1]},
        "quick": args.quick,
        "repeat": args.repeat,
        "cores": os.cpu_count(),
        "page_cache": "warm (an untimed numpy reference run read every input first)",
        "outofcore_args": args.outofcore_args,
        "runs": runs,
        "failed": failed,
        "medians": medians,
        "ratios_outofcore_over": ratios,
        "targets": targets,
        "wrong": wrong,
        "status": status,
    }


def _met(ratio: float | None, limit: float) -> bool:
    return ratio is not None and ratio <= limit


def print_table(spec: Race, report: dict) -> None:
    medians = report["medians"]
    print(
        f"  {'system':<13}{'wall s':>8}{'no write':>10}{'peak RSS':>12}"
        f"{spec.rate[0]:>10}  {'outofcore/this':>14}  check (max |err|, err/tol)"
    )
    ratios = report["ratios_outofcore_over"]
    for system in report["runs"]:
        if system in report["failed"]:
            entry = report["failed"][system]
            print(f"  {system:<13}refused/failed (exit {entry['returncode']})")
            continue
        figures = medians.get(system)
        if figures is None:
            continue
        no_write = figures.get("seconds_without_write")
        ratio = ratios.get(system)
        job = ratios.get(f"{system}-job")
        ratio_text = "" if ratio is None else f"{ratio:.2f}x"
        if job is not None:
            ratio_text += f" ({job:.2f}x)"
        checks = [r["check"] for r in report["runs"][system]]
        worst = max(checks, key=lambda c: c.get("error_ratio", math.inf))
        bad = [c for c in checks if not c["ok"]]
        if not bad:
            check = f"ok ({worst['max_abs_error']:.2e}, {worst['error_ratio']:.3f})"
        else:
            check = f"WRONG in {len(bad)} of {len(checks)} run(s): " + (
                bad[0].get("error")
                or f"max |err| {bad[0]['max_abs_error']:.3g}, err/tol {bad[0]['error_ratio']:.3g}"
            )
        print(
            f"  {system:<13}{figures['seconds']:8.2f}"
            + (f"{no_write:10.2f}" if no_write is not None else f"{'':>10}")
            + f"{format_bytes(figures['peak_rss_bytes']):>12}"
            + f"{spec.rate[1] / figures['seconds']:10.2f}  {ratio_text:>14}  {check}"
        )
    phase_lines = [
        f"    {system}: "
        + ", ".join(
            f"{name} {value:.2f}" for name, value in figures["phases"].items() if name != "workers"
        )
        for system, figures in medians.items()
        if figures["phases"]
    ]
    if phase_lines:
        print("  median phases (s, inside the process):")
        print("\n".join(phase_lines))
    print(
        "  wall: the whole process (interpreter start, imports, reading, multiplying, "
        "writing C); 'no write': without numpy's or dask's write of C"
    )
    for name, target in report["targets"].items():
        against = name.removesuffix("-job") + (
            " without its write" if name.endswith("-job") else ""
        )
        ratio = target["ratio"]
        verdict = "met" if target["met"] else ("no figure" if ratio is None else "MISSED")
        shown = "n/a" if ratio is None else f"{ratio:.2f}x"
        print(f"  target outofcore <= {target['at_most']}x {against}: {shown}, {verdict}")
    if report["quick"] and report["targets"]:
        print("  (--quick: sizes too small for the targets; they do not set the exit status)")
    if "outofcore" in report["failed"]:
        tail = report["failed"]["outofcore"]["stderr_tail"].splitlines()
        print(f"  outofcore: refused/failed: {tail[-1] if tail else '(no stderr)'}")
    if report["wrong"]:
        print(f"  WRONG results from: {', '.join(report['wrong'])}")

"""How long planning a Gram ``X.T @ X`` takes as X gets longer: the plan must not list chunks.

Issue 28, item 5: planning a 10^10-row Gram took 67-88 s and 10^12 rows ran past
300 s, because every candidate tile listed its k-panels one by one.  For X of
``rows`` x 64 float64 in 100000x64 chunks (10^3 to 10^7 chunks) this times, in this
process:

* ``plan``: :func:`outofcore.planner.tiling.make_output_plan` with the default 1 GiB budget;
* ``summary``: the plan's summary (bytes read, flops, ...) and the what-if predictions
  (:func:`outofcore.planner.model.what_ifs`, one plan per assumed machine): what
  ``outofcore plan`` prints;
* ``command``: ``outofcore plan X X --transpose-a --scheduler sync`` on a zarr array of
  that shape with no chunk written (metadata only), as a fresh process, imports
  included (``--no-command`` skips it).

Usage::

    python -m benchmarks.plan_cost                       # 10^8, 10^10, 10^12 rows
    python -m benchmarks.plan_cost --rows 1e10 --no-command
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness.processes import ROOT

COLUMNS = 64
CHUNK_ROWS = 100_000


def time_case(rows: int, command: bool, folder: Path) -> dict:
    """Seconds to plan, summarise and (optionally) run ``outofcore plan`` for ``rows``."""
    from outofcore.planner import model  # noqa: PLC0415
    from outofcore.planner.problem import Problem  # noqa: PLC0415
    from outofcore.planner.tiling import make_output_plan  # noqa: PLC0415

    problem = Problem(
        m=COLUMNS,
        k=rows,
        n=COLUMNS,
        itemsize=8,
        a_chunks=(COLUMNS, CHUNK_ROWS),
        b_chunks=(CHUNK_ROWS, COLUMNS),
        symmetric=True,
    )
    start = time.perf_counter()
    plan = make_output_plan(problem, 2**30)
    planned = time.perf_counter()
    plan.summary()
    model.what_ifs(plan)
    summarised = time.perf_counter()
    result = {
        "rows": rows,
        "chunks": -(-rows // CHUNK_ROWS),
        "panels": len(plan.panels),
        "plan_s": planned - start,
        "summary_s": summarised - planned,
    }
    if command:
        import zarr  # noqa: PLC0415

        path = folder / f"x-{rows}.zarr"
        zarr.create_array(
            str(path), shape=(rows, COLUMNS), chunks=(CHUNK_ROWS, COLUMNS), dtype="float64"
        )
        argv = [sys.executable, "-m", "outofcore.cli", "plan", str(path), str(path)]
        start = time.perf_counter()
        done = subprocess.run(
            [*argv, "--transpose-a", "--scheduler", "sync", "--json"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
        )
        result["command_s"] = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"outofcore plan failed for {rows} rows: {done.stderr.strip()}")
    return result


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rows", nargs="+", type=lambda v: int(float(v)), default=[10**8, 10**10, 10**12]
    )
    parser.add_argument("--no-command", action="store_true", help="skip `outofcore plan`")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for rows in args.rows:
            result = time_case(rows, not args.no_command, Path(folder))
            results.append(result)
            command = f", command {result['command_s']:.2f} s" if "command_s" in result else ""
            print(
                f"{rows:.0e} rows ({result['chunks']} chunks, {result['panels']} panels): "
                f"plan {result['plan_s'] * 1e3:.1f} ms, summary and what-ifs "
                f"{result['summary_s'] * 1e3:.1f} ms{command}",
                flush=True,
            )
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()

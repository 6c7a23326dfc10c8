"""The GPU check: one bounded, offline run on a lent GPU node, summarised as one JSON file.

Run it as the first and only device call of a session that has a GPU (``scripts/gpu-check``
installs the carried wheels first)::

    python -m tools.gpu_check --out "$OUT" --deadline 420

and without a GPU, as CI does, on numba's CUDA simulator at tiny sizes::

    python -m tools.gpu_check --dry-run --out /tmp/gpu-check

Each phase runs in a process of its own (``--phase NAME``) under its own timeout and
what is left of ``--deadline``; a phase that fails, hangs or crashes is recorded and the
next one runs.  After every phase the summary (``gpu-check.json``) is rewritten, so a
run cut short still leaves what it measured.  Phases, cheapest first:

``env``          driver, GPU, PCIe link, package versions, registers / local memory /
                 shared memory of each production kernel as compiled on this chip
``correctness``  the four dtypes at production tile sizes, ragged shapes, ``C``
                 pre-filled with NaN (overwrite) or values (accumulate), against cuBLAS
                 in float64 (complex128); two runs bit-identical
``big_c``        a float32 ``C`` of more than 2**32 elements (32-bit index overflow)
``kernel``       GFLOP/s of our kernel against cuBLAS per dtype (CUDA events), results
                 compared; the textbook kernel once
``bandwidth``    pinned and pageable host<->device copies
``engine``       one tile through the engine against its copies alone and its kernels
                 alone (overlap), resident and sub-tiled, and a transposed panel
``job``          ``outofcore random`` -> ``matmul --backend cuda --gpus 0`` (resident,
                 then a small ``--device-memory``) -> ``verify``
``cluster``      the GPU cluster ``--gpus 0`` starts, and its worker's resident memory
                 before and after the engine is made
``sanitizer``    compute-sanitizer memcheck, racecheck and synccheck on small launches
``pytest``       ``tests/cuda`` and the GPU cluster test, without the simulator

The exit status is 0 when every phase that ran passed, 1 otherwise.

This module is the runner (arguments, phase scheduling, deadlines, the summary); the
phases are in :mod:`tools.gpu_check.kernel_phases` (env to kernel),
:mod:`tools.gpu_check.engine_phases` (bandwidth to cluster) and
:mod:`tools.gpu_check.tool_phases` (sanitizer, pytest), their shared helpers in
:mod:`tools.gpu_check.common`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.gpu_check.common import REPO, CheckFailed
from tools.gpu_check.engine_phases import (
    phase_bandwidth,
    phase_cluster,
    phase_engine,
    phase_job,
)
from tools.gpu_check.kernel_phases import (
    phase_big_c,
    phase_correctness,
    phase_env,
    phase_kernel,
)
from tools.gpu_check.tool_phases import phase_pytest, phase_sanitizer, sanitizer_workload

SUMMARY = "gpu-check.json"
LOG = "gpu-check.log"


@dataclass(frozen=True)
class Phase:
    """One phase of the check: its name and timeouts (seconds) on a GPU and in a dry run."""

    name: str
    timeout: float
    dry_timeout: float


PHASES = (
    Phase("env", 60, 60),
    Phase("correctness", 90, 120),
    Phase("big_c", 60, 60),
    Phase("kernel", 75, 60),
    Phase("bandwidth", 25, 30),
    Phase("engine", 60, 90),
    Phase("job", 120, 120),
    Phase("cluster", 45, 60),
    Phase("sanitizer", 120, 60),
    Phase("pytest", 120, 10),
)


PHASE_FUNCTIONS: dict[str, Callable[..., dict]] = {
    "env": phase_env,
    "correctness": phase_correctness,
    "big_c": phase_big_c,
    "kernel": phase_kernel,
    "bandwidth": phase_bandwidth,
    "engine": phase_engine,
    "job": phase_job,
    "cluster": phase_cluster,
}


# -- the driver --------------------------------------------------------------------------------


def _run_phase_here(name: str, result_path: Path, deadline: float) -> int:
    """Run one phase in this process and write its result (or failure) to ``result_path``."""
    t0 = time.perf_counter()
    try:
        if name == "sanitizer_workload":
            sanitizer_workload()
            return 0
        if name == "sanitizer":
            data = phase_sanitizer(deadline)
        elif name == "pytest":
            data = phase_pytest(deadline)
        else:
            data = PHASE_FUNCTIONS[name]()
        status, code = "passed", 0
    except CheckFailed as exc:
        data, status, code = {**exc.data, "error": str(exc)}, "failed", 1
    except Exception as exc:  # a crash is a finding, reported with the rest
        import traceback  # noqa: PLC0415

        traceback.print_exc()  # into the log
        data = {
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc()[-3000:],
        }
        status, code = "error", 1
    data.update(status=status, s=round(time.perf_counter() - t0, 2))
    result_path.write_text(json.dumps(data, indent=1, default=str))
    return code


def run_check(out_dir: Path, phases: list[Phase], deadline_s: float, dry: bool) -> dict:
    """Run each phase in a subprocess under its timeout; return (and keep writing) the summary."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["NUMBA_ENABLE_CUDASIM"] = "1" if dry else "0"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    summary: dict[str, Any] = {
        "dry_run": dry,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "deadline_s": deadline_s,
        "phases": {},
    }
    end = time.monotonic() + deadline_s
    log = (out_dir / LOG).open("a")
    scratch = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    for phase in phases:
        left = end - time.monotonic()
        timeout = min(phase.dry_timeout if dry else phase.timeout, left)
        if left < 5:
            summary["phases"][phase.name] = {"status": "skipped", "why": "deadline reached"}
            print(f"{phase.name:12} skipped: the deadline is reached", flush=True)
            continue
        result_path = scratch / f"phase-{phase.name}.json"  # $OUT brings back 8 files at most
        result_path.unlink(missing_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "tools.gpu_check",
            "--phase",
            phase.name,
            "--result",
            str(result_path),
            "--phase-deadline",
            str(timeout),
        ]
        log.write(f"\n===== {phase.name} (timeout {timeout:.0f} s) =====\n")
        log.flush()
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True
            )
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
                proc.wait()
                raise
            if result_path.exists():
                data = json.loads(result_path.read_text())
            else:
                data = {"status": "error", "error": f"exited {proc.returncode} with no result"}
        except subprocess.TimeoutExpired:
            data = {"status": "timeout", "error": f"no result within {timeout:.0f} s"}
        data["wall_s"] = round(time.monotonic() - t0, 2)
        summary["phases"][phase.name] = data
        line = f"{phase.name:12} {data['status']:8} {data['wall_s']:7.1f} s"
        if "error" in data:
            line += f"  {str(data['error'])[:300]}"
        print(line, flush=True)
        (out_dir / SUMMARY).write_text(json.dumps(summary, indent=1, default=str))
    log.close()
    shutil.rmtree(scratch, ignore_errors=True)
    statuses = [p["status"] for p in summary["phases"].values()]
    summary["passed"] = all(s in ("passed", "skipped") for s in statuses)
    (out_dir / SUMMARY).write_text(json.dumps(summary, indent=1, default=str))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.gpu_check", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("OUT", "gpu-check-out")),
        help="folder for gpu-check.json and the log (default: $OUT)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="numba's CUDA simulator at tiny sizes (no GPU needed)",
    )
    parser.add_argument(
        "--deadline", type=float, default=420, help="seconds for the whole check (default 420)"
    )
    parser.add_argument(
        "--only", nargs="+", choices=[p.name for p in PHASES], help="run these phases alone"
    )
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--phase-deadline", type=float, default=60, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        result = args.result or Path(os.devnull)
        return _run_phase_here(args.phase, result, time.monotonic() + args.phase_deadline)
    phases = [p for p in PHASES if not args.only or p.name in args.only]
    t0 = time.monotonic()
    summary = run_check(args.out, phases, args.deadline, args.dry_run)
    print(
        f"gpu check: {'passed' if summary['passed'] else 'FAILED'} in "
        f"{time.monotonic() - t0:.0f} s; summary in {args.out / SUMMARY}"
    )
    return 0 if summary["passed"] else 1

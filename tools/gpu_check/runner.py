"""The GPU check: one bounded, offline run on a lent GPU node, summarised as one JSON file.

Run it as the first and only device call of a session that has a GPU (``scripts/gpu-check``
installs the carried wheels first)::

    python -m tools.gpu_check --out "$OUT" --deadline 500

and without a GPU, as CI does, on numba's CUDA simulator at tiny sizes::

    python -m tools.gpu_check --dry-run --out /tmp/gpu-check

Each phase runs in a process of its own (``--phase NAME``) under its own timeout and
what is left of ``--deadline``; a phase that fails, hangs or crashes is recorded and the
next one runs.  After every phase the summary (``gpu-check.json``) is rewritten, so a
run cut short still leaves what it measured.  The timeouts on a GPU of the phases that
always run add up to less than the default deadline, 380 s, and all of them to 420 s at
most (``sanitizer`` and ``pytest`` take what is left): with the wheels' install the
check is one device call of at most 420 s.  ``--list [--json]`` prints the phases in the
order they run (the figures that matter first) with their timeouts.  The phases:

``env``            driver, GPU, PCIe link, package versions, registers / local memory /
                   shared memory of each production kernel as compiled on this chip
``correctness``    the four dtypes at production tile sizes, ragged shapes, ``C``
                   pre-filled with NaN (overwrite) or values (accumulate), against cuBLAS
                   in float64 (complex128); two runs bit-identical
``big_c``          a float32 ``C`` of more than 2**32 elements (32-bit index overflow)
``kernel``         GFLOP/s of our kernel against cuBLAS per dtype (CUDA events), results
                   compared; the textbook kernel once
``bandwidth``      pinned and pageable host<->device copies
``engine``         one tile through the engine against its copies alone and its kernels
                   alone (overlap), resident and sub-tiled, and a transposed panel
``compile_cache``  every production kernel built and first launched in a cold process
                   and in a warm one sharing a fresh ``NUMBA_CACHE_DIR``, per dtype
``host``           decode GB/s of zstd chunks at 1..N threads, disk read and write,
                   pinned allocation, CUDA context, the null-device loop
                   (:mod:`benchmarks.null_device`)
``job``            ``outofcore random`` -> ``matmul --backend cuda --gpus 0`` -> ``verify``:
                   a cold process, a warm one (kernels cached), sub-tiled, ``A.T @ A``, a
                   stack, a vector, and ``run_job`` twice in the phase's own process
``cluster``        the GPU cluster ``--gpus 0`` starts, and its worker's resident memory
                   before and after the engine is made
``alternatives``   on the job's data: the plain cupy script, a hand-tiled one under a
                   device cap, dask.array with cupy blocks, ``--backend cupy``, and
                   outofcore's CPU path against numpy's BLAS on the node's cores
``perf``           a compute-bound job (32768^3 float32, zstd 2048^2 chunks,
                   ``--device-memory 8GiB``, or the largest size the disk and the time
                   allow) against the hand-tiled cupy script and the null-device prediction
``sanitizer``      compute-sanitizer memcheck, racecheck and synccheck on small launches
``pytest``         ``tests/cuda`` and the GPU cluster test, without the simulator

``sanitizer`` and ``pytest`` run only when ``outofcore/backends/cuda/*.py`` changed since
the newest ``docs/gpu-check-*.json`` that records its hash (``kernels_sha256``, in every
summary; :mod:`tools.gpu_check.kernel_hash`); ``--only`` runs them anyway.

The exit status is 0 when every phase that ran passed, 1 otherwise.

This module is the runner (arguments, phase scheduling, deadlines, the summary); the
phases are in :mod:`tools.gpu_check.kernel_phases` (env to kernel),
:mod:`tools.gpu_check.engine_phases` (bandwidth, engine, cluster),
:mod:`tools.gpu_check.host_phases` (compile_cache, host),
:mod:`tools.gpu_check.job_phases` (job), :mod:`tools.gpu_check.alternatives`,
:mod:`tools.gpu_check.perf_phase` and :mod:`tools.gpu_check.tool_phases` (sanitizer,
pytest), their shared helpers in :mod:`tools.gpu_check.common`.
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

from tools.gpu_check.alternatives import phase_alternatives
from tools.gpu_check.common import PARTIAL_VARIABLE, REPO, CheckFailed
from tools.gpu_check.engine_phases import phase_bandwidth, phase_cluster, phase_engine
from tools.gpu_check.host_phases import compile_child, phase_compile_cache, phase_host
from tools.gpu_check.job_phases import phase_job
from tools.gpu_check.kernel_hash import WHEN_CHANGED, kernels_sha256, unchanged_since
from tools.gpu_check.kernel_phases import (
    phase_big_c,
    phase_correctness,
    phase_env,
    phase_kernel,
)
from tools.gpu_check.perf_phase import phase_perf
from tools.gpu_check.tool_phases import phase_pytest, phase_sanitizer, sanitizer_workload

SUMMARY = "gpu-check.json"
LOG = "gpu-check.log"


@dataclass(frozen=True)
class Phase:
    """One phase of the check: its name and timeouts (seconds) on a GPU and in a dry run."""

    name: str
    timeout: float
    dry_timeout: float


#: In the order they run: the figures that matter first (the compile cache cold and warm,
#: the job cold and warm beside the cupy script, the compute-bound job beside the
#: hand-tiled one), then the kernels' checks, then the rest.  GPU timeouts: the measured
#: phase times (docs/gpu-check-*.json) with room, all of them adding up to 420 s at most
#: (one device call); those that always run add up to less than :data:`DEADLINE`;
#: ``sanitizer`` and ``pytest`` (only when the kernels changed) run last, in what is left
#: of it, and are recorded as skipped where nothing is.
PHASES = (
    Phase("env", 20, 60),
    Phase("compile_cache", 30, 60),
    Phase("job", 58, 120),
    Phase("alternatives", 40, 90),
    Phase("perf", 45, 90),
    Phase("correctness", 20, 120),
    Phase("kernel", 32, 60),
    Phase("big_c", 10, 60),
    Phase("engine", 12, 90),
    Phase("bandwidth", 5, 30),
    Phase("host", 20, 60),
    Phase("cluster", 10, 60),
    Phase("sanitizer", 48, 60),
    Phase("pytest", 70, 10),
)
#: The whole check's default deadline, seconds: with the wheels' install and Python's
#: start, one device call of at most 420 s (scripts/gpu-check gives it what is left).
DEADLINE = 380


def phase_list() -> list[dict[str, Any]]:
    """The phases in the order they run, with their timeouts and when they run
    (``python -m tools.gpu_check --list [--json]``)."""
    return [
        {
            "name": phase.name,
            "timeout_s": phase.timeout,
            "dry_timeout_s": phase.dry_timeout,
            "runs": "when the kernels changed" if phase.name in WHEN_CHANGED else "always",
        }
        for phase in PHASES
    ]


PHASE_FUNCTIONS: dict[str, Callable[..., dict]] = {
    "env": phase_env,
    "correctness": phase_correctness,
    "big_c": phase_big_c,
    "kernel": phase_kernel,
    "bandwidth": phase_bandwidth,
    "engine": phase_engine,
    "compile_cache": phase_compile_cache,
    "compile_child": compile_child,  # not a phase: compile_cache's fresh processes
    "host": phase_host,
    "job": phase_job,
    "cluster": phase_cluster,
    "alternatives": phase_alternatives,
    "perf": phase_perf,
    "sanitizer": phase_sanitizer,
    "pytest": phase_pytest,
}
#: Phases that are given their deadline (``time.monotonic()`` seconds).
TAKES_DEADLINE = ("perf", "sanitizer", "pytest")


# -- the driver --------------------------------------------------------------------------------


def _run_phase_here(name: str, result_path: Path, deadline: float) -> int:
    """Run one phase in this process and write its result (or failure) to ``result_path``."""
    t0 = time.perf_counter()
    try:
        if name == "sanitizer_workload":
            sanitizer_workload()
            return 0
        function = PHASE_FUNCTIONS[name]
        data = function(deadline) if name in TAKES_DEADLINE else function()
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


def _run_phase_process(
    name: str, timeout: float, env: dict, log: Any, result_path: Path
) -> dict[str, Any]:
    """Run phase ``name`` in a process of its own under ``timeout``; its result (on a
    timeout, with what its parts had measured)."""
    result_path.unlink(missing_ok=True)
    partial = result_path.with_suffix(".partial.json")
    partial.unlink(missing_ok=True)
    env = {**env, PARTIAL_VARIABLE: str(partial)}
    cmd = [sys.executable, "-m", "tools.gpu_check", "--phase", name, "--result",
           str(result_path), "--phase-deadline", str(timeout)]  # fmt: skip
    log.write(f"\n===== {name} (timeout {timeout:.0f} s) =====\n")
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
        data = json.loads(partial.read_text()) if partial.exists() else {}
        data.update(status="timeout", error=f"no result within {timeout:.0f} s")
    data["wall_s"] = round(time.monotonic() - t0, 2)
    return data


def _skip(phase: Phase, left: float, unchanged: str | None, forced: tuple[str, ...]) -> str | None:
    """Why ``phase`` is not run (its status), or None to run it."""
    if left < 5:
        return "skipped: the deadline is reached"
    if phase.name in WHEN_CHANGED and unchanged and phase.name not in forced:
        return f"skipped: kernels unchanged since {unchanged}"
    return None


def run_check(
    out_dir: Path,
    phases: list[Phase],
    deadline_s: float,
    dry: bool,
    forced: tuple[str, ...] = (),
    docs: Path = REPO / "docs",
) -> dict:
    """Run each phase in a subprocess under its timeout; return (and keep writing) the summary.

    ``sanitizer`` and ``pytest`` are skipped when the kernels' hash is the one of the
    newest summary in ``docs`` that has one, unless ``forced`` names them.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["NUMBA_ENABLE_CUDASIM"] = "1" if dry else "0"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    digest = kernels_sha256()
    unchanged = unchanged_since(digest, docs)
    summary: dict[str, Any] = {
        "dry_run": dry,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "deadline_s": deadline_s,
        "kernels_sha256": digest,
        "phases": {},
    }
    end = time.monotonic() + deadline_s
    log = (out_dir / LOG).open("a")
    scratch = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    for phase in phases:
        left = end - time.monotonic()
        skipped = _skip(phase, left, unchanged, forced)
        if skipped is not None:
            summary["phases"][phase.name] = {"status": skipped}
            print(f"{phase.name:14} {skipped}", flush=True)
            continue
        timeout = min(phase.dry_timeout if dry else phase.timeout, left)
        result_path = scratch / f"phase-{phase.name}.json"  # $OUT brings back 8 files at most
        data = _run_phase_process(phase.name, timeout, env, log, result_path)
        summary["phases"][phase.name] = data
        line = f"{phase.name:14} {data['status']:8} {data['wall_s']:7.1f} s"
        if "error" in data:
            line += f"  {str(data['error'])[:300]}"
        print(line, flush=True)
        (out_dir / SUMMARY).write_text(json.dumps(summary, indent=1, default=str))
    log.close()
    shutil.rmtree(scratch, ignore_errors=True)
    statuses = [p["status"] for p in summary["phases"].values()]
    summary["passed"] = all(s == "passed" or s.startswith("skipped") for s in statuses)
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
        "--deadline",
        type=float,
        default=DEADLINE,
        help=f"seconds for the whole check (default {DEADLINE})",
    )
    parser.add_argument(
        "--only", nargs="+", choices=[p.name for p in PHASES], help="run these phases alone"
    )
    parser.add_argument(
        "--list", action="store_true", help="print the phases in order with their timeouts"
    )
    parser.add_argument("--json", action="store_true", help="with --list: as JSON")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--phase-deadline", type=float, default=60, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.list:
        listed = phase_list()
        if args.json:
            print(json.dumps({"deadline_s": DEADLINE, "phases": listed}, indent=1))
        else:
            for row in listed:
                print(f"{row['name']:14} {row['timeout_s']:5.0f} s  {row['runs']}")
            print(f"{'deadline':14} {DEADLINE:5.0f} s")
        return 0
    if args.phase:
        result = args.result or Path(os.devnull)
        return _run_phase_here(args.phase, result, time.monotonic() + args.phase_deadline)
    phases = [p for p in PHASES if not args.only or p.name in args.only]
    t0 = time.monotonic()
    forced = tuple(args.only or ())
    summary = run_check(args.out, phases, args.deadline, args.dry_run, forced)
    print(
        f"gpu check: {'passed' if summary['passed'] else 'FAILED'} in "
        f"{time.monotonic() - t0:.0f} s; summary in {args.out / SUMMARY}"
    )
    return 0 if summary["passed"] else 1

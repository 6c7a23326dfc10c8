"""What the GPU check's phases share: its dtypes and error bounds, a phase's failure,
its independent parts, the simulator switch, timers and a bounded subprocess.

The phases themselves are in :mod:`tools.gpu_check.kernel_phases`,
:mod:`tools.gpu_check.engine_phases` and :mod:`tools.gpu_check.tool_phases`; the runner
(``python -m tools.gpu_check``) in :mod:`tools.gpu_check`.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

DTYPES = ("float32", "float64", "complex64", "complex128")
#: Every dtype's unit round-off, for error bounds.
EPS = {name: float(np.finfo(np.dtype(name)).eps) / 2 for name in DTYPES}
REPO = Path(__file__).resolve().parents[2]


class CheckFailed(Exception):
    """A phase found a wrong result; its message says which and by how much.

    ``data``: what the phase measured before (or beside) the failure, kept in the summary.
    """

    def __init__(self, message: str, data: dict | None = None) -> None:
        super().__init__(message)
        self.data = data or {}


#: The environment variable naming where a phase's process keeps what its parts measured
#: so far (set by the runner): a phase killed at its timeout still reports them.
PARTIAL_VARIABLE = "GPU_CHECK_PARTIAL"


class Parts:
    """A phase's independent measurements: each one's failure is recorded, and the
    others still run and keep their figures (the first GPU run lost a whole phase's
    figures to its last part).  After every part the figures so far are written where
    ``$GPU_CHECK_PARTIAL`` says, if it is set."""

    def __init__(self, out: dict[str, Any]) -> None:
        self.out = out
        self.failures: list[str] = []

    def run(self, label: str, fn: Callable[[], Any]) -> None:
        try:
            self.out[label] = fn()
        except Exception as exc:
            message = f"{label}: {type(exc).__name__}: {str(exc)[:500]}"
            self.out[label] = {"error": message}
            self.failures.append(message)
        partial = os.environ.get(PARTIAL_VARIABLE)
        if partial:
            Path(partial).write_text(json.dumps(self.out, default=str))

    def finish(self) -> dict[str, Any]:
        if self.failures:
            raise CheckFailed("; ".join(self.failures), self.out)
        return self.out


def dry_run() -> bool:
    """Whether this process runs on numba's CUDA simulator (the dry run)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def numba_cuda():
    """``numba.cuda``, imported when a phase first needs it."""
    from numba import cuda  # noqa: PLC0415

    return cuda


def tile_params(dtype: np.dtype):
    """The kernel's tile parameters: production on a GPU, tiny ones on the simulator."""
    from outofcore.backends.cuda.kernels import PRODUCTION, TileParams  # noqa: PLC0415

    if dry_run():
        return TileParams(bm=8, bn=8, bk=4, tm=2, tn=2)
    return PRODUCTION[np.dtype(dtype)]


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Standard normal values of ``dtype`` (both parts for a complex dtype)."""
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def wide_dtype(dtype: str) -> np.dtype:
    """float64, or complex128 for a complex ``dtype``: the precision results are checked in."""
    return np.dtype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)


def rounding_bound(a: np.ndarray, b: np.ndarray, c0: np.ndarray | None, dtype: str) -> np.ndarray:
    """Elementwise worst-case rounding bound of ``c0 + a @ b`` in ``dtype``: ~k·u·(|a||b| + |c0|).

    Complex products round each part: the factor 4 covers a complex multiply-add.
    """
    k = a.shape[1]
    factor = 4.0 if np.dtype(dtype).kind == "c" else 1.0
    mag = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    if c0 is not None:
        mag = mag + np.abs(c0).astype(np.float64)
    return factor * (k + 2) * EPS[dtype] * mag + np.finfo(np.float64).tiny


def wall_ms(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall-clock milliseconds of ``fn``, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def cupy_or_none():
    """CuPy, or None where it is not installed (the dry run compares with numpy instead)."""
    if dry_run():
        return None
    try:
        import cupy  # noqa: PLC0415
    except ImportError:
        return None
    return cupy


def run_command(cmd: list[str], timeout: float, env: dict | None = None) -> dict:
    """Run ``cmd``; return its exit status, seconds and output tail (raise on a timeout)."""
    t0 = time.perf_counter()
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != PARTIAL_VARIABLE}
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO, check=False
    )
    tail = (proc.stdout + proc.stderr)[-3000:]
    return {
        "cmd": " ".join(cmd),
        "rc": proc.returncode,
        "s": time.perf_counter() - t0,
        "tail": tail,
        "stdout": proc.stdout,
    }


#: The figures of a job's ``--json`` summary the check keeps.
JOB_FIGURES = (
    "tasks",
    "gflops",
    "seconds",
    "compute_seconds",
    "read_wait_seconds",
    "write_seconds",
    "peak_worker_bytes",
    "phases",
    "device",
    "setup_seconds",
    "kernel_seconds",
    "copy_seconds",
    "first_launch_seconds",
    "decode_cpu_seconds",
    "tile",
    "tk",
    "tiles",
    "bytes_read",
    "task_bytes_projected",
)


def outofcore_cli(*args: str, timeout: float = 120, env: dict | None = None) -> dict:
    """Run ``python -m outofcore.cli ARGS``; raise :class:`CheckFailed` unless it exits 0."""
    result = run_command([sys.executable, "-m", "outofcore.cli", *args], timeout, env)
    if result["rc"] != 0:
        raise CheckFailed(f"outofcore {' '.join(args)} exited {result['rc']}: {result['tail']}")
    return result


def job_figures(summary: dict) -> dict:
    """The figures of a job's summary the check keeps (:data:`JOB_FIGURES`)."""
    return {key: summary[key] for key in JOB_FIGURES if key in summary}


def cli_job(args: list[str], timeout: float, env: dict | None = None) -> dict:
    """``outofcore matmul ARGS --json --no-dashboard`` in a fresh process: its seconds, its
    summary's figures and the tail of its output."""
    result = outofcore_cli("matmul", *args, "--json", "--no-dashboard", timeout=timeout, env=env)
    row: dict[str, Any] = {"s": result["s"], "stderr_tail": result["tail"][-800:]}
    stdout = result["stdout"]
    with contextlib.suppress(ValueError):
        row["summary"] = job_figures(json.loads(stdout[stdout.index("{") :]))
    return row


def python_call(target: str, *args: Any, timeout: float, env: dict | None = None) -> Any:
    """``module:function(*args)`` in a fresh interpreter; its JSON result (printed last).

    A dict result gets ``process_s``: the child's seconds, interpreter start and imports
    included.
    """
    module, function = target.split(":")
    code = (
        "import json, sys\n"
        f"from {module} import {function}\n"
        f"print(json.dumps({function}(*json.loads(sys.argv[1])), default=str))\n"
    )
    result = run_command([sys.executable, "-c", code, json.dumps(args)], timeout, env)
    if result["rc"] != 0:
        raise CheckFailed(f"{target} exited {result['rc']}: {result['tail']}")
    value = json.loads(result["stdout"].strip().splitlines()[-1])
    if isinstance(value, dict):
        value["process_s"] = result["s"]
    return value

"""The GPU check's tool phases: ``sanitizer`` (compute-sanitizer on a small workload,
:func:`sanitizer_workload`, run as ``python -m tools.gpu_check --phase
sanitizer_workload``) and ``pytest`` (``tests/cuda`` without the simulator).

Each runs in a process of its own, started by :mod:`tools.gpu_check`.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from typing import Any

import numpy as np

from tools.gpu_check.common import (
    DTYPES,
    CheckFailed,
    dry_run,
    numba_cuda,
    random_array,
    run_command,
    tile_params,
)


def sanitizer_workload() -> None:
    """Small launches of every production kernel and one sub-tiled engine tile."""
    from outofcore.backends.cuda import kernels  # noqa: PLC0415
    from outofcore.backends.cuda.engine import CudaEngine  # noqa: PLC0415

    cuda = numba_cuda()
    rng = np.random.default_rng(5)
    for name in DTYPES:
        dtype = np.dtype(name)
        m, n, k = (7, 5, 3) if dry_run() else (131, 67, 19)
        a, b = random_array(rng, (m, k), name), random_array(rng, (k, n), name)
        c = cuda.to_device(random_array(rng, (m, n), name))
        kernels.launch(cuda.to_device(a), cuda.to_device(b), c, True, params=tile_params(dtype))
    cuda.synchronize()
    engine = CudaEngine(
        "cuda",
        params=tile_params(np.float32) if dry_run() else None,
        device_memory=1200 if dry_run() else 200_000,
    )
    m, n, k = (12, 10, 4) if dry_run() else (300, 260, 40)
    engine.start_tile((m, n), np.float32)
    for _ in range(2):
        engine.accumulate(
            random_array(rng, (m, k), "float32"), random_array(rng, (k, n), "float32")
        )
    engine.finish_tile()
    cuda.synchronize()


def _find_sanitizer() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    candidates = sorted(glob.glob("/usr/local/cuda*/bin/compute-sanitizer")) + sorted(
        glob.glob("/opt/nvidia/**/compute-sanitizer", recursive=True)
    )
    return candidates[0] if candidates else None


def phase_sanitizer(deadline: float) -> dict:
    """compute-sanitizer memcheck, racecheck and synccheck on small launches."""
    workload = [sys.executable, "-m", "tools.gpu_check", "--phase", "sanitizer_workload"]
    if dry_run():
        result = run_command(workload, 60)
        if result["rc"]:
            raise CheckFailed(f"the sanitizer's workload failed: {result['tail']}")
        return {"note": "dry run: the workload ran without compute-sanitizer", "s": result["s"]}
    tool = _find_sanitizer()
    if tool is None:
        raise CheckFailed("compute-sanitizer not found on PATH or under /usr/local/cuda*/bin")
    out: dict[str, Any] = {"tool": tool}
    failures = []
    for check in ("memcheck", "racecheck", "synccheck"):
        left = deadline - time.monotonic() - 5
        if left < 10:
            out[check] = "not run: the phase's time ran out"
            continue
        cmd = [tool, "--tool", check, "--error-exitcode", "86", *workload]
        try:
            result = run_command(cmd, min(60, left))
        except subprocess.TimeoutExpired:
            out[check] = "timed out"
            continue
        out[check] = {"rc": result["rc"], "s": result["s"], "tail": result["tail"][-1500:]}
        if result["rc"]:
            failures.append(check)
    if failures:
        raise CheckFailed(f"compute-sanitizer {', '.join(failures)} reported errors: {out}")
    return out


def phase_pytest(deadline: float) -> dict:
    """tests/cuda and the GPU cluster test without the simulator."""
    if dry_run():
        return {"note": "dry run: CI runs these tests on the simulator"}
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-rfE",
        "-p",
        "no:cacheprovider",
        "tests/cuda",
        "tests/outofcore/runtime/test_gpu_cluster.py",
        "--ignore=tests/cuda/test_gpu_check.py",  # the dry run: CI's, on the simulator
    ]
    if importlib.util.find_spec("pytest_timeout"):
        cmd.append("--timeout=60")
    result = run_command(cmd, max(10, deadline - time.monotonic() - 5), env=env)
    print(result["stdout"])  # the whole report, into the log
    last = result["tail"].strip().splitlines()[-1] if result["tail"].strip() else ""
    if result["rc"]:
        raise CheckFailed(f"pytest exited {result['rc']}: {result['tail']}")
    return {"s": result["s"], "result": last}

"""The GPU check's host phases: ``compile_cache`` (every production kernel built and first
launched in a cold process and in a warm one sharing a fresh kernel cache) and ``host``
(what the node's host side gives a GPU worker: decode GB/s at 1..N threads, disk read and
write, pinned allocation, the CUDA context, and the null-device loop of
:mod:`benchmarks.null_device`).

Each runs in a process of its own, started by :mod:`tools.gpu_check`; ``compile_cache``
starts :func:`compile_child` twice more.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tools.gpu_check.common import DTYPES, Parts, dry_run, numba_cuda, python_call, tile_params

#: The warm process's compile and first launch the issue asks for, per dtype (seconds).
WARM_TARGET_S = 0.3
#: A file read and written for the disk's rates (dry run: 8 MiB).
DISK_BYTES = 1 << 30


def compile_child() -> dict:
    """In a fresh process: numba.cuda's import, the CUDA context, then for each dtype the
    GEMM kernel built and launched once on 1x1x1, and the transpose kernel likewise."""
    t0 = time.perf_counter()
    cuda = numba_cuda()
    from outofcore.backends.cuda import kernels, transpose  # noqa: PLC0415

    out: dict[str, Any] = {"import_s": time.perf_counter() - t0}
    t0 = time.perf_counter()
    cuda.current_context()
    out["context_s"] = time.perf_counter() - t0
    out["cache_dir"] = os.environ.get("NUMBA_CACHE_DIR")
    for name in DTYPES:
        dtype = np.dtype(name)
        one = cuda.to_device(np.ones((1, 1), dtype))
        c = cuda.device_array((1, 1), dtype)
        t0 = time.perf_counter()
        kernels.launch(one, one, c, False, params=tile_params(dtype))
        cuda.synchronize()
        gemm = time.perf_counter() - t0
        src, dst = cuda.to_device(np.ones((2, 3), dtype)), cuda.device_array((3, 2), dtype)
        t0 = time.perf_counter()
        transpose.launch_transpose(src, dst)
        cuda.synchronize()
        out[name] = {"gemm_s": gemm, "transpose_s": time.perf_counter() - t0}
        if c.copy_to_host()[0, 0] != 1 or not (dst.copy_to_host() == 1).all():
            raise RuntimeError(f"{name}: the first launches gave wrong values")
    return out


def phase_compile_cache() -> dict:
    """:func:`compile_child` in two fresh processes with one new ``NUMBA_CACHE_DIR``: the
    first compiles (cold), the second loads what the first cached (warm)."""
    folder = Path(tempfile.mkdtemp(prefix="gpu-check-kernels-"))
    try:
        env = dict(os.environ, NUMBA_CACHE_DIR=str(folder))
        out: dict[str, Any] = {"cache_dir": str(folder)}
        target = "tools.gpu_check.host_phases:compile_child"
        for label in ("cold", "warm"):
            out[label] = python_call(target, timeout=120, env=env)
            out[f"{label}_cache_files"] = sum(1 for f in folder.rglob("*") if f.is_file())
        per_dtype = {}
        for name in DTYPES:
            cold, warm = (sum(out[run][name].values()) for run in ("cold", "warm"))
            per_dtype[name] = {
                "cold_s": cold,
                "warm_s": warm,
                "warm_target_met": warm <= WARM_TARGET_S,
            }
        out["per_dtype"] = per_dtype
        if dry_run():
            out["note"] = "dry run: the simulator compiles and caches nothing; times are its own"
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def disk_rates(folder: Path, nbytes: int) -> dict:
    """Write ``nbytes`` to a file with fsync, drop it from the page cache, read it back."""
    data = np.random.default_rng(1).integers(0, 255, size=1 << 24, dtype=np.uint8).tobytes()
    path = folder / "disk-rate.bin"
    t0 = time.perf_counter()
    with path.open("wb") as f:
        for _ in range(max(1, nbytes // len(data))):
            f.write(data)
        f.flush()
        os.fsync(f.fileno())
    written = path.stat().st_size
    write_s = time.perf_counter() - t0
    fd = os.open(path, os.O_RDONLY)
    try:
        if hasattr(os, "posix_fadvise"):  # clean pages after the fsync: dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        t0 = time.perf_counter()
        while os.read(fd, 1 << 24):
            pass
        read_s = time.perf_counter() - t0
    finally:
        os.close(fd)
        path.unlink()
    return {
        "bytes": written,
        "write_gb_s": written / write_s / 1e9,
        "read_gb_s": written / read_s / 1e9,
    }


def _context_seconds() -> dict:
    t0 = time.perf_counter()
    cuda = numba_cuda()
    imported = time.perf_counter() - t0
    t0 = time.perf_counter()
    cuda.current_context()
    return {"import_s": imported, "context_s": time.perf_counter() - t0}


def _pinned_seconds() -> dict | str:
    if dry_run():
        return "skipped: dry run (the simulator has no pinned memory)"
    cuda = numba_cuda()
    out = {}
    for nbytes in (256 << 20, 1 << 30):
        t0 = time.perf_counter()
        buffer = cuda.pinned_array(nbytes, dtype=np.uint8)
        out[f"{nbytes >> 20}MiB_s"] = time.perf_counter() - t0
        del buffer
    return out


def phase_host() -> dict:
    """The node's host side, as a GPU worker gets it (see the module docstring)."""
    from benchmarks import null_device  # noqa: PLC0415
    from outofcore.runtime.cores import usable_cores  # noqa: PLC0415

    out: dict[str, Any] = {"cores": usable_cores()}
    parts = Parts(out)
    parts.run("cuda", _context_seconds)  # first: nothing in this process has touched CUDA
    parts.run("pinned_allocation", _pinned_seconds)
    folder = Path(tempfile.mkdtemp(prefix="gpu-check-host-"))
    try:
        if dry_run():
            sizes = null_device.Sizes(m=256, k=256, n=256, chunk=64, tile=128, tk=64)
        else:  # the job phase's shape, its tiles as resident jobs get them
            sizes = null_device.Sizes(m=8192, k=6144, n=7168, chunk=2048, tile=4096, tk=2048)
        out["sizes"] = vars(sizes)

        def decode() -> dict:
            a, _ = null_device.make_inputs(folder, sizes)
            counts = null_device.thread_counts()
            return {str(n): null_device.decode_rate(a, n) / 1e9 for n in counts}

        parts.run("decode_gb_s", decode)
        parts.run("disk", lambda: disk_rates(folder, (8 << 20) if dry_run() else DISK_BYTES))

        def null_loop() -> dict:
            rows = null_device.run(folder, sizes, null_device.DeviceModel())
            return {
                "rows": [row.as_dict() for row in rows],
                "table": null_device.format_table(rows),
            }

        parts.run("null_device", null_loop)
        return parts.finish()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

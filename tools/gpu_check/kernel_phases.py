"""The GPU check's kernel phases: ``env`` (the node, and each production kernel as
compiled on it), ``correctness``, ``big_c`` and ``kernel`` (GFLOP/s against cuBLAS).

Each runs in a process of its own, started by :mod:`tools.gpu_check`.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import time
from typing import Any

import numpy as np

from benchmarks.harness.timing import median_event_ms
from tools.gpu_check.common import (
    DTYPES,
    EPS,
    CheckFailed,
    cupy_or_none,
    dry_run,
    numba_cuda,
    random_array,
    rounding_bound,
    run_command,
    tile_params,
    wide_dtype,
)


def _reference(a: np.ndarray, b: np.ndarray, dtype: str) -> np.ndarray:
    """``a @ b`` in float64 (complex128): cuBLAS through CuPy on a GPU, numpy otherwise."""
    wide = wide_dtype(dtype)
    cp = cupy_or_none()
    if cp is None:
        return a.astype(wide) @ b.astype(wide)
    return cp.asnumpy(cp.asarray(a).astype(wide) @ cp.asarray(b).astype(wide))


def phase_env() -> dict:
    """What this node is: GPU, driver, link, versions, and each kernel as compiled here."""
    from importlib import metadata  # noqa: PLC0415

    out: dict[str, Any] = {"python": sys.version.split()[0], "simulator": dry_run()}
    versions = {}
    for name in (
        "numpy",
        "numba",
        "numba-cuda",
        "llvmlite",
        "cupy-cuda13x",
        "cuda-bindings",
        "cuda-core",
        "dask",
        "distributed",
        "dask-cuda",
        "zarr",
        "numcodecs",
    ):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    out["versions"] = versions
    try:
        _env_device(out)
    except Exception as exc:  # keep what was found: the versions explain most failures here
        found = json.dumps(out, default=str)
        raise CheckFailed(f"{type(exc).__name__}: {exc}; found {found}") from exc
    return out


def _env_device(out: dict[str, Any]) -> None:
    cuda = numba_cuda()
    smi = shutil.which("nvidia-smi")
    if smi:
        fields = (
            "name,driver_version,memory.total,pcie.link.gen.current,pcie.link.gen.max,"
            "pcie.link.width.current,pcie.link.width.max,clocks.max.sm,clocks.max.mem,"
            "power.limit,compute_mode"
        )
        query = run_command([smi, f"--query-gpu={fields}", "--format=csv,noheader"], 20)
        out["nvidia_smi"] = dict(
            zip(fields.split(","), query["tail"].strip().split(", "), strict=False)
        )
    if not dry_run():
        device = cuda.get_current_device()
        name = device.name.decode() if isinstance(device.name, bytes) else device.name
        out["device"] = {
            "name": name,
            "compute_capability": list(device.compute_capability),
            "multiprocessors": device.MULTIPROCESSOR_COUNT,
        }
        free, total = cuda.current_context().get_memory_info()
        out["device"].update(free_bytes=int(free), total_bytes=int(total))
    from outofcore.backends.cuda import kernels  # noqa: PLC0415

    compiled = {}
    for name in DTYPES:
        dtype = np.dtype(name)
        params = tile_params(dtype)
        a = cuda.to_device(np.ones((1, 1), dtype))
        c = cuda.device_array((1, 1), dtype)
        t0 = time.perf_counter()
        kernels.launch(a, a, c, False, params=params)
        cuda.synchronize()
        row = {"params": str(params), "compile_and_launch_s": time.perf_counter() - t0}
        if not dry_run():
            kernel = kernels.build_gemm_kernel(params, dtype)
            for key, getter in (
                ("registers", "get_regs_per_thread"),
                ("local_bytes", "get_local_mem_per_thread"),
                ("shared_bytes", "get_shared_mem_per_block"),
            ):
                value = getattr(kernel, getter)()
                row[key] = next(iter(value.values())) if isinstance(value, dict) else value
        if not np.array_equal(c.copy_to_host(), np.ones((1, 1), dtype)):
            raise CheckFailed(f"{name}: 1x1x1 product of ones is {c.copy_to_host()}")
        compiled[name] = row
    out["kernels"] = compiled
    spills = {k: v["local_bytes"] for k, v in compiled.items() if v.get("local_bytes")}
    if spills:
        out["warning"] = f"local memory (spills) in {spills}"


def _shapes() -> list[tuple[int, int, int]]:
    if dry_run():
        return [(1, 1, 1), (13, 11, 7), (9, 17, 10)]
    return [
        (1, 1, 1),
        (131, 257, 1031),
        (257, 129, 4099),
        (1000, 1, 77),
        (1, 333, 2),
        (700, 517, 9),
    ]


def phase_correctness() -> dict:
    """Every dtype at production tiles: overwrite NaN, accumulate, bit-identical reruns."""
    from outofcore.backends.cuda import kernels  # noqa: PLC0415

    cuda = numba_cuda()
    rng = np.random.default_rng(20261126)
    rows = []
    worst: dict[str, float] = {}
    for name in DTYPES:
        dtype = np.dtype(name)
        params = tile_params(dtype)
        for m, n, k in _shapes():
            a, b = random_array(rng, (m, k), name), random_array(rng, (k, n), name)
            c0 = random_array(rng, (m, n), name)
            ref = _reference(a, b, name)
            a_d, b_d = cuda.to_device(a), cuda.to_device(b)
            for accumulate in (False, True):
                start = c0 if accumulate else np.full((m, n), np.nan, dtype)
                results = []
                for _ in range(2):
                    c_d = cuda.to_device(start)
                    kernels.launch(a_d, b_d, c_d, accumulate, params=params)
                    results.append(c_d.copy_to_host())
                got = results[0]
                expected = ref + c0 if accumulate else ref
                err = np.abs(got.astype(wide_dtype(name)) - expected)
                bound = rounding_bound(a, b, c0 if accumulate else None, name)
                ratio = float(np.nanmax(err / bound)) if err.size else 0.0
                case = f"{name} {m}x{n}x{k} accumulate={accumulate}"
                if not np.all(np.isfinite(got)):
                    raise CheckFailed(f"{case}: {int((~np.isfinite(got)).sum())} non-finite values")
                if ratio > 1:
                    raise CheckFailed(f"{case}: error {ratio:.2f} times the rounding bound")
                if results[0].tobytes() != results[1].tobytes():
                    raise CheckFailed(f"{case}: two runs differ")
                worst[name] = max(worst.get(name, 0.0), ratio)
                rows.append({"case": case, "error_over_bound": ratio})
    return {"cases": len(rows), "worst_error_over_bound": worst, "rows": rows}


def phase_big_c() -> dict:
    """A float32 C of more than 2**32 elements: rows at the far end against float64."""
    from outofcore.backends.cuda import kernels  # noqa: PLC0415

    cuda = numba_cuda()
    m, n, k = (37, 23, 5) if dry_run() else (131101, 32771, 24)
    params = tile_params(np.float32)
    rng = np.random.default_rng(7)
    a, b = random_array(rng, (m, k), "float32"), random_array(rng, (k, n), "float32")
    cp = cupy_or_none()
    t0 = time.perf_counter()
    if cp is not None:
        c = cp.full((m, n), cp.nan, dtype=cp.float32)
        c_d = cuda.as_cuda_array(c)
    else:
        c = c_d = cuda.to_device(np.full((m, n), np.nan, np.float32))
    kernels.launch(cuda.to_device(a), cuda.to_device(b), c_d, False, params=params)
    cuda.synchronize()
    seconds = time.perf_counter() - t0
    rows = sorted({0, 1, m // 2, m - 2, m - 1, *rng.integers(0, m, 6).tolist()})
    if cp is not None:
        nan_count = int(cp.isnan(c).sum())
        got = cp.asnumpy(c[cp.asarray(rows)])
    else:
        host = c.copy_to_host()
        nan_count = int(np.isnan(host).sum())
        got = host[rows]
    expected = a[rows].astype(np.float64) @ b.astype(np.float64)
    ratio = float(np.max(np.abs(got - expected) / rounding_bound(a[rows], b, None, "float32")))
    if nan_count:
        raise CheckFailed(f"{m}x{n} C: {nan_count} elements never written (still NaN)")
    if ratio > 1:
        raise CheckFailed(f"{m}x{n} C: rows {rows} off by {ratio:.2f} times the bound")
    return {"shape": [m, n, k], "elements": m * n, "seconds": seconds, "error_over_bound": ratio}


def phase_kernel() -> dict:
    """Our kernel against cuBLAS per dtype (CUDA events), results compared."""
    from outofcore.backends.cuda import kernels  # noqa: PLC0415

    cuda = numba_cuda()
    cp = cupy_or_none()
    if dry_run():
        plan = [(name, 16, 2) for name in DTYPES]
    else:
        plan = [
            ("float32", 4096, 10),
            ("float32", 8192, 5),
            ("float64", 4096, 5),
            ("float64", 8192, 3),
            ("complex64", 4096, 5),
            ("complex128", 4096, 3),
        ]
    rows = []
    for name, size, repeats in plan:
        dtype = np.dtype(name)
        params = tile_params(dtype)
        rng = np.random.default_rng(size)
        a = cuda.to_device(random_array(rng, (size, size), name))
        b = cuda.to_device(random_array(rng, (size, size), name))
        c = cuda.device_array((size, size), dtype)
        flops = (8.0 if dtype.kind == "c" else 2.0) * size**3
        row: dict[str, Any] = {"dtype": name, "size": size}
        ms = median_event_ms(
            lambda a=a, b=b, c=c, p=params: kernels.launch(a, b, c, False, params=p),
            repeats,
            cuda.synchronize,
        )
        row.update(ours_ms=ms, ours_gflops=flops / ms / 1e6)
        ours = c.copy_to_host()
        if cp is not None:
            ca, cb = cp.asarray(a), cp.asarray(b)
            cc = cp.empty((size, size), dtype=dtype)
            blas_ms = median_event_ms(
                lambda ca=ca, cb=cb, cc=cc: cp.matmul(ca, cb, out=cc), repeats, cuda.synchronize
            )
            row.update(cublas_ms=blas_ms, cublas_gflops=flops / blas_ms / 1e6)
            row["fraction_of_cublas"] = blas_ms / ms
            theirs = cp.asnumpy(cc)
        else:
            theirs = a.copy_to_host() @ b.copy_to_host()
        scale = float(np.abs(theirs).max()) or 1.0
        diff = float(np.abs(ours - theirs).max()) / scale
        row["max_rel_diff_vs_cublas"] = diff
        allowed = 4 * size * EPS[name]
        if not np.isfinite(diff) or diff > allowed:
            raise CheckFailed(f"{name} {size}^3: differs from cuBLAS by {diff:.2e} > {allowed:.2e}")
        rows.append(row)
    if not dry_run():  # the textbook kernel, once, for scale
        from outofcore.backends.cuda.reference import launch_reference  # noqa: PLC0415

        size = 4096
        a = cuda.to_device(random_array(np.random.default_rng(1), (size, size), "float32"))
        c = cuda.device_array((size, size), np.float32)
        ms = median_event_ms(lambda: launch_reference(a, a, c, False), 2, cuda.synchronize)
        rows.append(
            {
                "dtype": "float32",
                "size": size,
                "textbook_ms": ms,
                "textbook_gflops": 2.0 * size**3 / ms / 1e6,
            }
        )
    return {"rows": rows}

"""The GPU check: one bounded, offline run on a lent GPU node, summarised as one JSON file.

Run it as the first and only device call of a session that has a GPU (``scripts/gpu-check``
installs the carried wheels first)::

    python -m outofcore.cuda.check --out "$OUT" --deadline 420

and without a GPU, as CI does, on numba's CUDA simulator at tiny sizes::

    python -m outofcore.cuda.check --dry-run --out /tmp/gpu-check

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
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SUMMARY = "gpu-check.json"
LOG = "gpu-check.log"
DTYPES = ("float32", "float64", "complex64", "complex128")
#: Every dtype's unit round-off, for error bounds.
EPS = {name: float(np.finfo(np.dtype(name)).eps) / 2 for name in DTYPES}
REPO = Path(__file__).resolve().parents[2]


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


class CheckFailed(Exception):
    """A phase found a wrong result; its message says which and by how much.

    ``data``: what the phase measured before (or beside) the failure, kept in the summary.
    """

    def __init__(self, message: str, data: dict | None = None) -> None:
        super().__init__(message)
        self.data = data or {}


class Parts:
    """A phase's independent measurements: each one's failure is recorded, and the
    others still run and keep their figures (the first GPU run lost a whole phase's
    figures to its last part)."""

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

    def finish(self) -> dict[str, Any]:
        if self.failures:
            raise CheckFailed("; ".join(self.failures), self.out)
        return self.out


# -- helpers shared by the phases --------------------------------------------------------------


def _dry() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def _cuda():
    from numba import cuda  # noqa: PLC0415

    return cuda


def _params(dtype: np.dtype):
    """The kernel's tile parameters: production on a GPU, tiny ones on the simulator."""
    from outofcore.cuda.kernels import PRODUCTION, TileParams  # noqa: PLC0415

    if _dry():
        return TileParams(bm=8, bn=8, bk=4, tm=2, tn=2)
    return PRODUCTION[np.dtype(dtype)]


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _wide(dtype: str) -> np.dtype:
    return np.dtype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)


def _bound(a: np.ndarray, b: np.ndarray, c0: np.ndarray | None, dtype: str) -> np.ndarray:
    """Elementwise worst-case rounding bound of ``c0 + a @ b`` in ``dtype``: ~k·u·(|a||b| + |c0|).

    Complex products round each part: the factor 4 covers a complex multiply-add.
    """
    k = a.shape[1]
    factor = 4.0 if np.dtype(dtype).kind == "c" else 1.0
    mag = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    if c0 is not None:
        mag = mag + np.abs(c0).astype(np.float64)
    return factor * (k + 2) * EPS[dtype] * mag + np.finfo(np.float64).tiny


def median_event_ms(fn: Callable[[], Any], repeats: int, sync: Callable[[], None]) -> float:
    """Median milliseconds of ``fn`` between two CUDA events, after one warm-up call."""
    cuda = _cuda()
    fn()
    sync()
    times = []
    for _ in range(repeats):
        start, stop = cuda.event(), cuda.event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def _wall_ms(fn: Callable[[], Any], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _cupy():
    """CuPy, or None where it is not installed (the dry run compares with numpy instead)."""
    if _dry():
        return None
    try:
        import cupy  # noqa: PLC0415
    except ImportError:
        return None
    return cupy


def _reference(a: np.ndarray, b: np.ndarray, dtype: str) -> np.ndarray:
    """``a @ b`` in float64 (complex128): cuBLAS through CuPy on a GPU, numpy otherwise."""
    wide = _wide(dtype)
    cp = _cupy()
    if cp is None:
        return a.astype(wide) @ b.astype(wide)
    return cp.asnumpy(cp.asarray(a).astype(wide) @ cp.asarray(b).astype(wide))


def _run(cmd: list[str], timeout: float, env: dict | None = None) -> dict:
    """Run ``cmd``; return its exit status, seconds and output tail (raise on a timeout)."""
    t0 = time.perf_counter()
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


def _cli(*args: str, timeout: float = 120) -> dict:
    result = _run([sys.executable, "-m", "outofcore.cli", *args], timeout)
    if result["rc"] != 0:
        raise CheckFailed(f"outofcore {' '.join(args)} exited {result['rc']}: {result['tail']}")
    return result


# -- the phases ------------------------------------------------------------------------------


def phase_env() -> dict:
    """What this node is: GPU, driver, link, versions, and each kernel as compiled here."""
    from importlib import metadata  # noqa: PLC0415

    out: dict[str, Any] = {"python": sys.version.split()[0], "simulator": _dry()}
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
    cuda = _cuda()
    smi = shutil.which("nvidia-smi")
    if smi:
        fields = (
            "name,driver_version,memory.total,pcie.link.gen.current,pcie.link.gen.max,"
            "pcie.link.width.current,pcie.link.width.max,clocks.max.sm,clocks.max.mem,"
            "power.limit,compute_mode"
        )
        query = _run([smi, f"--query-gpu={fields}", "--format=csv,noheader"], 20)
        out["nvidia_smi"] = dict(
            zip(fields.split(","), query["tail"].strip().split(", "), strict=False)
        )
    if not _dry():
        device = cuda.get_current_device()
        name = device.name.decode() if isinstance(device.name, bytes) else device.name
        out["device"] = {
            "name": name,
            "compute_capability": list(device.compute_capability),
            "multiprocessors": device.MULTIPROCESSOR_COUNT,
        }
        free, total = cuda.current_context().get_memory_info()
        out["device"].update(free_bytes=int(free), total_bytes=int(total))
    from outofcore.cuda import kernels  # noqa: PLC0415

    compiled = {}
    for name in DTYPES:
        dtype = np.dtype(name)
        params = _params(dtype)
        a = cuda.to_device(np.ones((1, 1), dtype))
        c = cuda.device_array((1, 1), dtype)
        t0 = time.perf_counter()
        kernels.launch(a, a, c, False, params=params)
        cuda.synchronize()
        row = {"params": str(params), "compile_and_launch_s": time.perf_counter() - t0}
        if not _dry():
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
    if _dry():
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
    from outofcore.cuda import kernels  # noqa: PLC0415

    cuda = _cuda()
    rng = np.random.default_rng(20261126)
    rows = []
    worst: dict[str, float] = {}
    for name in DTYPES:
        dtype = np.dtype(name)
        params = _params(dtype)
        for m, n, k in _shapes():
            a, b = _random(rng, (m, k), name), _random(rng, (k, n), name)
            c0 = _random(rng, (m, n), name)
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
                err = np.abs(got.astype(_wide(name)) - expected)
                bound = _bound(a, b, c0 if accumulate else None, name)
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
    from outofcore.cuda import kernels  # noqa: PLC0415

    cuda = _cuda()
    m, n, k = (37, 23, 5) if _dry() else (131101, 32771, 24)
    params = _params(np.float32)
    rng = np.random.default_rng(7)
    a, b = _random(rng, (m, k), "float32"), _random(rng, (k, n), "float32")
    cp = _cupy()
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
    ratio = float(np.max(np.abs(got - expected) / _bound(a[rows], b, None, "float32")))
    if nan_count:
        raise CheckFailed(f"{m}x{n} C: {nan_count} elements never written (still NaN)")
    if ratio > 1:
        raise CheckFailed(f"{m}x{n} C: rows {rows} off by {ratio:.2f} times the bound")
    return {"shape": [m, n, k], "elements": m * n, "seconds": seconds, "error_over_bound": ratio}


def phase_kernel() -> dict:
    """Our kernel against cuBLAS per dtype (CUDA events), results compared."""
    from outofcore.cuda import kernels  # noqa: PLC0415

    cuda = _cuda()
    cp = _cupy()
    if _dry():
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
        params = _params(dtype)
        rng = np.random.default_rng(size)
        a = cuda.to_device(_random(rng, (size, size), name))
        b = cuda.to_device(_random(rng, (size, size), name))
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
    if not _dry():  # the textbook kernel, once, for scale
        size = 4096
        a = cuda.to_device(_random(np.random.default_rng(1), (size, size), "float32"))
        c = cuda.device_array((size, size), np.float32)
        ms = median_event_ms(lambda: kernels.launch_reference(a, a, c, False), 2, cuda.synchronize)
        rows.append(
            {
                "dtype": "float32",
                "size": size,
                "textbook_ms": ms,
                "textbook_gflops": 2.0 * size**3 / ms / 1e6,
            }
        )
    return {"rows": rows}


def phase_bandwidth() -> dict:
    """Host<->device copies of one buffer: pinned and pageable, GB/s."""
    cuda = _cuda()
    nbytes = (1 << 20) if _dry() else (1 << 30)
    repeats = 2 if _dry() else 5
    pinned = cuda.pinned_array(nbytes, dtype=np.uint8)
    pageable = np.empty(nbytes, dtype=np.uint8)
    pinned[:] = 1
    pageable[:] = 1
    dev = cuda.device_array(nbytes, dtype=np.uint8)
    out = {"bytes": nbytes}
    for label, host in (("pinned", pinned), ("pageable", pageable)):
        h2d = median_event_ms(lambda h=host: dev.copy_to_device(h), repeats, cuda.synchronize)
        d2h = median_event_ms(lambda h=host: dev.copy_to_host(h), repeats, cuda.synchronize)
        out[f"{label}_h2d_gb_s"] = nbytes / h2d / 1e6
        out[f"{label}_d2h_gb_s"] = nbytes / d2h / 1e6
    return out


def phase_engine() -> dict:
    """One tile through the engine against its copies alone and its kernels alone."""
    from outofcore.cuda import kernels  # noqa: PLC0415
    from outofcore.cuda.engine import CudaEngine  # noqa: PLC0415

    cuda = _cuda()
    dtype = np.dtype(np.float32)
    m, n, k, panel = (24, 16, 16, 8) if _dry() else (8192, 8192, 8192, 1024)
    repeats = 1 if _dry() else 3
    params = None if not _dry() else _params(dtype)
    rng = np.random.default_rng(3)
    a_host = cuda.pinned_array((m, k), dtype)
    b_host = cuda.pinned_array((k, n), dtype)
    a_host[...] = rng.standard_normal((m, k))
    b_host[...] = rng.standard_normal((k, n))
    panels = [(a_host[:, s : s + panel], b_host[s : s + panel]) for s in range(0, k, panel)]
    # Panels as a tile task holds them: each one contiguous in its own pinned buffer.
    contiguous = []
    for a_p, b_p in panels:
        a_c = cuda.pinned_array(a_p.shape, dtype)
        a_c[...] = a_p
        contiguous.append((a_c, b_p))
    expected_rows = a_host[:4].astype(np.float64) @ b_host.astype(np.float64)

    host_cpu: dict[int, list[float]] = {}

    def run(engine, pairs) -> np.ndarray:
        engine.start_tile((m, n), dtype)
        for a_p, b_p in pairs:
            t0 = time.process_time()
            engine.accumulate(a_p, b_p)
            host_cpu.setdefault(id(engine), []).append(time.process_time() - t0)
        return engine.finish_tile()

    def host_ms(engine) -> float:
        """Median host CPU time of one accumulate (packing and issuing copies; not waits)."""
        return statistics.median(host_cpu[id(engine)]) * 1e3

    out: dict[str, Any] = {"tile": [m, n, k], "panel": panel}
    # Sub-tiled: a device budget of a quarter of C (the simulator's tiny tiles need 1 KiB).
    bound = _bound(a_host[:4], b_host, None, "float32")

    def measure(label: str, pairs, device_memory: int | None) -> dict[str, Any]:
        engine = CudaEngine("cuda", params=params, device_memory=device_memory)
        ms = _wall_ms(lambda: run(engine, pairs), repeats)
        result = run(engine, pairs)
        ratio = float(np.max(np.abs(result[:4] - expected_rows) / bound))
        if ratio > 1:
            raise CheckFailed(f"engine {label}: rows off by {ratio:.2f} times the bound")
        plan = engine.device_plan
        return {
            "ms": ms,
            "gflops": 2.0 * m * n * k / ms / 1e6,
            "h2d_bytes": engine.transfer_bytes["h2d"],
            "d2h_bytes": engine.transfer_bytes["d2h"],
            "device_tile": [plan.dm, plan.dn, plan.dk],
            "host_cpu_ms_per_panel": host_ms(engine),
            "copy_layouts": dict(getattr(engine, "copy_layouts", {})),
        }

    # A transposed A panel (a strided view of A as stored), as --transpose-a and Gram tiles.
    at_host = cuda.pinned_array((k, m), dtype)
    at_host[...] = a_host.T
    transposed = [
        (at_host[s : s + panel].T, b_p)
        for s, (_, b_p) in zip(range(0, k, panel), panels, strict=True)
    ]
    quarter = 1024 if _dry() else m * n * dtype.itemsize // 4  # sub-tiled: a quarter of C
    parts = Parts(out)
    parts.run("resident", lambda: measure("resident", contiguous, None))
    parts.run("sub_tiled", lambda: measure("sub_tiled", contiguous, quarter))
    parts.run("transposed_a", lambda: measure("transposed_a", transposed, None))
    # The parts alone: the copies of every panel on one stream, the kernels on device data.
    dev_a = cuda.device_array((m, panel), dtype)
    dev_b = cuda.device_array((panel, n), dtype)
    dev_c = cuda.device_array((m, n), dtype)

    def copies() -> None:
        for a_p, b_p in contiguous:
            dev_a.copy_to_device(a_p)
            dev_b.copy_to_device(b_p)

    def compute() -> None:
        for _ in contiguous:
            kernels.launch(dev_a, dev_b, dev_c, True, params=params)

    def alone() -> dict[str, Any]:
        copies_ms = median_event_ms(copies, repeats, cuda.synchronize)
        kernels_ms = median_event_ms(compute, repeats, cuda.synchronize)
        figures = {"copies_alone_ms": copies_ms, "kernels_alone_ms": kernels_ms}
        figures["serial_ms"] = copies_ms + kernels_ms
        figures["perfect_ms"] = max(copies_ms, kernels_ms)
        resident = out.get("resident", {}).get("ms")
        if resident is not None:
            figures["resident_over_perfect"] = resident / figures["perfect_ms"]
        return figures

    parts.run("overlap", alone)
    return parts.finish()


def _dry_job(folder: Path, a_url: str, b_url: str, c_url: str) -> dict:
    """The dry run's matmul: run_job in this process on the simulator with tiny kernel tiles."""
    from outofcore.api import run_job  # noqa: PLC0415
    from outofcore.cuda.engine import CudaEngine  # noqa: PLC0415
    from outofcore.worker_context import worker_context  # noqa: PLC0415

    engines = worker_context().thread().engines
    engines["cuda"] = CudaEngine("cuda", params=_params(np.float32))
    t0 = time.perf_counter()
    result = run_job(
        a_url,
        b_url,
        c_url,
        memory="1MiB",
        backend="cuda",
        client="sync",
        progress=False,
        tile=(8, 12),
        tk=8,
        device_memory=1024,
    )
    return {"s": time.perf_counter() - t0, "tasks": len(result.plan.tasks)}


def phase_job() -> dict:
    """``random`` -> ``matmul --backend cuda --gpus 0`` -> ``verify``, resident and sub-tiled."""
    folder = Path(tempfile.mkdtemp(prefix="gpu-check-job-"))
    try:
        a, b = str(folder / "a.zarr"), str(folder / "b.zarr")
        shape_a, shape_b, chunks = (
            ("21,17", "17,23", "4,4") if _dry() else ("8192,6144", "6144,7168", "2048,2048")
        )
        out: dict[str, Any] = {"a": shape_a, "b": shape_b, "chunks": chunks}
        out["random_s"] = sum(
            _cli("random", path, "--shape", shape, "--chunks", chunks, "--seed", str(seed))["s"]
            for path, shape, seed in ((a, shape_a, 1), (b, shape_b, 2))
        )
        runs = {
            "resident": ([], b),
            "sub_tiled": (["--device-memory", "64MiB"], b),
            "transposed_a": (["--transpose-a"], a),  # A.T @ A: every panel arrives transposed
        }
        keep = ("tasks", "gflops", "seconds", "compute_seconds", "read_wait_seconds",
                "write_seconds", "peak_worker_bytes", "phases", "device")  # fmt: skip

        def job(label: str, extra: list[str], second: str) -> dict[str, Any]:
            c = str(folder / f"c_{label}.zarr")
            if _dry():
                row = _dry_job(folder, a, b, c)
            else:
                options = ["--memory", "1GiB", "--no-dashboard", "--json", *extra]
                command = ["matmul", a, second, "-o", c, "--backend", "cuda", "--gpus", "0"]
                result = _cli(*command, *options, timeout=60)
                row = {"s": result["s"], "stderr_tail": result["tail"][-800:]}
                with contextlib.suppress(ValueError):
                    summary = json.loads(result["stdout"][result["stdout"].index("{") :])
                    row["summary"] = {key: summary[key] for key in keep if key in summary}
            transposes = [flag for flag in extra if flag.startswith("--transpose")]
            row["verify_s"] = _cli("verify", a, second, c, *transposes, timeout=60)["s"]
            return row

        parts = Parts(out)
        for label, (extra, second) in runs.items():
            if _dry() and "--transpose-a" in extra:
                continue  # tests/cuda runs transposed jobs on the simulator
            parts.run(label, lambda label=label, extra=extra, second=second: job(
                label, extra, second))  # fmt: skip
        return parts.finish()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def phase_cluster() -> dict:
    """The cluster ``--gpus 0`` starts, and its worker's memory before and after the engine."""
    out: dict[str, Any] = {}
    if _dry():
        out["note"] = "no GPU: the cluster is not started in a dry run"
        return out
    from scheduler.cluster import open_executor  # noqa: PLC0415

    def rss() -> int:
        import psutil  # noqa: PLC0415

        return int(psutil.Process().memory_info().rss)

    def engine_rss() -> dict:
        import numpy  # noqa: PLC0415

        import outofcore.cuda as ooc_cuda  # noqa: PLC0415

        before = rss()
        engine = ooc_cuda.make_engine("cuda")
        after_engine = rss()
        engine.start_tile((256, 256), numpy.float32)
        engine.accumulate(
            numpy.ones((256, 64), numpy.float32), numpy.ones((64, 256), numpy.float32)
        )
        tile = engine.finish_tile()
        return {
            "before": before,
            "after_engine": after_engine,
            "after_tile": rss(),
            "tile_ok": bool((tile == 64).all()),
        }

    t0 = time.perf_counter()
    with open_executor(None, budget_bytes=256 << 20, gpus=(0,)) as executor:
        out["start_s"] = time.perf_counter() - t0
        out["kind"] = type(getattr(executor.client, "cluster", None)).__name__
        shape = executor.worker_shape()
        out["workers"] = shape.workers
        out["memory_limits"] = [limit for _, limit, _ in shape.memory_limits]
        out["worker_rss"] = list(executor.client.run(engine_rss).values())
    if not all(r["tile_ok"] for r in out["worker_rss"]):
        raise CheckFailed(f"a worker's engine tile was wrong: {out['worker_rss']}")
    return out


def sanitizer_workload() -> None:
    """Small launches of every production kernel and one sub-tiled engine tile."""
    from outofcore.cuda import kernels  # noqa: PLC0415
    from outofcore.cuda.engine import CudaEngine  # noqa: PLC0415

    cuda = _cuda()
    rng = np.random.default_rng(5)
    for name in DTYPES:
        dtype = np.dtype(name)
        m, n, k = (7, 5, 3) if _dry() else (131, 67, 19)
        a, b = _random(rng, (m, k), name), _random(rng, (k, n), name)
        c = cuda.to_device(_random(rng, (m, n), name))
        kernels.launch(cuda.to_device(a), cuda.to_device(b), c, True, params=_params(dtype))
    cuda.synchronize()
    engine = CudaEngine(
        "cuda",
        params=_params(np.float32) if _dry() else None,
        device_memory=1200 if _dry() else 200_000,
    )
    m, n, k = (12, 10, 4) if _dry() else (300, 260, 40)
    engine.start_tile((m, n), np.float32)
    for _ in range(2):
        engine.accumulate(_random(rng, (m, k), "float32"), _random(rng, (k, n), "float32"))
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
    workload = [sys.executable, "-m", "outofcore.cuda.check", "--phase", "sanitizer_workload"]
    if _dry():
        result = _run(workload, 60)
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
            result = _run(cmd, min(60, left))
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
    if _dry():
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
        "tests/scheduler/test_gpu_cluster.py",
        "--ignore=tests/cuda/test_gpu_check.py",  # the dry run: CI's, on the simulator
    ]
    if importlib.util.find_spec("pytest_timeout"):
        cmd.append("--timeout=60")
    result = _run(cmd, max(10, deadline - time.monotonic() - 5), env=env)
    print(result["stdout"])  # the whole report, into the log
    last = result["tail"].strip().splitlines()[-1] if result["tail"].strip() else ""
    if result["rc"]:
        raise CheckFailed(f"pytest exited {result['rc']}: {result['tail']}")
    return {"s": result["s"], "result": last}


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
            "outofcore.cuda.check",
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
        prog="python -m outofcore.cuda.check", description=__doc__.split("\n")[0]
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


if __name__ == "__main__":
    sys.exit(main())

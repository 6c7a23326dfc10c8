"""The GPU check's engine phases: ``bandwidth`` (host<->device copies), ``engine`` (one
tile against its copies and kernels alone) and ``cluster`` (the GPU cluster).  The job
phases are in :mod:`tools.gpu_check.job_phases`.

Each runs in a process of its own, started by :mod:`tools.gpu_check`.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from benchmarks.harness.timing import median_event_ms
from tools.gpu_check.common import (
    CheckFailed,
    Parts,
    dry_run,
    numba_cuda,
    rounding_bound,
    tile_params,
    wall_ms,
)


def phase_bandwidth() -> dict:
    """Host<->device copies of one buffer: pinned and pageable, GB/s."""
    cuda = numba_cuda()
    nbytes = (1 << 20) if dry_run() else (1 << 30)
    repeats = 2 if dry_run() else 5
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
    from outofcore.backends.cuda import kernels  # noqa: PLC0415
    from outofcore.backends.cuda.engine import CudaEngine  # noqa: PLC0415

    cuda = numba_cuda()
    dtype = np.dtype(np.float32)
    m, n, k, panel = (24, 16, 16, 8) if dry_run() else (8192, 8192, 8192, 1024)
    repeats, params = (1, tile_params(dtype)) if dry_run() else (3, None)
    a_host, b_host, contiguous, transposed = _host_panels(cuda, dtype, (m, n, k), panel)
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
    bound = rounding_bound(a_host[:4], b_host, None, "float32")

    def measure(label: str, pairs, device_memory: int | None) -> dict[str, Any]:
        engine = CudaEngine("cuda", params=params, device_memory=device_memory)
        ms = wall_ms(lambda: run(engine, pairs), repeats)
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

    # Sub-tiled: a device budget of a quarter of C (the simulator's tiny tiles need 1 KiB).
    quarter = 1024 if dry_run() else m * n * dtype.itemsize // 4
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


def _host_panels(cuda: Any, dtype: np.dtype, shape: tuple[int, int, int], panel: int) -> tuple:
    """Seeded A and B in pinned memory, and their panels as a tile task holds them: each A
    panel contiguous in its own pinned buffer, and transposed (a strided view of A as
    stored, as --transpose-a and Gram tiles read it)."""
    m, n, k = shape
    rng = np.random.default_rng(3)
    a_host = cuda.pinned_array((m, k), dtype)
    b_host = cuda.pinned_array((k, n), dtype)
    a_host[...] = rng.standard_normal((m, k))
    b_host[...] = rng.standard_normal((k, n))
    panels = [(a_host[:, s : s + panel], b_host[s : s + panel]) for s in range(0, k, panel)]
    contiguous = []
    for a_p, b_p in panels:
        a_c = cuda.pinned_array(a_p.shape, dtype)
        a_c[...] = a_p
        contiguous.append((a_c, b_p))
    at_host = cuda.pinned_array((k, m), dtype)
    at_host[...] = a_host.T
    transposed = [
        (at_host[s : s + panel].T, b_p)
        for s, (_, b_p) in zip(range(0, k, panel), panels, strict=True)
    ]
    return a_host, b_host, contiguous, transposed


def phase_cluster() -> dict:
    """The cluster ``--gpus 0`` starts, and its worker's memory before and after the engine."""
    out: dict[str, Any] = {}
    if dry_run():
        out["note"] = "no GPU: the cluster is not started in a dry run"
        return out
    from outofcore.backends.cuda.workers import CUDA_NODE  # noqa: PLC0415
    from outofcore.runtime.cluster import open_executor  # noqa: PLC0415

    def rss() -> int:
        import psutil  # noqa: PLC0415

        return int(psutil.Process().memory_info().rss)

    def engine_rss() -> dict:
        import numpy  # noqa: PLC0415

        import outofcore.backends.cuda as ooc_cuda  # noqa: PLC0415

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
    with open_executor(None, budget_bytes=256 << 20, gpus=(0,), node=CUDA_NODE) as executor:
        out["start_s"] = time.perf_counter() - t0
        out["kind"] = type(getattr(executor.client, "cluster", None)).__name__
        shape = executor.worker_shape()
        out["workers"] = shape.workers
        out["memory_limits"] = [limit for _, limit, _ in shape.memory_limits]
        out["worker_rss"] = list(executor.client.run(engine_rss).values())
    if not all(r["tile_ok"] for r in out["worker_rss"]):
        raise CheckFailed(f"a worker's engine tile was wrong: {out['worker_rss']}")
    return out

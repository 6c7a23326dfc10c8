"""GPU benchmark: our numba kernel against cuBLAS (through CuPy) on the same arrays.

Run on a GPU node (see docs/gpu.md)::

    python -m benchmarks.gpu                      # 4096 and 8192, float32 and float64
    python -m benchmarks.gpu --sizes 2048 4096 8192 16384 --repeats 20 --json out.json
    python -m benchmarks.gpu --engine             # also the tile engine, panels from host

Each product is timed with CUDA events around the launch alone (inputs already
on the device), after one warm-up run that compiles the kernel; the median of
``--repeats`` runs is reported, with GFLOP/s = 2·m·n·k / time and the fraction
of cuBLAS's GFLOP/s on the same arrays in the same run.  The results of the
two are compared, so a fast wrong kernel cannot pass unnoticed.

``--engine`` times the tile engine end to end for one tile: k-panels copied
from pinned host memory while the previous panel multiplies, C copied back.

Internal floor: it times ``outofcore.backends.cuda``'s kernels and engine themselves
(``tools.gpu_check.common`` for the CUDA-event timing).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from benchmarks.harness.reports import save_json

#: Largest dimension the textbook kernel (--reference) is timed at.
REFERENCE_MAX = 4096


def allowed_error(k: int, dtype) -> float:
    """Relative difference a right result stays within: 4·k·u (u: unit round-off)."""
    return 4 * k * float(np.finfo(np.dtype(dtype)).eps) / 2


def flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


def time_events(cuda, fn, repeats: int) -> float:
    """Median seconds of ``fn()`` between two CUDA events on the default stream, after a
    warm-up (and compilation): the GPU check's timer."""
    from benchmarks.harness.timing import median_event_ms

    return median_event_ms(fn, repeats, cuda.synchronize) / 1e3


def bench_kernel(cuda, cupy, size: tuple[int, int, int], dtype, repeats: int, reference: bool):
    """Time our kernel (and cuBLAS, and optionally the textbook kernel) on one shape."""
    from outofcore.backends.cuda import kernels
    from outofcore.backends.cuda.reference import launch_reference

    m, n, k = size
    rng = np.random.default_rng(0)
    a = cuda.to_device(rng.standard_normal((m, k)).astype(dtype))
    b = cuda.to_device(rng.standard_normal((k, n)).astype(dtype))
    c = cuda.device_array((m, n), dtype=dtype)
    row = {"m": m, "n": n, "k": k, "dtype": np.dtype(dtype).name}
    t_ours = time_events(cuda, lambda: kernels.launch(a, b, c, False), repeats)
    row["ours_ms"] = t_ours * 1e3
    row["ours_gflops"] = flops(m, n, k) / t_ours / 1e9
    rows = min(m, 32)  # a few rows against numpy in float64
    expected = a[:rows].copy_to_host().astype(np.float64) @ b.copy_to_host().astype(np.float64)
    got = c[:rows].copy_to_host()
    row["max_rel_err_vs_numpy"] = float(np.abs(got - expected).max() / np.abs(expected).max())
    if reference and max(m, n, k) <= REFERENCE_MAX:  # the textbook kernel takes minutes past it
        c_ref = cuda.device_array((m, n), dtype=dtype)
        t_ref = time_events(
            cuda, lambda: launch_reference(a, b, c_ref, False), max(1, repeats // 4)
        )
        row["reference_gflops"] = flops(m, n, k) / t_ref / 1e9
    if cupy is not None:
        ca, cb = cupy.asarray(a), cupy.asarray(b)
        cc = cupy.empty((m, n), dtype=dtype)
        t_blas = time_events(cuda, lambda: cupy.matmul(ca, cb, out=cc), repeats)
        cupy.cuda.Device().synchronize()
        row["cublas_ms"] = t_blas * 1e3
        row["cublas_gflops"] = flops(m, n, k) / t_blas / 1e9
        row["fraction_of_cublas"] = row["ours_gflops"] / row["cublas_gflops"]
        ours = cupy.asarray(c)
        scale = float(cupy.abs(cc).max()) or 1.0
        row["max_rel_diff_vs_cublas"] = float(cupy.abs(ours - cc).max()) / scale
    return row


def bench_engine(size: tuple[int, int, int], panel_k: int, dtype, repeats: int) -> dict:
    """Time one tile through the engine: host panels in, host C out."""
    import outofcore.backends.cuda as ooc_cuda

    m, n, k = size
    engine = ooc_cuda.make_engine("cuda")
    rng = np.random.default_rng(1)
    a_buf = engine.host_buffer(m * panel_k, dtype)
    b_buf = engine.host_buffer(panel_k * n, dtype)
    a_buf[...] = rng.standard_normal(a_buf.size)
    b_buf[...] = rng.standard_normal(b_buf.size)
    steps = -(-k // panel_k)

    def tile() -> None:
        engine.start_tile((m, n), dtype)
        for s in range(steps):
            w = min(panel_k, k - s * panel_k)
            engine.accumulate(a_buf[: m * w].reshape(m, w), b_buf[: w * n].reshape(w, n))
        engine.finish_tile()

    tile()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        tile()
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    return {
        "m": m,
        "n": n,
        "k": k,
        "panel_k": panel_k,
        "dtype": np.dtype(dtype).name,
        "engine_s": t,
        "engine_gflops": flops(m, n, k) / t / 1e9,
        "h2d_gb_per_s": (m * k + k * n) * np.dtype(dtype).itemsize / t / 1e9,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--shape", type=int, nargs=3, metavar=("M", "N", "K"), action="append")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--reference", action="store_true", help="also the textbook kernel")
    parser.add_argument("--engine", action="store_true", help="also the tile engine")
    parser.add_argument("--panel-k", type=int, default=1024)
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args(argv)

    import outofcore.backends.cuda as ooc_cuda

    if not ooc_cuda.is_available():
        print("no CUDA GPU here: run this on a GPU node", file=sys.stderr)
        return 2
    from numba import cuda

    try:
        import cupy

        if ooc_cuda.simulator_enabled():  # no real device for cuBLAS
            cupy = None
    except ImportError:
        cupy = None
        print("CuPy not installed: no cuBLAS comparison (pip install 'outofcore[cupy]')")

    shapes = [(s, s, s) for s in args.sizes] + [tuple(s) for s in args.shape or []]
    if not ooc_cuda.simulator_enabled():
        device = cuda.get_current_device()
        print(f"device: {device.name.decode() if isinstance(device.name, bytes) else device.name}")
    rows = []
    wrong = []
    header = (
        f"{'m x n x k':>20} {'dtype':>8} {'ours ms':>9} {'GFLOP/s':>9} {'cuBLAS':>9} {'frac':>6}"
    )
    print(header)
    for dtype in args.dtypes:
        for shape in shapes:
            row = bench_kernel(cuda, cupy, shape, np.dtype(dtype), args.repeats, args.reference)
            rows.append(row)
            allowed = allowed_error(shape[2], dtype)
            for key in ("max_rel_err_vs_numpy", "max_rel_diff_vs_cublas"):
                if key in row and not row[key] <= allowed:  # NaN fails too
                    wrong.append(f"{dtype} {shape}: {key} = {row[key]:.2e} > {allowed:.2e}")
            frac = row.get("fraction_of_cublas")
            print(
                f"{'x'.join(map(str, shape)):>20} {dtype:>8} {row['ours_ms']:9.2f} "
                f"{row['ours_gflops']:9.0f} {row.get('cublas_gflops', float('nan')):9.0f} "
                f"{frac if frac is not None else float('nan'):6.1%}"
                + (
                    f"  (textbook {row['reference_gflops']:.0f})"
                    if "reference_gflops" in row
                    else ""
                )
                + f"  rel err {row['max_rel_err_vs_numpy']:.1e}"
                + (
                    f", vs cuBLAS {row['max_rel_diff_vs_cublas']:.1e}"
                    if "max_rel_diff_vs_cublas" in row
                    else ""
                )
            )
            if args.engine:
                erow = bench_engine(shape, args.panel_k, np.dtype(dtype), max(1, args.repeats // 2))
                rows.append(erow)
                print(
                    f"{'engine':>20} {dtype:>8} {erow['engine_s'] * 1e3:9.2f} "
                    f"{erow['engine_gflops']:9.0f}  panels of k={args.panel_k}, "
                    f"H2D {erow['h2d_gb_per_s']:.1f} GB/s"
                )
    if args.json:
        save_json(args.json, rows)
    for line in wrong:
        print(f"WRONG: {line}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())

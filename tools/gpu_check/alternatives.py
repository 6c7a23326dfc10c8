"""The GPU check's ``alternatives`` phase: what a user with the node could run instead of
outofcore, on the job phase's data (8192x6144 @ 6144x7168 float32, 2048^2 zstd chunks).

* ``plain_cupy``: the ten-line script, zarr -> numpy -> ``cupy.matmul`` -> zarr
  (:func:`plain_cupy`);
* ``tiled_cupy``: the same by hand in square tiles under a device cap
  (:func:`tiled_cupy`);
* ``dask_cupy``: ``dask.array`` with cupy blocks (:func:`dask_cupy`);
* ``outofcore_cupy``: ``outofcore matmul --backend cupy --gpus 0`` under the same cap;
* ``numpy`` and ``outofcore_cpu``: numpy's BLAS on the node's cores (:func:`numpy_script`)
  against ``outofcore matmul --backend cpu`` on the same cores.

Each runs in a fresh process, so every one pays its interpreter, imports and (for the
GPU) context as a user's command would.  Without CuPy (the dry run, or a node without
it) the cupy ones are recorded ``skipped: no cupy``.  Outputs are checked against
numpy's (:func:`benchmarks.harness.checking.compare_outputs`).
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from tools.gpu_check.common import CheckFailed, Parts, cli_job, cupy_or_none, dry_run, python_call
from tools.gpu_check.job_phases import make_arrays

#: The device cap of the hand-tiled script and of outofcore's cupy job (dry run: 1 KiB).
DEVICE_CAP = 2 << 30
SHAPES = {"a": ("8192,6144", "2048,2048"), "b": ("6144,7168", "2048,2048")}
DRY_SHAPES = {"a": ("40,24", "8,8"), "b": ("24,32", "8,8")}
#: Our runs: their failure fails the phase (a rival's is recorded in ``rival_failures``).
OURS = ("outofcore_cpu:", "outofcore_cupy:", "numpy:")


def _write(out: str, values: Any, chunks: tuple[int, int]) -> None:
    """``values`` as a new zarr array at ``out``, uncompressed as outofcore's default."""
    import zarr  # noqa: PLC0415

    array = zarr.create_array(
        out, shape=values.shape, chunks=chunks, dtype=values.dtype, compressors=None
    )
    array[...] = values


def numpy_script(a_path: str, b_path: str, out: str) -> dict:
    """zarr -> numpy -> ``numpy.matmul`` (BLAS on every core) -> zarr; seconds of each."""
    import numpy as np  # noqa: PLC0415
    import zarr  # noqa: PLC0415

    t0 = time.perf_counter()
    a, b = (zarr.open_array(p, mode="r") for p in (a_path, b_path))
    a_host, b_host = a[...], b[...]
    t1 = time.perf_counter()
    c = np.matmul(a_host, b_host)
    t2 = time.perf_counter()
    _write(out, c, a.chunks[:1] + b.chunks[1:])
    t3 = time.perf_counter()
    return {"read_s": t1 - t0, "matmul_s": t2 - t1, "write_s": t3 - t2, "s": t3 - t0}


def plain_cupy(a_path: str, b_path: str, out: str) -> dict:
    """zarr -> numpy -> ``cupy.matmul`` -> zarr: the whole product on the device at once."""
    import cupy as cp  # noqa: PLC0415
    import zarr  # noqa: PLC0415

    t0 = time.perf_counter()
    a, b = (zarr.open_array(p, mode="r") for p in (a_path, b_path))
    a_host, b_host = a[...], b[...]
    t1 = time.perf_counter()
    c = cp.asnumpy(cp.matmul(cp.asarray(a_host), cp.asarray(b_host)))
    t2 = time.perf_counter()
    _write(out, c, a.chunks[:1] + b.chunks[1:])
    t3 = time.perf_counter()
    return {"read_s": t1 - t0, "device_s": t2 - t1, "write_s": t3 - t2, "s": t3 - t0}


def square_tile(k: int, itemsize: int, cap: int, step: int) -> int:
    """The largest tile ``t`` (a multiple of ``step``) whose A rows, B columns (whole k) and
    C tile fit ``cap`` bytes on the device: ``itemsize * (2*t*k + t*t) <= cap``."""
    t = int((-2 * k + math.sqrt(4 * k * k + 4 * cap / itemsize)) / 2)
    return max(step, t // step * step)


def tiled_cupy(a_path: str, b_path: str, out: str, cap: int) -> dict:
    """The product by hand in square tiles under ``cap`` device bytes: for each block of A's
    rows (read once), each block of B's columns is read, multiplied and its C tile written."""
    import cupy as cp  # noqa: PLC0415
    import zarr  # noqa: PLC0415

    t0 = time.perf_counter()
    a, b = (zarr.open_array(p, mode="r") for p in (a_path, b_path))
    (m, k), n = a.shape, b.shape[1]
    t = square_tile(k, a.dtype.itemsize, cap, a.chunks[0])
    c = zarr.create_array(out, shape=(m, n), chunks=(a.chunks[0], b.chunks[1]), dtype=a.dtype,
                          compressors=None)  # fmt: skip
    for r0 in range(0, m, t):
        a_dev = cp.asarray(a[r0 : r0 + t])
        for c0 in range(0, n, t):
            tile = cp.matmul(a_dev, cp.asarray(b[:, c0 : c0 + t]))
            c[r0 : r0 + t, c0 : c0 + t] = cp.asnumpy(tile)
        del a_dev
    return {"tile": t, "cap": cap, "s": time.perf_counter() - t0}


def dask_cupy(a_path: str, b_path: str, out: str) -> dict:
    """``dask.array`` with cupy blocks: from_zarr -> cupy -> matmul -> numpy -> to_zarr."""
    import cupy as cp  # noqa: PLC0415
    import dask  # noqa: PLC0415
    import dask.array as da  # noqa: PLC0415

    t0 = time.perf_counter()
    a, b = (da.from_zarr(p).map_blocks(cp.asarray) for p in (a_path, b_path))
    product = (a @ b).map_blocks(cp.asnumpy)
    with dask.config.set(scheduler="threads"):
        product.to_zarr(out, overwrite=True)
    return {"s": time.perf_counter() - t0}


def _check(out: str, reference: str, k: int) -> dict:
    from benchmarks.harness.checking import compare_outputs  # noqa: PLC0415

    report = compare_outputs(Path(out), Path(reference), k)
    if not report.get("ok"):
        raise CheckFailed(f"{out} is not numpy's product: {report}")
    return report


def phase_alternatives() -> dict:
    """Each alternative on the same data, in a fresh process, checked against numpy's."""
    folder = Path(tempfile.mkdtemp(prefix="gpu-check-alternatives-"))
    try:
        shapes = DRY_SHAPES if dry_run() else SHAPES
        paths, random_s = make_arrays(folder, shapes)
        a, b = paths["a"], paths["b"]
        k = int(shapes["a"][0].split(",")[1])
        cap = 1024 if dry_run() else DEVICE_CAP
        out: dict[str, Any] = {"shapes": shapes, "random_s": random_s, "device_cap": cap}
        from outofcore.runtime.cores import usable_cores  # noqa: PLC0415

        out["cores"] = usable_cores()
        reference = str(folder / "c_numpy.zarr")
        parts = Parts(out)
        call = "tools.gpu_check.alternatives:"
        parts.run("numpy", lambda: python_call(call + "numpy_script", a, b, reference, timeout=90))

        def outofcore(label: str, backend: str, *extra: str) -> dict:
            c = str(folder / f"c_{label}.zarr")
            row = cli_job([a, b, "-o", c, "--backend", backend, "--memory", "1GiB", *extra], 90)
            row["check"] = _check(c, reference, k)
            return row

        parts.run("outofcore_cpu", lambda: outofcore("outofcore_cpu", "cpu"))
        cupy = cupy_or_none()
        for label, target, extra in (
            ("plain_cupy", "plain_cupy", ()),
            ("tiled_cupy", "tiled_cupy", (cap,)),
            ("dask_cupy", "dask_cupy", ()),
        ):
            if cupy is None:
                out[label] = "skipped: no cupy"
                continue
            c = str(folder / f"c_{label}.zarr")

            def script(target=target, c=c, extra=extra) -> dict:
                row = python_call(call + target, a, b, c, *extra, timeout=90)
                return {**row, "check": _check(c, reference, k)}

            parts.run(label, script)
        if cupy is None:
            out["outofcore_cupy"] = "skipped: no cupy"
        else:
            options = ("--gpus", "0", "--device-memory", f"{cap >> 20}MiB")
            parts.run("outofcore_cupy", lambda: outofcore("outofcore_cupy", "cupy", *options))
        # A rival that fails is a finding to read, not a failure of ours.
        out["rival_failures"] = [f for f in parts.failures if not f.startswith(OURS)]
        parts.failures = [f for f in parts.failures if f.startswith(OURS)]
        return parts.finish()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

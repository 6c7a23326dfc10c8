"""``backend="auto"`` on a GPU picks, per compute dtype, the backend that multiplies it
fastest by the backends' rates tables, keeping our kernel while it is within
:data:`~outofcore.backends.registry.KEEP_OUR_KERNEL_WITHIN` of the fastest (issue 54, item 6:
cuBLAS through CuPy for float64 and complex128, 4x ours through DMMA).

No GPU and no CuPy here: "this machine has a GPU" is the CUDA backend with a ``usable``
that says so, and "CuPy is installed" a stand-in backend with rates of its own (the timed
device's engine, which multiplies on the host), put in the registry for the test; real
jobs then run on it, and on numba's CUDA simulator where our kernel is kept.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import outofcore
from outofcore.backends import registry
from outofcore.backends.cuda import probe
from outofcore.backends.cuda.rates import CUBLAS_FLOPS, KERNEL_FLOPS, OUR_KERNEL
from outofcore.backends.registry import (
    KEEP_OUR_KERNEL_WITHIN,
    auto_gpu_backend,
    backend_choice,
    get,
    resolve_backend,
)
from outofcore.errors import BackendError
from tests.helpers import random_matrix, write_zarr

DTYPES = ("float32", "float64", "complex64", "complex128")


def rated(name: str, flops: dict[str, float], **changes) -> registry.Backend:
    """A stand-in GPU backend ``auto`` may choose: the timed device's engine (the product
    computed on the host) with the kernel rates ``flops``."""
    rates = dataclasses.replace(get("timed").rates, kernel_flops=flops, engine=name)
    return dataclasses.replace(get("timed"), name=name, rates=rates, auto=True, **changes)


def test_with_only_our_kernel_auto_keeps_it_for_every_dtype():
    for dtype in (*DTYPES, None, "int64"):
        assert auto_gpu_backend(dtype, [get("cuda")]) == "cuda"


def test_cublas_is_chosen_by_the_measured_tables_where_ours_is_under_the_share():
    cupy = get("cupy")
    for dtype in DTYPES:
        share = KERNEL_FLOPS[dtype] / CUBLAS_FLOPS[dtype]
        expected = "cuda" if share >= KEEP_OUR_KERNEL_WITHIN else "cupy"
        assert auto_gpu_backend(dtype, [get("cuda"), cupy]) == expected, (dtype, share)
    # The split, from the measured figures: DMMA gives cuBLAS 4x in float64.
    assert auto_gpu_backend("float64", [cupy]) == "cupy"
    assert auto_gpu_backend("complex128", [cupy]) == "cupy"
    assert auto_gpu_backend(None, [cupy]) == "cuda"  # no dtype yet: ours


def test_the_share_is_the_boundary_and_the_fastest_faster_one_wins():
    ours = KERNEL_FLOPS["float32"]
    within = rated("within", {"float32": ours / KEEP_OUR_KERNEL_WITHIN * 0.999})
    beyond = rated("beyond", {"float32": ours / KEEP_OUR_KERNEL_WITHIN * 1.01})
    fastest = rated("fastest", {"float32": ours * 3})
    assert auto_gpu_backend("float32", [within]) == "cuda"
    assert auto_gpu_backend("float32", [within, beyond]) == "beyond"
    assert auto_gpu_backend("float32", [beyond, fastest, within]) == "fastest"
    # A backend with no rate for the dtype is never chosen for it.
    assert auto_gpu_backend("float64", [fastest]) == "cuda"


@pytest.fixture
def gpu_machine(monkeypatch):
    """This machine "has a GPU": the CUDA backend's probe says so (numba's simulator runs
    its kernels here)."""
    cuda = dataclasses.replace(get("cuda"), usable=lambda simulator_counts: True)
    # The registry's own table, for this test: no public way to unregister a backend.
    monkeypatch.setitem(registry._REGISTRY, "cuda", cuda)
    return monkeypatch


def test_auto_resolves_by_dtype_only_where_the_faster_backend_is_installed(gpu_machine):
    gpu_machine.setattr(probe, "cupy_installed", lambda: False)
    assert not get("cupy").installed()
    assert resolve_backend("auto", dtype="float64") == "cuda"  # CuPy absent: ours
    gpu_machine.setattr(probe, "cupy_installed", lambda: True)  # as if CuPy were there
    assert get("cupy").installed()
    assert resolve_backend("auto", dtype="float64") == "cupy"
    assert resolve_backend("auto", dtype="complex128") == "cupy"
    assert resolve_backend("auto") == "cuda"  # before the dtypes are known
    # A cluster's workers: what they have installed is not known here, so ours.
    assert resolve_backend("auto", 2, "tcp://elsewhere:8786", dtype="float64") == "cuda"
    # Asked by name, a backend is kept whatever the dtype.
    assert resolve_backend("cuda", dtype="float64") == "cuda"


def test_without_a_gpu_auto_stays_on_the_cpu_whatever_is_installed(monkeypatch):
    monkeypatch.setattr(probe, "cupy_installed", lambda: True)
    assert probe.device_count() == 0  # no GPU here; the simulator never counts for auto
    assert resolve_backend("auto", dtype="float64") == "cpu"


def test_backend_cupy_without_cupy_is_refused_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setattr(probe, "cupy_installed", lambda: False)
    rng = np.random.default_rng(54)
    write_zarr(tmp_path / "a.zarr", random_matrix(rng, (20, 12), "float64"), (8, 8))
    write_zarr(tmp_path / "b.zarr", random_matrix(rng, (12, 9), "float64"), (8, 8))
    with pytest.raises(BackendError, match=r"needs CuPy.*outofcore\[cupy\]"):
        outofcore.matmul(
            tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
            backend="cupy", client="sync",
        )  # fmt: skip
    assert not (tmp_path / "c.zarr").exists()


def test_backend_choice_says_both_rates():
    text = backend_choice("cupy", "float64")
    assert text == (
        f"cuBLAS {CUBLAS_FLOPS['float64'] / 1e12:.1f} TFLOP/s float64, our kernel "
        f"{KERNEL_FLOPS['float64'] / 1e12:.1f} "
        f"({KERNEL_FLOPS['float64'] / CUBLAS_FLOPS['float64']:.2f} of it)"
    )
    assert backend_choice("cuda", "float32") == (
        f"{OUR_KERNEL.engine} {KERNEL_FLOPS['float32'] / 1e12:.1f} TFLOP/s float32"
    )
    assert backend_choice("cpu", "float32") == ""


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_real_job_under_auto_runs_on_the_backend_its_dtype_picks(gpu_machine, tmp_path, dtype):
    """float64 goes to the faster stand-in (4x ours), float32 stays on our kernel (the
    stand-in within the share), run on numba's CUDA simulator; both give numpy's product."""
    faster = rated(
        "faster",
        {"float32": KERNEL_FLOPS["float32"] * 1.05, "float64": KERNEL_FLOPS["float64"] * 4},
    )
    gpu_machine.setitem(registry._REGISTRY, "faster", faster)
    gpu_machine.setattr(probe, "cupy_installed", lambda: False)  # cuBLAS out of the way
    rng = np.random.default_rng(541)
    a = random_matrix(rng, (37, 29), dtype)
    b = random_matrix(rng, (29, 23), dtype)
    write_zarr(tmp_path / "a.zarr", a, (16, 8))
    write_zarr(tmp_path / "b.zarr", b, (8, 16))
    c = outofcore.matmul(
        tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
        memory="64MiB", client="sync", progress=False,
    )  # fmt: skip
    summary = c.attrs["outofcore"]["summary"]
    assert summary["backend"] == ("faster" if dtype == "float64" else "cuda")
    expected = a.astype(np.float64) @ b.astype(np.float64)
    tolerance = 29 * np.finfo(dtype).eps * 4
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert np.all(np.abs(c[...] - expected) <= tolerance * scale)

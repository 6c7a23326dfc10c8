"""A GPU job is planned and predicted with its GPU's rates (issue 44, item 5).

Real zarr inputs on disk and this machine's figures injected through the probe's cache
(as tests/outofcore/machine/test_plan_prediction.py does): the plan's GPU
(:func:`outofcore.planner.gpu_rates.job_gpu_target`, from plan_job), the GPU machine of the
prediction (:func:`outofcore.machine.prediction.gpu_plan_machine`) and ``outofcore plan``'s lines.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from outofcore.backends import registry
from outofcore.backends.cuda import probe
from outofcore.backends.cuda.rates import (
    CUBLAS_FLOPS,
    DECODE_BPS_PER_THREAD,
    KERNEL_FLOPS,
    PCIE_BPS,
)
from outofcore.frontends.generate import random_array
from outofcore.jobs.inputs import open_product
from outofcore.jobs.planning import plan_job, with_predictions
from outofcore.jobs.spec import JobSpec
from outofcore.machine.prediction import gpu_plan_machine, machine_prediction
from outofcore.planner.model import predict
from outofcore.runtime.executors import WorkerShape
from outofcore.runtime.worker_sizing import local_blas_threads
from tests.helpers import cuda_device_plan, cuda_target, unwrapped
from tests.outofcore.machine.test_plan_prediction import inject, plan, plan_json
from tests.outofcore.machine.test_probe import FIGURES

MiB = 2**20
#: Four GPU workers of one thread, two BLAS (decode) threads each.
FOUR_GPUS = WorkerShape(workers=4, threads_per_worker=1, blas_threads=2, gpu_workers=4)
CPUS = WorkerShape(workers=4, threads_per_worker=1, blas_threads=2)


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """zstd inputs of several tiles, and a cache holding :data:`FIGURES` for this machine
    (for the threads of one worker and of four)."""
    random_array(tmp_path / "a.zarr", (512, 384), (64, 64), seed=1)
    random_array(tmp_path / "b.zarr", (384, 448), (64, 64), seed=2)
    random_array(tmp_path / "a16.zarr", (512, 384), (64, 64), "float16", seed=3)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for workers in (1, 4):  # no probe of this machine: the figures of a worker's threads
        inject(FIGURES, local_blas_threads(workers))
    return tmp_path


def opened(spec: JobSpec, a: str = "a.zarr"):
    return open_product(a, "b.zarr", spec)


@pytest.mark.parametrize(
    ("options", "workers", "on_gpu"),
    [
        ({"backend": "cuda"}, CPUS, True),
        ({"backend": "cupy"}, FOUR_GPUS, True),
        ({"backend": "auto", "gpus": (0, 1)}, CPUS, True),
        ({"backend": "auto"}, FOUR_GPUS, True),  # a cluster's workers declare GPUs
        ({"backend": "auto"}, CPUS, False),
        ({"backend": "cpu"}, FOUR_GPUS, False),
    ],
)
def test_the_plan_knows_whether_its_tiles_go_to_a_gpu(folder, options, workers, on_gpu):
    spec = JobSpec(memory="64MiB", **options)
    job_plan = plan_job(opened(spec), spec, workers)
    assert (job_plan.gpu is not None) is on_gpu
    assert ("gpu" in job_plan.summary()) is on_gpu


def test_the_gpu_is_the_jobs_dtype_device_budget_and_transpose(folder):
    spec = JobSpec(memory="64MiB", backend="cuda", device_memory="3MiB", transpose_b=True)
    gpu = plan_job(open_product("a16.zarr", "a16.zarr", spec), spec, FOUR_GPUS).gpu
    assert gpu.dtype == "float32"  # float16 inputs multiply in float32
    assert gpu.kernel_flops == KERNEL_FLOPS["float32"]
    assert gpu.device_memory == 3 * MiB and gpu.transposed


def test_a_gpu_jobs_tiles_are_resident_on_its_device_budget(folder):
    """160 KiB of device memory holds a 128x192 float32 C tile, not 192x192: the CPU
    plan's tiles are larger; the GPU plan's every tile stays on the device."""

    cpu_spec = JobSpec(memory="64MiB", backend="cpu")
    cpu = plan_job(opened(cpu_spec), cpu_spec, CPUS).plan
    spec = JobSpec(memory="64MiB", backend="cuda", device_memory=160 * 1024)
    gpu = plan_job(opened(spec), spec, FOUR_GPUS).plan
    shapes = {task.shape for task in gpu.tasks}
    assert all(cuda_device_plan(*s, gpu.tk, 4, 160 * 1024, k=384).resident for s in shapes)
    assert not cuda_device_plan(cpu.tm, cpu.tn, cpu.tk, 4, 160 * 1024, k=384).resident
    assert gpu.splits == 1 and len(gpu.tasks) >= 4


def test_the_gpu_prediction_uses_the_gpus_rates(folder):
    spec = JobSpec(memory="64MiB", backend="cuda")
    product = opened(spec)
    job_plan = plan_job(product, spec, FOUR_GPUS)
    machine = gpu_plan_machine(FIGURES, job_plan.plan, product, job_plan.gpu, False)
    assert machine.kernel_flops == KERNEL_FLOPS["float32"] and machine.pcie_bps == PCIE_BPS
    assert machine.decode_bps == pytest.approx(DECODE_BPS_PER_THREAD * job_plan.plan.io_concurrency)
    assert machine.disk_bps == FIGURES.disk_read_bps  # the host's disk: the probe's
    here, predicted = machine_prediction(
        product, job_plan.plan, "sync", gpus=None, backend="cuda", output_codec="none",
        gpu=job_plan.gpu,
    )  # fmt: skip
    assert predicted["rates"] == "gpu" and "37.0 TFLOP/s float32" in predicted["gpu_basis"]
    assert not here["probed_now"]  # the injected figures, not a probe of this machine
    expected = 2 * 512 * 384 * 448 / 4 / KERNEL_FLOPS["float32"]  # 4 equal tiles, 4 GPUs
    assert predicted["compute"] == pytest.approx(expected, rel=0.35)


def test_a_larger_kernel_rate_predicts_less_time(folder):
    """Compute-bound (a kernel of 1 and 2 MFLOP/s): twice the rate, half the kernel time."""
    spec = JobSpec(memory="64MiB", backend="cuda")
    product = opened(spec)
    job_plan = plan_job(product, spec, FOUR_GPUS)
    slow, fast = (replace(job_plan.gpu, kernel_flops=rate) for rate in (1e6, 2e6))
    plan_ = job_plan.plan
    slow_p = predict(plan_, gpu_plan_machine(FIGURES, plan_, product, slow, False))
    fast_p = predict(plan_, gpu_plan_machine(FIGURES, plan_, product, fast, False))
    assert slow_p.bottleneck == fast_p.bottleneck == "compute"
    assert fast_p.seconds < slow_p.seconds
    assert fast_p.compute == pytest.approx(slow_p.compute / 2)


def test_a_cpu_jobs_prediction_is_the_probes(folder):
    spec = JobSpec(memory="64MiB", backend="cpu")
    product = opened(spec)
    job_plan = with_predictions(plan_job(product, spec, CPUS), product, spec, "sync")
    measured = job_plan.predicted[0]
    assert measured["rates"] == "cpu" and "gpu_basis" not in measured
    assert measured["pcie"] == 0  # nothing crosses PCIe; BLAS at the probe's GFLOP/s
    assert measured["compute"] > 1000 * 2 * 512 * 384 * 448 / 4 / KERNEL_FLOPS["float32"]


def test_outofcore_plan_of_a_gpu_job_prints_the_gpu_basis(folder, capsys):
    out = plan(capsys, "a.zarr", "b.zarr", "--backend", "cuda", "--device-memory", "1MiB")
    assert "kernel 37.0 TFLOP/s float32, PCIe 55 GB/s, decode 0.85 GB/s a thread" in unwrapped(out)
    summary = plan_json(capsys, "a.zarr", "b.zarr", "--backend", "cuda", "--device-memory", "1MiB")
    measured = summary["predicted"][0]
    assert measured["rates"] == "gpu" and measured["pcie"] > 0
    assert summary["gpu"]["device_memory"] == MiB and summary["splits"] == 1
    cpu = plan(capsys, "a.zarr", "b.zarr", "--backend", "cpu")
    assert "TFLOP/s" not in cpu
    # --verbose: the stage table, and how many tiles each GPU keeps in flight (issue 52)
    verbose = unwrapped(plan(capsys, "a.zarr", "b.zarr", "--backend", "cuda", "--verbose"))
    assert "GPU rates: docs/gpu.md, measured on H100/H200: kernel 37.0 TFLOP/s" in verbose
    assert re.search(r"stages: kernel \S+ \S+, decode .*, PCIe .*, write .*, exposed ", verbose)
    assert "tile(s) in flight per GPU" in verbose


def test_a_gpu_target_exists_for_every_gpu_compute_dtype():
    for dtype, rate in KERNEL_FLOPS.items():
        assert cuda_target(dtype).kernel_flops == rate > 1e12


def test_backend_cupy_is_planned_and_predicted_at_cublass_rate(folder, capsys, monkeypatch):
    monkeypatch.setattr(probe, "cupy_installed", lambda: True)  # the plan imports no CuPy
    spec = JobSpec(memory="64MiB", backend="cupy")
    gpu = plan_job(opened(spec), spec, FOUR_GPUS).gpu
    assert gpu.backend == "cupy" and gpu.kernel_flops == CUBLAS_FLOPS["float32"]
    auto = JobSpec(memory="64MiB", backend="auto", gpus=(0,))
    assert plan_job(opened(auto), auto, FOUR_GPUS).gpu.backend == "cuda"  # auto picks cuda
    out = unwrapped(plan(capsys, "a.zarr", "b.zarr", "--backend", "cupy"))
    assert "cuBLAS 50.5 TFLOP/s float32" in out
    # The plan names the backend, beside our kernel's rate.
    assert "backend        cupy: cuBLAS 50.5 TFLOP/s float32, our kernel 37.0 (0.73 of it)" in out


def test_auto_on_a_gpu_with_cupy_plans_float64_on_cublas_and_says_why(folder, capsys, monkeypatch):
    """Issue 54, item 6: this machine "has a GPU" (the CUDA backend's probe says so) and
    "CuPy" (its probe): ``auto`` plans a float64 product on cuBLAS, 4x our kernel."""
    cuda = replace(registry.get("cuda"), usable=lambda simulator_counts: True)
    monkeypatch.setitem(registry._REGISTRY, "cuda", cuda)  # no public way to swap one
    monkeypatch.setattr(probe, "cupy_installed", lambda: True)
    random_array(folder / "a64.zarr", (512, 384), (64, 64), "float64", seed=5)
    random_array(folder / "b64.zarr", (384, 448), (64, 64), "float64", seed=6)
    out = unwrapped(plan(capsys, "a64.zarr", "b64.zarr", "--backend", "auto"))
    assert "backend        cupy: cuBLAS 57.3 TFLOP/s float64, our kernel 14.6 (0.25 of it)" in out
    summary = plan_json(capsys, "a64.zarr", "b64.zarr", "--backend", "auto")
    assert summary["gpu"]["backend"] == "cupy" and summary["gpu"]["engine"] == "cuBLAS"
    monkeypatch.setattr(probe, "cupy_installed", lambda: False)  # without CuPy: ours
    assert plan_json(capsys, "a64.zarr", "b64.zarr", "--backend", "auto")["gpu"]["backend"] == (
        "cuda"
    )

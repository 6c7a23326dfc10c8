"""A single GPU's job runs its worker in the job's process (issue 44, item 2), as CPU
jobs do: no GPU cluster to start and stop, no second interpreter; several GPUs, or a
process whose CUDA may number devices otherwise than ``--gpus``, keep worker processes."""

from __future__ import annotations

import os

import numpy as np
import psutil
import pytest
import zarr

from outofcore.api import run_job
from outofcore.backends import cuda as ooc_cuda
from outofcore.backends.cuda.device_choice import in_process_device
from outofcore.backends.cuda.workers import CUDA_NODE, DEVICE_ORDER, number_devices_as_nvidia_smi
from outofcore.errors import BackendError
from outofcore.runtime.cluster import runs_in_process
from tests.helpers import assert_product_close, random_matrix, write_zarr

pytestmark = pytest.mark.skipif(
    not ooc_cuda.simulator_enabled(),
    reason="runs the CUDA engine in this process: needs numba's CUDA simulator here",
)


def test_one_gpu_runs_here_only_where_devices_are_numbered_as_nvidia_smi(monkeypatch):
    name, order = DEVICE_ORDER
    monkeypatch.setenv(name, order)
    assert runs_in_process((0,), True, CUDA_NODE)
    assert not runs_in_process((0, 1), True, CUDA_NODE)  # a process (and CUDA context) a GPU
    assert not runs_in_process((0,), False, CUDA_NODE)  # the setting in-process-worker=0
    monkeypatch.setenv(name, "FASTEST_FIRST")
    assert not runs_in_process((3,), True, CUDA_NODE)
    monkeypatch.delenv(name)
    assert not runs_in_process((0,), True, CUDA_NODE)
    monkeypatch.setenv(name, order)
    assert not runs_in_process((0,), True)  # no GPU backend's node: its worker is a process
    environ: dict[str, str] = {}
    number_devices_as_nvidia_smi(environ)
    assert environ == {name: order}
    kept = {name: "FASTEST_FIRST"}
    number_devices_as_nvidia_smi(kept)
    assert kept == {name: "FASTEST_FIRST"}  # the user's choice stays


def test_a_single_gpu_job_runs_in_this_process(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(*DEVICE_ORDER)
    rng = np.random.default_rng(8)
    a, b = random_matrix(rng, (9, 7), "float32"), random_matrix(rng, (7, 5), "float32")
    write_zarr(tmp_path / "a.zarr", a, (5, 4))
    write_zarr(tmp_path / "b.zarr", b, (4, 3))
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    result = run_job(
        tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
        gpus=(0,), backend="cuda", memory="64MiB", tile=(5, 3), progress=True,
    )  # fmt: skip
    assert_product_close(zarr.open_array(tmp_path / "c.zarr")[...], a, b)
    assert result.summary["backend"] == "cuda"
    assert {r.worker.rsplit(":", 1)[1] for r in result.results} == {str(os.getpid())}
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= children  # none new
    assert "1 worker(s) in this process" in capsys.readouterr().err


def test_two_jobs_in_one_process_cannot_share_it_on_two_gpus():
    with in_process_device(0):
        with in_process_device(0):  # the same GPU: fine
            pass
        refused = pytest.raises(BackendError, match="already computes on GPU 0")
        with refused, in_process_device(1):
            pass

"""The CUDA engine with two tiles in flight on one device, on numba's simulator (issue 52):
a single GPU's worker in the job's process runs two task threads, each with its own engine
on the device; the simulator's launches from the two threads take turns
(``outofcore.backends.cuda.runtime.SIMULATOR_LAUNCH``), and the product is right."""

from __future__ import annotations

import numpy as np
import zarr

from outofcore import config
from outofcore.api import run_job
from outofcore.backends.cuda.workers import DEVICE_ORDER
from tests.helpers import assert_product_close, write_zarr


def test_two_tiles_in_flight_on_the_simulator(tmp_path, monkeypatch):
    monkeypatch.setenv(*DEVICE_ORDER)  # one GPU's worker is a thread of this process
    rng = np.random.default_rng(52)
    a = rng.standard_normal((32, 12)).astype("float32")
    b = rng.standard_normal((12, 16)).astype("float32")
    write_zarr(tmp_path / "a.zarr", a, (16, 12))
    write_zarr(tmp_path / "b.zarr", b, (12, 16))
    with config.set({"gpu-tiles-in-flight": 2}):
        result = run_job(
            tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
            backend="cuda", gpus=(0,), tile=(16, 16), progress=False, memory="64MiB",
        )  # fmt: skip
    assert_product_close(zarr.open_array(tmp_path / "c.zarr")[...], a, b)
    assert result.summary["tiles_computed"] == 2
    assert result.plan.task_budget_bytes == (64 << 20) // 2  # two task threads share it

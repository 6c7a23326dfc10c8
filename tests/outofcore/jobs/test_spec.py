"""JobSpec: a job's options parsed once, from the API's keywords or the CLI's arguments."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import zarr

import outofcore
from outofcore import cli
from outofcore.api import run_job
from outofcore.errors import BackendError, ClusterError, InputError
from outofcore.jobs.spec import JobSpec
from tests.helpers import assert_product_close, random_matrix, write_zarr


def test_a_spec_parses_sizes_and_resolves_defaults_once():
    spec = JobSpec(memory="3MiB", device_memory="1.5GB", backend="cpu", tile=[40, 60], tk=20)
    assert spec.memory == 3 * 2**20 and spec.device_memory == 1_500_000_000
    assert spec.tile == (40, 60) and spec.tk == 20 and spec.backend == "cpu"
    assert (
        JobSpec(backend="cpu", gpus="2,0").gpus
        == JobSpec(backend="cpu", gpus=[2, 0]).gpus
        == (2, 0)
    )
    assert spec.lease_timeout == 60.0  # the setting's default
    assert JobSpec(backend="auto").backend == "auto"  # pure data: run_job resolves it
    assert not JobSpec(backend="cpu").on_gpu
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.memory = 1


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"memory": "lots"}, InputError, "cannot read the size 'lots'"),
        ({"device_memory": 0}, InputError, "must be positive"),
        ({"backend": "tpu"}, BackendError, "unknown backend 'tpu'"),
        ({"output_codec": "gzip"}, InputError, "output codec 'gzip'"),
        ({"tile": (10,)}, InputError, r"tile = \(10,\): need two whole numbers"),
        ({"tile": (10, 0)}, InputError, "tile columns = 0: need a whole number >= 1"),
        ({"tk": 2.5}, InputError, "tk = 2.5: need a whole number >= 1"),
        ({"workers": 0}, InputError, "workers = 0"),
        ({"gpus": (0, 0)}, ClusterError, "need distinct non-negative GPU indices"),
        ({"gpus": "0,x"}, ClusterError, "give GPU indices like 0,1,2,3"),
        ({"lease_timeout": -1}, InputError, r"lease_timeout = -1: need a number > 0"),
    ],
)
def test_bad_options_are_named_before_any_array_is_opened(options, error, message, tmp_path):
    with pytest.raises(error, match=message):
        outofcore.matmul(tmp_path / "none-a", tmp_path / "none-b", tmp_path / "c", **options)
    assert not (tmp_path / "c").exists()


def test_unknown_options_and_both_ways_at_once_are_refused(tmp_path):
    with pytest.raises(
        InputError, match=r"unexpected keyword argument\(s\) \['memroy'\].*'memory'"
    ):
        outofcore.matmul("a", "b", tmp_path / "c", memroy="1GiB")
    with pytest.raises(InputError, match="in the JobSpec or as keywords, not both"):
        outofcore.matmul("a", "b", tmp_path / "c", spec=JobSpec(backend="cpu"), memory="1GiB")


def test_the_api_and_the_cli_run_the_same_spec(tmp_path, monkeypatch):
    rng = np.random.default_rng(29)
    a = random_matrix(rng, (37, 23), "float64")
    b = random_matrix(rng, (23, 31), "float64")
    write_zarr(tmp_path / "a.zarr", a, (10, 7))
    write_zarr(tmp_path / "b.zarr", b, (7, 11))
    spec = JobSpec(memory=64 * 1024, backend="cpu", progress=False, output_codec="zstd")
    result = run_job(tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr", spec=spec,
                     client="sync")  # fmt: skip
    assert_product_close(zarr.open_array(str(tmp_path / "c.zarr"))[...], a, b)

    seen = []
    real_run_job = run_job

    def spy(a, b, out, spec=None, **kwargs):
        seen.append(spec)
        return real_run_job(a, b, out, spec=spec, **kwargs)

    monkeypatch.setattr("outofcore.api.run_job", spy)
    status = cli.main([
        "matmul", str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr"), "-o",
        str(tmp_path / "d.zarr"), "--memory", "64KiB", "--backend", "cpu",
        "--output-codec", "zstd", "--scheduler", "sync", "--json",
    ])  # fmt: skip
    assert status == 0
    assert seen == [dataclasses.replace(spec, progress=True)]  # --json: progress on stderr
    c, d = (zarr.open_array(str(tmp_path / n)) for n in ("c.zarr", "d.zarr"))
    assert np.array_equal(c[...], d[...]) and c.chunks == d.chunks
    assert result.plan.task_budget_bytes == 64 * 1024

"""``outofcore plan`` plans as the job does (issue 20, item 3): one planning function,
every job option, the same tiles, splits and projected memory as the job's summary."""

from __future__ import annotations

import json

import numpy as np
import pytest

from outofcore.frontends.generate import random_array
from tests.helpers import cli


@pytest.fixture
def folder(tmp_path, monkeypatch):
    random_array(tmp_path / "a.zarr", (97, 1200), (20, 100), seed=1)
    random_array(tmp_path / "b.zarr", (1200, 83), (100, 20), seed=2)
    random_array(tmp_path / "d.zarr", (97, 83), (20, 20), seed=3)
    random_array(tmp_path / "x.zarr", (1200, 90), (100, 20), seed=4)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("matmul", ["a.zarr", "b.zarr", "--alpha", "2", "--beta", "1", "--addend", "d.zarr"]),
        ("matmul", ["a.zarr", "b.zarr", "--splits", "3", "--out-dtype", "float16"]),
        ("matmul", ["x.zarr", "x.zarr", "--transpose-a"]),  # a Gram product
        ("matmul", ["a.zarr", "b.zarr", "--zarr-format", "2", "--memory", "96KiB"]),
    ],
)
def test_plan_and_the_jobs_summary_agree(folder, command, args):
    options = ["--memory", "160KiB", "--scheduler", "sync", "--json"]
    if "--memory" in args:
        options = options[2:]
    plan = cli("plan", *args, *options)
    assert plan.returncode == 0, plan.stderr
    planned = json.loads(plan.stdout)
    job = cli(command, *args, "-o", "c.zarr", *options)
    assert job.returncode == 0, job.stderr
    summary = json.loads(job.stdout)
    assert planned["tiles"] == summary["tiles"] > 1
    assert planned["tile"] == summary["tile"]
    assert planned["tk"] == summary["tk"]
    assert planned["splits"] == summary["splits"]
    assert planned["scratch_bytes"] == summary["scratch_bytes"]  # partial tiles written
    assert planned["task_bytes"] == summary["task_bytes_projected"]
    assert planned["task_budget_bytes"] == summary["task_budget_bytes"]
    assert planned["worker_budget_bytes"] == summary["worker_budget_bytes"]
    assert planned["product"] == summary["product"]
    flops = summary["gflops"] * summary["seconds"] * 1e9
    assert planned["flops"] == pytest.approx(flops, rel=1e-6)


def test_a_gram_plan_counts_syrk_work(folder):
    gram = json.loads(cli("plan", "x.zarr", "x.zarr", "--transpose-a", "--json").stdout)
    general = json.loads(cli("plan", "x.zarr", "b.zarr", "--transpose-a", "--json").stdout)
    assert gram["symmetric"] and not general["symmetric"]
    n, k = 90, 1200
    assert gram["flops"] < 2 * n * n * k * 0.75  # the upper triangle of tiles, syrk on the diagonal
    assert general["flops"] == 2 * n * 83 * k
    assert np.isclose(gram["flops"] / (n * n * k), 1 + 1 / n, rtol=0.5)

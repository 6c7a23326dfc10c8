"""Signatures a user can read (issue 45, item 3): every job option an explicit keyword of
the public calls (one definition: JobSpec's fields), TypeError for an unknown keyword as
numpy and dask raise it, ``dir(outofcore)``, ``py.typed``, and ``to_zarr(...,
compute=False)`` returning a Delayed as dask's does."""

from __future__ import annotations

import inspect
from dataclasses import fields
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import zarr

import outofcore
import outofcore.xarray
from outofcore.errors import InputError, OptionError
from tests.helpers import assert_product_close, write_zarr

OPTIONS = {f.name for f in fields(outofcore.JobSpec)}


@pytest.mark.parametrize(
    ("call", "left_out"),
    [
        (lambda: outofcore.matmul, set()),
        (lambda: outofcore.gram, {"transpose_a", "transpose_b", "addend", "beta"}),
        (lambda: outofcore.to_zarr, {"transpose_a", "transpose_b"}),
        (lambda: outofcore.xarray.dot, {"transpose_a", "transpose_b", "dimension_names"}),
    ],
)
def test_every_job_option_is_a_keyword_of_the_signature(call, left_out):
    parameters = inspect.signature(call()).parameters
    assert OPTIONS - left_out <= set(parameters)
    assert not left_out & set(parameters)
    for name in {"memory", "transpose_a", "alpha", "beta", "addend", "out_dtype"} - left_out:
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
    assert parameters["memory"].default is None and "options" not in parameters
    if "alpha" in parameters:
        assert parameters["alpha"].default == 1.0


def test_an_unknown_keyword_is_a_type_error_before_any_work(tmp_path):
    with pytest.raises(TypeError, match="memroy") as refused:
        outofcore.matmul(tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
                         memroy="1GiB")  # fmt: skip
    assert isinstance(refused.value, OptionError) and isinstance(refused.value, InputError)
    assert not (tmp_path / "c.zarr").exists()


def test_dir_lists_the_public_names_and_the_package_says_it_is_typed():
    names = dir(outofcore)
    assert {"matmul", "gram", "verify", "to_zarr", "random_array", "JobSpec"} <= set(names)
    assert (Path(outofcore.__file__).parent / "py.typed").is_file()


def test_to_zarr_compute_false_returns_a_delayed_that_stores(tmp_path):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((60, 40)).astype("float32")
    b = rng.standard_normal((40, 30)).astype("float32")
    write_zarr(tmp_path / "a.zarr", a, (20, 20))
    write_zarr(tmp_path / "b.zarr", b, (20, 15))
    x, y = da.from_zarr(str(tmp_path / "a.zarr")), da.from_zarr(str(tmp_path / "b.zarr"))
    later = outofcore.to_zarr(x @ y, str(tmp_path / "c.zarr"), compute=False, client="sync")
    assert hasattr(later, "dask") and not (tmp_path / "c.zarr").exists()  # nothing yet
    stored = later.compute(scheduler="sync")
    assert_product_close(zarr.open_array(tmp_path / "c.zarr")[...], a, b)
    assert tuple(stored.shape) == (60, 30)
    with pytest.raises(TypeError, match="memroy"):
        outofcore.to_zarr(x @ y, str(tmp_path / "d.zarr"), compute=False, memroy=1)


def test_a_delayed_to_zarr_computed_on_a_cluster_runs_its_job_there(tmp_path, local_cluster):
    from distributed import Client  # noqa: PLC0415

    rng = np.random.default_rng(4)
    a = rng.standard_normal((50, 40)).astype("float32")
    b = rng.standard_normal((40, 20)).astype("float32")
    write_zarr(tmp_path / "a.zarr", a, (20, 20))
    write_zarr(tmp_path / "b.zarr", b, (20, 10))
    x, y = da.from_zarr(str(tmp_path / "a.zarr")), da.from_zarr(str(tmp_path / "b.zarr"))
    with Client(local_cluster(n_workers=1)) as client:  # one thread: the job's tasks too
        later = outofcore.to_zarr(x @ y, str(tmp_path / "c.zarr"), compute=False)
        stored = client.compute(later).result(timeout=120)
    assert_product_close(zarr.open_array(tmp_path / "c.zarr")[...], a, b)
    assert tuple(stored.shape) == (50, 20)


def test_plan_from_python_is_the_plan_the_command_prints(tmp_path, capsys):
    import json  # noqa: PLC0415

    from outofcore.cli import main  # noqa: PLC0415

    rng = np.random.default_rng(5)
    write_zarr(tmp_path / "a.zarr", rng.standard_normal((1200, 400)).astype("float32"), (100, 100))
    write_zarr(tmp_path / "b.zarr", rng.standard_normal((400, 900)).astype("float32"), (100, 100))
    a, b = str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr")
    job_plan = outofcore.plan(a, b, memory="1MiB", client="sync")
    assert "memory" in inspect.signature(outofcore.plan).parameters
    command = ["plan", a, b, "--memory", "1MiB", "--scheduler", "sync"]
    assert main([*command, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    summary = job_plan.summary  # what the command prints (a dict, not a method)
    for key in ("tile", "tk", "tiles", "task_bytes", "bytes_read"):
        assert printed[key] == summary[key], key
    assert len(job_plan.plan.tasks) == printed["tiles"] > 1
    assert not (tmp_path / "c.zarr").exists()
    with pytest.raises(TypeError):
        outofcore.plan(a, b, memroy="1MiB")

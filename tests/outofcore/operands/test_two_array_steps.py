"""Elementwise steps between two stored arrays (issue 31, item 2): ``x * y``, ``y - x``.

The operand is read from ``x`` and each panel combined with the same region of ``y``
(:mod:`outofcore.operands.dask_graph`), never stored; ``y`` is an input of the job (fingerprinted)
and its panel is counted in each task's memory.  numpy, in float64, is the reference.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import zarr

import outofcore
from outofcore.api import run_job
from outofcore.errors import InputError
from outofcore.frontends.verify import verify
from outofcore.journal.resume import ResumeError
from outofcore.operands.reading import ReadError
from tests.helpers import break_chunk, random_matrix, restore_chunk, smallest_budget, write_zarr

SYNC = {"client": "sync", "progress": False}


@pytest.fixture
def pair(tmp_path):
    """x, y: 203x97 float32 in chunks 31x17; w: 97x203 float64 (y's transpose's shape)."""
    rng = np.random.default_rng(95)
    x = random_matrix(rng, (203, 97), "float32")
    y = random_matrix(rng, (203, 97), "float32")
    w = random_matrix(rng, (97, 203), "float64")
    write_zarr(tmp_path / "x.zarr", x, (31, 17))
    write_zarr(tmp_path / "y.zarr", y, (31, 17))
    write_zarr(tmp_path / "w.zarr", w, (17, 31))
    return tmp_path, x, y, w


def close(got: np.ndarray, expected: np.ndarray) -> None:
    scale = np.abs(expected).max()
    assert np.abs(got - expected).max() <= 1e-5 * scale, np.abs(got - expected).max() / scale


@pytest.mark.parametrize("form", ["x * y gram", "y - x", "x / w.T", "(y + 1) * x"])
def test_two_array_steps_equal_numpy_under_the_smallest_budget(pair, form):
    folder, x, y, w = pair
    xd, yd, wd = (da.from_zarr(str(folder / f"{n}.zarr")) for n in "xyw")
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    cases = {
        "x * y gram": ((xd * yd).T, xd * yd, (x64 * y64).T, x64 * y64),
        "y - x": ((yd - xd).T, xd, (y64 - x64).T, x64),
        "x / w.T": (xd.T, xd / wd.T, x64.T, x64 / w.T),  # stored transposed, float64
        "(y + 1) * x": ((yd + 1) * xd, xd.T, (y64 + 1) * x64, x64.T),
    }
    a, b, na, nb = cases[form]
    out = str(folder / "c.zarr")
    budget = smallest_budget(a, b, str(folder / "probe.zarr"))
    got = outofcore.matmul(a, b, out, memory=budget, **SYNC)
    close(got[...], na @ nb)
    record = got.attrs["outofcore"]["product"]
    steps = record.get("a_steps", []) + record.get("b_steps", [])
    assert any("array" in step for step in steps)
    if form == "x * y gram":
        assert record["symmetric"] is True
    assert verify(a, b, out, client="sync").passed
    for name, values in (("x", x), ("y", y), ("w", w)):  # inputs are never written
        np.testing.assert_array_equal(zarr.open_array(str(folder / f"{name}.zarr"))[...], values)


def test_the_other_arrays_panel_is_in_the_memory_contract(pair):
    folder = pair[0]
    xd, yd, wd = (da.from_zarr(str(folder / f"{n}.zarr")) for n in "xyw")
    plain = run_job(xd.T, xd, folder / "p.zarr", **SYNC).plan.problem
    both = run_job((xd * yd).T, xd * yd, folder / "q.zarr", **SYNC).plan.problem
    assert plain.staging == (0, 0) and both.staging == (4, 4)  # y's float32 panel
    wide = run_job(xd.T, xd / wd.T, folder / "r.zarr", **SYNC).plan.problem
    assert wide.staging == (4, 4 + 8)  # x staged to float64, w's float64 panel


def test_what_does_not_read_alike_is_computed_by_dask(pair):
    folder, x, y, _ = pair
    xd = da.from_zarr(str(folder / "x.zarr"))
    other = da.from_zarr(write_zarr(folder / "o.zarr", y, (50, 20)))  # other chunks
    for operand in (xd * other, xd[:100] * other[:100], xd * (other + 1)):
        with pytest.raises(InputError, match="that computes something"):
            outofcore.matmul(operand.T, operand, str(folder / "r.zarr"), **SYNC)
    assert not (folder / "r.zarr").exists()


def test_a_resume_refuses_a_changed_other_array(pair, outofcore_settings):
    folder, x, y, _ = pair
    out = folder / "c.zarr"
    outofcore_settings(read_retries=0)

    def operand():
        xd, yd = (da.from_zarr(str(folder / f"{n}.zarr")) for n in "xy")
        return xd * yd

    broken = break_chunk(folder / "y.zarr", "6/5")  # y's last chunk: the job stops there
    with pytest.raises(ReadError):
        run_job(operand().T, operand(), out, memory="64KiB", **SYNC)
    restore_chunk(broken)
    zarr.open_array(str(folder / "y.zarr"), mode="r+")[0, 0] = 99.0  # y rewritten
    with pytest.raises(ResumeError, match="for other inputs or parameters"):
        run_job(operand().T, operand(), out, memory="64KiB", **SYNC)


def test_to_zarr_of_a_product_of_two_array_steps_runs_on_a_cluster(pair):
    from distributed import Client, LocalCluster, get_task_stream  # noqa: PLC0415

    folder, x, y, _ = pair
    xd, yd = (da.from_zarr(str(folder / f"{n}.zarr")) for n in "xy")
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
        get_task_stream(client) as stream,
    ):
        out = outofcore.to_zarr((xd * yd).T @ (xd * yd), str(folder / "g.zarr"),
                                client=client, memory="64KiB", progress=False)  # fmt: skip
    assert any("tile-" in str(task["key"]) for task in stream.data)
    p = x.astype(np.float64) * y
    close(out[...], p.T @ p)

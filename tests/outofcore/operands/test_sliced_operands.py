"""Operands that are slices of a stored array (issue 31, item 2): ``x[:, :1000]``.

A unit-step slice of a dask array reading a zarr array is a region of the stored array
(:mod:`outofcore.operands.windows`): the job reads that region, applies any elementwise steps,
and stores nothing.  numpy, in float64, is the reference; the regions start and end
inside chunks, and budgets are the smallest the chunks allow.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import zarr

import outofcore
from outofcore.api import run_job
from outofcore.errors import InputError
from outofcore.frontends.cli_output import format_summary
from outofcore.frontends.verify import verify
from outofcore.journal.resume import ResumeError
from outofcore.operands.dask_graph import steps_behind
from outofcore.operands.interop import layer_reads
from outofcore.operands.reading import ReadError
from outofcore.operands.stacking import Window
from tests.helpers import (
    assert_gemm_close,
    break_chunk,
    random_matrix,
    restore_chunk,
    smallest_budget,
    write_zarr,
)


@pytest.fixture
def stored(tmp_path):
    """x: 211x97 float32 (chunks 50x13), y: 97x61 float32 (chunks 17x11)."""
    rng = np.random.default_rng(71)
    x, y = random_matrix(rng, (211, 97), "float32"), random_matrix(rng, (97, 61), "float32")
    write_zarr(tmp_path / "x.zarr", x, (50, 13))
    write_zarr(tmp_path / "y.zarr", y, (17, 11))
    return tmp_path, x, y


def found(operand):
    """What :func:`steps_behind` reads for a dask array: (flag, steps, window)."""
    graph = operand.__dask_graph__()
    result = steps_behind(graph, operand.name, lambda g, n: layer_reads(g, n, 2))
    return None if result is None else result[1:]


def test_a_unit_step_slice_is_a_window_of_the_stored_array(stored):
    folder = stored[0]
    x = da.from_zarr(str(folder / "x.zarr"))
    assert found(x[:, 5:60]) == (False, (), Window((0, 5), (211, 55)))
    assert found(x[7:150]) == (False, (), Window((7, 0), (143, 97)))
    assert found(x[-11:]) == (False, (), Window((200, 0), (11, 97)))
    assert found(x.T[4:50, 10:190]) == (True, (), Window((10, 4), (180, 46)))
    assert found(x[10:120][2:5, 90:]) == (False, (), Window((12, 90), (3, 7)))  # nested
    assert found(x[:50, :50].T[1:20]) == (True, (), Window((0, 1), (50, 19)))
    assert found(x[:, :]) is None or found(x[:, :])[2] is None  # all of it: no window
    flag, steps, window = found((x - x.mean(axis=0))[10:190, 4:50])
    assert (flag, window) == (False, Window((10, 4), (180, 46)))
    means = stored[1].astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(steps[0].other, means[4:50], rtol=1e-6)  # cut to the window
    for operand in (x[::2], x[::-1], x[:, 3:40:3], x[[1, 5, 9]], x[x[:, 0] > 0]):
        assert found(operand) is None, operand.name


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "complex64"])
def test_products_of_slices_equal_numpy_under_the_smallest_budget(tmp_path, dtype):
    rng = np.random.default_rng(72)
    x = random_matrix(rng, (211, 97), "float64")
    y = random_matrix(rng, (97, 61), "float64")
    if dtype == "int32":
        x, y = np.rint(x * 1000).astype(dtype), np.rint(y * 1000).astype(dtype)
    elif dtype == "complex64":
        x, y = (x + 1j * x[::-1]).astype(dtype), (y - 0.5j * y[::-1]).astype(dtype)
    else:
        x, y = x.astype(dtype), y.astype(dtype)
    xd = da.from_zarr(write_zarr(tmp_path / "x.zarr", x, (50, 13)))
    yd = da.from_zarr(write_zarr(tmp_path / "y.zarr", y, (17, 11)))
    a, b = xd[3:200, 5:90], yd[5:90, 7:50]  # regions inside chunks on every edge
    out = str(tmp_path / "c.zarr")
    budget = smallest_budget(a, b, str(tmp_path / "probe.zarr"))
    got = outofcore.matmul(a, b, out, client="sync", memory=budget, progress=False)
    na, nb = x[3:200, 5:90], y[5:90, 7:50]
    if dtype == "int32":
        np.testing.assert_array_equal(got[...], na.astype(np.int64) @ nb.astype(np.int64))
    else:
        assert_gemm_close(got[...], na, nb, accumulated_in=dtype)
    assert got.attrs["outofcore"]["product"]["a_window"] == {"start": [3, 5], "shape": [197, 85]}
    assert verify(a, b, out, client="sync").passed
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "x.zarr"))[...], x)  # unwritten


def test_a_sliced_gram_is_symmetric_and_transposed_slices_read_right(stored):
    folder, x, y = stored
    xd, yd = da.from_zarr(str(folder / "x.zarr")), da.from_zarr(str(folder / "y.zarr"))
    part = xd[20:180, 3:70]
    g = outofcore.matmul(part.T, part, str(folder / "g.zarr"), client="sync", memory="64KiB",
                         progress=False)  # fmt: skip
    assert g.attrs["outofcore"]["product"]["symmetric"] is True
    p = x[20:180, 3:70]
    assert_gemm_close(g[...], p.T, p, accumulated_in="float32")
    other = xd[20:180, 4:71]  # another region of the same array: not a Gram
    c = outofcore.matmul(part.T, other, str(folder / "c.zarr"), client="sync", memory="64KiB",
                         progress=False)  # fmt: skip
    assert c.attrs["outofcore"]["product"]["symmetric"] is False
    assert_gemm_close(c[...], p.T, x[20:180, 4:71], accumulated_in="float32")
    t = outofcore.matmul(yd.T[10:50, 3:90], xd.T[3:90, 100:200], str(folder / "t.zarr"),
                         client="sync", memory="64KiB", progress=False)  # fmt: skip
    assert_gemm_close(t[...], y.T[10:50, 3:90], x.T[3:90, 100:200], accumulated_in="float32")


def test_slices_and_elementwise_steps_compose(stored):
    folder, x, _ = stored
    xd = da.from_zarr(str(folder / "x.zarr"))
    wide = x.astype(np.float64)
    cases = {
        "slice of centred": (
            (xd - xd.mean(axis=0))[10:190, 4:50],
            (wide - wide.mean(axis=0))[10:190, 4:50],
        ),
        "centred slice": (
            xd[10:190, 4:50] - xd[10:190, 4:50].mean(axis=0),
            wide[10:190, 4:50] - wide[10:190, 4:50].mean(axis=0),
        ),
        "astype then slice": (xd.astype("float64")[:150] * 2 + 1, wide[:150] * 2 + 1),
    }
    for number, (name, (operand, reference)) in enumerate(cases.items()):
        got = outofcore.matmul(operand.T, operand, str(folder / f"c{number}.zarr"), client="sync",
                               memory="128KiB", progress=False)  # fmt: skip
        expected = reference.T @ reference
        scale = np.abs(expected).max()
        assert np.abs(got[...] - expected).max() <= 1e-5 * scale, name
        assert got.attrs["outofcore"]["product"]["symmetric"] is True, name


def test_to_zarr_of_astype_and_sliced_operands_runs_on_a_cluster(stored):
    """issue 31's case: a product of astype and sliced operands, on a distributed
    Client of 2 workers: outofcore's tile tasks ran there, and it equals numpy's."""
    from distributed import Client, LocalCluster, get_task_stream  # noqa: PLC0415

    folder, x, y = stored
    xd, yd = da.from_zarr(str(folder / "x.zarr")), da.from_zarr(str(folder / "y.zarr"))
    expression = xd[:, 10:80].astype("float64") @ yd[10:80, 5:]
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
        get_task_stream(client) as stream,
    ):
        out = outofcore.to_zarr(expression, str(folder / "c.zarr"), client=client,
                                memory="1MiB", progress=False)  # fmt: skip
    assert any("tile-" in str(task["key"]) for task in stream.data)
    assert out.dtype == np.float64 and out.shape == (211, 56)
    expected = x[:, 10:80].astype(np.float64) @ y[10:80, 5:].astype(np.float64)
    np.testing.assert_allclose(out[...], expected, rtol=1e-10, atol=1e-10)


def test_a_resume_refuses_another_slice_and_resumes_the_same(stored, outofcore_settings):
    folder, x, _ = stored
    xd = da.from_zarr(str(folder / "x.zarr"))
    out = folder / "c.zarr"
    options = {"client": "sync", "progress": False, "memory": "64KiB"}
    outofcore_settings(read_retries=0)
    broken = break_chunk(folder / "x.zarr", "3/2")  # rows 150:200, columns 26:39
    with pytest.raises(ReadError):
        run_job(xd[:, :60].T, xd[:, :60], out, **options)
    assert zarr.open_array(str(out)).attrs["outofcore"]["complete"] is False
    with pytest.raises(ResumeError, match=r"for other inputs or parameters: a_window was"):
        run_job(xd[:, 1:61].T, xd[:, 1:61], out, **options)
    restore_chunk(broken)
    result = run_job(xd[:, :60].T, xd[:, :60], out, **options)
    assert result.summary["tiles_skipped"] > 0
    assert_gemm_close(result.output[...], x[:, :60].T, x[:, :60], accumulated_in="float32")
    said = format_summary(result.summary).splitlines()[0]
    assert said.startswith("G = X.T @ X (X = stored[0:211, 0:60]) written to"), said
    scaled = run_job((xd[:, 3:40].astype("float64") * 2 + 1).T, xd[:, :50] / 4,
                     folder / "s.zarr", **options)  # fmt: skip
    said = format_summary(scaled.summary).splitlines()[0]
    expected = "A = stored[0:211, 3:40].astype(float64) * 2 + 1; B = stored[0:211, 0:50] / 4"
    assert said.startswith(f"C = A.T @ B ({expected}) written to"), said


def test_what_is_no_unit_step_slice_is_refused(stored):
    folder = stored[0]
    xd = da.from_zarr(str(folder / "x.zarr"))
    for operand in (xd[::2], xd[[1, 5, 9]], xd[::-1]):
        with pytest.raises(InputError, match="that computes something"):
            outofcore.matmul(operand.T, operand, str(folder / "r.zarr"), client="sync")
    addend = da.from_zarr(write_zarr(folder / "d.zarr", np.eye(98, dtype=np.float32), (10, 10)))
    with pytest.raises(InputError, match=r"the addend is the region \[0:97, 0:97\] of"):
        outofcore.matmul(xd.T, xd, str(folder / "r.zarr"), addend=addend[:97, :97], beta=1.0)
    assert not (folder / "r.zarr").exists()

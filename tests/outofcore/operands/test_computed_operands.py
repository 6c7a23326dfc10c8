"""Operands that compute (issue 31, item 2): a stored array with elementwise steps.

``x - x.mean(axis=0)``, ``(x - mu) / sigma``, ``x * w``, ``2 * x + 1`` and ``astype``
are read from the stored ``x`` and computed panel by panel (:mod:`outofcore.operands.dask_graph`);
numpy, in float64, is the reference.  The steps and their vectors are in the job's
identity: a resume refuses a changed expression.
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
from outofcore.operands.steps import SLABS_ALIVE
from outofcore.planner.memory import STEP_SLAB_ELEMENTS
from tests.helpers import break_chunk, restore_chunk, write_zarr


@pytest.fixture
def stored(tmp_path):
    """x: 211x37 float32 with a large mean (centring matters), ragged chunks."""
    rng = np.random.default_rng(51)
    x = (rng.standard_normal((211, 37)) * 3 + 40).astype(np.float32)
    write_zarr(tmp_path / "x.zarr", x, (50, 10))
    return tmp_path, x


def close(got: np.ndarray, expected: np.ndarray, k: int, eps: float = 2**-24) -> None:
    """Within float32's accumulation bound, relative to the magnitude of the terms."""
    scale = np.abs(expected).max() + 1e-30
    assert np.abs(got - expected).max() <= 4 * k * eps * scale * 40, (got, expected)


def test_a_centred_gram_is_read_from_the_stored_array_and_is_symmetric(stored):
    folder, x = stored
    xd = da.from_zarr(str(folder / "x.zarr"))
    xc = xd - xd.mean(axis=0)
    out = str(folder / "g.zarr")
    g = outofcore.matmul(xc.T, xc, out, client="sync", progress=False, memory="256KiB")
    c = x.astype(np.float64) - x.astype(np.float64).mean(axis=0)
    close(g[...], c.T @ c, 211)
    record = g.attrs["outofcore"]["product"]
    assert record["symmetric"] is True  # one stored array, the same steps: half the tiles
    (step,) = record["a_steps"]
    assert step["op"] == "sub" and step["vector"]["axis"] == 1 and step["vector"]["length"] == 37
    assert len(step["vector"]["sha256"]) == 64
    assert verify(xc.T, xc, out, client="sync").passed


@pytest.mark.parametrize(
    "expression",
    ["standardised", "weights", "affine", "reflected", "astype", "transposed below"],
)
def test_elementwise_steps_equal_numpy(stored, expression):
    folder, x = stored
    xd = da.from_zarr(str(folder / "x.zarr"))
    w = np.random.default_rng(52).standard_normal(37).astype(np.float32)
    operands = {
        "standardised": lambda v: (v - v.mean(axis=0)) / v.std(axis=0),
        "weights": lambda v: v * (w if isinstance(v, np.ndarray) else da.from_array(w, 10)),
        "affine": lambda v: 2 * v + 1,
        "reflected": lambda v: 1 - v,
        "astype": lambda v: v.astype(np.float64) - 40,
        "transposed below": lambda v: (v.T - 40).T,
    }
    make = operands[expression]
    a = make(xd)
    got = outofcore.matmul(a.T, a, str(folder / "c.zarr"), client="sync", progress=False)
    reference = make(x.astype(np.float64))
    assert got.dtype == np.result_type(a.dtype, a.dtype)
    close(got[...], reference.T @ reference, 211)
    assert verify(a.T, a, str(folder / "c.zarr"), client="sync").passed


def test_to_zarr_of_a_centred_gram_runs_outofcores_tasks_on_a_cluster(stored):
    from distributed import Client, LocalCluster, get_task_stream  # noqa: PLC0415

    folder, x = stored
    xd = da.from_zarr(str(folder / "x.zarr"))
    xc = xd - xd.mean(axis=0)
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
        get_task_stream(client) as stream,
    ):
        g = outofcore.to_zarr(xc.T @ xc, str(folder / "g.zarr"), memory="256KiB", progress=False)
    assert any("tile-" in str(task["key"]) for task in stream.data)
    c = x.astype(np.float64) - x.astype(np.float64).mean(axis=0)
    close(g[...], c.T @ c, 211)


def test_the_vectors_are_in_the_memory_contract(stored):
    folder, _ = stored
    xd = da.from_zarr(str(folder / "x.zarr"))
    plain = run_job(xd.T, xd, folder / "p.zarr", client="sync", progress=False)
    centred = run_job((xd - xd.mean(0)).T, xd - xd.mean(0), folder / "c.zarr", client="sync",
                      progress=False)  # fmt: skip
    problem = centred.plan.problem
    # The column means' shifts of A and of B (float32), and a task's panel sums (float64).
    assert problem.held_bytes == 2 * 37 * 4 + (37 + 37) * 8
    assert problem.step_slabs == (SLABS_ALIVE * 4, SLABS_ALIVE * 4)  # float32 steps
    slabs = 2 * min(STEP_SLAB_ELEMENTS, 37 * 211) * SLABS_ALIVE * 4  # one panel each at most
    assert centred.plan.task_bytes == plain.plan.task_bytes + problem.held_bytes + slabs


def test_what_is_no_elementwise_step_of_one_stored_array_is_refused(stored):
    folder, x = stored
    xd = da.from_zarr(str(folder / "x.zarr"))
    ints = write_zarr(folder / "i.zarr", np.arange(60, dtype=np.int32).reshape(6, 10), (3, 5))
    idx = da.from_zarr(ints)
    cases = [
        (xd**2, "that computes something"),  # a power: no step (x * x is read, then computed)
        (xd[:100:3], "that computes something"),  # a strided slice
        (xd - xd.mean(axis=1, keepdims=True), "that computes something"),
        (xd - da.ones(1, dtype=np.float32), "that computes something"),  # broadcast length 1
        (idx * np.int64(2), "that computes something"),  # integers widened: not in place
    ]
    for operand, message in cases:
        with pytest.raises(InputError, match=message):
            outofcore.matmul(operand.T, operand, str(folder / "r.zarr"), client="sync")
    assert not (folder / "r.zarr").exists()
    d = da.from_zarr(write_zarr(folder / "d.zarr", np.eye(37, dtype=np.float32), (10, 10)))
    with pytest.raises(InputError, match=r"the addend computes something \(1 elementwise"):
        outofcore.matmul(xd.T, xd, str(folder / "r.zarr"), addend=d - 1, beta=1.0)
    assert x.size  # the fixture's values were not touched


def test_a_resume_refuses_a_changed_expression_and_resumes_the_same(stored, outofcore_settings):
    folder, x = stored
    xd = da.from_zarr(str(folder / "x.zarr"))
    w = np.linspace(0.5, 2.0, 37).astype(np.float32)

    def weighted(scale: float):
        return xd * da.from_array(w * scale, chunks=10)  # a vector computed in memory

    out = folder / "c.zarr"
    options = {"client": "sync", "progress": False, "memory": "64KiB"}
    outofcore_settings(read_retries=0)
    broken = break_chunk(folder / "x.zarr", "3/2")  # stops the job part way
    with pytest.raises(ReadError):
        run_job(weighted(1).T, weighted(1), out, **options)
    assert zarr.open_array(str(out)).attrs["outofcore"]["complete"] is False
    with pytest.raises(ResumeError, match=r"for other inputs or parameters: a_steps was"):
        run_job(weighted(2).T, weighted(2), out, **options)
    restore_chunk(broken)
    result = run_job(weighted(1).T, weighted(1), out, **options)
    assert result.summary["tiles_skipped"] > 0
    xw = x.astype(np.float64) * w
    close(result.output[...], xw.T @ xw, 211)


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int32"])
def test_integer_steps_in_the_stored_dtype_wrap_as_numpys_and_the_product_is_exact(tmp_path, dtype):
    """``counts + 100``, ``counts * 3``, ``counts - offsets`` keep the stored integer
    dtype in numpy (wrapping); outofcore applies them to the decoded values the same way,
    then multiplies exactly: equal bit for bit to numpy's product in 64 bits."""
    rng = np.random.default_rng(53)
    info = np.iinfo(dtype)
    counts = rng.integers(info.min, info.max, (97, 41), endpoint=True).astype(dtype)
    xd = da.from_zarr(write_zarr(tmp_path / "c.zarr", counts, (20, 9)))
    offsets = da.from_array(rng.integers(0, 50, 41).astype(dtype), chunks=9)
    operands = {"plus": xd + 100, "times": xd * 3, "minus a vector": xd - offsets}
    for number, (name, operand) in enumerate(operands.items()):
        assert operand.dtype == np.dtype(dtype), name  # numpy keeps the dtype: it wraps
        out = str(tmp_path / f"p{number}.zarr")
        got = outofcore.matmul(operand.T, operand, out, client="sync", memory="64KiB")
        values = operand.compute()
        wide = np.uint64 if values.dtype.kind == "u" else np.int64
        np.testing.assert_array_equal(got[...], values.T.astype(wide) @ values.astype(wide))
        assert verify(operand.T, operand, out, client="sync").passed, name

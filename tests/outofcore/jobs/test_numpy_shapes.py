"""numpy.matmul's shape rules, out of core (issue 30): vectors, stacks, broadcasting.

numpy is the reference for every case: the output's shape, and its values (exactly for
integers and bool, within the rounding bound for floats).  Operands are stored in ragged
chunks and multiplied under the smallest budget those chunks allow; a few cases run
through the command line and on a real Dask cluster.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import zarr

import outofcore
from outofcore.errors import InputError
from outofcore.frontends.generate import random_array
from outofcore.frontends.verify import verify
from outofcore.journal.records import JOURNAL_DIR
from outofcore.operands.random_values import random_values
from tests.helpers import (
    assert_gemm_close,
    cli,
    smallest_budget,
    tile_records,
    wait_for,
    write_zarr,
)

#: (A's shape, B's shape, A's chunks, B's chunks, transpose_a, transpose_b): every rule of
#: numpy.matmul's documentation, on sizes that no chunk divides.
SHAPES = {
    "vector @ matrix": ((17,), (17, 11), (6,), (7, 4), False, False),
    "matrix @ vector": ((13, 17), (17,), (5, 6), (7,), False, False),
    "vector @ vector": ((17,), (17,), (6,), (7,), False, False),
    "A.T @ vector": ((17, 13), (17,), (6, 5), (7,), True, False),
    "vector @ B.T": ((17,), (11, 17), (6,), (4, 7), False, True),
    "one-element vectors": ((1,), (1, 5), (1,), (1, 2), False, False),
    "one row @ vector": ((1, 17), (17,), (1, 6), (5,), False, False),
    "stack @ stack": ((3, 13, 17), (3, 17, 11), (2, 5, 6), (1, 7, 4), False, False),
    "matrix @ stack": ((13, 17), (4, 17, 11), (5, 6), (3, 7, 4), False, False),
    "stack @ matrix": ((4, 13, 17), (17, 11), (1, 5, 6), (7, 4), False, False),
    "size-1 batches broadcast": (
        (4, 1, 13, 7),
        (1, 5, 7, 11),
        (2, 1, 5, 3),
        (1, 2, 4, 4),
        False,
        False,
    ),
    "missing batch axis": ((2, 3, 13, 17), (3, 17, 11), (1, 2, 5, 6), (2, 7, 4), False, False),
    "stack @ vector": ((3, 13, 17), (17,), (2, 5, 6), (7,), False, False),
    "vector @ stack": ((17,), (3, 17, 11), (6,), (1, 7, 4), False, False),
    "transposed stacks": ((3, 17, 13), (3, 11, 17), (1, 6, 5), (2, 4, 7), True, True),
    "stack of dot products": ((5, 1, 17), (5, 17, 1), (2, 1, 6), (3, 7, 1), False, False),
}
#: Shapes with a dimension of 0: numpy gives an empty output, or sums of no terms (zeros).
EMPTY = {
    "empty vector dot": ((0,), (0,)),
    "no inner dimension": ((13, 0), (0,)),
    "no rows": ((0, 17), (17,)),
    "no columns": ((17,), (17, 0)),
    "empty batch": ((0, 13, 17), (17, 11)),
    "empty matrices in a stack": ((3, 0, 17), (3, 17, 11)),
}
DTYPES = ["float32", "float64", "float16", "complex64", "int32", "uint16", "int64", "bool"]


def numpy_product(a: np.ndarray, b: np.ndarray, ta: bool, tb: bool) -> np.ndarray:
    """numpy's ``op(a) @ op(b)``: in 64 bits for integers (as outofcore's exact results)."""
    op = [np.swapaxes(x, -1, -2) if t and x.ndim > 1 else x for x, t in ((a, ta), (b, tb))]
    result = np.result_type(a, b)
    if result.kind in "iu":
        wide = np.uint64 if result.kind == "u" else np.int64
        op = [x.astype(wide) for x in op]
    return np.matmul(*op)


def stored(tmp_path, name, shape, chunks, dtype, seed):
    """A seeded random array of ``shape`` (values over the dtype's range) and its zarr copy."""
    values = random_values(np.random.default_rng(seed), shape, np.dtype(dtype))
    return values, write_zarr(tmp_path / f"{name}.zarr", values, chunks)


def check_against_numpy(got: np.ndarray, a, b, ta, tb) -> None:
    expected = numpy_product(a, b, ta, tb)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    result = np.result_type(a, b)
    if result.kind in "biu":
        np.testing.assert_array_equal(got.astype(expected.dtype), expected)
    else:
        accumulated = np.float32 if result == np.float16 else result
        options = {"transpose_a": ta, "transpose_b": tb}
        assert_gemm_close(
            got, a.astype(result), b.astype(result), accumulated_in=accumulated, **options
        )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(SHAPES))
def test_shapes_equal_numpy_under_the_smallest_budget(tmp_path, case, dtype):
    a_shape, b_shape, a_chunks, b_chunks, ta, tb = SHAPES[case]
    seed = list(SHAPES).index(case) * 17 + DTYPES.index(dtype)
    a, za = stored(tmp_path, "a", a_shape, a_chunks, dtype, seed)
    b, zb = stored(tmp_path, "b", b_shape, b_chunks, dtype, seed + 1000)
    options = {"transpose_a": ta, "transpose_b": tb}
    budget = smallest_budget(za, zb, str(tmp_path / "probe.zarr"), **options)
    c = outofcore.matmul(
        za,
        zb,
        str(tmp_path / "c.zarr"),
        client="sync",
        memory=budget,
        progress=False,
        **options,
    )
    check_against_numpy(c[...], a, b, ta, tb)


@pytest.mark.parametrize("case", list(EMPTY))
def test_zero_size_dimensions_as_numpy(tmp_path, case):
    a_shape, b_shape = EMPTY[case]
    a, za = stored(tmp_path, "a", a_shape, tuple(max(1, n) for n in a_shape), "float32", 1)
    b, zb = stored(tmp_path, "b", b_shape, tuple(max(1, n) for n in b_shape), "float32", 2)
    c = outofcore.matmul(za, zb, str(tmp_path / "c.zarr"), client="sync", progress=False)
    expected = a @ b
    assert c.shape == expected.shape and c.dtype == expected.dtype
    np.testing.assert_array_equal(c[...], expected)  # empty, or sums of no terms: 0


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "message"),
    [
        ((3, 13, 17), (4, 17, 11), r"A's batch dimensions \(3,\) and B's \(4,\) do not broadcast"),
        ((13, 17), (16,), r"A is 13x17 and B is a vector of 16 \(17 != 16\)"),
        ((2, 13, 17), (2, 16, 11), r"A is 2x13x17 and B is 2x16x11 \(17 != 16\)"),
    ],
)
def test_shapes_numpy_refuses_are_refused_before_any_write(tmp_path, a_shape, b_shape, message):
    _, za = stored(tmp_path, "a", a_shape, a_shape, "float32", 1)
    _, zb = stored(tmp_path, "b", b_shape, b_shape, "float32", 2)
    with pytest.raises(InputError, match=message):
        outofcore.matmul(za, zb, str(tmp_path / "c.zarr"), client="sync", progress=False)
    assert not (tmp_path / "c.zarr").exists()


def test_scales_and_addend_of_the_output_shape(tmp_path):
    """alpha, beta and an addend of numpy's output shape, for a stack and for a vector."""
    cases = (((3, 13, 17), (17, 11)), ((13, 17), (17,)), ((17,), (17,)))
    for case, (a_shape, b_shape) in enumerate(cases):
        folder = tmp_path / str(case)
        folder.mkdir()
        a, za = stored(folder, "a", a_shape, (2, 5, 6)[-len(a_shape) :], "float64", 3)
        b, zb = stored(folder, "b", b_shape, (7, 4)[-len(b_shape) :], "float64", 4)
        out_shape = np.matmul(a, b).shape
        d, zd = stored(folder, "d", out_shape, tuple(max(1, n // 2) for n in out_shape), "f8", 5)
        c = outofcore.matmul(
            za, zb, str(folder / "c.zarr"), alpha=-0.5, beta=2.0, addend=zd,
            client="sync", progress=False,
        )  # fmt: skip
        assert_gemm_close(c[...], a, b, accumulated_in="float64", alpha=-0.5, beta=2.0, addend=d)


def test_gram_of_a_stack_is_each_matrix_gram(tmp_path):
    x, zx = stored(tmp_path, "x", (3, 50, 7), (1, 11, 3), "float64", 6)
    g = outofcore.gram(zx, str(tmp_path / "g.zarr"), client="sync", progress=False, memory="64KiB")
    expected = np.swapaxes(x, -1, -2) @ x
    assert g.shape == (3, 7, 7)
    np.testing.assert_allclose(g[...], expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(g[...], np.swapaxes(g[...], -1, -2))  # exactly symmetric


def test_a_stack_on_a_dask_cluster_with_split_k(tmp_path):
    """Tiles of every matrix share the cluster's workers; k split inside a stack."""
    from distributed import Client, LocalCluster  # noqa: PLC0415

    a, za = stored(tmp_path, "a", (4, 29, 300), (1, 10, 37), "float32", 7)
    b, zb = stored(tmp_path, "b", (300, 23), (41, 9), "float32", 8)
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        for splits in (1, 3):
            c = outofcore.matmul(
                za, zb, str(tmp_path / f"c{splits}.zarr"), client=client, splits=splits,
                tile=(10, 9), progress=False,
            )  # fmt: skip
            check_against_numpy(c[...], a, b, False, False)


def test_verify_names_the_wrong_matrix_of_a_stack(tmp_path):
    a, za = stored(tmp_path, "a", (4, 13, 17), (1, 5, 6), "float64", 9)
    b, zb = stored(tmp_path, "b", (17,), (7,), "float64", 10)
    out = str(tmp_path / "c.zarr")
    outofcore.matmul(za, zb, out, client="sync", progress=False)
    assert verify(za, zb, out, client="sync").passed
    c = zarr.open_array(out, mode="r+")
    values = c[...]
    values[2, 5] += 1e-3 * abs(values[2, 5]) + 1e-3
    c[...] = values
    report = verify(za, zb, out, client="sync", rounds=8)
    assert not report.passed
    assert report.first_failing_matrix == (2,) and report.first_failing_row == 5


def test_dask_arrays_of_a_stack_and_their_swapped_axes(tmp_path):
    """``da.swapaxes(S, -1, -2)`` is the stack's transpose flag; a vector's ``.T`` is itself."""
    s, zs = stored(tmp_path, "s", (3, 17, 13), (1, 6, 5), "float32", 11)
    v, zv = stored(tmp_path, "v", (17,), (7,), "float32", 12)
    c = outofcore.matmul(
        da.swapaxes(da.from_zarr(zs), -1, -2), da.from_zarr(zv).T, str(tmp_path / "c.zarr"),
        client="sync", progress=False,
    )  # fmt: skip
    check_against_numpy(c[...], s, v, True, False)
    with pytest.raises(InputError, match="computes something"):
        outofcore.matmul(da.from_zarr(zs).T, zv, str(tmp_path / "d.zarr"), client="sync")


def test_command_line_vectors_and_stacks(tmp_path):
    """`outofcore random` writes vectors and stacks; matmul, plan and verify take them."""
    paths = {name: str(tmp_path / f"{name}.zarr") for name in ("s", "m", "x", "c", "y")}
    made = [
        cli("random", paths["s"], "--shape", "3,40,30", "--chunks", "1,16,7", "--seed", "1"),
        cli("random", paths["m"], "--shape", "30,20", "--chunks", "8,8", "--seed", "2"),
        cli("random", paths["x"], "--shape", "30", "--chunks", "7", "--seed", "3"),
    ]
    assert all(p.returncode == 0 for p in made), [p.stderr for p in made]
    assert "wrote" in made[2].stdout and " 30 float32" in made[2].stdout
    plan = cli("plan", paths["s"], paths["x"])
    assert plan.returncode == 0, plan.stderr
    assert "output 3x40: a stack of 3 products" in plan.stdout and "B is a vector" in plan.stdout
    for b, out in ((paths["m"], paths["c"]), (paths["x"], paths["y"])):
        done = cli("matmul", paths["s"], b, "-o", out, "--memory", "256KiB", "-q")
        assert done.returncode == 0, done.stderr
        checked = cli("verify", paths["s"], b, out)
        assert checked.returncode == 0 and "PASSED" in checked.stdout, checked.stdout
    s, m, x = (zarr.open_array(paths[n])[...] for n in "smx")
    check_against_numpy(zarr.open_array(paths["c"])[...], s, m, False, False)
    check_against_numpy(zarr.open_array(paths["y"])[...], s, x, False, False)


def test_a_stack_killed_mid_job_resumes_and_recomputes_a_damaged_record(tmp_path):
    """SIGKILL of ``outofcore matmul`` on a stack; one matrix's record then damaged; the
    rerun skips the other recorded tiles (``tile-I-J-bE``), computes the rest, and the
    output equals numpy's."""
    a, b, c = (str(tmp_path / name) for name in ("s.zarr", "t.zarr", "c.zarr"))
    random_array(a, (6, 700, 600), (1, 100, 100), seed=1)
    random_array(b, (600, 500), (100, 100), seed=2)  # one B for every matrix
    command = [a, b, "-o", c, "--memory", "512KiB", "--scheduler", "sync", "--json"]
    job = subprocess.Popen(
        [sys.executable, "-m", "outofcore.cli", "matmul", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "OUTOFCORE_LEASE_TIMEOUT": "1"},
    )
    try:
        total = None

        def enough() -> bool:
            nonlocal total
            document = Path(c) / JOURNAL_DIR / "job.json"
            if total is None and document.exists():
                total = json.loads(document.read_text())["tiles_total"]
            return total is not None and len(tile_records(Path(c))) >= total // 3

        wait_for(enough, 120, "a third of the tiles")
        assert job.poll() is None, "the job finished before the kill; make it longer"
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    records = tile_records(Path(c))
    assert all(re.fullmatch(r"tile-\d+-\d+-b[0-5]\.json", r.name) for r in records), records
    records[-1].write_text('{"damaged": ')  # a record cut short
    rerun = cli("matmul", *command)
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout)
    assert summary["tiles"] == total and summary["tiles_skipped"] == len(records) - 1
    expected = zarr.open_array(a)[...].astype(np.float64) @ zarr.open_array(b)[...]
    assert_gemm_close(
        zarr.open_array(c)[...], zarr.open_array(a)[...], zarr.open_array(b)[...],
        accumulated_in="float32",
    )  # fmt: skip
    assert zarr.open_array(c).shape == expected.shape
    checked = cli("verify", a, b, c, "--json")
    assert checked.returncode == 0 and json.loads(checked.stdout)["passed"] is True

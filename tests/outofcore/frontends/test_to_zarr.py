"""``outofcore.to_zarr``: dask.array code reaches outofcore with one line (issue 31, item 1).

The product at the top of a dask graph is found from the layers dask.array builds
(:mod:`outofcore.frontends.dask_products`), never guessed: every form is compared with numpy,
and graphs that are anything else are stored by dask, as they compute.
"""

from __future__ import annotations

import logging

import dask.array as da
import numpy as np
import pytest
import zarr

import outofcore
from outofcore.errors import InputError, OutputExistsError
from outofcore.frontends.dask_products import product_at_top, top_product
from tests.helpers import assert_gemm_close, random_matrix, write_zarr


@pytest.fixture
def stored(tmp_path):
    """A (97x61, ragged chunks) and B (61x43) as zarr arrays and numpy arrays."""
    rng = np.random.default_rng(31)
    a, b = random_matrix(rng, (97, 61), "float32"), random_matrix(rng, (61, 43), "float32")
    write_zarr(tmp_path / "a.zarr", a, (20, 13))
    write_zarr(tmp_path / "b.zarr", b, (13, 9))
    return tmp_path, a, b


def forms(folder):
    """Each dask spelling of a product, with the numpy product it is and its flags."""
    a, b = da.from_zarr(str(folder / "a.zarr")), da.from_zarr(str(folder / "b.zarr"))
    return {
        "a @ b": (a @ b, lambda x, y: x @ y, (False, False)),
        "a.T @ a": (a.T @ a, lambda x, y: x.T @ x, (True, False)),
        "a @ a.T": (a @ a.T, lambda x, y: x @ x.T, (False, True)),
        "da.matmul": (da.matmul(a, b), lambda x, y: x @ y, (False, False)),
        "da.dot(a, b.T.T)": (da.dot(a, b.T.T), lambda x, y: x @ y, (False, False)),
        "einsum ij,jk->ik": (da.einsum("ij,jk->ik", a, b), lambda x, y: x @ y, (False, False)),
        "einsum ji,jk->ik": (da.einsum("ji,jk->ik", a.T, b), lambda x, y: x @ y, (False, False)),
        "einsum ij,jk->ki": (da.einsum("ij,jk->ki", a, b), lambda x, y: (x @ y).T, (True, True)),
        "tensordot axes=1": (da.tensordot(a, b, axes=1), lambda x, y: x @ y, (False, False)),
        "2 * (a @ b)": (2 * (a @ b), lambda x, y: 2 * (x @ y), (False, False)),
        "(a.T @ a) / 96": ((a.T @ a) / 96, lambda x, y: (x.T @ x) / 96, (True, False)),
        "tensordot axes 0,0": (
            da.tensordot(a.T, b.T.T, axes=((0,), (0,))),
            lambda x, y: x @ y,
            (False, False),
        ),
        "centred gram": (
            (a - a.mean(axis=0)).T @ (a - a.mean(axis=0)),
            lambda x, y: (x - x.mean(axis=0)).T @ (x - x.mean(axis=0)),
            (True, False),
        ),
        "astype and sliced": (
            a[:, 3:50].astype("float64") @ b[3:50, 5:],
            lambda x, y: x[:, 3:50] @ y[3:50, 5:],
            (False, False),
        ),
    }


def test_every_form_is_found_with_its_flags(stored):
    folder = stored[0]
    for name, (x, _, flags) in forms(folder).items():
        found = product_at_top(x)
        assert found is not None, name
        assert (found.transpose_a, found.transpose_b) == flags, name


def test_anything_more_than_a_product_of_stored_arrays_is_not_a_product(stored):
    folder = stored[0]
    a, b = da.from_zarr(str(folder / "a.zarr")), da.from_zarr(str(folder / "b.zarr"))
    one_k = da.from_zarr(str(folder / "a.zarr"), chunks=(20, 61))
    one_k_b = da.from_zarr(str(folder / "b.zarr"), chunks=(61, 9))
    assert product_at_top(one_k @ one_k_b) is not None  # one block of k: squeezed, not summed
    rechunked = product_at_top(one_k @ b)  # dask rechunks b to one_k's k blocks: the same
    assert rechunked is not None and not rechunked.b_steps  # values, b is read as stored
    assert product_at_top(2 * (a @ b)).alpha == 2.0  # a scale on top: the job's alpha
    assert product_at_top((a.T @ a) / 96).alpha == 1 / 96
    for x in (
        (a @ b) + 1,
        1 / (a @ b),
        (a @ b).sum(axis=0),
        (a @ b)[:5],
        (one_k @ one_k_b)[:5],
        a[:, ::2] @ b[::2],  # strided slices: not a region
        a.astype("int64") @ b.astype("int64"),  # integer steps: not taken
        a + 1,
        da.outer(a[:, 0], b[0]),
    ):
        assert product_at_top(x) is None, x.name
    assert top_product(a[::2].T @ a[::2])[1] == "matmul"  # a product; operands compute
    sliced = product_at_top(a[:50].T @ a[:50])  # a unit-step slice: a region, read
    assert sliced.a_window == sliced.b_window and sliced.a_window.shape == (50, 61)
    assert top_product(a + 1) is None
    centred = product_at_top((a - a.mean(axis=0)).T @ a.astype("float64"))  # steps: read
    assert [s.op for s in centred.a_steps] == ["sub"] and centred.transpose_a
    assert [s.op for s in centred.b_steps] == ["astype"]


def test_to_zarr_runs_every_form_on_a_cluster_as_outofcore_tasks(stored):
    """On a distributed Client of 2 workers: outofcore's tile tasks ran there (its task
    stream), and every form equals numpy's product."""
    from distributed import Client, LocalCluster, get_task_stream  # noqa: PLC0415

    folder, a, b = stored
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        for number, (name, (x, product, _)) in enumerate(forms(folder).items()):
            with get_task_stream(client) as stream:
                out = outofcore.to_zarr(
                    x, str(folder / f"c{number}.zarr"), client=client, memory="4MiB",
                    progress=False,
                )  # fmt: skip
            assert any("tile-" in str(task["key"]) for task in stream.data), name
            assert out.dtype == x.dtype, name
            expected = product(a.astype(np.float64), b.astype(np.float64))
            np.testing.assert_allclose(out[...], expected, rtol=1e-4, atol=1e-3, err_msg=name)
        gram = zarr.open_array(str(folder / "c1.zarr"))
        assert gram.attrs["outofcore"]["product"]["symmetric"] is True  # half the tiles


def test_anything_else_is_stored_by_dask_and_says_so(stored, caplog):
    folder, a, _ = stored
    x = da.from_zarr(str(folder / "a.zarr"))
    with caplog.at_level(logging.INFO, logger="outofcore"):
        out = outofcore.to_zarr(x[:, :40] * 2 + 1, str(folder / "s.zarr"), client="sync")
    np.testing.assert_array_equal(out[...], a[:, :40] * 2 + 1)
    assert out.attrs["outofcore"] == {"complete": True, "stored_by": "dask.array.to_zarr"}
    assert "has no matrix product; dask.array computes it" in caplog.text  # no warning
    part = x[:50:2]  # a strided slice: computed by dask, a FallbackWarning (issue 55)
    with pytest.warns(outofcore.FallbackWarning, match="is a matmul whose operands compute"):
        out = outofcore.to_zarr(part.T @ part, str(folder / "g.zarr"), client="sync")
    c = a[:50:2].astype(np.float64)
    np.testing.assert_allclose(out[...], c.T @ c, rtol=1e-4, atol=1e-3)


def test_what_dask_stores_takes_the_chunks_asked(stored):
    """chunks= reaches an array dask.array stores, as it reaches a job's output: clipped to
    the matrix, a stack's batch chunked 1; on a vector (no matrix axes) it is refused."""
    folder, a, _ = stored
    x = da.from_zarr(str(folder / "a.zarr"))
    out = outofcore.to_zarr(x * 2 + 1, str(folder / "k.zarr"), chunks=(40, 1000), client="sync")
    assert out.chunks == (40, x.shape[1])  # 1000 columns clipped to the matrix's
    np.testing.assert_array_equal(out[...], a * 2 + 1)
    stack = da.stack([x, x - 1])
    out = outofcore.to_zarr(stack, str(folder / "st.zarr"), chunks=16, client="sync")
    assert out.chunks == (1, 16, 16)
    np.testing.assert_array_equal(out[...], np.stack([a, a - 1]))
    with pytest.raises(InputError, match=r"\['chunks'\] are options of an outofcore product"):
        outofcore.to_zarr(x[:, 0] + 1, str(folder / "v.zarr"), chunks=8, client="sync")
    assert not (folder / "v.zarr").exists()


def test_refusals_before_anything_is_written(stored):
    folder, a, _ = stored
    x = da.from_zarr(str(folder / "a.zarr"))
    with pytest.raises(InputError, match="to_zarr stores a dask array; got a numpy.ndarray"):
        outofcore.to_zarr(a, str(folder / "n.zarr"))
    with pytest.raises(InputError, match=r"\['memory'\] are options of an outofcore product"):
        outofcore.to_zarr(x + 1, str(folder / "m.zarr"), memory="1GiB")
    assert not (folder / "n.zarr").exists() and not (folder / "m.zarr").exists()
    outofcore.to_zarr(x + 1, str(folder / "p.zarr"), client="sync")
    with pytest.raises(OutputExistsError):
        outofcore.to_zarr(x + 2, str(folder / "p.zarr"), client="sync")
    mine = folder / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    for y in (x + 1, x.T @ x):
        with pytest.raises(InputError, match="is a folder that is not a zarr array"):
            outofcore.to_zarr(y, str(mine), overwrite=True, client="sync")
    assert (mine / "notes.txt").read_text() == "mine"
    replaced = outofcore.to_zarr(x - 1, str(folder / "p.zarr"), overwrite=True, client="sync")
    np.testing.assert_array_equal(replaced[...], a - 1)


def test_integer_products_are_exact_in_dasks_dtype(stored):
    """dask types int8 @ int8 as int64: outofcore writes that dtype, exactly.  An operand
    that computes (``astype``) is stored by dask."""
    folder = stored[0]
    rng = np.random.default_rng(5)
    i8 = rng.integers(-128, 128, size=(30, 50), dtype=np.int8)
    write_zarr(folder / "i8.zarr", i8, (7, 11))
    x8 = da.from_zarr(str(folder / "i8.zarr"))
    product = x8 @ x8.T
    out = outofcore.to_zarr(product, str(folder / "n.zarr"), client="sync")
    assert out.dtype == product.dtype and out.attrs["outofcore"]["product"]["exact"] is True
    assert_gemm_close(out[...], i8, i8.T, accumulated_in=None)
    halving = (x8 @ x8.T) / 2  # an exact product takes whole scales: dask computes this
    halved = outofcore.to_zarr(halving, str(folder / "h.zarr"), client="sync")
    assert halved.attrs["outofcore"]["stored_by"] == "dask.array.to_zarr"
    np.testing.assert_array_equal(halved[...], halving.compute(scheduler="sync"))
    computes = x8.astype(np.int16) @ x8.T  # dask's blocks wrap in int16, summed in int64
    written = outofcore.to_zarr(computes, str(folder / "w.zarr"), client="sync")
    np.testing.assert_array_equal(written[...], computes.compute(scheduler="sync"))

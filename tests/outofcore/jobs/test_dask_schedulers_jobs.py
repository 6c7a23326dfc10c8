"""Dask's scheduler choice (issue 45, item 1): under ``dask.config.set(scheduler=...)``
``"threads"`` or ``"sync"`` (``"synchronous"``, ``"single-threaded"``) and no client,
``matmul``, ``gram``, ``to_zarr`` and ``xarray.dot`` run their tasks in this process
without a LocalCluster, through dask's local schedulers: ``dask.diagnostics.ProgressBar``
shows them.  A client given, or a default Client open, still wins."""

from __future__ import annotations

import io
import re
import tempfile
import threading
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr
from dask.callbacks import Callback
from dask.diagnostics import ProgressBar
from distributed import Client, LocalCluster, get_task_stream
from distributed.deploy.spec import SpecCluster
from hypothesis import event, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import outofcore
import outofcore.xarray
from outofcore.compute.worker_context import worker_context
from outofcore.errors import BudgetError
from tests.helpers import assert_gemm_close, random_matrix, write_zarr

LOCAL = ["threads", "sync", "synchronous", "single-threaded"]


class _Seen(Callback):
    """What dask's local-scheduler callbacks saw of a job: its tasks' keys and the threads
    (dask's worker ids) they ran on, and the clusters alive while they ran; each result
    held back ``pause`` seconds, so that a progress bar sees the run move."""

    def __init__(self, pause: float = 0.0) -> None:
        super().__init__()
        self.pause = pause
        self.keys: list[object] = []
        self.workers: set[object] = set()
        self.clusters: set[object] = set()

    def _pretask(self, key, dsk, state):
        self.clusters.update(SpecCluster._instances)

    def _posttask(self, key, result, dsk, state, worker_id):
        self.keys.append(key)
        self.workers.add(worker_id)
        time.sleep(self.pause)


@pytest.fixture
def stored(tmp_path):
    """``a`` (300 x 200) and ``b`` (200 x 100), float64, in zarr arrays of ragged chunks."""
    rng = np.random.default_rng(45)
    a, b = random_matrix(rng, (300, 200), "float64"), random_matrix(rng, (200, 100), "float64")
    write_zarr(tmp_path / "a.zarr", a, (64, 64))
    write_zarr(tmp_path / "b.zarr", b, (64, 48))
    return a, b


def _percentages(shown: str) -> list[int]:
    return [int(p) for p in re.findall(r"(\d+)% Completed", shown)]


@pytest.mark.parametrize("scheduler", LOCAL)
def test_a_local_scheduler_runs_here_with_dasks_progress_bar(tmp_path, stored, scheduler):
    a, b = stored
    before = set(SpecCluster._instances)
    bar, seen = io.StringIO(), _Seen(pause=0.03)
    with dask.config.set(scheduler=scheduler), ProgressBar(out=bar, dt=0.005), seen:
        c = outofcore.matmul(tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
                             memory="1MiB")  # fmt: skip
    assert_gemm_close(c[...], a, b, accumulated_in="float64")
    tiles = c.attrs["outofcore"]["summary"]["tiles"]
    assert tiles >= 4 and len(seen.keys) == tiles  # every tile a task of dask's scheduler
    assert seen.clusters <= before  # no LocalCluster while they ran
    with pytest.raises(ValueError):  # and no Client left behind
        Client.current()
    shown = _percentages(bar.getvalue())
    assert shown[-1] == 100 and len(set(shown)) >= 2, bar.getvalue()  # the bar moved
    if scheduler == "threads":  # a pool of threads, not this one
        assert None not in seen.workers and threading.get_ident() not in seen.workers
    else:  # dask's synchronous scheduler
        assert seen.workers == {None}


def test_gram_to_zarr_and_xarray_dot_run_on_dasks_threads(tmp_path, stored, capfd):
    a, b = stored
    x, y = da.from_zarr(str(tmp_path / "a.zarr")), da.from_zarr(str(tmp_path / "b.zarr"))
    before, seen = set(SpecCluster._instances), _Seen()
    capfd.readouterr()
    with dask.config.set(scheduler="threads"), seen:
        g = outofcore.gram(tmp_path / "a.zarr", tmp_path / "g.zarr", memory="1MiB")
        d = outofcore.to_zarr(x @ y, str(tmp_path / "d.zarr"), memory="1MiB")
        xa, yb = xr.DataArray(x, dims=("i", "k")), xr.DataArray(y, dims=("k", "j"))
        e = outofcore.xarray.dot(xa, yb, dim="k", out=str(tmp_path / "e.zarr"), memory="1MiB")
    out, err = capfd.readouterr()
    assert out == "" and err == "", (out, err)  # quiet: no bar asked for, none shown
    assert_gemm_close(g[...], a, a, accumulated_in="float64", transpose_a=True)
    assert_gemm_close(d[...], a, b, accumulated_in="float64")
    assert_gemm_close(e.values, a, b, accumulated_in="float64")
    assert len({key[0] for key in seen.keys}) >= 3  # the three jobs' runs, on dask's threads
    assert seen.clusters <= before and None not in seen.workers


def test_a_client_given_or_open_wins_over_dask_config(tmp_path, stored):
    a, b = stored
    seen = _Seen()
    with dask.config.set(scheduler="threads"), seen:
        c = outofcore.matmul(tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
                             memory="1MiB", client="sync")  # fmt: skip
        assert seen.workers == {None}  # dask's synchronous scheduler, as asked
        seen.workers.clear()
        with (
            LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster,
            Client(cluster),  # the default Client
        ):
            d = outofcore.matmul(tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "d.zarr",
                                 memory="1MiB")  # fmt: skip
        assert not seen.workers  # its tasks ran on the default Client's cluster
    # What that cluster's worker threads kept here outlives them (as after any job on a
    # user's LocalCluster(processes=False)): nobody's now.
    worker_context().release_in_process()
    for out in (c, d):
        assert_gemm_close(out[...], a, b, accumulated_in="float64")


def test_a_numpy_operand_runs_on_dasks_threads(tmp_path):
    rng = np.random.default_rng(7)
    a = random_matrix(rng, (90, 70), "float32")
    b = random_matrix(rng, (70, 50), "float32")
    with dask.config.set(scheduler="threads"):
        c = outofcore.matmul(a, b, tmp_path / "c.zarr")
    assert_gemm_close(c[...], a, b, accumulated_in="float32")
    assert isinstance(c, zarr.Array)


def test_dask_config_given_a_function_or_a_client_is_followed(tmp_path, stored):
    """``dask.config.set(scheduler=dask.local.get_sync)`` runs in this thread, as "sync";
    ``dask.config.set(scheduler=client)`` on that client, as dask computes there."""
    import dask.local  # noqa: PLC0415

    a, b = stored
    seen = _Seen()
    with dask.config.set(scheduler=dask.local.get_sync), seen:
        c = outofcore.matmul(tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
                             memory="1MiB")  # fmt: skip
    assert seen.workers == {None}  # dask's synchronous scheduler
    seen.workers.clear()
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        with dask.config.set(scheduler=client), seen, get_task_stream(client) as stream:
            d = outofcore.matmul(tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "d.zarr",
                                 memory="1MiB")  # fmt: skip
        assert not seen.workers  # not dask's local schedulers: that client's worker
        assert len(stream.data) >= d.attrs["outofcore"]["summary"]["tiles"] >= 4
    worker_context().release_in_process()
    for out in (c, d):
        assert_gemm_close(out[...], a, b, accumulated_in="float64")


def _elements(dtype: str) -> st.SearchStrategy:
    """Small values mostly, and any value of the dtype: NaN, Inf, the largest integers."""
    small = st.integers(-3, 3) if np.dtype(dtype).kind in "if" else st.integers(0, 3)
    if np.dtype(dtype).kind == "c":
        small = st.builds(complex, st.integers(-3, 3), st.integers(-3, 3))
    return st.one_of(small, small, small, hnp.from_dtype(np.dtype(dtype)))


def _assert_as_numpy(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """Integers bit for bit as numpy's product in 64 bits (wrapped as numpy wraps; an
    output narrower than 64 bits where it holds every value); inexact values within the
    bound of their terms, and where an operand's row or column is not finite, NaN and
    Inf where numpy has them."""
    with np.errstate(all="ignore"):
        want = np.matmul(a, b)
    assert got.shape == want.shape
    if want.dtype.kind in "iu":
        wide = np.uint64 if want.dtype.kind == "u" else np.int64
        assert got.dtype.kind in "iu"
        np.testing.assert_array_equal(got.astype(wide), np.matmul(a.astype(wide), b.astype(wide)))
        return
    assert got.dtype == want.dtype
    info = np.finfo(want.dtype)
    with np.errstate(all="ignore"):
        finite_a, finite_b = np.isfinite(a), np.isfinite(b)
        terms = np.where(finite_a, np.abs(a), 0).astype(float) @ np.where(
            finite_b, np.abs(b), 0
        ).astype(float)
    checked = np.isfinite(terms) & (terms <= float(info.max) / 8)
    tame = checked & finite_a.all(axis=1)[:, None] & finite_b.all(axis=0)[None, :]
    bound = 8 * (a.shape[1] + 2) * float(info.eps) * terms + float(info.tiny)
    with np.errstate(all="ignore"):
        assert (np.abs(got - want)[tame] <= bound[tame]).all(), (got, want)
    wild = checked & ~tame
    np.testing.assert_array_equal(np.isfinite(got[wild]), np.isfinite(want[wild]))
    if want.dtype.kind == "f":
        np.testing.assert_array_equal(np.isnan(got[wild]), np.isnan(want[wild]))


@given(data=st.data())
def test_any_local_scheduler_gives_numpys_product(data):
    """The door ``dask.config.set(scheduler=...)``, differential: whatever dask.config's
    local scheduler (threads, sync, ``dask.local.get_sync``), dtype, shapes, chunks and
    tiles, ``outofcore.matmul`` gives numpy's ``a @ b``, NaN, Inf and huge integers
    included, and leaves no LocalCluster behind."""
    scheduler = data.draw(st.sampled_from(["threads", "sync", dask.local.get_sync]))
    dtype = data.draw(st.sampled_from(["float32", "float64", "complex64", "int8", "int32",
                                       "uint16", "int64"]))  # fmt: skip
    m, k, n = (data.draw(st.integers(1, 24)) for _ in range(3))
    a = data.draw(hnp.arrays(dtype, (m, k), elements=_elements(dtype)))
    b = data.draw(hnp.arrays(dtype, (k, n), elements=_elements(dtype)))
    chunk = st.integers(1, 12)
    memory = data.draw(st.sampled_from([None, 1024, 2048, 4096, 8192]))
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_zarr(root / "a.zarr", a, (data.draw(chunk), data.draw(chunk)))
        write_zarr(root / "b.zarr", b, (data.draw(chunk), data.draw(chunk)))
        before = set(SpecCluster._instances)
        try:
            with dask.config.set(scheduler=scheduler):
                out = outofcore.matmul(
                    root / "a.zarr", root / "b.zarr", root / "c.zarr", memory=memory
                )
        except BudgetError:  # a budget below these chunks' smallest tile: refused first
            assert not (root / "c.zarr").exists()
            event("refused: budget")
            return
        event("several tiles" if out.attrs["outofcore"]["summary"]["tiles"] > 1 else "one tile")
        assert set(SpecCluster._instances) <= before  # no LocalCluster was started
        _assert_as_numpy(out[...], a, b)
        assert out.attrs["outofcore"]["complete"] is True
    worker_context().release_in_process()

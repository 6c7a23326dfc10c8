"""No "Sending large graph" (issue 45): a job holding numpy operands, or the large vectors
of elementwise steps, goes to Dask's workers once at most.  Where the workers are threads
of this process (the LocalCluster a job starts, a user's ``LocalCluster(processes=False)``)
the job stays here; where they are processes a large job is scattered once.  distributed's
warning is an error in these tests, and its log is checked too."""

from __future__ import annotations

import logging

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from distributed import Client

import outofcore
from outofcore.compute.worker_context import worker_context
from tests.helpers import assert_gemm_close, random_matrix

pytestmark = pytest.mark.filterwarnings("error:Sending large graph:UserWarning")


def _no_large_graph_logged(caplog) -> None:
    said = [r.getMessage() for r in caplog.records if "large graph" in r.getMessage()]
    assert not said, said


def test_numpy_operands_on_the_jobs_own_cluster(tmp_path, caplog):
    """The brief's case: 3000 x 2000 float64 (48 MB) @ 2000 x 300, no client: before, every
    task carried 52.69 MiB of pickled job."""
    rng = np.random.default_rng(45)
    a = random_matrix(rng, (3000, 2000), "float64")
    b = random_matrix(rng, (2000, 300), "float64")
    with caplog.at_level(logging.INFO):
        c = outofcore.matmul(a, b, tmp_path / "c.zarr")
    assert_gemm_close(c[...], a, b, accumulated_in="float64")
    _no_large_graph_logged(caplog)


def test_numpy_operands_on_a_users_cluster_in_this_process(tmp_path, own_local_cluster, caplog):
    """A user's Client of a ``LocalCluster(processes=False)`` runs the tasks here: numpy
    operands are taken (they were refused) and stay here."""
    rng = np.random.default_rng(46)
    a = random_matrix(rng, (2100, 500), "float32")
    b = random_matrix(rng, (500, 300), "float32")
    d = random_matrix(rng, (2100, 300), "float32")
    cluster = own_local_cluster(n_workers=2, processes=False)
    threshold = {"distributed.admin.large-graph-warning-threshold": "100kB"}  # a fifth of a
    with (
        dask.config.set(threshold),
        Client(cluster, set_as_default=False) as client,
        caplog.at_level(logging.INFO),
    ):
        c = outofcore.matmul(a, b, tmp_path / "c.zarr", memory="32MiB", beta=0.5, addend=d,
                             client=client)  # fmt: skip
        assert c.attrs["outofcore"]["summary"]["tiles"] >= 2
    cluster.close()
    worker_context().release_in_process()  # what its worker threads kept: nobody's now
    assert_gemm_close(c[...], a, b, accumulated_in="float32", beta=0.5, addend=d)
    _no_large_graph_logged(caplog)


def test_a_large_job_is_scattered_once_to_worker_processes(tmp_path, own_local_cluster, caplog):
    """A centred product's column means (300 000 of them, 2.4 MB, in both operands) travel
    with the job: to worker processes it is scattered once, not sent with every task."""
    rng = np.random.default_rng(47)
    x = random_matrix(rng, (4, 300_000), "float64")
    zarr.create_array(tmp_path / "x.zarr", data=x, chunks=(4, 50_000))
    stored = da.from_zarr(str(tmp_path / "x.zarr"))
    centred = stored - stored.mean(axis=0)
    cluster = own_local_cluster(n_workers=1, processes=True)
    threshold = {"distributed.admin.large-graph-warning-threshold": "1MB"}
    with (
        dask.config.set(threshold),
        Client(cluster, set_as_default=False) as client,
        caplog.at_level(logging.INFO),
    ):
        c = outofcore.to_zarr(centred @ centred.T, str(tmp_path / "c.zarr"), client=client)
    reference = x - x.mean(axis=0)
    assert_gemm_close(c[...], reference, reference.T, accumulated_in="float64")
    _no_large_graph_logged(caplog)

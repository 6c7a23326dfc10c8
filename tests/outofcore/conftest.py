"""Fixtures of the job tests: one real 2-worker LocalCluster per test module."""

from __future__ import annotations

import pytest
from distributed import Client, LocalCluster


@pytest.fixture(scope="module")
def two_process_client():
    """A client of a LocalCluster of two single-threaded worker processes (one per module)."""
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client

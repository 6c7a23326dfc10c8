"""Dask's dashboard for the jobs worth watching (issue 22): a job that starts its own
LocalCluster serves the dashboard when it is predicted to take
``DASHBOARD_AFTER_SECONDS`` or more here, or when asked; bokeh's import costs a short
job 0.5 to 1 s."""

from __future__ import annotations

import contextlib
import socket
import warnings

import numpy as np
import pytest
import zarr

import outofcore
from outofcore import cli
from outofcore.errors import InputError
from outofcore.frontends.cli_parser import build_parser
from outofcore.jobs import placement, planning
from outofcore.jobs.inputs import open_product
from outofcore.jobs.spec import DASHBOARD_AFTER_SECONDS, JobSpec
from outofcore.machine import prediction, probe_cache
from outofcore.runtime.cluster import DASHBOARD_EXTRA, serves_dashboard
from tests.helpers import assert_product_close, random_matrix, write_zarr

SHORT = "no dashboard (a short job: --dashboard for one)"


def operands(tmp_path, m: int, k: int, n: int, chunks: tuple[int, int]):
    """Two float32 arrays of ``m x k`` and ``k x n`` (metadata only: nothing is read)."""
    a = zarr.create_array(str(tmp_path / "a.zarr"), shape=(m, k), chunks=chunks, dtype="f4")
    b = zarr.create_array(str(tmp_path / "b.zarr"), shape=(k, n), chunks=chunks, dtype="f4")
    return a, b


@pytest.fixture
def no_probe_cache(tmp_path, monkeypatch):
    """No cached figures of this machine: the prediction uses the assumed slow machine."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert probe_cache.cached_figures(1) is None


def test_a_short_job_starts_its_cluster_without_the_dashboard_unless_asked(tmp_path, capsys):
    rng = np.random.default_rng(2211)
    a, b = random_matrix(rng, (67, 53), "float32"), random_matrix(rng, (53, 41), "float32")
    write_zarr(tmp_path / "a.zarr", a, (30, 17))
    write_zarr(tmp_path / "b.zarr", b, (17, 23))
    # progress=True: the cluster's start line, as the command prints it
    c = outofcore.matmul(
        tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr", progress=True
    )
    assert_product_close(c[...], a, b)
    stderr = capsys.readouterr().err
    assert f"in this process, {SHORT}" in stderr
    c = outofcore.matmul(
        tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "d.zarr", dashboard=True,
        progress=True,
    )  # fmt: skip
    assert_product_close(c[...], a, b)
    stderr = capsys.readouterr().err
    assert SHORT not in stderr
    served = "dashboard at http://" if serves_dashboard() else DASHBOARD_EXTRA
    assert served in stderr


def test_a_cluster_without_the_dashboard_takes_a_free_port_for_its_web_server(tmp_path):
    """Dask's scheduler serves its web pages (health, metrics) without a dashboard too,
    on 8787 when given no address: a second job, or anything else there, printed
    "Port 8787 is already in use" into the job's output."""
    rng = np.random.default_rng(2212)
    a, b = random_matrix(rng, (37, 29), "float32"), random_matrix(rng, (29, 31), "float32")
    write_zarr(tmp_path / "a.zarr", a, (20, 10))
    write_zarr(tmp_path / "b.zarr", b, (10, 16))
    with socket.socket() as taken, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with contextlib.suppress(OSError):  # held by something else already: as good
            taken.bind(("", 8787))
            taken.listen()
        c = outofcore.matmul(
            tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr", dashboard=False
        )
    assert_product_close(c[...], a, b)
    assert not [w for w in caught if "already in use" in str(w.message)], caught


def test_the_prediction_decides_between_a_short_and_a_long_job(tmp_path, no_probe_cache):
    spec = JobSpec(memory="256MiB")
    (tmp_path / "big").mkdir()
    big = open_product(*operands(tmp_path / "big", 16384, 16384, 16384, (1024, 1024)), spec)
    small = open_product(*operands(tmp_path, 97, 89, 83, (50, 40)), spec)
    # 8.8 TFLOP: over 10 s on any CPU of the assumed machine's kind (and far more).
    workers = planning.job_workers(spec, None)  # the LocalCluster the job would start
    large = planning.plan_job(big, spec, workers)
    assert prediction.predicted_seconds(large.plan, big, "none", False) >= DASHBOARD_AFTER_SECONDS
    assert placement.wants_dashboard(large, big, spec, None) is True
    short = planning.plan_job(small, spec, workers)
    assert prediction.predicted_seconds(short.plan, small, "none", False) < DASHBOARD_AFTER_SECONDS
    assert placement.wants_dashboard(short, small, spec, None) is False
    # As asked, whatever the prediction; a cluster the job does not start keeps its own.
    unasked = JobSpec(memory="256MiB", dashboard=False)
    assert placement.wants_dashboard(large, big, unasked, None) is False
    assert placement.wants_dashboard(short, small, JobSpec(memory="256MiB", dashboard=True), None)
    assert placement.wants_dashboard(large, big, spec, "sync") is False


def test_a_job_of_a_few_seconds_here_is_short_on_an_unprobed_machine(tmp_path, no_probe_cache):
    """The stack of 16 products of 2048² float32 (137 GFLOP, 2.6 s predicted and about 3 s
    measured on this project's 2-core machine): the assumed machine, a third of that one,
    predicts it under 10 s, so its first run does not import bokeh (0.4 s of it). The
    assumed figures before 2026-12-02 (sgemm 20 GFLOP/s) predicted 17 s."""
    spec = JobSpec(memory="256MiB")
    stack = [zarr.create_array(str(tmp_path / f"{name}.zarr"), shape=(16, 2048, 2048),
                               chunks=(1, 1024, 1024), dtype="f4") for name in "ab"]  # fmt: skip
    product = open_product(*stack, spec)
    job = planning.plan_job(product, spec, planning.job_workers(spec, None))
    seconds = prediction.predicted_seconds(job.plan, product, "none", False)
    assert 3 < seconds < DASHBOARD_AFTER_SECONDS  # slower than measured, not long
    assert placement.wants_dashboard(job, product, spec, None) is False


def test_cached_figures_never_measure(tmp_path):
    path = tmp_path / "machine.json"
    assert probe_cache.cached_figures(2, path=path, identity={"cpu": "A"}) is None
    assert not path.exists()  # nothing probed, nothing written
    measured = probe_cache.machine_figures(
        2, path=path, identity={"cpu": "A"}, measure=lambda t: prediction.ASSUMED_FIGURES
    ).figures
    assert probe_cache.cached_figures(2, path=path, identity={"cpu": "A"}) == measured
    assert probe_cache.cached_figures(1, path=path, identity={"cpu": "A"}) is None
    assert probe_cache.cached_figures(2, path=path, identity={"cpu": "B"}) is None


def test_the_option_is_a_flag_or_none_and_the_command_passes_it():
    with pytest.raises(InputError, match="dashboard = 'yes': need True or False"):
        JobSpec(dashboard="yes")
    parser = build_parser()
    for given, wanted in (([], None), (["--dashboard"], True), (["--no-dashboard"], False)):
        args = parser.parse_args(["matmul", "a.zarr", "b.zarr", "-o", "c.zarr", *given])
        assert cli._job_spec(args, {}).dashboard is wanted
        assert parser.parse_args(["demo", *given]).dashboard is wanted

"""The user's Client first (issue 21, items 2 and 3), on a real LocalCluster.

A job with no ``client=`` inside ``with Client(cluster):`` runs on that cluster
(the scheduler sees its tasks; the cluster stays open), its task keys name
their kind under ``key_split`` and each job is one ``distributed.span`` named
after its output.  With no Client open a job starts a LocalCluster of its own
and closes it (tests/outofcore/frontends/test_cli.py and tests/system/test_cluster.py
cover that path too).
"""

from __future__ import annotations

import collections
import json
import os
import urllib.request
from pathlib import Path

import dask
import numpy as np
import pytest
import zarr
from distributed import Client, LocalCluster, default_client, get_task_stream
from distributed.core import Status
from distributed.utils import key_split

import outofcore
from outofcore.api import run_job
from outofcore.errors import ClusterError
from outofcore.runtime.cluster import (
    DASHBOARD_EXTRA,
    dashboard_note,
    open_executor,
    serves_dashboard,
)
from outofcore.runtime.worker_sizing import DEFAULT_BUDGET_BYTES, WORKER_OVERHEAD_BYTES
from tests.helpers import assert_gemm_close, cli, random_matrix, write_zarr

KINDS = {"outofcore-tile", "outofcore-part", "outofcore-reduce"}


@pytest.fixture(scope="module")
def cluster():
    """Two single-threaded worker processes; each limit holds the default 1 GiB budget."""
    # Not the shared local_cluster fixture: this module is about the default Client, whose
    # cluster its tests open and close Clients of.
    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        memory_limit=2 * DEFAULT_BUDGET_BYTES + WORKER_OVERHEAD_BYTES,
    ) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, object]:
    """A (300x2011) and B (2011x70) float32 with ragged chunks, on disk, and their arrays."""
    folder = tmp_path_factory.mktemp("inputs")
    rng = np.random.default_rng(21)
    a, b = random_matrix(rng, (300, 2011), "float32"), random_matrix(rng, (2011, 70), "float32")
    write_zarr(folder / "a.zarr", a, (70, 250))
    write_zarr(folder / "b.zarr", b, (250, 33))
    return {"a": a, "b": b, "a_path": folder / "a.zarr", "b_path": folder / "b.zarr"}


def _scheduler_view(dask_scheduler) -> dict[str, object]:
    """Tasks finished by prefix (ever), and every span: its name and its groups' prefixes."""
    prefixes = {
        name: prefix.state_counts["memory"] for name, prefix in dask_scheduler.task_prefixes.items()
    }
    spans = [
        (span.name, sorted({group.prefix.name for group in span.groups}))
        for span in dask_scheduler.extensions["spans"].spans.values()
    ]
    return {"prefixes": prefixes, "spans": spans}


def _view(client: Client) -> dict[str, object]:
    return client.run_on_scheduler(_scheduler_view)


def test_a_job_without_client_runs_on_the_default_client_and_leaves_it_open(
    cluster, inputs, tmp_path, capsys
):
    with Client(cluster) as client:
        with get_task_stream(client) as stream:
            result = run_job(
                inputs["a_path"], inputs["b_path"], tmp_path / "c.zarr", tile=(140, 66),
                progress=True,  # the command line's announcement (a Python call is quiet)
            )  # fmt: skip
        # The scheduler of the user's cluster ran every tile, on its own workers.
        tiles = [r for r in stream.data if key_split(r["key"]) == "outofcore-tile"]
        assert len(tiles) == len(result.plan.tasks) == 6
        assert {r["worker"] for r in tiles} <= set(cluster.scheduler.workers)
        pids = {int(r.worker.rsplit(":", 1)[1]) for r in result.results}  # "host:pid"
        assert pids <= set(client.run(os.getpid).values())
        # Still open and usable: outofcore never closes a Client it did not make.
        assert client.status == "running" and cluster.status == Status.running
        assert client.submit(sum, [1, 2]).result() == 3
        assert default_client() is client
    stderr = capsys.readouterr().err
    assert f"Running on the default Dask Client: scheduler {cluster.scheduler_address}" in stderr
    assert "2 worker(s)" in stderr
    assert "Started a LocalCluster" not in stderr
    # Budget and checks are those of a cluster elsewhere, not this machine's memory cap.
    assert result.summary["task_budget_bytes"] == DEFAULT_BUDGET_BYTES
    assert result.summary["workers"] == 2
    c = zarr.open_array(str(tmp_path / "c.zarr"), mode="r")
    assert_gemm_close(c[...], inputs["a"], inputs["b"], accumulated_in="f4")


def test_kinds_and_one_span_per_job_named_after_its_output(cluster, inputs, tmp_path):
    x = random_matrix(np.random.default_rng(5), (97, 40), "float64")
    write_zarr(tmp_path / "x.zarr", x, (30, 17))
    outputs = {name: tmp_path / f"{name}.zarr" for name in ("plain", "split", "gram")}
    with Client(cluster) as client:
        before = _view(client)
        plain = run_job(
            inputs["a_path"], inputs["b_path"], outputs["plain"], tile=(140, 66), progress=False
        )
        split = run_job(
            inputs["a_path"], inputs["b_path"], outputs["split"], memory="8MiB", splits=5, tk=250,
            progress=False,
        )  # fmt: skip
        gram = outofcore.gram(tmp_path / "x.zarr", outputs["gram"], tile=(17, 17), progress=False)
        after = _view(client)
    assert split.plan.splits == 5 and plain.plan.splits == 1

    ran = collections.Counter(after["prefixes"])
    ran.subtract(before["prefixes"])
    split_tiles = len(split.plan.tasks)
    gram_tiles = 3 * 4 // 2  # on and above the diagonal
    assert {name: count for name, count in ran.items() if count} == {
        "outofcore-tile": len(plain.plan.tasks) + gram_tiles,
        "outofcore-part": split_tiles * 5,
        "outofcore-reduce": split_tiles,
    }
    assert not any(name.startswith("outofcore") and name not in KINDS for name in ran)

    new_spans = [span for span in after["spans"] if span not in before["spans"]]
    by_name = collections.defaultdict(list)
    for name, prefixes in new_spans:
        by_name[name].append(prefixes)
    for job, output in outputs.items():
        name = (f"outofcore {_where(output)}",)
        assert len(by_name[name]) == 1, (job, by_name)  # one span for the whole job
    assert by_name[(f"outofcore {_where(outputs['plain'])}",)] == [["outofcore-tile"]]
    assert by_name[(f"outofcore {_where(outputs['split'])}",)] == [
        ["outofcore-part", "outofcore-reduce"]
    ]
    assert by_name[(f"outofcore {_where(outputs['gram'])}",)] == [["outofcore-tile"]]
    np.testing.assert_allclose(gram[...], x.T @ x, rtol=1e-12)
    got = zarr.open_array(str(outputs["split"]))[...]
    assert_gemm_close(got, inputs["a"], inputs["b"], accumulated_in="f4")


def _where(output: Path) -> str:
    """How run_job names an output given as a path (outofcore.journal.status.describe_output)."""
    from outofcore.journal.status import describe_output  # noqa: PLC0415
    from outofcore.storage.locations import locate  # noqa: PLC0415

    return describe_output(locate(output, None).target)


def test_explicit_sync_wins_over_the_default_client(cluster, inputs, tmp_path):
    with Client(cluster) as client:
        before = _view(client)["prefixes"]
        result = run_job(
            inputs["a_path"], inputs["b_path"], tmp_path / "c.zarr", client="sync",
            tile=(140, 66), progress=False,
        )  # fmt: skip
        assert _view(client)["prefixes"] == before  # nothing reached the cluster
    assert result.summary["workers"] == 1
    c = zarr.open_array(str(tmp_path / "c.zarr"))[...]
    assert_gemm_close(c, inputs["a"], inputs["b"], accumulated_in="f4")


@pytest.mark.parametrize("name", ["sync", "synchronous", "single-threaded"])
def test_dask_config_scheduler_sync_runs_the_job_in_this_process(cluster, inputs, tmp_path, name):
    """Dask's convention: no Client open and dask.config's scheduler "sync": in process."""
    with Client(cluster) as watcher:  # only to look at the cluster's scheduler
        before = _view(watcher)["prefixes"]
    with dask.config.set(scheduler=name):
        result = run_job(inputs["a_path"], inputs["b_path"], tmp_path / "c.zarr", progress=False)
    assert result.summary["workers"] == 1 and result.summary["phases"]["cluster_start"] < 0.5
    with Client(cluster) as watcher:
        assert _view(watcher)["prefixes"] == before  # nothing reached a cluster
    c = zarr.open_array(str(tmp_path / "c.zarr"))[...]
    assert_gemm_close(c, inputs["a"], inputs["b"], accumulated_in="f4")


def test_dask_config_scheduler_address_runs_the_job_there(cluster, inputs, tmp_path, capsys):
    """No Client open, dask.config's scheduler-address (DASK_SCHEDULER_ADDRESS): the job
    runs on that scheduler's workers, as the command does and as `plan` says."""
    with dask.config.set({"scheduler-address": cluster.scheduler_address}):
        result = run_job(
            inputs["a_path"], inputs["b_path"], tmp_path / "c.zarr", tile=(140, 66),
            progress=False,
        )  # fmt: skip
    with Client(cluster) as watcher:
        assert _view(watcher)["prefixes"].get("outofcore-tile", 0) >= len(result.plan.tasks)
    assert result.summary["workers"] == 2
    assert "Started a LocalCluster" not in capsys.readouterr().err
    c = zarr.open_array(str(tmp_path / "c.zarr"))[...]
    assert_gemm_close(c, inputs["a"], inputs["b"], accumulated_in="f4")
    env = {"DASK_SCHEDULER_ADDRESS": cluster.scheduler_address}
    shown = cli("plan", str(inputs["a_path"]), str(inputs["b_path"]), "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["workers"] == 2  # the scheduler's workers, asked
    configured = dask.config.set({"scheduler-address": cluster.scheduler_address})
    with configured, pytest.raises(ClusterError, match="scheduler-address"):
        outofcore.matmul(inputs["a_path"], inputs["b_path"], tmp_path / "g.zarr", gpus=(0,))


def test_verify_runs_its_products_on_the_client_it_is_given(cluster, inputs, tmp_path):
    """verify(client=...) runs on that cluster's workers (a Client, or its address)."""
    c = tmp_path / "c.zarr"
    outofcore.matmul(inputs["a_path"], inputs["b_path"], c, client="sync", progress=False)
    with Client(cluster) as client:
        before = sum(_view(client)["prefixes"].values())
        report = outofcore.verify(inputs["a_path"], inputs["b_path"], c, client=client, seed=1)
        after_client = sum(_view(client)["prefixes"].values())
        by_address = outofcore.verify(
            inputs["a_path"], inputs["b_path"], c, client=cluster.scheduler_address, seed=1
        )
        after_address = sum(_view(client)["prefixes"].values())
    assert report.passed and by_address.passed
    assert report.max_relative_residual == by_address.max_relative_residual
    assert before < after_client < after_address  # each ran its tasks on the cluster
    here = outofcore.verify(inputs["a_path"], inputs["b_path"], c, seed=1)  # threads here
    assert here.passed and here.max_relative_residual == report.max_relative_residual


def test_gpus_with_a_default_client_are_refused_before_any_work(cluster, inputs, tmp_path):
    with Client(cluster), pytest.raises(ClusterError) as refused:
        outofcore.matmul(
            inputs["a_path"], inputs["b_path"], tmp_path / "c.zarr", gpus=(0,), progress=False
        )
    message = str(refused.value)
    assert "gpus=[0]" in message and cluster.scheduler_address in message
    assert "leave out gpus" in message
    assert not (tmp_path / "c.zarr").exists()


def test_workers_of_the_default_client_short_of_memory_are_named(inputs, tmp_path):
    small = WORKER_OVERHEAD_BYTES + 2**20  # 1 MiB per task beside the worker's own
    with (  # a cluster of its own, whose Client is the default one the job finds
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0",
            memory_limit=small,
        ) as cluster,
        Client(cluster),
        pytest.raises(ClusterError, match=f"{small} bytes for 1 thread"),
    ):  # fmt: skip
        outofcore.matmul(
            inputs["a_path"], inputs["b_path"], tmp_path / "c.zarr", memory="8MiB", progress=False
        )
    assert not (tmp_path / "c.zarr").exists()


def test_with_no_client_open_a_job_starts_its_own_cluster_and_names_its_dashboard(capsys):
    with open_executor(None, budget_bytes=64 * 2**20, announce=True) as executor:
        client = executor.client
        with pytest.raises(ValueError, match="No clients found"):
            default_client()  # the job's Client is not the default: another job cannot take it
        link = client.dashboard_link
        with urllib.request.urlopen(link, timeout=30) as page:
            asks_for_bokeh = "Dask needs bokeh" in page.read().decode()
    assert client.status == "closed"  # closed with its cluster after the job
    stderr = capsys.readouterr().err
    assert "Started a LocalCluster: 1 worker(s), " in stderr
    # The address only where the scheduler serves the dashboard; the extra to install otherwise.
    assert serves_dashboard() is not asks_for_bokeh
    if asks_for_bokeh:
        assert link not in stderr
        assert "no dashboard (pip install 'outofcore[dashboard]' for one)" in stderr
    else:
        assert f"dashboard at {link}" in stderr


def test_the_dashboard_note_names_the_address_the_extra_or_how_to_ask():
    link = "http://127.0.0.1:8787/status"
    served = f"dashboard at {link}" if serves_dashboard() else None
    assert dashboard_note(link, True) == (served or f"no dashboard ({DASHBOARD_EXTRA} for one)")
    assert dashboard_note(link, False) == ("no dashboard (a short job: --dashboard for one)")
    assert "outofcore[dashboard]" in DASHBOARD_EXTRA

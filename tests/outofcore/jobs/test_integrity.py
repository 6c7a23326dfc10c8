"""Integrity on a shared, long-running cluster (issue 9), with real processes and files.

* Panels a worker thread keeps between tasks are never read by another job:
  inputs rewritten at the same paths (new values, then a new dtype) between
  two jobs on one running ``dask scheduler`` + ``dask worker``.
* A resume onto a rewritten input is refused; an input rewritten during a
  job is caught at its end and the output stays incomplete.
* Two clients submitting jobs to one cluster at once: both right, and the
  worker's kept memory within the budget.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from distributed import Client

from outofcore.api import ATTRIBUTE, job_status, run_job
from outofcore.compute import panel_cache
from outofcore.errors import InputChangedError
from outofcore.frontends.generate import random_array
from outofcore.journal.records import JOURNAL_DIR
from outofcore.journal.resume import ResumeError
from tests.helpers import (
    assert_product_close,
    cli,
    free_port,
    long_job_inputs,
    random_matrix,
    tile_records,
    wait_for,
    write_zarr,
)

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
    """``dask scheduler`` and one ``dask worker`` (one thread) on loopback; its address."""
    port = free_port()
    logs = tmp_path_factory.mktemp("dask-logs")
    address = f"tcp://127.0.0.1:{port}"
    processes = [
        subprocess.Popen(
            [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port)]
            + ["--no-dashboard"],
            stdout=subprocess.DEVNULL,
            stderr=open(logs / "scheduler.log", "w"),  # noqa: SIM115 (closed with the process)
        )
    ]
    processes.append(
        subprocess.Popen(
            [str(BIN / "dask"), "worker", address, "--nworkers", "1", "--nthreads", "1"]
            + ["--no-dashboard", "--memory-limit", "2GiB"],
            stdout=subprocess.DEVNULL,
            stderr=open(logs / "worker.log", "w"),  # noqa: SIM115
        )
    )
    try:
        with Client(address, timeout=30) as client:
            client.wait_for_workers(1, timeout=60)
        yield address
    finally:
        for process in reversed(processes):
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def wait_until_idle(address: str, quiet_seconds: float = 1.0) -> None:
    """Wait until the cluster has run no task for ``quiet_seconds`` on end."""
    with Client(address) as client:

        def busy() -> bool:
            executing = client.run(lambda dask_worker: dask_worker.state.executing_count)
            return any(executing.values()) or any(client.processing().values())

        quiet_since = [time.monotonic()]

        def quiet() -> bool:
            if busy():
                quiet_since[0] = time.monotonic()
            return time.monotonic() - quiet_since[0] >= quiet_seconds

        wait_for(quiet, 120, "the cluster to run no task")


# -- panels kept between tasks -----------------------------------------------------------
def test_kept_panels_are_reused_only_by_their_own_job():
    a, b = np.arange(12.0).reshape(3, 4), np.arange(8.0).reshape(4, 2)
    spare = np.empty(5)
    identity = panel_cache.PanelIdentity("job-1", a.dtype.str, (4, 8), (0, 3), (0, 2))
    kept = panel_cache.KeptPanels(identity, "cpu", a, b, (spare,))
    panels = ((0, 4), (4, 8), (8, 12))
    same = {"dtype": a.dtype, "backend": "cpu", "panels": panels, "rows": (0, 3)}

    mine = panel_cache.plan_reuse(kept, job_id="job-1", cols=(2, 4), **same)  # next tile of a row
    assert mine.order == (1, 0, 2) and mine.a is a and mine.b is None
    assert mine.spares == [b, spare]  # the B panel is not this tile's: its buffer is free

    # Another job with the very same tiling and dtype: no content, every buffer free.
    other = panel_cache.plan_reuse(kept, job_id="job-2", cols=(2, 4), **same)
    assert other.order == (0, 1, 2) and other.a is None and other.b is None
    assert [x is y for x, y in zip(other.spares, (a, b, spare), strict=True)] == [True] * 3
    assert other.take(5) is spare and other.take(5) is None

    # Another dtype (the same job id cannot have one, but the identity says so too).
    wider = panel_cache.plan_reuse(
        kept, job_id="job-1", cols=(2, 4), **{**same, "dtype": np.dtype(np.float32)}
    )
    assert wider.a is None and wider.spares == []  # no float64 buffer serves a float32 task
    other_engine = panel_cache.plan_reuse(
        kept, job_id="job-1", cols=(2, 4), **{**same, "backend": "cuda"}
    )
    assert other_engine.a is a and other_engine.spares == []  # host buffers of another engine


def test_rewritten_inputs_between_jobs_on_one_running_cluster(dask_cluster, tmp_path):
    """Issue 9's first reproduction: same paths, new values, then a new dtype."""
    a_path, b_path = tmp_path / "a.zarr", tmp_path / "b.zarr"
    random_array(a_path, (256, 1024), (256, 256), seed=1)
    random_array(b_path, (1024, 1024), (256, 256), seed=2)
    common = {"memory": "4MiB", "client": dask_cluster, "progress": False}
    first = run_job(a_path, b_path, tmp_path / "c1.zarr", **common)
    assert first.summary["tiles"] == 2
    # The second tile started with the panel the first ended on: reuse is on.
    assert first.summary["bytes_read"] < first.summary["bytes_read_predicted"]

    random_array(a_path, (256, 1024), (256, 256), seed=7, overwrite=True)
    second = run_job(a_path, b_path, tmp_path / "c2.zarr", **common)
    a, b = zarr.open_array(a_path)[...], zarr.open_array(b_path)[...]
    assert_product_close(second.output[...], a, b)
    # Its first tile read everything (nothing from the first job), its second reused.
    assert second.summary["bytes_read"] == first.summary["bytes_read"]

    # float32 panels kept, then float64 inputs at the same paths with the same tiling.
    tiling = {"tile": (first.plan.tm, first.plan.tn), "tk": first.plan.tk}
    random_array(a_path, (256, 1024), (256, 256), "float64", seed=8, overwrite=True)
    random_array(b_path, (1024, 1024), (256, 256), "float64", seed=9, overwrite=True)
    third = run_job(a_path, b_path, tmp_path / "c3.zarr", **{**common, "memory": "8MiB"}, **tiling)
    a, b = zarr.open_array(a_path)[...], zarr.open_array(b_path)[...]
    assert third.output.dtype == np.float64
    assert_product_close(third.output[...], a, b)  # a float64 tolerance: no float32 panel


# -- inputs rewritten before a resume or during a job ------------------------------------
def test_resume_onto_a_rewritten_input_is_refused(dask_cluster, tmp_path):
    """Issue 9's second reproduction: the client SIGKILLed, A rewritten, the same command."""
    a, b, c = long_job_inputs(tmp_path)
    command = ["matmul", a, b, "-o", c, "--memory", "512KiB", "--scheduler", dask_cluster]
    job = subprocess.Popen(
        [sys.executable, "-m", "outofcore.cli", *command, "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "OUTOFCORE_LEASE_TIMEOUT": "1"},
    )
    try:
        wait_for(lambda: len(tile_records(Path(c))) >= 10, 120, "10 tiles journaled")
        assert job.poll() is None, "the job finished before the kill; make it longer"
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    wait_until_idle(dask_cluster)  # the dead client's tasks in flight still finish
    done = len(tile_records(Path(c)))
    random_array(a, (2000, 2000), (100, 100), seed=9, overwrite=True)  # same shape and chunks

    refused = cli(*command)
    assert refused.returncode == 2, refused.stderr
    assert f"the output {c!r} holds an unfinished job" in refused.stderr
    assert "input A was rewritten since the job started (" in refused.stderr
    assert "c/0/0 rewritten" in refused.stderr and "--overwrite" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert len(tile_records(Path(c))) == done  # nothing written

    again = cli(*command, "--overwrite", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["tiles_skipped"] == 0
    checked = cli("verify", a, b, c, "--json")
    assert checked.returncode == 0 and json.loads(checked.stdout)["passed"] is True


def test_input_rewritten_during_a_job_leaves_the_output_incomplete(tmp_path):
    a, b, c = long_job_inputs(tmp_path)
    command = ["matmul", a, b, "-o", c, "--memory", "512KiB", "--scheduler", "sync", "--json"]
    job = subprocess.Popen(
        [sys.executable, "-m", "outofcore.cli", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: len(tile_records(Path(c))) >= 3, 120, "3 tiles journaled")
        zarr.open_array(b, mode="r+")[1900:2000, 1000:1100] = 1.5  # B's last chunk
        assert job.poll() is None, "the job finished before the input changed; make it longer"
        _, stderr = job.communicate(timeout=300)
    finally:
        job.kill()
    assert job.returncode == 3, stderr  # a started job failed
    assert f"input B (file://{os.path.realpath(b)}) changed while the job read it" in stderr
    assert "c/19/10 rewritten" in stderr and "left incomplete" in stderr
    assert "Traceback" not in stderr
    assert zarr.open_array(c).attrs[ATTRIBUTE]["complete"] is False
    state = job_status(c)
    assert state["state"] == "stopped" and not state["complete"]
    assert state["tiles_done"] == state["tiles_total"]  # every tile computed, none trusted

    refused = cli(*command)
    assert refused.returncode == 2 and "input B was rewritten since the job started" in (
        refused.stderr
    )
    again = cli(*command, "--overwrite")
    assert again.returncode == 0, again.stderr
    assert_product_close(zarr.open_array(c)[...], zarr.open_array(a)[...], zarr.open_array(b)[...])


def test_input_rewritten_during_an_in_process_job_raises(tmp_path, monkeypatch):
    """The same check through the API: the error type, and nothing marked complete."""
    rng = np.random.default_rng(3)
    a, b = random_matrix(rng, (30, 20), "float64"), random_matrix(rng, (20, 40), "float64")
    write_zarr(tmp_path / "a.zarr", a, (10, 10))
    write_zarr(tmp_path / "b.zarr", b, (10, 10))
    import outofcore.compute.tile

    compute = outofcore.compute.tile.compute_tile
    calls = []

    def rewrite_a_after_the_first_tile(job, task, **options):
        calls.append(task.key)
        if len(calls) == 2:
            zarr.open_array(str(tmp_path / "a.zarr"), mode="r+")[0:10, 0:10] = 0.5
        return compute(job, task, **options)

    monkeypatch.setattr("outofcore.jobs.recorded.compute_tile", rewrite_a_after_the_first_tile)
    with pytest.raises(InputChangedError, match=r"input A .* changed while the job read it"):
        run_job(
            tmp_path / "a.zarr",
            tmp_path / "b.zarr",
            tmp_path / "c.zarr",
            memory=8 * 1024,
            client="sync",
            progress=False,
        )
    assert len(calls) > 2
    document = json.loads((tmp_path / "c.zarr" / JOURNAL_DIR / "job.json").read_text())
    assert document["complete"] is False
    with pytest.raises(ResumeError, match=r"input A was rewritten .*c/0/0 rewritten"):
        run_job(tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr", memory=8 * 1024,
                client="sync", progress=False)  # fmt: skip


# -- two jobs at once on one cluster -----------------------------------------------------
def test_two_clients_at_once_share_one_worker(tmp_path, own_local_cluster):
    """Two clients, two jobs (float32 and float64), one worker with two threads."""
    budget = 4 * 2**20
    jobs = {}
    for name, dtype, seed in (("x", "float32", 1), ("y", "float64", 2)):
        folder = tmp_path / name
        folder.mkdir()
        random_array(folder / "a.zarr", (700, 900), (100, 100), dtype, seed=seed)
        random_array(folder / "b.zarr", (900, 500), (100, 100), dtype, seed=seed + 10)
        jobs[name] = folder
    # A worker of its own: what it keeps is measured below from its start.
    cluster = own_local_cluster(n_workers=1, threads_per_worker=2, memory_limit="2GiB")
    results, errors = {}, {}
    start = threading.Barrier(2)

    def submit(name: str) -> None:
        folder = jobs[name]
        start.wait()
        try:
            results[name] = run_job(
                folder / "a.zarr",
                folder / "b.zarr",
                folder / "c.zarr",
                memory=budget,
                client=cluster.scheduler_address,  # a Client of its own
                progress=False,
            )
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors[name] = exc

    threads = [threading.Thread(target=submit, args=(name,)) for name in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    for name, folder in jobs.items():
        a, b = zarr.open_array(folder / "a.zarr")[...], zarr.open_array(folder / "b.zarr")[...]
        assert_product_close(results[name].output[...], a, b)
        assert results[name].summary["tiles"] >= 6
    # The two jobs ran at the same time on the same worker process.
    workers = {r.worker for result in results.values() for r in result.results}
    assert len(workers) == 1
    spans = {
        name: (min(r["finished"] for r in found), max(r["finished"] for r in found))
        for name, folder in jobs.items()
        for found in [[json.loads(p.read_text()) for p in tile_records(folder / "c.zarr")]]
    }
    assert spans["x"][0] < spans["y"][1] and spans["y"][0] < spans["x"][1], spans
    # What the worker kept after each task (both threads, both jobs) stayed within the budget.
    kept = [r.kept_bytes for result in results.values() for r in result.results]
    assert 0 < max(kept) <= budget, (max(kept), budget)


# -- faults mid-job: a full disk, a corrupt chunk ----------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs mounted for the test (needs root); skipped where none can be mounted."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs for the full-disk test needs root")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_stops_the_job_naming_the_output_then_the_rerun_resumes(small_disk, tmp_path):
    a, b = str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr")
    random_array(a, (300, 200), (50, 50), "float64", seed=1)
    random_array(b, (200, 400), (50, 50), "float64", seed=2)
    c = small_disk / "c.zarr"  # 300x400 float64: 960,000 bytes
    filler = small_disk / "filler"
    filler.write_bytes(bytes(1536 * 1024))  # leaves about 0.5 MiB
    command = ["matmul", a, b, "-o", str(c), "--memory", "256KiB", "--scheduler", "sync"]
    refused = cli(*command)  # the output cannot fit: refused before any write
    assert refused.returncode == 2, refused.stderr
    assert "0.92 MiB uncompressed" in refused.stderr and "512.00 kiB free" in refused.stderr
    assert not c.exists()

    filler.write_bytes(bytes(1024 * 1024))  # about 1 MiB free: the data fits, not its records
    full = cli(*command, "--json")
    assert full.returncode == 3, full.stderr  # a started job failed
    assert f"of the output file://{os.path.realpath(c)} failed: No space left on device" in (
        full.stderr
    )
    assert f"free of 2.00 MiB on the file system of {c})" in full.stderr
    assert "Traceback" not in full.stderr
    state = job_status(c)
    assert state["state"] == "stopped" and 0 < state["tiles_done"] < state["tiles_total"]
    assert not list(c.rglob("*.partial"))  # no half-written chunk left behind
    # Every tile recorded done is on disk, whole and right.
    a_np, b_np = zarr.open_array(a)[...], zarr.open_array(b)[...]
    stored = zarr.open_array(str(c))
    for path in tile_records(c):
        record = json.loads(path.read_text())
        (r0, r1), (c0, c1) = record["rows"], record["cols"]
        assert_product_close(stored[r0:r1, c0:c1], a_np[r0:r1], b_np[:, c0:c1])

    filler.unlink()
    again = cli(*command, "--json")
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["tiles_skipped"] == state["tiles_done"]
    assert summary["tiles_computed"] == state["tiles_total"] - state["tiles_done"]
    assert_product_close(zarr.open_array(str(c))[...], a_np, b_np)


def corrupt(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:  # garbage of the same length
        path.write_bytes(np.random.default_rng(0).integers(0, 256, len(data), np.uint8).tobytes())


@pytest.mark.parametrize(
    ("layout", "how"),
    [
        ("zstd", "garbage"),
        ("zstd", "truncated"),
        ("uncompressed", "truncated"),
        ("sharded", "garbage"),  # read through zarr, not the chunk-file fast path
    ],
)
def test_corrupt_input_chunk_is_named_after_the_retries(tmp_path, layout, how):
    rng = np.random.default_rng(5)
    b = random_matrix(rng, (40, 30), "float32")
    write_zarr(tmp_path / "a.zarr", random_matrix(rng, (20, 40), "float32"), (10, 10))
    options = {
        "zstd": {},
        "uncompressed": {"compressors": None},
        "sharded": {"shards": (20, 30)},
    }[layout]
    array = zarr.create_array(
        str(tmp_path / "b.zarr"), shape=b.shape, chunks=(10, 10), dtype=b.dtype, **options
    )
    array[...] = b
    key = "c/1/0" if layout != "sharded" else "c/0/0"  # rows 10:20 of B (its shard: 0:20)
    corrupt(tmp_path / "b.zarr" / key, how)

    failed = cli(
        "matmul", str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr"), "-o", str(tmp_path / "c"),
        "--scheduler", "sync",
        env={"OUTOFCORE_READ_RETRIES": "2", "OUTOFCORE_READ_RETRY_DELAY": "0"},
    )  # fmt: skip
    assert failed.returncode == 3, failed.stderr  # a started job failed
    assert "Traceback" not in failed.stderr
    assert f"of file://{os.path.realpath(tmp_path / 'b.zarr')} (" in failed.stderr
    rows = "rows 0:20" if layout == "sharded" else "rows 10:20"
    assert f"key {key} ({rows}, columns 0:" in failed.stderr, failed.stderr
    assert "failed 3 time(s)" in failed.stderr
    assert not (tmp_path / "c" / JOURNAL_DIR / "tiles").exists() or not tile_records(tmp_path / "c")


def test_a_job_whose_output_was_taken_over_stops_writing(tmp_path):
    """Another job takes the lease mid-job (as a rerun does after a client died): the
    first job's tasks stop before their next write, and the new holder's lease stays."""
    a, b, c = long_job_inputs(tmp_path)
    job = subprocess.Popen(
        [sys.executable, "-m", "outofcore.cli", "matmul", a, b, "-o", c, "--memory", "512KiB",
         "--scheduler", "sync", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lease_path = Path(c) / JOURNAL_DIR / "lease.json"
    try:
        wait_for(lambda: len(tile_records(Path(c))) >= 3, 120, "3 tiles journaled")
        taken = json.loads(lease_path.read_text())
        taken.update(job_id="takeover0001", host="elsewhere", heartbeat=taken["heartbeat"] + 1e6)
        lease_path.write_text(json.dumps(taken))
        at_takeover = len(tile_records(Path(c)))
        assert job.poll() is None, "the job finished before the takeover; make it longer"
        _, stderr = job.communicate(timeout=300)
    finally:
        job.kill()
    assert job.returncode == 3, stderr  # a started job failed
    assert "job takeover0001 (host elsewhere" in stderr and "stop without writing" in stderr
    assert len(tile_records(Path(c))) <= at_takeover + 1  # at most the tile being recorded then
    assert json.loads(lease_path.read_text())["job_id"] == "takeover0001"


# -- fingerprints on every kind of store -------------------------------------------------
@pytest.mark.parametrize("where", ["local", "fsspec-memory", "zarr-memory", "obstore-memory"])
def test_fingerprint_changes_with_a_rewritten_chunk_and_only_then(tmp_path, where):
    from zarr.storage import MemoryStore, ObjectStore

    from outofcore.storage.fingerprint import changes, fingerprint

    if where == "obstore-memory":
        obstore = pytest.importorskip("obstore", reason="obstore (the s3 extra) is not installed")
        target = ObjectStore(obstore.store.MemoryStore())  # listed with ETags, not read
    else:
        target = {
            "local": str(tmp_path / "x.zarr"),
            "fsspec-memory": f"memory://fingerprint-{os.getpid()}-{id(tmp_path)}/x.zarr",
            "zarr-memory": MemoryStore(),
        }[where]
    values = random_matrix(np.random.default_rng(2), (30, 20), "float32")
    array = zarr.create_array(target, shape=values.shape, chunks=(10, 10), dtype=values.dtype)
    array[...] = values
    before = fingerprint(array)
    assert len(before.tokens) == 7 and before.nbytes > 0  # zarr.json and 6 chunks
    assert fingerprint(array).digest == before.digest  # listing again changes nothing
    array[10:20, 10:20] = values[10:20, 10:20] + 1.0  # chunk (1, 1), same size uncompressed
    after = fingerprint(array)
    assert after.digest != before.digest
    assert changes(before.tokens, after.tokens) == "c/1/1 rewritten"
    methods = {"local": "stat", "fsspec-memory": "listing", "obstore-memory": "listing"}
    assert before.method == methods.get(where, "content")


@pytest.mark.parametrize("worker_processes", [False, True], ids=["in-process", "processes"])
def test_a_failed_task_is_one_error_line_on_a_local_cluster(tmp_path, worker_processes):
    """A corrupt chunk on the default LocalCluster (its worker in this process, or two
    worker processes): the command prints the error once, as its own line, and none of
    Dask's ``Compute Failed`` tracebacks (one per attempt of the task)."""
    rng = np.random.default_rng(11)
    write_zarr(tmp_path / "a.zarr", random_matrix(rng, (30, 20), "float32"), (10, 10))
    write_zarr(tmp_path / "b.zarr", random_matrix(rng, (20, 17), "float32"), (10, 10))
    corrupt(tmp_path / "a.zarr" / "c" / "1" / "1", "garbage")
    workers = ["--workers", "2"] if worker_processes else []
    env = {"OUTOFCORE_READ_RETRIES": "1", "OUTOFCORE_READ_RETRY_DELAY": "0"}
    env["OUTOFCORE_IN_PROCESS_WORKER"] = "0" if worker_processes else "1"
    failed = cli(
        "matmul", str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr"), "-o", str(tmp_path / "c"),
        *workers, env=env,
    )  # fmt: skip
    assert failed.returncode == 3, failed.stderr
    assert "Compute Failed" not in failed.stderr and "Traceback" not in failed.stderr
    errors = [line for line in failed.stderr.splitlines() if line.startswith("outofcore: error:")]
    assert len(errors) == 1 and "key c/1/1 (rows 10:20, columns 10:20)" in errors[0], errors


def test_only_outofcore_task_failures_are_dropped_from_worker_logs():
    """The filter the LocalCluster's workers get drops Dask's record of a failed outofcore
    task, and keeps other tasks' failures and the worker's other records."""
    from outofcore.runtime.worker_logs import OwnTaskFailureFilter  # noqa: PLC0415

    def record(msg: str, *args: object) -> logging.LogRecord:
        return logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1, msg, args, None)

    failed = "Compute Failed\nKey:       %s\nState:     %s\n"
    keep = OwnTaskFailureFilter().filter
    assert not keep(record(failed, ("outofcore-tile-0a1b2c3d", "tile-0-0"), "executing"))
    assert not keep(record(failed, "outofcore-reduce-0a1b2c3d", "executing"))
    assert keep(record(failed, ("inc-0a1b2c3d", 3), "executing"))
    assert keep(record("Worker stream died during communication: %s", "outofcore-tile-1"))
    assert keep(record("Compute Failed without arguments"))

"""Inputs, output, journal and lease on ``s3://``, against a real S3 API server (moto_server).

Credentials and the endpoint reach the job the ways users pass them:
``storage_options`` in the Python API, ``AWS_*`` environment variables and
``--storage-option KEY=VALUE`` on the command line.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse

import numpy as np
import pytest
import s3fs
import zarr
from zarr.core.sync import sync

from outofcore.api import ATTRIBUTE, job_status, run_job
from outofcore.frontends.verify import verify
from outofcore.journal.lease import LEASE_NAME, LeaseError
from outofcore.journal.leasing import Lease
from outofcore.journal.records import JOURNAL_DIR, Journal
from outofcore.storage import obstores, storeops, stores
from outofcore.storage.fingerprint import changes, fingerprint
from outofcore.storage.locations import locate
from tests.helpers import (
    MotoServer,
    assert_product_close,
    cli,
    random_matrix,
    s3_object_store,
    wait_for,
)

obstore = pytest.importorskip("obstore", reason="obstore (the s3 extra) is not installed")


def put(url: str, data: np.ndarray, chunks: tuple[int, int], options: dict) -> None:
    array = zarr.create_array(
        url, shape=data.shape, chunks=chunks, dtype=data.dtype, storage_options=options
    )
    array[...] = data


def fs_of(server) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(**server.options, skip_instance_cache=True)


def test_job_on_s3_with_storage_options_on_a_local_cluster(
    moto_server, s3_bucket, outofcore_settings
):
    """A LocalCluster of 2 worker processes reads A, B and writes C, journal and lease on
    S3 (the store's options travel to other processes)."""
    outofcore_settings(in_process_worker=False)  # OUTOFCORE_IN_PROCESS_WORKER=0
    options = moto_server.options
    rng = np.random.default_rng(11)
    a, b = random_matrix(rng, (83, 61), "float32"), random_matrix(rng, (61, 47), "float32")
    put(f"{s3_bucket}/a.zarr", a, (10, 9), options)  # ragged chunks, odd shapes
    put(f"{s3_bucket}/b.zarr", b, (9, 8), options)
    out = f"{s3_bucket}/c.zarr"
    result = run_job(
        f"{s3_bucket}/a.zarr",
        f"{s3_bucket}/b.zarr",
        out,
        memory=16 * stores.REQUEST_BYTES + 48 * 1024,  # 16 requests in flight, then small tiles
        workers=2,
        progress=False,
        storage_options=options,
    )
    summary = result.summary
    assert summary["tiles"] > 4 and summary["tiles_computed"] == summary["tiles"]
    assert summary["output"] == f"{s3_bucket}/c.zarr"
    assert len({r.worker for r in result.results}) == 2  # both worker processes read S3
    got = zarr.open_array(out, mode="r", storage_options=options)[...]
    assert_product_close(got, a, b)

    fs = fs_of(moto_server)
    bucket = s3_bucket.removeprefix("s3://")
    records = fs.find(f"{bucket}/c.zarr/{JOURNAL_DIR}/tiles")
    assert len(records) == summary["tiles"]
    assert not fs.exists(f"{bucket}/c.zarr/{JOURNAL_DIR}/{LEASE_NAME}")  # released
    journal_text = b"".join(fs.cat(fs.find(f"{bucket}/c.zarr/{JOURNAL_DIR}")).values())
    assert moto_server.SECRET.encode() not in journal_text  # credentials never written

    state = job_status(out, options)
    assert state["state"] == "complete" and state["tiles_done"] == summary["tiles"]
    assert state["last_progress"] is not None
    report = verify(f"{s3_bucket}/a.zarr", f"{s3_bucket}/b.zarr", out, storage_options=options)
    assert report.passed


#: Where a journal's conditional writes go: an fsspec ``s3://`` URL (s3fs, with an obstore
#: S3Store made from its options), zarr ObjectStores on an obstore S3Store (moto) and on an
#: AzureStore (Azurite: skipped, saying why, where it is not installed).
JOURNAL_KINDS = ["s3-url", "s3-object-store", "azure-object-store"]


def journal_on(kind: str, request, bucket: str | None = None) -> Journal:
    """The journal of an output ``c.zarr`` in a fresh bucket (or ``bucket``), reached the
    way ``kind`` says."""
    if kind == "azure-object-store":
        azurite = request.getfixturevalue("azurite")
        container = bucket or request.getfixturevalue("azure_container")
        return Journal(store=azurite.store(container), prefix="c.zarr")
    server = request.getfixturevalue("moto_server")
    bucket = f"s3://{bucket}" if bucket else request.getfixturevalue("s3_bucket")
    if kind == "s3-url":
        return Journal.for_output(locate(f"{bucket}/c.zarr", server.options))
    return Journal(store=s3_object_store(server, bucket), prefix="c.zarr")


@pytest.fixture(params=JOURNAL_KINDS)
def journal(request) -> Journal:
    """The journal of an output in a fresh bucket or container, one of each kind."""
    return journal_on(request.param, request)


def test_conditional_writes(journal):
    """put(mode="create") creates once; put(mode={e_tag}) replaces only the version that
    was read; obstore refuses both by type, and the journal reads the refusal as False."""
    assert journal.conditional_writes and "obstore" in journal.conditional_writes
    key = journal.key("probe.json")
    assert journal.put_json(key, {"n": 1}, only_if_absent=True) is True
    assert journal.put_json(key, {"n": 2}, only_if_absent=True) is False
    document, _, version = journal.get_versioned(key)
    assert document == {"n": 1} and version.e_tag
    assert journal.put_json(key, {"n": 3}, if_version=version) is True
    assert journal.put_json(key, {"n": 4}, if_version=version) is False  # stale version
    assert journal.get_json(key) == {"n": 3}

    # The refusals, as obstore raises them: by type.
    handle = sync(obstores.handle_of(journal.store))
    with pytest.raises(obstore.exceptions.PreconditionError):
        obstore.put(handle.store, handle.path(key), b"{}", mode=version.mode())
    with pytest.raises(obstore.exceptions.AlreadyExistsError):
        obstore.put(handle.store, handle.path(key), b"{}", mode="create")
    journal.delete(key)  # deleted since it was read: a stale version too
    assert journal.put_json(key, {"n": 5}, if_version=version) is False
    assert journal.get_json(key) is None


def test_conditional_writes_on_every_kind_of_store(moto_server, s3_bucket, tmp_path):
    """Which stores create atomically: obstore (s3:// URLs, ObjectStore), local disks,
    zarr's memory store; other fsspec stores check, then write."""
    assert "S3Store" in storeops.conditional_writes(
        stores.fsspec_store(locate(f"{s3_bucket}/c.zarr"))
    )
    assert "S3Store" in storeops.conditional_writes(s3_object_store(moto_server, s3_bucket))
    assert storeops.conditional_writes(zarr.storage.LocalStore(tmp_path)) == "exclusive hard link"
    assert storeops.conditional_writes(zarr.storage.MemoryStore()) is not None
    memory = stores.fsspec_store(locate("memory://outofcore-probe/c.zarr"))
    assert storeops.conditional_writes(memory) is None
    assert sync(obstores.handle_of(memory)) is None


def test_lease_taken_over_on_an_obstore_local_store(tmp_path):
    """obstore's LocalStore creates atomically but has no compare-and-swap put: a dead
    lease is taken over the check-then-write way there, and a heartbeat does not fail."""
    store = zarr.storage.ObjectStore(obstore.store.LocalStore(tmp_path))
    assert "check, then write" in storeops.conditional_writes(store)
    journal = Journal(store=store, prefix="c.zarr")
    old = Lease(journal, "c", "old-job", timeout=30)
    old.acquire()
    old._stop.set()  # the holder dies: no more heartbeats, its lease stays
    old._thread.join()
    assert journal.get_versioned(journal.key(LEASE_NAME))[2] is None  # nothing to compare
    with pytest.raises(LeaseError, match="old-job"):
        Lease(journal, "c", "new-job", timeout=30).acquire()
    document = journal.get_json(journal.key(LEASE_NAME))
    journal.put_json(journal.key(LEASE_NAME), {**document, "heartbeat": time.time() - 3600})
    with Lease(journal, "c", "new-job", timeout=0.2):
        time.sleep(0.3)  # a heartbeat or two, written plainly
        assert journal.get_json(journal.key(LEASE_NAME))["job_id"] == "new-job"
    assert journal.get_json(journal.key(LEASE_NAME)) is None


def test_s3_without_obstore_checks_then_writes_and_says_so(moto_server, s3_bucket):
    """Where obstore is not installed (s3fs alone), the lease and records on s3:// are
    written check-then-write, and a warning names the extra that makes them atomic."""
    script = f"""
import logging, sys
sys.modules["obstore"] = None  # as if it were not installed
logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
from outofcore.journal.records import Journal
from outofcore.storage.locations import locate
journal = Journal.for_output(locate("{s3_bucket}/c.zarr", {moto_server.options!r}))
print(journal.conditional_writes)
key = journal.key("probe.json")
print(journal.put_json(key, {{"n": 1}}, only_if_absent=True))
print(journal.put_json(key, {{"n": 2}}, only_if_absent=True))
print(journal.get_json(key), journal.get_versioned(key)[2])
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.splitlines() == ["None", "None", "None", "{'n': 1} None"], done
    assert done.stderr.count("obstore is not installed") == 1, done.stderr
    assert 'pip install "outofcore[s3]"' in done.stderr


@pytest.mark.parametrize("kind", JOURNAL_KINDS)
def test_a_failed_create_is_an_error_not_a_lost_race(kind, request):
    """A create the store fails (its bucket does not exist) raises; it does not read as
    'something was there' (errors by type: only AlreadyExistsError means that)."""
    journal = journal_on(kind, request, bucket="no-such-bucket")
    with pytest.raises(FileNotFoundError):  # obstore's NotFoundError is one
        journal.put_json(journal.key("probe.json"), {"n": 1}, only_if_absent=True)


def race(contenders: list, action) -> list:
    """Run ``action(contender)`` in one thread each, released together; the results."""
    barrier = threading.Barrier(len(contenders))
    results: list = [None] * len(contenders)

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = action(contenders[i])
        except LeaseError as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(contenders))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_racing_creates_have_exactly_one_winner(journal):
    """Eight writers create one key at once, five rounds: one is told True, seven False,
    and the object is the winner's."""
    for round_ in range(5):
        key = journal.key(f"race-{round_}.json")
        results = race(
            list(range(8)),
            lambda i, key=key: journal.put_json(key, {"writer": i}, only_if_absent=True),
        )
        assert sorted(results) == [False] * 7 + [True], results
        assert journal.get_json(key) == {"writer": results.index(True)}


@pytest.mark.parametrize("round_", range(3))
def test_leases_racing_have_exactly_one_winner(journal, round_):
    """Eight jobs take one free lease at once, then eight take over one dead lease at once."""
    leases = [Lease(journal, "c", f"job-{round_}-{i}", timeout=30) for i in range(8)]
    results = race(leases, lambda lease: lease.acquire())
    winners = [lease for lease, r in zip(leases, results, strict=True) if r is None]
    assert len(winners) == 1, results
    assert all(isinstance(r, LeaseError) for r in results if r is not None)
    assert journal.get_json(journal.key(LEASE_NAME))["job_id"] == winners[0].job_id
    winners[0]._stop.set()  # the holder dies: no more heartbeats, its lease stays
    winners[0]._thread.join()

    # Its heartbeat is now 'old' for 1 ms-timeout leases reading it: make it dead.
    document = journal.get_json(journal.key(LEASE_NAME))
    journal.put_json(journal.key(LEASE_NAME), {**document, "heartbeat": time.time() - 3600})
    takers = [Lease(journal, "c", f"taker-{round_}-{i}", timeout=30) for i in range(8)]
    results = race(takers, lambda lease: lease.acquire())
    winners = [lease for lease, r in zip(takers, results, strict=True) if r is None]
    assert len(winners) == 1, results
    assert journal.get_json(journal.key(LEASE_NAME))["job_id"] == winners[0].job_id
    winners[0].release()
    assert journal.get_json(journal.key(LEASE_NAME)) is None


def s3_inputs(server, bucket: str) -> tuple[str, str, str, np.ndarray, np.ndarray]:
    """A (600x500) and B (500x330) in 50x50 chunks on S3: 84 tiles at --memory 1424KiB
    (16 requests in flight at ``stores.REQUEST_BYTES`` each, and 400 KiB for the tiles)."""
    rng = np.random.default_rng(5)
    a, b = random_matrix(rng, (600, 500), "float32"), random_matrix(rng, (500, 330), "float32")
    put(f"{bucket}/a.zarr", a, (50, 50), server.options)
    put(f"{bucket}/b.zarr", b, (50, 50), server.options)
    return f"{bucket}/a.zarr", f"{bucket}/b.zarr", f"{bucket}/c.zarr", a, b


def test_client_killed_mid_job_on_s3_then_rerun_resumes(moto_server, s3_bucket):
    """SIGKILL ``outofcore matmul`` (credentials from the environment) mid-job; status
    (``--storage-option``) shows it stopped with a dead lease; the rerun resumes."""
    a_url, b_url, c_url, a, b = s3_inputs(moto_server, s3_bucket)
    command = [a_url, b_url, "-o", c_url, "--memory", "1424KiB", "--scheduler", "sync", "--json"]
    env = {**os.environ, **moto_server.env, "OUTOFCORE_LEASE_TIMEOUT": "2"}
    job = subprocess.Popen(
        [sys.executable, "-m", "outofcore.cli", "matmul", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    options = moto_server.options

    def done() -> int:
        try:
            return job_status(c_url, options)["tiles_done"]
        except Exception:  # noqa: BLE001 (no journal yet)
            return 0

    try:
        wait_for(lambda: done() >= 10, 120, "10 tiles journaled on S3")
        assert job.poll() is None, "the job finished before the kill; make it longer"
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    killed_at = done()

    flags = [
        f"--storage-option=key={moto_server.KEY}",
        f"--storage-option=secret={moto_server.SECRET}",
    ]
    flags.append(f"--storage-option=endpoint_url={moto_server.endpoint}")
    status = cli("status", c_url, "--json", *flags)
    assert status.returncode == 0, status.stderr
    state = json.loads(status.stdout)
    assert state["state"] == "stopped" and state["tiles_done"] == killed_at < state["tiles_total"]
    assert state["lease"]["alive"] is False and "has exited" in state["lease"]["dead_because"]

    rerun = cli("matmul", *command, *flags)
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout)
    assert summary["tiles_skipped"] == killed_at > 0
    assert summary["tiles_computed"] + summary["tiles_skipped"] == summary["tiles"]
    assert_product_close(zarr.open_array(c_url, storage_options=options)[...], a, b)
    checked = cli("verify", a_url, b_url, c_url, "--json", env=moto_server.env)
    assert checked.returncode == 0 and json.loads(checked.stdout)["passed"] is True, checked


def test_two_jobs_racing_for_one_output_on_s3_have_one_winner(moto_server, s3_bucket):
    """Two ``outofcore matmul`` processes started together on one S3 output: one writes it,
    the other is refused, and the output is right."""
    a_url, b_url, c_url, a, b = s3_inputs(moto_server, s3_bucket)
    command = [a_url, b_url, "-o", c_url, "--memory", "1424KiB", "--scheduler", "sync", "--json"]
    jobs = [
        subprocess.Popen(
            [sys.executable, "-m", "outofcore.cli", "matmul", *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **moto_server.env},
        )
        for _ in range(2)
    ]
    outcomes = [(job.wait(timeout=300), *job.communicate()) for job in jobs]
    codes = sorted(code for code, _, _ in outcomes)
    # The loser: refused by the lease (3: a job holds it, rerun later), or finding the
    # output complete or changed at its start (2).
    assert codes[0] == 0 and codes[1] in (2, 3), outcomes
    loser = next(err for code, _, err in outcomes if code != 0)
    assert "another live job" in loser or "already exists" in loser or "changed while" in loser
    winner = json.loads(next(out for code, out, _ in outcomes if code == 0))
    assert winner["tiles_computed"] == winner["tiles"]
    assert_product_close(zarr.open_array(c_url, storage_options=moto_server.options)[...], a, b)
    assert job_status(c_url, moto_server.options)["state"] == "complete"


def test_obstore_calls_complete_on_python_threads(moto_server, s3_bucket):
    """obstore's ``*_async`` calls complete their futures from tokio's threads, and one
    still doing so at exit aborts the interpreter (the racing jobs' loser above died of
    SIGABRT after its error line, about one run in fifteen): every conditional write and
    versioned read hands its result to the event loop from a Python thread."""
    store = stores.fsspec_store(locate(f"{s3_bucket}/c.zarr", moto_server.options))
    callers: list[threading.Thread] = []

    class RecordingLoop(asyncio.SelectorEventLoop):
        def call_soon_threadsafe(self, *args, **kwargs):
            callers.append(threading.current_thread())
            return super().call_soon_threadsafe(*args, **kwargs)

    async def exercise() -> None:
        assert await storeops.put_if_absent(store, "x.json", b"1") is True
        assert await storeops.put_if_absent(store, "x.json", b"2") is False
        data, version = await storeops.get_versioned(store, "x.json")
        assert data == b"1" and version is not None
        assert await storeops.put_if_unchanged(store, "x.json", b"3", version) is True
        assert await storeops.put_if_unchanged(store, "x.json", b"4", version) is False
        assert (await storeops.get_versioned(store, "x.json"))[0] == b"3"
        assert await storeops.get_versioned(store, "missing.json") == (None, None)

    loop = RecordingLoop()
    try:
        loop.run_until_complete(exercise())
    finally:
        loop.close()
    foreign = [t for t in callers if isinstance(t, threading._DummyThread)]
    assert len(callers) >= 7 and not foreign, (len(callers), foreign)


def test_status_lists_records_instead_of_reading_them(moto_server, s3_bucket):
    """1500 tile records over 30 rows of tiles: status counts them from listings."""
    options = moto_server.options
    journal = Journal.for_output(locate(f"{s3_bucket}/c.zarr", options))
    fs = fs_of(moto_server)
    root = s3_bucket.removeprefix("s3://") + f"/c.zarr/{JOURNAL_DIR}"
    document = {"journal_id": "j1", "tiles_total": 1800, "plan": {"tiles_grid": [30, 60]}}
    fs.pipe(f"{root}/job.json", json.dumps(document).encode())
    keys = {f"{root}/tiles/j1/tile-{i}-{j}.json": b"{}" for i in range(30) for j in range(50)}
    keys[f"{root}/tiles/j1/tile-3-7.json.tmp123"] = b"{"  # a write in flight: not a record
    keys[f"{root}/tiles/old/tile-0-0.json"] = b"{}"  # another journal's record
    fs.pipe(keys)
    started = time.perf_counter()
    state = job_status(f"{s3_bucket}/c.zarr", options)
    seconds = time.perf_counter() - started
    assert state["tiles_done"] == 1500 and state["tiles_total"] == 1800
    assert state["state"] == "stopped" and state["last_progress_seconds_ago"] < 600
    times = journal.tile_times("j1", 30)
    assert len(times) == 1500 and "tile-29-49" in times
    assert seconds < 20, seconds
    listed = sync(storeops.list_times(journal.store, journal.key("tiles", "j1")))  # one listing
    assert len(listed) == 1501 and {f"{tile}.json" for tile in times} <= listed.keys()


@pytest.fixture(params=["s3", "azure"])
def object_store(request) -> zarr.storage.ObjectStore:
    """zarr's ObjectStore on a fresh bucket (obstore S3Store on moto) or container (obstore
    AzureStore on Azurite)."""
    if request.param == "azure":
        return request.getfixturevalue("azurite").store(request.getfixturevalue("azure_container"))
    server = request.getfixturevalue("moto_server")
    return s3_object_store(server, request.getfixturevalue("s3_bucket"))


def test_job_with_inputs_and_output_on_object_stores(object_store, outofcore_settings):
    """A, B and C on zarr ObjectStores, on a LocalCluster of 2 worker processes: the lease
    and records are obstore's conditional writes, the inputs' fingerprints listings."""
    outofcore_settings(in_process_worker=False)  # the stores travel to other processes
    rng = np.random.default_rng(12)
    a, b = random_matrix(rng, (70, 45), "float64"), random_matrix(rng, (45, 38), "float64")
    store = object_store
    arrays = {}
    for name, values, chunks in (("a", a, (10, 9)), ("b", b, (9, 8))):
        arrays[name] = zarr.create_array(
            store, name=f"{name}.zarr", shape=values.shape, chunks=chunks, dtype=values.dtype
        )
        arrays[name][...] = values
    # An array made for a job says so (outofcore's attribute) and is given with overwrite:
    # outofcore writes into no array it did not make (issue 28).
    out = zarr.create_array(
        store, name="c.zarr", shape=(70, 38), chunks=(10, 8), dtype="f8",
        attributes={ATTRIBUTE: {"complete": False}},
    )  # fmt: skip
    memory = 16 * stores.REQUEST_BYTES + 64 * 1024  # 16 requests in flight, small tiles
    result = run_job(
        arrays["a"], arrays["b"], out, memory=memory, workers=2, progress=False, overwrite=True
    )
    summary = result.summary
    assert summary["tiles"] > 2 and summary["tiles_computed"] == summary["tiles"]
    assert len({r.worker for r in result.results}) == 2
    assert_product_close(zarr.open_array(store, path="c.zarr", mode="r")[...], a, b)
    journal = Journal.for_output(out)
    document = journal.get_json(journal.key("job.json"))
    assert {i["content"]["method"] for i in document["inputs"].values()} == {"listing"}
    state = job_status(out)
    assert state["state"] == "complete" and state["tiles_done"] == summary["tiles"]
    assert state["last_progress"] is not None  # the records' times, from a listing
    assert journal.get_json(journal.key(LEASE_NAME)) is None  # released


@pytest.fixture
def recorded_moto(tmp_path, monkeypatch):
    """A moto server of its own that writes every request it gets to a file (moto's
    request recorder): the server's own log, nothing in the client patched."""
    monkeypatch.setenv("MOTO_ENABLE_RECORDING", "true")
    monkeypatch.setenv("MOTO_RECORDER_FILEPATH", str(tmp_path / "requests.jsonl"))
    try:
        server = MotoServer()
    except RuntimeError as exc:
        pytest.skip(f"cannot start moto_server here: {exc}")
    server.log = tmp_path / "requests.jsonl"
    yield server
    server.stop()


def requests_to(server, bucket: str) -> list[tuple[str, str]]:
    """(method, object key or "" for the bucket) of each request the server recorded."""
    lines = server.log.read_text().splitlines() if server.log.exists() else []
    found = []
    for entry in map(json.loads, lines):
        path = urlparse(entry["url"]).path.lstrip("/")
        name, _, key = path.partition("/")
        if name == bucket:
            found.append((entry["method"], key))
    return found


def test_fingerprint_of_an_object_store_input_is_a_listing(object_store):
    """Sizes, ETags and times from obstore's listing: a rewritten chunk changes it, and
    listing again does not."""
    values = random_matrix(np.random.default_rng(6), (30, 20), "float32")
    array = zarr.create_array(
        object_store, name="x/a.zarr", shape=values.shape, chunks=(10, 10), dtype=values.dtype
    )
    array[...] = values
    zarr.create_array(object_store, name="x/a.zarr2", shape=(2,), dtype="i4")  # not a.zarr's
    before = fingerprint(array)
    assert before.method == "listing" and len(before.tokens) == 7  # zarr.json and 6 chunks
    assert "c/0/0" in before.tokens and "e_tag=" in before.tokens["c/0/0"]
    assert fingerprint(array).digest == before.digest
    array[0:10, 10:20] = values[0:10, 10:20] * 2.0
    after = fingerprint(array)
    assert changes(before.tokens, after.tokens) == "c/0/1 rewritten"


def test_fingerprint_of_an_object_store_input_reads_no_object(recorded_moto):
    """The fingerprint of an array on a zarr ObjectStore lists its objects (size, ETag,
    time) and GETs none; the server's request log sees the GETs of a real read."""
    bucket = recorded_moto.bucket("fingerprint").removeprefix("s3://")
    store = s3_object_store(recorded_moto, f"s3://{bucket}")
    values = random_matrix(np.random.default_rng(3), (30, 20), "float32")
    array = zarr.create_array(
        store, name="a.zarr", shape=values.shape, chunks=(10, 10), dtype=values.dtype
    )
    array[...] = values
    recorded_moto.log.write_text("")  # from here on

    before = fingerprint(array)
    assert before.method == "listing" and len(before.tokens) == 7  # zarr.json and 6 chunks
    assert before.nbytes == sum(int(t.split(":", 1)[0]) for t in before.tokens.values())
    sent = requests_to(recorded_moto, bucket)
    assert [method for method, key in sent if key] == []  # no object read, nor written
    assert sent and all(method == "GET" and key == "" for method, key in sent)  # listings

    np.testing.assert_array_equal(array[...], values)  # the log sees object reads
    reads = [key for method, key in requests_to(recorded_moto, bucket) if method == "GET" and key]
    assert {f"a.zarr/c/{i}/{j}" for i in range(3) for j in range(2)} <= set(reads)

    assert fingerprint(array).digest == before.digest  # listing again changes nothing
    array[10:20, 10:20] = values[10:20, 10:20] + 1.0  # chunk (1, 1) rewritten
    assert changes(before.tokens, fingerprint(array).tokens) == "c/1/1 rewritten"

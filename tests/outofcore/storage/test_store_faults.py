"""Object stores that misbehave, through the fault proxy (tests/faultproxy.py) in front of
a real S3 API (moto on loopback): the lease survives a store's bad minutes, every wait
has an end, and each failure is one line with the exit status of its kind (issue 33,
items 3 to 5).

Jobs run as ``outofcore`` processes, as users run them, with their storage options
pointing at the proxy; the test reads and checks the store directly (not through the
proxy).  Each test asserts its time to the error, and that no output is called complete
that is not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import s3fs
import zarr

from outofcore.journal.lease import LEASE_NAME
from outofcore.journal.records import JOURNAL_DIR
from tests.faultproxy import Fault, FaultProxy
from tests.helpers import assert_product_close, random_matrix, serve_folder, wait_for

pytest.importorskip("obstore", reason="obstore (the s3 extra) is not installed")

#: The lease object of any output, as the proxy matches paths.
LEASE = rf"/{JOURNAL_DIR}/{LEASE_NAME}$".replace(".", r"\.")
#: A tile record's PUT (delayed to make a job last long enough to be interfered with).
RECORD = rf"/{JOURNAL_DIR}/tiles/.*\.json$"
#: The ``outofcore`` command without obstore, as where the ``s3`` extra is not installed:
#: s3fs alone, check-then-write lease.
WITHOUT_OBSTORE = (
    "import sys; sys.modules['obstore'] = None; sys.argv[0] = 'outofcore'; "
    "from outofcore.cli import command; command()"
)


def put(url: str, data: np.ndarray, chunks: tuple[int, int], options: dict) -> None:
    array = zarr.create_array(
        url, shape=data.shape, chunks=chunks, dtype=data.dtype, storage_options=options
    )
    array[...] = data


@pytest.fixture
def proxy(moto_server):
    with FaultProxy(moto_server.endpoint) as running:
        yield running


@pytest.fixture
def store(moto_server, s3_bucket):
    """The bucket read directly (not through the proxy): an s3fs filesystem and its name."""
    return s3fs.S3FileSystem(**moto_server.options, skip_instance_cache=True), s3_bucket[5:]


def through(server, proxy) -> list[str]:
    """Storage options that reach the moto server through the proxy."""
    return [
        f"--storage-option=key={server.KEY}",
        f"--storage-option=secret={server.SECRET}",
        f"--storage-option=endpoint_url={proxy.endpoint}",
    ]


def outofcore(*args: str, obstore: bool = True) -> list[str]:
    program = ["-m", "outofcore.cli"] if obstore else ["-c", WITHOUT_OBSTORE]
    return [sys.executable, *program, *args]


def run(command: list[str], env: dict[str, str | None], timeout: float = 300) -> tuple:
    """Run ``command`` with ``env`` over this environment (None: unset); its completed
    process and seconds taken."""
    environment = {**os.environ, **env}
    environment = {name: value for name, value in environment.items() if value is not None}
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment)
    return done, time.monotonic() - started


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("outofcore: error:")]


def lease_of(store) -> dict | None:
    fs, bucket = store
    try:
        return json.loads(fs.cat(f"{bucket}/c.zarr/{JOURNAL_DIR}/{LEASE_NAME}"))
    except FileNotFoundError:
        return None


def job_document(store) -> dict:
    fs, bucket = store
    fs.invalidate_cache()
    return json.loads(fs.cat(f"{bucket}/c.zarr/{JOURNAL_DIR}/job.json"))


def records(store) -> int:
    fs, bucket = store
    fs.invalidate_cache()
    try:
        return len(fs.find(f"{bucket}/c.zarr/{JOURNAL_DIR}/tiles"))
    except FileNotFoundError:
        return 0


@pytest.fixture
def inputs(moto_server, s3_bucket) -> tuple[str, str, str, np.ndarray, np.ndarray]:
    """A (600x500) and B (500x330) in 50x50 chunks on S3: 84 tiles at --memory 1424KiB."""
    rng = np.random.default_rng(5)
    a, b = random_matrix(rng, (600, 500), "float32"), random_matrix(rng, (500, 330), "float32")
    put(f"{s3_bucket}/a.zarr", a, (50, 50), moto_server.options)
    put(f"{s3_bucket}/b.zarr", b, (50, 50), moto_server.options)
    return f"{s3_bucket}/a.zarr", f"{s3_bucket}/b.zarr", f"{s3_bucket}/c.zarr", a, b


def start_job(inputs, server, proxy, env: dict[str, str], obstore: bool) -> subprocess.Popen:
    """``outofcore matmul`` of the 84-tile job through the proxy, in the background; each
    tile record's PUT delayed 0.1 s so that the job lasts well over 10 s."""
    a_url, b_url, c_url, *_ = inputs
    proxy.add(Fault("delay", method="PUT", key=RECORD, seconds=0.1, times=None))
    args = [a_url, b_url, "-o", c_url, "--memory", "1424KiB", "--scheduler", "sync", "-q"]
    return subprocess.Popen(
        outofcore("matmul", *args, *through(server, proxy), obstore=obstore),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


def finish(job: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    out, err = job.communicate(timeout=timeout)
    return job.returncode, err


def started(job: subprocess.Popen, store, tiles: int = 3) -> dict:
    """Wait until the job holds the lease and recorded ``tiles`` tiles; its lease."""
    wait_for(lambda: lease_of(store) is not None and records(store) >= tiles, 120, "the job")
    assert job.poll() is None, "the job ended before the fault; make it longer"
    return lease_of(store)


# -- item 3: the lease ---------------------------------------------------------------------


@pytest.mark.parametrize("obstore", [True, False], ids=["obstore", "s3fs"])
def test_a_run_of_503s_on_the_lease_shorter_than_its_timeout(
    inputs, moto_server, proxy, store, obstore
):
    """503s on every GET and PUT of lease.json for 3 s, the lease timeout 12 s: the job goes
    on, still holding its lease (renewed after the run), says it once, and completes."""
    # A heartbeat every 3 s; s3fs's own backoff inside one renewal can last several
    # seconds on a loaded machine, so the margin before expiry must outlast it.
    env = {"OUTOFCORE_LEASE_TIMEOUT": "12"}
    job = start_job(inputs, moto_server, proxy, env, obstore)
    try:
        mine = started(job, store)
        fault = Fault("status", key=LEASE, status=503, times=None)
        proxy.add(fault)
        time.sleep(3)
        fault.times = fault.hits  # the store is back
        ended = time.time()
        assert fault.hits > 0
        wait_for(
            lambda: job.poll() is not None or (lease_of(store) or {}).get("heartbeat", 0) > ended,
            30,
            "a heartbeat after",
        )
        if job.poll() is not None:
            raise AssertionError(f"the job ended during the fault: {job.communicate()[1]}")
        assert lease_of(store)["job_id"] == mine["job_id"]  # still this job's
        assert job.poll() is None, "the job ended during the fault; make it longer"
        status, stderr = finish(job)
    finally:
        job.kill()
    assert status == 0, stderr
    said = [line for line in stderr.splitlines() if "lease" in line and "obstore" not in line]
    # Through obstore the heartbeat sees the run (obstore's retries end within it): one
    # warning. botocore's backoff may outlast 3 s: s3fs's heartbeat may see nothing.
    assert len(said) == (1 if obstore else len(said)) <= 1, stderr
    for line in said:
        assert line.startswith("outofcore: warning: the lease heartbeat of"), line
        assert "503" in line or "Service Unavailable" in line, line
    assert job_document(store)["complete"] is True
    a_url, b_url, c_url, a, b = inputs
    assert_product_close(zarr.open_array(c_url, storage_options=moto_server.options)[...], a, b)


@pytest.mark.parametrize(
    ("kind", "obstore"),
    [("lost", True), ("lost", False), ("after", True)],
    ids=["lost-obstore", "lost-s3fs", "after-obstore"],
)
def test_lost_replies_to_lease_writes_are_not_another_job(
    inputs, moto_server, proxy, store, kind, obstore
):
    """The reply to the PUT that takes lease.json, then to a heartbeat's, is lost after the
    store applied it (or replaced by a 500): the job recognises its own writes (obstore's
    retry of the conditional PUT is refused, and the lease read back names this job) and
    completes; no 'held by another job' (it said so, naming its own id, and stopped
    beating), no error."""
    taking = Fault(kind, method="PUT", key=LEASE, status=500, times=1)
    proxy.add(taking)
    job = start_job(inputs, moto_server, proxy, {"OUTOFCORE_LEASE_TIMEOUT": "8"}, obstore)
    try:
        started(job, store)
        assert taking.hits == 1
        beating = Fault(kind, method="PUT", key=LEASE, status=500, times=1)
        proxy.add(beating)
        wait_for(lambda: beating.hits == 1, 60, "a heartbeat's reply lost")
        status, stderr = finish(job)
    finally:
        job.kill()
    assert status == 0, stderr
    assert "held by" not in stderr and not errors(stderr), stderr
    assert job_document(store)["complete"] is True


@pytest.mark.parametrize("obstore", [True, False], ids=["obstore", "s3fs"])
def test_503s_on_the_lease_longer_than_its_timeout_stop_the_job(
    inputs, moto_server, proxy, store, obstore
):
    """503s on lease.json from the 3rd tile on, for ever, the lease timeout 6 s: the job
    gives the lease up before it may expire and fails with one line (exit 3) within its
    timeout and a task's lease check; the output is not called complete."""
    job = start_job(inputs, moto_server, proxy, {"OUTOFCORE_LEASE_TIMEOUT": "6"}, obstore)
    try:
        started(job, store)
        proxy.add(Fault("status", key=LEASE, status=503, times=None))
        faulted = time.monotonic()
        status, stderr = finish(job, timeout=120)
        seconds = time.monotonic() - faulted
    finally:
        job.kill()
    assert status == 3, stderr
    (line,) = errors(stderr)
    assert line.startswith("outofcore: error: could not renew the lease of 's3://"), stderr
    assert "(timeout 6 s;" in line and "this job stops writing; rerun to resume" in line
    assert seconds < 6 + 6 + 10, f"{seconds:.1f} s to fail"
    proxy.clear()
    document = job_document(store)
    assert not document.get("complete") and records(store) < document["tiles_total"]


# -- item 4: every wait has an end --------------------------------------------------------

#: Small deadlines for the hang tests: each request given up after about 2 s + 1 s.
SMALL_DEADLINES = {
    "OUTOFCORE_STORE_DEADLINE": "2",
    "OUTOFCORE_STORE_READ_TIMEOUT": "1",
    "OUTOFCORE_STORE_CONNECT_TIMEOUT": "1",
    "OUTOFCORE_STORE_ATTEMPTS": "2",
}


def test_an_endpoint_that_never_answers_ends_every_command(inputs, moto_server, proxy):
    """Every request accepted and never answered: matmul, status and verify each exit 2 (the
    store cannot be opened: nothing was started, check the endpoint) with one line naming
    the deadline, within 20 s at small deadlines (one request's deadline, its retries in)."""
    a_url, b_url, c_url, *_ = inputs
    proxy.add(Fault("hang", times=None))
    flags = through(moto_server, proxy)
    commands = {
        "matmul": ["matmul", a_url, b_url, "-o", c_url, "--scheduler", "sync", *flags],
        "status": ["status", c_url, *flags],
        "verify": ["verify", a_url, b_url, c_url, *flags],
    }
    for name, args in commands.items():
        done, seconds = run(outofcore(*args), SMALL_DEADLINES, timeout=120)
        assert done.returncode == 2, (name, done.stderr)
        (line,) = errors(done.stderr)
        assert "does not answer in time" in line and "deadline of 2 s" in line, (name, line)
        assert seconds < 20, f"{name}: {seconds:.1f} s"


def test_the_default_deadline_ends_a_hang_within_a_minute(moto_server, s3_bucket, proxy):
    """The same with the default deadlines (30 s, reads 10 s, 3 attempts): status ends
    within a minute (s3fs's own retry loops and botocore's took over 300 s)."""
    proxy.add(Fault("hang", times=None))
    done, seconds = run(
        outofcore("status", f"{s3_bucket}/c.zarr", *through(moto_server, proxy)), {}
    )
    assert done.returncode == 2, done.stderr
    (line,) = errors(done.stderr)
    assert "deadline of 30 s" in line
    assert 30 <= seconds < 60, f"{seconds:.1f} s"


def test_a_write_that_keeps_failing_fails_the_job_whatever_its_tiles(
    moto_server, s3_bucket, proxy, store
):
    """Every PUT of an output chunk answered 503: a job of 64 tiles fails as soon as one of
    4 tiles does (the first tile's write, after its client's retries: final, not retried
    tile after tile), with one line naming the region, exit 3; the cluster closes without
    waiting on tasks still retrying beyond one request's retries."""
    rng = np.random.default_rng(3)
    a, b = random_matrix(rng, (400, 200), "float32"), random_matrix(rng, (200, 400), "float32")
    put(f"{s3_bucket}/a.zarr", a, (50, 50), moto_server.options)
    put(f"{s3_bucket}/b.zarr", b, (50, 50), moto_server.options)
    proxy.add(Fault("status", method="PUT", key=r"/c\.zarr/c/", status=503, times=None))
    times = {}
    for tiles, memory in ((4, "2600KiB"), (64, "1400KiB")):
        args = ["matmul", f"{s3_bucket}/a.zarr", f"{s3_bucket}/b.zarr", "-o"]
        args += [f"{s3_bucket}/c.zarr", "--memory", memory, "--overwrite"]
        done, times[tiles] = run(outofcore(*args, *through(moto_server, proxy)), {})
        assert done.returncode == 3, done.stderr
        (line,) = errors(done.stderr)
        assert "of the output s3://" in line and "failed after the object store's retries" in line
        assert "Service Unavailable" in line, line
        assert not job_document(store).get("complete")
        assert times[tiles] < 30, times
    assert times[64] < times[4] + 10, times  # not one tile after another


# -- item 5: messages ------------------------------------------------------------------------


def test_status_refusals_exit_as_the_other_commands_do(inputs, moto_server, proxy):
    """No credentials, credentials refused (every request answered 403, as a wrong secret
    is: moto itself does not check signatures), a closed port: status exits 2 with the same
    words as matmul and verify (it exited 3, 'unexpected')."""
    a_url, b_url, c_url, *_ = inputs
    key = f"--storage-option=key={moto_server.KEY}"
    secret = "--storage-option=secret=wrong"
    cases = {
        "no credentials": (moto_server.endpoint, [], "no credentials for the object store"),
        "refused": (proxy.endpoint, [key, secret], "the object store refused access"),
        "closed port": ("http://127.0.0.1:9", [key, secret], "the object store does not answer"),
    }
    proxy.add(Fault("status", key=r"^/[^/]+/.", status=403, times=None))  # keys, not buckets
    aws = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ENDPOINT_URL")
    env: dict[str, str | None] = dict.fromkeys(aws)
    env["AWS_SHARED_CREDENTIALS_FILE"] = env["AWS_CONFIG_FILE"] = os.devnull
    commands = (["status", c_url], ["verify", a_url, b_url, c_url], ["matmul", a_url, b_url])
    for case, (endpoint, flags, words) in cases.items():
        flags = [f"--storage-option=endpoint_url={endpoint}", *flags]
        for args in commands:
            args = [*args, "-o", c_url] if args[0] == "matmul" else args
            done, seconds = run(outofcore(*args, *flags), env, timeout=120)
            assert done.returncode == 2, (case, args[0], done.stderr)
            (line,) = errors(done.stderr)
            assert words in line, (case, args[0], line)
            assert seconds < 30, (case, args[0], seconds)


@pytest.fixture
def web_server(tmp_path):
    """A plain HTTP server (not S3) on loopback, serving an empty folder; its URL."""
    with serve_folder(tmp_path) as url:
        yield url


def test_an_endpoint_that_is_not_s3_is_named_as_such(web_server):
    """A web server as the endpoint answers 404 pages, which read as a missing bucket or
    array: status, verify and matmul say the endpoint is not S3 instead, exit 2."""
    flags = [
        f"--storage-option=endpoint_url={web_server}",
        "--storage-option=key=k",
        "--storage-option=secret=s",
    ]
    urls = [f"s3://bucket/{name}.zarr" for name in "abc"]
    for args in (["status", urls[2]], ["verify", *urls], ["matmul", *urls[:2], "-o", urls[2]]):
        done, seconds = run(outofcore(*args, *flags), {}, timeout=120)
        assert done.returncode == 2, (args[0], done.stderr)
        (line,) = errors(done.stderr)
        assert f"the endpoint {web_server} answered, but not as S3 (HTTP 404" in line, line
        assert "SimpleHTTP" in line and seconds < 30

"""Resuming after a crash, read retries and the one-job-per-output lease (real files, no mocks).

A crash is made two ways: a chunk of B whose reads see zeros while its file is left
as it is (tests.helpers.break_chunk: a store that returned a damaged body, so the
input's fingerprint does not change), which stops a synchronous job after the tiles
before it; and SIGKILL of an ``outofcore matmul`` process.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from outofcore.api import ATTRIBUTE, job_status, run_job
from outofcore.errors import OutputExistsError
from outofcore.journal.lease import LEASE_NAME, LeaseError, LeaseLostError
from outofcore.journal.leasing import Lease
from outofcore.journal.records import JOURNAL_DIR, Journal
from outofcore.journal.resume import ResumeError
from outofcore.operands.reading import ReadError, with_retries
from outofcore.storage.locations import locate
from tests.helpers import (
    assert_product_close,
    break_chunk,
    cli,
    long_job_inputs,
    random_matrix,
    restore_chunk,
    tile_records,
    wait_for,
    write_zarr,
)


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()
    }


@pytest.fixture
def small(tmp_path):
    """Inputs with 10x10 chunks and numpy copies; a 24 KiB budget makes 20x10 tiles."""
    rng = np.random.default_rng(4)
    a = random_matrix(rng, (80, 60), "float32")
    b = random_matrix(rng, (60, 50), "float32")
    write_zarr(tmp_path / "a.zarr", a, (10, 10))
    write_zarr(tmp_path / "b.zarr", b, (10, 10))
    return tmp_path, a, b


def run(folder: Path, out: str = "c.zarr", **kwargs):
    kwargs = {"memory": 24 * 1024, "client": "sync", "progress": False, **kwargs}
    return run_job(folder / "a.zarr", folder / "b.zarr", folder / out, **kwargs)


def test_read_error_names_the_chunk_then_the_rerun_resumes(small, outofcore_settings):
    folder, a, b = small
    outofcore_settings(read_retries=0)
    broken = break_chunk(folder / "b.zarr", "3/2")  # rows 30:40, columns 20:30 of B
    with pytest.raises(ReadError) as failure:
        run(folder)
    message = str(failure.value)
    assert "b.zarr" in message and "failed 1 time(s)" in message
    assert "chunk (3, 2), key c/3/2 (rows 30:40, columns 20:30), fails with RuntimeError" in message
    assert "Zstd decompression error" in message

    c = folder / "c.zarr"
    state = job_status(c)
    total, done = state["tiles_total"], state["tiles_done"]
    assert 0 < done < total and state["state"] == "stopped" and not state["complete"]
    assert len(tile_records(c)) == done
    assert zarr.open_array(str(c)).attrs[ATTRIBUTE]["complete"] is False

    # Other parameters or inputs: refused, naming what differs; nothing written.
    before = snapshot(folder)
    with pytest.raises(ResumeError, match=r"memory budget was 24576 bytes, now 32768 bytes"):
        run(folder, memory=32 * 1024)
    write_zarr(folder / "b2.zarr", b, (10, 5))
    with pytest.raises(ResumeError, match=r"input B chunks was 10x10, now 10x5.*overwrite=True"):
        run_job(folder / "a.zarr", folder / "b2.zarr", c, memory=24 * 1024, client="sync")
    assert snapshot(folder) == before | snapshot(folder / "b2.zarr")

    # The same job again: only the missing tiles are computed.
    restore_chunk(broken)
    outofcore_settings(read_retries=3)
    result = run(folder)
    assert result.summary["tiles_skipped"] == done
    assert result.summary["tiles_computed"] == total - done == len(result.results)
    assert result.summary["tiles"] == total
    assert_product_close(zarr.open_array(str(c))[...], a, b)
    assert zarr.open_array(str(c)).attrs[ATTRIBUTE]["complete"] is True
    assert job_status(c)["state"] == "complete" and job_status(c)["runs"] == 2
    assert not (c / JOURNAL_DIR / LEASE_NAME).exists()

    # Complete: a rerun is refused; overwrite starts over with a new journal.
    with pytest.raises(
        OutputExistsError, match=r"already exists \(it holds the complete.*\); pass overwrite=True"
    ):
        run(folder)
    old_journal = job_status(c)["journal_id"]
    again = run(folder, overwrite=True)
    assert again.summary["tiles_skipped"] == 0 and again.summary["tiles_computed"] == total
    assert job_status(c)["journal_id"] != old_journal
    assert len(tile_records(c)) == total  # the old journal's records are gone
    assert_product_close(zarr.open_array(str(c))[...], a, b)


def test_transient_read_error_is_retried(small, outofcore_settings):
    folder, a, b = small
    outofcore_settings(read_retries=8, read_retry_delay=0.05)
    broken = break_chunk(folder / "b.zarr", "0/0")  # every tile of the first column reads it
    healer = threading.Timer(0.5, restore_chunk, args=(broken,))
    healer.start()
    started = time.monotonic()
    result = run(folder)
    healer.join()
    assert time.monotonic() - started >= 0.5  # the job did wait for the chunk
    assert result.summary["tiles_computed"] == result.summary["tiles"]
    assert_product_close(zarr.open_array(str(folder / "c.zarr"))[...], a, b)


def test_with_retries_counts_attempts_and_names_the_region(outofcore_settings, caplog):
    outofcore_settings(read_retry_delay=0)
    calls = []

    def flaky(failures: int):
        def read() -> None:
            calls.append(1)
            if len(calls) <= failures:
                raise ConnectionResetError("connection reset by peer")

        return read

    outofcore_settings(read_retries=2)
    with caplog.at_level(logging.WARNING, logger="outofcore"):
        with_retries(flaky(2), lambda: "region")
    assert len(calls) == 3
    # Each retry is said through the `outofcore` logger (the command shows it as a warning).
    retried = [r.getMessage() for r in caplog.records if r.name == "outofcore"]
    assert retried == [
        f"a read failed (ConnectionResetError: connection reset by peer); retry {n} of 2 in 0 s"
        for n in (1, 2)
    ]
    calls.clear()
    with pytest.raises(ReadError, match=r"reading rows 0:5 of X failed 3 time\(s\).*reset"):
        with_retries(flaky(3), lambda: "rows 0:5 of X")
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(ValueError):  # not an I/O error: not retried
        with_retries(lambda: calls.append(1) or int("x"), lambda: "region")
    assert len(calls) == 1


def write_lease(c: Path, **fields) -> dict:
    lease = {
        "job_id": "0123abcd4567",
        "host": "elsewhere",
        "pid": 4242,
        "pid_started": 0.0,
        "acquired": time.time() - 300,
        "heartbeat": time.time(),
        "timeout": 60.0,
        **fields,
    }
    (c / JOURNAL_DIR).mkdir(parents=True, exist_ok=True)
    (c / JOURNAL_DIR / LEASE_NAME).write_text(json.dumps(lease))
    return lease


def test_live_lease_refused_stale_lease_taken_over(small, caplog):
    folder, a, b = small
    caplog.set_level(logging.WARNING, logger="outofcore")
    c = folder / "c.zarr"
    write_lease(c)
    with pytest.raises(
        LeaseError, match=r"another live job 0123abcd4567 \(host elsewhere, pid 4242"
    ):
        run(folder)
    assert [p.name for p in c.rglob("*") if p.is_file()] == [LEASE_NAME]  # nothing written

    # The same lease two minutes without a heartbeat (timeout 60 s): dead, taken over.
    write_lease(c, heartbeat=time.time() - 120)
    result = run(folder)
    assert result.summary["tiles_computed"] == result.summary["tiles"]
    took = [r for r in caplog.records if r.name == "outofcore" and "took over" in r.message]
    assert len(took) == 1 and took[0].levelno == logging.WARNING
    assert "job 0123abcd4567 (host elsewhere, pid 4242" in took[0].message
    assert "which is dead: its last heartbeat was 120 s ago (timeout 60 s)" in took[0].message
    assert_product_close(zarr.open_array(str(c))[...], a, b)
    assert not (c / JOURNAL_DIR / LEASE_NAME).exists()  # released at the end

    # A fresh heartbeat from a process of this host that has exited: dead at once.
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    write_lease(folder / "d.zarr", host=socket.gethostname(), pid=exited.pid)
    run(folder, out="d.zarr")
    assert_product_close(zarr.open_array(str(folder / "d.zarr"))[...], a, b)


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"heartbeat": time.time() + 1e9}, "s in the future, more than its timeout (60 s)"),
        (
            {"heartbeat": time.time() - 2 * 86400, "timeout": 1e300},
            "s ago (timeout 86400 s)",
        ),
        ({"heartbeat": float("nan")}, None),
        ({"heartbeat": "tomorrow"}, None),
        ({"timeout": -5.0}, None),
    ],
    ids=["future", "timeout-1e300", "nan", "text", "negative-timeout"],
)
def test_an_edited_lease_does_not_block_the_output_for_ever(small, caplog, fields, why):
    """A lease of another host whose heartbeat lies further ahead than its timeout, with a
    timeout above a day, or with fields outofcore never writes, is dead: taken over (it
    blocked the output for ever: it never aged)."""
    folder, a, b = small
    caplog.set_level(logging.WARNING, logger="outofcore")
    c = folder / "c.zarr"
    write_lease(c, **fields)
    run(folder)
    assert_product_close(zarr.open_array(str(c))[...], a, b)
    assert not (c / JOURNAL_DIR / LEASE_NAME).exists()
    took = [r.message for r in caplog.records if "took over" in r.message]
    assert len(took) == (1 if why else 0), took
    if why:
        assert why in took[0], took


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (1e6, r"lease_timeout = 1000000.0: need a number > 0 and at most 86400"),
        (float("nan"), r"lease_timeout = nan is not a finite number"),
        (float("inf"), r"lease_timeout = inf is not a finite number"),
        ("soon", r"lease_timeout = 'soon' is not a number"),
        (0, r"lease_timeout = 0: need a number > 0"),
    ],
)
def test_a_lease_timeout_out_of_range_is_bad_input(value, why):
    """The keyword is checked as the setting is: bad input (exit 2), not a failed job."""
    from outofcore.errors import BAD_INPUT, InputError  # noqa: PLC0415
    from outofcore.journal.lease import MAX_LEASE_TIMEOUT, lease_timeout  # noqa: PLC0415

    assert lease_timeout(MAX_LEASE_TIMEOUT) == MAX_LEASE_TIMEOUT
    with pytest.raises(InputError, match=why) as refused:
        lease_timeout(value)
    assert refused.value.exit_status == BAD_INPUT


def test_the_command_says_when_it_takes_over_a_dead_jobs_lease(small):
    """The takeover is a warning line of the command, naming the dead job and why."""
    folder, a, b = small
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    write_lease(folder / "c.zarr", host=socket.gethostname(), pid=exited.pid)
    a_path, b_path, c_path = (str(folder / name) for name in ("a.zarr", "b.zarr", "c.zarr"))
    done = cli("matmul", a_path, b_path, "-o", c_path, "--memory", "24KiB", "--scheduler", "sync")
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("outofcore: ")]
    assert len(said) == 1, done.stderr
    assert said[0].startswith(
        f"outofcore: warning: took over the output '{c_path}' from job 0123abcd4567 "
        f"(host {socket.gethostname()}, pid {exited.pid}, started "
    ), said
    assert said[0].endswith(f"which is dead: its process {exited.pid} on this host has exited")
    assert_product_close(zarr.open_array(c_path)[...], a, b)


def test_two_leases_on_one_output(tmp_path):
    journal = Journal.for_output(locate(tmp_path / "c.zarr"))
    first = Lease(journal, "c.zarr", "job-one", timeout=30)
    second = Lease(journal, "c.zarr", "job-two", timeout=30)
    with first, pytest.raises(LeaseError, match="job job-one"):
        second.acquire()
    with second:  # released: free again
        assert (
            json.loads((tmp_path / "c.zarr" / JOURNAL_DIR / LEASE_NAME).read_text())["job_id"]
            == "job-two"
        )
    assert not (tmp_path / "c.zarr").exists()  # nothing left behind


def test_a_heartbeat_that_fails_or_finds_another_holder_says_so(tmp_path, caplog):
    """The heartbeat's store errors are retried with backoff and said once per run of
    failures (a warning); a lease another job took ends the heartbeat, said at ERROR level,
    and the job is told (``on_lost``, ``lost``, ``check``)."""
    caplog.set_level(logging.INFO, logger="outofcore")
    journal = Journal.for_output(locate(tmp_path / "c.zarr"))
    lease_path = tmp_path / "c.zarr" / JOURNAL_DIR / LEASE_NAME

    def said(needle: str, level: int = logging.INFO) -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if needle in r.getMessage() and r.levelno >= level
        ]

    def replace(make) -> None:  # the lease object swapped at once, as a store does
        swap = lease_path.with_name("swap")
        make(swap)
        os.replace(swap, lease_path)

    told = []
    with Lease(journal, "c.zarr", "job-one", timeout=4) as lease:  # a beat every 1 s
        lease.on_lost(told.append)
        mine = lease_path.read_text()
        replace(lambda p: p.symlink_to(LEASE_NAME))  # a link to itself: reads fail (ELOOP)
        wait_for(lambda: said("heartbeat of"), 10, "a failed heartbeat said")
        time.sleep(0.6)  # more failed tries: still one warning
        failed = said("heartbeat of", logging.WARNING)
        assert len(failed) == 1, failed
        assert failed[0].startswith("the lease heartbeat of 'c.zarr' failed (next try in ")
        assert "[Errno 40] Too many" in failed[0]
        replace(lambda p: p.write_text(mine))  # the store is back
        wait_for(lambda: said("works again"), 10, "the heartbeat working again")
        assert lease.lost is None and not told and not said("now held by")
        replace(lambda p: p.write_text(mine.replace("job-one", "job-two")))  # another job's
        wait_for(lambda: said("now held by"), 10, "the lost lease said")
        lost = said("now held by", logging.ERROR)
        assert len(lost) == 1, lost
        assert lost[0].startswith("the lease of 'c.zarr' is now held by job job-two (host ")
        assert told == [lease.lost] and "stops writing" in str(lease.lost)
        with pytest.raises(LeaseLostError, match="now held by job job-two"):
            lease.check()
        assert lease._thread is not None
        lease._thread.join(5)
        assert not lease._thread.is_alive()  # no more beats: the lease is not this job's
    assert "job-two" in lease_path.read_text()  # released without deleting the other's


def test_a_heartbeat_that_cannot_renew_in_time_stops_the_job(tmp_path, caplog):
    """Store errors for longer than the lease timeout: the lease is lost (ERROR, once) a
    margin before it may expire, and the job is told; a lease that disappeared is said as
    such, not as another job's."""
    caplog.set_level(logging.WARNING, logger="outofcore")
    journal = Journal.for_output(locate(tmp_path / "c.zarr"))
    lease_path = tmp_path / "c.zarr" / JOURNAL_DIR / LEASE_NAME
    told = []
    with Lease(journal, "c.zarr", "job-one", timeout=2) as lease:
        lease.on_lost(told.append)
        beat = json.loads(lease_path.read_text())["heartbeat"]
        swap = lease_path.with_name("swap")
        swap.symlink_to(LEASE_NAME)
        os.replace(swap, lease_path)  # every read fails from now on
        wait_for(lambda: told, 10, "the lease given up")
        given_up = time.time()
        assert given_up < beat + 2, "given up after others may take the lease over"
        assert str(told[0]).startswith("could not renew the lease of 'c.zarr' for ")
        assert "timeout 2 s" in str(told[0]) and "Too many levels" in str(told[0])
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert [r.getMessage() for r in errors] == [str(told[0])]
        lease_path.unlink()
    assert not lease_path.exists()

    told.clear()
    with Lease(journal, "c.zarr", "job-two", timeout=2) as lease:
        lease.on_lost(told.append)
        lease_path.unlink()  # the journal emptied under the job
        wait_for(lambda: told, 10, "the lease said gone")
        assert str(told[0]).startswith("the lease of 'c.zarr' disappeared (the output's journal")
        assert "held by" not in str(told[0])


def test_client_killed_mid_job_then_rerun_skips_done_tiles(tmp_path):
    """SIGKILL ``outofcore matmul``; a second job meanwhile is refused; the rerun resumes."""
    a, b, c = long_job_inputs(tmp_path)
    command = [a, b, "-o", c, "--memory", "512KiB", "--scheduler", "sync", "--json"]
    env = {"OUTOFCORE_LEASE_TIMEOUT": "1"}  # heartbeats every 0.25 s
    job = subprocess.Popen(
        [sys.executable, "-m", "outofcore.cli", "matmul", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **env},
    )
    try:
        lease_path = Path(c) / JOURNAL_DIR / LEASE_NAME
        wait_for(lambda: len(tile_records(Path(c))) >= 3, 60, "3 tiles journaled")
        lease = json.loads(lease_path.read_text())
        assert lease["pid"] == job.pid
        # Past the 1 s timeout the lease is alive only because the heartbeat renews it.
        time.sleep(max(0.0, lease["acquired"] + 1.5 - time.time()))
        with pytest.raises(LeaseError, match=f"job {lease['job_id']} .*pid {job.pid}"):
            run_job(a, b, c, memory="512KiB", client="sync", progress=False)
        assert json.loads(lease_path.read_text())["heartbeat"] > lease["acquired"] + 0.5
        total = json.loads((Path(c) / JOURNAL_DIR / "job.json").read_text())["tiles_total"]
        wait_for(lambda: len(tile_records(Path(c))) >= total // 2, 120, "half the tiles")
        assert job.poll() is None, "the job finished before the kill; make it longer"
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    done = len(tile_records(Path(c)))

    status = cli("status", c, "--json")
    assert status.returncode == 0, status.stderr
    state = json.loads(status.stdout)
    assert state["state"] == "stopped" and state["tiles_done"] == done < state["tiles_total"]
    assert state["lease"]["alive"] is False and "has exited" in state["lease"]["dead_because"]

    rerun = cli("matmul", *command)
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout)
    assert summary["tiles_skipped"] == done > 0
    assert summary["tiles_computed"] + summary["tiles_skipped"] == summary["tiles"]
    a_np, b_np = zarr.open_array(a)[...], zarr.open_array(b)[...]
    assert_product_close(zarr.open_array(c)[...], a_np, b_np)
    checked = cli("verify", a, b, c, "--json")
    assert checked.returncode == 0 and json.loads(checked.stdout)["passed"] is True
    human = cli("status", c)
    assert f"complete, {summary['tiles']} of {summary['tiles']} tiles done" in human.stdout


def test_journal_and_resume_through_the_store_api_on_an_fsspec_store(small, outofcore_settings):
    """The output in fsspec's memory filesystem: no local paths, only the zarr store API."""
    folder, a, b = small
    out = f"memory://outofcore-test-{time.monotonic_ns()}/c.zarr"
    outofcore_settings(read_retries=0)
    broken = break_chunk(folder / "b.zarr", "5/4")  # B's last column: read by later tiles
    with pytest.raises(ReadError, match=r"chunk \(5, 4\)"):
        run_job(folder / "a.zarr", folder / "b.zarr", out, memory=24 * 1024, client="sync")
    state = job_status(out)
    assert state["state"] == "stopped" and 0 < state["tiles_done"] < state["tiles_total"]
    restore_chunk(broken)
    result = run_job(
        folder / "a.zarr", folder / "b.zarr", out, memory=24 * 1024, client="sync", progress=False
    )
    assert result.summary["tiles_skipped"] == state["tiles_done"]
    assert_product_close(zarr.open_array(out)[...], a, b)
    assert job_status(out)["state"] == "complete"


@pytest.mark.parametrize(
    "hostile",
    ["../../../victim", "../victim", "..", "a/b", "", "tiles/../..", 5, None, "x" * 300],
)
def test_a_journal_id_edited_to_a_path_is_refused_and_nothing_outside_is_touched(
    small, outofcore_settings, hostile
):
    """Anyone who can write into a shared output could make its owner's rerun delete or
    write a folder of their choosing through job.json's journal id: it is refused."""
    folder, a, b = small
    outofcore_settings(read_retries=0)
    broken = break_chunk(folder / "b.zarr", "3/2")
    with pytest.raises(ReadError):
        run(folder)  # an unfinished job: job.json, some tile records
    restore_chunk(broken)
    c = folder / "c.zarr"
    victim = folder / "victim"  # where "../../../victim" and its kin point from the journal
    (victim / "tiles").mkdir(parents=True)
    (victim / "keep.txt").write_text("the user's data")
    job = c / JOURNAL_DIR / "job.json"
    document = json.loads(job.read_text())
    document["journal_id"] = hostile
    job.write_text(json.dumps(document))
    before = snapshot(folder)
    with pytest.raises(OutputExistsError, match=r"journal id .* is not a name outofcore writes"):
        run(folder)
    assert snapshot(folder) == before  # no byte written or deleted, in the output or beside it
    # The command says it in one line, exit status 2, and still touches nothing.
    result = subprocess.run(
        [sys.executable, "-m", "outofcore.cli", "matmul", str(folder / "a.zarr"),
         str(folder / "b.zarr"), "-o", str(c), "--memory", "24KiB", "--scheduler", "sync",
         "--quiet"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "is not a name outofcore writes" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert snapshot(folder) == before
    # --overwrite starts over without following the hostile id: the victim stays.
    again = run(folder, overwrite=True)
    assert_product_close(zarr.open_array(str(c))[...], a, b)
    assert again.summary["tiles_computed"] == again.summary["tiles"]
    assert (victim / "keep.txt").read_text() == "the user's data" and (victim / "tiles").is_dir()


def test_journal_keys_never_leave_the_journal_folder(tmp_path):
    journal = Journal.for_output(locate(str(tmp_path / "c.zarr")))
    assert (
        journal.key("tiles", "abc123", "tile-0-1.json") == "_outofcore/tiles/abc123/tile-0-1.json"
    )
    for bad in ("..", "../x", "a/b", "", ".hidden", "a\\b", "tile\n"):
        with pytest.raises(OutputExistsError, match="is not a name outofcore writes"):
            journal.key("tiles", bad)


@pytest.mark.parametrize("damage", [b"{not json", b"[1, 2]", b"", b"\xff\xfe"])
def test_a_damaged_job_document_is_named_not_taken_for_no_journal(
    small, outofcore_settings, damage
):
    """Issue 28: a corrupt job.json read as 'no job journal' ('no job wrote it')."""
    folder, a, b = small
    outofcore_settings(read_retries=0)
    broken = break_chunk(folder / "b.zarr", "3/2")
    with pytest.raises(ReadError):
        run(folder)
    restore_chunk(broken)
    c = folder / "c.zarr"
    (c / JOURNAL_DIR / "job.json").write_bytes(damage)
    before = snapshot(folder)
    for attempt in (lambda: run(folder), lambda: job_status(c)):
        with pytest.raises(OutputExistsError, match=r"job.json \(\d+ bytes\) is damaged"):
            attempt()
    assert snapshot(folder) == before
    run(folder, overwrite=True)  # starting over is still possible
    assert_product_close(zarr.open_array(str(c))[...], a, b)

"""Ctrl-C ends the command (issue 55): real SIGINTs at random points of real jobs.

Each try starts ``outofcore matmul`` in a process of its own, waits until its cluster has
started (or not: some tries interrupt the start), sleeps a random while within the time a
whole job takes here and sends SIGINT,
as a terminal's Ctrl-C does.  The command must end within 10 s, with exit status 130, one
last line that says how many tiles the output's journal holds (the count ``outofcore
status`` reads) and how to resume, and no traceback.  Then the same command, run again,
resumes and finishes with numpy's product.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import zarr

from outofcore.api import job_status
from outofcore.frontends.generate import random_array

#: The longest a command may take to end after the first SIGINT.
EXIT_SECONDS = 10.0
KEPT = re.compile(r"(\d+) of (\d+) tiles are kept in (\S+): rerun the same command to resume")


def start(
    folder: Path, out: str, *extra: str
) -> tuple[subprocess.Popen, list[str], threading.Event]:
    """``outofcore matmul a b -o OUT`` in a new session; its stderr lines, collected as they
    come, and an event set once its cluster has started."""
    job = subprocess.Popen(
        [sys.executable, "-m", "outofcore.cli", "matmul", "a.zarr", "b.zarr", "-o", out,
         "--memory", "2MiB", *extra],
        cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        for line in job.stderr:
            lines.append(line.rstrip("\n"))
            if line.startswith("Started a"):
                started.set()
        started.set()

    threading.Thread(target=read, daemon=True).start()
    return job, lines, started


def interrupt(job: subprocess.Popen) -> float:
    """SIGINT to ``job``'s process group, as Ctrl-C; the seconds until it ended."""
    sent = time.monotonic()
    os.killpg(job.pid, signal.SIGINT)
    try:
        job.wait(timeout=EXIT_SECONDS + 20)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        return float("inf")
    return time.monotonic() - sent


def test_ctrl_c_at_random_points_of_real_jobs_ends_each_within_10_s_saying_what_was_kept(
    tmp_path,
):
    random_array(tmp_path / "a.zarr", (768, 640), (96, 80), seed=1)
    random_array(tmp_path / "b.zarr", (640, 704), (80, 88), seed=2)
    # How long the job runs once its cluster has started, on this machine under its load
    # now: the random points are drawn within it, so a fast machine is interrupted as often
    # as a slow one (a fixed window let a fast CI machine finish most jobs first).
    job, lines, started = start(tmp_path, "whole.zarr")
    started.wait(60)
    began = time.monotonic()
    assert job.wait(timeout=300) == 0, lines
    span = time.monotonic() - began
    pick = random.Random(55)
    interrupted = []
    for attempt in range(20):
        out = f"c{attempt}.zarr"
        job, lines, started = start(tmp_path, out)
        started.wait(60)
        time.sleep(pick.uniform(0.0, 0.8 * span))
        if job.poll() is not None:  # finished before the signal: nothing to interrupt
            assert job.returncode == 0, lines
            continue
        seconds = interrupt(job)
        assert seconds < EXIT_SECONDS, (attempt, seconds, lines[-5:])
        time.sleep(0.2)  # the reader thread takes the last lines
        text = "\n".join(lines)
        if job.returncode == 0:  # it finished as the signal came
            continue
        assert job.returncode == 130, (attempt, text)
        assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
        last = lines[-1]
        assert last.startswith("outofcore: interrupted"), last
        kept = KEPT.search(last)
        if kept is not None:  # the journal was there: its count, as status reads it
            status = job_status(tmp_path / out)
            assert (int(kept[1]), int(kept[2])) == (status["tiles_done"], status["tiles_total"])
            assert kept[3] == out
            interrupted.append(out)
    assert len(interrupted) >= 5, ("too few tries interrupted a running job", span)
    # Each interrupted output resumes where it stopped, to numpy's product.
    out = interrupted[-1]
    before = job_status(tmp_path / out)["tiles_done"]
    done = subprocess.run(
        [sys.executable, "-m", "outofcore.cli", "matmul", "a.zarr", "b.zarr", "-o", out,
         "--memory", "2MiB", "--quiet"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert job_status(tmp_path / out)["complete"] and before >= 0
    a = zarr.open_array(tmp_path / "a.zarr")[...].astype(np.float64)
    b = zarr.open_array(tmp_path / "b.zarr")[...].astype(np.float64)
    c = zarr.open_array(tmp_path / out)[...]
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-3 * np.abs(a).max() * 640)


def test_a_stop_that_hangs_ends_after_the_grace_with_the_same_last_line(tmp_path):
    """A command that does not stop when interrupted (here: one that swallows the
    KeyboardInterrupt and sleeps) still ends, after the grace period, with exit status 130
    and the line; a second SIGINT ends it at once."""
    script = tmp_path / "hang.py"
    script.write_text(
        "import sys, time\n"
        "from outofcore import cli\n"
        "cli.STOP_GRACE_SECONDS = 1.0\n"
        "def stuck(args):\n"
        "    print('Started a stuck command', file=sys.stderr, flush=True)\n"
        "    while True:\n"
        "        try:\n"
        "            time.sleep(60)\n"
        "        except KeyboardInterrupt:\n"
        "            pass\n"
        "cli.COMMANDS['demo'] = stuck\n"
        "cli.command()\n"
    )
    for second_signal in (False, True):
        job = subprocess.Popen(
            [sys.executable, str(script), "demo"], cwd=tmp_path, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        assert job.stderr.readline().startswith("Started a")
        sent = time.monotonic()
        os.killpg(job.pid, signal.SIGINT)
        if second_signal:
            time.sleep(0.2)
            os.killpg(job.pid, signal.SIGINT)
        _, stderr = job.communicate(timeout=30)
        seconds = time.monotonic() - sent
        assert job.returncode == 130, stderr
        if second_signal:
            # which way it left is the message's; the bound is the promise, load or
            # not (its children are ended first: up to 2 s each way)
            assert "outofcore: interrupted (interrupted again)" in stderr
            assert seconds < EXIT_SECONDS, seconds
        else:
            assert "outofcore: interrupted (stopping took over 1 s)" in stderr
            assert 0.9 < seconds < EXIT_SECONDS, seconds  # the grace first, never less


def test_ctrl_c_while_the_command_loads_is_one_line():
    """SIGINT before the command has loaded (the console script's ``argv[0]``): nothing
    started, one line, 130, no traceback; a program that imports the module keeps its own
    handler."""
    job = subprocess.Popen(
        [sys.executable, "-c",
         "import os, signal, sys; sys.argv = ['outofcore']; import outofcore.cli; "
         "os.kill(os.getpid(), signal.SIGINT); import time; time.sleep(5)"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _, stderr = job.communicate(timeout=60)
    assert job.returncode == 130
    assert stderr.strip() == "outofcore: interrupted before anything started"
    kept = subprocess.run(
        [sys.executable, "-c",
         "import signal; import outofcore.cli; "
         "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert kept.returncode == 0, kept.stderr

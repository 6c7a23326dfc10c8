"""Progress on stderr: a redrawn bar on a terminal, plain lines in a log (issue 21, item 4)."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import struct
import termios

import pytest

from outofcore.jobs.progress import ProgressLines, progress


class Clock:
    """Seconds that pass only when the test says."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_lines_at_most_every_few_seconds_with_rate_and_time_left():
    clock, stream = Clock(), io.StringIO()
    lines = ProgressLines(96, 0, "tile", "matmul", stream, every=5.0, clock=clock)
    for _ in range(12):  # 12 tiles in 3 s: no line before 5 s have passed
        clock.now += 0.25
        lines.update(None)
    for _ in range(8):  # 20 tiles in 5 s: one line, then none until 5 s more
        clock.now += 0.25
        lines.update(None)
    clock.now += 4.0
    lines.update(None)
    clock.now += 1.0
    lines.update(None)  # 22 tiles at 10 s
    lines.close()
    assert stream.getvalue().splitlines() == [
        "matmul: 0/96 tiles (0%)",
        "matmul: 20/96 tiles (21%), 5.00 s elapsed, 4 tiles/s, about 19.00 s left",
        "matmul: 22/96 tiles (23%), 10.00 s elapsed, 2.2 tiles/s, about 33.64 s left",
        "matmul: 22/96 tiles (23%) in 10.00 s, 2.2 tiles/s",
    ]


def test_a_resumed_job_counts_its_rate_from_this_run_and_a_stopped_one_says_where():
    clock, stream = Clock(), io.StringIO()
    lines = ProgressLines(40, 30, "task", "gram", stream, every=1.0, clock=clock)
    clock.now += 2.0
    lines.update(None)
    clock.now += 2.0
    lines.close(stopped=True)
    assert stream.getvalue().splitlines() == [
        "gram: 30/40 tasks (75%)",
        "gram: 31/40 tasks (78%), 2.00 s elapsed, 0.5 tasks/s, about 18.00 s left",
        "gram: stopped at 31/40 tasks (78%) after 4.00 s",
    ]


def test_progress_into_a_file_has_no_carriage_returns(tmp_path):
    with open(tmp_path / "log", "w") as log:
        with progress(5, 0, stream=log, every=0.0) as on_result:
            for _ in range(5):
                on_result(None)
        with pytest.raises(KeyboardInterrupt), progress(5, 2, stream=log) as on_result:
            on_result(None)
            raise KeyboardInterrupt
        with progress(5, 0, show=False, stream=log) as on_result:
            on_result(None)
    text = (tmp_path / "log").read_text()
    assert "\r" not in text
    lines = text.splitlines()
    assert lines[0] == "matmul: 0/5 tiles (0%)" and len(lines) == 1 + 4 + 1 + 2
    assert all(line.startswith("matmul: ") for line in lines)
    assert lines[5].startswith("matmul: 5/5 tiles (100%) in ")
    assert lines[6:8] == ["matmul: 2/5 tiles (40%)", lines[7]]
    assert lines[7].startswith("matmul: stopped at 3/5 tiles (60%) after ")


def test_progress_on_a_terminal_is_a_redrawn_bar():
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    with open(follower, "w") as terminal:
        assert terminal.isatty()
        with progress(3, 0, name="gram", stream=terminal) as on_result:
            for _ in range(3):
                on_result(None)
    os.set_blocking(leader, False)
    drawn = b""
    with contextlib.suppress(OSError):  # EIO: the terminal closed and all was read
        while chunk := os.read(leader, 65536):
            drawn += chunk
    os.close(leader)
    drawn = drawn.decode()
    assert "\r" in drawn and "gram: 100%" in drawn and "3/3" in drawn


def test_a_job_of_one_tile_moves_with_its_panels(tmp_path, monkeypatch, capsys):
    """Issue 45: a job of one tile said ``0/1 tiles (0%)`` until it ended.  With its panel
    loop slowed, the lines come at least every LINE_EVERY_SECONDS (at most 5 s), each
    with the share of panels done and the time left."""
    import re  # noqa: PLC0415
    import time  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    from outofcore.api import run_job  # noqa: PLC0415
    from outofcore.compute.tile import TilePanels  # noqa: PLC0415
    from outofcore.jobs import progress as progress_module  # noqa: PLC0415
    from tests.helpers import write_zarr  # noqa: PLC0415

    assert progress_module.LINE_EVERY_SECONDS <= 5
    monkeypatch.setattr(progress_module, "LINE_EVERY_SECONDS", 0.3)
    load = TilePanels.load

    def slow_load(self, position, read=None, alongside=None):
        time.sleep(0.25)
        return load(self, position, read, alongside)

    monkeypatch.setattr(TilePanels, "load", slow_load)
    rng = np.random.default_rng(1)
    write_zarr(tmp_path / "a.zarr", rng.standard_normal((64, 160)).astype("float32"), (64, 16))
    write_zarr(tmp_path / "b.zarr", rng.standard_normal((160, 48)).astype("float32"), (16, 48))
    result = run_job(
        tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
        client="sync", progress=True, tile=(64, 48), tk=16,
    )  # fmt: skip
    assert len(result.plan.tasks) == 1 and result.plan.tk == 16  # one tile, ten panels
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("matmul:")]
    assert lines[0] == "matmul: 0/1 tile (0%)" and lines[-1].startswith("matmul: 1/1 tile (100%)")
    moving = lines[1:-1]
    assert len(moving) >= 3, lines
    shares = [int(re.search(r"\((\d+)%\)", line)[1]) for line in moving]
    assert shares == sorted(shares) and shares[0] > 0 and shares[-1] < 100
    assert all("elapsed" in line and "left" in line for line in moving)


def test_a_panel_read_for_long_moves_the_progress_and_lines_come_on_time(
    tmp_path, monkeypatch, capsys
):
    """Issue 55, item 4: progress moved once a panel was multiplied, 25 s apart on a
    loaded machine.  Now each operand read is a step of its own, and a line comes every
    LINE_EVERY_SECONDS though nothing finished since (here: one tile of one panel whose A
    and B reads, at once, end after 1.2 s and 2.4 s, lines every 0.3 s; counted steps,
    not the machine's speed: every line after the first says the time elapsed, and the
    share moves to a third once A is in, before the product)."""
    import re  # noqa: PLC0415
    import time  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    from outofcore.api import run_job  # noqa: PLC0415
    from outofcore.compute import tile as tile_module  # noqa: PLC0415
    from outofcore.jobs import progress as progress_module  # noqa: PLC0415
    from tests.helpers import write_zarr  # noqa: PLC0415

    monkeypatch.setattr(progress_module, "LINE_EVERY_SECONDS", 0.3)
    read = tile_module.read_operand

    def slow_read(array, *args):
        # A's part and B's are read at once (issue 52): A's ends at 1.2 s, B's at 2.4 s.
        time.sleep(1.2 if "a.zarr" in str(array.store_path) else 2.4)
        return read(array, *args)

    monkeypatch.setattr(tile_module, "read_operand", slow_read)
    rng = np.random.default_rng(2)
    write_zarr(tmp_path / "a.zarr", rng.standard_normal((32, 24)).astype("float32"), (32, 24))
    write_zarr(tmp_path / "b.zarr", rng.standard_normal((24, 16)).astype("float32"), (24, 16))
    result = run_job(
        tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
        client="sync", progress=True,
    )  # fmt: skip
    assert len(result.plan.tasks) == 1 and len(result.plan.panels) == 1  # one panel
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("matmul:")]
    moving = lines[1:-1]
    # 2.4 s of reads: a line each 0.3 s at most, whatever reported (one panel: the old
    # rule gave none between the first and the last).
    assert len(moving) >= 4, lines
    assert all("elapsed" in line for line in moving)
    shares = [int(re.search(r"\((\d+)%\)", line)[1]) for line in moving]
    assert shares == sorted(shares) and 33 in shares and shares[-1] < 100, lines


def test_panel_reports_of_a_worker_process_reach_the_client(local_cluster):
    """Tasks on a worker process report their panels as worker events; the job's client
    receives those of its own job, checked, and nothing else."""
    from distributed import Client  # noqa: PLC0415

    from outofcore.compute.panel_progress import report  # noqa: PLC0415
    from outofcore.jobs.progress import panel_reports  # noqa: PLC0415
    from tests.helpers import wait_for  # noqa: PLC0415

    seen = []

    class Executor:  # the executor's part panel_reports uses: its client
        client = None

    with Client(local_cluster(n_workers=1)) as client:
        Executor.client = client
        with panel_reports(Executor(), "job-1", lambda *a: seen.append(a)):
            client.submit(report, "job-1", "tile-0-0", 3, 8, pure=False).result()
            client.submit(report, "job-2", "tile-0-0", 5, 8, pure=False).result()  # not ours
            wait_for(lambda: seen, 30, "the panel report")
    assert seen == [("tile-0-0", 3, 8)]

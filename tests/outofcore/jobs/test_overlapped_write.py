"""The write of a tile overlaps its compute, and still no record comes before its data is
durable (issue 44, item 4): a job is killed (SIGKILL) between the durable writes of one
tile's row blocks, each written while the next is multiplied; every record it left follows
the flushes of all its tile's chunk files, and the rerun computes the killed tile again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import zarr

from outofcore.api import run_job
from tests.helpers import ROOT, assert_product_close, tile_records, write_zarr

#: Runs the job with every durable flush of C's chunks and every journal write logged in
#: order; SIGKILLs itself right after the ``KILL_AT``-th flush of C's chunks.
JOB = """
import os, signal, sys
from outofcore.api import run_job
from outofcore.journal import store
from outofcore.storage import writing

folder, kill_at = sys.argv[1], int(sys.argv[2])
log = open(os.path.join(folder, "events.log"), "a", buffering=1)
flushes = 0
make_durable, write_durably = writing.make_durable, store.write_durably

def logged_make_durable(files, root):
    global flushes
    files = list(files)
    make_durable(files, root)
    chunks = [f for f in files if os.sep + "c.zarr" + os.sep + "c" + os.sep in f]
    for path in chunks:
        log.write("durable " + os.path.relpath(path, folder) + "\\n")
    if chunks:
        flushes += 1
        if flushes == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

def logged_write_durably(path, data, **options):
    written = write_durably(path, data, **options)
    log.write("journal " + os.path.relpath(path, folder) + "\\n")
    return written

writing.make_durable, store.write_durably = logged_make_durable, logged_write_durably
run_job(
    os.path.join(folder, "a.zarr"), os.path.join(folder, "b.zarr"),
    os.path.join(folder, "c.zarr"), client="sync", memory="64MiB", tile=(4096, 8),
    progress=False,
)
"""


def test_a_kill_between_overlapped_block_writes_leaves_only_durable_tiles_recorded(tmp_path):
    rng = np.random.default_rng(44)
    a = rng.standard_normal((8192, 16)).astype("float32")
    b = rng.standard_normal((16, 8)).astype("float32")
    write_zarr(tmp_path / "a.zarr", a, (2048, 16))
    write_zarr(tmp_path / "b.zarr", b, (16, 8))
    killed = subprocess.run(
        [sys.executable, "-c", JOB, str(tmp_path), "3"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    events = (tmp_path / "events.log").read_text().splitlines()
    durable = [e.split(" ", 1)[1] for e in events if e.startswith("durable ")]
    # Tiles of 4096 rows in blocks of 2048 (one output chunk each): the first tile's two
    # blocks and the second tile's first block were flushed, then the process died.
    assert durable == [os.path.join("c.zarr", "c", str(i), "0") for i in range(3)]
    records = [
        (position, e.rsplit(os.sep, 1)[1])
        for position, e in enumerate(events)
        if e.startswith("journal ") and os.path.basename(e).startswith("tile-")
    ]
    assert [name for _, name in records] == ["tile-0-0.json"]  # the killed tile has none
    position, _ = records[0]
    flushed_before = {e.split(" ", 1)[1] for e in events[:position] if e.startswith("durable ")}
    assert flushed_before >= {os.path.join("c.zarr", "c", str(i), "0") for i in (0, 1)}
    assert [p.name for p in tile_records(tmp_path / "c.zarr")] == ["tile-0-0.json"]

    rerun = run_job(
        tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
        client="sync", memory="64MiB", tile=(4096, 8), progress=False,
    )  # fmt: skip
    assert rerun.summary["tiles_skipped"] == 1
    assert [r.key for r in rerun.results] == ["tile-1-0"]  # computed again, whole
    assert_product_close(zarr.open_array(tmp_path / "c.zarr")[...], a, b)
    assert json.loads((tmp_path / "c.zarr" / "zarr.json").read_text())["shape"] == [8192, 8]

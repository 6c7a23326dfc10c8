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
#: order; SIGKILLs itself right after the ``KILL_AT``-th flush of C's chunks. A journal
#: write and its line are one step under a lock the kill takes too: with two tiles in
#: flight, a record written by one thread was otherwise on disk and not yet in the log
#: when the other thread's flush killed the process (a side-by-side run saw it).
JOB = """
import os, signal, sys, threading
from outofcore.api import run_job
from outofcore.journal import store
from outofcore.storage import writing

folder, kill_at = sys.argv[1], int(sys.argv[2])
log = open(os.path.join(folder, "events.log"), "a", buffering=1)
logging = threading.RLock()  # a journal write may flush through make_durable
flushes = 0
make_durable, write_durably = writing.make_durable, store.write_durably

def logged_make_durable(files, root):
    global flushes
    files = list(files)
    make_durable(files, root)
    chunks = [f for f in files if os.sep + "c.zarr" + os.sep + "c" + os.sep in f]
    with logging:
        for path in chunks:
            log.write("durable " + os.path.relpath(path, folder) + "\\n")
        if chunks:
            flushes += 1
            if flushes == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

def logged_write_durably(path, data, **options):
    with logging:
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


#: The job of :data:`JOB` with two tiles in flight: backend ``"timed"`` on one GPU whose
#: worker is a thread of the process (two task threads, each its engine on one timed
#: device whose kernels and writes take long beside the host's work), tiles of one chunk.
TWO_IN_FLIGHT = JOB.replace(
    """run_job(""",
    """from outofcore import config
from outofcore.backends.timed import RATES, TimedDevice, TimedModel, use_process_device

flops = dict.fromkeys(RATES.kernel_flops, 2.0 * 128 * 8 * 16 / 0.03)
use_process_device(TimedDevice(TimedModel.from_rates(RATES, kernel_flops=flops, write_bps=1e5)))
config.set({"gpu-tiles-in-flight": 2}).__enter__()
run_job(""",
).replace(
    """client="sync", memory="64MiB", tile=(4096, 8),""",
    """backend="timed", gpus=(0,), memory="64MiB", tile=(128, 8),""",
)


def test_a_kill_with_two_tiles_in_flight_recomputes_exactly_the_unrecorded_tiles(tmp_path):
    """Two tiles in flight on one device: the process dies right after one tile's chunk is
    durable and before its record; every record it left follows its own tile's durable
    chunk, and the rerun computes exactly the tiles without a record (the killed one and
    whatever the other thread had in flight), the product right."""
    from outofcore import config  # noqa: PLC0415

    rng = np.random.default_rng(52)
    a = rng.standard_normal((1024, 16)).astype("float32")
    b = rng.standard_normal((16, 8)).astype("float32")
    write_zarr(tmp_path / "a.zarr", a, (128, 16))
    write_zarr(tmp_path / "b.zarr", b, (16, 8))
    killed = subprocess.run(
        [sys.executable, "-c", TWO_IN_FLIGHT, str(tmp_path), "3"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    events = (tmp_path / "events.log").read_text().splitlines()
    durable = [e.split(" ", 1)[1] for e in events if e.startswith("durable ")]
    assert len(durable) == 3  # one chunk a tile, one flush each; killed after the third
    chunk_of = {f"tile-{i}-0.json": os.path.join("c.zarr", "c", str(i), "0") for i in range(8)}
    records = [
        (position, os.path.basename(e))
        for position, e in enumerate(events)
        if e.startswith("journal ") and os.path.basename(e).startswith("tile-")
    ]
    killed_tile = next(name for name, chunk in chunk_of.items() if chunk == durable[-1])
    recorded = {name for _, name in records}
    assert killed_tile not in recorded  # durable, never recorded
    for position, name in records:  # no record before its own tile's data is durable
        flushed = {e.split(" ", 1)[1] for e in events[:position] if e.startswith("durable ")}
        assert chunk_of[name] in flushed
    assert {p.name for p in tile_records(tmp_path / "c.zarr")} == recorded

    with config.set({"gpu-tiles-in-flight": 2}):
        rerun = run_job(
            tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
            backend="timed", gpus=(0,), memory="64MiB", tile=(128, 8), progress=False,
        )  # fmt: skip
    assert rerun.summary["tiles_skipped"] == len(recorded)
    computed = {r.key + ".json" for r in rerun.results}
    assert computed == set(chunk_of) - recorded  # exactly the unrecorded tiles, once each
    assert len(rerun.results) == len(computed)
    assert_product_close(zarr.open_array(tmp_path / "c.zarr")[...], a, b)

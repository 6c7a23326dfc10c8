"""A panel's A and B parts are read at once (issue 52, item 1: "a panel's A and B chunks
decode together"): where both operands are read from their chunk files, A's part is read
in the reader's second thread while B's is read in the first, so the chunk-file threads
decode both; anything zarr reads (its requests its own) is read one part after the other.
The product, the bytes counted and the CPU seconds are the same either way."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import zarr

from outofcore.api import run_job
from outofcore.compute import tile
from tests.helpers import assert_product_close, write_zarr


def inputs(folder, seed=52):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((150, 257)).astype("float32")  # ragged panels and tiles
    b = rng.standard_normal((257, 130)).astype("float32")
    write_zarr(folder / "a.zarr", a, (64, 64))
    write_zarr(folder / "b.zarr", b, (64, 64))
    return a, b


@pytest.fixture
def reads(monkeypatch):
    """Every operand part read: (operand, thread, start, end), each at least 20 ms long."""
    seen: list[tuple[str, int, float, float]] = []
    lock = threading.Lock()
    real = tile.read_operand

    def timed(array, *args, **kwargs):
        start = time.perf_counter()
        real(array, *args, **kwargs)
        time.sleep(0.02)  # long enough that two parts at once overlap
        name = "A" if "a.zarr" in str(array.store_path) else "B"
        with lock:
            seen.append((name, threading.get_ident(), start, time.perf_counter()))

    monkeypatch.setattr(tile, "read_operand", timed)
    return seen


def pairs(seen):
    """The A and B parts of each load, in order (one load at a time: A's part ends, and
    B's, before the next load starts)."""
    ordered = sorted(seen, key=lambda part: part[2])
    a_parts = [p for p in ordered if p[0] == "A"]
    b_parts = [p for p in ordered if p[0] == "B"]
    assert len(a_parts) == len(b_parts) > 1
    return list(zip(a_parts, b_parts, strict=True))


def run(folder):
    result = run_job(
        folder / "a.zarr", folder / "b.zarr", folder / "c.zarr",
        client="sync", memory="1MiB", progress=False, tile=(64, 64), tk=64,
    )  # fmt: skip
    return result, zarr.open_array(folder / "c.zarr")[...]


def test_chunk_file_operands_are_read_together_in_two_threads(tmp_path, reads):
    a, b = inputs(tmp_path)
    result, c = run(tmp_path)
    assert_product_close(c, a, b)
    for (_, a_thread, a_start, a_end), (_, b_thread, b_start, b_end) in pairs(reads):
        assert a_thread != b_thread
        assert a_start < b_end and b_start < a_end  # at once
    assert result.summary["bytes_read"] == result.summary["bytes_read_predicted"]
    assert result.summary["decode_cpu_seconds"] > 0


def test_operands_zarr_reads_are_read_one_after_the_other(tmp_path, reads, monkeypatch):
    a, b = inputs(tmp_path)
    monkeypatch.setattr(tile, "reads_chunk_files", lambda array: False)
    result, c = run(tmp_path)
    assert_product_close(c, a, b)
    for (_, a_thread, _, a_end), (_, b_thread, b_start, _) in pairs(reads):
        assert a_thread == b_thread and a_end <= b_start  # A's part, then B's
    assert result.summary["bytes_read"] == result.summary["bytes_read_predicted"]

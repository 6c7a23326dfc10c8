"""Split-k (outofcore.jobs.splitk): small outputs from a large k, computed in parts and reduced.

Jobs on one 2-worker LocalCluster (worker processes) with hypothesis-drawn
shapes, both transpose flags and ragged chunks; forced splits in-process for
every kind of product (exact integers, complex with an addend, float16);
crashes: a read error between parts, a client SIGKILLed mid-job, a worker
SIGKILLed mid-job, a damaged partial tile.  Always against a float64 (or
exact integer) numpy reference.
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import zarr
from distributed import Client
from hypothesis import given, settings
from hypothesis import strategies as st

from outofcore.api import run_job
from outofcore.frontends.generate import random_array
from outofcore.journal.records import JOURNAL_DIR, PARTIALS_DIR
from outofcore.operands.random_values import random_values
from tests.helpers import (
    assert_gemm_close,
    break_chunk,
    cli,
    overwrite_in_place,
    random_matrix,
    restore_chunk,
    wait_for,
    write_zarr,
)


def part_records(c: Path) -> list[Path]:
    """Records of the finished parts of split tiles under the output ``c``."""
    return sorted((c / JOURNAL_DIR / PARTIALS_DIR).glob("*/tile-*.json"))


def store(folder: Path, name: str, data: np.ndarray, chunks: tuple[int, int]) -> Path:
    write_zarr(folder / name, data, chunks)
    return folder / name


@settings(max_examples=12)
@given(
    m=st.sampled_from([1, 2, 7, 13, 31]),
    n=st.sampled_from([1, 3, 11, 29]),
    k=st.integers(min_value=400, max_value=2500),
    k_chunks=st.tuples(st.sampled_from([37, 53, 100, 128]), st.sampled_from([41, 64, 101])),
    transpose_a=st.booleans(),
    transpose_b=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_small_outputs_from_a_large_k_split_over_both_workers(
    two_process_client, tmp_path_factory, m, n, k, k_chunks, transpose_a, transpose_b, seed
):
    """One output tile (the output is one chunk of A's rows and B's columns): k is split
    so both workers work, and the sum of the parts is the product."""
    folder = tmp_path_factory.mktemp("split")
    rng = np.random.default_rng(seed)
    a = random_matrix(rng, (m, k), "float32")
    b = random_matrix(rng, (k, n), "float32")
    a_data, a_chunks = (a.T, (k_chunks[0], m)) if transpose_a else (a, (m, k_chunks[0]))
    b_data, b_chunks = (b.T, (n, k_chunks[1])) if transpose_b else (b, (k_chunks[1], n))
    a_path = store(folder, "a.zarr", np.ascontiguousarray(a_data), a_chunks)
    b_path = store(folder, "b.zarr", np.ascontiguousarray(b_data), b_chunks)
    result = run_job(
        a_path,
        b_path,
        folder / "c.zarr",
        client=two_process_client,
        transpose_a=transpose_a,
        transpose_b=transpose_b,
        memory="8MiB",
        progress=False,
    )
    plan = result.plan
    assert len(plan.tasks) == 1
    assert plan.splits > 1 or len(plan.panels) == 1, plan.summary()
    if plan.splits > 1:
        assert result.summary["partial_tasks_computed"] == plan.splits
        assert plan.busy_workers == 2
    stored_a = zarr.open_array(str(a_path))[...]
    stored_b = zarr.open_array(str(b_path))[...]
    got = zarr.open_array(str(folder / "c.zarr"))[...]
    assert_gemm_close(
        got,
        stored_a,
        stored_b,
        accumulated_in="float32",
        transpose_a=transpose_a,
        transpose_b=transpose_b,
    )
    assert not (folder / "c.zarr" / JOURNAL_DIR / PARTIALS_DIR).exists()  # cleaned up


def test_parts_run_on_both_workers_and_the_summary_counts_them(two_process_client, tmp_path):
    rng = np.random.default_rng(3)
    a, b = random_matrix(rng, (40, 6007), "float32"), random_matrix(rng, (6007, 30), "float32")
    write_zarr(tmp_path / "a.zarr", a, (40, 250))
    write_zarr(tmp_path / "b.zarr", b, (250, 30))
    result = run_job(
        tmp_path / "a.zarr",
        tmp_path / "b.zarr",
        tmp_path / "c.zarr",
        client=two_process_client,
        memory="8MiB",
        splits=6,
        progress=False,
    )
    s = result.summary
    assert (s["splits"], s["partial_tasks_computed"], s["tiles_computed"]) == (6, 6, 1)
    # Each part written once (as the plan counts it) and read back once.
    assert s["scratch_bytes"] == s["scratch_bytes_read"] == 6 * 40 * 30 * 4
    assert s["scratch_bytes"] == result.plan.scratch_bytes
    assert s["bytes_read"] == result.plan.bytes_read  # the parts read each panel once
    assert len({r.worker for r in result.results if r.key != "tile-0-0"}) == 2
    assert_gemm_close(zarr.open_array(str(tmp_path / "c.zarr"))[...], a, b, accumulated_in="f4")


@pytest.mark.parametrize(
    "case",
    [
        {"dtype": "int8", "accumulated_in": None},
        {"dtype": "complex64", "accumulated_in": "complex64", "alpha": 0.5 - 2j, "beta": 3.0},
        {"dtype": "float16", "accumulated_in": "float32", "rounded_to": "float16"},
        {"dtype": "float64", "accumulated_in": "float64", "transpose_a": True},
    ],
    ids=lambda case: case["dtype"],
)
def test_forced_splits_in_process_for_every_kind_of_product(tmp_path, case):
    """The epilogue (scales, addend, output dtype) runs once, in the reduction."""
    case = dict(case)
    dtype, accumulated_in = case.pop("dtype"), case.pop("accumulated_in")
    rounded_to = case.pop("rounded_to", None)
    rng = np.random.default_rng(11)
    m, k, n = 19, 1009, 23
    a = random_values(rng, (k, m) if case.get("transpose_a") else (m, k), dtype)
    b = random_values(rng, (k, n), dtype)
    write_zarr(tmp_path / "a.zarr", a, (50, 19) if case.get("transpose_a") else (19, 50))
    write_zarr(tmp_path / "b.zarr", b, (50, 23))
    addend = None
    if "beta" in case:
        addend = random_values(rng, (m, n), dtype)
        write_zarr(tmp_path / "d.zarr", addend, (19, 23))
        case["addend"] = tmp_path / "d.zarr"
    result = run_job(
        tmp_path / "a.zarr",
        tmp_path / "b.zarr",
        tmp_path / "c.zarr",
        client="sync",
        memory="4MiB",
        tk=100,
        splits=4,
        progress=False,
        **case,
    )
    assert result.plan.splits == 4 and len(result.plan.panels) == 11
    assert result.summary["partial_tasks_computed"] == 4
    case.pop("addend", None)
    got = zarr.open_array(str(tmp_path / "c.zarr"))[...]
    assert_gemm_close(
        got, a, b, accumulated_in=accumulated_in, rounded_to=rounded_to, addend=addend, **case
    )


#: In-process jobs of 30x1000 @ 1000x20 in 100-deep panels (10 panels, one tile).
SMALL_SPLIT_JOB = {"client": "sync", "memory": "1MiB", "tk": 100, "progress": False}


def stopped_between_parts(
    folder: Path, seed: int, chunk: str, splits: int
) -> tuple[np.ndarray, np.ndarray, Path]:
    """Run a split job that stops at a damaged chunk of B (then mended); return A, B and C."""
    rng = np.random.default_rng(seed)
    a, b = random_matrix(rng, (30, 1000), "float32"), random_matrix(rng, (1000, 20), "float32")
    write_zarr(folder / "a.zarr", a, (30, 100))
    write_zarr(folder / "b.zarr", b, (100, 20))
    c = folder / "c.zarr"
    broken = break_chunk(folder / "b.zarr", chunk)
    with pytest.raises(Exception, match=f"{chunk}|decode|chunk"):
        run_job(folder / "a.zarr", folder / "b.zarr", c, splits=splits, **SMALL_SPLIT_JOB)
    restore_chunk(broken)
    assert zarr.open_array(str(c)).attrs["outofcore"]["complete"] is False
    return a, b, c


def test_read_error_between_parts_then_the_rerun_keeps_the_finished_parts(
    tmp_path, outofcore_settings
):
    outofcore_settings(read_retries=0)
    a, b, c = stopped_between_parts(tmp_path, 5, "7/0", 5)  # rows 700:800: the fourth part
    assert len(part_records(c)) == 3

    rerun = run_job(tmp_path / "a.zarr", tmp_path / "b.zarr", c, splits=5, **SMALL_SPLIT_JOB)
    assert rerun.summary["partial_tasks_computed"] == 2  # parts 3 and 4 only
    assert_gemm_close(zarr.open_array(str(c))[...], a, b, accumulated_in="float32")
    assert not part_records(c)


def test_a_resume_with_another_split_never_takes_the_old_parts(tmp_path, outofcore_settings):
    outofcore_settings(read_retries=0)
    a, b, c = stopped_between_parts(tmp_path, 6, "9/0", 5)
    assert len(part_records(c)) == 4

    rerun = run_job(tmp_path / "a.zarr", tmp_path / "b.zarr", c, splits=2, **SMALL_SPLIT_JOB)
    assert rerun.summary["partial_tasks_computed"] == 2
    assert_gemm_close(zarr.open_array(str(c))[...], a, b, accumulated_in="float32")


def _wrong_shape(path: Path) -> None:
    with path.open("wb") as file:
        np.save(file, np.zeros((30, 21), dtype=np.float32))


def _wrong_dtype(path: Path) -> None:
    with path.open("wb") as file:
        np.save(file, np.zeros((30, 20), dtype=np.float64))


def _cut_short(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 7])  # a write that stopped part-way


def _flipped_in_place(path: Path) -> None:
    """Bytes of the sum flipped, same size, the file's times restored."""
    data = bytearray(path.read_bytes())
    data[-8:] = bytes(b ^ 0x5A for b in data[-8:])  # the last value: still a float32
    overwrite_in_place(path, bytes(data))


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (_wrong_shape, "does not match the checksum"),
        (_wrong_dtype, "does not match the checksum"),
        (_cut_short, "does not match the checksum"),
        (_flipped_in_place, "does not match the checksum"),
        (Path.unlink, "is missing although its part is recorded"),
    ],
)
def test_a_damaged_partial_tile_is_computed_again(
    tmp_path, outofcore_settings, caplog, damage, why
):
    """A part whose kept sum is not what its record's checksum says is never added into
    the output: the reduction names it, computes it again and the result is right."""
    outofcore_settings(read_retries=0)
    a, b, c = stopped_between_parts(tmp_path, 7, "9/0", 5)
    block = next((c / JOURNAL_DIR / PARTIALS_DIR).glob("*/tile-0-0-k1of5/rows-0.npy"))
    damage(block)
    with caplog.at_level(logging.WARNING, logger="outofcore"):
        rerun = run_job(tmp_path / "a.zarr", tmp_path / "b.zarr", c, splits=5, **SMALL_SPLIT_JOB)
    named = [r.getMessage() for r in caplog.records if "tile-0-0-k1of5" in r.getMessage()]
    assert named and "computed again" in named[0] and why in named[0], named
    assert rerun.summary["damaged"] == ["tile-0-0-k1of5"]
    assert rerun.summary["partial_tasks_computed"] == 1  # the part the first run never did
    assert_gemm_close(zarr.open_array(str(c))[...], a, b, accumulated_in="float32")
    assert zarr.open_array(str(c)).attrs["outofcore"]["complete"] is True


def test_a_damaged_part_record_is_computed_again(tmp_path, outofcore_settings, caplog):
    """A part's record edited (its checksum no longer matches) is not trusted: the rerun
    drops it when it resumes, names it and computes the part again."""
    outofcore_settings(read_retries=0)
    a, b, c = stopped_between_parts(tmp_path, 7, "9/0", 5)
    record = next((c / JOURNAL_DIR / PARTIALS_DIR).glob("*/tile-0-0-k2of5.json"))
    edited = json.loads(record.read_text())
    edited["panels"] = [0, 10]  # the whole k as this part's
    record.write_text(json.dumps(edited))
    with caplog.at_level(logging.WARNING, logger="outofcore"):
        rerun = run_job(tmp_path / "a.zarr", tmp_path / "b.zarr", c, splits=5, **SMALL_SPLIT_JOB)
    assert any("part tile-0-0-k2of5" in r.getMessage() for r in caplog.records)
    assert rerun.summary["damaged"] == ["tile-0-0-k2of5"]
    assert rerun.summary["partial_tasks_computed"] == 2  # it and the part never done
    assert_gemm_close(zarr.open_array(str(c))[...], a, b, accumulated_in="float32")


def test_kept_blocks_are_npy_files_read_back_without_a_copy():
    """splitk.npy_bytes writes what np.load reads (C order, any strides); npy_view reads
    them, and np.save's own files, as read-only views of the bytes."""
    from outofcore.jobs.splitk import npy_bytes, npy_view  # noqa: PLC0415

    rng = np.random.default_rng(30)
    tile = np.asfortranarray(random_values(rng, (37, 23), np.dtype("complex64")))
    for rows in (tile, tile[5:19], tile[:, 3:]):
        data = npy_bytes(rows)
        assert (np.load(io.BytesIO(data.tobytes())) == rows).all()
        stored = np.frombuffer(data.tobytes(), np.uint8)  # as a store hands bytes back
        view = npy_view(stored)
        assert view.shape == rows.shape and (view == rows).all()
        assert not view.flags.writeable and np.shares_memory(view, stored)
    saved = io.BytesIO()
    np.save(saved, tile[5:19].real)
    assert (npy_view(np.frombuffer(saved.getvalue(), np.uint8)) == tile[5:19].real).all()
    assert npy_view(stored[:-1]) is None and npy_view(np.frombuffer(b"PAR1", np.uint8)) is None


def large_k_inputs(folder: Path) -> tuple[str, str, str]:
    """A 60x120000 and B 120000x50 in chunks of 100 along k: a long job for 1 output tile."""
    a, b, c = (str(folder / name) for name in ("a.zarr", "b.zarr", "c.zarr"))
    random_array(a, (60, 120_000), (60, 100), seed=1)
    random_array(b, (120_000, 50), (100, 50), seed=2)
    return a, b, c


def test_client_killed_mid_split_job_then_rerun_skips_the_finished_parts(tmp_path):
    a, b, c = large_k_inputs(tmp_path)
    command = [a, b, "-o", c, "--memory", "1MiB", "--scheduler", "sync", "--splits", "40"]
    job = subprocess.Popen(
        [sys.executable, "-m", "outofcore.cli", "matmul", *command, "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "OUTOFCORE_LEASE_TIMEOUT": "1"},
    )
    try:
        wait_for(lambda: len(part_records(Path(c))) >= 4, 120, "4 parts journaled")
        assert job.poll() is None, "the job finished before the kill; make it longer"
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    done = len(part_records(Path(c)))
    assert done < 40
    status = cli("status", c, "--json")
    assert json.loads(status.stdout)["partials_done"] == done
    assert f"{done} part(s) of split tiles recorded" in cli("status", c).stdout

    rerun = cli("matmul", *command, "--json")
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout)
    assert summary["partial_tasks_computed"] == 40 - done
    assert summary["tiles_computed"] == 1
    a_np, b_np = zarr.open_array(a)[...], zarr.open_array(b)[...]
    assert_gemm_close(zarr.open_array(c)[...], a_np, b_np, accumulated_in="float32")
    checked = cli("verify", a, b, c, "--json")
    assert checked.returncode == 0 and json.loads(checked.stdout)["passed"] is True


def test_a_worker_killed_mid_split_job_costs_only_its_parts(tmp_path, own_local_cluster):
    a, b, c = large_k_inputs(tmp_path)
    # A cluster of its own: a worker of it is killed.
    with Client(own_local_cluster(n_workers=2)) as dask_client:
        outcome: dict = {}

        def job() -> None:
            try:
                outcome["result"] = run_job(
                    a, b, c, client=dask_client, memory="1MiB", splits=40, progress=False
                )
            except Exception as error:  # noqa: BLE001 (reported by the assertion below)
                outcome["error"] = error

        thread = threading.Thread(target=job)
        thread.start()
        wait_for(lambda: len(part_records(Path(c))) >= 4, 120, "4 parts journaled")
        pids = dask_client.run(os.getpid)
        busy = sorted(address for address, keys in dask_client.processing().items() if keys)
        os.kill(pids[busy[0] if busy else sorted(pids)[0]], signal.SIGKILL)
        done_at_kill = len(part_records(Path(c)))
        thread.join(timeout=300)
    assert "error" not in outcome, outcome.get("error")
    summary = outcome["result"].summary
    assert done_at_kill < 40
    assert summary["tiles_computed"] == 1
    # Finished parts stay recorded: at most the ones in flight are computed twice.
    assert summary["partial_tasks_computed"] <= 40 + 2
    a_np, b_np = zarr.open_array(a)[...], zarr.open_array(b)[...]
    assert_gemm_close(zarr.open_array(c)[...], a_np, b_np, accumulated_in="float32")

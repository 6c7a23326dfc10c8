"""The layout of a created output: sharded when large, plain on request, zarr format 2.

The shard threshold (``outofcore.planner.tiling.SHARD_OVER_CHUNKS``, 10⁵ chunks) and the
largest output chunk are lowered here so a small job counts as large.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import zarr

import outofcore
from outofcore.api import ATTRIBUTE, job_status, run_job
from outofcore.frontends.verify import verify
from outofcore.jobs.planning import OutputLayoutWarning
from outofcore.journal.resume import ResumeError
from outofcore.operands.reading import ReadError
from outofcore.planner import memory, tiling
from tests.helpers import break_chunk, cli, random_matrix, restore_chunk, write_zarr

#: 24 KiB makes tiles of about 20x10 on the 10x10 chunks below.
MEMORY = 24 * 1024


@pytest.fixture
def ragged(tmp_path):
    """A (97x61) and B (61x53) in 10x10 chunks: odd shapes, ragged edge chunks."""
    rng = np.random.default_rng(11)
    a = random_matrix(rng, (97, 61), "float32")
    b = random_matrix(rng, (61, 53), "float32")
    write_zarr(tmp_path / "a.zarr", a, (10, 10))
    write_zarr(tmp_path / "b.zarr", b, (10, 10))
    return tmp_path, a, b


@pytest.fixture
def large_is_small(monkeypatch):
    """More than 10 output chunks count as a large output; output chunks at most 5x5."""
    monkeypatch.setattr(tiling, "SHARD_OVER_CHUNKS", 10)
    monkeypatch.setattr(memory, "MAX_OUTPUT_CHUNK", 5)


def paths(folder: Path, out: str = "c.zarr") -> tuple[str, str, str]:
    return str(folder / "a.zarr"), str(folder / "b.zarr"), str(folder / out)


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ b.astype(np.float64)


def shard_files(c: Path) -> list[Path]:
    return [p for p in (c / "c").rglob("*") if p.is_file()]


def test_a_large_output_is_sharded_one_shard_per_tile_on_a_local_cluster(ragged, large_is_small):
    folder, a, b = ragged
    result = run_job(*paths(folder), memory=MEMORY, workers=2, progress=False)
    c = result.output
    tm, tn = result.plan.tm, result.plan.tn
    assert c.metadata.zarr_format == 3
    assert c.shards == (tm, tn) and c.chunks == result.plan.out_chunks
    assert c.chunks != c.shards  # a shard groups several chunks
    assert tm % c.chunks[0] == 0 and tn % c.chunks[1] == 0
    assert 97 % tm and 53 % tn  # the last shards overhang the array's edges
    # One object per tile, each written whole by the task of its tile.
    assert len(shard_files(folder / "c.zarr")) == len(result.plan.tasks)
    np.testing.assert_allclose(c[...], reference(a, b), rtol=1e-5, atol=1e-4)
    assert verify(*paths(folder)).passed
    state = job_status(folder / "c.zarr")
    assert state["complete"] and state["tiles_done"] == len(result.plan.tasks)
    record = c.attrs[ATTRIBUTE]
    assert record["plan"]["out_shards"] == [tm, tn]


def test_shards_false_writes_plain_chunks(ragged, large_is_small):
    folder, a, b = ragged
    result = run_job(*paths(folder), memory=MEMORY, shards=False, client="sync", progress=False)
    assert result.output.shards is None
    chunks = result.output.chunks
    assert result.plan.out_chunk_count == math.ceil(97 / chunks[0]) * math.ceil(53 / chunks[1])
    np.testing.assert_allclose(result.output[...], reference(a, b), rtol=1e-5, atol=1e-4)


def test_an_output_under_the_threshold_is_not_sharded(ragged):
    folder, a, b = ragged
    result = run_job(*paths(folder), memory=MEMORY, client="sync", progress=False)
    assert result.output.shards is None and result.plan.out_shards is None
    np.testing.assert_allclose(result.output[...], reference(a, b), rtol=1e-5, atol=1e-4)


def test_zarr_format_2_output_is_readable_by_format_2_readers(ragged, large_is_small):
    folder, a, b = ragged
    with pytest.warns(OutputLayoutWarning, match=r"more than 10; zarr format 2 has no shards"):
        result = run_job(
            *paths(folder),
            memory=MEMORY,
            zarr_format=2,
            output_codec="zstd",
            client="sync",
            progress=False,
        )
    assert (folder / "c.zarr" / ".zarray").is_file() and not (
        folder / "c.zarr" / "zarr.json"
    ).exists()
    c = zarr.open_array(str(folder / "c.zarr"), mode="r", zarr_format=2)
    assert c.metadata.zarr_format == 2 and c.shards is None
    assert json.loads((folder / "c.zarr" / ".zarray").read_text())["compressor"]["id"] == "zstd"
    np.testing.assert_allclose(c[...], reference(a, b), rtol=1e-5, atol=1e-4)
    assert c.attrs[ATTRIBUTE]["complete"] is True
    assert verify(*paths(folder)).passed
    assert job_status(folder / "c.zarr")["state"] == "complete"
    assert result.summary["tiles_computed"] == len(result.plan.tasks)


def test_a_resume_never_mixes_layouts(ragged, large_is_small, outofcore_settings):
    folder, a, b = ragged
    outofcore_settings(read_retries=0)
    broken = break_chunk(folder / "b.zarr", "3/4")  # a chunk late in k: some tiles finish first
    with pytest.raises(ReadError, match=r"chunk \(3, 4\)"):
        run_job(*paths(folder), memory=MEMORY, client="sync", progress=False)
    state = job_status(folder / "c.zarr")
    assert 0 < state["tiles_done"] < state["tiles_total"]
    sharded = zarr.open_array(str(folder / "c.zarr"), mode="r").shards
    assert sharded is not None
    with pytest.raises(ResumeError, match=r"output zarr_format was 3, now 2"):
        run_job(*paths(folder), memory=MEMORY, zarr_format=2, client="sync", progress=False)
    with pytest.raises(ResumeError, match=r"output shards was True, now False"):
        run_job(*paths(folder), memory=MEMORY, shards=False, client="sync", progress=False)
    restore_chunk(broken)
    result = run_job(*paths(folder), memory=MEMORY, client="sync", progress=False)
    assert result.summary["tiles_skipped"] == state["tiles_done"]
    assert result.output.shards == sharded
    np.testing.assert_allclose(result.output[...], reference(a, b), rtol=1e-5, atol=1e-4)


def test_cli_zarr_format_and_no_shards(ragged):
    folder, a, b = ragged
    a_path, b_path, c_path = paths(folder)
    done = cli("matmul", a_path, b_path, "-o", c_path, "--memory", "24KiB", "--scheduler", "sync",
               "--zarr-format", "2", "--no-shards", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    c = zarr.open_array(c_path, mode="r", zarr_format=2)
    np.testing.assert_allclose(c[...], reference(a, b), rtol=1e-5, atol=1e-4)
    checked = cli("verify", a_path, b_path, c_path)
    assert checked.returncode == 0 and "PASSED" in checked.stdout
    status = cli("status", c_path, "--json")
    assert json.loads(status.stdout)["state"] == "complete"
    bad = cli("matmul", a_path, b_path, "-o", str(folder / "d.zarr"), "--zarr-format", "4")
    assert bad.returncode == 2 and "--zarr-format: invalid choice: 4" in bad.stderr


def test_the_api_refuses_an_unknown_zarr_format(ragged):
    folder, _, _ = ragged
    with pytest.raises(outofcore.errors.InputError, match=r"zarr_format = 4: choose 2 or 3"):
        run_job(*paths(folder), zarr_format=4, client="sync")
    assert not (folder / "c.zarr").exists()

"""A tile's record keeps the digests of the objects it wrote: hashed by the write itself
where outofcore writes chunk files (no reading back), read back where zarr wrote them.

Either way the record must hold what the store holds: each object's size and SHA-256
equal those of its file, so that a resume can tell a changed object from a sound one.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import zarr

from outofcore.api import run_job
from outofcore.jobs import recorded
from outofcore.jobs.recorded import WRITTEN
from tests.helpers import assert_product_close, random_matrix, tile_records, write_zarr


@pytest.fixture
def read_back(monkeypatch) -> list[str]:
    """The keys :func:`recorded.object_digests` is asked to read back, in order."""
    asked: list[str] = []
    original = recorded.object_digests

    def counting(c, keys):
        keys = list(keys)
        asked.extend(keys)
        return original(c, keys)

    monkeypatch.setattr(recorded, "object_digests", counting)
    return asked


def kept_digests_match_files(c: Path) -> int:
    """Assert every record's digests are those of the files now; return how many."""
    count = 0
    for record in tile_records(c):
        for key, digest in json.loads(record.read_text())[WRITTEN].items():
            data = (c / key).read_bytes()
            assert digest == [len(data), hashlib.sha256(data).hexdigest()], key
            count += 1
    return count


@pytest.mark.parametrize("zeros", [False, True], ids=["random", "all-zero output"])
def test_chunk_files_are_hashed_as_they_are_written(tmp_path, read_back, zeros):
    """A plain local output: every chunk's digest comes from its write, none is read
    back, and each equals its file's (an all-zero chunk is a file too)."""
    rng = np.random.default_rng(11)
    a = random_matrix(rng, (70, 45), "float32") * (0 if zeros else 1)
    b = random_matrix(rng, (45, 33), "float32")
    write_zarr(tmp_path / "a.zarr", a, (10, 9))
    write_zarr(tmp_path / "b.zarr", b, (9, 10))
    c = tmp_path / "c.zarr"
    result = run_job(tmp_path / "a.zarr", tmp_path / "b.zarr", c, client="sync",
                     progress=False, memory=24 * 1024)  # fmt: skip
    assert result.plan.splits == 1 and len(result.plan.tasks) > 1
    assert read_back == []
    out = zarr.open_array(str(c))
    files = [p for p in (c / "c").rglob("*") if p.is_file()]
    assert kept_digests_match_files(c) == len(files) == out.nchunks > 1
    assert_product_close(zarr.open_array(str(c))[...], a, b)


def test_a_symmetric_tiles_mirror_is_hashed_as_written(tmp_path, read_back):
    """Gram: a tile off the diagonal writes its mirror; both are in its record, from the
    writes, and match the files."""
    x = random_matrix(np.random.default_rng(12), (40, 30), "float64")
    write_zarr(tmp_path / "x.zarr", x, (10, 10))
    c = tmp_path / "g.zarr"
    run_job(tmp_path / "x.zarr", tmp_path / "x.zarr", c, transpose_a=True, tile=(10, 10),
            client="sync", progress=False)  # fmt: skip
    assert read_back == []
    files = [p for p in (c / "c").rglob("*") if p.is_file()]
    assert kept_digests_match_files(c) == len(files) == 9
    g = zarr.open_array(str(c))[...]
    np.testing.assert_allclose(g, x.T @ x, rtol=1e-12)


def test_objects_zarr_wrote_are_read_back(tmp_path, read_back, monkeypatch):
    """A sharded output (zarr writes its shards): the record's digests are read back from
    the store, one read per object of each tile, and match the files."""
    from outofcore.planner import memory, tiling  # noqa: PLC0415

    monkeypatch.setattr(tiling, "SHARD_OVER_CHUNKS", 10)
    monkeypatch.setattr(memory, "MAX_OUTPUT_CHUNK", 5)
    rng = np.random.default_rng(13)
    a, b = random_matrix(rng, (57, 41), "float32"), random_matrix(rng, (41, 33), "float32")
    write_zarr(tmp_path / "a.zarr", a, (10, 10))
    write_zarr(tmp_path / "b.zarr", b, (10, 10))
    c = tmp_path / "c.zarr"
    result = run_job(tmp_path / "a.zarr", tmp_path / "b.zarr", c, client="sync",
                     progress=False)  # fmt: skip
    assert result.output.shards is not None
    assert sorted(read_back) == sorted(
        key for record in tile_records(c) for key in json.loads(record.read_text())[WRITTEN]
    )
    assert kept_digests_match_files(c) == len(read_back) > 0
    assert_product_close(result.output[...], a, b)

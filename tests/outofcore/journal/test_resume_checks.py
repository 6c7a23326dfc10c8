"""Resume checks what it skips (issue 42, item 3) and the journal's documents are bounded
and typed (item 4's journal part); resume after random kills against an uninterrupted
run (item 7's resume part).

Real jobs on real files: ``outofcore matmul`` processes killed with SIGKILL mid-job,
or jobs stopped by an undecodable input chunk (tests.helpers.break_chunk), then output
chunks deleted, swapped or rewritten, and journal documents resealed with hostile
fields (their checksum recomputed as outofcore computes it), then rerun.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from outofcore.api import ATTRIBUTE, job_status, run_job
from outofcore.errors import OutOfCoreError
from outofcore.jobs.recorded import WRITTEN
from outofcore.journal.records import JOURNAL_DIR, document_digest, seal
from outofcore.operands.reading import ReadError
from tests.helpers import (
    assert_product_close,
    break_chunk,
    cli,
    random_matrix,
    restore_chunk,
    tile_records,
    wait_for,
    write_zarr,
)

# -- helpers ------------------------------------------------------------------------


def matmul_command(folder: Path, out: str = "c.zarr") -> list[str]:
    a, b, c = (str(folder / name) for name in ("a.zarr", "b.zarr", out))
    return ["matmul", a, b, "-o", c, "--memory", "96KiB", "--scheduler", "sync", "--json"]


def long_inputs(folder: Path, rows: int = 1000, k: int = 1200, cols: int = 600) -> np.ndarray:
    """A (rows x k) and B (k x cols) float32 in 50² chunks; at 96 KiB, 50² tiles (240 for
    the default sizes, about 5 s). Returns the float64 reference product."""
    rng = np.random.default_rng(rows + k + cols)
    a, b = random_matrix(rng, (rows, k), "float32"), random_matrix(rng, (k, cols), "float32")
    write_zarr(folder / "a.zarr", a, (50, 50))
    write_zarr(folder / "b.zarr", b, (50, 50))
    return a.astype(np.float64) @ b.astype(np.float64)


def killed(command: list[str], c: Path, records: int) -> int:
    """Run ``outofcore`` with ``command``; SIGKILL it once ``records`` tiles are recorded.
    Returns the tiles recorded when it died."""
    job = subprocess.Popen(
        [sys.executable, "-m", "outofcore.cli", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "OUTOFCORE_LEASE_TIMEOUT": "2"},
    )
    try:
        wait_for(
            lambda: len(tile_records(c)) >= records or job.poll() is not None,
            120,
            f"{records} tiles recorded",
        )
        assert job.poll() is None, "the job finished before the kill; make it longer"
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    return len(tile_records(c))


def chunk_files(c: Path, record: Path) -> list[Path]:
    """The files of the stored objects (shards, else chunks) of the tile ``record`` names,
    from its rows and columns and the output's grid (a 2-D output, default key encoding)."""
    fields = json.loads(record.read_text())
    array = zarr.open_array(str(c), mode="r")
    grid = array.shards or array.chunks
    (r0, r1), (c0, c1) = fields["rows"], fields["cols"]
    return [
        c / "c" / str(i) / str(j)
        for i in range(r0 // grid[0], (r1 - 1) // grid[0] + 1)
        for j in range(c0 // grid[1], (c1 - 1) // grid[1] + 1)
    ]


def tile_name(record: Path) -> str:
    return record.name.removesuffix(".json")


def swap(first: Path, second: Path) -> None:
    data = first.read_bytes()
    first.write_bytes(second.read_bytes())
    second.write_bytes(data)


def reseal(path: Path, edit) -> None:
    """Edit the journal document at ``path`` and recompute its checksum as outofcore does
    (plain SHA-256 of the canonical rest: ``outofcore.journal.records.document_digest``)."""
    document = json.loads(path.read_text())
    document.pop("checksum", None)
    edit(document)
    path.write_text(json.dumps(seal(document)))


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def files_outside(c: Path) -> dict[str, bytes]:
    """Every file under ``c`` but what outofcore writes there (its metadata, the chunk
    files of the output's grid, its journal's documents), with its bytes."""
    array = zarr.open_array(str(c), mode="r")
    grid = [
        -(-extent // size)
        for extent, size in zip(array.shape, array.shards or array.chunks, strict=True)
    ]
    chunks = {f"c/{i}/{j}" for i in range(grid[0]) for j in range(grid[1])}
    journal = (f"{JOURNAL_DIR}/job.json", f"{JOURNAL_DIR}/lease.json")
    found = {}
    for path in c.rglob("*"):
        name = path.relative_to(c).as_posix()
        parts = name.split("/")
        kind = (parts[1], len(parts)) if parts[0] == JOURNAL_DIR and len(parts) > 1 else None
        ours = name == "zarr.json" or name in chunks or name in journal
        ours = ours or kind in (("inputs", 3), ("tiles", 4))
        if path.is_file() and not ours:
            found[name] = path.read_bytes()
    return found


@pytest.fixture
def stopped(tmp_path, outofcore_settings):
    """An 80x60 @ 60x50 float32 job (10² chunks, 20x10 tiles at 24 KiB: 20 tiles) stopped
    by an undecodable chunk of B's last column after its first tiles, then mended."""
    outofcore_settings(read_retries=0)
    rng = np.random.default_rng(4)
    a, b = random_matrix(rng, (80, 60), "float32"), random_matrix(rng, (60, 50), "float32")
    write_zarr(tmp_path / "a.zarr", a, (10, 10))
    write_zarr(tmp_path / "b.zarr", b, (10, 10))
    broken = break_chunk(tmp_path / "b.zarr", "5/4")
    with pytest.raises(ReadError):
        run(tmp_path)
    restore_chunk(broken)
    assert 0 < len(tile_records(tmp_path / "c.zarr")) < 20
    return tmp_path, a, b


def run(folder: Path, **options):
    options = {"memory": 24 * 1024, "client": "sync", "progress": False, **options}
    return run_job(folder / "a.zarr", folder / "b.zarr", folder / "c.zarr", **options)


# -- resume checks what it skips ----------------------------------------------------


def test_a_deleted_and_swapped_chunk_of_recorded_tiles_is_computed_again(tmp_path):
    """Issue 42: kill a job, delete one output chunk and swap two others (of recorded
    tiles), rerun: it was exit 0, complete, 49152 NaN. Now the three tiles are named and
    computed again, and C is numpy's product."""
    reference = long_inputs(tmp_path)
    command, c = matmul_command(tmp_path), tmp_path / "c.zarr"
    done = killed(command, c, 30)
    records = tile_records(c)
    gone, first, second = records[0], records[len(records) // 2], records[-1]
    chunk_files(c, gone)[0].unlink()
    swap(chunk_files(c, first)[0], chunk_files(c, second)[0])

    rerun = cli(*command)
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout)
    names = {tile_name(r) for r in (gone, first, second)}
    assert set(summary["damaged"]) == names
    assert summary["tiles_skipped"] == done - 3
    assert summary["tiles_computed"] == summary["tiles"] - done + 3
    for name in names:  # one warning a tile, saying why
        said = [line for line in rerun.stderr.splitlines() if f"tile {name} " in line]
        assert len(said) == 1 and "computed again" in said[0], rerun.stderr
    assert "is missing" in next(
        line for line in rerun.stderr.splitlines() if tile_name(gone) in line
    )
    got = zarr.open_array(str(c))[...]
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-3)
    assert zarr.open_array(str(c)).attrs[ATTRIBUTE]["complete"] is True


def test_every_tile_record_keeps_what_its_tile_wrote(stopped):
    """A record names each stored object of its tile with its size and SHA-256, as read
    back from the store."""
    import hashlib  # noqa: PLC0415

    folder, _, _ = stopped
    c = folder / "c.zarr"
    for record in tile_records(c):
        kept = json.loads(record.read_text())[WRITTEN]
        files = chunk_files(c, record)
        assert sorted(kept) == sorted(str(p.relative_to(c)) for p in files)
        for path in files:
            data = path.read_bytes()
            assert kept[str(path.relative_to(c))] == [len(data), hashlib.sha256(data).hexdigest()]


@pytest.mark.parametrize("damage", ["truncated", "rewritten", "deleted", "old record"])
def test_a_recorded_tile_whose_output_changed_is_computed_again(stopped, damage, caplog):
    """Same-size bytes, a cut, a deletion, or a record without digests (an older
    version's: conservatively not trusted): the tile is computed again, named."""
    folder, a, b = stopped
    c = folder / "c.zarr"
    record = tile_records(c)[0]
    chunk = chunk_files(c, record)[0]
    if damage == "truncated":
        chunk.write_bytes(chunk.read_bytes()[:-4])
    elif damage == "rewritten":
        chunk.write_bytes(np.zeros(25, np.float32).tobytes() + chunk.read_bytes()[100:])
    elif damage == "deleted":
        chunk.unlink()
    else:
        reseal(record, lambda d: d.pop(WRITTEN))
    with caplog.at_level("WARNING", logger="outofcore"):
        result = run(folder)
    assert result.summary["damaged"] == [tile_name(record)]
    said = [
        r.getMessage() for r in caplog.records if f"tile {tile_name(record)} " in r.getMessage()
    ]
    assert len(said) == 1 and "computed again" in said[0]
    if damage == "old record":
        assert "keeps no digests" in said[0]
    assert_product_close(zarr.open_array(str(c))[...], a, b)


def test_files_of_a_user_inside_the_output_are_never_changed(tmp_path):
    """A user's files inside the output, beside the chunks and the journal: a rerun
    resumes (or, for one beside zarr.json, refuses with exit 2), and every byte outside
    what outofcore wrote is as it was."""
    reference = long_inputs(tmp_path, 600, 400, 400)
    command, c = matmul_command(tmp_path), tmp_path / "c.zarr"
    killed(command, c, 10)
    mine = {
        "c/notes.txt": b"the user's notes",
        "c/0/99": b"not a chunk: outside the grid",
        "c/999/0": b"nor this",
        f"{JOURNAL_DIR}/mine.txt": b"the user's, in the journal",
        f"{JOURNAL_DIR}/tiles/mine.json": b'{"tile": "tile-0-0"}',
    }
    for name, data in mine.items():
        (c / name).parent.mkdir(parents=True, exist_ok=True)
        (c / name).write_bytes(data)
    before = files_outside(c)
    assert before == mine

    (c / "notes.txt").write_bytes(b"beside zarr.json")
    refused = cli(*command)
    assert refused.returncode == 2 and "notes.txt" in refused.stderr, refused.stderr
    assert files_outside(c) == {**before, "notes.txt": b"beside zarr.json"}
    (c / "notes.txt").unlink()

    rerun = cli(*command)
    assert rerun.returncode == 0, rerun.stderr
    np.testing.assert_allclose(zarr.open_array(str(c))[...], reference, rtol=1e-4, atol=1e-3)
    assert files_outside(c) == before


def _stop_damage_rerun(out: Path, broken: tuple[Path, str], **options):
    """Run the job of ``options`` until the input chunk ``broken`` stops it; delete the
    last stored object its first recorded tile with several keeps (a symmetric tile's
    mirror); rerun. Returns the rerun and the tile whose object went."""
    options = {"client": "sync", "progress": False, "memory": 24 * 1024, **options}
    inputs = (options.pop("a"), options.pop("b"))
    damaged = break_chunk(*broken)
    with pytest.raises(ReadError):
        run_job(*inputs, out, **options)
    restore_chunk(damaged)
    records = tile_records(out)
    kept = {r: json.loads(r.read_text())[WRITTEN] for r in records}
    assert records and all(kept.values())
    record = max(records, key=lambda r: len(kept[r]))  # the first with the most objects
    (out / list(kept[record])[-1]).unlink()
    return run_job(*inputs, out, **options), tile_name(record)


def test_a_symmetric_tiles_mirror_chunk_is_checked(tmp_path):
    """Gram: a tile off the diagonal writes its mirror too; the mirror's chunk deleted,
    the tile is computed again and G is right and exactly symmetric."""
    x = random_matrix(np.random.default_rng(3), (30, 40), "float64")
    write_zarr(tmp_path / "x.zarr", x, (10, 10))
    options = {"a": tmp_path / "x.zarr", "b": tmp_path / "x.zarr", "transpose_a": True}
    result, tile = _stop_damage_rerun(
        tmp_path / "g.zarr", (tmp_path / "x.zarr", "0/3"), tile=(10, 10), **options
    )
    assert result.summary["damaged"] == [tile] and tile.split("-")[1] != tile.split("-")[2]
    g = zarr.open_array(str(tmp_path / "g.zarr"))[...]
    np.testing.assert_allclose(g, x.T @ x, rtol=1e-12)
    assert np.array_equal(g, g.T)


def test_a_stacked_products_chunk_is_checked(tmp_path):
    """A stack of three products (3-D output): a recorded entry's chunk deleted."""
    rng = np.random.default_rng(5)
    a, b = random_matrix(rng, (3, 20, 30), "float64"), random_matrix(rng, (3, 30, 20), "float64")
    zarr.create_array(tmp_path / "a.zarr", data=a, chunks=(1, 10, 10))
    zarr.create_array(tmp_path / "b.zarr", data=b, chunks=(1, 10, 10))
    options = {"a": tmp_path / "a.zarr", "b": tmp_path / "b.zarr", "tile": (10, 10)}
    result, tile = _stop_damage_rerun(
        tmp_path / "c.zarr", (tmp_path / "b.zarr", "2/0/1"), **options
    )
    assert result.summary["damaged"] == [tile]
    np.testing.assert_allclose(zarr.open_array(str(tmp_path / "c.zarr"))[...], a @ b, rtol=1e-12)


@pytest.fixture
def small_shards(monkeypatch):
    """More than 10 output chunks count as a large output (sharded), chunks at most 5x5."""
    from outofcore.planner import memory, tiling  # noqa: PLC0415

    monkeypatch.setattr(tiling, "SHARD_OVER_CHUNKS", 10)
    monkeypatch.setattr(memory, "MAX_OUTPUT_CHUNK", 5)


def test_a_sharded_outputs_shard_is_checked(tmp_path, small_shards):
    """A sharded output (one shard a tile): a recorded tile's shard deleted."""
    rng = np.random.default_rng(6)
    a, b = random_matrix(rng, (97, 61), "float32"), random_matrix(rng, (61, 53), "float32")
    write_zarr(tmp_path / "a.zarr", a, (10, 10))
    write_zarr(tmp_path / "b.zarr", b, (10, 10))
    options = {"a": tmp_path / "a.zarr", "b": tmp_path / "b.zarr"}
    result, tile = _stop_damage_rerun(tmp_path / "c.zarr", (tmp_path / "b.zarr", "6/5"), **options)
    assert result.output.shards is not None and result.output.shards != result.output.chunks
    assert result.summary["damaged"] == [tile]
    assert_product_close(result.output[...], a, b)


def test_a_split_k_tile_record_keeps_what_its_reduction_wrote(tmp_path):
    """Split-k: a tile is written (and recorded) by its reduction, with its digests."""
    import hashlib  # noqa: PLC0415

    rng = np.random.default_rng(8)
    a, b = random_matrix(rng, (30, 200), "float32"), random_matrix(rng, (200, 20), "float32")
    write_zarr(tmp_path / "a.zarr", a, (10, 50))
    write_zarr(tmp_path / "b.zarr", b, (50, 10))
    c = tmp_path / "c.zarr"
    result = run_job(tmp_path / "a.zarr", tmp_path / "b.zarr", c, client="sync",
                     progress=False, memory="96KiB", splits=2)  # fmt: skip
    assert result.plan.splits == 2
    records = tile_records(c)
    assert records
    for record in records:
        for key, (size, digest) in json.loads(record.read_text())[WRITTEN].items():
            data = (c / key).read_bytes()
            assert (size, digest) == (len(data), hashlib.sha256(data).hexdigest())


def test_a_changed_object_of_an_fsspec_output_is_checked_through_the_store(tmp_path):
    """The output in fsspec's memory filesystem (no local path, only the store API): an
    object deleted and two swapped, the three tiles are computed again."""
    import fsspec  # noqa: PLC0415

    rng = np.random.default_rng(9)
    a, b = random_matrix(rng, (80, 60), "float32"), random_matrix(rng, (60, 50), "float32")
    write_zarr(tmp_path / "a.zarr", a, (10, 10))
    write_zarr(tmp_path / "b.zarr", b, (10, 10))
    root = f"outofcore-checks-{os.getpid()}-{tmp_path.name}/c.zarr"
    options = {"memory": 24 * 1024, "client": "sync", "progress": False}
    damaged = break_chunk(tmp_path / "b.zarr", "5/4")
    with pytest.raises(ReadError):
        run_job(tmp_path / "a.zarr", tmp_path / "b.zarr", f"memory://{root}", **options)
    restore_chunk(damaged)
    fs = fsspec.filesystem("memory")
    records = sorted(fs.glob(f"{root}/{JOURNAL_DIR}/tiles/*/tile-*.json"))
    assert len(records) >= 3
    keys = [next(iter(json.loads(fs.cat(r))[WRITTEN])) for r in records[:3]]
    fs.rm(f"{root}/{keys[0]}")
    first, second = fs.cat(f"{root}/{keys[1]}"), fs.cat(f"{root}/{keys[2]}")
    assert first != second
    fs.pipe(f"{root}/{keys[1]}", second)
    fs.pipe(f"{root}/{keys[2]}", first)
    result = run_job(tmp_path / "a.zarr", tmp_path / "b.zarr", f"memory://{root}", **options)
    assert result.summary["damaged"] == sorted(r.rsplit("/", 1)[1][:-5] for r in records[:3])
    assert_product_close(zarr.open_array(f"memory://{root}")[...], a, b)


# -- hostile journal documents ------------------------------------------------------

RESEALED = {
    "tiles_total": ("24", "tiles_total"),
    "inputs": ([1, 2], "inputs"),
    "created": (float("nan"), "NaN"),
    "runs": (nested(900), "levels deep"),
}


@pytest.mark.parametrize("field", list(RESEALED))
def test_a_resealed_hostile_job_document_is_one_line_exit_2(stopped, field):
    """Issue 42: job.json resealed with tiles_total "24", inputs [1, 2], created NaN, or
    runs nested 900 deep was exit 3 "unexpected"; now one line naming the file (and the
    field), exit 2, for matmul and status; nothing is written; overwrite starts over."""
    folder, a, b = stopped
    c = folder / "c.zarr"
    job = c / JOURNAL_DIR / "job.json"
    value, named = RESEALED[field]
    reseal(job, lambda d: d.__setitem__(field, value))
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}

    for command in (matmul_command(folder), ["status", str(c)]):
        done = cli(*command)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "unexpected" not in lines[0], done.stderr
        assert str(job) in lines[0] and named in lines[0], lines[0]
    with pytest.raises(OutOfCoreError) as raised:
        job_status(c)
    assert raised.value.exit_status == 2
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    run(folder, overwrite=True)
    assert_product_close(zarr.open_array(str(c))[...], a, b)


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("tile", [50, "x"], "'tile'"),
        ("tile", [0, 10], "'tile'"),
        ("tk", 2.5, "'tk'"),
        ("complete", "no", "'complete'"),
        ("completed", 1e300, "'completed'"),
        ("plan", {"tiles_grid": [1, "x"]}, "'tiles_grid'"),
        ("runs", [["not a run"]], "'runs'"),
        ("inputs", {"A": {"content": [1]}}, "input A.*'content'"),
        ("memory", None, "'memory'"),
        ("journal_id", None, "journal id None"),
    ],
)
def test_a_job_document_with_a_field_of_another_type_names_it(stopped, field, value, named):
    folder, _, _ = stopped
    c = folder / "c.zarr"
    reseal(c / JOURNAL_DIR / "job.json", lambda d: d.__setitem__(field, value))
    for attempt in (lambda: run(folder), lambda: job_status(c)):
        with pytest.raises(OutOfCoreError, match=f"job.json.*{named}") as raised:
            attempt()
        assert raised.value.exit_status == 2 and "\n" not in str(raised.value)


def test_a_huge_tile_grid_read_back_is_listed_at_once(stopped):
    """A resealed plan of 10¹⁸ rows of tiles: status lists the records once, at once."""
    folder, _, _ = stopped
    c = folder / "c.zarr"
    done = len(tile_records(c))
    reseal(c / JOURNAL_DIR / "job.json", lambda d: d["plan"].update(tiles_grid=[10**18, 1]))
    assert job_status(c)["tiles_done"] == done


def test_a_job_document_over_the_size_cap_is_not_read(stopped):
    folder, _, _ = stopped
    c = folder / "c.zarr"
    reseal(c / JOURNAL_DIR / "job.json", lambda d: d.__setitem__("pad", "x" * 20 * 2**20))
    done = cli(*matmul_command(folder))
    assert done.returncode == 2 and "more than" in done.stderr and "job.json" in done.stderr


def _set(field, value):
    return lambda d: d.__setitem__(field, value)


HOSTILE_RECORDS = {
    "wrong types": lambda p: reseal(p, _set("rows", "0:20")),
    "digests of another type": lambda p: reseal(p, _set(WRITTEN, {"c/0/0": "x"})),
    "NaN": lambda p: reseal(p, _set("finished", float("nan"))),
    "huge int": lambda p: p.write_text(p.read_text()[:-1] + ', "index": ' + "9" * 5000 + "}"),
    "huge digest size": lambda p: reseal(
        p, lambda d: d[WRITTEN].update({k: [10**30, v[1]] for k, v in d[WRITTEN].items()})
    ),
    "deep nesting": lambda p: p.write_text(
        p.read_text()[:-1] + ', "deep": ' + "[" * 10**5 + "]" * 10**5 + "}"
    ),
    "20 MB": lambda p: reseal(p, _set("pad", "x" * 20 * 2**20)),
}


@pytest.mark.parametrize("damage", list(HOSTILE_RECORDS))
def test_a_hostile_tile_record_is_computed_again_never_unexpected(stopped, damage):
    """A record resealed with fields of another type, NaN, huge numbers, nested 10⁵ deep
    or 20 MB long counts as not done: its tile is computed again, named, and C is right."""
    folder, a, b = stopped
    c = folder / "c.zarr"
    record = tile_records(c)[0]
    HOSTILE_RECORDS[damage](record)
    result = run(folder)
    assert result.summary["damaged"] == [tile_name(record)]
    assert_product_close(zarr.open_array(str(c))[...], a, b)


@pytest.mark.parametrize(
    "lease",
    [
        lambda: '{"job_id": ' + "[" * 10**5 + "]" * 10**5 + "}",
        lambda: (
            '{"job_id": "x", "host": "h", "pid": 1, "acquired": NaN, "heartbeat": 1, "timeout": 1}'
        ),
        lambda: json.dumps({"pad": "x" * 20 * 2**20}),
        lambda: '{"pid": ' + "9" * 5000 + "}",
    ],
)
def test_a_hostile_lease_does_not_block_or_break_a_rerun(stopped, lease):
    folder, a, b = stopped
    c = folder / "c.zarr"
    (c / JOURNAL_DIR / "lease.json").write_text(lease())
    assert job_status(c)["lease"] is None
    run(folder)
    assert_product_close(zarr.open_array(str(c))[...], a, b)


def test_hostile_input_tokens_are_ignored_not_unexpected(stopped):
    """The tokens kept to name a changed input, resealed as a list: the refusal of a
    changed input still names it, in one line."""
    folder, _, _ = stopped
    c = folder / "c.zarr"
    tokens = next((c / JOURNAL_DIR / "inputs").glob("*.json"))
    reseal(tokens, lambda d: d.__setitem__("A", [1, 2]))
    shutil.rmtree(folder / "a.zarr")
    write_zarr(folder / "a.zarr", np.ones((80, 60), np.float32), (10, 10))
    with pytest.raises(OutOfCoreError, match="input A was rewritten") as raised:
        run(folder)
    assert raised.value.exit_status == 2


def test_the_seal_is_plain_sha256_as_the_adversary_recomputes_it():
    """The resealing above is what outofcore checks (so those documents pass the seal and
    only the schema stops them)."""
    import hashlib  # noqa: PLC0415

    document = {"b": 1, "a": [2]}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    assert document_digest(document) == hashlib.sha256(text.encode()).hexdigest()


def test_output_metadata_nested_deep_is_unreadable_not_a_recursion(tmp_path):
    """The output's own zarr.json as the manifest and the resume's metadata check read it:
    nested 10⁵ deep, it is no array's (no chunk key) and stands for itself by its hash."""
    from outofcore.journal.records import Journal  # noqa: PLC0415
    from outofcore.journal.resume import output_metadata  # noqa: PLC0415
    from outofcore.storage.locations import locate  # noqa: PLC0415
    from outofcore.storage.manifest import chunk_keys_of  # noqa: PLC0415

    deep = b'{"shape": ' + b"[" * 10**5 + b"]" * 10**5 + b"}"
    assert chunk_keys_of("zarr.json", deep) is None
    (tmp_path / "c.zarr").mkdir()
    (tmp_path / "c.zarr" / "zarr.json").write_bytes(deep)
    kept = output_metadata(Journal.for_output(locate(str(tmp_path / "c.zarr"))))
    assert kept is not None and set(kept["fields"]) == {"unreadable"}


# -- resume after random kills, against an uninterrupted run --------------------------


def test_resume_after_random_kills_equals_an_uninterrupted_run_bit_for_bit(tmp_path):
    """Seeded kill points (tiles recorded before SIGKILL) and damage to the recorded
    output between the kill and the rerun (none, a chunk deleted, two swapped, one cut):
    every rerun ends with exit 0 and C bit for bit the uninterrupted run's."""
    long_inputs(tmp_path, 500, 600, 300)  # 60 tiles
    whole = cli(*matmul_command(tmp_path, "whole.zarr"))
    assert whole.returncode == 0, whole.stderr
    expected = zarr.open_array(str(tmp_path / "whole.zarr"))[...]
    total = json.loads(whole.stdout)["tiles"]
    rng = np.random.default_rng(42)
    for round_, damage in enumerate(("none", "delete", "swap", "cut")):
        out = f"c{round_}.zarr"
        command, c = matmul_command(tmp_path, out), tmp_path / out
        done = killed(command, c, int(rng.integers(1, total // 2)))
        records = tile_records(c)
        chosen = [records[i] for i in rng.choice(len(records), min(2, len(records)), False)]
        files = [chunk_files(c, r)[0] for r in chosen]
        if damage == "delete":
            files[0].unlink()
        elif damage == "swap" and len(files) == 2:
            swap(*files)
        elif damage == "cut":
            files[0].write_bytes(files[0].read_bytes()[:7])
        rerun = cli(*command)
        assert rerun.returncode == 0, (damage, rerun.stderr)
        summary = json.loads(rerun.stdout)
        assert summary["tiles_skipped"] + summary["tiles_computed"] == total
        if damage != "none" and not (damage == "swap" and len(files) < 2):
            assert summary["damaged"] and summary["tiles_skipped"] < done, (damage, summary)
        got = zarr.open_array(str(c))[...]
        assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes(), damage

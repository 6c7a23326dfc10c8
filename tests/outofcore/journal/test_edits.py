"""Integrity that an edit cannot fool (issue 28, item 4), as an adversary edits files.

Real jobs on real files (``LocalStore``), stopped midway and rerun, with something
edited in between:

* an input chunk rewritten in place with other bytes of the same size, its
  access and modification times restored (``os.utime`` in ns): the rerun is
  refused, naming the chunk, exit 2, nothing written;
* a split-k partial sum with flipped bytes of the same size: the rerun names it,
  computes it again, and the result is right;
* a tile record damaged, edited, or copied over another's name: the tile is
  computed again, named;
* the output's ``zarr.json`` (a codec, the chunk grid) or ``job.json`` edited:
  the rerun is refused before anything is written; an edit while the job runs
  leaves the output incomplete;
* durability: every chunk file of a tile, and its record's own bytes, reach the
  disk (``fsync``) before the record's name does.

Results are compared with a float64 numpy reference (tests.helpers), with ragged chunks.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import zarr

from outofcore.api import ATTRIBUTE, run_job
from outofcore.errors import JobFailedError
from outofcore.journal.records import JOURNAL_DIR, PARTIALS_DIR
from outofcore.journal.resume import OutputChangedError, ResumeError
from outofcore.storage.fingerprint import fingerprint
from outofcore.storage.writing import make_durable, region_files, write_durably
from tests.helpers import (
    assert_gemm_close,
    break_chunk,
    cli,
    overwrite_in_place,
    random_matrix,
    restore_chunk,
    tile_records,
)

#: The first run stops at A's last row of chunks: 8 of the 10 tiles are recorded.
MATMUL = ("matmul", "a.zarr", "b.zarr", "-o", "c.zarr", "--memory", "24KiB")
MATMUL += ("--scheduler", "sync", "--json")
NO_RETRIES = {"OUTOFCORE_READ_RETRIES": "0"}


def assert_one_error(done, status: int, *needles: str) -> str:
    """The command exited ``status`` with one ``outofcore: error:`` line naming ``needles``."""
    errors = [line for line in done.stderr.splitlines() if line.startswith("outofcore: error:")]
    assert done.returncode == status, (done.returncode, done.stderr)
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file under ``folder``: size, mtime (ns) and bytes."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def stopped(tmp_path, monkeypatch):
    """A 45x37 @ 37x29 float64 job in ragged chunks (B's uncompressed: any same-size bytes
    are valid values) stopped by an undecodable chunk of A after 8 of its 10 tiles, then
    mended.  Returns the folder and the inputs."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(7)
    a, b = random_matrix(rng, (45, 37), "float64"), random_matrix(rng, (37, 29), "float64")
    zarr.create_array(tmp_path / "a.zarr", data=a, chunks=(10, 9))
    zarr.create_array(tmp_path / "b.zarr", data=b, chunks=(9, 8), compressors=None)
    broken = break_chunk(tmp_path / "a.zarr", "4/0")  # rows 40:45: the last row of tiles
    failed = cli(*MATMUL, env=NO_RETRIES)
    restore_chunk(broken)
    assert_one_error(failed, 3, "a.zarr", "c/4/0")
    assert len(tile_records(tmp_path / "c.zarr")) == 8
    return tmp_path, a, b


def rerun(folder: Path, *extra: str):
    done = cli(*MATMUL, *extra, env=NO_RETRIES)
    return done, (json.loads(done.stdout) if done.returncode == 0 else None)


def complete(c: Path) -> bool:
    return zarr.open_array(str(c)).attrs[ATTRIBUTE]["complete"] is True


# -- inputs rewritten in place, their times restored ---------------------------------------
def test_an_input_rewritten_in_place_with_its_times_restored_is_refused(stopped):
    folder, a, b = stopped
    chunk = folder / "b.zarr" / "c" / "2" / "1"  # rows 18:27, columns 8:16 of B
    before = chunk.stat()
    other = np.full((9, 8), 0.5).tobytes()  # other values, the same 576 bytes
    overwrite_in_place(chunk, other)
    after = chunk.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        before.st_size,
        before.st_mtime_ns,
        before.st_ino,
    )
    output = snapshot(folder / "c.zarr")

    refused = cli(*MATMUL)
    assert_one_error(refused, 2, "input B was rewritten since the job started", "c/2/1 rewritten")
    assert "--overwrite" in refused.stderr
    assert snapshot(folder / "c.zarr") == output  # nothing written, nothing marked complete
    assert not complete(folder / "c.zarr")

    again, summary = rerun(folder, "--overwrite")
    assert again.returncode == 0, again.stderr
    assert summary["tiles_skipped"] == 0
    b[18:27, 8:16] = 0.5
    assert_gemm_close(zarr.open_array(str(folder / "c.zarr"))[...], a, b, accumulated_in="f8")


def test_the_fingerprint_sees_in_place_rewrites_and_content_hashes_see_only_content(tmp_path):
    """stat tokens: a same-size rewrite with restored times changes them (the change time);
    ``fingerprint: content`` ignores a touch and catches a rewrite; a folder reached
    through a symbolic link is fingerprinted file by file."""
    values = random_matrix(np.random.default_rng(3), (20, 20), "float64")
    array = zarr.create_array(tmp_path / "x.zarr", data=values, chunks=(10, 10), compressors=None)
    chunk = tmp_path / "x.zarr" / "c" / "1" / "1"
    stat, content = fingerprint(array), fingerprint(array, "content")
    os.utime(chunk)  # a touch: the bytes are the same
    assert fingerprint(array).digest != stat.digest
    assert fingerprint(array, "content").digest == content.digest
    overwrite_in_place(chunk, np.zeros(100).tobytes())
    assert fingerprint(array, "content").tokens["c/1/1"] != content.tokens["c/1/1"]

    (tmp_path / "x.zarr" / "c" / "0").rename(tmp_path / "elsewhere")
    (tmp_path / "x.zarr" / "c" / "0").symlink_to(tmp_path / "elsewhere")
    linked = fingerprint(array)
    assert {"c/0/0", "c/0/1"} <= linked.tokens.keys()
    overwrite_in_place(tmp_path / "elsewhere" / "0", np.ones(100).tobytes())
    assert fingerprint(array).tokens["c/0/0"] != linked.tokens["c/0/0"]
    with pytest.raises(Exception, match="OUTOFCORE_FINGERPRINT='sha1'"):
        fingerprint(array, "sha1")


# -- damaged records ------------------------------------------------------------------------
def _flip_a_digit(path: Path) -> None:
    """An edit that keeps the record JSON: its finishing time changed, checksum stale."""
    record = json.loads(path.read_text())
    record["finished"] += 1.0
    path.write_text(json.dumps(record))


def _cut_short(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-20])


def _copied_from_another(path: Path) -> None:
    """A sealed record, but of another tile, put under this tile's name."""
    path.write_bytes((path.parent / "tile-0-1.json").read_bytes())


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (_flip_a_digit, "its checksum does not match"),
        (_cut_short, "not a JSON object"),
        (_copied_from_another, "the record of another tile"),
    ],
)
def test_a_damaged_tile_record_is_computed_again(stopped, damage, why):
    """A tile whose record is not sound counts as not done, even when its chunks are gone."""
    folder, a, b = stopped
    c = folder / "c.zarr"
    record = next(p for p in tile_records(c) if p.name == "tile-0-0.json")
    damage(record)
    for chunk in (c / "c").rglob("*"):  # the tile's output too: only a recompute mends it
        if chunk.is_file() and chunk.relative_to(c / "c").parts == ("0", "0"):
            chunk.unlink()

    done, summary = rerun(folder)
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "tile tile-0-0" in line]
    assert warned and warned[0].startswith("outofcore: warning:") and why in warned[0], warned
    assert summary["damaged"] == ["tile-0-0"]
    assert summary["tiles_skipped"] == 7 and summary["tiles_computed"] == 3
    assert_gemm_close(zarr.open_array(str(c))[...], a, b, accumulated_in="float64")
    assert complete(c)
    document = json.loads((c / JOURNAL_DIR / "job.json").read_text())
    assert list(document["runs"][-1]["damaged"]) == ["tile-0-0"]


def test_a_damaged_partial_sum_is_computed_again(tmp_path, monkeypatch):
    """A split-k job stopped before its last part; a kept part's bytes flipped in place,
    same size, times restored: the rerun names it, computes it again, and is right."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(11)
    a, b = random_matrix(rng, (31, 1003), "float32"), random_matrix(rng, (1003, 21), "float32")
    zarr.create_array(tmp_path / "a.zarr", data=a, chunks=(30, 100))
    zarr.create_array(tmp_path / "b.zarr", data=b, chunks=(100, 20))
    command = ("matmul", "a.zarr", "b.zarr", "-o", "c.zarr", "--scheduler", "sync")
    command += ("--memory", "96KiB", "--splits", "5", "--json")
    broken = break_chunk(tmp_path / "b.zarr", "10/0")  # rows 1000:1003: the last part's
    assert_one_error(cli(*command, env=NO_RETRIES), 3, "c/10/0")
    restore_chunk(broken)
    kept = sorted((tmp_path / "c.zarr" / JOURNAL_DIR / PARTIALS_DIR).glob("*/*/rows-*.npy"))
    assert kept
    block = kept[0]
    data = bytearray(block.read_bytes())
    data[-4:] = bytes(x ^ 0x40 for x in data[-4:])  # the last float32 of the sum
    overwrite_in_place(block, bytes(data))
    part = block.parent.name

    done = cli(*command)
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if part in line]
    assert warned and "does not match the checksum" in warned[0], done.stderr
    assert warned[0].startswith("outofcore: warning:") and "computed again" in warned[0]
    assert json.loads(done.stdout)["damaged"] == [part]
    c = zarr.open_array(str(tmp_path / "c.zarr"))
    assert_gemm_close(c[...], a, b, accumulated_in="float32")
    assert c.attrs[ATTRIBUTE]["complete"] is True


# -- the output's own metadata, and the job document ---------------------------------------
def _other_codec(document: dict) -> None:
    document["codecs"] = [c for c in document["codecs"] if c["name"] == "bytes"] + [
        {"name": "gzip", "configuration": {"level": 1}}
    ]


def _other_grid(document: dict) -> None:
    document["chunk_grid"]["configuration"]["chunk_shape"] = [5, 16]


@pytest.mark.parametrize(("edit", "field"), [(_other_codec, "codecs"), (_other_grid, "chunk_grid")])
def test_an_edited_output_metadata_is_refused_before_anything_is_written(stopped, edit, field):
    folder, _, _ = stopped
    c = folder / "c.zarr"
    metadata = c / "zarr.json"
    document = json.loads(metadata.read_text())
    edit(document)
    metadata.write_text(json.dumps(document))
    before = snapshot(c)

    refused = cli(*MATMUL)
    assert_one_error(refused, 2, f"the output {str(c)!r} was changed since its job started", field)
    assert "overwrite" in refused.stderr
    assert snapshot(c) == before  # nothing written: no record, no chunk, no journal entry
    with pytest.raises(ResumeError, match=rf"zarr.json changed in {field}"):
        run_job("a.zarr", "b.zarr", str(c), memory="24KiB", client="sync", progress=False)
    assert snapshot(c) == before


def test_output_metadata_edited_while_the_job_runs_leaves_it_incomplete(tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    a, b = random_matrix(rng, (30, 20), "float64"), random_matrix(rng, (20, 40), "float64")
    zarr.create_array(tmp_path / "a.zarr", data=a, chunks=(10, 10))
    zarr.create_array(tmp_path / "b.zarr", data=b, chunks=(10, 10))
    import outofcore.compute.tile

    compute = outofcore.compute.tile.compute_tile
    calls = []

    def edit_the_output_after_the_first_tile(job, task, **options):
        calls.append(task.key)
        if len(calls) == 2:
            path = tmp_path / "c.zarr" / "zarr.json"
            document = json.loads(path.read_text())
            _other_codec(document)
            path.write_text(json.dumps(document))
        return compute(job, task, **options)

    monkeypatch.setattr(
        "outofcore.jobs.recorded.compute_tile", edit_the_output_after_the_first_tile
    )
    with pytest.raises(OutputChangedError, match=r"changed while the job wrote it .*codecs"):
        run_job(tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
                memory=8 * 1024, client="sync", progress=False)  # fmt: skip
    assert isinstance(OutputChangedError("x"), JobFailedError)
    document = json.loads((tmp_path / "c.zarr" / JOURNAL_DIR / "job.json").read_text())
    assert document["complete"] is False and len(calls) > 2


def test_an_edited_job_document_is_refused(stopped):
    """job.json with its tile sizes edited (records of other tiles would be taken)."""
    folder, _, _ = stopped
    c = folder / "c.zarr"
    job = c / JOURNAL_DIR / "job.json"
    document = json.loads(job.read_text())
    document["tile"] = [5, 16]
    job.write_text(json.dumps(document))
    before = snapshot(c)
    refused = cli(*MATMUL)
    assert_one_error(refused, 2, "job.json does not match its checksum", "overwrite")
    assert snapshot(c) == before


# -- durability ------------------------------------------------------------------------------
@pytest.fixture
def flushes(monkeypatch):
    """Every ``os.fsync`` (the path flushed), ``os.link`` and ``os.replace``, in order."""
    events: list[tuple[str, str]] = []
    real_fsync, real_link, real_replace = os.fsync, os.link, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def link(src, dst, *args, **kwargs) -> None:
        real_link(src, dst, *args, **kwargs)
        events.append(("link", os.fspath(dst)))

    def replace(src, dst, *args, **kwargs) -> None:
        real_replace(src, dst, *args, **kwargs)
        events.append(("rename", os.fspath(dst)))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(os, "replace", replace)
    return events


def test_write_durably_flushes_the_bytes_before_the_name_and_the_folder_after(tmp_path, flushes):
    path = tmp_path / "out" / "_outofcore" / "tiles" / "j" / "tile-0-0.json"
    (tmp_path / "out").mkdir()
    assert write_durably(str(path), b"{}", exclusive=True, root=str(tmp_path / "out"))
    kinds = [kind for kind, _ in flushes]
    assert kinds[:2] == ["fsync", "link"]  # the temporary file's bytes, then its name
    assert flushes[0][1].endswith(".partial") and flushes[1][1] == str(path)
    flushed = {p for kind, p in flushes[2:] if kind == "fsync"}
    folders = {str(path.parent), *(str(p) for p in path.parents if tmp_path / "out" in p.parents)}
    assert flushed == folders | {str(tmp_path / "out")}  # every folder made, and the one above
    assert not write_durably(str(path), b"[]", exclusive=True, root=str(tmp_path / "out"))
    assert path.read_bytes() == b"{}" and len(list(path.parent.iterdir())) == 1
    flushes.clear()
    assert write_durably(str(path), b"[]", root=str(tmp_path / "out"))
    assert [kind for kind, _ in flushes] == ["fsync", "rename", "fsync"]  # file, name, folder
    make_durable([str(path), str(tmp_path / "gone")], str(tmp_path / "out"))  # missing: skipped


def test_chunks_reach_the_disk_before_their_tiles_record(tmp_path, flushes):
    """A real job (sharded output through zarr, and chunk files): for every tile record,
    each file of the tile's chunks was flushed, and its folders, before the record's name
    was linked into place; with ``OUTOFCORE_FSYNC=0`` nothing is flushed."""
    rng = np.random.default_rng(9)
    a, b = random_matrix(rng, (50, 23), "float64"), random_matrix(rng, (23, 37), "float64")
    zarr.create_array(tmp_path / "a.zarr", data=a, chunks=(10, 9))
    zarr.create_array(tmp_path / "b.zarr", data=b, chunks=(9, 8))
    for shards in (False, True):
        flushes.clear()
        c = tmp_path / f"c-{shards}.zarr"
        result = run_job(tmp_path / "a.zarr", tmp_path / "b.zarr", c, memory=16 * 1024,
                         client="sync", progress=False, shards=shards)  # fmt: skip
        assert len(result.plan.tasks) > 3
        output = zarr.open_array(str(c))
        assert_gemm_close(output[...], a, b, accumulated_in="float64")
        for task in result.plan.tasks:
            record = str(next(p for p in tile_records(c) if p.name == f"{task.key}.json"))
            linked = flushes.index(("link", record))
            before = {path for kind, path in flushes[:linked] if kind == "fsync"}
            files = region_files(output, (task.row0, task.col0), task.shape)
            assert files and set(files) <= before, (task.key, set(files) - before)
            assert {os.path.dirname(f) for f in files} <= before
            assert any(p.startswith(record + ".") for p in before)  # the record's own bytes
        job = str(c / JOURNAL_DIR / "job.json")
        renamed = [i for i, event in enumerate(flushes) if event == ("rename", job)]
        assert renamed and flushes[renamed[0] - 1][1].startswith(job + ".")  # bytes, then name

    flushes.clear()
    from outofcore import config

    with config.set({"fsync": False}):
        run_job(tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "d.zarr", memory=16 * 1024,
                client="sync", progress=False)  # fmt: skip
    assert not [event for event in flushes if event[0] == "fsync"]


def test_the_warning_names_what_was_damaged(stopped, caplog):
    """Through the API: the damaged record's warning goes to the ``outofcore`` logger."""
    folder, a, b = stopped
    c = folder / "c.zarr"
    _flip_a_digit(next(p for p in tile_records(c) if p.name == "tile-1-1.json"))
    with caplog.at_level(logging.WARNING, logger="outofcore"):
        result = run_job("a.zarr", "b.zarr", str(c), memory="24KiB", client="sync",
                         progress=False)  # fmt: skip
    assert result.summary["damaged"] == ["tile-1-1"]
    assert any("tile tile-1-1" in r.getMessage() for r in caplog.records)
    assert_gemm_close(zarr.open_array(str(c))[...], a, b, accumulated_in="float64")

"""What a crash, a disk or a hostile writer leaves beside a stopped job (issue 53): a
damaged shard, a folder where a chunk or a record was, a FIFO where a document was,
metadata with non-finite or wrongly typed shapes, a job document resealed to say it is
complete.  Every rerun heals (the output equals numpy's product) or names one thing in
one line, and nothing waits for ever.

Real jobs on real files, stopped by an undecodable input chunk
(:func:`tests.helpers.break_chunk`) after their first tiles, then damaged, then run again
through the command line.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from outofcore.api import ATTRIBUTE, run_job
from outofcore.jobs.recorded import WRITTEN
from outofcore.journal.records import JOURNAL_DIR, seal
from outofcore.operands.reading import ReadError
from tests.helpers import (
    assert_product_close,
    break_chunk,
    cli,
    random_matrix,
    restore_chunk,
    tile_records,
    write_zarr,
)
from tests.outofcore.journal.test_resume_checks import killed, long_inputs, matmul_command

#: Seconds a command may take before it counts as waiting for ever (a job of seconds).
PATIENCE = 60


def command(folder: Path, *extra: str) -> list[str]:
    a, b, c = (str(folder / name) for name in ("a.zarr", "b.zarr", "c.zarr"))
    return ["matmul", a, b, "-o", c, "--scheduler", "sync", "--json", *extra]


def stop(folder: Path, rows: int, k: int, cols: int, blocks: int, broken: str, **options):
    """Run A (rows x k) @ B (k x cols), float32 in ``blocks``² chunks, until the chunk
    ``broken`` of A stops it; mend it. Returns A and B."""
    rng = np.random.default_rng(rows + k + cols)
    a, b = random_matrix(rng, (rows, k), "float32"), random_matrix(rng, (k, cols), "float32")
    write_zarr(folder / "a.zarr", a, (blocks, blocks))
    write_zarr(folder / "b.zarr", b, (blocks, blocks))
    damaged = break_chunk(folder / "a.zarr", broken)
    options = {"client": "sync", "progress": False, **options}
    with pytest.raises(ReadError):
        run_job(folder / "a.zarr", folder / "b.zarr", folder / "c.zarr", **options)
    restore_chunk(damaged)
    assert tile_records(folder / "c.zarr"), "the job stopped before its first tile"
    return a, b


@pytest.fixture
def plain(tmp_path, outofcore_settings):
    """80x60 @ 60x50 in 10² chunks, 20x10 tiles (24 KiB): stopped in its last row of tiles.
    Returns the folder, A, B and the options of the command line."""
    outofcore_settings(read_retries=0)
    a, b = stop(tmp_path, 80, 60, 50, 10, "7/5", memory=24 * 1024)
    return tmp_path, a, b, ("--memory", "24KiB")


@pytest.fixture
def sharded(tmp_path, outofcore_settings):
    """256x64 @ 64x256, output chunks 32², shards 128² (one a tile): four tiles, stopped
    by A's last row of chunks after the first row of tiles (384 KiB)."""
    outofcore_settings(read_retries=0)
    a, b = stop(
        tmp_path, 256, 64, 256, 32, "7/1", chunks=(32, 32), shards=(128, 128), memory="384KiB"
    )
    return (
        tmp_path,
        a,
        b,
        ("--memory", "384KiB", "--out-chunks", "32,32", "--out-shards", "128,128"),
    )


def healed(folder: Path, a: np.ndarray, b: np.ndarray, *extra: str) -> dict:
    """Rerun the job through the command line: exit 0, numpy's product, complete, and
    status says so. Returns the rerun's summary."""
    done = cli(*command(folder, *extra), timeout=PATIENCE)
    assert done.returncode == 0, done.stderr
    assert "unexpected" not in done.stderr, done.stderr
    c = zarr.open_array(str(folder / "c.zarr"), mode="r")
    assert_product_close(c[...], a, b)
    assert c.attrs[ATTRIBUTE]["complete"] is True
    status = cli("status", str(folder / "c.zarr"), "--json", timeout=PATIENCE)
    assert status.returncode == 0, status.stderr
    answer = json.loads(status.stdout)
    assert answer["complete"] is True and answer["tiles_done"] == answer["tiles_total"], answer
    return json.loads(done.stdout)


def one_line(done, status: int, *named: str) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == status, done.stderr
    assert len(lines) == 1 and "unexpected" not in lines[0], done.stderr
    for name in named:
        assert name in lines[0], lines[0]
    return lines[0]


def recorded_objects(c: Path) -> list[Path]:
    """The stored objects every tile record names, as files (tile record order)."""
    found = []
    for record in tile_records(c):
        found += [c / key for key in json.loads(record.read_text())[WRITTEN]]
    return found


# -- a damaged shard -------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["index byte", "truncated", "index end byte", "emptied"])
def test_a_damaged_shard_of_a_recorded_tile_is_written_anew(sharded, damage):
    """Issue 53: one byte of a recorded tile's shard index flipped, or the shard cut: the
    rerun said "computed again", then failed merging into the damaged shard (exit 3, every
    rerun). Now the shard is written anew from the tile."""
    folder, a, b, options = sharded
    shard = recorded_objects(folder / "c.zarr")[0]
    data = bytearray(shard.read_bytes())
    if damage == "index byte":
        data[-20] ^= 0x40  # in the index's offsets and lengths (its crc32c is the last 4)
    elif damage == "index end byte":
        data[-1] ^= 0x01  # the index's checksum
    elif damage == "truncated":
        data = data[: len(data) // 2]
    else:
        data = bytearray()
    shard.write_bytes(bytes(data))
    summary = healed(folder, a, b, *options)
    assert len(summary["damaged"]) == 1


@pytest.mark.parametrize("damage", ["index byte", "garbage", "folder"])
def test_a_damaged_shard_of_a_tile_not_recorded_is_written_anew(sharded, damage):
    """A shard of a tile without a record (a write killed halfway, then damaged): the tile
    is computed, and its first block of rows merged into the damaged shard (exit 3, every
    rerun). A tile that owns its shards whole writes them anew."""
    folder, a, b, options = sharded
    c = folder / "c.zarr"
    recorded = recorded_objects(c)[0]
    pending = c / "c" / "1" / "1"  # the last tile's shard: A's broken rows, never written
    assert not pending.exists() and pending not in recorded_objects(c)
    pending.parent.mkdir(parents=True, exist_ok=True)
    data = bytearray(recorded.read_bytes())
    if damage == "index byte":
        data[-20] ^= 0x40
        pending.write_bytes(bytes(data))
    elif damage == "garbage":
        pending.write_bytes(b"\x07" * len(data))
    else:
        pending.mkdir()
    healed(folder, a, b, *options)
    assert pending.is_file()


def test_a_folder_where_a_recorded_shard_was_is_replaced(sharded):
    folder, a, b, options = sharded
    shard = recorded_objects(folder / "c.zarr")[0]
    shard.unlink()
    shard.mkdir()
    healed(folder, a, b, *options)
    assert shard.is_file()


# -- a folder where a chunk or a record was -----------------------------------------


def test_a_folder_where_a_recorded_chunk_was_is_replaced(plain):
    """Issue 53: c/0/0 replaced by an empty folder after a kill: "is missing", then
    IsADirectoryError renaming the chunk into place (exit 3, every rerun)."""
    folder, a, b, options = plain
    chunk = recorded_objects(folder / "c.zarr")[0]
    chunk.unlink()
    chunk.mkdir()
    summary = healed(folder, a, b, *options)
    assert len(summary["damaged"]) == 1
    assert chunk.is_file()


def test_a_folder_holding_a_file_where_a_chunk_was_is_named_and_kept(plain):
    """A folder that holds something is not outofcore's to remove: one line names it, and
    its contents are as they were."""
    folder, _, _, options = plain
    chunk = recorded_objects(folder / "c.zarr")[0]
    chunk.unlink()
    chunk.mkdir()
    (chunk / "mine").write_bytes(b"the user's")
    done = cli(*command(folder, *options), timeout=PATIENCE)
    one_line(done, 2, str(chunk))
    assert (chunk / "mine").read_bytes() == b"the user's"


@pytest.mark.parametrize("kind", ["folder", "fifo", "deleted", "not JSON"])
def test_a_tile_record_that_is_not_a_file_makes_its_tile_pending(plain, kind):
    """Issue 53: a folder where a tile record was: every tile computed, then "1 of 20
    tiles have no journal record (unexpected)", exit 3, every rerun; a FIFO waited for
    ever. Now the tile is pending again: computed and recorded again (what was there
    replaced: an empty folder, a FIFO or a link holds no one's data)."""
    folder, a, b, options = plain
    record = tile_records(folder / "c.zarr")[0]
    record.unlink()
    if kind == "folder":
        record.mkdir()
    elif kind == "fifo":
        os.mkfifo(record)
    elif kind == "not JSON":
        record.write_bytes(b"{")
    healed(folder, a, b, *options)
    assert record.is_file() and json.loads(record.read_text())["tile"] == record.stem
    status = cli("status", str(folder / "c.zarr"), "--json", timeout=PATIENCE)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["complete"] is True


def test_a_link_where_a_tile_record_was_is_named_never_followed(plain):
    """A link to /dev/zero where a record was: outofcore never writes or deletes through a
    link, so the rerun names it in one line (as it names any link in an output) and reads
    nothing through it; status answers."""
    folder, _, _, options = plain
    record = tile_records(folder / "c.zarr")[0]
    record.unlink()
    record.symlink_to("/dev/zero")
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}
    one_line(cli(*command(folder, *options), timeout=PATIENCE), 2, record.name, "link")
    status = cli("status", str(folder / "c.zarr"), timeout=PATIENCE)
    assert status.returncode == 0 and "unexpected" not in status.stderr, status.stderr
    assert record.is_symlink()
    after = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}
    assert after == before


# -- a FIFO where the job document was ------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind"), [("job.json", "fifo"), ("job.json", "folder"), ("lease.json", "fifo")]
)
def test_a_fifo_where_a_journal_document_was_never_blocks(plain, name, kind):
    """Issue 53: a FIFO at _outofcore/job.json: status and the rerun waited for ever. Now
    one line names it (job.json) and --overwrite, which it advises, starts over (the FIFO
    or the empty folder removed: they hold no one's bytes); a FIFO lease is no lease, and
    the rerun goes on."""
    folder, a, b, options = plain
    path = folder / "c.zarr" / JOURNAL_DIR / name
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    status = cli("status", str(folder / "c.zarr"), timeout=PATIENCE)
    rerun = cli(*command(folder, *options), timeout=PATIENCE)
    if name == "job.json":
        one_line(status, 2, str(path), "not a regular file")
        one_line(rerun, 2, str(path), "not a regular file", "overwrite")
        over = cli(*command(folder, *options, "--overwrite"), timeout=PATIENCE)
        assert over.returncode == 0, over.stderr
    else:
        assert status.returncode == 0, status.stderr
        assert rerun.returncode == 0, rerun.stderr
    assert_product_close(zarr.open_array(str(folder / "c.zarr"))[...], a, b)
    assert (folder / "c.zarr" / JOURNAL_DIR / "job.json").is_file()


def test_a_folder_where_an_input_chunk_was_is_one_line(tmp_path):
    """An input's chunk file replaced by a folder: the job stops, one line naming the chunk,
    and nothing of the input changes."""
    rng = np.random.default_rng(2)
    write_zarr(tmp_path / "a.zarr", random_matrix(rng, (30, 20), "float32"), (10, 10))
    write_zarr(tmp_path / "b.zarr", random_matrix(rng, (20, 10), "float32"), (10, 10))
    chunk = tmp_path / "a.zarr" / "c" / "1" / "1"
    chunk.unlink()
    chunk.mkdir()
    done = cli(*command(tmp_path), env={"OUTOFCORE_READ_RETRIES": "0"}, timeout=PATIENCE)
    assert done.returncode != 0 and "unexpected" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert "c/1/1" in line and "not a regular file" in line, done.stderr
    assert chunk.is_dir() and not any(chunk.iterdir())


# -- metadata with non-finite or wrongly typed shapes ------------------------------------

BAD_FIELDS = [
    ("shape", lambda s: [float("nan"), s[1]]),
    ("shape", lambda s: [str(s[0]), s[1]]),
    ("shape", lambda s: [True, s[1]]),
    ("shape", lambda s: [s[0] + 0.5, s[1]]),
    ("shape", lambda s: [-s[0], s[1]]),
    ("shape", lambda s: 7),
    ("chunk_grid", lambda s: {"name": "regular", "configuration": {"chunk_shape": [1e999, 10]}}),
    ("chunk_grid", lambda s: {"name": "regular", "configuration": {"chunk_shape": ["10", 10]}}),
    ("chunk_grid", lambda s: {"name": "regular", "configuration": {"chunk_shape": [0, 10]}}),
]


def rewrite_metadata(path: Path, field: str, value) -> None:
    document = json.loads(path.read_text())
    document[field] = value(document["shape"])
    path.write_text(json.dumps(document))  # NaN and Infinity as Python writes them


@pytest.mark.parametrize(("field", "value"), BAD_FIELDS)
def test_an_inputs_metadata_with_a_bad_shape_or_chunks_is_one_line(tmp_path, field, value):
    rng = np.random.default_rng(1)
    write_zarr(tmp_path / "a.zarr", random_matrix(rng, (30, 20), "float32"), (10, 10))
    write_zarr(tmp_path / "b.zarr", random_matrix(rng, (20, 10), "float32"), (10, 10))
    rewrite_metadata(tmp_path / "a.zarr" / "zarr.json", field, value)
    done = cli(*command(tmp_path), timeout=PATIENCE)
    one_line(done, 2, str(tmp_path / "a.zarr" / "zarr.json"), repr(field))
    assert not (tmp_path / "c.zarr").exists()


@pytest.mark.parametrize(("field", "value"), BAD_FIELDS[:3] + BAD_FIELDS[6:7])
def test_an_existing_outputs_metadata_with_a_bad_shape_is_one_line(plain, field, value):
    """Issue 53: the output's zarr.json with "shape": [NaN, 50] was a TypeError, exit 3."""
    folder, _, _, options = plain
    path = folder / "c.zarr" / "zarr.json"
    rewrite_metadata(path, field, value)
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    for done in (
        cli(*command(folder, *options), timeout=PATIENCE),
        cli("status", str(folder / "c.zarr")),
    ):
        one_line(done, 2, str(path), repr(field))
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before


# -- status of a job document resealed to say complete -----------------------------


@pytest.mark.parametrize(
    "edit",
    [
        {"complete": True},
        {"complete": True, "completed": None},
        {"complete": True, "completed": 1.7e9},
    ],
)
def test_status_of_a_job_resealed_to_say_complete_is_never_unexpected(plain, edit):
    """Issue 53: job.json of an interrupted output resealed to say "complete": true: status
    was a TypeError (unexpected). Now it answers (the records say what is done)."""
    folder, _, _, options = plain
    path = folder / "c.zarr" / JOURNAL_DIR / "job.json"
    document = json.loads(path.read_text())
    document.pop("checksum")
    document.update(edit)
    path.write_text(json.dumps(seal(document)))
    for extra in ([], ["--json"]):
        done = cli("status", str(folder / "c.zarr"), *extra, timeout=PATIENCE)
        assert "unexpected" not in done.stderr, done.stderr
        assert done.returncode in (0, 2), done.stderr
        if done.returncode == 2:
            one_line(done, 2, str(path))


# -- damage after a real kill, as an adversary chooses it ---------------------------

DAMAGES = ("flipped byte", "truncated", "deleted", "folder", "fifo", "symlink")
OBJECTS = ("recorded chunk", "tile record", "job.json")


def damage(path: Path, kind: str, spare: Path) -> None:
    """Damage the file at ``path`` as ``kind`` says; a symlink points to a copy of it in
    ``spare`` (outside the output)."""
    data = path.read_bytes()
    if kind == "flipped byte":
        at = len(data) // 2
        path.write_bytes(data[:at] + bytes([data[at] ^ 0x10]) + data[at + 1 :])
    elif kind == "truncated":
        path.write_bytes(data[: len(data) // 3])
    else:
        path.unlink()
        if kind == "folder":
            path.mkdir()
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "symlink":
            spare.write_bytes(data)
            path.symlink_to(spare)


def outside(folder: Path, c: Path) -> dict[str, bytes]:
    """Every regular file under ``folder`` but inside the output ``c``, with its bytes."""
    return {
        str(p): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and not p.is_symlink() and c not in p.parents
    }


#: Examples a run tries (each a job killed and run again: about 6 s on 2 cores); no
#: shrinking, whose reruns cost as much each: a failure shows the example as drawn.
KILL_EXAMPLES = 6


@settings(
    max_examples=KILL_EXAMPLES,
    deadline=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
)
@example(records=3, which=0, target="tile record", kind="folder")
@example(records=2, which=1, target="recorded chunk", kind="fifo")
@given(
    records=st.integers(1, 12),
    which=st.integers(0, 10**6),
    target=st.sampled_from(OBJECTS),
    kind=st.sampled_from(DAMAGES),
)
def test_damage_after_a_kill_heals_or_is_named_in_one_line(tmp_path, records, which, target, kind):
    """Issue 53, item 8: a real job killed (SIGKILL) once ``records`` tiles are recorded,
    then one object damaged (a recorded chunk, a tile record or job.json: a byte flipped,
    cut, deleted, a folder, a FIFO or a link in its place), then the same command: C is
    numpy's product, or one line names what is wrong (exit 2) and ``--overwrite`` then
    gives numpy's product (a link: outofcore never writes through one, so it stays named);
    nothing ever waits, and no byte outside the output changes."""
    with tempfile.TemporaryDirectory(dir=tmp_path) as scratch:
        folder = Path(scratch)
        reference = long_inputs(folder, 600, 400, 400)  # 50² chunks: 96 tiles at 96 KiB
        (folder / "mine.txt").write_bytes(b"the user's")
        command, c = matmul_command(folder), folder / "c.zarr"
        killed(command, c, records)
        done = tile_records(c)
        chosen = {
            "recorded chunk": lambda: recorded_objects(c)[which % len(recorded_objects(c))],
            "tile record": lambda: done[which % len(done)],
            "job.json": lambda: c / JOURNAL_DIR / "job.json",
        }[target]()
        damage(chosen, kind, folder / "spare")
        before = outside(folder, c)

        rerun = cli(*command, timeout=PATIENCE)
        assert "unexpected" not in rerun.stderr, rerun.stderr
        if rerun.returncode != 0:  # a deleted job.json: "no job journal" (nothing resumed)
            named = () if (target, kind) == ("job.json", "deleted") else (chosen.name,)
            line = one_line(rerun, 2, *named)
            again = cli(*command, "--overwrite", timeout=PATIENCE)
            if kind == "symlink":  # never written or deleted through: named again
                one_line(again, 2, chosen.name, "link")
                assert chosen.is_symlink(), line
                assert outside(folder, c) == before
                return
            assert again.returncode == 0, (line, again.stderr)
        got = zarr.open_array(str(c), mode="r")[...]
        np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-3)
        assert outside(folder, c) == before

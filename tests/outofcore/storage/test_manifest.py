"""Deletion only from a manifest (issue 28, item 2), written as an adversary.

outofcore deletes exactly the keys it writes (chunk keys of its array's own grid, its
metadata, its journal's records), one at a time, never a folder by walking it, never
through a symbolic link; anything else found anywhere inside an output makes
``--overwrite`` refuse, in one line naming it, before anything is deleted.  An existing
``zarr.Array`` given as the output is written only if outofcore made it.  Outputs no
array can live in (inside a zip, under /proc) are refused in one line.

Every refusal asserts that no byte, name or link changed anywhere under the test's
folder (the inputs, the output, a link's target beside it).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest
import zarr

import outofcore
from outofcore.errors import InputError, OutputExistsError
from outofcore.frontends.generate import random_array
from outofcore.journal.lease import LEASE_NAME
from outofcore.journal.records import INPUTS_DIR, JOB_NAME, PARTIALS_DIR, TILES_DIR, Journal
from outofcore.journal.status import job_status
from outofcore.operands.reading import ReadError
from outofcore.storage import deleting, manifest
from outofcore.storage.locations import locate
from outofcore.storage.manifest import JOURNAL_DIR, StrangersError, chunk_keys_of, output_contents
from tests.helpers import (
    assert_gemm_close,
    assert_product_close,
    break_chunk,
    cli,
    random_matrix,
    restore_chunk,
    write_zarr,
)

#: A zarr LocalStore write in flight, and one of outofcore's chunk files, killed.
TEMPORARY = "0123456789abcdef0123456789abcdef.partial"


def snapshot(folder: Path) -> dict[str, object]:
    """Every name under ``folder`` (not following links) with its bytes, link target or
    kind: any change anywhere shows."""
    found: dict[str, object] = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            found[name] = ("link", os.readlink(path))
        elif path.is_dir():
            found[name] = "folder"
        elif path.is_file():
            found[name] = path.read_bytes()
        else:
            found[name] = "special"
    return found


@pytest.fixture
def job(tmp_path, monkeypatch):
    """A (37x29, chunks 10x7) and B (29x23, chunks 7x8), ragged, and C = A @ B written by
    a job (several tiles); the working directory is the folder."""
    rng = np.random.default_rng(28)
    a = random_matrix(rng, (37, 29), "float32")
    b = random_matrix(rng, (29, 23), "float32")
    write_zarr(tmp_path / "a.zarr", a, (10, 7))
    write_zarr(tmp_path / "b.zarr", b, (7, 8))
    monkeypatch.chdir(tmp_path)
    run("c.zarr")
    return tmp_path, a, b


def run(out, **options):
    options = {"memory": 24 * 1024, "client": "sync", "progress": False, **options}
    return outofcore.matmul("a.zarr", "b.zarr", out, **options)


def command(*args: str) -> tuple[int, list[str]]:
    """``outofcore ARGS`` (a new process): its exit status and stderr's lines."""
    done = cli(*args)
    return done.returncode, done.stderr.strip().splitlines()


def journal_id(c: Path) -> str:
    return job_status(c)["journal_id"]


def place(c: Path, stranger: str) -> None:
    """Put ``stranger`` (a path in ``c``; ``{id}`` the journal id; ending in ``/``: an
    empty folder) into the output."""
    path = c / stranger.format(id=journal_id(c))
    if stranger.endswith("/"):
        path.mkdir(parents=True)
        return
    if path.parent.is_file():  # a chunk key: made a folder
        path.parent.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(b"a user's bytes")


#: What is put into the output, and how the refusal names it (a folder outofcore does
#: not write is named, not entered).
STRANGERS = [
    ("c/notes.txt", "c/notes.txt"),  # a user's file in the chunk folder
    ("c/0/notes.txt", "c/0/notes.txt"),
    ("c/userdir/f.txt", "c/userdir/"),  # a user's folder in it
    ("c/userdir/", "c/userdir/"),  # an empty one
    ("c/0/99", "c/0/99"),  # a chunk key outside the array's grid
    ("c/0/0.bak", "c/0/0.bak"),
    ("c/0/0/x", "c/0/0/"),  # a folder where a chunk would be
    ("c/0/fifo", "c/0/fifo"),  # a pipe: never opened
    ("_outofcore/mine.txt", "_outofcore/mine.txt"),  # a user's file in the journal
    ("_outofcore/tiles/{id}/tile-0-0.json.orig", "_outofcore/tiles/{id}/tile-0-0.json.orig"),
    ("_outofcore/tiles/{id}/notes/", "_outofcore/tiles/{id}/notes/"),
    ("_outofcore/partials/x/tile-0-0-k0of2/rows-0.npz", "x/tile-0-0-k0of2/rows-0.npz"),
    ("_outofcore/inputs/..json.txt", "_outofcore/inputs/..json.txt"),
    ("notes/", "notes"),  # at the top
]


@pytest.mark.parametrize(("stranger", "named"), STRANGERS)
def test_overwrite_refuses_anything_outofcore_did_not_write_and_changes_nothing(
    job, stranger, named
):
    folder, _, _ = job
    place(folder / "c.zarr", stranger)
    before = snapshot(folder)
    status, lines = command(
        "matmul", "a.zarr", "b.zarr", "-o", "c.zarr", "--overwrite", "--scheduler", "sync",
    )  # fmt: skip
    assert status == 2 and len(lines) == 1, lines
    assert named.format(id=journal_id(folder / "c.zarr")) in lines[0], lines
    assert "which outofcore did not write" in lines[0] and "--overwrite" not in lines[0]
    with pytest.raises(InputError, match="which outofcore did not write"):
        run("c.zarr", overwrite=True)
    assert snapshot(folder) == before


def test_strangers_are_named_five_and_counted(job):
    folder, _, _ = job
    for i in range(8):
        (folder / "c.zarr" / "c" / f"user-{i}.txt").write_text("mine")
    before = snapshot(folder)
    status, lines = command(
        "matmul", "a.zarr", "b.zarr", "-o", "c.zarr", "--overwrite", "--scheduler", "sync",
    )  # fmt: skip
    assert status == 2 and len(lines) == 1
    assert (
        "c/user-0.txt, c/user-1.txt, c/user-2.txt, c/user-3.txt, c/user-4.txt and 3 more"
        in (lines[0])
    )
    assert snapshot(folder) == before


def test_random_overwrite_refuses_strangers_inside(tmp_path):
    random_array(tmp_path / "r.zarr", (30, 20), (7, 6))
    (tmp_path / "r.zarr" / "c" / "0" / "keep.txt").write_text("mine")
    before = snapshot(tmp_path)
    with pytest.raises(InputError, match=r"c/0/keep.txt, which outofcore did not write"):
        random_array(tmp_path / "r.zarr", (30, 20), (7, 6), overwrite=True)
    failed = cli("random", str(tmp_path / "r.zarr"), "--shape", "30,20", "--chunks", "7,6",
                 "--overwrite")  # fmt: skip
    assert failed.returncode == 2 and len(failed.stderr.strip().splitlines()) == 1
    assert "c/0/keep.txt" in failed.stderr
    assert snapshot(tmp_path) == before
    (tmp_path / "r.zarr" / "c" / "0" / "keep.txt").unlink()
    random_array(tmp_path / "r.zarr", (11, 5), (4, 4), seed=3, overwrite=True)  # a new grid
    assert output_contents(zarr.storage.LocalStore(tmp_path / "r.zarr"), "").chunks == tuple(
        f"c/{i}/{j}" for i in range(3) for j in range(2)
    )


# -- symbolic links ----------------------------------------------------------------------


@pytest.fixture
def victim(tmp_path):
    """A folder beside the output whose files look like chunks: never to be touched."""
    folder = tmp_path / "victim"
    (folder / "0").mkdir(parents=True)
    (folder / "0" / "0").write_bytes(b"precious")
    (folder / "zarr.json").write_text("{}")
    (folder / "notes.txt").write_text("precious")
    return folder


def test_a_symlinked_chunk_folder_is_refused_and_its_target_untouched(job, victim):
    folder, _, _ = job
    c = folder / "c.zarr"
    for path in sorted((c / "c").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    (c / "c").rmdir()
    os.symlink(victim, c / "c")
    before = snapshot(folder)
    for extra in (["--overwrite"], []):
        failed = cli(
            "matmul", "a.zarr", "b.zarr", "-o", "c.zarr", "--scheduler", "sync", *extra,
        )  # fmt: skip
        lines = failed.stderr.strip().splitlines()
        assert failed.returncode == 2 and len(lines) == 1, failed.stderr
        assert f"c -> {victim}" in lines[0] and "symbolic link" in lines[0], lines
        assert "Traceback" not in failed.stderr and "unexpected" not in failed.stderr
    with pytest.raises(InputError, match="symbolic link"):
        run("c.zarr", overwrite=True)
    with pytest.raises(InputError, match="symbolic link"):
        random_array("c.zarr", (37, 23), (5, 5), overwrite=True)
    assert snapshot(folder) == before


@pytest.mark.parametrize(
    "link", ["c/0", "c/0/0", f"{JOURNAL_DIR}/tiles", JOURNAL_DIR, f"{JOURNAL_DIR}/{JOB_NAME}"]
)
def test_a_link_anywhere_inside_is_refused_with_overwrite_or_not(job, victim, link):
    """Nothing deleted through it, nor written: a rerun (complete: refused anyway) and the
    output given as an array name the link first."""
    folder, _, _ = job
    c = folder / "c.zarr"
    path = c / link
    if path.is_dir():
        for inner in sorted(path.rglob("*"), reverse=True):
            inner.unlink() if inner.is_file() else inner.rmdir()
        path.rmdir()
        os.symlink(victim, path)
    else:
        path.unlink()
        os.symlink(victim / "0" / "0", path)
    before = snapshot(folder)
    for extra in (["--overwrite"], []):
        status, lines = command(
            "matmul", "a.zarr", "b.zarr", "-o", "c.zarr", "--scheduler", "sync", *extra,
        )  # fmt: skip
        assert status == 2 and len(lines) == 1, lines
        assert f"{link} -> {victim}" in lines[0], lines
    for overwrite in (True, False):
        with pytest.raises(InputError, match=f"{link} -> {victim}"):
            run(zarr.open_array(str(c), mode="r+"), overwrite=overwrite)
    assert snapshot(folder) == before


def test_deletion_never_goes_through_a_link_made_after_the_listing(job, victim):
    """The race: a folder swapped for a link between the listing and the deletion."""
    folder, _, _ = job
    c = folder / "c.zarr"
    store = zarr.storage.LocalStore(c)
    contents = output_contents(store, "")
    assert not contents.strangers and not contents.links
    for inner in sorted((c / "c" / "0").rglob("*"), reverse=True):
        inner.unlink()
    (c / "c" / "0").rmdir()
    os.symlink(victim, c / "c" / "0")
    before = snapshot(victim)
    with pytest.raises(StrangersError, match="no longer a folder"):
        deleting.delete_keys(store, "", contents.chunks)
    assert snapshot(victim) == before


# -- what overwrite deletes --------------------------------------------------------------


def test_overwrite_of_a_clean_output_deletes_only_its_keys_and_is_right(job):
    """Old chunks of another grid, killed writes' temporary files, old journal records:
    all outofcore's, all deleted; the new product is right."""
    folder, a, b = job
    c = folder / "c.zarr"
    old = journal_id(c)
    (c / "c" / "0" / f"0.{TEMPORARY}").write_bytes(b"killed")  # a chunk file being written
    (c / JOURNAL_DIR / TILES_DIR / old / f"tile-0-0.{TEMPORARY}").write_bytes(b"{")
    (c / f"zarr.{TEMPORARY}").write_bytes(b"{")
    status, lines = command(
        "matmul", "a.zarr", "b.zarr", "-o", "c.zarr", "--overwrite", "--scheduler", "sync",
        "--memory", "64KiB", "--alpha", "2", "-q",
    )  # fmt: skip
    assert status == 0, lines
    assert_gemm_close(zarr.open_array(c)[...], a, b, alpha=2.0, accumulated_in=np.float32)
    contents = output_contents(zarr.storage.LocalStore(c), "")
    assert not contents.strangers and not contents.links
    assert [p.name for p in (c / JOURNAL_DIR / TILES_DIR).iterdir()] == [journal_id(c)] != [old]
    assert not list(c.rglob(f"*{TEMPORARY}"))
    assert not (c / JOURNAL_DIR / LEASE_NAME).exists()


def test_overwrite_of_a_format_2_output(job):
    folder, a, b = job
    run("v2.zarr", zarr_format=2)
    (folder / "v2.zarr" / "0.0.bak").write_text("mine")
    before = snapshot(folder)
    with pytest.raises(InputError, match=r"0\.0\.bak, which outofcore did not write"):
        run("v2.zarr", overwrite=True, zarr_format=2)
    assert snapshot(folder) == before
    (folder / "v2.zarr" / "0.0.bak").unlink()
    c = run("v2.zarr", overwrite=True, zarr_format=2, memory=64 * 1024)
    assert_product_close(c[...], a, b)


def test_the_manifest_knows_every_form_outofcore_writes():
    """Chunk keys of each encoding and grid, the journal's keys, temporary files."""
    v3 = chunk_keys_of(
        "zarr.json",
        b'{"zarr_format": 3, "node_type": "array", "shape": [37, 23],'
        b' "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [10, 8]}},'
        b' "chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}}}',
    )
    assert v3 is not None and v3.grid == (4, 3)
    assert v3.is_key("c.3.2") and not v3.is_key("c.4.0") and not v3.is_key("c/0/0")
    assert not v3.is_key("c.01.0") and not v3.is_key("c.0") and not v3.is_key("c.-1.0")
    v2 = chunk_keys_of(".zarray", b'{"shape": [5, 5], "chunks": [2, 2], "zarr_format": 2}')
    assert v2 is not None and v2.is_key("2.2") and not v2.is_key("3.0") and not v2.is_key("c/0/0")
    assert chunk_keys_of("zarr.json", b"not json") is None
    assert chunk_keys_of("zarr.json", b'{"node_type": "group"}') is None
    for hostile in (  # damaged metadata: no key is a chunk's, nothing raises
        b"[1]",
        b'{"node_type": "array", "shape": [3], "chunk_grid": 5}',
        b'{"node_type": "array", "shape": [3], "chunk_grid": {"name": "regular",'
        b' "configuration": [1]}, "chunk_key_encoding": {"name": [1]}}',
        b'{"node_type": "array", "shape": [3.5], "chunk_grid": {"name": "regular",'
        b' "configuration": {"chunk_shape": [0]}}, "chunk_key_encoding": {"name": "default"}}',
        b'{"node_type": "array", "shape": [true], "chunk_grid": {"name": "regular",'
        b' "configuration": {"chunk_shape": [1]}}, "chunk_key_encoding": {"name": "default",'
        b' "configuration": {"separator": "/.."}}}',
    ):
        assert chunk_keys_of("zarr.json", hostile) is None, hostile
    whose = manifest.whose
    for key in (
        f"{JOURNAL_DIR}/{JOB_NAME}", f"{JOURNAL_DIR}/{LEASE_NAME}",
        f"{JOURNAL_DIR}/{INPUTS_DIR}/4b0d1cb423bb.json",
        f"{JOURNAL_DIR}/{TILES_DIR}/4b0d1cb423bb/tile-12-0.json",
        f"{JOURNAL_DIR}/{PARTIALS_DIR}/j1/tile-0-3-k1of4.json",
        f"{JOURNAL_DIR}/{PARTIALS_DIR}/j1/tile-0-3-k1of4/rows-120.npy",
        f"{JOURNAL_DIR}/{TILES_DIR}/j1/tile-0-0.{TEMPORARY}",
    ):  # fmt: skip
        assert whose(key, ()) == "journal", key
    for key in (
        f"{JOURNAL_DIR}/{TILES_DIR}/../tile-0-0.json", f"{JOURNAL_DIR}/{TILES_DIR}/tile-0-0.json",
        f"{JOURNAL_DIR}/job.json.bak", f"{JOURNAL_DIR}/{TILES_DIR}/j1/tile-0-0.npy",
        f"{JOURNAL_DIR}/{TILES_DIR}/j1/notes.{TEMPORARY}", "notes.txt", "c/0/0",
    ):  # fmt: skip
        assert whose(key, ()) is None, key
    assert whose("c.1.2", (v3,)) == "chunks" and whose(f"c.1.{TEMPORARY}", (v3,)) == "chunks"
    assert whose("zarr.json", ()) == whose(f"zarr.{TEMPORARY}", ()) == "metadata"
    assert manifest.without_lease(
        [f"{JOURNAL_DIR}/{LEASE_NAME}", f"{JOURNAL_DIR}/lease.{TEMPORARY}", "zarr.json"]
    ) == ("zarr.json",)
    assert (JOB_NAME, LEASE_NAME, INPUTS_DIR, TILES_DIR, PARTIALS_DIR) == (
        manifest.JOB_NAME, manifest.LEASE_NAME, manifest.INPUTS_DIR, manifest.TILES_DIR,
        manifest.PARTIALS_DIR,
    )  # fmt: skip


def test_journal_keys_of_a_stack_name_their_entry_and_no_stranger_passes_for_one():
    whose, tiles = manifest.whose, f"{JOURNAL_DIR}/{TILES_DIR}/j1"
    parts = f"{JOURNAL_DIR}/{PARTIALS_DIR}/j1"
    for key in (
        f"{tiles}/tile-3-4-b12.json", f"{tiles}/tile-0-0-b0.json",
        f"{tiles}/tile-3-4-b{10**18}.json", f"{tiles}/tile-3-4-b12.{TEMPORARY}",
        f"{parts}/tile-3-4-b12-k0of2.json", f"{parts}/tile-3-4-b12-k1of2/rows-0.npy",
    ):  # fmt: skip
        assert whose(key, ()) == "journal", key
    assert manifest.is_our_folder(f"{parts}/tile-3-4-b12-k1of2", ())
    for name in (
        "tile-3-4-b-1", "tile-3-4-bx", "tile-3-4-b", "tile-3-4-b012", "tile-3-4-b1-b2",
        "tile-3-4-B1", "tile-3-4b1", "tile-3-4-b1 ", "tile-3-4-b" + "9" * 20, "tile-3-4--b1",
        "tile-3-4-k0of2-b1", "tile-3-4-b1-k0of2",  # a part's record lives in partials/
    ):  # fmt: skip
        assert whose(f"{tiles}/{name}.json", ()) is None, name
    for name in ("tile-3-4-b-1-k0of2", "tile-3-4-k0of2-b1", "tile-3-4-bx-k0of2", "tile-3-4-b12"):
        assert whose(f"{parts}/{name}.json", ()) is None, name
        assert not manifest.is_our_folder(f"{parts}/{name}", ()), name


def test_finished_partials_go_by_the_manifest_and_strangers_stay_named(tmp_path, caplog):
    journal = Journal.for_output(locate(tmp_path / "c.zarr"))
    part = tmp_path / "c.zarr" / JOURNAL_DIR / PARTIALS_DIR / "j1"
    (part / "tile-0-0-k0of2").mkdir(parents=True)
    (part / "tile-0-0-k0of2.json").write_text("{}")
    (part / "tile-0-0-k0of2" / "rows-0.npy").write_bytes(b"x")
    (part / "tile-0-0-k0of2" / "notes.txt").write_text("mine")
    (part / "other").mkdir()
    (part / "other" / "f").write_text("mine")
    other_job = tmp_path / "c.zarr" / JOURNAL_DIR / PARTIALS_DIR / "j2" / "tile-0-0-k0of2.json"
    other_job.parent.mkdir()
    other_job.write_text("{}")
    with caplog.at_level(logging.WARNING, logger="outofcore"):
        journal.clear_partials("j1")
    left = sorted(str(p.relative_to(part)) for p in part.rglob("*"))
    assert left == ["other", "other/f", "tile-0-0-k0of2", "tile-0-0-k0of2/notes.txt"]
    assert other_job.exists()
    named = f"{JOURNAL_DIR}/{PARTIALS_DIR}/j1/other/, {JOURNAL_DIR}/{PARTIALS_DIR}/j1/tile-0-0"
    assert named in caplog.text


# -- a zarr.Array given as the output ----------------------------------------------------


def test_an_array_a_user_made_is_never_written(job):
    """``matmul(a, b, zarr.open_array("grp.zarr/y", mode="r+"))``: refused, with or without
    overwrite, naming it; empty or not."""
    folder, _, _ = job
    group = zarr.open_group(str(folder / "grp.zarr"), mode="w")
    group.create_array("y", shape=(37, 23), chunks=(10, 10), dtype="f4")[...] = 7.0
    group.create_array("empty", shape=(37, 23), chunks=(10, 10), dtype="f4")
    before = snapshot(folder)
    for name in ("y", "empty"):
        for overwrite in (False, True):
            out = zarr.open_array(str(folder / "grp.zarr" / name), mode="r+")
            with pytest.raises(InputError, match="outofcore did not write") as refused:
                run(out, overwrite=overwrite)
            assert f"grp.zarr/{name}" in str(refused.value)
            assert "overwrite=True" not in str(refused.value)
    assert snapshot(folder) == before


def test_an_array_outofcore_made_is_written_only_with_overwrite(job):
    folder, a, b = job
    c = zarr.open_array(str(folder / "c.zarr"), mode="r+")
    before = snapshot(folder)
    with pytest.raises(OutputExistsError, match="complete result of an earlier job"):
        run(c)
    random_array(folder / "r.zarr", (37, 23), (9, 5))
    r = zarr.open_array(str(folder / "r.zarr"), mode="r+")
    after_random = snapshot(folder)
    with pytest.raises(OutputExistsError, match="no outofcore job journal"):
        run(r)
    assert snapshot(folder) == after_random and before.items() <= after_random.items()
    (folder / "r.zarr" / "c" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="c/notes.txt, which outofcore did not write"):
        run(r, overwrite=True)
    (folder / "r.zarr" / "c" / "notes.txt").unlink()
    for out in (c, r):
        written = run(out, overwrite=True, alpha=3.0)
        assert_gemm_close(written[...], a, b, alpha=3.0, accumulated_in=np.float32)
    assert r.chunks == (9, 5)  # a given array keeps its own grid
    assert len(list((folder / "c.zarr" / JOURNAL_DIR / TILES_DIR).iterdir())) == 1


def test_an_incomplete_array_of_the_same_job_resumes_without_overwrite(job, outofcore_settings):
    folder, a, b = job
    outofcore_settings(read_retries=0)
    broken = break_chunk(folder / "a.zarr", "3/4")  # A's last rows: the last tiles' only
    with pytest.raises(ReadError, match="c/3/4"):
        run("d.zarr")
    done = job_status(folder / "d.zarr")["tiles_done"]
    restore_chunk(broken)
    d = zarr.open_array(str(folder / "d.zarr"), mode="r+")
    result = outofcore.api.run_job(
        "a.zarr", "b.zarr", d, memory=24 * 1024, client="sync", progress=False
    )
    assert result.summary["tiles_skipped"] == done > 0
    assert_product_close(d[...], a, b)


# -- outputs no array can live in --------------------------------------------------------


def test_an_output_in_a_zip_or_under_proc_is_one_line_exit_2(job):
    folder, _, _ = job
    import zipfile  # noqa: PLC0415

    with zipfile.ZipFile(folder / "x.zip", "w") as archive:
        archive.writestr("hello", "x")
    before = snapshot(folder)
    for out in (
        f"zip://out.zarr::{folder / 'x.zip'}",
        f"zip://{folder / 'x.zip'}/out.zarr",
        str(folder / "x.zip" / "out.zarr"),
        "/proc/self/out.zarr",
        "/proc/out.zarr",
    ):
        failed = cli("matmul", "a.zarr", "b.zarr", "-o", out, "--scheduler", "sync")
        lines = failed.stderr.strip().splitlines()
        assert failed.returncode == 2 and len(lines) == 1, (out, failed.stderr)
        assert "unexpected" not in lines[0] and "cannot be" in lines[0], lines
    failed = cli("random", "/proc/self/r.zarr", "--shape", "3,3", "--chunks", "2,2")
    assert failed.returncode == 2 and len(failed.stderr.strip().splitlines()) == 1
    assert "proc file system, not a disk" in failed.stderr  # not '0 B free'
    assert snapshot(folder) == before

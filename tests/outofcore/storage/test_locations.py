"""Locations compared as locations, not spellings; ``--overwrite`` replaces only what
outofcore made; ``file://`` outputs work (issue 19, items 1-3).

Every data-loss case runs on real zarr stores on disk (and S3 on a moto server) and
asserts that the inputs and foreign files are byte for byte unchanged afterwards.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import zarr

import outofcore
from outofcore.errors import InputError, OutputExistsError
from outofcore.frontends.generate import random_array
from outofcore.journal.targets import what_is_at
from outofcore.storage.locations import Location, locate
from tests.helpers import (
    assert_gemm_close,
    assert_product_close,
    cli,
    random_matrix,
    serve_folder,
    write_zarr,
)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its content."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A folder holding A (37x29) and B (29x23) with ragged chunks; the working directory."""
    rng = np.random.default_rng(19)
    write_zarr(tmp_path / "a.zarr", random_matrix(rng, (37, 29), "float32"), (10, 7))
    write_zarr(tmp_path / "b.zarr", random_matrix(rng, (29, 23), "float32"), (7, 8))
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "a.zarr", tmp_path / "link.zarr")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def spellings(folder: Path, name: str) -> list[str]:
    """Ways of naming ``folder/name``: path, relative, ``..``, trailing slash, ``file://``."""
    return [
        str(folder / name),
        name,
        f"./{name}/",
        f"sub/../{name}",
        f"{folder}//{name}",
        f"file://{folder}/{name}",
        f"file://{folder}/{name}/",
    ]


def run(a, b, out, **options):
    return outofcore.matmul(a, b, out, client="sync", progress=False, **options)


# -- locations --------------------------------------------------------------------------


def test_spellings_of_one_local_array_are_one_location(folder):
    expected = Location("file", "", os.path.realpath(folder / "a.zarr"))
    for spelling in [*spellings(folder, "a.zarr"), "link.zarr", f"file://{folder}/link.zarr"]:
        assert locate(spelling) == expected, spelling
    opened = zarr.open_array(f"file://{folder}/a.zarr", mode="r")  # an FsspecStore
    assert locate(opened) == expected
    assert locate(zarr.open_array(str(folder / "link.zarr"), mode="r")) == expected
    assert locate(folder / "b.zarr") != expected
    assert locate("a.zarr/c").path.startswith(expected.path + "/")
    assert locate("a.zarr").contains(locate("a.zarr/c/0")) and not locate("a.zarr").contains(
        locate("a.zarr2")
    )


def test_object_store_spellings_and_endpoints():
    pytest.importorskip("s3fs", reason="s3fs (the s3 extra) is not installed")
    one = locate("s3://bucket/data/a.zarr", {"endpoint_url": "http://127.0.0.1:9000"})
    for spelling in (
        "s3://bucket//data/a.zarr/",
        "s3a://bucket/data/./a.zarr",
        "s3://bucket/x/../data/a.zarr",
    ):
        assert locate(spelling, {"endpoint_url": "http://127.0.0.1:9000/"}) == one, spelling
    assert locate("s3://bucket/data/a.zarr", {"endpoint_url": "http://127.0.0.1:9001"}) != one
    assert one.target == "s3://bucket/data/a.zarr"


def test_unknown_protocols_and_missing_packages_are_named():
    with pytest.raises(InputError, match=r"fsspec knows no protocol 'nosuch'"):
        locate("nosuch://bucket/a.zarr")
    try:
        import gcsfs  # noqa: F401, PLC0415
    except ImportError:
        with pytest.raises(InputError, match=r"gs:// needs a package that is missing.*gcsfs"):
            locate("gs://bucket/a.zarr")


@pytest.mark.parametrize("which", ["a", "b"])
def test_an_input_is_never_the_output_however_spelled(folder, which):
    before = snapshot(folder)
    for spelling in [
        *spellings(folder, f"{which}.zarr"),
        "link.zarr" if which == "a" else "b.zarr",
    ]:
        for a in ("a.zarr", f"file://{folder}/a.zarr"):
            with pytest.raises(InputError, match="same array as input"):
                run(a, "b.zarr", spelling, overwrite=True)
    assert snapshot(folder) == before


def test_the_addend_is_never_the_output_however_spelled(folder):
    rng = np.random.default_rng(3)
    write_zarr(folder / "d.zarr", random_matrix(rng, (37, 23), "float32"), (9, 9))
    before = snapshot(folder)
    for spelling in spellings(folder, "d.zarr"):
        with pytest.raises(InputError, match="same array as input addend"):
            run("a.zarr", "b.zarr", spelling, beta=1.0, addend="d.zarr", overwrite=True)
    assert snapshot(folder) == before


def test_nested_outputs_and_inputs_are_refused(folder):
    before = snapshot(folder)
    for out in ("a.zarr/inner.zarr", f"file://{folder}/link.zarr/c", str(folder)):
        with pytest.raises(InputError, match="nested in one another"):
            run("a.zarr", "b.zarr", out, overwrite=True)
    assert snapshot(folder) == before


def test_the_cli_refuses_file_urls_of_an_input_as_output(folder):
    """The issue's command: `matmul file://$PWD/a.zarr b.zarr -o a.zarr --overwrite`."""
    before = snapshot(folder)
    for args in (
        (f"file://{folder}/a.zarr", "b.zarr", "-o", "a.zarr"),
        ("a.zarr", "b.zarr", "-o", f"file://{folder}/a.zarr"),
    ):
        done = cli("matmul", *args, "--overwrite", "--scheduler", "sync")
        assert done.returncode == 2, done.stderr
        assert "same array as input A" in done.stderr
        assert "Traceback" not in done.stderr
    assert snapshot(folder) == before


# -- what --overwrite may replace ---------------------------------------------------------


def test_overwrite_never_deletes_a_folder_that_is_not_a_zarr_array(folder):
    (folder / "results" / "2024").mkdir(parents=True)
    (folder / "results" / "2024" / "thesis.tex").write_text("x")
    before = snapshot(folder)
    for overwrite in (True, False):
        with pytest.raises(
            InputError,
            match=r"results' is a folder that is not a zarr array "
            r"\(it holds 2024\)",
        ) as raised:
            run("a.zarr", "b.zarr", "results", overwrite=overwrite)
        assert "overwrite=True" not in str(raised.value)
    done = cli("matmul", "a.zarr", "b.zarr", "-o", "results", "--overwrite", "--scheduler", "sync")
    assert done.returncode == 2 and "folder that is not a zarr array" in done.stderr
    assert "--overwrite" not in done.stderr
    assert snapshot(folder) == before


def test_overwrite_never_deletes_a_group_or_a_file(folder):
    group = zarr.open_group(str(folder / "group.zarr"), mode="w")
    group.create_array("x", shape=(4, 4), dtype="f4")[...] = np.arange(16).reshape(4, 4)
    group.create_array("y", shape=(2,), dtype="i2")[...] = [3, 4]
    (folder / "notes.txt").write_text("keep me")
    before = snapshot(folder)
    with pytest.raises(InputError, match=r"is a zarr group \(members: x, y\)"):
        run("a.zarr", "b.zarr", "group.zarr", overwrite=True)
    with pytest.raises(InputError, match=r"notes.txt' is a file, not a zarr array"):
        run("a.zarr", "b.zarr", "notes.txt", overwrite=True)
    with pytest.raises(InputError, match="is a zarr group"):
        random_array("group.zarr", (5, 5), (2, 2), overwrite=True)
    assert snapshot(folder) == before


def test_a_zarr_array_outofcore_did_not_write_is_never_replaced(folder):
    """A foreign array (no outofcore record, no journal) is someone's data: refused always."""
    rng = np.random.default_rng(5)
    write_zarr(folder / "theirs.zarr", random_matrix(rng, (37, 23), "float32"), (10, 10))
    before = snapshot(folder)
    for overwrite in (True, False):
        with pytest.raises(InputError, match="outofcore did not write") as raised:
            run("a.zarr", "b.zarr", "theirs.zarr", overwrite=overwrite)
        assert "overwrite=True" not in str(raised.value)
        with pytest.raises(InputError, match="outofcore did not write"):
            random_array("theirs.zarr", (5, 5), (2, 2), overwrite=overwrite)
    assert snapshot(folder) == before


def test_an_outofcore_array_with_foreign_files_in_it_is_refused(folder):
    run("a.zarr", "b.zarr", "c.zarr")
    (folder / "c.zarr" / "notes.txt").write_text("mine")
    before = snapshot(folder)
    with pytest.raises(InputError, match=r"also holds notes.txt, which outofcore did not write"):
        run("a.zarr", "b.zarr", "c.zarr", overwrite=True)
    assert snapshot(folder) == before


def test_overwrite_replaces_arrays_outofcore_made(folder):
    """A job's output and `outofcore random`'s arrays: replaced with overwrite, refused without."""
    a = zarr.open_array("a.zarr", mode="r")[...]
    b = zarr.open_array("b.zarr", mode="r")[...]
    run("a.zarr", "b.zarr", "c.zarr")
    with pytest.raises(OutputExistsError, match="complete result of an earlier job"):
        run("a.zarr", "b.zarr", "c.zarr")
    c = run("a.zarr", "b.zarr", "./c.zarr/", overwrite=True, alpha=2.0)
    assert_gemm_close(c[...], a, b, alpha=2.0, accumulated_in=np.float32)

    random_array("r.zarr", (37, 23), (5, 6), seed=4)
    assert what_is_at(locate("r.zarr")).kind == "array"
    with pytest.raises(OutputExistsError, match="already exists"):
        random_array("r.zarr", (37, 23), (5, 6), seed=4)
    random_array("r.zarr", (3, 3), (2, 2), seed=5, overwrite=True)  # replaces its own array
    c = run("a.zarr", "b.zarr", "r.zarr", overwrite=True)  # and a job replaces it too
    assert_product_close(c[...], a, b)


# -- file:// outputs ------------------------------------------------------------------------


def test_file_url_outputs_work_like_paths(folder):
    a = zarr.open_array("a.zarr", mode="r")[...]
    b = zarr.open_array("b.zarr", mode="r")[...]
    url = f"file://{folder}/deep/er/c.zarr"
    c = run(f"file://{folder}/a.zarr", f"file://{folder}/b.zarr", url, memory=64 * 1024)
    assert c.attrs["outofcore"]["complete"] is True
    assert_product_close(zarr.open_array(str(folder / "deep/er/c.zarr"), mode="r")[...], a, b)
    assert outofcore.verify("a.zarr", "b.zarr", url).passed

    done = cli("matmul", "a.zarr", "b.zarr", "-o", f"file://{folder}/d.zarr", "--scheduler", "sync")
    assert done.returncode == 0, done.stderr
    assert_product_close(zarr.open_array(str(folder / "d.zarr"), mode="r")[...], a, b)
    status = cli("status", f"file://{folder}/d.zarr/")
    assert status.returncode == 0 and "complete" in status.stdout


def test_a_file_url_output_resumes_from_a_path_spelling(folder):
    """One output, two spellings: the second run finds the first's journal (resume)."""
    from outofcore.journal.records import Journal  # noqa: PLC0415

    run("a.zarr", "b.zarr", f"file://{folder}/c.zarr")
    journal = Journal.for_output(locate("c.zarr/"))
    assert journal.read_job()["complete"] is True
    assert (
        Journal.for_output(locate(f"file://{folder}/c.zarr")).local_folder == journal.local_folder
    )


# -- object stores ----------------------------------------------------------------------------


def test_object_store_spellings_of_an_input_are_refused(moto_server, s3_bucket):
    options = moto_server.options
    rng = np.random.default_rng(8)
    for name, shape in (("a", (13, 11)), ("b", (11, 7))):
        array = zarr.create_array(
            f"{s3_bucket}/{name}.zarr",
            shape=shape,
            chunks=(5, 5),
            dtype="f4",
            storage_options=options,
        )
        array[...] = random_matrix(rng, shape, "float32")

    def job(out: str) -> None:
        outofcore.matmul(
            f"{s3_bucket}/a.zarr",
            f"{s3_bucket}/b.zarr",
            out,
            client="sync",
            progress=False,
            overwrite=True,
            storage_options=options,
        )

    bucket = s3_bucket.removeprefix("s3://")
    for out in (f"s3://{bucket}//a.zarr/", f"s3a://{bucket}/a.zarr", f"s3://{bucket}/x/../a.zarr"):
        with pytest.raises(InputError, match="same array as input A"):
            job(out)
    theirs = f"{s3_bucket}/theirs.zarr"
    zarr.create_array(theirs, shape=(13, 7), chunks=(5, 5), dtype="f4", storage_options=options)
    with pytest.raises(InputError, match="outofcore did not write"):
        job(theirs)
    assert zarr.open_array(f"{s3_bucket}/a.zarr", mode="r", storage_options=options).shape == (
        13,
        11,
    )
    assert zarr.open_array(theirs, mode="r", storage_options=options).shape == (13, 7)


# -- http:// inputs, file://localhost ---------------------------------------------------------


def test_the_options_a_location_carries_are_never_written_shown_or_told(
    moto_server, s3_bucket, tmp_path, caplog
):
    """A location carries the storage options it was resolved with, to open its store;
    a secret among them is in no repr, no object or file written under an output (its
    array, journal, lease) and no error message or log line of outofcore."""
    import fsspec  # noqa: PLC0415

    secret = "never-written-5ec7e7"
    options = {**moto_server.options, "secret": secret}
    where = locate(f"{s3_bucket}/c.zarr", options)
    assert where.options == options  # carried, to open its store
    assert where == locate(f"{s3_bucket}/c.zarr", moto_server.options)  # never compared
    for shown in (repr(where), str(where), repr(outofcore.JobSpec(storage_options=options))):
        assert secret not in shown
    caplog.set_level("DEBUG", logger="outofcore")
    for name, shape in (("a", (13, 11)), ("b", (11, 7))):
        random_array(f"{s3_bucket}/{name}.zarr", shape, (5, 5), storage_options=options)

    def job(out: str) -> None:
        a, b = f"{s3_bucket}/a.zarr", f"{s3_bucket}/b.zarr"
        outofcore.matmul(a, b, out, client="sync", progress=False, storage_options=options)

    job(f"{s3_bucket}/c.zarr")
    job(str(tmp_path / "c.zarr"))  # a local output of remote inputs
    state = outofcore.job_status(f"{s3_bucket}/c.zarr", options)
    assert state["state"] == "complete" and secret not in repr(state)
    refusals = []
    for attempt in (
        lambda: job(f"{s3_bucket}/c.zarr"),  # complete already
        lambda: job(f"{s3_bucket}/a.zarr"),  # an input
        lambda: job(f"{s3_bucket}/nothing?versionId=1.zarr"),  # a name s3fs misreads
        lambda: outofcore.job_status(f"{s3_bucket}/nothing.zarr", options),
        lambda: outofcore.verify(
            f"{s3_bucket}/a.zarr", f"{s3_bucket}/b.zarr", f"{s3_bucket}/no.zarr",
            storage_options=options,
        ),
    ):  # fmt: skip
        with pytest.raises((InputError, OutputExistsError)) as refused:
            attempt()
        refusals.append(f"{refused.value!s} {refused.value!r}")
    assert all(secret not in text for text in refusals), refusals
    assert not [r for r in caplog.records if secret in r.getMessage()]
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **moto_server.options)
    written = fs.find(s3_bucket)
    assert any("_outofcore/job.json" in key for key in written), written
    assert all(secret.encode() not in fs.cat_file(key) for key in written)
    files = [path for path in (tmp_path / "c.zarr").rglob("*") if path.is_file()]
    assert files and all(secret.encode() not in path.read_bytes() for path in files)


@pytest.fixture
def web_server(folder):
    """A plain HTTP server on loopback serving ``folder`` (read only, directory listings)."""
    with serve_folder(folder) as url:
        yield url


def test_an_http_input_is_read_from_its_url(folder, web_server):
    """``http://host/a.zarr`` opened the URL ``http://http:/host/a.zarr`` (fsspec keeps the
    scheme in an HTTP path); it is read over HTTP, the same array as on disk."""
    a = zarr.open_array("a.zarr", mode="r")[...]
    b = zarr.open_array("b.zarr", mode="r")[...]
    assert locate(f"{web_server}/a.zarr/").target == f"{web_server}/a.zarr"
    assert locate(f"{web_server}//a.zarr") == locate(f"{web_server}/a.zarr")
    c = run(f"{web_server}/a.zarr", "b.zarr", "c.zarr")
    assert_product_close(c[...], a, b)
    done = cli("matmul", f"{web_server}/a.zarr", "b.zarr", "-o", "d.zarr", "--scheduler", "sync")
    assert done.returncode == 0, done.stderr
    assert_product_close(zarr.open_array("d.zarr", mode="r")[...], a, b)


def test_an_http_output_is_refused_before_any_request_writes(folder, web_server):
    before = snapshot(folder)
    for command in (
        ("matmul", "a.zarr", "b.zarr", "-o", f"{web_server}/c.zarr", "--scheduler", "sync"),
        ("random", f"{web_server}/r.zarr", "--shape", "4,4", "--chunks", "2,2"),
    ):
        refused = cli(*command)
        assert refused.returncode == 2, refused.stderr
        line = f"the output '{web_server}/"
        assert line in refused.stderr and "http:// is read only" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert snapshot(folder) == before


def test_file_urls_name_this_machine_only(folder):
    """``file://localhost/p`` is ``/p`` (it wrote under ``./localhost/``); another host or a
    relative path after ``file://`` is refused, naming it, before anything is written."""
    assert locate(f"file://localhost{folder}/a.zarr") == locate("a.zarr")
    assert locate(f"file://LocalHost{folder}/a.zarr") == locate("a.zarr")
    a = zarr.open_array("a.zarr", mode="r")[...]
    b = zarr.open_array("b.zarr", mode="r")[...]
    run("a.zarr", "b.zarr", f"file://localhost{folder}/c.zarr")
    assert_product_close(zarr.open_array(str(folder / "c.zarr"), mode="r")[...], a, b)
    assert not (folder / "localhost").exists()
    before = snapshot(folder)
    for url in ("file://otherhost/tmp/c.zarr", "file://c2.zarr"):
        with pytest.raises(InputError, match="names an absolute path on this machine"):
            locate(url)
        refused = cli("matmul", "a.zarr", "b.zarr", "-o", url, "--scheduler", "sync")
        assert refused.returncode == 2 and url in refused.stderr, refused.stderr
    assert snapshot(folder) == before


def test_an_http_array_is_located_by_its_url(folder, web_server):
    opened = zarr.open_array(f"{web_server}/a.zarr", mode="r")
    assert locate(opened) == locate(f"{web_server}/a.zarr")
    assert str(locate(opened)) == f"{web_server}/a.zarr"

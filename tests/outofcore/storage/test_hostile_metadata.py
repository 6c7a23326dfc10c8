"""An input's (or an existing output's) zarr metadata is read within bounds (issue 42,
items 4 and 6): a ``zarr.json``, ``.zarray`` or ``.zattrs`` nested 10**5 deep, larger than
a document may be, or not a regular file is one line naming the file, exit 2, before
zarr parses it (it was a RecursionError, exit 3 'unexpected'; a 150 MB ``zarr.json``
was read whole, 519 MiB at the peak), on this machine's disks and on object stores.
"""

from __future__ import annotations

import json
import os
import re
import tracemalloc
from pathlib import Path

import fsspec
import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st

import outofcore
from outofcore.errors import InputError
from outofcore.frontends.generate import random_array
from outofcore.frontends.verify import verify
from outofcore.storage.documents import MAX_DOCUMENT_BYTES, MAX_DOCUMENT_DEPTH
from tests.helpers import cli

#: Brackets nested this deep: Python's JSON parser recursed past its limit.
DEEP = 10**5


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A (23x19, zarr format 3), B (19x17, format 2) and D (23x17), ragged chunks."""
    rng = np.random.default_rng(7)
    for name, shape, chunks, zarr_format in (
        ("a", (23, 19), (6, 5), 3),
        ("b", (19, 17), (5, 6), 2),
        ("d", (23, 17), (6, 6), 3),
    ):
        array = zarr.create_array(
            tmp_path / f"{name}.zarr", shape=shape, chunks=chunks, dtype="float64",
            zarr_format=zarr_format,
        )  # fmt: skip
        array[...] = rng.standard_normal(shape)
    return tmp_path


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def with_attributes(document: Path, attributes: str) -> None:
    """Rewrite the zarr.json (or .zattrs) ``document`` with ``attributes`` as JSON text."""
    if document.name == ".zattrs":
        document.write_text(f'{{"deep": {attributes}}}')
        return
    text = json.dumps({**json.loads(document.read_text()), "attributes": {"deep": "HERE"}})
    document.write_text(text.replace('"HERE"', attributes))


def files(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder``, its size and modification time."""
    return {
        str(path): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in folder.rglob("*")
        if path.is_file()
    }


def one_line(done, status: int, *needles: str) -> str:
    assert done.returncode == status, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("outofcore: error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def matmul(a, b, out, **options):
    return outofcore.matmul(a, b, out, client="sync", progress=False, **options)


@pytest.mark.parametrize(
    ("array", "document"),
    [("a.zarr", "zarr.json"), ("b.zarr", ".zattrs"), ("b.zarr", ".zarray")],
)
def test_metadata_nested_ten_to_the_five_deep_is_named_exit_2(folder, array, document):
    path = folder / array / document
    if document == ".zarray":  # a field zarr reads, nested
        meta = json.loads(path.read_text())
        path.write_text(json.dumps({**meta, "filters": "HERE"}).replace('"HERE"', nested(DEEP)))
    else:
        with_attributes(path, nested(DEEP))
    before = files(folder)
    name = f"{array}/{document}"
    with pytest.raises(InputError, match=rf"{re.escape(name)} is nested 1000\d\d levels deep"):
        matmul(folder / "a.zarr", folder / "b.zarr", folder / "c.zarr")
    done = cli("matmul", f"{folder}/a.zarr", f"{folder}/b.zarr", "-o", f"{folder}/c.zarr",
               "--scheduler", "sync")  # fmt: skip
    one_line(done, 2, name, "nested", "not parsed")
    assert files(folder) == before


def test_a_150_mb_zarr_json_is_refused_by_its_size_without_reading_it(folder):
    """A sparse file: 150 MB to zarr, nothing on the disk; not read (before: read whole,
    519 MiB at the peak)."""
    path = folder / "a.zarr" / "zarr.json"
    with open(path, "r+b") as document:
        document.truncate(150 * 10**6)
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=r"a\.zarr/zarr\.json is 150000000 bytes, more than"):
            matmul(folder / "a.zarr", folder / "b.zarr", folder / "c.zarr")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MAX_DOCUMENT_BYTES, peak  # not read: far less than the document
    done = cli("plan", f"{folder}/a.zarr", f"{folder}/b.zarr", "--scheduler", "sync")
    one_line(done, 2, "a.zarr/zarr.json is 150000000 bytes", "it is not read")


def test_a_metadata_document_that_is_not_a_regular_file_is_never_opened(folder):
    """A pipe would block zarr's read forever; a device (/dev/zero) never ends."""
    path = folder / "a.zarr" / "zarr.json"
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(InputError, match=r"a\.zarr/zarr\.json is not a regular file"):
        matmul(folder / "a.zarr", folder / "b.zarr", folder / "c.zarr")
    path.unlink()
    path.symlink_to("/dev/zero")
    done = cli("plan", f"{folder}/a.zarr", f"{folder}/b.zarr", "--scheduler", "sync", timeout=60)
    one_line(done, 2, "a.zarr/zarr.json is not a regular file")


def test_the_addend_and_verifys_c_are_read_within_bounds(folder):
    with_attributes(folder / "d.zarr" / "zarr.json", nested(DEEP))
    with pytest.raises(InputError, match=r"the addend: .*d\.zarr/zarr\.json is nested"):
        matmul(folder / "a.zarr", folder / "b.zarr", folder / "c.zarr",
               addend=folder / "d.zarr", beta=1.0)  # fmt: skip
    with pytest.raises(InputError, match=r"C: .*d\.zarr/zarr\.json is nested"):
        verify(folder / "a.zarr", folder / "b.zarr", folder / "d.zarr")


@pytest.mark.parametrize("overwrite", [False, True])
def test_an_existing_output_with_hostile_metadata_is_named_and_kept(folder, overwrite):
    out = folder / "c.zarr"
    random_array(out, (23, 17), (6, 6), seed=3)  # outofcore's own: replaceable
    with_attributes(out / "zarr.json", nested(DEEP))
    before = files(folder)
    with pytest.raises(InputError, match=r"the output: .*c\.zarr/zarr\.json is nested"):
        matmul(folder / "a.zarr", folder / "b.zarr", out, overwrite=overwrite)
    flags = ["--overwrite"] if overwrite else []
    done = cli("matmul", f"{folder}/a.zarr", f"{folder}/b.zarr", "-o", str(out),
               "--scheduler", "sync", *flags)  # fmt: skip
    one_line(done, 2, "c.zarr/zarr.json is nested")
    assert files(folder) == before


def test_nan_and_infinity_that_zarr_writes_into_metadata_are_read(folder):
    """zarr writes ``NaN`` into attributes (and format 2 fill values): not refused."""
    a = zarr.open_array(folder / "a.zarr", mode="r+")
    a.attrs["scale"] = float("nan")
    b = zarr.open_array(folder / "b.zarr", mode="r+")
    b.attrs.update({"low": float("-inf"), "high": float("inf")})
    assert "NaN" in (folder / "a.zarr" / "zarr.json").read_text()
    matmul(folder / "a.zarr", folder / "b.zarr", folder / "c.zarr")
    want = a[...] @ b[...]
    np.testing.assert_allclose(zarr.open_array(folder / "c.zarr")[...], want, rtol=1e-12)


@pytest.fixture
def memory_root(request) -> str:
    root = f"memory://hostile-metadata-{os.getpid()}-{id(request)}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


def test_on_an_fsspec_store_too_large_is_refused_after_a_ranged_read(memory_root):
    fs = fsspec.filesystem("memory")
    for name in ("a", "b"):
        array = zarr.create_array(f"{memory_root}/{name}.zarr", shape=(4, 4), chunks=(2, 2),
                                  dtype="f4")  # fmt: skip
        array[...] = 1
    a, b = f"{memory_root}/a.zarr", f"{memory_root}/b.zarr"
    meta = fs.cat_file(f"{a}/zarr.json")
    fs.pipe_file(f"{a}/zarr.json", meta[:-1] + b" " * MAX_DOCUMENT_BYTES + b"}")
    with pytest.raises(
        InputError, match=rf"a\.zarr/zarr\.json is {len(meta) + MAX_DOCUMENT_BYTES}"
    ):
        matmul(a, b, f"{memory_root}/c.zarr")
    fs.pipe_file(f"{a}/zarr.json", meta)
    with_text = json.dumps({**json.loads(meta), "attributes": {"deep": "HERE"}})
    fs.pipe_file(f"{b}/zarr.json", with_text.replace('"HERE"', nested(DEEP)).encode())
    with pytest.raises(InputError, match=r"input B: .*b\.zarr/zarr\.json is nested"):
        matmul(a, b, f"{memory_root}/c.zarr")


def test_on_s3_a_deep_zarr_json_is_named(moto_server, s3_bucket):
    options = moto_server.options
    for name in ("a", "b"):
        array = zarr.create_array(f"{s3_bucket}/{name}.zarr", shape=(4, 4), chunks=(2, 2),
                                  dtype="f4", storage_options=options)  # fmt: skip
        array[...] = 2
    fs = fsspec.filesystem("s3", **options, skip_instance_cache=True)
    key = f"{s3_bucket}/a.zarr/zarr.json"
    meta = json.loads(fs.cat_file(key))
    text = json.dumps({**meta, "attributes": {"deep": "HERE"}}).replace('"HERE"', nested(DEEP))
    fs.pipe_file(key, text.encode())
    with pytest.raises(InputError, match=r"input A: .*a\.zarr/zarr\.json is nested"):
        matmul(f"{s3_bucket}/a.zarr", f"{s3_bucket}/b.zarr", f"{s3_bucket}/c.zarr",
               storage_options=options)  # fmt: skip


@given(
    depth=st.integers(0, 3 * MAX_DOCUMENT_DEPTH),
    leaf=st.sampled_from(["1", "NaN", "-Infinity", '"x"', "{}", "1e400", "[", "}", ""]),
)
def test_any_attributes_either_open_or_are_one_input_error(tmp_path_factory, depth, leaf):
    """Whatever an attribute holds, opening the input is the array or an InputError
    naming the document, never another exception."""
    folder = tmp_path_factory.mktemp("attrs")
    array = zarr.create_array(folder / "x.zarr", shape=(3, 2), chunks=(2, 2), dtype="f4")
    with_attributes(folder / "x.zarr" / "zarr.json", "[" * depth + leaf + "]" * depth)
    try:
        opened = outofcore.operands.arrays.open_input(folder / "x.zarr", "A")
    except InputError as exc:
        assert "x.zarr" in str(exc)
    else:
        assert opened.shape == array.shape and depth + 2 <= MAX_DOCUMENT_DEPTH


def test_over_http_a_too_large_zarr_json_is_refused_by_its_size_not_read(folder):
    """A web server may answer a ranged read with the whole object (Python's does): the
    size is asked first, and 150 MB are not read."""
    from tests.helpers import serve_folder  # noqa: PLC0415

    with open(folder / "a.zarr" / "zarr.json", "r+b") as document:
        document.truncate(150 * 10**6)
    with serve_folder(folder) as url:
        matmul(f"{url}/b.zarr", folder / "b.zarr", folder / "warm.zarr", transpose_a=True)
        tracemalloc.start()
        try:
            with pytest.raises(InputError, match=r"a\.zarr/zarr\.json is 150000000 bytes"):
                matmul(f"{url}/a.zarr", folder / "b.zarr", folder / "c.zarr")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < MAX_DOCUMENT_BYTES, peak

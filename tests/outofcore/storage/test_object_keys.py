"""Keys are keys (issue 33, item 1): names with ``[ ] * ?``, spaces and unicode on S3.

fsspec's ``rm`` (zarr's ``FsspecStore.delete``) expands ``[ ] * ?`` as a glob: an
output ``run[1].zarr`` rerun with ``--overwrite`` deleted every object of
``run1.zarr``.  Every test here puts hostile names (in the output's name and in the
folders above it, inputs included) beside arrays whose names those patterns match,
runs outofcore on them with obstore and with s3fs alone (obstore hidden in the
command's process), lists the whole bucket before and after, and asserts that
every object outside what the command wrote is byte-for-byte unchanged.
"""

from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest
import zarr
from zarr.core.sync import sync

import outofcore
from outofcore.errors import InputError
from outofcore.frontends.generate import random_array
from outofcore.journal.lease import LEASE_NAME
from outofcore.journal.records import JOURNAL_DIR
from outofcore.operands.random_values import random_values
from outofcore.storage import obstores, storeops, stores
from outofcore.storage.fingerprint import fingerprint
from outofcore.storage.locations import locate
from outofcore.storage.manifest import output_contents
from tests.helpers import assert_product_close, random_matrix, s3_object_store

pytest.importorskip("obstore", reason="obstore (the s3 extra) is not installed")
boto3 = pytest.importorskip("boto3", reason="boto3 (moto's dependency) is not installed")

#: Hostile names, and the neighbour each one matches as a glob pattern.
PAIRS = [
    ("run[1].zarr", "run1.zarr"),
    ("r*.zarr", "rx.zarr"),
    ("a?.zarr", "ab.zarr"),
    ("dir [1] ü/sp ace ?€.zarr", "dir 1 ü/sp ace x€.zarr"),
]
#: A job's memory budget: 16 requests in flight, then small tiles (several of them).
MEMORY = 16 * stores.REQUEST_BYTES + 48 * 1024
WITH_OBSTORE = pytest.mark.parametrize("with_obstore", [True, False], ids=["obstore", "s3fs-alone"])


def objects(server, url: str) -> dict[str, tuple[str, bytes]]:
    """Every object of the bucket ``url`` (``s3://name``): its ETag and bytes."""
    bucket = url.removeprefix("s3://")
    client = boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=server.KEY,
        aws_secret_access_key=server.SECRET,
        region_name="us-east-1",
    )
    found = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            found[item["Key"]] = (item["ETag"], body)
    return found


def changes_outside(before: dict, after: dict, *mine: str) -> list[str]:
    """Keys added, removed or rewritten outside the folders ``mine`` (names of arrays)."""

    def outside(key: str) -> bool:
        return not any(key.startswith(name + "/") for name in mine)

    keys = {k for k in before.keys() | after.keys() if outside(k)}
    return sorted(k for k in keys if before.get(k) != after.get(k))


def command(server, with_obstore: bool, *args: str) -> tuple[int, float, str, str]:
    """``outofcore ARGS --storage-option ...`` in a new process (obstore hidden unless
    ``with_obstore``): exit status, seconds, stdout and stderr."""
    hide = "" if with_obstore else "sys.modules['obstore'] = None; "
    code = f"import sys; {hide}from outofcore.cli import main; sys.exit(main(sys.argv[1:]))"
    options = [f"--storage-option={key}={value}" for key, value in server.options.items()]
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, *args, *options],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, time.perf_counter() - started, done.stdout, done.stderr


@WITH_OBSTORE
def test_random_overwrite_replaces_exactly_its_own_keys(moto_server, s3_bucket, with_obstore):
    """``random URL --overwrite`` on each hostile name deletes and rewrites that array's
    keys only: its neighbour (which the name matches as a pattern) and everything else
    in the bucket keep every byte, and the array holds the new seed's values."""
    options = moto_server.options
    for hostile, neighbour in PAIRS:
        random_array(f"{s3_bucket}/{neighbour}", (20, 30), (7, 8), seed=1, storage_options=options)
        random_array(f"{s3_bucket}/{hostile}", (20, 30), (7, 8), seed=2, storage_options=options)
    before = objects(moto_server, s3_bucket)
    for hostile, _ in PAIRS:
        url = f"{s3_bucket}/{hostile}"
        status, seconds, _, err = command(
            moto_server, with_obstore, "random", url, "--shape", "20,30", "--chunks", "7,8",
            "--seed", "3", "--overwrite", "-q",
        )  # fmt: skip
        assert status == 0, err
        assert seconds < 60
    after = objects(moto_server, s3_bucket)
    assert changes_outside(before, after, *(h for h, _ in PAIRS)) == []
    expected = random_array_values(seed=3)
    for hostile, neighbour in PAIRS:
        mine = sorted(k for k in after if k.startswith(hostile + "/"))
        assert mine == sorted(k for k in before if k.startswith(hostile + "/")), hostile
        got = zarr.open_array(f"{s3_bucket}/{hostile}", mode="r", storage_options=options)
        np.testing.assert_array_equal(got[...], expected)
        other = zarr.open_array(f"{s3_bucket}/{neighbour}", mode="r", storage_options=options)
        np.testing.assert_array_equal(other[...], random_array_values(seed=1))


def random_array_values(seed: int) -> np.ndarray:
    """What ``random --shape 20,30 --chunks 7,8 --seed SEED`` writes (each chunk from its
    own generator, :func:`outofcore.frontends.generate.random_array`)."""
    values = np.empty((20, 30), dtype="float32")
    for i in range(0, 20, 7):
        for j in range(0, 30, 8):
            rng = np.random.default_rng((seed, i // 7, j // 8))
            shape = (min(7, 20 - i), min(8, 30 - j))
            values[i : i + shape[0], j : j + shape[1]] = random_values(
                rng, shape, np.dtype("float32")
            )
    return values


def put(url: str, data: np.ndarray, chunks: tuple[int, int], options: dict) -> None:
    array = zarr.create_array(
        url, shape=data.shape, chunks=chunks, dtype=data.dtype, storage_options=options
    )
    array[...] = data


@WITH_OBSTORE
@pytest.mark.parametrize(("hostile", "neighbour"), [PAIRS[0], PAIRS[3]], ids=["run1", "unicode"])
def test_jobs_on_hostile_names_change_nothing_else(
    moto_server, s3_bucket, with_obstore, hostile, neighbour
):
    """A job whose inputs and output have hostile names, run, rerun with --overwrite, and
    asked for its status: each reads its own inputs (not the neighbours that their names
    match), writes and deletes only its output's keys, and releases (deletes) its lease;
    the neighbouring output (a finished job with its journal) keeps every byte."""
    options = moto_server.options
    rng = np.random.default_rng(33)
    a, b = random_matrix(rng, (37, 29), "float32"), random_matrix(rng, (29, 23), "float32")
    put(f"{s3_bucket}/in [1]*?/a.zarr", a, (10, 7), options)  # ragged chunks
    put(f"{s3_bucket}/in [1]*?/b.zarr", b, (7, 8), options)
    decoy = random_matrix(rng, (37, 29), "float32")  # what a pattern would read instead
    put(f"{s3_bucket}/in 1x!/a.zarr", decoy, (10, 7), options)
    put(f"{s3_bucket}/in 1x!/b.zarr", random_matrix(rng, (29, 23), "float32"), (7, 8), options)
    inputs = [f"{s3_bucket}/in [1]*?/a.zarr", f"{s3_bucket}/in [1]*?/b.zarr"]
    outofcore.matmul(
        *inputs, f"{s3_bucket}/{neighbour}", client="sync", progress=False,
        memory=MEMORY, storage_options=options,
    )  # fmt: skip
    url = f"{s3_bucket}/{hostile}"
    for overwrite in ([], ["--overwrite"]):
        before = objects(moto_server, s3_bucket)
        status, seconds, _, err = command(
            moto_server, with_obstore, "matmul", *inputs, "-o", url, "--scheduler", "sync",
            "--memory", str(MEMORY), "-q", *overwrite,
        )  # fmt: skip
        assert status == 0, err
        assert seconds < 120
        after = objects(moto_server, s3_bucket)
        assert changes_outside(before, after, hostile) == []
        assert f"{hostile}/{JOURNAL_DIR}/{LEASE_NAME}" not in after  # released
        got = zarr.open_array(url, mode="r", storage_options=options)[...]
        assert_product_close(got, a, b)
        store = stores.fsspec_store(locate(url, options))
        contents = output_contents(store, "")
        assert contents.strangers == () and contents.chunks, contents
        assert f"{JOURNAL_DIR}/job.json" in contents.journal
    status, _, out, err = command(moto_server, with_obstore, "status", url)
    assert status == 0, err
    assert "complete" in out and "lease          none" in out, out


def test_chunks_of_the_fill_value_are_written_not_deleted_by_pattern(moto_server, s3_bucket):
    """An integer product of zeros (every chunk equals the fill value, 0): zarr's default
    deletes such chunks, by pattern on s3fs (``run[1].zarr/c/0/0`` deleted
    ``run1.zarr/c/0/0``); outofcore writes them, and nothing else changes."""
    options = moto_server.options
    zeros = np.zeros((12, 10), dtype="int8")
    put(f"{s3_bucket}/z.zarr", zeros, (5, 4), options)
    put(f"{s3_bucket}/w.zarr", zeros.T.copy(), (4, 5), options)
    random_array(
        f"{s3_bucket}/run1.zarr", (12, 12), (5, 5), "int16", seed=4, storage_options=options
    )
    before = objects(moto_server, s3_bucket)
    outofcore.matmul(
        f"{s3_bucket}/z.zarr", f"{s3_bucket}/w.zarr", f"{s3_bucket}/run[1].zarr",
        client="sync", progress=False, memory=MEMORY, storage_options=options,
    )  # fmt: skip
    after = objects(moto_server, s3_bucket)
    assert changes_outside(before, after, "run[1].zarr") == []
    got = zarr.open_array(f"{s3_bucket}/run[1].zarr", mode="r", storage_options=options)
    assert got.dtype == np.int32 and not got[...].any()
    chunks = [k for k in after if k.startswith("run[1].zarr/c/")]
    blocks = [-(-n // size) for n, size in zip(got.shape, got.shards or got.chunks, strict=True)]
    assert len(chunks) == blocks[0] * blocks[1], chunks  # every chunk (shard) written


#: Objects put for the literal-key checks: hostile names and what they would match.
LITERAL = ["x[1]/k", "x1/k", "x*/k", "xa/k", "x?/k", "xb/k", "s p[ü]/k", "s pü/k", "s p ü/k"]


@pytest.mark.parametrize("kind", ["s3fs+obstore", "s3fs-alone", "ObjectStore"])
def test_deletes_and_listings_take_keys_literally(moto_server, s3_bucket, kind, monkeypatch):
    """:func:`outofcore.storage.storeops.delete_exact`, the listings of status and fingerprints and
    the journal's delete each touch exactly the key or folder named, on every store."""
    if kind == "s3fs-alone":
        monkeypatch.setattr(obstores, "installed", lambda: False)
    store = (
        s3_object_store(moto_server, s3_bucket)
        if kind == "ObjectStore"
        else stores.fsspec_store(locate(s3_bucket, moto_server.options))
    )
    assert (sync(obstores.handle_of(store)) is None) == (kind == "s3fs-alone")
    for key in LITERAL:
        sync(store.set(key, zarr.core.buffer.default_buffer_prototype().buffer.from_bytes(b"v")))
    for folder in ("x[1]", "x*", "x?", "s p[ü]"):
        times = sync(storeops.list_times(store, folder, ("k", "")))
        assert list(times) == ["k"], (folder, times)
        listed = fingerprint(SimpleNamespace(store=store, path=folder))  # lists, reads not
        assert set(listed.tokens) == {"k"}, (folder, listed.tokens)
    started = time.perf_counter()
    sync(storeops.delete_exact(store, ["x[1]/k", "x*/k", "x?/k", "s p[ü]/k", "nothing[0]/k"]))
    assert time.perf_counter() - started < 30

    async def listing() -> list[str]:
        return [key async for key in store.list_prefix("")]

    assert sorted(sync(listing())) == sorted(["x1/k", "xa/k", "xb/k", "s pü/k", "s p ü/k"])


def test_a_key_s3fs_would_cut_at_a_version_is_refused():
    """s3fs reads ``?versionId=`` in a key as an object version (and drops the rest of the
    name): such a name is refused in one line, before anything is opened."""
    with pytest.raises(InputError, match=r"\?versionId="):
        locate("s3://bucket/q?versionId=1.zarr")
    assert locate("s3://bucket/a?.zarr").path == "bucket/a?.zarr"

"""A 404 is not a zero (issue 33, item 2), through a fault-injecting proxy in front of moto.

A chunk that an input's listing (its fingerprint, taken when the job starts) holds but
a read reports missing is retried, and then fails the job naming the chunk (exit 3),
never read as the fill value; a chunk the listing does not hold (never written) reads
as the fill value, as zarr reads it.  Results are compared with float64 numpy products
of seeded random data in ragged chunks.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest
import zarr

import outofcore
from outofcore.journal.records import JOURNAL_DIR
from outofcore.journal.status import job_status
from outofcore.operands.reading import ReadError
from outofcore.storage.manifest import ChunkKeys
from outofcore.storage.presence import ChunkPresence, listed_array, presence_of
from tests.faultproxy import Fault, FaultProxy
from tests.helpers import assert_product_close, random_matrix, s3_object_store

pytest.importorskip("s3fs", reason="s3fs (the s3 extra) is not installed")

#: A and B: odd shapes, ragged chunks (A's grid is 4x4, B's 4x3).
A_SHAPE, A_CHUNKS = (37, 29), (10, 8)
B_SHAPE, B_CHUNKS = (29, 23), (8, 9)
#: Reads retried quickly, so the time to the error is short.
FAST_RETRIES = {"OUTOFCORE_READ_RETRY_DELAY": "0.05"}


def put(url: str, data: np.ndarray, chunks, options: dict, skip=()) -> zarr.Array:
    """``data`` as a zarr array at ``url``, chunk by chunk, but the chunks ``skip``
    (never written: they read as the fill value, 0)."""
    array = zarr.create_array(
        url, shape=data.shape, chunks=chunks, dtype=data.dtype, fill_value=0,
        storage_options=options,
    )  # fmt: skip
    for i in range(-(-data.shape[0] // chunks[0])):
        for j in range(-(-data.shape[1] // chunks[1])):
            if (i, j) in skip:
                continue
            rows = slice(i * chunks[0], (i + 1) * chunks[0])
            cols = slice(j * chunks[1], (j + 1) * chunks[1])
            array[rows, cols] = data[rows, cols]
    return array


@pytest.fixture
def inputs(moto_server, s3_bucket):
    """Seeded A and B on the bucket; a fault proxy in front of the server and the storage
    options that reach the bucket through it."""
    rng = np.random.default_rng(33)
    a, b = random_matrix(rng, A_SHAPE, "float32"), random_matrix(rng, B_SHAPE, "float32")
    put(f"{s3_bucket}/a.zarr", a, A_CHUNKS, moto_server.options)
    put(f"{s3_bucket}/b.zarr", b, B_CHUNKS, moto_server.options)
    with FaultProxy(moto_server.endpoint) as proxy:
        options = {k: v for k, v in moto_server.options.items() if k != "endpoint_url"}
        options["client_kwargs"] = {"endpoint_url": proxy.endpoint}
        yield a, b, proxy, options


def cli_through(options: dict, *args: str) -> tuple[int, float, list[str]]:
    """``outofcore ARGS`` in a new process with ``options`` as storage options; exit
    status, seconds and stderr's lines."""
    endpoint = options["client_kwargs"]["endpoint_url"]
    flags = [
        f"--storage-option=key={options['key']}",
        f"--storage-option=secret={options['secret']}",
        f"--storage-option=client_kwargs.endpoint_url={endpoint}",
    ]
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "outofcore.cli", *args, *flags],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **FAST_RETRIES},
    )
    return done.returncode, time.perf_counter() - started, done.stderr.strip().splitlines()


def test_a_404_on_a_listed_chunk_fails_the_job_naming_it(moto_server, s3_bucket, inputs):
    """Every GET of one existing chunk of A answered 404: the job (a local cluster) retries
    the read, then exits 3 in one line naming the chunk; the output is not complete."""
    _, _, proxy, options = inputs
    proxy.add(Fault("status", method="GET", key=r"/a\.zarr/c/2/1$", status=404, times=None))
    out = f"{s3_bucket}/c.zarr"
    status, seconds, lines = cli_through(
        options, "matmul", f"{s3_bucket}/a.zarr", f"{s3_bucket}/b.zarr", "-o", out,
        "--memory", "2MiB", "-q",
    )  # fmt: skip
    errors = [line for line in lines if line.startswith("outofcore: error:")]
    assert status == 3, lines
    assert len(errors) == 1 and "c/2/1" in errors[0] and "not found" in errors[0], lines
    assert "not read as the fill value" in errors[0]
    assert seconds < 90, seconds
    assert len(proxy.requests("GET", r"/a\.zarr/c/2/1$")) >= 4  # the read and 3 retries
    state = job_status(out, moto_server.options)
    assert state["state"] != "complete" and not state.get("complete"), state
    attrs = zarr.open_array(out, mode="r", storage_options=moto_server.options).attrs
    assert attrs["outofcore"]["complete"] is False


def test_a_404_that_passes_is_retried_and_the_result_is_right(s3_bucket, inputs):
    """Two 404s on one chunk of B, then its bytes: the read is retried and the product
    is right (a 404 is never taken as zeros, even once)."""
    a, b, proxy, options = inputs
    proxy.add(Fault("status", method="GET", key=r"/b\.zarr/c/3/2$", status=404, times=2))
    out = f"{s3_bucket}/c.zarr"
    started = time.perf_counter()
    c = outofcore.matmul(
        f"{s3_bucket}/a.zarr", f"{s3_bucket}/b.zarr", out, client="sync", progress=False,
        storage_options=options,
    )  # fmt: skip
    assert time.perf_counter() - started < 60
    assert_product_close(c[...], a, b)
    kinds = [kind for _, path, kind in proxy.log if path.endswith("/b.zarr/c/3/2")]
    assert kinds[:3] == ["status", "status", "forward"], kinds


def test_a_chunk_never_written_reads_as_the_fill_value(moto_server, s3_bucket):
    """A sparse input whose listing lacks two chunks (never written): they read as the
    fill value (0), as zarr reads them, and the product matches numpy's with zeros there."""
    rng = np.random.default_rng(7)
    a, b = random_matrix(rng, A_SHAPE, "float64"), random_matrix(rng, B_SHAPE, "float64")
    options = moto_server.options
    put(f"{s3_bucket}/a.zarr", a, A_CHUNKS, options, skip={(0, 1), (3, 3)})
    put(f"{s3_bucket}/b.zarr", b, B_CHUNKS, options)
    sparse = a.copy()
    sparse[0:10, 8:16] = 0
    sparse[30:37, 24:29] = 0
    c = outofcore.matmul(
        f"{s3_bucket}/a.zarr", f"{s3_bucket}/b.zarr", f"{s3_bucket}/c.zarr", client="sync",
        progress=False, storage_options=options, memory=2 << 20,
    )  # fmt: skip
    np.testing.assert_allclose(c[...], sparse @ b, rtol=1e-12, atol=1e-12)


def test_a_404_on_a_listed_shard_of_a_sharded_input(moto_server, s3_bucket):
    """A sharded input: the listing holds shard keys, and a 404 on one fails the read
    naming it (API: ReadError, after the retries)."""
    rng = np.random.default_rng(5)
    a, b = random_matrix(rng, (40, 32), "float32"), random_matrix(rng, (32, 24), "float32")
    options = moto_server.options
    array = zarr.create_array(
        f"{s3_bucket}/a.zarr", shape=a.shape, chunks=(5, 8), shards=(20, 16), dtype="float32",
        storage_options=options,
    )  # fmt: skip
    array[...] = a
    put(f"{s3_bucket}/b.zarr", b, (8, 12), options)
    with FaultProxy(moto_server.endpoint) as proxy:
        through = {k: v for k, v in options.items() if k != "endpoint_url"}
        through["client_kwargs"] = {"endpoint_url": proxy.endpoint}
        proxy.add(Fault("status", method="GET", key=r"/a\.zarr/c/1/0$", status=404, times=None))
        with pytest.raises(ReadError, match=r"c/1/0.*not found"):
            outofcore.matmul(
                f"{s3_bucket}/a.zarr", f"{s3_bucket}/b.zarr", f"{s3_bucket}/c.zarr",
                client="sync", progress=False, storage_options=through,
            )  # fmt: skip
    state = job_status(f"{s3_bucket}/c.zarr", options)
    assert state["state"] != "complete"


def test_a_404_on_an_input_on_a_zarr_object_store(moto_server, s3_bucket, tmp_path):
    """An input on a zarr ``ObjectStore`` (obstore's ``S3Store``) reached through the proxy:
    a listed chunk answered 404 fails the job naming it, as through s3fs."""
    pytest.importorskip("obstore", reason="obstore (the s3 extra) is not installed")
    rng = np.random.default_rng(9)
    a, b = random_matrix(rng, A_SHAPE, "float32"), random_matrix(rng, B_SHAPE, "float32")
    put(f"{s3_bucket}/a.zarr", a, A_CHUNKS, moto_server.options)
    with FaultProxy(moto_server.endpoint) as proxy:
        server = SimpleNamespace(
            endpoint=proxy.endpoint, KEY=moto_server.KEY, SECRET=moto_server.SECRET
        )
        array = zarr.open_array(s3_object_store(server, s3_bucket, "a.zarr"), mode="r")
        proxy.add(Fault("status", method="GET", key=r"/a\.zarr/c/1/1$", status=404, times=None))
        with pytest.raises(ReadError, match=r"c/1/1.*not found"):
            outofcore.matmul(array, b, tmp_path / "c.zarr", client="sync", progress=False)
        proxy.clear()
        c = outofcore.matmul(array, b, tmp_path / "c.zarr", client="sync", progress=False)
    assert_product_close(c[...], a, b)  # the rerun resumes and is right


# -- the listing each task carries ----------------------------------------------------------


def memory_array(shape, chunks, written, **kwargs) -> zarr.Array:
    array = zarr.create_array(
        zarr.storage.MemoryStore(), shape=shape, chunks=chunks, dtype="float32", fill_value=0,
        **kwargs,
    )  # fmt: skip
    for i, j in written:
        array.set_block_selection((i, j), np.ones(array.blocks[i, j].shape, "float32"))
    return array


@pytest.mark.parametrize("fraction", [0.0, 0.001, 0.3, 0.97, 1.0])
def test_presence_holds_exactly_the_listed_blocks(fraction):
    """Every kind of presence (all, bits, indices) answers for each block of the grid as
    the listing does, and pickles without its decoded form."""
    rng = np.random.default_rng(int(fraction * 1000))
    grid = (60, 70)
    written = {(i, j) for i in range(grid[0]) for j in range(grid[1]) if rng.random() < fraction}
    strangers = ["zarr.json", "c/0/99", "c/x/1", "c/01/2", "c/1/2/3", "c/1", "x\nc/0/0", "c/1/1\n"]
    keys = [f"c/{i}/{j}" for i, j in written] + strangers  # none of these is a chunk key
    array = memory_array((600, 700), (10, 10), ())
    presence = ChunkPresence.from_listing(array, keys, "input A")
    expected = {0.0: "indices", 0.001: "indices", 0.3: "bits", 0.97: "bits", 1.0: "all"}
    assert presence.kind == expected[fraction]
    assert len(presence.data) <= grid[0] * grid[1] // 8 + 64
    for i in range(grid[0]):
        for j in range(grid[1]):
            assert presence.listed(f"c/{i}/{j}") == ((i, j) in written)
    assert not presence.listed("zarr.json") and not presence.listed("c/0/99")
    again = pickle.loads(pickle.dumps(presence))
    assert "_decoded" not in again.__dict__ and again == presence


def test_presence_of_a_grid_too_large_to_number():
    """An array of 10^12 x 10^12 chunks (metadata only) keeps its few listed keys."""
    array = memory_array((10**13, 10**13), (10, 10), ())
    listed = ChunkPresence.from_listing(array, ["c/5/7", "zarr.json"], "input A")
    assert listed.form == ChunkKeys("c", "/", (10**12, 10**12))
    assert listed.kind == "keys" and listed.listed("c/5/7") and not listed.listed("c/7/5")


@pytest.mark.parametrize(
    "layout",
    [
        {"zarr_format": 2},
        {"zarr_format": 2, "chunk_key_encoding": {"name": "v2", "separator": "/"}},
        {"chunk_key_encoding": {"name": "default", "separator": "."}},
        {"shards": (20, 20)},
    ],
    ids=["v2", "v2-slash", "v3-dot", "sharded"],
)
def test_reads_of_a_listed_array(layout):
    """The twin reads what the array reads; a listed block the store lost raises, after
    the twin has been pickled (as it travels to workers), a block never listed reads
    as the fill value."""
    written = [(0, 0), (1, 1)] if "shards" in layout else [(0, 0), (2, 3)]  # blocks: shards
    array = memory_array((40, 40), (10, 10), written, **layout)
    keys = list(array.store._store_dict)
    twin = pickle.loads(pickle.dumps(listed_array(array, keys, "input A")))
    assert presence_of(twin) is not None
    np.testing.assert_array_equal(twin[...], array[...])
    lost = array.metadata.encode_chunk_key(written[1])
    del twin.store._store_dict[lost]
    with pytest.raises(OSError, match="not found"):
        twin[...]
    np.testing.assert_array_equal(twin[0:10, 20:40], 0)  # never listed: the fill value


def test_the_listing_travels_small_with_dense_inputs(moto_server, s3_bucket):
    """A dense input adds nothing to what each task carries beyond the key form."""
    rng = np.random.default_rng(1)
    options = moto_server.options
    array = put(f"{s3_bucket}/a.zarr", random_matrix(rng, (64, 64), "float32"), (8, 8), options)
    from outofcore.storage.fingerprint import fingerprint  # noqa: PLC0415

    twin = listed_array(array, fingerprint(array).tokens, "input A")
    presence = presence_of(twin)
    assert presence.kind == "all" and presence.data == b""
    assert len(pickle.dumps(twin)) < len(pickle.dumps(array)) + 2048
    assert JOURNAL_DIR not in presence.root

"""A shard's index is data read back from a store: checked before it is followed.

zarr reads the byte ranges a shard's index names, and reads a range past the end of
the shard as a missing inner chunk, that is as the fill value: a damaged or hostile
index gave zeros and a job that succeeded (the first test shows zarr doing it).  An
index naming a huge range made zarr fetch all of it.  outofcore reads shards that zarr
decodes (inner codecs its own reader does not take, object stores) through
:class:`outofcore.storage.bounded.BoundedShardingCodec`: every range at most what an inner chunk
can be stored in, fetched before it is followed, and every answer whole.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import google_crc32c
import numpy as np
import pytest
import zarr
from zarr.codecs import (
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    TransposeCodec,
    ZstdCodec,
)
from zarr.codecs.numcodecs import AsType

import outofcore
from outofcore import config
from outofcore.compute.worker_context import worker_context
from outofcore.journal.resume import ResumeError
from outofcore.journal.status import job_status
from outofcore.operands.reading import ReadError, read_panel
from outofcore.storage import chunkfiles
from outofcore.storage.bounded import stored_limit
from outofcore.storage.codecs import loose_limit
from tests.faultproxy import FaultProxy
from tests.helpers import assert_product_close, cli, random_matrix

#: A (37, 30): shards of 20x16 (ragged at both edges), inner chunks of 10x8 (2x2 a shard).
SHAPE, SHARD, INNER = (37, 30), (20, 16), (10, 8)
PER_SHARD = 4
INDEX_BYTES = 16 * PER_SHARD + 4  # offsets and lengths, then the crc32c
#: The most a gzip inner chunk of float64 may be stored in (outofcore.storage.codecs.loose_limit).
INNER_LIMIT = loose_limit(math.prod(INNER) * 8)


def sharded(store, data: np.ndarray, location: str = "end", inner=None, skip=()):
    """``data`` in shards zarr reads (by default gzip inner chunks: not outofcore's own
    reader), the index at ``location``; the inner chunks ``skip`` (of shard (0, 0)) never
    written."""
    inner = (GzipCodec(),) if inner is None else inner
    array = zarr.create(
        shape=data.shape, chunks=SHARD, dtype=data.dtype, zarr_format=3, store=store,
        fill_value=0, codecs=[ShardingCodec(
            chunk_shape=INNER, codecs=[BytesCodec(), *inner], index_location=location
        )],
    )  # fmt: skip
    written = data.copy()
    for i, j in skip:
        written[i * INNER[0] : (i + 1) * INNER[0], j * INNER[1] : (j + 1) * INNER[1]] = 0
    array[...] = written
    return array, written


def rewrite_index(shard: bytes, location: str, change) -> bytes:
    """``shard`` with its index's entries (``(4, 2)`` offsets and lengths) passed through
    ``change`` and its crc32c made right again: a hostile index, not a torn one."""
    at = 0 if location == "start" else len(shard) - INDEX_BYTES
    entries = np.frombuffer(shard[at : at + 16 * PER_SHARD], "<u8").reshape(-1, 2).copy()
    table = np.asarray(change(entries), "<u8").tobytes()
    index = table + struct.pack("<I", google_crc32c.value(table))
    return shard[:at] + index + shard[at + INDEX_BYTES :]


def damage(path: Path, location: str, change) -> None:
    shard = path / "c" / "0" / "0"
    shard.write_bytes(rewrite_index(shard.read_bytes(), location, change))


def read(array: zarr.Array, selection) -> np.ndarray:
    out = np.full(tuple(s.stop - s.start for s in selection), np.nan)
    try:
        read_panel(array, selection, out)
    finally:
        worker_context().release_in_process()
    return out


WHOLE_SHARD = (slice(0, 20), slice(0, 16))
ONE_INNER_CHUNK = (slice(10, 20), slice(8, 16))  # inner chunk (1, 1) of shard (0, 0)


@pytest.mark.parametrize("location", ["start", "end"])
@pytest.mark.parametrize("inner", [(GzipCodec(),), (ZstdCodec(), Crc32cCodec()), ()])
def test_valid_shards_read_as_zarr_reads_them(tmp_path, location, inner):
    """Every selection of shards with the index at either end, inner chunks compressed,
    checksummed or raw, some never written (the fill value), read as zarr reads them
    (raw shards in memory: on a local disk outofcore's own reader takes them)."""
    rng = np.random.default_rng(11)
    data = random_matrix(rng, SHAPE, "float64")
    store = tmp_path / "a.zarr" if inner else zarr.storage.MemoryStore()
    array, written = sharded(store, data, location, inner, skip=[(0, 1)])
    assert chunkfiles.read_layout(array) is None  # zarr decodes it: the path under test
    for selection in (WHOLE_SHARD, ONE_INNER_CHUNK, (slice(3, 37), slice(5, 30))):
        np.testing.assert_array_equal(read(array, selection), written[selection])


@pytest.mark.parametrize("location", ["start", "end"])
@pytest.mark.parametrize("selection", [WHOLE_SHARD, ONE_INNER_CHUNK], ids=["whole", "one"])
def test_an_index_naming_bytes_past_the_shard_fails_not_zeros(tmp_path, location, selection):
    rng = np.random.default_rng(12)
    path = tmp_path / "a.zarr"
    array, _ = sharded(path, random_matrix(rng, SHAPE, "float64"), location)

    def past_the_end(entries):
        entries[3, 0] += 10**6  # inner chunk (1, 1) now lies past the end of the shard
        return entries

    damage(path, location, past_the_end)
    if selection is ONE_INNER_CHUNK:  # what zarr does with it: zeros, no error
        assert (zarr.open_array(path, mode="r")[selection] == 0).all()
    with config.set({"read-retries": 0}), pytest.raises(ReadError, match="corrupt or truncated"):
        read(array, selection)


def test_an_inner_chunk_of_zero_bytes_is_refused_not_read_as_fill(tmp_path):
    """A length of 0 is no chunk zarr writes (never written is offset and length 2**64 - 1);
    zarr reads it as the fill value."""
    rng = np.random.default_rng(17)
    path = tmp_path / "a.zarr"
    array, _ = sharded(path, random_matrix(rng, SHAPE, "float64"))
    damage(path, "end", lambda e: np.array([*e[:3], (e[3, 0], 0)], dtype="<u8"))
    assert (zarr.open_array(path, mode="r")[ONE_INNER_CHUNK] == 0).all()  # zarr: zeros
    with config.set({"read-retries": 0}):
        with pytest.raises(ReadError, match="0 bytes"):
            read(array, WHOLE_SHARD)
        with pytest.raises(ReadError, match=r"names bytes \d+ to \d+ "):
            read(array, ONE_INNER_CHUNK)


def test_an_index_whose_range_wraps_past_2_to_the_64_is_refused(tmp_path):
    """An offset near 2**64: its end, summed in uint64 as zarr sums it, wraps below it."""
    rng = np.random.default_rng(16)
    path = tmp_path / "a.zarr"
    array, _ = sharded(path, random_matrix(rng, SHAPE, "float64"))
    damage(path, "end", lambda e: np.array([*e[:3], (2**64 - 10, e[3, 1])], dtype="<u8"))
    with config.set({"read-retries": 0}):
        with pytest.raises(ReadError, match=r"past 2\*\*64"):
            read(array, WHOLE_SHARD)
        with pytest.raises(ReadError, match=r"names bytes 18446744073709551606 to \d+ "):
            read(array, ONE_INNER_CHUNK)


@pytest.mark.parametrize("location", ["start", "end"])
def test_an_index_naming_a_huge_range_is_refused_before_any_fetch(tmp_path, location):
    rng = np.random.default_rng(13)
    path = tmp_path / "a.zarr"
    array, _ = sharded(path, random_matrix(rng, SHAPE, "float64"), location)
    damage(path, location, lambda e: np.array([*e[:3], (e[3, 0], 2**40)], dtype="<u8"))
    with config.set({"read-retries": 0}):
        with pytest.raises(ReadError, match=f"names 1099511627776 bytes .* at most {INNER_LIMIT} "):
            read(array, WHOLE_SHARD)  # the index is read, checked, then one bounded range
        with pytest.raises(ReadError, match=f"names bytes \\d+ to \\d+ .* at most {INNER_LIMIT} "):
            read(array, ONE_INNER_CHUNK)  # the range itself is checked before it is asked for


def test_what_an_inner_chunk_can_be_stored_in():
    spec = zarr.core.array_spec.ArraySpec(
        shape=INNER, dtype=zarr.core.dtype.Float64(), fill_value=0.0,
        config=zarr.core.array_spec.ArrayConfig(order="C", write_empty_chunks=False),
        prototype=zarr.core.buffer.default_buffer_prototype(),
    )  # fmt: skip
    raw = math.prod(INNER) * 8
    assert stored_limit([BytesCodec()], spec) == raw
    assert stored_limit([BytesCodec(), Crc32cCodec()], spec) == raw + 4
    assert stored_limit([BytesCodec(), GzipCodec()], spec) == INNER_LIMIT == loose_limit(raw)
    assert stored_limit([BytesCodec(), ZstdCodec(), Crc32cCodec()], spec) == loose_limit(raw) + 4
    assert stored_limit([TransposeCodec(order=(1, 0)), BytesCodec()], spec) == raw
    # codecs without a known bound (a nested shard; numcodecs' astype, which may widen the
    # dtype): only the shard's end bounds a range
    nested = ShardingCodec(chunk_shape=(5, 4), codecs=[BytesCodec()])
    assert stored_limit([nested], spec) is None
    widened = AsType(encode_dtype="float64", decode_dtype="float32")
    assert stored_limit([widened, BytesCodec()], spec) is None


def test_a_job_on_a_damaged_shard_fails_naming_it_and_changes_nothing(tmp_path):
    """The command: exit 3, one error line naming the shard, no output marked complete,
    no byte of the inputs changed."""
    rng = np.random.default_rng(14)
    a_path, b_path, c_path = tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr"
    sharded(a_path, random_matrix(rng, SHAPE, "float64"))
    b = random_matrix(rng, (SHAPE[1], 19), "float64")
    zarr.create_array(b_path, shape=b.shape, chunks=(7, 6), dtype="float64")[...] = b
    damage(a_path, "end", lambda e: np.array([*e[:3], (e[3, 0] + 10**6, e[3, 1])], "<u8"))
    before = {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    done = cli("matmul", str(a_path), str(b_path), "-o", str(c_path), "--memory", "1MiB",
               env={"OUTOFCORE_READ_RETRIES": "1", "OUTOFCORE_READ_RETRY_DELAY": "0"})  # fmt: skip
    assert done.returncode == 3, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("outofcore: error")]
    assert len(errors) == 1 and "c/0/0" in errors[0] and "corrupt" in errors[0], done.stderr
    assert job_status(str(c_path))["state"] != "complete"
    after = {p: p.read_bytes() for p in before}
    assert after == before


def test_a_damaged_shard_index_on_an_object_store(moto_server, s3_bucket):
    """On S3 (moto, through a proxy that logs every GET's range): the job fails naming the
    shard, no range longer than an inner chunk's limit is asked for, and once the shard
    is right again the job (started over: its input changed since) equals numpy's."""
    import s3fs  # noqa: PLC0415

    rng = np.random.default_rng(15)
    options = moto_server.options
    a = random_matrix(rng, SHAPE, "float32")
    b = random_matrix(rng, (SHAPE[1], 23), "float32")
    store = zarr.storage.FsspecStore.from_url(f"{s3_bucket}/a.zarr", storage_options=options)
    sharded(store, a)
    zarr.create_array(
        f"{s3_bucket}/b.zarr", shape=b.shape, chunks=(8, 9), dtype="float32",
        storage_options=options,
    )[...] = b  # fmt: skip
    fs = s3fs.S3FileSystem(**{k: v for k, v in options.items() if k != "endpoint_url"},
                           client_kwargs={"endpoint_url": options["endpoint_url"]})  # fmt: skip
    key = f"{s3_bucket.removeprefix('s3://')}/a.zarr/c/0/0"
    original = fs.cat(key)
    fs.pipe(key, rewrite_index(original, "end", lambda e: np.array(
        [*e[:3], (e[3, 0], 2**40)], "<u8")))  # fmt: skip
    urls = [f"{s3_bucket}/{name}.zarr" for name in ("a", "b", "c")]
    with FaultProxy(options["endpoint_url"]) as proxy:
        through = {k: v for k, v in options.items() if k != "endpoint_url"}
        through["client_kwargs"] = {"endpoint_url": proxy.endpoint}
        with config.set({"read-retries": 0}), pytest.raises(ReadError, match="corrupt shard"):
            outofcore.matmul(*urls, client="sync", progress=False, storage_options=through)
        asked = [_range_bytes(r) for path, r in proxy.gets if "/a.zarr/c/" in path]
        assert asked and max(asked) <= INNER_LIMIT * PER_SHARD + INDEX_BYTES, asked
        assert job_status(urls[2], options)["state"] != "complete"
        fs.pipe(key, original)
        with pytest.raises(ResumeError, match="input A was rewritten since the job started"):
            outofcore.matmul(*urls, client="sync", progress=False, storage_options=through)
        c = outofcore.matmul(
            *urls, client="sync", progress=False, storage_options=through, overwrite=True
        )
        assert_product_close(c[...], a, b)


def _range_bytes(header: str | None) -> float:
    """Bytes a ``Range: bytes=first-last`` header asks for (``-n``: n; none: unbounded)."""
    if header is None:
        return float("inf")
    first, _, last = header.removeprefix("bytes=").partition("-")
    return int(last) if not first else int(last) - int(first) + 1

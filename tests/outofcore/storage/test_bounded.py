"""Decompression bombs: a chunk never decodes to more than its size (issue 28, item 5).

Written as an adversary: chunk files replaced with valid streams that decode to far
more (or less) than the chunk, on every read path (outofcore's own chunk-file reader,
zarr's pipeline for other codecs, zarr v2, inner chunks of shards).  Each job must
fail with exit status 3 and one line naming the chunk's key, and the reading process
must never hold the bomb's decoded size.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import zarr
from numcodecs import BZ2, LZ4, LZMA, Blosc, GZip, Zlib, Zstd

from outofcore.storage.codecs import ChunkSizeError, decode_bounded, zstd_content_size
from tests.helpers import random_matrix

GiB = 2**30
#: Peak resident memory a failed job's process may reach (the interpreter, numpy, zarr,
#: dask: about 80-150 MiB here); the bombs decode to 256 MiB - 1 GiB.
PEAK_LIMIT = 220 * 2**20


def zstd_bomb(size: int, declared: bool = True) -> bytes:
    """A valid zstd frame of ``size`` zero bytes in RLE blocks (4 bytes per 128 KiB): 32
    KiB for 1 GiB, built without holding it.  ``declared``: the header says the size."""
    frame = bytearray(struct.pack("<I", 0xFD2FB528))
    # Single segment with an 8-byte content size; else a 128 KiB window and no size.
    frame += bytes([0xE0]) + struct.pack("<Q", size) if declared else bytes([0x00, 7 << 3])
    left = size
    while left:
        block = min(128 * 1024, left)
        left -= block
        frame += ((left == 0) | 1 << 1 | block << 3).to_bytes(3, "little") + b"\0"
    return bytes(frame)


def deflate_bomb(size: int, wbits: int) -> bytes:
    """``size`` zero bytes deflated (gzip: ``wbits=31``, zlib: 15), 16 MiB at a time."""
    compressor, zeros, parts = zlib.compressobj(9, zlib.DEFLATED, wbits), bytes(2**24), []
    for _ in range(size // len(zeros)):
        parts.append(compressor.compress(zeros))
    return b"".join([*parts, compressor.flush()])


# -- the bounded decoders ----------------------------------------------------------------
CODECS = [Zstd(), Blosc(), Blosc(cname="lz4", shuffle=2), GZip(), Zlib(), LZ4(), BZ2(), LZMA()]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: repr(c)[:24])
@pytest.mark.parametrize("size", [1, 100, 4096, 100_003])
def test_every_codec_decodes_exactly_the_chunk_and_refuses_other_sizes(codec, size):
    values = np.random.default_rng(size).integers(0, 4, size, dtype=np.uint8)
    encoded = codec.encode(values)
    out = np.empty(size, np.uint8)
    decode_bounded(codec, encoded, size, out=out)
    assert (out == values).all()
    assert (decode_bounded(codec, encoded, size + 99, exact=False) == values).all()
    for wrong in (size - 1, size + 1):
        with pytest.raises(ChunkSizeError, match="a corrupt chunk"):
            decode_bounded(codec, encoded, wrong)
    with pytest.raises(ChunkSizeError):
        decode_bounded(codec, encoded, size - 1, exact=False)
    junk = np.random.default_rng(0).integers(0, 256, 1000, np.uint8).tobytes()
    with pytest.raises((ValueError, RuntimeError)):
        decode_bounded(codec, junk, 1000)


def test_a_codec_without_a_bounded_decoder_is_left_to_the_caller():
    from numcodecs import Delta  # noqa: PLC0415

    assert decode_bounded(Delta("i4"), b"\0" * 8, 8) is None


BOMBS = {
    "zstd": (Zstd(), lambda: zstd_bomb(GiB)),
    "zstd-no-size": (Zstd(), lambda: zstd_bomb(GiB, declared=False)),
    "gzip": (GZip(), lambda: deflate_bomb(2**28, 31)),
    "zlib": (Zlib(), lambda: deflate_bomb(2**28, 15)),
    "blosc": (Blosc(cname="zstd"), lambda: Blosc(cname="zstd").encode(bytes(2**26))),
    "lz4": (LZ4(), lambda: struct.pack("<I", 2**31) + b"\0" * 16),
}


def peak_of(code: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, int]:
    """Run ``code`` in a fresh interpreter (``env`` added to the environment); its output
    and the peak resident bytes of it and its children (as the kernel counts them)."""
    wrapper = (
        "import resource, subprocess, sys; "
        f"done = subprocess.run([sys.executable, '-c', {code!r}], capture_output=True, "
        "text=True); print(done.returncode); print(done.stdout); print(done.stderr, "
        "file=sys.stderr); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)"
    )
    done = subprocess.run(
        [sys.executable, "-c", wrapper],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    lines = done.stdout.strip().splitlines()
    inner = subprocess.CompletedProcess([], int(lines[0]), "\n".join(lines[1:-1]), done.stderr)
    return inner, int(lines[-1])


@pytest.mark.parametrize("name", list(BOMBS))
def test_a_bomb_is_refused_before_its_size_is_allocated(name):
    code = (
        "import numpy as np, sys; sys.path.insert(0, '.'); "
        "from tests.outofcore.storage.test_bounded import BOMBS; "
        "from outofcore.storage.codecs import ChunkSizeError, decode_bounded; "
        f"codec, make = BOMBS[{name!r}]; data = make(); "
        "out = np.empty(8192, np.uint8)\n"
        "try:\n    decode_bounded(codec, data, 8192, out=out)\n"
        "except ChunkSizeError as exc:\n    print(exc)"
    )
    done, peak = peak_of(code)
    assert done.returncode == 0, done.stderr
    assert "the chunk's 8192 bytes" in done.stdout or "the chunk holds 8192" in done.stdout
    assert peak < 200 * 2**20, peak  # the bomb alone is 64 MiB to 2 GiB


def test_declared_sizes_of_zstd_frames_are_summed_over_frames_and_skippable_ones_skipped():
    one = np.frombuffer(Zstd().encode(bytes(1000)), np.uint8)
    skippable = np.frombuffer(struct.pack("<II", 0x184D2A50, 3) + b"abc", np.uint8)
    assert zstd_content_size(np.concatenate([one, skippable, one])) == 2000
    assert zstd_content_size(np.frombuffer(zstd_bomb(100, declared=False), np.uint8)) is None
    two = np.concatenate([one, one])
    assert (decode_bounded(Zstd(), two, 2000) == 0).all()
    with pytest.raises(ChunkSizeError, match="declares 2000 bytes where the chunk holds 1000"):
        decode_bounded(Zstd(), two, 1000)
    with pytest.raises(ValueError, match="not a zstd frame"):
        zstd_content_size(np.frombuffer(b"\1" * 20, np.uint8))


# -- whole jobs: every read path ---------------------------------------------------------
def write_shard_with(shard: Path, inner_chunks: int, position: int, data: bytes) -> None:
    """Rewrite a zarr v3 shard (index at the end: offset and length per inner chunk,
    then its crc32c) with inner chunk ``position`` replaced by ``data``."""
    import google_crc32c  # noqa: PLC0415

    raw = shard.read_bytes()
    index = np.frombuffer(raw[-(16 * inner_chunks + 4) : -4], "<u8").reshape(-1, 2)
    pieces = [raw[offset : offset + length] for offset, length in index]
    pieces[position] = data
    body, entries = b"", []
    for piece in pieces:
        entries.append((len(body), len(piece)))
        body += piece
    table = np.array(entries, "<u8").tobytes()
    shard.write_bytes(body + table + struct.pack("<I", google_crc32c.value(table)))


LAYOUTS = {
    # name: (options of zarr.create_array, the key replaced, how it is replaced)
    "zstd": ({}, "c/1/1", "file"),  # outofcore's chunk-file reader
    "zstd-no-size": ({}, "c/1/1", "file"),
    "gzip": ({"compressors": zarr.codecs.GzipCodec()}, "c/1/1", "file"),  # through zarr
    "blosc": ({"compressors": zarr.codecs.BloscCodec()}, "c/1/1", "file"),
    "v2-zstd": ({"zarr_format": 2, "compressors": Zstd()}, "1.1", "file"),
    "v2-F": ({"zarr_format": 2, "compressors": Zstd(), "order": "F"}, "1.1", "file"),
    "sharded": ({"shards": (64, 64)}, "c/0/0", "inner"),  # inner chunk (1, 1) of the shard
}


def bomb_for(layout: str) -> bytes:
    if layout == "gzip":
        return deflate_bomb(2**29, 31)
    if layout == "blosc":  # blosc declares at most 2 GiB; zeros compress to a few KiB
        return Blosc(cname="zstd").encode(np.zeros(2**28, np.uint8))
    return zstd_bomb(GiB, declared=layout != "zstd-no-size")


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_bomb_in_an_input_fails_the_job_naming_the_chunk_within_bounded_memory(tmp_path, layout):
    """The issue's case: a 32 KiB zstd chunk that decodes to 1 GiB took the worker to
    1.1 GiB under --memory 16MiB (zarr decoded it whole to say which chunk failed)."""
    options, key, how = LAYOUTS[layout]
    rng = np.random.default_rng(3)
    for name in ("a", "b"):
        array = zarr.create_array(
            str(tmp_path / f"{name}.zarr"), shape=(64, 64), chunks=(32, 32), dtype="float64",
            **options,
        )  # fmt: skip
        array[...] = random_matrix(rng, (64, 64), "float64")
    bomb = bomb_for(layout)
    if how == "inner":
        write_shard_with(tmp_path / "a.zarr" / key, 4, 3, bomb)
    else:
        (tmp_path / "a.zarr" / key).write_bytes(bomb)
    code = (
        "import sys; from outofcore.cli import main; sys.exit(main(["
        f"'matmul', {str(tmp_path / 'a.zarr')!r}, {str(tmp_path / 'b.zarr')!r}, '-o', "
        f"{str(tmp_path / 'c.zarr')!r}, '--memory', '16MiB', '--scheduler', 'sync']))"
    )
    done, peak = peak_of(code, {"OUTOFCORE_READ_RETRIES": "1", "OUTOFCORE_READ_RETRY_DELAY": "0"})
    assert done.returncode == 3, done.stderr  # a started job failed
    errors = [line for line in done.stderr.splitlines() if line.startswith("outofcore: error")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"key {key} (rows " in errors[0], errors[0]
    assert "a corrupt chunk" in errors[0], errors[0]
    assert peak < PEAK_LIMIT, (peak, done.stderr)


def test_a_chunk_that_decodes_short_is_a_corrupt_chunk_not_stale_bytes(tmp_path):
    """A zstd frame declaring fewer bytes than the chunk was decoded into the start of a
    reused buffer, the rest of it left as whatever the buffer held before."""
    from outofcore import config  # noqa: PLC0415
    from outofcore.compute.worker_context import worker_context  # noqa: PLC0415
    from outofcore.operands.reading import ReadError, read_panel  # noqa: PLC0415

    values = random_matrix(np.random.default_rng(4), (64, 64), "float64")
    path = str(tmp_path / "a.zarr")
    zarr.create_array(path, shape=(64, 64), chunks=(32, 32), dtype="f8")[...] = values
    (tmp_path / "a.zarr" / "c" / "0" / "1").write_bytes(Zstd().encode(values[:16, :32].copy()))
    try:
        with (
            config.set({"read-retries": 0}),
            pytest.raises(ReadError, match=r"key c/0/1 .*where the chunk holds 8192"),
        ):
            read_panel(zarr.open_array(path), (slice(0, 64),) * 2, np.empty((64, 64)))
    finally:
        worker_context().release_in_process()  # the chunk-file buffers of this thread


# -- zarr v2 inputs: read through zarr, no internal error, one warning at most -------------
@pytest.mark.parametrize("order", ["C", "F"])
def test_zarr_v2_inputs_are_read_without_an_internal_error_in_the_log(tmp_path, order, caplog):
    """Every zarr v2 input logged 'AttributeError: ArrayV2Metadata has no attribute
    codecs' once per tile (the fast path looked for v3 codecs first)."""
    from outofcore import matmul  # noqa: PLC0415

    rng = np.random.default_rng(6)
    a_np, b_np = random_matrix(rng, (40, 30), "float64"), random_matrix(rng, (30, 20), "float64")
    for name, values in (("a", a_np), ("b", b_np)):
        array = zarr.create_array(
            str(tmp_path / f"{name}.zarr"), shape=values.shape, chunks=(10, 10),
            dtype="float64", zarr_format=2, order=order,
        )  # fmt: skip
        array[...] = values
    with caplog.at_level(logging.INFO, logger="outofcore"):
        matmul(
            str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr"), str(tmp_path / "c.zarr"),
            memory="64KiB", client="sync",
        )  # fmt: skip
    np.testing.assert_allclose(zarr.open_array(str(tmp_path / "c.zarr"))[...], a_np @ b_np)
    assert "AttributeError" not in caplog.text and "through zarr" not in caplog.text


def test_a_layout_warning_is_given_once_per_array(monkeypatch, tmp_path, caplog):
    from outofcore.storage import chunk_layout  # noqa: PLC0415

    array = zarr.create_array(str(tmp_path / "x.zarr"), shape=(4, 4), chunks=(2, 2), dtype="f8")
    monkeypatch.setattr(chunk_layout, "_WARNED", set())

    class Odd:
        def __getattr__(self, name):
            raise AttributeError(name)

    monkeypatch.setattr(zarr.Array, "metadata", property(lambda self: Odd()))
    with caplog.at_level(logging.WARNING, logger="outofcore"):
        for _ in range(3):  # a worker opens the array again for every task
            assert chunk_layout.layout_of(zarr.open_array(str(tmp_path / "x.zarr"))) is None
    assert caplog.text.count("through zarr") == 1, caplog.text
    assert array.shape == (4, 4)


# -- huge metadata-only shapes: sizes checked before any work ---------------------------------
def test_huge_metadata_only_inputs_are_planned_at_once_and_refused_before_any_write(tmp_path):
    """A 10^8 x 10^8 product of metadata-only inputs: 'outofcore plan' listed 2.4 * 10^8
    tiles (minutes), and the job ran until killed; a Gram of a 10^10-row input planned in
    67-88 s."""
    import time  # noqa: PLC0415

    from tests.helpers import cli  # noqa: PLC0415

    tall, wide, x = (str(tmp_path / f"{name}.zarr") for name in ("tall", "wide", "x"))
    zarr.create_array(tall, shape=(10**8, 100), chunks=(1000, 100), dtype="f8")
    zarr.create_array(wide, shape=(100, 10**8), chunks=(100, 1000), dtype="f8")
    zarr.create_array(x, shape=(10**10, 64), chunks=(100_000, 64), dtype="f8")
    started = time.perf_counter()
    planned = cli("plan", tall, wide, "--scheduler", "sync", "--json", timeout=120)
    gram = cli("plan", x, x, "--transpose-a", "--scheduler", "sync", "--json", timeout=120)
    assert time.perf_counter() - started < 60  # both, imports included (minutes before)
    assert planned.returncode == 0 and gram.returncode == 0, planned.stderr + gram.stderr
    assert json.loads(planned.stdout)["tiles"] > 10**7
    assert json.loads(gram.stdout)["panels_per_tile"] == 10**5
    out = tmp_path / "c.zarr"
    refused = cli("matmul", tall, wide, "-o", str(out), "--scheduler", "sync", timeout=120)
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "the output is 100000000x100000000 float64" in lines[0], lines
    assert "PiB uncompressed" in lines[0] and "free" in lines[0]
    assert not out.exists()


def test_verify_reads_a_bomb_within_bounded_memory_and_names_it_in_one_line(tmp_path):
    """verify read its operands through dask and zarr, decoding a bomb whole."""
    rng = np.random.default_rng(8)
    for name in ("a", "b", "c"):
        array = zarr.create_array(
            str(tmp_path / f"{name}.zarr"), shape=(64, 64), chunks=(32, 32), dtype="float64"
        )
        array[...] = random_matrix(rng, (64, 64), "float64")
    (tmp_path / "a.zarr" / "c" / "1" / "0").write_bytes(zstd_bomb(GiB))
    paths = [str(tmp_path / f"{name}.zarr") for name in ("a", "b", "c")]
    code = f"import sys; from outofcore.cli import main; sys.exit(main(['verify', *{paths!r}]))"
    done, peak = peak_of(code)
    assert done.returncode == 3, done.stderr
    # verify reads as a job's tasks do: retried with a warning each, then one error line.
    errors = [line for line in done.stderr.splitlines() if line.startswith("outofcore: error:")]
    assert len(errors) == 1, done.stderr
    assert "key c/1/0" in errors[0] and "declares 1073741824 bytes" in errors[0], errors
    assert peak < PEAK_LIMIT, peak

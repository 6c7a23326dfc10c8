"""Compression of the outputs outofcore creates; decoding of inputs bounded by their size.

``none`` by default: on dense float products zstd saves about 8% of the disk
for about three times the CPU per GiB written, and readers pay for it again
(measured in docs/performance.md).  ``zstd`` is zarr's own default.  This
module stays light: zarr loads only in :func:`zarr_compressors`.

:func:`decode_bounded` decodes a chunk's bytes (zstd, blosc, gzip, zlib, lz4, bz2,
lzma) into no more than the chunk's declared size: a 32 KiB zstd frame that decodes
to 1 GiB is refused from its header, before anything is allocated
(:class:`ChunkSizeError`), and a stream without a declared size is decoded into a
buffer of the size it may have, never more.
"""

from __future__ import annotations

import bz2
import lzma
import struct
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from outofcore.errors import InputError

OUTPUT_CODECS = ("none", "zstd")
DEFAULT_OUTPUT_CODEC = "none"


def check_output_codec(codec: str) -> str:
    """Return ``codec`` if outofcore can create outputs with it, else raise :class:`InputError`."""
    if codec not in OUTPUT_CODECS:
        raise InputError(f"output codec {codec!r}: choose one of {', '.join(OUTPUT_CODECS)}")
    return codec


def zarr_compressors(codec: str, zarr_format: int = 3) -> Any:
    """The ``compressors`` argument of ``zarr.create_array`` for ``codec``.

    Format 3 takes zarr's own codec, format 2 the numcodecs one.
    """
    if check_output_codec(codec) == "none":
        return None
    if zarr_format == 2:
        from numcodecs import Zstd  # noqa: PLC0415

        return Zstd()
    from zarr.codecs import ZstdCodec  # noqa: PLC0415

    return ZstdCodec()


# -- bounded decoding of inputs (issue 28, item 5) --------------------------------------


class ChunkSizeError(ValueError):
    """A chunk's bytes decode, or declare that they decode, to another size than the chunk's.

    A ``ValueError`` like the codecs' own errors for damaged bytes: readers report it
    as a corrupt chunk (:class:`outofcore.storage.chunkfiles.ChunkDecodeError`).
    """


#: Magic number of a zstd frame, and the range of zstd's skippable frames.
ZSTD_MAGIC = 0xFD2FB528
ZSTD_SKIPPABLE = range(0x184D2A50, 0x184D2A60)
#: Bytes of blosc's header: version, format, flags, typesize, nbytes, blocksize, cbytes.
BLOSC_HEADER = 16


def loose_limit(nbytes: int) -> int:
    """Most bytes a stage of a codec chain may decode to when its exact size is unknown
    (a compressor under another one): ``nbytes`` plus what any compressor may add."""
    return nbytes + nbytes // 8 + 2**16


def codec_kind(codec: Any) -> str | None:
    """Which bounded decoder fits ``codec`` (a numcodecs codec or a zarr v3 bytes codec):
    ``"zstd"``, ``"blosc"``, ``"gzip"``, ``"zlib"``, ``"lz4"``, ``"bz2"``, ``"lzma"``, or
    None for a codec decoded as it is (unbounded)."""
    name = getattr(codec, "codec_id", None) or getattr(codec, "codec_name", None)
    if not isinstance(name, str):
        name = {"ZstdCodec": "zstd", "GzipCodec": "gzip", "BloscCodec": "blosc"}.get(
            type(codec).__name__, ""
        )
    name = name.rsplit(".", 1)[-1]
    if name == "lzma" and getattr(_numcodec(codec), "format", lzma.FORMAT_XZ) == lzma.FORMAT_RAW:
        return None  # raw lzma names its filters in the codec: decoded by the codec itself
    return name if name in ("zstd", "blosc", "gzip", "zlib", "lz4", "bz2", "lzma") else None


def _numcodec(codec: Any) -> Any:
    """The numcodecs object behind ``codec`` (itself, or a zarr wrapper's)."""
    for attribute in ("_zstd_codec", "_blosc_codec", "_codec"):
        inner = getattr(codec, attribute, None)
        if inner is not None:
            return inner
    return codec


def decode_bounded(
    codec: Any, data: Any, nbytes: int, exact: bool = True, out: np.ndarray | None = None
) -> np.ndarray | None:
    """Decode ``data`` with ``codec`` into at most ``nbytes`` bytes.

    Parameters
    ----------
    codec
        A numcodecs codec or a zarr v3 bytes-to-bytes codec (:func:`codec_kind`).
    data
        The encoded bytes (any buffer).
    nbytes
        The chunk's size in bytes: what the bytes must decode to when ``exact``, else
        the most they may decode to.
    exact
        Whether the decoded size must be ``nbytes`` exactly.
    out
        Where to decode to (a contiguous buffer of ``nbytes``, when ``exact``); else a
        new buffer of the decoded size.

    Returns
    -------
    numpy.ndarray or None
        The decoded bytes (uint8), or None for a codec with no bounded decoder
        (:func:`codec_kind`): the caller decodes those itself.

    Raises
    ------
    ChunkSizeError
        When the bytes declare or decode to more than ``nbytes`` (or, ``exact``, to
        another size): nothing larger than ``nbytes`` (plus a small constant) is allocated.
    ValueError, RuntimeError
        For bytes the codec cannot decode, as the codec itself raises them.
    """
    kind = codec_kind(codec)
    if kind is None:
        return None
    source = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
    target = None if out is None else out.reshape(-1).view(np.uint8)
    if target is not None and (not exact or target.size != nbytes):
        raise ValueError(f"out holds {target.size} bytes: it must hold exactly {nbytes}")
    try:
        decoded = _DECODERS[kind](_numcodec(codec), source, nbytes, exact, target)
    except (zlib.error, lzma.LZMAError, EOFError, OSError) as exc:  # as ValueError: damaged
        raise ValueError(f"{kind}: {exc}") from exc
    if exact and decoded.size != nbytes:
        raise ChunkSizeError(
            f"decodes to {decoded.size} bytes where the chunk holds {nbytes}: a corrupt chunk"
        )
    return decoded


def _overflow(nbytes: int) -> ChunkSizeError:
    """The error for a stream that went on past ``nbytes`` decoded bytes (stopped there)."""
    return ChunkSizeError(f"decodes to more than the chunk's {nbytes} bytes: a corrupt chunk")


def _checked_size(declared: int, nbytes: int, exact: bool) -> int:
    """``declared`` if a stream may decode to it, else :class:`ChunkSizeError`."""
    if declared > nbytes or (exact and declared != nbytes):
        most = "holds" if exact else "may hold at most"
        raise ChunkSizeError(
            f"declares {declared} bytes where the chunk {most} {nbytes}: a corrupt chunk"
        )
    return declared


def _buffer(target: np.ndarray | None, size: int) -> np.ndarray:
    return target if target is not None else np.empty(size, dtype=np.uint8)


def zstd_content_size(data: np.ndarray) -> int | None:
    """The decoded size the zstd frames in ``data`` declare in their headers (summed over
    the frames), or None when a frame declares none.  Damaged frames: ValueError."""
    position, total, size = 0, 0, data.size
    if not size:
        raise ValueError("no zstd frame: the chunk's bytes are empty")
    while position < size:
        if size - position < 8:
            raise ValueError("zstd data ends inside a frame header")
        magic = int.from_bytes(data[position : position + 4].tobytes(), "little")
        if magic in ZSTD_SKIPPABLE:
            length = int.from_bytes(data[position + 4 : position + 8].tobytes(), "little")
            position += 8 + length
            continue
        if magic != ZSTD_MAGIC:
            raise ValueError("not a zstd frame")
        descriptor = int(data[position + 4])
        single_segment = descriptor >> 5 & 1
        size_field = (0 if not single_segment else 1, 2, 4, 8)[descriptor >> 6]
        dictionary_field = (0, 1, 2, 4)[descriptor & 3]
        start = position + 5 + (0 if single_segment else 1) + dictionary_field
        if size_field == 0:
            return None
        declared = int.from_bytes(data[start : start + size_field].tobytes(), "little")
        total += declared + (256 if size_field == 2 else 0)
        position = _zstd_frame_end(data, start + size_field, descriptor >> 2 & 1)
    return total


def _zstd_frame_end(data: np.ndarray, position: int, checksum: int) -> int:
    """Where the zstd frame whose blocks start at ``position`` ends (its blocks walked)."""
    while True:
        if position + 3 > data.size:
            raise ValueError("zstd data ends inside a block header")
        header = int.from_bytes(data[position : position + 3].tobytes(), "little")
        kind, length = header >> 1 & 3, header >> 3
        if kind == 3:
            raise ValueError("zstd block of the reserved type")
        position += 3 + (1 if kind == 1 else length)
        if header & 1:
            return position + 4 * checksum


def _zstd(
    codec: Any, data: np.ndarray, nbytes: int, exact: bool, target: np.ndarray | None
) -> np.ndarray:
    from numcodecs import zstd  # noqa: PLC0415

    try:
        declared = zstd_content_size(data)
    except ValueError:  # not frames as this reads them: the codec refuses them (its error)
        declared = None
    if declared is None:  # a stream without a declared size: decode into what it may be
        buffer = _buffer(target, nbytes)
        try:
            zstd.decompress(data, buffer)
        except RuntimeError as exc:
            if "too small" in str(exc):  # more than the chunk's bytes came out
                raise _overflow(nbytes) from None
            if exact or "expected to decompress" not in str(exc):
                raise
            return np.frombuffer(zstd.decompress(data), dtype=np.uint8)  # less: now bounded
        return buffer
    buffer = _buffer(target, _checked_size(declared, nbytes, exact))
    zstd.decompress(data, buffer)
    return buffer


def _blosc(
    codec: Any, data: np.ndarray, nbytes: int, exact: bool, target: np.ndarray | None
) -> np.ndarray:
    from numcodecs import blosc  # noqa: PLC0415

    if data.size < BLOSC_HEADER:
        raise ValueError(f"blosc data of {data.size} bytes: shorter than its header")
    declared, blocksize, cbytes = struct.unpack("<III", data[4:BLOSC_HEADER].tobytes())
    _checked_size(declared, nbytes, exact)
    if cbytes > data.size or (declared and not 0 < blocksize <= declared):
        raise ValueError(
            f"blosc header: {cbytes} compressed bytes in {data.size}, blocks of {blocksize} "
            f"for {declared} bytes"
        )
    buffer = _buffer(target, declared)
    blosc.decompress(data, buffer)
    return buffer


def _lz4(
    codec: Any, data: np.ndarray, nbytes: int, exact: bool, target: np.ndarray | None
) -> np.ndarray:
    if data.size < 4:
        raise ValueError(f"lz4 data of {data.size} bytes: shorter than its size header")
    declared = _checked_size(int.from_bytes(data[:4].tobytes(), "little"), nbytes, exact)
    buffer = _buffer(target, declared)
    codec.decode(data, out=buffer)
    return buffer


def _streamed(
    make: Callable[[Any], Any], more: Callable[[bytes], bool], name: str
) -> Callable[..., np.ndarray]:
    """A bounded decoder for a stdlib stream decompressor ``make(codec)``
    (``decompress(data, max_length)``, ``eof``, ``unused_data``): streams one after
    another while ``more(what is left)``."""

    def decode(
        codec: Any, data: np.ndarray, nbytes: int, exact: bool, target: np.ndarray | None
    ) -> np.ndarray:
        buffer = _buffer(target, nbytes)
        done, rest = 0, data.tobytes()
        while True:
            decompressor = make(codec)
            piece = decompressor.decompress(rest, nbytes - done + 1)
            if done + len(piece) > nbytes:
                raise _overflow(nbytes)
            buffer[done : done + len(piece)] = np.frombuffer(piece, dtype=np.uint8)
            done += len(piece)
            if not decompressor.eof:
                raise ValueError(f"{name} stream truncated after {done} bytes")
            rest = decompressor.unused_data
            if not more(rest):
                break
        return buffer[:done]

    return decode


def _lzma_decompressor(codec: Any) -> Any:
    return lzma.LZMADecompressor(format=getattr(codec, "format", lzma.FORMAT_AUTO))


_DECODERS: dict[str, Callable[..., np.ndarray]] = {
    "zstd": _zstd,
    "blosc": _blosc,
    "lz4": _lz4,
    # gzip members and bz2 / xz streams may follow one another (as the codecs read them);
    # trailing zeros after gzip members are padding, as GzipFile reads them.
    "gzip": _streamed(
        lambda _: zlib.decompressobj(16 + zlib.MAX_WBITS), lambda r: bool(r.strip(b"\0")), "gzip"
    ),
    "zlib": _streamed(lambda _: zlib.decompressobj(), lambda _: False, "zlib"),
    "bz2": _streamed(lambda _: bz2.BZ2Decompressor(), bool, "bz2"),
    "lzma": _streamed(_lzma_decompressor, bool, "lzma"),
}

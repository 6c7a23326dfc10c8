"""Zarr arrays whose chunks decode to no more than their declared size.

zarr decodes a chunk with whatever size its bytes say: a 32 KiB zstd frame that
decodes to 1 GiB is allocated whole before anything can check it against the
chunk's shape.  :func:`bounded_array` gives a twin of an array (same metadata,
same store) whose codec pipeline decodes every chunk, inner chunks of shards
included, with :func:`outofcore.storage.codecs.decode_bounded`: zstd, blosc, gzip, zlib,
lz4, bz2 and lzma (zarr v3 codecs, numcodecs' zarr v3 codecs, zarr v2
compressors) never produce more than the chunk's bytes (plus what one more
compressor may add, for a compressor under another); a chunk that would is a
:class:`~outofcore.storage.codecs.ChunkSizeError`.  Other codecs decode as zarr decodes
them, unbounded.  The twin only reads: its codecs encode as the originals do.

Shards are read through :class:`BoundedShardingCodec`: zarr fetches the byte ranges
a shard's index names and reads a range past the end of the shard as a missing
chunk, that is as the fill value, so a damaged or hostile index (on an object
store, or a local shard zarr reads) gave zeros and a job that succeeded; and an
index naming a huge range made zarr fetch all of it.  The twin checks every range
against the most an inner chunk can be stored in before fetching it, and every
answer against the range asked for (:class:`CorruptShardError`).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr
from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
from zarr.abc.store import RangeByteRequest, SuffixByteRequest
from zarr.codecs import BytesCodec, ShardingCodec, TransposeCodec
from zarr.codecs._v2 import V2Codec
from zarr.codecs.sharding import MAX_UINT_64, ShardingCodecIndexLocation
from zarr.core.array import AsyncArray
from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata
from zarr.registry import get_pipeline_class

from outofcore.storage.codecs import codec_kind, decode_bounded, loose_limit
from outofcore.storage.presence import listed_pipeline, presence_of


def bounded_array(array: zarr.Array) -> zarr.Array:
    """A twin of ``array`` that reads the same chunks with bounded decoding.

    Raises
    ------
    TypeError
        For metadata of a kind this does not know (the caller keeps ``array``).
    """
    source = array._async_array
    metadata = source.metadata
    if isinstance(metadata, ArrayV3Metadata):
        codecs = bounded_codecs(metadata.codecs)
    elif isinstance(metadata, ArrayV2Metadata):
        codecs = (BoundedV2Codec(filters=metadata.filters, compressor=metadata.compressor),)
    else:
        raise TypeError(f"array metadata of type {type(metadata).__name__}")
    twin = AsyncArray(metadata=metadata, store_path=source.store_path, config=source.config)
    pipeline = get_pipeline_class().from_codecs(codecs)
    # a listed input's reads stay checked: a listed chunk the store calls missing raises
    pipeline = listed_pipeline(pipeline, presence_of(array))
    object.__setattr__(twin, "codec_pipeline", pipeline)
    return zarr.Array(twin)


def bounded_codecs(codecs: Any) -> tuple[Any, ...]:
    """A zarr v3 codec chain with its known compressors bounded (shards' inner chains too).

    A bytes codec's output is exact (the chunk's bytes, through fixed-size codecs such as
    ``crc32c``) when the array-to-bytes codec is ``bytes`` and every bytes codec before
    it is fixed-size; else it is bounded by :func:`~outofcore.storage.codecs.loose_limit`.
    """
    chain: list[Any] = []
    fixed = False
    before: list[BytesBytesCodec] = []
    for codec in codecs:
        if isinstance(codec, ShardingCodec):
            codec = BoundedShardingCodec(
                chunk_shape=codec.chunk_shape,
                codecs=bounded_codecs(codec.codecs),
                index_codecs=codec.index_codecs,
                index_location=codec.index_location,
            )
        elif isinstance(codec, BytesBytesCodec):
            if codec_kind(codec) is not None:
                exact = fixed and all(earlier.is_fixed_size for earlier in before)
                before.append(codec)
                codec = BoundedBytesCodec(inner=codec, before=tuple(before[:-1]), exact=exact)
            else:
                before.append(codec)
        if isinstance(codec, ArrayBytesCodec):
            fixed = type(codec) is BytesCodec
        elif not isinstance(codec, ArrayArrayCodec | BytesBytesCodec):
            fixed = False
        chain.append(codec)
    return tuple(chain)


def spec_nbytes(chunk_spec: Any) -> int | None:
    """Bytes of a chunk of ``chunk_spec`` (shape and dtype), or None for variable-size dtypes."""
    try:
        dtype = chunk_spec.dtype.to_native_dtype()
    except AttributeError:
        dtype = chunk_spec.dtype
    dtype = np.dtype(dtype)
    if dtype.hasobject or dtype.itemsize == 0:
        return None
    return math.prod(chunk_spec.shape) * dtype.itemsize


@dataclass(frozen=True)
class BoundedBytesCodec(BytesBytesCodec):
    """A zarr v3 bytes-to-bytes codec (``inner``) whose decoding is bounded by the chunk.

    ``before``: the bytes codecs applied before ``inner`` when encoding, whose sizes
    give the exact size ``inner`` decodes to when ``exact``.
    """

    inner: BytesBytesCodec
    before: tuple[BytesBytesCodec, ...] = ()
    exact: bool = False

    @property
    def is_fixed_size(self) -> bool:  # type: ignore[override]
        return self.inner.is_fixed_size

    def to_dict(self) -> Any:
        return self.inner.to_dict()

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: Any) -> int:
        return self.inner.compute_encoded_size(input_byte_length, chunk_spec)

    def validate(self, **kwargs: Any) -> None:
        self.inner.validate(**kwargs)

    async def _encode_single(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        return await self.inner._encode_single(chunk_bytes, chunk_spec)

    async def _decode_single(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        nbytes = spec_nbytes(chunk_spec)
        if nbytes is None:
            return await self.inner._decode_single(chunk_bytes, chunk_spec)
        if self.exact:
            for codec in self.before:
                nbytes = codec.compute_encoded_size(nbytes, chunk_spec)
        else:
            nbytes = loose_limit(nbytes)
        decoded = await asyncio.to_thread(
            decode_bounded, self.inner, chunk_bytes.as_numpy_array(), nbytes, self.exact
        )
        return chunk_spec.prototype.buffer.from_array_like(decoded)


@dataclass(frozen=True)
class BoundedV2Codec(V2Codec):
    """zarr's codec for v2 arrays, its compressor's decoding bounded by the chunk (exact
    without filters; with filters, which may change the size, by the loose limit)."""

    async def _decode_single(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        nbytes = spec_nbytes(chunk_spec)
        if self.compressor is None or nbytes is None or codec_kind(self.compressor) is None:
            return await super()._decode_single(chunk_bytes, chunk_spec)
        exact = not self.filters
        decoded = await asyncio.to_thread(
            decode_bounded,
            self.compressor,
            chunk_bytes.as_numpy_array(),
            nbytes if exact else loose_limit(nbytes),
            exact,
        )
        rest = V2Codec(filters=self.filters, compressor=None)
        return await rest._decode_single(
            chunk_spec.prototype.buffer.from_array_like(decoded), chunk_spec
        )


class CorruptShardError(ValueError):
    """A shard's index names bytes the shard cannot hold: a range longer than an inner
    chunk can be stored in, or past the end of the shard.  A ``ValueError`` like the
    codecs' errors for damaged bytes: readers retry it and report a corrupt chunk
    (:class:`outofcore.storage.chunkfiles.ChunkDecodeError`)."""


def stored_limit(codecs: Any, chunk_spec: Any) -> int | None:
    """The most bytes a chunk of ``chunk_spec`` is stored in through the codec chain
    ``codecs``; None where a codec of the chain has no known bound (then only the
    shard's end bounds a range).

    ``bytes`` and ``transpose`` keep the size, fixed-size bytes codecs (``crc32c``) add
    theirs, and each compressor may add :func:`~outofcore.storage.codecs.loose_limit`'s margin;
    other array-to-array codecs may change the dtype (numcodecs' ``astype``): no bound.
    """
    nbytes = spec_nbytes(chunk_spec)
    if nbytes is None:
        return None
    for codec in codecs:
        if isinstance(codec, BoundedBytesCodec):
            codec = codec.inner
        if type(codec) in (TransposeCodec, BytesCodec):
            continue
        if isinstance(codec, BytesBytesCodec) and codec.is_fixed_size:
            nbytes = codec.compute_encoded_size(nbytes, chunk_spec)
        elif isinstance(codec, BytesBytesCodec) and codec_kind(codec) is not None:
            nbytes = loose_limit(nbytes)
        else:
            return None
    return nbytes


class BoundedShardingCodec(ShardingCodec):
    """zarr's sharding codec, reading only the byte ranges an inner chunk can be stored in
    and failing where the shard holds less than its index names (module docstring).

    Not a dataclass of its own: zarr's ``__init__`` (which parses the arguments and
    caches the chunk specs) stays the constructor.
    """

    async def _decode_single(self, shard_bytes: Any, shard_spec: Any) -> Any:
        checked = _CheckedShard(self, shard_spec, None)
        await checked.check_index(shard_bytes, len(shard_bytes))
        return await super()._decode_single(shard_bytes, shard_spec)

    async def _decode_partial_single(
        self, byte_getter: Any, selection: Any, shard_spec: Any
    ) -> Any:
        checked = _CheckedShard(self, shard_spec, byte_getter)
        return await super()._decode_partial_single(checked, selection, shard_spec)

    async def _load_full_shard_maybe(
        self, byte_getter: Any, prototype: Any, chunks_per_shard: tuple[int, ...]
    ) -> Any:
        if isinstance(byte_getter, _CheckedShard):
            return await byte_getter.inner_chunks(prototype)
        return await super()._load_full_shard_maybe(byte_getter, prototype, chunks_per_shard)


class _CheckedShard:
    """The byte getter of one shard that :class:`BoundedShardingCodec` reads through.

    Its first request is the shard's index: no answer is a shard never written, as zarr
    reads it.  Every later request is a range the index names, which must be at most
    :func:`stored_limit` bytes and must come back whole.  A whole shard is read as its
    index, then the one range its inner chunks span (:meth:`inner_chunks`).
    """

    def __init__(self, codec: BoundedShardingCodec, shard_spec: Any, getter: Any) -> None:
        self.codec, self.getter = codec, getter
        self.per_shard = codec._get_chunks_per_shard(shard_spec)
        self.index_bytes = codec._shard_index_size(self.per_shard)
        self.limit = stored_limit(codec.codecs, codec._get_chunk_spec(shard_spec))
        self.where = str(getattr(getter, "path", "") or "a shard")
        self.at_start = codec.index_location == ShardingCodecIndexLocation.start
        self.first = True

    async def get(self, prototype: Any, byte_range: Any = None) -> Any:
        first, self.first = self.first, False
        if isinstance(byte_range, RangeByteRequest):
            start, end = int(byte_range.start), int(byte_range.end)
            most = self.index_bytes if first else self.limit
            if end <= start or (most is not None and end - start > most):
                raise CorruptShardError(
                    f"{self.where}: the shard index names bytes {start} to {end} for an inner "
                    f"chunk stored in at most {most} bytes: a corrupt shard"
                )
            found = await self.getter.get(prototype, byte_range)
            return self._whole_answer(found, end - start, first)
        if isinstance(byte_range, SuffixByteRequest):
            found = await self.getter.get(prototype, byte_range)
            return self._whole_answer(found, int(byte_range.suffix), first)
        raise TypeError(f"{self.where}: outofcore reads shards by byte ranges, not {byte_range!r}")

    def _whole_answer(self, found: Any, wanted: int, first: bool) -> Any:
        """``found``, when it holds the ``wanted`` bytes; None for a missing shard (its
        first request); else the shard ended early."""
        if found is None and first:
            return None
        got = 0 if found is None else len(found)
        if got != wanted:
            raise CorruptShardError(
                f"{self.where}: the shard ended after {got} of the {wanted} bytes its index "
                "names: a corrupt or truncated shard"
            )
        return found

    async def inner_chunks(self, prototype: Any) -> dict[tuple[int, ...], Any] | None:
        """Every inner chunk of the shard by its position (None: no shard), read as the
        shard's index, checked, then the one range its inner chunks span where that is
        no more than they and the index can be stored in (a shard as zarr writes it),
        else each inner chunk's own range."""
        request = (
            RangeByteRequest(0, self.index_bytes)
            if self.at_start
            else SuffixByteRequest(self.index_bytes)
        )
        index = await self.get(prototype, request)
        if index is None:
            return None
        entries = await self._entries(index)
        end = max((stop for _, _, stop in entries), default=0)
        if not entries:
            return {}
        if self.limit is not None and end <= self.index_bytes + len(entries) * self.limit:
            body = self._whole_answer(
                await self.getter.get(prototype, RangeByteRequest(0, end)), end, False
            )
            return {position: body[start:stop] for position, start, stop in entries}
        return {
            position: await self.get(prototype, RangeByteRequest(start, stop))
            for position, start, stop in entries
        }

    async def check_index(self, shard: Any, size: int) -> None:
        """Check the index of a whole shard of ``size`` bytes: no inner chunk past its end."""
        if size < self.index_bytes:
            raise CorruptShardError(
                f"{self.where}: {size} bytes, shorter than its shard index of "
                f"{self.index_bytes}: a corrupt or truncated shard"
            )
        raw = shard[: self.index_bytes] if self.at_start else shard[size - self.index_bytes :]
        end = max((stop for _, _, stop in await self._entries(raw)), default=0)
        if end > size:
            raise CorruptShardError(
                f"{self.where}: the shard index names bytes up to {end} of a {size}-byte "
                "shard: a corrupt or truncated shard"
            )

    async def _entries(self, raw: Any) -> list[tuple[tuple[int, ...], int, int]]:
        """The written inner chunks of the index ``raw``: position, first and end byte,
        each range checked against :attr:`limit` (numpy over the table: a shard may hold
        a million inner chunks)."""
        index = await self.codec._decode_shard_index(raw, self.per_shard)
        table = index.offsets_and_lengths.reshape(-1, 2)
        written = ~((table[:, 0] == MAX_UINT_64) & (table[:, 1] == MAX_UINT_64))
        offsets, lengths = table[written, 0], table[written, 1]
        if self.limit is not None and lengths.size and int(lengths.max()) > self.limit:
            position = np.unravel_index(np.flatnonzero(written)[lengths.argmax()], self.per_shard)
            raise CorruptShardError(
                f"{self.where}: the shard index names {int(lengths.max())} bytes for inner "
                f"chunk {tuple(int(i) for i in position)}, stored in at most {self.limit} "
                "bytes: a corrupt shard"
            )
        if (lengths == 0).any():  # every codec stores a chunk in a byte or more
            raise CorruptShardError(
                f"{self.where}: the shard index names an inner chunk of 0 bytes (zarr would "
                "read it as the fill value): a corrupt shard"
            )
        ends = offsets + lengths  # uint64: a sum past 2**64 wraps below its offset
        if (ends < offsets).any():
            raise CorruptShardError(
                f"{self.where}: the shard index names bytes past 2**64: a corrupt shard"
            )
        positions = np.argwhere(written.reshape(self.per_shard))
        return [
            (tuple(int(i) for i in position), int(offset), int(end))
            for position, offset, end in zip(positions, offsets, ends, strict=True)
        ]

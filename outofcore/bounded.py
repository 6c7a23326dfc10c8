"""Zarr arrays whose chunks decode to no more than their declared size.

zarr decodes a chunk with whatever size its bytes say: a 32 KiB zstd frame that
decodes to 1 GiB is allocated whole before anything can check it against the
chunk's shape.  :func:`bounded_array` gives a twin of an array (same metadata,
same store) whose codec pipeline decodes every chunk, inner chunks of shards
included, with :func:`outofcore.codecs.decode_bounded`: zstd, blosc, gzip, zlib,
lz4, bz2 and lzma (zarr v3 codecs, numcodecs' zarr v3 codecs, zarr v2
compressors) never produce more than the chunk's bytes (plus what one more
compressor may add, for a compressor under another); a chunk that would is a
:class:`~outofcore.codecs.ChunkSizeError`.  Other codecs decode as zarr decodes
them, unbounded.  The twin only reads: its codecs encode as the originals do.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr
from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
from zarr.codecs import BytesCodec, ShardingCodec
from zarr.codecs._v2 import V2Codec
from zarr.core.array import AsyncArray
from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata
from zarr.registry import get_pipeline_class

from outofcore.codecs import codec_kind, decode_bounded, loose_limit
from outofcore.presence import listed_pipeline, presence_of


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
    it is fixed-size; else it is bounded by :func:`~outofcore.codecs.loose_limit`.
    """
    chain: list[Any] = []
    fixed = False
    before: list[BytesBytesCodec] = []
    for codec in codecs:
        if isinstance(codec, ShardingCodec):
            codec = ShardingCodec(
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

"""Which chunks an input's listing holds: a listed chunk that a read finds missing is an error.

zarr reads a chunk whose key the store reports missing (an object store's 404) as
the fill value.  A proxy, a cache or an eventually consistent store can answer
404 for an object that exists, and the job then multiplies zeros in its place
and reports success.  So a job keeps, for every input, the chunk keys of its
fingerprint (the listing taken when the job starts, :mod:`outofcore.storage.fingerprint`)
as a :class:`ChunkPresence`, and its tasks read twins of the inputs
(:func:`listed_array`: same metadata, same store) whose codec pipeline raises
:class:`MissingChunkError` when the store answers "missing" for a listed key.
That is an ``OSError``: the read is retried (:mod:`outofcore.operands.reading`), and when
the retries run out the task fails naming the chunk.  A key the listing does not
hold (a chunk never written) reads as the fill value, as zarr reads it.

What travels with every task, per input: nothing when every chunk of the grid
(the shard grid of a sharded array) was listed, as for any dense array; else the
listed blocks, compressed: a bitmap of the grid, or the sorted indices of the
listed blocks, whichever is smaller (at most one bit per block of the grid, before
compression).  The check is made where zarr reads (object stores, and local arrays
zarr decodes); outofcore's own reader of local chunk files reads a missing file as
the fill value, and a file deleted during a job changes the input's fingerprint,
which the job checks before it is marked complete.
"""

from __future__ import annotations

import dataclasses
import math
import re
import zlib
from collections.abc import Iterable
from functools import cached_property
from typing import Any

import numpy as np
import zarr
from zarr.core.array import AsyncArray
from zarr.core.codec_pipeline import BatchedCodecPipeline

from outofcore.storage.manifest import ChunkKeys

#: Kinds of :attr:`ChunkPresence.kind`.
KINDS = ("all", "bits", "indices", "keys")
#: Largest grid whose blocks are numbered in int64, and largest extent of it whose
#: indices are parsed as int64 (18 digits); larger ones keep the listed keys.
_FLAT_LIMIT, _DIGITS_LIMIT = 2**62, 10**18


class MissingChunkError(OSError):
    """The store reports a chunk missing that the input's listing held when the job started."""


@dataclasses.dataclass(frozen=True)
class ChunkPresence:
    """The chunk keys (shard keys, when sharded) an input's listing held.

    ``kind``: ``"all"`` (every block of the grid listed; ``data`` empty), ``"bits"``
    (``data``: a zlib-compressed bitmap of the grid in C order, ``numpy.packbits``),
    ``"indices"`` (the sorted C-order indices of the listed blocks, int64, compressed)
    or ``"keys"`` (the listed keys, newline-separated, compressed: grids too large to
    number).
    """

    #: How messages name the array.
    where: str
    #: The array's path inside its store ("" at the store's root).
    root: str
    #: The array's chunk keys (its chunk or shard grid and key encoding).
    form: ChunkKeys
    kind: str
    data: bytes = b""

    @classmethod
    def from_listing(cls, array: zarr.Array, keys: Iterable[str], where: str) -> ChunkPresence:
        """The presence of ``array``'s blocks in a listing of its ``keys`` (relative to the
        array, as :attr:`outofcore.storage.fingerprint.Fingerprint.tokens` holds them)."""
        form = key_form(array)
        total = math.prod(form.grid)
        root = array.path.strip("/")
        if total >= _FLAT_LIMIT or not form.grid or max(form.grid) > _DIGITS_LIMIT:
            listed = "\n".join(sorted(key for key in keys if form.index(key) is not None))
            return cls(where, root, form, "keys", zlib.compress(listed.encode()))
        flat = _listed_blocks(form, keys)
        if flat.size == total:
            return cls(where, root, form, "all")
        if flat.nbytes * 8 < total:  # fewer bytes than a bitmap
            return cls(where, root, form, "indices", zlib.compress(flat.tobytes()))
        bits = np.zeros((total + 7) // 8, dtype=np.uint8)  # numpy.packbits' order
        np.bitwise_or.at(bits, flat >> 3, (128 >> (flat & 7)).astype(np.uint8))
        return cls(where, root, form, "bits", zlib.compress(bits.tobytes()))

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r}: need one of {', '.join(KINDS)}")

    def __getstate__(self) -> dict[str, Any]:
        """What pickles: the fields, never the decompressed listing."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @cached_property
    def _decoded(self) -> Any:
        if self.kind == "keys":
            return frozenset(zlib.decompress(self.data).decode().split("\n"))
        if self.kind == "indices":
            return np.frombuffer(zlib.decompress(self.data), dtype=np.int64)
        if self.kind == "bits":
            return np.frombuffer(zlib.decompress(self.data), dtype=np.uint8)
        return None

    def listed(self, key: str) -> bool:
        """Whether the listing held ``key`` (relative to the array) as one of its blocks."""
        index = self.form.index(key)
        if index is None:
            return False
        if self.kind == "all":
            return True
        if self.kind == "keys":
            return key in self._decoded
        flat = int(np.ravel_multi_index(index, self.form.grid))
        if self.kind == "indices":
            found = self._decoded
            at = int(np.searchsorted(found, flat))
            return at < found.size and int(found[at]) == flat
        return bool(self._decoded[flat >> 3] >> (7 - (flat & 7)) & 1)

    def listed_path(self, path: str) -> bool:
        """Whether the listing held the store key ``path`` (the array's path, then its key)."""
        if self.root:
            if not path.startswith(self.root + "/"):
                return False
            path = path[len(self.root) + 1 :]
        return self.listed(path)

    def missing(self, path: str) -> MissingChunkError:
        """The error of a read that found the listed ``path`` missing."""
        return MissingChunkError(
            f"the store answers 'not found' for {path!r} of {self.where}, listed when the "
            "job started: not read as the fill value"
        )


def _listed_blocks(form: ChunkKeys, keys: Iterable[str]) -> np.ndarray:
    """The sorted C-order indices (int64) of the blocks of ``form`` among ``keys``.

    One regular expression over all the keys at once (about 0.8 s per million keys,
    a quarter of matching them one by one), then the grid's bounds: the keys
    :meth:`~outofcore.storage.manifest.ChunkKeys.index` takes, and only those.
    """
    digits = len(str(max(form.grid) - 1)) if form.grid and max(form.grid) > 0 else 1
    index = rf"(0|[1-9][0-9]{{0,{digits - 1}}})"
    head = re.escape(form.prefix + form.separator) if form.prefix else ""
    pattern = re.compile(
        rf"^{head}{re.escape(form.separator).join([index] * len(form.grid))}$", re.M | re.A
    )
    text = "\n".join(key for key in keys if "\n" not in key)
    found = np.array(pattern.findall(text), dtype=np.int64).reshape(-1, len(form.grid))
    found = found[(found < np.array(form.grid, dtype=np.int64)).all(axis=1)]
    if not found.size:
        return np.empty(0, dtype=np.int64)
    flat = np.sort(np.ravel_multi_index(tuple(found.T), form.grid).astype(np.int64))
    return flat[np.concatenate(([True], flat[1:] != flat[:-1]))]  # each block once


def key_form(array: zarr.Array) -> ChunkKeys:
    """The chunk keys of ``array``: its key encoding and its grid of stored blocks (the
    shard grid when sharded: one key per shard)."""
    blocks = array.shards or array.chunks
    grid = tuple(-(-extent // size) for extent, size in zip(array.shape, blocks, strict=True))
    metadata = array.metadata
    if metadata.zarr_format == 3:
        encoding = metadata.chunk_key_encoding
        prefix = "c" if encoding.name == "default" else ""
        return ChunkKeys(prefix, encoding.separator, grid)
    return ChunkKeys("", metadata.dimension_separator or ".", grid)


@dataclasses.dataclass(frozen=True)
class ListedPipeline(BatchedCodecPipeline):
    """zarr's codec pipeline, whose reads raise :class:`MissingChunkError` for a block the
    store reports missing but ``presence`` lists (None: reads as zarr reads)."""

    presence: ChunkPresence | None = None

    def evolve_from_array_spec(self, array_spec: Any) -> ListedPipeline:
        evolved = super().evolve_from_array_spec(array_spec)
        return dataclasses.replace(evolved, presence=self.presence)

    async def read(self, batch_info: Any, out: Any, drop_axes: tuple[int, ...] = ()) -> None:
        if self.presence is not None:
            batch_info = [
                (ListedGetter(getter, self.presence), *rest) for getter, *rest in batch_info
            ]
        await super().read(batch_info, out, drop_axes)


@dataclasses.dataclass(frozen=True)
class ListedGetter:
    """A zarr byte getter (a ``StorePath``) that raises :class:`MissingChunkError` where
    the store answers "missing" for a block the listing held."""

    inner: Any
    presence: ChunkPresence

    async def get(self, prototype: Any = None, byte_range: Any = None) -> Any:
        value = await self.inner.get(prototype=prototype, byte_range=byte_range)
        if value is None:
            path = getattr(self.inner, "path", None)
            if isinstance(path, str) and self.presence.listed_path(path):
                raise self.presence.missing(path)
        return value

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def listed_pipeline(pipeline: Any, presence: ChunkPresence | None) -> Any:
    """``pipeline`` (zarr's default, :class:`BatchedCodecPipeline`) checking its reads
    against ``presence``; any other pipeline, or no presence, as it is."""
    if presence is None or not isinstance(pipeline, BatchedCodecPipeline):
        return pipeline
    fields = {f.name: getattr(pipeline, f.name) for f in dataclasses.fields(BatchedCodecPipeline)}
    return ListedPipeline(**fields, presence=presence)


def presence_of(array: zarr.Array) -> ChunkPresence | None:
    """The presence ``array``'s reads are checked against (:func:`listed_array`), or None."""
    pipeline = array._async_array.codec_pipeline
    return pipeline.presence if isinstance(pipeline, ListedPipeline) else None


def listed_array(array: zarr.Array, keys: Iterable[str], where: str) -> zarr.Array:
    """A twin of ``array`` (same metadata, store and settings) whose reads of a block that
    the listing ``keys`` holds fail with :class:`MissingChunkError` where the store
    reports it missing; ``array`` itself when its pipeline is not zarr's default."""
    source = array._async_array
    presence = ChunkPresence.from_listing(array, keys, where)
    pipeline = listed_pipeline(source.codec_pipeline, presence)
    if pipeline is source.codec_pipeline:
        return array
    twin = AsyncArray(metadata=source.metadata, store_path=source.store_path, config=source.config)
    object.__setattr__(twin, "codec_pipeline", pipeline)
    return zarr.Array(twin)

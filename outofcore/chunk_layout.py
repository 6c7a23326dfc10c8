"""The layout of an array's chunk files: where they are and how their bytes are encoded.

:func:`layout_of` says whether an array's chunks can be read and written as files
without zarr's pipeline (:mod:`outofcore.chunkfiles`): zarr v3 on a local disk,
native-endian ``bytes`` then ``zstd`` or no compressor, unsharded or in shards with
zarr's default index.  Anything else is ``None``, and zarr reads and writes it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import zarr

from outofcore import arrays

#: Where outofcore says what is not the result: here, the chunk-file path turning itself off.
logger = logging.getLogger("outofcore")


@dataclass(frozen=True)
class PlainLayout:
    """Where the chunk files of an array are and how their bytes are encoded."""

    root: str
    encode_key: Callable[[tuple[int, ...]], str]
    #: numcodecs codec (zarr's own object), or None for uncompressed chunks.
    codec: Any
    fill: Any
    dtype: np.dtype
    shape: tuple[int, int]
    chunks: tuple[int, int]
    #: Shards of the chunks (zarr v3 sharding: inner chunks in one file a shard), or None.
    shards: tuple[int, int] | None = None
    #: Where a shard's index is (``"end"`` or ``"start"``), and whether a crc32c follows it.
    index_location: str = "end"
    index_checksum: bool = True

    def path(self, i: int, j: int) -> str:
        """The file of chunk ``(i, j)`` (of shard ``(i, j)`` in a sharded layout)."""
        return os.path.join(self.root, *self.encode_key((i, j)).split("/"))

    @property
    def per_shard(self) -> tuple[int, int]:
        """Chunks along each side of a shard (1, 1 without shards)."""
        if self.shards is None:
            return (1, 1)
        return (self.shards[0] // self.chunks[0], self.shards[1] // self.chunks[1])

    def chunk_grid(self, rows: slice, cols: slice) -> list[tuple[int, int]]:
        """The chunks ``array[rows, cols]`` touches, row by row."""
        chunk_rows, chunk_cols = self.chunks
        return [
            (i, j)
            for i in range(rows.start // chunk_rows, -(-rows.stop // chunk_rows))
            for j in range(cols.start // chunk_cols, -(-cols.stop // chunk_cols))
        ]

    def overlap(self, i: int, j: int, rows: slice, cols: slice) -> tuple[tuple, tuple]:
        """Where chunk ``(i, j)`` and ``[rows, cols]`` overlap: (in the chunk, in the region)."""
        chunk_rows, chunk_cols = self.chunks
        r0, c0 = i * chunk_rows, j * chunk_cols
        inside = (
            slice(max(rows.start, r0) - r0, min(rows.stop, r0 + chunk_rows) - r0),
            slice(max(cols.start, c0) - c0, min(cols.stop, c0 + chunk_cols) - c0),
        )
        region = (
            slice(r0 + inside[0].start - rows.start, r0 + inside[0].stop - rows.start),
            slice(c0 + inside[1].start - cols.start, c0 + inside[1].stop - cols.start),
        )
        return inside, region


def codec_setting(value: Any) -> Any:
    """A zarr codec's setting as its plain value: ``"little"`` for ``Endian.little``.

    zarr 3.1 keeps settings such as ``BytesCodec.endian`` as Enum members; newer zarr
    (3.4.2 at least) as the plain strings, which have no ``.value`` (its ``Endian`` is
    no longer an Enum).  Anything that is not an Enum (a str, None) comes back as is.
    """
    return value.value if isinstance(value, Enum) else value


#: Warnings about an array already given in this process (each at most once per array).
_WARNED: set[tuple[str, str]] = set()
#: Most warnings remembered (a worker serving many jobs forgets the oldest at once).
WARNINGS_KEPT = 1024


def warn_once(array: zarr.Array, message: str, *args: object) -> None:
    """Log ``message % (array, *args)`` once per array and message in this process:
    a worker opens an input again for every task, and said it once per tile."""
    key = (arrays.describe(array), message)
    if key in _WARNED:
        return
    if len(_WARNED) >= WARNINGS_KEPT:
        _WARNED.clear()
    _WARNED.add(key)
    logger.warning(message, key[0], *args)


def layout_of(array: zarr.Array) -> PlainLayout | None:
    """The :class:`PlainLayout` of ``array``'s chunk files (shard files too), or None where
    zarr must read and write it: zarr v2, codecs other than ``bytes`` and ``zstd``, a
    shard index not in zarr's default form, another store than a local disk, a
    non-native byte order, or anything surprising in zarr's internals (said once)."""
    try:
        from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec  # noqa: PLC0415
        from zarr.storage import LocalStore  # noqa: PLC0415

        meta = array.metadata
        if meta.zarr_format != 3:  # zarr v2 (C or F order, filters): zarr reads it
            return None
        codecs = tuple(meta.codecs)
        sharding = codecs[0] if len(codecs) == 1 and type(codecs[0]) is ShardingCodec else None
        if sharding is not None:
            index = _shard_index_layout(sharding)
            if index is None:
                return None
            codecs = tuple(sharding.codecs)
        plain = (
            meta.zarr_format == 3
            and array.ndim == 2
            and (sharding is not None or array.shards is None)
            and isinstance(array.store, LocalStore)
            and len(codecs) in (1, 2)
            and type(codecs[0]) is BytesCodec
            and codec_setting(codecs[0].endian) in (None, sys.byteorder)
            and (len(codecs) == 1 or type(codecs[1]) is ZstdCodec)
            and np.dtype(array.dtype).isnative
        )
        if not plain:
            return None
        return PlainLayout(
            root=os.path.join(os.fspath(array.store.root), array.path),
            encode_key=meta.encode_chunk_key,
            codec=codecs[1]._zstd_codec if len(codecs) == 2 else None,
            fill=meta.fill_value,
            dtype=np.dtype(array.dtype),
            shape=tuple(array.shape),
            chunks=tuple(array.chunks),
            **({} if sharding is None else {"shards": tuple(array.shards), **index}),
        )
    except Exception as exc:  # noqa: BLE001 (any surprise in zarr's internals: use zarr itself)
        warn_once(
            array,
            "reading and writing %s through zarr, at about twice the CPU per GiB: its chunk "
            "files' layout could not be read (%s: %s)",
            type(exc).__name__,
            exc,
        )
        return None


def _shard_index_layout(sharding: Any) -> dict[str, Any] | None:
    """``index_location`` and ``index_checksum`` of a shard index zarr's default way
    (little-endian offsets and lengths, then a crc32c or nothing), else None."""
    from zarr.codecs import BytesCodec, Crc32cCodec  # noqa: PLC0415

    index_codecs = tuple(sharding.index_codecs)
    plain = (
        len(index_codecs) in (1, 2)
        and type(index_codecs[0]) is BytesCodec
        and codec_setting(index_codecs[0].endian) in (None, "little")
        and (len(index_codecs) == 1 or type(index_codecs[1]) is Crc32cCodec)
        and codec_setting(sharding.index_location) in ("start", "end")
    )
    if not plain:
        return None
    return {
        "index_location": codec_setting(sharding.index_location),
        "index_checksum": len(index_codecs) == 2,
    }

"""The layout of an array's chunk files: where they are and how their bytes are encoded.

:func:`layout_of` says whether an array's chunks can be read and written as files
without zarr's pipeline (:mod:`outofcore.storage.chunkfiles`): zarr v3 on a local disk,
native-endian ``bytes`` then ``zstd`` or no compressor, unsharded or in shards with
zarr's default index, of any number of axes.  Anything else is ``None``, and zarr
reads and writes it.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import zarr

from outofcore.storage import stored_arrays

#: Where outofcore says what is not the result: here, the chunk-file path turning itself off.
logger = logging.getLogger("outofcore")


@dataclass(frozen=True)
class PlainLayout:
    """Where the chunk files of an array are and how their bytes are encoded.

    Any number of axes: a chunk's index has one entry an axis (``()`` for the one chunk
    of a 0-d array), its file is zarr's key of that index (``c/1/0/2``), and selections
    are tuples of slices, one an axis (:func:`check_selection`).
    """

    root: str
    encode_key: Callable[[tuple[int, ...]], str]
    #: numcodecs codec (zarr's own object), or None for uncompressed chunks.
    codec: Any
    fill: Any
    dtype: np.dtype
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    #: Shards of the chunks (zarr v3 sharding: inner chunks in one file a shard), or None.
    shards: tuple[int, ...] | None = None
    #: Where a shard's index is (``"end"`` or ``"start"``), and whether a crc32c follows it.
    index_location: str = "end"
    index_checksum: bool = True

    def path(self, index: tuple[int, ...]) -> str:
        """The file of chunk ``index`` (of shard ``index`` in a sharded layout)."""
        return os.path.join(self.root, *self.encode_key(tuple(index)).split("/"))

    @property
    def chunk_bytes(self) -> int:
        """Bytes of one decoded chunk (an inner chunk in a sharded layout)."""
        return math.prod(self.chunks) * self.dtype.itemsize

    @property
    def per_shard(self) -> tuple[int, ...]:
        """Chunks along each axis of a shard (all 1 without shards)."""
        if self.shards is None:
            return (1,) * len(self.chunks)
        return tuple(shard // chunk for shard, chunk in zip(self.shards, self.chunks, strict=True))

    def shard_of(self, index: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The shard holding chunk ``index``, and the chunk's index within that shard."""
        per_shard = self.per_shard
        shard = tuple(i // per for i, per in zip(index, per_shard, strict=True))
        return shard, tuple(i % per for i, per in zip(index, per_shard, strict=True))

    def chunk_grid(self, selection: tuple[slice, ...]) -> list[tuple[int, ...]]:
        """The chunks ``array[selection]`` touches, in C order (the last axis fastest)."""
        check_selection(selection, self.shape)
        ranges = (
            range(part.start // chunk, -(-part.stop // chunk))
            for part, chunk in zip(selection, self.chunks, strict=True)
        )
        return list(itertools.product(*ranges))

    def overlap(
        self, index: tuple[int, ...], selection: tuple[slice, ...]
    ) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
        """Where chunk ``index`` and ``[selection]`` overlap: (in the chunk, in the region)."""
        inside, region = [], []
        for i, part, chunk in zip(index, selection, self.chunks, strict=True):
            origin = i * chunk
            first, end = max(part.start, origin), min(part.stop, origin + chunk)
            inside.append(slice(first - origin, end - origin))
            region.append(slice(first - part.start, end - part.start))
        return tuple(inside), tuple(region)


def check_selection(selection: tuple[slice, ...], shape: tuple[int, ...]) -> None:
    """Refuse anything but one slice an axis of ``shape``, with integer bounds inside it
    (``start <= stop``) and no step.

    Raises
    ------
    ValueError
        Naming the selection and the shape.
    """
    fine = isinstance(selection, tuple) and len(selection) == len(shape)
    for part, extent in zip(selection, shape, strict=False):
        fine = fine and (
            isinstance(part, slice)
            and isinstance(part.start, int | np.integer)
            and isinstance(part.stop, int | np.integer)
            and part.step in (None, 1)
            and 0 <= part.start <= part.stop <= extent
        )
    if not fine:
        raise ValueError(
            f"selection {selection!r} is not one slice start:stop (0 <= start <= stop <= "
            f"extent, no step) for each axis of shape {tuple(shape)}"
        )


def region_text(selection: tuple[slice, ...]) -> str:
    """A region in messages: ``rows 0:10, columns 5:9`` for two axes, else
    ``[3:4, 0:512, 1024:2048]`` (``[()]`` for a 0-d array's one element)."""
    if len(selection) == 2:
        rows, cols = selection
        return f"rows {rows.start}:{rows.stop}, columns {cols.start}:{cols.stop}"
    if not selection:
        return "[()]"
    return "[" + ", ".join(f"{part.start}:{part.stop}" for part in selection) + "]"


def index_text(index: tuple[int, ...]) -> str:
    """A chunk's index in messages: ``(1, 0, 2)``, ``(3)``, ``()``."""
    return "(" + ", ".join(str(i) for i in index) + ")"


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
    key = (stored_arrays.describe(array), message)
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
    non-native byte order, or anything surprising in zarr's internals (said once).

    Any number of axes, a 0-d array's one chunk (key ``c``) included.
    """
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

"""Compression of the outputs outofcore creates.

``none`` by default: on dense float products zstd saves about 8% of the disk
for about three times the CPU per GiB written, and readers pay for it again
(measured in docs/performance.md).  ``zstd`` is zarr's own default.  This
module stays light: zarr loads only in :func:`zarr_compressors`.
"""

from __future__ import annotations

from typing import Any

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

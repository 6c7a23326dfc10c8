"""Writing the output: regions of C as whole chunks, and errors that name the full disk.

:func:`write_region` writes a block of C as chunk files where it can
(:mod:`outofcore.chunkfiles`) and through zarr otherwise.  A write that fails
because the output's disk is full (or its quota spent) raises
:class:`~outofcore.errors.OutputWriteError` naming what was being written,
where, and the free space left there, instead of a bare ``OSError``; the tile
is then not recorded done, and a rerun after space is freed resumes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator

import numpy as np
import zarr
from dask.utils import format_bytes
from zarr.storage import LocalStore

from outofcore import arrays, chunkfiles
from outofcore.errors import OutputWriteError

#: errno values of a full disk or a spent quota.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def write_region(array: zarr.Array, start: tuple[int, int], values: np.ndarray) -> None:
    """``array[start:start + values.shape] = values``: as chunk files where we can.

    A region of whole chunks of an array in zarr's default local layout is
    encoded and written by :mod:`outofcore.chunkfiles` (a tile's blocks of
    rows always are, in an output outofcore created); anything else by zarr.

    Raises
    ------
    OutputWriteError
        When the output's disk is full or its quota spent.
    """
    (r0, c0), (h, w) = start, values.shape
    what = f"writing rows {r0}:{r0 + h}, columns {c0}:{c0 + w} of the output"
    with naming_full_disk(f"{what} {arrays.describe(array)}", local_folder(array)):
        layout = chunkfiles.plain_layout(array)
        if layout is not None and chunkfiles.aligned(layout, start, values.shape):
            chunkfiles.write_region(layout, start, values)
            return
        array[r0 : r0 + h, c0 : c0 + w] = values


@contextlib.contextmanager
def naming_full_disk(what: str, folder: str | None) -> Iterator[None]:
    """Turn a full-disk ``OSError`` inside the block into :class:`OutputWriteError`.

    ``what`` says what was written ("writing rows 0:10 ... of the output X"),
    ``folder`` where on a local disk (None for other stores); other errors
    pass through unchanged.
    """
    try:
        yield
    except OSError as exc:
        if exc.errno not in NO_SPACE or isinstance(exc, OutputWriteError):
            raise
        raise OutputWriteError(
            f"{what} failed: {os.strerror(exc.errno)} ({free_space(folder)})"
        ) from exc


def free_space(folder: str | None) -> str:
    """``"12.0 KiB free of 2.0 MiB on the file system of FOLDER"``, or why it is unknown."""
    if folder is None:
        return "free space unknown: not a local disk"
    existing = os.path.abspath(folder)
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    try:
        usage = shutil.disk_usage(existing)
    except OSError as exc:
        return f"free space of {folder} unknown: {exc}"
    return (
        f"{format_bytes(usage.free)} free of {format_bytes(usage.total)} on the file system of "
        f"{existing}"
    )


def local_folder(array: zarr.Array) -> str | None:
    """The folder of an array on a local disk, else None."""
    if isinstance(array.store, LocalStore):
        return os.path.join(os.fspath(array.store.root), array.path)
    return None

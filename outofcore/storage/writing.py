"""Writing the output: regions of C as whole chunks, durably, and errors that name the full disk.

:func:`write_region` writes a block of C as chunk files where it can
(:mod:`outofcore.storage.chunkfiles`) and through zarr otherwise.  A write that fails
because the output's disk is full (or its quota spent) raises
:class:`~outofcore.errors.OutputWriteError` naming what was being written,
where, and the free space left there, instead of a bare ``OSError``; the tile
is then not recorded done, and a rerun after space is freed resumes.

This module is also the one home of durability on local disks.  A record in the
job journal says that what it names is in the store; a power loss must not
leave a record whose data never reached the disk.  So on a local disk the
chunk files of every block written are flushed (``fsync``, with their folders)
before :func:`write_region` returns, and journal objects are written by
:func:`write_durably` (a temporary file, flushed, renamed or linked into place,
its folder flushed).  Object stores need nothing: a PUT is durable once it is
acknowledged.  The setting ``fsync`` (``$OUTOFCORE_FSYNC=0``) turns flushing
off, for scratch disks where a power loss loses the job anyway.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import math
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator

import numpy as np
import zarr
from dask.utils import format_bytes
from zarr.storage import LocalStore

from outofcore import config
from outofcore.errors import InputError, OutputWriteError
from outofcore.storage import chunkfiles, stored_arrays
from outofcore.storage.chunk_io import chunk_io
from outofcore.storage.chunk_layout import region_text
from outofcore.storage.digests import Digests
from outofcore.storage.locations import Location
from outofcore.storage.stored_arrays import shape_text

#: errno values of a full disk or a spent quota.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def write_region(array: zarr.Array, start: tuple[int, ...], values: np.ndarray) -> Digests:
    """``array[start:start + values.shape] = values`` (one start an axis): as chunk files
    where we can.

    A region of whole chunks of an array in zarr's default local layout is
    encoded and written by :mod:`outofcore.storage.chunkfiles` (a tile's blocks of
    rows always are, in an output outofcore created); anything else by zarr.
    Returns the digests of the stored objects written, by key relative to ``array``,
    where chunk files were written (the bytes written, durable now); empty where zarr
    wrote them (a record reads those back).

    Raises
    ------
    ValueError
        When ``start``, ``values`` and the array do not have as many axes.
    OutputWriteError
        When the output's disk is full or its quota spent.
    """
    if not len(start) == values.ndim == array.ndim:
        raise ValueError(
            f"a region at {tuple(start)} of shape {values.shape} cannot be written to an "
            f"array of {array.ndim} axes"
        )
    selection = tuple(slice(s, s + n) for s, n in zip(start, values.shape, strict=True))
    what = f"writing {region_text(selection)} of the output"
    with naming_full_disk(f"{what} {stored_arrays.describe(array)}", local_folder(array)):
        layout = chunkfiles.plain_layout(array)
        written: Digests = {}
        if layout is not None and chunkfiles.aligned(layout, start, values.shape):
            written = chunkfiles.write_region(layout, start, values)
        else:
            array[selection] = values
        make_durable(region_files(array, start, values.shape), local_folder(array))
    return written


def region_files(array: zarr.Array, start: tuple[int, ...], shape: tuple[int, ...]) -> list[str]:
    """The files on a local disk of the stored objects (chunks, or shards) holding
    ``array[start:start + shape]`` (one start and size an axis); empty for other stores."""
    folder = local_folder(array)
    if folder is None or 0 in shape:
        return []
    grid = array.shards or array.chunks
    ranges = (
        range(origin // size, (origin + n - 1) // size + 1)
        for origin, n, size in zip(start, shape, grid, strict=True)
    )
    encode = array.metadata.encode_chunk_key
    return [os.path.join(folder, *encode(index).split("/")) for index in itertools.product(*ranges)]


def flushing() -> bool:
    """Whether local writes are flushed to disk (the setting ``fsync``, default on)."""
    return config.flag("fsync")


def make_durable(files: Iterable[str], root: str | None) -> None:
    """Flush ``files`` (written and renamed into place) and their folders, up to and
    including ``root``, to disk: after a power loss they are there, or were never
    recorded.  Missing files (zarr deletes a chunk equal to the fill value) are
    skipped; nothing is done where ``root`` is None (not a local disk) or
    :func:`flushing` is off."""
    if root is None or not flushing():
        return
    files = list(files)
    folders = {f for path in files for f in _folders_up_to(os.path.dirname(path), root)}
    flushes = [(path, False) for path in files] + [(folder, True) for folder in folders]
    # All at once, in the chunk-file threads: the file system commits concurrent flushes
    # together (32 files: 1.2 ms each one by one, 0.1 ms each four at a time, here).
    pool = chunk_io().chunk_pool()
    for future in [pool.submit(_fsync_if_there, path, folder) for path, folder in flushes]:
        future.result()


def write_durably(path: str, data: bytes, *, exclusive: bool = False, root: str) -> bool:
    """Write ``data`` as the file ``path`` atomically and, unless :func:`flushing` is
    off, durably: a temporary file beside it, flushed, then renamed over ``path``
    (or with ``exclusive`` hard-linked to it, which fails when ``path`` exists), then
    the folders made for it, up to ``root``, flushed.

    Returns whether it was written: False only when ``exclusive`` found a file there.
    """
    folder = os.path.dirname(path)
    made = _missing_folders(folder, root)
    os.makedirs(folder, exist_ok=True)
    partial = f"{path}.{uuid.uuid4().hex}.partial"
    try:
        with open(partial, "wb") as f:
            f.write(data)
            f.flush()
            if flushing():
                os.fsync(f.fileno())
        if exclusive:
            try:
                os.link(partial, path)
            except FileExistsError:
                return False
        else:
            os.replace(partial, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(partial)
    if flushing():  # its folder (a new entry), and the folder of each folder made for it
        for changed in sorted({folder, *map(os.path.dirname, made)}, key=len, reverse=True):
            _fsync_path(changed, folder=True)
    return True


def _fsync_if_there(path: str, folder: bool) -> None:
    with contextlib.suppress(FileNotFoundError):
        _fsync_path(path, folder)


def _fsync_path(path: str, folder: bool = False) -> None:
    """``fsync`` the file or folder at ``path`` (opened read-only: Linux flushes it all)."""
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if folder else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _folders_up_to(folder: str, root: str) -> list[str]:
    """``folder`` and each folder above it up to ``root`` (``folder`` alone when it is not
    inside ``root``)."""
    found = [folder]
    stop = os.path.abspath(root)
    while os.path.abspath(folder) != stop:
        parent = os.path.dirname(os.path.abspath(folder))
        if parent == folder or os.path.commonpath([parent, stop]) != stop:
            break
        folder = parent
        found.append(folder)
    return found


def _missing_folders(folder: str, root: str) -> list[str]:
    """The folders from ``folder`` up that do not exist yet (below ``root``), deepest first."""
    return [f for f in _folders_up_to(folder, root) if not os.path.isdir(f)]


#: Errors of a store's write that say something other than "it failed": left as they are.
_MEANINGFUL = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError)


@contextlib.contextmanager
def naming_full_disk(what: str, folder: str | None) -> Iterator[None]:
    """Turn a full-disk ``OSError`` inside the block into :class:`OutputWriteError`; and,
    off a local disk (``folder`` None), a write the object store kept failing (an
    ``OSError`` such as s3fs's 503 "Service Unavailable", an obstore error) too.

    ``what`` says what was written ("writing rows 0:10 ... of the output X"),
    ``folder`` where on a local disk (None for other stores); other errors
    pass through unchanged.  A store's client retries a failed request itself, within
    the deadlines of :mod:`outofcore.storage.deadlines`; the error that is left is final (a
    :class:`~outofcore.errors.JobFailedError`, so Dask does not run the tile again, one
    tile after another, while the store keeps failing).
    """
    try:
        yield
    except OSError as exc:
        if isinstance(exc, OutputWriteError):
            raise
        if exc.errno in NO_SPACE:
            raise OutputWriteError(
                f"{what} failed: {os.strerror(exc.errno)} ({free_space(folder)})"
            ) from exc
        if folder is None and not isinstance(exc, _MEANINGFUL):
            raise OutputWriteError(_store_failure(what, exc)) from exc
        raise
    except Exception as exc:
        if folder is None and type(exc).__module__.startswith("obstore"):
            raise OutputWriteError(_store_failure(what, exc)) from exc
        raise


def _store_failure(what: str, exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return (
        f"{what} failed after the object store's retries ({type(exc).__name__}: {text}); "
        "what the job finished is kept: rerun to resume once the store answers"
    )


def free_space(folder: str | None) -> str:
    """``"12.0 KiB free of 2.0 MiB on the file system of FOLDER"``, or why it is unknown."""
    if folder is None:
        return "free space unknown: not a local disk"
    try:
        existing, free, total = disk_usage_of(folder)
    except OSError as exc:
        return f"free space of {folder} unknown: {exc}"
    return f"{format_bytes(free)} free of {format_bytes(total)} on the file system of {existing}"


def disk_usage_of(path: str) -> tuple[str, int, int]:
    """The nearest existing path at or above ``path`` (what will be created lies under it),
    and the free and total bytes of its file system.

    Raises
    ------
    OSError
        When the file system cannot say.
    """
    existing = os.path.abspath(path)
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    usage = shutil.disk_usage(existing)
    return existing, usage.free, usage.total


def local_folder(array: zarr.Array) -> str | None:
    """The folder of an array on a local disk, else None."""
    if isinstance(array.store, LocalStore):
        return os.path.join(os.fspath(array.store.root), array.path)
    return None


def check_output_room(
    out: zarr.Array | Location, shape: tuple[int, ...], dtype: np.dtype, output_codec: str
) -> None:
    """Refuse a new output that the free space of its local disk cannot hold
    uncompressed (``--output-codec none``, the default; products of dense values hardly
    compress), before anything is written: a metadata-only 10^8 x 10^8 product ran until
    killed.  Outputs elsewhere, or compressed, are not checked.

    Raises
    ------
    InputError
        Naming the output's bytes and the free bytes.
    """
    if output_codec != "none" or isinstance(out, zarr.Array) or not out.is_local:
        return
    total = math.prod(shape) * np.dtype(dtype).itemsize
    folder, free, _ = disk_usage_of(out.path)
    if total > free:
        raise InputError(
            f"the output is {shape_text(shape)} {np.dtype(dtype)}: {format_bytes(total)} "
            f"uncompressed, and {folder!r} has {format_bytes(free)} free: make room, choose "
            "another disk, or compress the output (--output-codec zstd, checked as it writes)"
        )

"""Deleting the keys outofcore wrote inside an output: one at a time, never a folder by
walking it, never through a symbolic link, never by pattern.

Which keys are outofcore's is :mod:`outofcore.storage.manifest`'s to say; this module
deletes the ones it is given.  On local disks each key's folder is opened
component by component with ``O_NOFOLLOW``; on object stores each key is
deleted literally (:func:`outofcore.storage.storeops.delete_exact`).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterable, Sequence

from zarr.abc.store import Store
from zarr.core.sync import sync

from outofcore.storage import storeops
from outofcore.storage.manifest import StrangersError, local_base, logger, show
from outofcore.storage.output_keys import join_key


def delete_keys(store: Store, prefix: str, keys: Iterable[str]) -> None:
    """Delete each of ``keys`` (relative to the output at ``prefix``), one at a time.

    Never a folder: on local disks a key that has become a folder is left (and
    named in a warning), and each key's folder is opened component by component
    without following links (``O_NOFOLLOW``), so nothing is deleted through one.
    Never a pattern: on object stores each key is deleted literally
    (:func:`outofcore.storage.storeops.delete_exact`).

    Raises
    ------
    StrangersError
        When a folder on the way to a key has become a symbolic link.
    """
    top = prefix.strip("/")
    full = [join_key(top, key) for key in keys]
    if not full:
        return
    base = local_base(store)
    if base is not None:
        _unlink_local(base, full)
        return
    sync(storeops.delete_exact(store, full))  # each key literally, never as a pattern


def remove_folders(store: Store, prefix: str, folders: Iterable[str]) -> None:
    """On local disks, remove each of ``folders`` (relative, deepest first) when empty."""
    base = local_base(store)
    if base is None:
        return
    top = prefix.strip("/")
    with _Folders(base) as opened:
        for folder in folders:
            parent, _, name = join_key(top, folder).rpartition("/")
            with contextlib.suppress(OSError):  # not empty, gone, or no longer a folder
                fd = opened.fd(parent)
                if _DIR_FD:
                    os.rmdir(name, dir_fd=fd)
                else:
                    os.rmdir(os.path.join(base, parent, name))


_DIR_FD = os.unlink in os.supports_dir_fd and os.open in os.supports_dir_fd


class _Folders:
    """Folders below ``base`` opened one component at a time, never through a link."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.fds: dict[str, int] = {}

    def __enter__(self) -> _Folders:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def fd(self, folder: str) -> int:
        """A descriptor of ``base/folder`` (``-1`` where descriptors are not used)."""
        if not _DIR_FD:
            path = self.base
            for part in [p for p in folder.split("/") if p]:
                path = os.path.join(path, part)
                if os.path.islink(path):
                    raise StrangersError(f"{path!r} is a symbolic link: nothing deleted through it")
            return -1
        if folder in self.fds:
            return self.fds[folder]
        parent, _, name = folder.rpartition("/")
        flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
        try:
            if not folder:
                fd = os.open(self.base, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
            else:
                fd = os.open(name, flags, dir_fd=self.fd(parent))
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise StrangersError(
                    f"{os.path.join(self.base, folder)!r} is no longer a folder (a symbolic "
                    "link?): nothing is deleted through it"
                ) from exc
            raise
        self.fds[folder] = fd
        return fd


def _unlink_local(base: str, keys: Sequence[str]) -> None:
    left = []
    with _Folders(base) as opened:
        for key in keys:
            folder, _, name = key.rpartition("/")
            try:
                fd = opened.fd(folder)
                if _DIR_FD:
                    os.unlink(name, dir_fd=fd)
                elif os.path.isdir(os.path.join(base, key)):
                    left.append(key)
                else:
                    os.unlink(os.path.join(base, key))
            except FileNotFoundError:
                continue
            except (IsADirectoryError, PermissionError):
                if not os.path.isdir(os.path.join(base, key)):
                    raise
                left.append(key)  # a folder now: never deleted
    if left:
        logger.warning(
            "left %s in %s: folders where outofcore's files were, not deleted", show(left), base
        )

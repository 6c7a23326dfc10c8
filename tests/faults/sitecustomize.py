"""Damaged reads for the test session: a chunk file reads as zeros, the file untouched.

:func:`tests.helpers.break_chunk` registers a file here; while it is registered, every
read-only ``open`` of it (``open``, ``io.open``, ``pathlib``: outofcore's chunk files
and zarr's ``LocalStore``) opens a file of zeros of its size instead, as a store that
returns a damaged body would.  The file itself, and so the input's fingerprint (which
an in-place rewrite changes: ``stat``'s change time), stays as it was, and
:func:`tests.helpers.restore_chunk` mends it by forgetting it.

The registry is a folder, ``$OUTOFCORE_TEST_DAMAGED_READS``, with one file of zeros per
damaged file, named by the SHA-1 of its real path.  tests/conftest.py sets the variable
and puts this folder first on ``PYTHONPATH``, so every process the tests start (the
command, Dask workers) loads this module as its ``sitecustomize`` and sees the same
damage; the test process installs it from conftest.py.
"""

from __future__ import annotations

import builtins
import hashlib
import io
import os

VARIABLE = "OUTOFCORE_TEST_DAMAGED_READS"
_real_open = io.open


def registry() -> str | None:
    """The registry folder of this test session, or None outside one."""
    return os.environ.get(VARIABLE) or None


def entry_name(path: str | os.PathLike) -> str:
    """The registry's name for the file at ``path`` (any spelling of it)."""
    return hashlib.sha1(os.path.realpath(os.fspath(path)).encode()).hexdigest()


def _damaged(file: object, mode: str) -> str | None:
    """The file of zeros to open instead of ``file``, or None to open ``file`` itself."""
    folder = registry()
    if folder is None or not isinstance(file, str | bytes | os.PathLike):
        return None
    if any(flag in mode for flag in "wax+"):
        return None
    try:
        names = os.listdir(folder)  # listed at every open: a cached listing can go stale
    except OSError:
        return None
    if not names:
        return None
    name = entry_name(os.fsdecode(file))
    return os.path.join(folder, name) if name in names else None


def _open(file, mode="r", *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202 (open's own)
    replacement = _damaged(file, mode)
    return _real_open(replacement if replacement is not None else file, mode, *args, **kwargs)


def install() -> None:
    """Route read-only opens through the registry in this process (idempotent)."""
    builtins.open = _open
    io.open = _open


if registry() is not None:
    install()

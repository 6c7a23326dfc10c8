"""Where compiled CUDA kernels are kept between processes: numba-cuda's on-disk cache.

Every production kernel (:mod:`outofcore.backends.cuda.kernels`,
:mod:`outofcore.backends.cuda.transpose`) is made with ``cuda.jit(cache=True)``: the first
process on a machine compiles it (2.5 to 7 s per dtype on the GPU nodes measured, compile
and first launch, docs/gpu.md) and every later process loads its cubin.  numba-cuda keys
an entry by the kernel's name, its signature, the CUDA version, the compute capability,
numba-cuda's version, the bytecode (and closure), and the source file's mtime and size;
whatever else shapes a kernel is in its name (dtype and tile), since the values of the
namespace a generated kernel runs in are not in the key.

The folder, one answer for every process (:func:`kernel_cache_folder`):
``$NUMBA_CACHE_DIR`` where it is set (numba reads it when ``numba.cuda`` is imported);
else ``kernels`` in the user's cache folder (:func:`outofcore.config.cache_dir`), made
private (0700).  That folder is not used when another user owns it or others may write
to it: numba's cache entries are pickles, and loading one runs code.  The kernels are
then compiled in each process, as without a cache.

:func:`use_kernel_cache` puts the folder into an environment before numba is imported
(the command, the GPU workers a job starts: they inherit it; the image sets the variable
itself); :func:`configure_numba` gives it to a numba-cuda already imported whose variable
was not set (a library call, a worker started elsewhere).  Imports no numba.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import MutableMapping

from outofcore.config import cache_dir

logger = logging.getLogger("outofcore")

#: numba's variable for its cache folder.
CACHE_VARIABLE = "NUMBA_CACHE_DIR"
#: The kernels' folder inside the user's cache folder.
SUBFOLDER = "kernels"
_warned = False


def kernel_cache_folder(
    environ: MutableMapping[str, str] | None = None, warn: bool = True
) -> str | None:
    """The folder compiled kernels are kept in: ``$NUMBA_CACHE_DIR`` of ``environ``
    (``os.environ`` by default) where set, else the user's (made if missing), or None
    where that one is not private to this user (no cache; a warning says so when
    ``warn``)."""
    environ = os.environ if environ is None else environ
    given = environ.get(CACHE_VARIABLE)
    if given:
        return given
    folder = str(cache_dir() / SUBFOLDER)
    if private_folder(folder):
        return folder
    global _warned
    if not warn or _warned:
        return None
    _warned = True  # once a process, not once a kernel
    logger.warning(
        "compiled CUDA kernels are not cached: %s is not a folder private to this user "
        "(owned by it, not writable by others); set %s to one",
        folder,
        CACHE_VARIABLE,
    )
    return None


def private_folder(path: str) -> bool:
    """Whether ``path`` is (or, missing, is made as) a folder this user owns and no one
    else may write to."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode):  # a link or a file: not ours to trust
        return False
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return False
    return not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def use_kernel_cache(
    environ: MutableMapping[str, str] | None = None, warn: bool = False
) -> str | None:
    """Set ``$NUMBA_CACHE_DIR`` in ``environ`` (``os.environ`` by default) to
    :func:`kernel_cache_folder` unless it is set; return the folder (None: no cache).

    Call it before ``numba`` is imported: numba reads the variable once, on import
    (later, :func:`configure_numba`).  Silent by default (the command calls it for every
    run, a CPU job's too): a folder not private is named where a kernel is built."""
    environ = os.environ if environ is None else environ
    folder = kernel_cache_folder(environ, warn)
    if folder is not None:
        environ.setdefault(CACHE_VARIABLE, folder)
    return folder


def configure_numba() -> str | None:
    """Give an imported numba-cuda the kernels' folder where ``$NUMBA_CACHE_DIR`` was not
    set when it was imported; return the folder numba-cuda caches in (None: no cache)."""
    from numba.cuda.core import config as numba_config  # noqa: PLC0415 (numba imported by now)

    if numba_config.CACHE_DIR:
        return numba_config.CACHE_DIR
    folder = kernel_cache_folder()
    if folder is not None:
        numba_config.CACHE_DIR = folder
    return folder

"""Is there a CUDA GPU here, and is numba-cuda installed? Answered without importing numba.

``backend="auto"`` asks this on every local job, CPU machines included, so it must
cost next to nothing: importing ``numba.cuda`` to call ``cuda.is_available()``
takes about 0.4 s.  Instead the CUDA driver library is loaded through ctypes
(where there is none, that fails in about a millisecond) and asked for its
device count, as numba-cuda itself would; ``CUDA_VISIBLE_DEVICES`` is honoured
by the driver.  Nothing but the standard library and ``outofcore.errors`` is imported here.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys

from outofcore.errors import BackendError


def simulator_enabled() -> bool:
    """Return True when numba.cuda runs (or, not imported yet, will run) on its simulator.

    Once ``numba.cuda`` is imported its mode is fixed, and that is what counts;
    before, ``NUMBA_ENABLE_CUDASIM`` decides.  Does not import numba.
    """
    config = sys.modules.get("numba.cuda.core.config")
    if config is not None:
        return bool(config.ENABLE_CUDASIM)
    try:
        return int(os.environ.get("NUMBA_ENABLE_CUDASIM", "0") or 0) != 0
    except ValueError:
        return False


def numba_cuda_installed() -> bool:
    """Return True when numba-cuda (the ``[cuda]`` extra) is installed; imports nothing.

    numba-cuda ships the top-level package ``numba_cuda`` (which ``numba.cuda``
    resolves to); looking it up does not import numba.
    """
    return _installed("numba.cuda", "numba_cuda")


def cupy_installed() -> bool:
    """Return True when CuPy (the ``[cupy]`` extra) is installed; imports nothing."""
    return _installed("cupy", "cupy")


def _installed(module: str, package: str) -> bool:
    """Whether ``module`` is imported already, or ``package`` can be found (unimported)."""
    if sys.modules.get(module) is not None:
        return True
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def require_numba_cuda(backend: str = "cuda", extra: str = "cuda") -> None:
    """Raise BackendError naming the extra to install unless numba-cuda is installed.

    Raises
    ------
    BackendError
        When numba-cuda is not installed: ``pip install 'outofcore[EXTRA]'``
        (``[cuda]``, or ``[cupy]`` for ``backend="cupy"``).
    """
    if not numba_cuda_installed():
        raise BackendError(
            f"backend {backend!r} needs numba-cuda, which is not installed here: "
            f"pip install 'outofcore[{extra}]' (or use backend 'cpu')"
        )


def require_cupy() -> None:
    """Raise BackendError naming the extra to install unless numba-cuda and CuPy are
    installed (backend ``"cupy"``: our streams and buffers, cuBLAS's products).

    Raises
    ------
    BackendError
        When either is missing: ``pip install 'outofcore[cupy]'``.
    """
    require_numba_cuda("cupy", "cupy")
    if not cupy_installed():
        raise BackendError(
            "backend 'cupy' needs CuPy, which is not installed here: "
            "pip install 'outofcore[cupy]' (or use backend 'cuda')"
        )


def _driver_names() -> tuple[str, ...]:
    """The CUDA driver library's names to try on this platform (numba's order)."""
    override = os.environ.get("NUMBA_CUDA_DRIVER")
    if override:
        return (override,)
    if sys.platform.startswith("linux"):
        return ("libcuda.so.1", "libcuda.so")
    if sys.platform == "win32":
        return ("nvcuda.dll",)
    return ()  # macOS and the rest: no CUDA driver since CUDA 10.2


def device_count() -> int:
    """Return the number of CUDA devices the driver shows this process (0 without a driver).

    Loads the driver library and calls ``cuInit(0)`` and ``cuDeviceGetCount``,
    the calls numba-cuda's ``cuda.is_available()`` makes.  Any failure (no
    library, no kernel module, a driver too old, no device) is 0.
    """
    for name in _driver_names():
        try:
            driver = ctypes.CDLL(name)
        except OSError:
            continue
        try:
            if driver.cuInit(0) != 0:
                return 0
            count = ctypes.c_int(0)
            if driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
                return 0
        except AttributeError:  # not a CUDA driver after all
            return 0
        return max(0, count.value)
    return 0


def import_cupy():
    """Return CuPy with cuBLAS (the ``"cupy"`` backend), or raise BackendError naming the
    extra to install."""
    try:
        import cupy  # noqa: PLC0415
        import cupy.cublas  # noqa: F401, PLC0415
    except ImportError as exc:
        raise BackendError(
            f"backend 'cupy' needs CuPy with cuBLAS ({exc}); install the 'cupy' extra "
            "(pip install 'outofcore[cupy]') or use backend 'cuda'"
        ) from exc
    return cupy

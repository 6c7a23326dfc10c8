"""Whether CUDA kernels can run here: a usable GPU, or numba's simulator.

Importing this module imports no numba: :func:`is_available` imports ``numba.cuda`` when
called, so that ``NUMBA_ENABLE_CUDASIM`` can still be chosen by whoever imports numba first.
"""

from __future__ import annotations

from outofcore.backends.cuda.probe import numba_cuda_installed, simulator_enabled

__all__ = ["is_available"]


def is_available() -> bool:
    """Return True when kernels can run here: a usable CUDA GPU, or the simulator.

    Imports ``numba.cuda`` (about 0.4 s): to ask whether a GPU is here without it, use
    :func:`outofcore.backends.cuda.probe.device_count`.
    """
    if not numba_cuda_installed():
        return False
    try:
        from numba import cuda  # noqa: PLC0415
    except Exception:
        # Not only ImportError: numba-cuda without a CUDA runtime (the CPU image, no
        # cu13 extra) raises cuda.pathfinder's DynamicLibNotFoundError on import.
        return False
    if simulator_enabled():
        return True
    try:
        return bool(cuda.is_available())
    except Exception:  # a broken driver install reports itself in odd ways
        return False

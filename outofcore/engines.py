"""Tile engines: what multiplies the k-panels of one output tile.

A tile task (``outofcore.tile``) reads panels from zarr and hands them to an
engine; the engine owns the accumulator ``C_ij`` and the arithmetic.  Every
engine follows the same four-step protocol, so the plan and the scheduler do
not know or care which one runs:

>>> engine = CpuEngine()
>>> engine.start_tile((tm, tn), dtype)          # doctest: +SKIP
>>> engine.accumulate(a_panel, b_panel)         # once per k-panel, C += A·B
>>> c_tile = engine.finish_tile()               # host array holding C_ij

``host_buffer`` gives the host arrays panels are decoded into (pinned memory
on a GPU engine), so that the reader never allocates per panel.  After
``accumulate`` returns, the engine no longer needs the panel buffers: the
reader may decode the next panel into them.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from scipy.linalg import blas

from outofcore.errors import BackendError

SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class TileEngine(Protocol):
    """What a tile task needs from an engine (CPU BLAS, numba CUDA, ...)."""

    name: str

    def host_buffer(self, size: int, dtype: np.dtype) -> np.ndarray:
        """Return a flat host array of ``size`` elements to decode panels into."""

    def start_tile(self, shape: tuple[int, int], dtype: np.dtype) -> None:
        """Begin a new output tile of ``shape``; the accumulator starts at zero."""

    def accumulate(self, a_panel: np.ndarray, b_panel: np.ndarray) -> None:
        """``C += a_panel @ b_panel``; the panel buffers are free again on return."""

    def finish_tile(self) -> np.ndarray:
        """Return the finished tile as a C-ordered host array.

        The array stays valid until the next ``start_tile``: write it first.
        """


class CpuEngine:
    """BLAS ``gemm`` through SciPy, accumulating in place with ``beta = 1``.

    The accumulator is C-ordered ``tm x tn``; we ask BLAS for
    ``C^T += B^T A^T`` so that every operand is already Fortran-ordered as
    BLAS wants and no copy or temporary is made per panel.
    """

    name = "cpu"

    def __init__(self) -> None:
        self._c: np.ndarray | None = None
        self._fresh = True

    def host_buffer(self, size: int, dtype: np.dtype) -> np.ndarray:
        return np.empty(size, dtype=dtype)

    def start_tile(self, shape: tuple[int, int], dtype: np.dtype) -> None:
        self._c = np.empty(shape, dtype=dtype)
        self._fresh = True

    def accumulate(self, a_panel: np.ndarray, b_panel: np.ndarray) -> None:
        c = self._require_tile()
        gemm = blas.sgemm if c.dtype == np.float32 else blas.dgemm
        c_t = c.T  # Fortran-ordered view of the C-ordered accumulator
        beta = 0.0 if self._fresh else 1.0
        result = gemm(1.0, b_panel.T, a_panel.T, beta=beta, c=c_t, overwrite_c=True)
        if not np.shares_memory(result, c):  # BLAS had to copy: keep the result anyway
            c[...] = result.T
        self._fresh = False

    def finish_tile(self) -> np.ndarray:
        c = self._require_tile()
        if self._fresh:  # no panel was multiplied (k == 0): the product is zero
            c[...] = 0
        self._c = None
        return c

    def _require_tile(self) -> np.ndarray:
        if self._c is None:
            raise RuntimeError("CpuEngine: start_tile() was not called")
        return self._c


def gpu_visible(simulator_counts: bool = True) -> bool:
    """Return True when CUDA kernels can run here.

    A real GPU always counts; numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``)
    counts only when ``simulator_counts``: asked for by name it is fine for
    tests, but ``"auto"`` must never pick a simulator.
    """
    from outofcore import cuda as ooc_cuda  # noqa: PLC0415 (numba loads only here)

    if ooc_cuda.simulator_enabled():
        return simulator_counts
    return ooc_cuda.is_available()


BACKENDS = ("auto", "cpu", "cuda", "cupy")


def resolve_backend(backend: str) -> str:
    """Turn ``"auto"`` into a concrete backend and check the one asked for is usable.

    ``"auto"`` is ``"cuda"`` when a real GPU is visible, else ``"cpu"``.

    Raises
    ------
    BackendError
        For an unknown name, or ``cuda``/``cupy`` where no GPU is visible.
    """
    if backend not in BACKENDS:
        raise BackendError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        return "cuda" if gpu_visible(simulator_counts=False) else "cpu"
    if backend in ("cuda", "cupy") and not gpu_visible():
        raise BackendError(
            f"backend {backend!r} needs a CUDA GPU and driver, and none is visible here "
            "(set NUMBA_ENABLE_CUDASIM=1 to use numba's CUDA simulator, or use backend 'cpu')"
        )
    return backend


def make_engine(backend: str) -> TileEngine:
    """Return a tile engine for a concrete backend name (``cpu``, ``cuda``, ``cupy``)."""
    if backend == "cpu":
        return CpuEngine()
    if backend in ("cuda", "cupy"):
        from outofcore.cuda import make_engine as make_cuda_engine  # noqa: PLC0415

        return make_cuda_engine(backend)
    raise BackendError(f"no engine for backend {backend!r}")

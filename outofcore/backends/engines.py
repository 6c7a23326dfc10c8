"""Tile engines: what multiplies the k-panels of one output tile.

A tile task (``outofcore.compute.tile``) reads panels from zarr and hands them to an
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

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from outofcore.backends.blas import gemm_accumulate, gram_into, multiply_into
from outofcore.backends.limbs import multiply_into as multiply_limbs_into
from outofcore.errors import BackendError
from outofcore.operands.dtypes import Limbs

__all__ = ["BACKENDS", "CpuEngine", "TileEngine", "gemm_accumulate"]


class TileEngine(Protocol):
    """What a tile task needs from an engine (CPU BLAS, numba CUDA, ...)."""

    name: str
    #: Whether :meth:`accumulate_rows` works: the task then multiplies a tile's last
    #: panels block of rows by block and writes each block while the next is computed.
    #: False: every panel goes through :meth:`accumulate` and the whole tile is written.
    row_blocks: bool

    def configure(
        self, *, device_memory: int | None = None, panel_depth: int | None = None
    ) -> None:
        """Take a job's settings for the tiles that follow (the task calls this first).

        ``device_memory`` caps a GPU engine's device bytes; ``panel_depth`` is the
        plan's ``tk``.  Engines without a device ignore both.
        """

    def host_buffer(self, size: int, dtype: np.dtype) -> np.ndarray:
        """Return a flat host array of ``size`` elements to decode panels into."""

    def start_tile(
        self, shape: tuple[int, int], dtype: np.dtype, limbs: Limbs | None = None
    ) -> None:
        """Begin a new output tile of ``shape``; the accumulator starts at zero."""

    def accumulate(self, a_panel: np.ndarray, b_panel: np.ndarray) -> None:
        """``C += a_panel @ b_panel``; the panel buffers are free again on return."""

    def accumulate_rows(
        self, row0: int, panels: Sequence[tuple[np.ndarray, np.ndarray]]
    ) -> np.ndarray:
        """``C[row0:row0+h] += sum(a_rows @ b_panel)``; return those rows of ``C``.

        Called only when :attr:`row_blocks` is True.
        """

    def finish_tile(self) -> np.ndarray:
        """Return the finished tile as a C-ordered host array.

        The array stays valid until the next ``start_tile``: write it first.
        """

    def release(self) -> None:
        """Free host buffers kept for the next tile (an in-process run's end)."""

    def kept_bytes(self) -> int:
        """Host bytes the engine keeps between tiles."""


class CpuEngine:
    """BLAS ``gemm`` (SciPy's OpenBLAS), accumulating in place with ``beta = 1``.

    The accumulator is C-ordered ``tm x tn``; we ask BLAS for
    ``C^T += B^T A^T`` so that every operand is already Fortran-ordered as
    BLAS wants (a transposed panel with BLAS's transpose flag) and no copy or
    temporary is made per panel.  The call goes through ctypes so that the GIL
    is released while BLAS runs (see :func:`gemm_accumulate`); numpy's matmul is
    the fallback.
    """

    name = "cpu"
    row_blocks = True

    def __init__(self) -> None:
        self._c: np.ndarray | None = None
        #: The last tile's accumulator, reused by the next tile of the same shape.
        self._spare: np.ndarray | None = None
        self._fresh = True
        self._partial = False
        self._limbs: Limbs | None = None

    def configure(
        self, *, device_memory: int | None = None, panel_depth: int | None = None
    ) -> None:
        """Nothing to configure: BLAS has no device budget, and panels come whole."""

    def host_buffer(self, size: int, dtype: np.dtype) -> np.ndarray:
        return np.empty(size, dtype=dtype)

    def start_tile(
        self, shape: tuple[int, int], dtype: np.dtype, limbs: Limbs | None = None
    ) -> None:
        """Begin a tile of ``shape`` in ``dtype``; ``limbs``: an integer product of that
        split (int64 or uint64 panels and tile: :mod:`outofcore.backends.limbs`)."""
        self._limbs = limbs
        spare, self._spare = self._spare, None  # freed before a new one is allocated
        if spare is not None and spare.shape == tuple(shape) and spare.dtype == dtype:
            self._c = spare  # fresh memory costs page faults; a first beta = 0 overwrites it
        else:
            spare = None
            self._c = np.empty(shape, dtype=dtype)
        self._fresh = True
        self._partial = False  # rows multiplied by accumulate_rows

    def accumulate(self, a_panel: np.ndarray, b_panel: np.ndarray) -> None:
        c = self._require_tile()
        self._multiply(c, a_panel, b_panel, accumulate=not self._fresh)
        self._fresh = False

    def accumulate_gram(self, a_panel: np.ndarray) -> None:
        """``C += a_panel @ a_panel.T`` on the upper triangle of the (square) tile only.

        BLAS ``syrk``, half the multiply-adds of ``gemm``: the diagonal tiles of a
        symmetric product.  The task mirrors the upper triangle when the tile is done.
        """
        c = self._require_tile()
        if self._limbs is not None:  # all of C, exactly (the task mirrors the upper part)
            self._multiply(c, a_panel, a_panel.T, accumulate=not self._fresh)
        else:
            gram_into(c, a_panel, accumulate=not self._fresh)
        self._fresh = False

    def accumulate_rows(
        self, row0: int, panels: Sequence[tuple[np.ndarray, np.ndarray]]
    ) -> np.ndarray:
        """``C[row0:row0+h] += sum(a_rows @ b_panel for a_rows, b_panel in panels)``.

        Returns that block of rows of ``C``.  A tile task calls this for its
        last panels, block by block, and writes each returned block (final by
        then) while the next one is multiplied.
        """
        c = self._require_tile()
        rows = c[row0 : row0 + panels[0][0].shape[0]]
        for position, (a_rows, b_panel) in enumerate(panels):
            first = self._fresh and position == 0
            self._multiply(rows, a_rows, b_panel, accumulate=not first)
        self._partial = True
        return rows

    def finish_tile(self) -> np.ndarray:
        c = self._require_tile()
        if self._fresh and not self._partial:  # no panel multiplied (k == 0): zero
            c[...] = 0
        self._c = None
        self._spare = c
        return c

    def release(self) -> None:
        """Free the accumulator kept for the next tile, and a tile's left by a task that
        failed before finishing it."""
        self._c = self._spare = None

    def kept_bytes(self) -> int:
        return sum(x.nbytes for x in (self._c, self._spare) if x is not None)

    def _require_tile(self) -> np.ndarray:
        if self._c is None:
            raise RuntimeError("CpuEngine: start_tile() was not called")
        return self._c

    def _multiply(self, c: np.ndarray, a: np.ndarray, b: np.ndarray, *, accumulate: bool) -> None:
        """``c += a @ b`` (or ``c = a @ b``): BLAS, or exact limbs for a wide integer tile."""
        if self._limbs is not None:
            multiply_limbs_into(c, a, b, accumulate=accumulate, limbs=self._limbs)
        else:
            multiply_into(c, a, b, accumulate=accumulate)


def gpu_visible(simulator_counts: bool = True) -> bool:
    """Return True when CUDA kernels can run here, without importing numba.

    A real GPU (the CUDA driver shows a device) counts when numba-cuda is installed;
    numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) counts only when
    ``simulator_counts``: asked for by name it is fine for tests, but ``"auto"``
    must never pick a simulator.
    """
    from outofcore.backends.cuda import probe  # noqa: PLC0415 (the standard library only)

    if not probe.numba_cuda_installed():
        return False
    if probe.simulator_enabled():
        return simulator_counts
    return probe.device_count() > 0


BACKENDS = ("auto", "cpu", "cuda", "cupy")


def check_backend(backend: str) -> str:
    """``backend`` if it is one of :data:`BACKENDS` (nothing is probed).

    Raises
    ------
    BackendError
        For an unknown name.
    """
    if backend not in BACKENDS:
        raise BackendError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    return backend


def resolve_backend(backend: str, gpu_workers: int | None = None, where: str = "") -> str:
    """Turn ``"auto"`` into a concrete backend and check the one asked for is usable.

    ``gpu_workers`` None: the tasks run on this machine (in this process or a
    LocalCluster), and ``"auto"`` is ``"cuda"`` when a real GPU is visible here.
    Else the tasks run on a cluster's workers (the scheduler at ``where``), of which
    ``gpu_workers`` declare a ``GPU`` resource: ``"auto"`` is ``"cuda"`` when any does,
    whatever the machine submitting has.

    Raises
    ------
    BackendError
        For an unknown name, or ``cuda``/``cupy`` where no GPU is visible (no worker
        declaring one).
    """
    check_backend(backend)
    if gpu_workers is not None:
        if backend == "auto":
            return "cuda" if gpu_workers else "cpu"
        if backend in ("cuda", "cupy") and not gpu_workers:
            raise BackendError(
                f"backend {backend!r} needs GPU workers, and no worker of the scheduler at "
                f"{where} declares a GPU resource (start them with `dask worker ... "
                "--resources GPU=1`), or use backend 'cpu'"
            )
        return backend
    if backend == "auto":
        return "cuda" if gpu_visible(simulator_counts=False) else "cpu"
    if backend in ("cuda", "cupy"):
        from outofcore.backends.cuda.probe import require_numba_cuda  # noqa: PLC0415

        require_numba_cuda(backend)
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
        from outofcore.backends.cuda import make_engine as make_cuda_engine  # noqa: PLC0415

        return make_cuda_engine(backend)
    raise BackendError(f"no engine for backend {backend!r}")

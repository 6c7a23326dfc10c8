"""The CPU backend's engine: BLAS ``gemm`` and ``syrk`` accumulating in place."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from outofcore.backends.blas import gram_into, multiply_into
from outofcore.backends.limbs import multiply_into as multiply_limbs_into
from outofcore.backends.protocol import EngineCapabilities
from outofcore.operands.dtypes import Limbs, check_product

__all__ = ["CpuEngine"]


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
    capabilities = EngineCapabilities(row_blocks=True, gram=True, limbs=True)

    def __init__(self) -> None:
        self._c: np.ndarray | None = None
        #: The last tile's accumulator, reused by the next tile of the same shape.
        self._spare: np.ndarray | None = None
        self._fresh = True
        self._partial = False
        self._limbs: Limbs | None = None

    def configure(
        self,
        *,
        device_memory: int | None = None,
        panel_depth: int | None = None,
        tiles_in_flight: int = 1,
    ) -> None:
        """Nothing to configure: BLAS has no device budget, and panels come whole."""

    def wrote(self, nbytes: int) -> None:
        """Nothing to do: the write took what it took."""

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
        check_product(a_panel, a_panel.T, c, one_dtype=self._limbs is None)
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

    def timings(self) -> dict[str, float]:
        """Nothing measured: BLAS has no device clock (``capabilities.timings`` is False)."""
        return {}

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
        check_product(a, b, c, one_dtype=self._limbs is None)  # BLAS reads what it is told
        if self._limbs is not None:
            multiply_limbs_into(c, a, b, accumulate=accumulate, limbs=self._limbs)
        else:
            multiply_into(c, a, b, accumulate=accumulate)

"""The tile-engine protocol: what multiplies the k-panels of one output tile.

A tile task (``outofcore.compute.tile``) reads panels from zarr and hands them to an
engine; the engine owns the accumulator ``C_ij`` and the arithmetic.  Every engine
follows the same steps, so the plan and the scheduler do not know or care which one runs:

>>> engine.configure(device_memory=None, panel_depth=tk)   # doctest: +SKIP
>>> engine.start_tile((tm, tn), dtype)                     # doctest: +SKIP
>>> engine.accumulate(a_panel, b_panel)                    # once per k-panel, C += A·B
>>> c_tile = engine.finish_tile()                          # host array holding C_ij

``host_buffer`` gives the host arrays panels are decoded into (pinned memory on a GPU
engine), so that the reader never allocates per panel.  After ``accumulate`` returns, the
engine no longer needs the panel buffers: the reader may decode the next panel into them.

What an engine offers beyond these steps it declares in :attr:`TileEngine.capabilities`
(an :class:`EngineCapabilities`), never by the presence of a method: every engine has every
method of the protocol, and one it does not offer raises
:class:`~outofcore.errors.BackendError` naming the capability.  The conformance suite
(``tests/outofcore/backends/test_engine_conformance.py``) runs every engine through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from outofcore.errors import BackendError
from outofcore.operands.dtypes import Limbs

__all__ = ["EngineCapabilities", "TileEngine", "unsupported"]


@dataclass(frozen=True)
class EngineCapabilities:
    """What an engine offers beyond ``start_tile``, ``accumulate`` and ``finish_tile``."""

    #: :meth:`TileEngine.accumulate_rows` works: a task multiplies a tile's last panels block
    #: of rows by block and writes each block while the next is computed.  False: every
    #: panel goes through ``accumulate`` and the whole tile is written after ``finish_tile``.
    row_blocks: bool = False
    #: :meth:`TileEngine.accumulate_gram` works: ``C += A·Aᵀ`` on a diagonal tile's upper
    #: triangle (``syrk``, half the work).  False: a Gram tile goes through ``accumulate``.
    gram: bool = False
    #: ``start_tile(limbs=...)`` works: exact 64-bit integer products through 16-bit limbs.
    #: False: a job whose product needs limbs runs on an engine that has them (the CPU).
    limbs: bool = False
    #: :meth:`TileEngine.timings` measures the device's kernel and copy seconds (CUDA
    #: events, or the timed device's waits).  False: it returns an empty dict.
    timings: bool = False
    #: The engine multiplies on a device with a memory of its own, which ``configure``'s
    #: ``device_memory`` caps.  False: host memory only; ``device_memory`` is ignored.
    device: bool = False

    def names(self) -> tuple[str, ...]:
        """The capabilities offered, by name (for messages and the plan's summary)."""
        return tuple(name for name, on in vars(self).items() if on)


def unsupported(engine_name: str, capability: str) -> BackendError:
    """The error an engine raises for a step of a capability it does not declare."""
    return BackendError(
        f"the {engine_name!r} engine does not offer {capability!r} "
        f"(its capabilities say {capability}=False); the tile loop should not ask it"
    )


@runtime_checkable
class TileEngine(Protocol):
    """What a tile task needs from an engine (CPU BLAS, numba CUDA, the timed device, ...)."""

    #: The backend name the engine was made for (``"cpu"``, ``"cuda"``, ...).
    name: str
    capabilities: EngineCapabilities

    def configure(
        self,
        *,
        device_memory: int | None = None,
        panel_depth: int | None = None,
        tiles_in_flight: int = 1,
    ) -> None:
        """Take a job's settings for the tiles that follow (the task calls this first).

        ``device_memory`` caps a device engine's device bytes; ``panel_depth`` is the plan's
        ``tk``; ``tiles_in_flight`` tasks of the worker share its device at once, each with
        an engine of its own (a device engine takes at most that share of the device).
        Engines without a device ignore them.
        """

    def host_buffer(self, size: int, dtype: np.dtype) -> np.ndarray:
        """Return a flat host array of ``size`` elements to decode panels into."""

    def start_tile(
        self, shape: tuple[int, int], dtype: np.dtype, limbs: Limbs | None = None
    ) -> None:
        """Begin a new output tile of ``shape``; the accumulator starts at zero.

        ``limbs`` (only where ``capabilities.limbs``): an exact integer product split so.
        """

    def accumulate(self, a_panel: np.ndarray, b_panel: np.ndarray) -> None:
        """``C += a_panel @ b_panel``; the panel buffers are free again on return."""

    def accumulate_rows(
        self, row0: int, panels: Sequence[tuple[np.ndarray, np.ndarray]]
    ) -> np.ndarray:
        """``C[row0:row0+h] += sum(a_rows @ b_panel)``; return those rows of ``C``.

        Only where ``capabilities.row_blocks``; else raises BackendError.
        """

    def accumulate_gram(self, a_panel: np.ndarray) -> None:
        """``C += a_panel @ a_panel.T`` on the upper triangle of the (square) tile.

        Only where ``capabilities.gram``; else raises BackendError.  The task mirrors the
        upper triangle once the tile is finished.
        """

    def finish_tile(self) -> np.ndarray:
        """Return the finished tile as a C-ordered host array.

        The array stays valid until the next ``start_tile``: write it first.
        """

    def timings(self) -> dict[str, float]:
        """What the device measured of the last tile (``kernel_seconds``, ``copy_seconds``,
        ``first_launch_seconds``); empty unless ``capabilities.timings``."""

    def wrote(self, nbytes: int) -> None:
        """The task has written ``nbytes`` of the finished tile to the output.

        Nothing to do for an engine that multiplies (CPU, CUDA); the timed device waits its
        modelled write there (the node's disk, where its model has one).
        """

    def release(self) -> None:
        """Free host buffers kept for the next tile (an in-process run's end)."""

    def kept_bytes(self) -> int:
        """Host bytes the engine keeps between tiles."""

"""The host accumulator of a sub-tiled tile, laid out device tile by device tile.

When a host tile does not fit on the device (:mod:`outofcore.backends.device.engine`, sub-tiled),
its ``C`` lives in one flat pinned host array.  Each strip of ``dm`` rows holds its
device tiles one after another, each one contiguous (:func:`device_tile_block`), so
that every device tile's load and store is one DMA; :func:`to_row_major` rearranges
the finished accumulator into a row-major tile, one strip at a time.  Pure numpy.
"""

from __future__ import annotations

import numpy as np

from outofcore.planner.device_plan import DevicePlan


def device_tile_block(
    flat: np.ndarray, n: int, shape: tuple[int, int], r0: int, c0: int
) -> np.ndarray:
    """Return the contiguous part of ``flat`` that holds the device tile at ``(r0, c0)``.

    Parameters
    ----------
    flat
        The accumulator of a tile ``n`` columns wide, in device-tile order.
    n
        Columns of the host tile.
    shape
        ``(height, width)`` of the device tile.
    r0, c0
        Its first row and column in the host tile.
    """
    height, width = shape
    start = r0 * n + height * c0
    return flat[start : start + height * width].reshape(height, width)


def to_row_major(flat: np.ndarray, m: int, n: int, plan: DevicePlan) -> np.ndarray:
    """Rearrange the accumulator ``flat`` of an ``m x n`` tile in place; return it ``(m, n)``.

    One strip of ``plan.dm`` rows at a time goes from device-tile order to row-major
    (nothing to do when the plan has a single column of device tiles).
    """
    if plan.cols > 1:  # device tile order -> row-major, one strip of rows at a time
        for r0 in range(0, m, plan.dm):
            r1 = min(m, r0 + plan.dm)
            height = r1 - r0
            strip = flat[r0 * n : r1 * n]
            blocks = strip.copy()
            rows = strip.reshape(height, n)
            for c0 in range(0, n, plan.dn):
                c1 = min(n, c0 + plan.dn)
                rows[:, c0:c1] = blocks[height * c0 : height * c1].reshape(height, c1 - c0)
    return flat.reshape(m, n)

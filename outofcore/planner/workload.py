"""How a plan's tasks load its workers: the tile tasks and the busiest worker's share.

Pure arithmetic on a :class:`~outofcore.planner.problem.Problem` and a tile shape: the tiling
(:mod:`outofcore.planner.tiling`) ranks candidates with it, the time model
(:mod:`outofcore.planner.model`) and the GPU
estimate (:mod:`outofcore.planner.gpu_rates`) predict with it.
"""

from __future__ import annotations

import math

from outofcore.planner.problem import Problem


def tile_count(p: Problem, tm: int, tn: int) -> int:
    """Tasks of ``tm×tn`` tiles: every tile, or those on and above the diagonal (symmetric),
    of every entry of a stack."""
    rows, cols = math.ceil(p.m / tm), math.ceil(p.n / tn)
    return p.entries * (rows * (rows + 1) // 2 if p.symmetric else rows * cols)


def busiest_worker(p: Problem, tm: int, tn: int, workers: int, splits: int = 1) -> float:
    """Output elements (times k) of the busiest worker when ``tm×tn`` tiles go to ``workers``.

    With k split in ``splits`` parts every tile is that many tasks of
    ``1/splits`` of its work; a symmetric product has the tiles on and above
    the diagonal only, the diagonal ones at half the work (``syrk``).  Tasks
    are handed out largest first to the least loaded worker.  Beyond ``4 *
    workers`` tasks that is approximated, in constant time, by the mean share
    or one whole task, whichever is larger (the planner calls this for every
    candidate).  A stack's entries each have every tile.  :mod:`outofcore.planner.model`
    uses it too.
    """
    rows, cols = math.ceil(p.m / tm), math.ceil(p.n / tn)
    last_height = p.m - (rows - 1) * tm
    total = float(p.m * p.n)
    if p.symmetric:  # the upper triangle of tiles, the diagonal ones at half the work
        total = (total + (rows - 1) * tm * tm + last_height * last_height) / 2
    total *= p.entries
    if workers == 1:
        return total
    if tile_count(p, tm, tn) * splits > 4 * workers:  # fine-grained: the mean, or one task
        return max(total / workers, tm * tn / splits)
    heights = [tm] * (rows - 1) + [last_height]
    widths = [tn] * (cols - 1) + [p.n - (cols - 1) * tn]
    areas = [
        heights[i] * widths[j] * (0.5 if i == j and p.symmetric else 1.0) / splits
        for i in range(rows)
        for j in range(i if p.symmetric else 0, cols)
        for _ in range(splits * p.entries)
    ]
    loads = [0.0] * workers
    for area in sorted(areas, reverse=True):
        loads[loads.index(min(loads))] += area
    return float(max(loads))

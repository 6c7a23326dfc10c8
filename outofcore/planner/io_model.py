"""The I/O model: the bytes a plan reads, and the lower bound no schedule beats.

Pure arithmetic, like :mod:`outofcore.planner.plan`.  Bytes read by the whole job (every
task reads its A row-panel and B column-panel once)::

    nt * wa * m * k  +  mt * wb * k * n        (mt, nt = tiles down and across)

(``wa``, ``wb`` the stored element sizes of A and B) plus whatever a k-panel
boundary that splits a chunk reads twice (:func:`touched`), plus the addend once.
The lower bound printed beside it is ``max(|A| + |B|, 2*m*n*k*w / sqrt(M/w) - 2*M)``
for a budget of ``M`` bytes per task (Smith et al., arXiv:1702.02017).  A stack of
``E`` matrices reads each entry's as above, whole chunks of ``chunk_batch`` entries
each; its bound has the inputs as stored (a broadcast operand once) and ``E`` times
the multiply-adds.
"""

from __future__ import annotations

import math
from typing import Protocol

from outofcore.planner.problem import Problem


class PanelRange(Protocol):
    """Positions ``start`` to ``stop`` of the ``tk``-deep panels over ``k``
    (:class:`outofcore.planner.plan.Panels`)."""

    k: int
    tk: int
    start: int
    stop: int


def io_lower_bound(problem: Problem, budget_bytes: int) -> int:
    """``max(|A|+|B|, 2·m·n·k·w/√(M/w) − 2M)`` bytes for a budget of ``M`` bytes.

    ``|A|``, ``|B|`` (and an addend, one matrix of it at least) at their stored
    sizes, ``a_matrices`` and ``b_matrices`` of them for a stack; the communication
    term counts words of the accumulation size held in ``M``, moved at the inputs'
    mean stored size, for all ``E·m·n·k`` multiply-adds of a stack of ``E`` (the
    segment argument holds over the whole stack: its multiply-adds are those of one
    product of the stacked operands).  A symmetric product: ``max(|X|, half the term)``.
    """
    p, budget = problem, budget_bytes
    wa, wb = p.read_sizes
    a_size, b_size = wa * p.a_matrices * p.m * p.k, wb * p.b_matrices * p.k * p.n
    inputs = a_size + b_size + p.addend_itemsize * p.m * p.n
    words = budget / p.itemsize
    products = p.entries * p.m * p.n * p.k
    communication = (2 * products / math.sqrt(words) - 2 * words) * (wa + wb) / 2
    if p.symmetric:  # one array, read once at least; half the products to form
        inputs, communication = a_size, communication / 2
    return int(max(inputs, communication))


def chunk_span(start: int, stop: int, chunk: int, extent: int) -> int:
    """Elements decoded along one axis to read ``[start, stop)`` with chunks of ``chunk``."""
    return min(math.ceil(stop / chunk) * chunk, extent) - (start // chunk) * chunk


def touched(panels: PanelRange, chunk: int) -> int:
    """Elements along k that reading every panel decodes, given chunks of ``chunk``.

    The sum of :func:`chunk_span` over the panels, in closed form (floor sums): time
    independent of the number of panels and chunks.
    """
    k, tk, first, stop = panels.k, panels.tk, panels.start, panels.stop
    if first == stop:
        return 0
    count = -(-k // tk)
    inner = min(stop, count - 1)  # panels ending at (p + 1) * tk, not at k
    # Each panel decodes from the start of its first chunk to the end of its last one ...
    ends = chunk * floor_sum(max(0, inner - first), chunk, tk, tk * first + tk + chunk - 1)
    starts = chunk * floor_sum(stop - first, chunk, tk, tk * first)
    # ... where a last chunk is cut short by k, and the last panel ends at k itself.
    whole = k // chunk * chunk
    if k % chunk:
        short = max(0, inner - max(first, whole // tk))
        ends -= short * (whole + chunk - k)
    if stop == count:
        ends += k
    return ends - starts


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """``sum(floor((a*i + b) / m) for i in range(n))`` in ``O(log m)`` steps (``a, b >= 0``)."""
    total = 0
    while n > 0:
        if a >= m:
            total += n * (n - 1) // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        top = a * n + b
        if top < m:
            break
        n, b = divmod(top, m)
        m, a = a, m
    return total

"""Where a job's wall time goes, phase by phase: the fixed cost that decides small jobs.

A job's summary carries ``phases``, seconds by phase in the order they ran
(docs/performance.md, "The first seconds")::

    startup        the command's interpreter start and imports (the command only)
    open           the inputs and the output opened and checked, the plan's first check
    fingerprints   the inputs' content fingerprints (resume only onto unchanged inputs)
    lease          the output's lease taken
    cluster_start  the executor opened: a LocalCluster started, or a scheduler reached
    plan           the plan for the job's workers, and the workers' memory checked
    output         the journal opened and the output created
    tasks          every task run (the job's ``seconds``)
    finish         every tile's record checked, the inputs checked unchanged, the output
                   marked complete
    cluster_stop   the executor closed and the lease let go (in the summary the job
                   returns and the command prints; the output's stored summary is written
                   before it)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


class Phases:
    """Wall seconds by phase, in the order the phases first ran."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}
        #: Seconds spent in phases nested in each phase now running, innermost last.
        self._inner: list[float] = []

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        """Time the ``with`` block as phase ``name`` (added up when it runs again).

        A phase timed inside another counts for itself only: the phases add up to the
        wall time they cover.
        """
        started = time.perf_counter()
        self._seconds.setdefault(name, 0.0)  # in the order phases start
        self._inner.append(0.0)
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            self.add(name, elapsed - self._inner.pop())
            if self._inner:
                self._inner[-1] += elapsed

    def add(self, name: str, seconds: float) -> None:
        """Count ``seconds`` more for phase ``name``."""
        self._seconds[name] = self._seconds.get(name, 0.0) + seconds

    def as_dict(self) -> dict[str, float]:
        """Seconds by phase, as the summary carries them."""
        return dict(self._seconds)

"""Sampling a process tree from inside: summed RSS, read_chars and CPU seconds."""

from __future__ import annotations

import threading
from typing import Any


class TreeSampler:
    """Samples the summed RSS and ``read_chars`` of this process and its descendants."""

    def __init__(self, interval: float = 0.05) -> None:
        import psutil  # noqa: PLC0415

        self._psutil = psutil
        self._root = psutil.Process()
        self.interval = interval
        self.peak_rss = 0
        self._reads: dict[int, int] = {}
        self._cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="tree-sampler")

    def _procs(self) -> list[Any]:
        try:
            return [self._root, *self._root.children(recursive=True)]
        except self._psutil.Error:
            return [self._root]

    def sample(self) -> None:
        total = 0
        for proc in self._procs():
            try:
                total += proc.memory_info().rss
                self._reads[proc.pid] = proc.io_counters().read_chars
                times = proc.cpu_times()
                self._cpu[proc.pid] = times.user + times.system
            except (self._psutil.Error, AttributeError):
                continue
        self.peak_rss = max(self.peak_rss, total)

    def read_chars(self) -> int:
        """Bytes read by the tree so far (processes that exited keep their last value)."""
        self.sample()
        return sum(self._reads.values())

    def cpu_seconds(self) -> float:
        """CPU seconds (user + system) used by the tree so far."""
        self.sample()
        return sum(self._cpu.values())

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> TreeSampler:
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

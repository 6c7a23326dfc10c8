"""A job's progress on stderr: a redrawn bar on a terminal, plain lines anywhere else.

A bar redraws itself with carriage returns, which a log file or a pipe keeps
as one long line of updates.  When the stream is not a terminal,
:func:`progress` writes a line when the job starts, at most one every
:data:`LINE_EVERY_SECONDS` while tiles finish, and a last one when it ends
(or stops)::

    matmul: 0/96 tiles (0%)
    matmul: 12/96 tiles (12%), 3.10 s elapsed, 3.87 tiles/s, about 22 s left
    matmul: 96/96 tiles (100%) in 24.81 s, 3.87 tiles/s
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from dask.utils import format_time
from tqdm import tqdm

#: Seconds between two progress lines when stderr is not a terminal.
LINE_EVERY_SECONDS = 10.0


@contextlib.contextmanager
def progress(
    total: int,
    done: int,
    show: bool = True,
    unit: str = "tile",
    name: str = "matmul",
    stream: TextIO | None = None,
    every: float = LINE_EVERY_SECONDS,
) -> Iterator[Callable[[Any], None]]:
    """Report progress on ``stream`` (stderr); yields the callback to call per finished unit.

    Parameters
    ----------
    total
        Units (tiles or tasks) of the whole job.
    done
        Units done before this run (a resumed job's).
    show
        False reports nothing.
    unit, name
        What is counted, and the name each line or the bar starts with.
    stream
        Where to write (default ``sys.stderr``): a tqdm bar when it is a
        terminal, else :class:`ProgressLines`.
    every
        Seconds between two plain lines.
    """
    if not show:
        yield _ignore
        return
    stream = sys.stderr if stream is None else stream
    if _is_terminal(stream):
        with tqdm(
            total=total, initial=done, unit=unit, desc=name, file=stream, dynamic_ncols=True
        ) as bar:
            yield lambda _: bar.update(1)
        return
    lines = ProgressLines(total, done, unit, name, stream, every)
    try:
        yield lines.update
    except BaseException:
        lines.close(stopped=True)
        raise
    lines.close()


def _ignore(_: Any) -> None:
    """The callback when nothing is shown."""


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


class ProgressLines:
    """Plain progress lines: one at the start, at most one per ``every`` seconds, a last one.

    Parameters
    ----------
    total, done, unit, name, stream, every
        As for :func:`progress`.
    clock
        Seconds, monotonic (``time.monotonic``).
    """

    def __init__(
        self,
        total: int,
        done: int,
        unit: str,
        name: str,
        stream: TextIO,
        every: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.done = self.done_before = done
        self.units = f"{unit}s"
        self.name = name
        self.stream = stream
        self.every = every
        self.clock = clock
        self.started = self.last = clock()
        self._write(self._count())

    def update(self, _: Any = None) -> None:
        """One more unit done; a line when ``every`` seconds passed since the last."""
        self.done += 1
        now = self.clock()
        if now - self.last >= self.every and self.done < self.total:
            self.last = now
            elapsed = now - self.started
            line = f"{self._count()}, {format_time(elapsed)} elapsed{self._rate(elapsed)}"
            left = self._seconds_left(elapsed)
            self._write(line if left is None else f"{line}, about {format_time(left)} left")

    def close(self, stopped: bool = False) -> None:
        """The last line: the count and time, or where the job stopped."""
        elapsed = self.clock() - self.started
        if stopped:
            self._write(f"stopped at {self._count()} after {format_time(elapsed)}")
        else:
            self._write(f"{self._count()} in {format_time(elapsed)}{self._rate(elapsed)}")

    def _count(self) -> str:
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        return f"{self.done}/{self.total} {self.units}{share}"

    def _rate(self, elapsed: float) -> str:
        ran = self.done - self.done_before
        return f", {ran / elapsed:.3g} {self.units}/s" if ran and elapsed > 0 else ""

    def _seconds_left(self, elapsed: float) -> float | None:
        ran = self.done - self.done_before
        return (self.total - self.done) * elapsed / ran if ran and elapsed > 0 else None

    def _write(self, text: str) -> None:
        print(f"{self.name}: {text}", file=self.stream, flush=True)

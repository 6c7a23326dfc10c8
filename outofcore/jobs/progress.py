"""A job's progress on stderr: a redrawn bar on a terminal, plain lines anywhere else.

A bar redraws itself with carriage returns, which a log file or a pipe keeps
as one long line of updates.  When the stream is not a terminal,
:func:`progress` writes a line when the job starts, at most one every
:data:`LINE_EVERY_SECONDS` while the job runs (a line on time whether or not a tile or
panel finished since), and a last one when it ends (or stops)::

    matmul: 0/96 tiles (0%)
    matmul: 12/96 tiles (12%), 3.10 s elapsed, 3.87 tiles/s, about 22 s left
    matmul: 96/96 tiles (100%) in 24.81 s, 3.87 tiles/s

The steps done within running tasks (each panel's A read, its B read, its product:
:mod:`outofcore.compute.panel_progress`) count as their share of a task, so a job of
one or two tiles moves while a panel is read, and its time left is known from the first
steps::

    matmul: 0/1 tiles (38%), 15.2 s elapsed, about 25 s left
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from dask.utils import format_time
from tqdm import tqdm

#: Seconds between two progress lines when stderr is not a terminal.
LINE_EVERY_SECONDS = 5.0


@contextlib.contextmanager
def progress(
    total: int,
    done: int,
    show: bool = True,
    unit: str = "tile",
    name: str = "matmul",
    stream: TextIO | None = None,
    every: float | None = None,
) -> Iterator[Callable[[Any], None]]:
    """Report progress on ``stream`` (stderr); yields the callback to call per finished unit
    (with its result, whose ``key`` names the task), whose ``panel(key, done, total)`` takes
    the panels done within a running task.

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
        Seconds between two plain lines (default :data:`LINE_EVERY_SECONDS`).
    """
    if not show:
        yield Ignored()
        return
    stream = sys.stderr if stream is None else stream
    if _is_terminal(stream):
        with (
            tqdm(
                total=total, initial=done, unit=unit, desc=name, file=stream, dynamic_ncols=True
            ) as bar,
            _ticking(bar.refresh, LINE_EVERY_SECONDS),
        ):  # its elapsed time moves
            yield BarProgress(bar, done)
        return
    every = LINE_EVERY_SECONDS if every is None else every
    lines = ProgressLines(total, done, unit, name, stream, every)
    try:
        with _ticking(lines.tick, every):
            yield lines
    except BaseException:
        lines.close(stopped=True)
        raise
    lines.close()


@contextlib.contextmanager
def _ticking(tick: Callable[[], Any], every: float) -> Iterator[None]:
    """Call ``tick`` every ``every`` seconds from a thread of its own while the block runs,
    so that progress is shown on time though no task or panel reports (a panel read for
    long on a loaded machine); stopped, and waited for, when the block ends.  ``every``
    0 (a line at each report) ticks never."""
    if every <= 0:
        yield
        return
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(every):
            tick()

    ticker = threading.Thread(target=run, name="outofcore-progress", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join(timeout=every + 1)


class Ignored:
    """The callbacks when nothing is shown."""

    def __call__(self, _: Any = None) -> None:
        """A task finished."""

    def panel(self, key: str, done: int, total: int) -> None:
        """Panels done within a task."""


class Running:
    """Units done, and the share done of the running ones (by task key); thread-safe (panel
    reports come from worker threads and the client's event loop)."""

    def __init__(self, done: int) -> None:
        self._lock = threading.Lock()
        self.done = done
        self.partial: dict[str, float] = {}

    def finished(self, result: Any) -> None:
        with self._lock:
            self.done += 1
            self.partial.pop(getattr(result, "key", None), None)

    def panel(self, key: str, done: int, total: int) -> None:
        with self._lock:
            if total > 0 and 0 <= done < total:  # the last panel: the task ends soon
                self.partial[key] = done / total

    @property
    def amount(self) -> float:
        """Units done, the running ones' shares included."""
        with self._lock:
            return self.done + sum(self.partial.values())


class BarProgress:
    """A tqdm bar moved by finished tasks and by the panels of running ones."""

    def __init__(self, bar: tqdm, done: int) -> None:
        self.bar = bar
        self.running = Running(done)

    def __call__(self, result: Any = None) -> None:
        self.running.finished(result)
        self._move()

    def panel(self, key: str, done: int, total: int) -> None:
        self.running.panel(key, done, total)
        self._move()

    def _move(self) -> None:
        self.bar.update(round(self.running.amount, 3) - self.bar.n)


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
        self.done_before = done
        self.running = Running(done)
        self.unit = unit
        self.name = name
        self.stream = stream
        self.every = every
        self.clock = clock
        self._lock = threading.Lock()
        self.started = self.last = clock()
        self._write(self._count())

    @property
    def done(self) -> int:
        """Units finished."""
        return self.running.done

    def update(self, result: Any = None) -> None:
        """One more unit done; a line when ``every`` seconds passed since the last."""
        self.running.finished(result)
        self._maybe_line()

    __call__ = update

    def panel(self, key: str, done: int, total: int) -> None:
        """``done`` of ``total`` panels of the running task ``key``; a line when due."""
        self.running.panel(key, done, total)
        self._maybe_line()

    def tick(self) -> None:
        """A line when ``every`` seconds passed since the last, whatever reported since:
        the time elapsed and left move on though no step ended."""
        self._maybe_line()

    def _maybe_line(self) -> None:
        now = self.clock()
        with self._lock:
            if now - self.last < self.every or self.done >= self.total:
                return
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
        share = f" ({100 * self.running.amount / self.total:.0f}%)" if self.total else ""
        return f"{self.done}/{self.total} {self._units(self.total)}{share}"

    def _units(self, count: float) -> str:
        return self.unit if count == 1 else f"{self.unit}s"

    def _rate(self, elapsed: float) -> str:
        ran = self.done - self.done_before
        if not ran or elapsed <= 0:
            return ""
        return f", {ran / elapsed:.3g} {self.unit}s/s"

    def _seconds_left(self, elapsed: float) -> float | None:
        """From the work done so far, running tasks' panels included."""
        ran = self.running.amount - self.done_before
        return (
            (self.total - self.running.amount) * elapsed / ran if ran > 0 and elapsed > 0 else None
        )

    def _write(self, text: str) -> None:
        print(f"{self.name}: {text}", file=self.stream, flush=True)


@contextlib.contextmanager
def panel_reports(executor: Any, job_id: str, listener: Callable[[str, int, int], None]):
    """Hand ``listener`` the panel reports of job ``job_id``'s tasks
    (:mod:`outofcore.compute.panel_progress`): those made in this process directly, and
    a Dask cluster's worker events through the executor's client, each checked."""
    from outofcore.compute import panel_progress  # noqa: PLC0415

    def event(item: Any) -> None:
        message = item[1] if isinstance(item, tuple) and len(item) == 2 else None
        if not isinstance(message, dict) or message.get("job") != job_id:
            return
        key, done, total = message.get("task"), message.get("done"), message.get("total")
        if isinstance(key, str) and isinstance(done, int) and isinstance(total, int):
            listener(key, done, total)

    client = getattr(executor, "client", None)
    with panel_progress.listening(job_id, listener):
        if client is None:
            yield
            return
        client.subscribe_topic(panel_progress.TOPIC, event)
        try:
            yield
        finally:
            client.unsubscribe_topic(panel_progress.TOPIC)

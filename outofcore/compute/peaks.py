"""The peak memory of a worker process while one task ran, not over its lifetime.

``getrusage``'s ``ru_maxrss`` is a process's high-water mark since it started: on a
worker that ran an earlier job it reports that job's peak.  On Linux the mark the
kernel keeps in ``/proc/self/status`` (``VmHWM``) can be reset by writing ``5`` to
``/proc/self/clear_refs``; each task resets it when it starts and reads it when it
ends.  Tasks that run at once in one process (a worker's threads) share the mark:
before a task resets it, the mark so far is handed to every task still running, so
each one's figure covers its whole run.  Where the mark cannot be reset, the
lifetime figure is reported, and :func:`resettable` says so.
"""

from __future__ import annotations

import itertools
import resource
import sys
import threading

import psutil

_lock = threading.Lock()
#: The highest mark each running task has seen so far, by its token.
_running: dict[int, int] = {}
_tokens = itertools.count()


def resettable() -> bool:
    """Whether this process's high-water mark can be reset (Linux 4.0 and later)."""
    return _read_mark() is not None and _reset_mark()


def start() -> tuple[int, int]:
    """Begin measuring a task: its token and this process's resident bytes now."""
    with _lock:
        mark = _read_mark()
        if mark is not None:
            for token, seen in _running.items():
                _running[token] = max(seen, mark)
        _reset_mark()
        token = next(_tokens)
        rss = psutil.Process().memory_info().rss
        _running[token] = rss
    return token, rss


def finish(token: int) -> int:
    """The peak resident bytes of this process while the task of ``token`` ran."""
    with _lock:
        seen = _running.pop(token, 0)
        mark = _read_mark()
    if mark is None:
        return lifetime_peak()
    return max(seen, mark)


def lifetime_peak() -> int:
    """Peak resident bytes of this process since it started."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _read_mark() -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_mark() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        return False
    return True

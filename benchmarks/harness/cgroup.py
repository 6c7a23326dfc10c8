"""A cgroup v1 memory group for a process tree: made, capped, watched and removed.

``MemoryGroup(cap)`` makes ``/sys/fs/cgroup/memory/outofcore-capped-<pid>-<n>``,
writes its ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` where
the kernel keeps swap accounts, so swap cannot hide an overrun), and starts
commands inside it: the child writes its own pid to ``cgroup.procs`` before it
runs the command, so it and every process it starts are charged to the group.
A background thread samples ``memory.stat`` (anonymous and page-cache bytes)
while a command runs; :meth:`MemoryGroup.stats` adds the kernel's own peak
(``memory.max_usage_in_bytes``, page cache included), the times the limit was
hit and the OOM kills.  Leaving the ``with`` block kills what is left in the
group and removes it.

Needs root and the cgroup v1 memory controller at ``/sys/fs/cgroup/memory``:
:func:`unavailable` says why not, or None.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path("/sys/fs/cgroup/memory")
_serial = itertools.count()


def unavailable() -> str | None:
    """Why a capped memory group cannot be made here, or None when it can."""
    if not (ROOT / "memory.limit_in_bytes").exists():
        return f"no cgroup v1 memory controller at {ROOT}"
    if not os.access(ROOT, os.W_OK):
        return f"{ROOT} is not writable (needs root)"
    return None


class MemoryGroup:
    """A cgroup v1 memory group capped at ``cap`` bytes (a context manager)."""

    def __init__(self, cap: int, name: str | None = None) -> None:
        why = unavailable()
        if why:
            raise RuntimeError(f"cannot make a memory cgroup: {why}")
        self.cap = cap
        self.path = ROOT / (name or f"outofcore-capped-{os.getpid()}-{next(_serial)}")
        self.peak_rss = 0
        self.peak_cache = 0

    def __enter__(self) -> MemoryGroup:
        self.path.mkdir()
        (self.path / "memory.limit_in_bytes").write_text(str(self.cap))
        memsw = self.path / "memory.memsw.limit_in_bytes"
        if memsw.exists():
            memsw.write_text(str(self.cap))
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
        for _ in range(100):  # a killed process leaves the group when it is reaped
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)
        self.path.rmdir()

    @property
    def limit_file(self) -> Path:
        """The file holding the cap, as error messages name it."""
        return self.path / "memory.limit_in_bytes"

    def pids(self) -> list[int]:
        """Processes in the group now."""
        return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]

    def kill(self) -> None:
        """SIGKILL every process still in the group."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def run(
        self, command: list[str], timeout: float, env: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Run ``command`` in the group; its exit status, output, wall time and memory.

        A command still running after ``timeout`` seconds is killed (with
        everything it started) and reported with ``timed_out``.
        """
        procs = str(self.path / "cgroup.procs")

        def join_group() -> None:  # in the child, before exec
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        stop = threading.Event()
        sampler = threading.Thread(target=self._sample, args=(stop,), daemon=True)
        sampler.start()
        started = time.perf_counter()
        child = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            preexec_fn=join_group,  # noqa: PLW1509 (no threads of ours touch the child)
        )
        timed_out = False
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            self.kill()
            out, err = child.communicate()
        seconds = time.perf_counter() - started
        stop.set()
        sampler.join()
        return {
            "returncode": child.returncode,
            "timed_out": timed_out,
            "seconds": seconds,
            "stdout": out,
            "stderr": err,
            **self.stats(),
        }

    def _sample(self, stop: threading.Event) -> None:
        while not stop.is_set():
            stat = self.memory_stat()
            self.peak_rss = max(self.peak_rss, stat.get("total_rss", 0))
            self.peak_cache = max(self.peak_cache, stat.get("total_cache", 0))
            stop.wait(0.1)

    def memory_stat(self) -> dict[str, int]:
        """``memory.stat`` as numbers."""
        pairs = (line.split() for line in (self.path / "memory.stat").read_text().splitlines())
        return {name: int(value) for name, value in pairs}

    def stats(self) -> dict[str, Any]:
        """Peaks, limit hits and OOM kills of the group so far."""

        def number(name: str) -> int | None:
            file = self.path / name
            return int(file.read_text()) if file.exists() else None

        oom = dict(
            line.split()
            for line in (self.path / "memory.oom_control").read_text().split("\n")
            if line
        )
        return {
            "cap_bytes": self.cap,
            "max_usage_bytes": number("memory.max_usage_in_bytes"),
            "memsw_max_usage_bytes": number("memory.memsw.max_usage_in_bytes"),
            "sampled_peak_rss_bytes": self.peak_rss,
            "sampled_peak_cache_bytes": self.peak_cache,
            "failcnt": number("memory.failcnt"),
            "memsw_failcnt": number("memory.memsw.failcnt"),
            "under_oom": int(oom.get("under_oom", 0)),
            "oom_kill": int(oom.get("oom_kill", 0)),
        }

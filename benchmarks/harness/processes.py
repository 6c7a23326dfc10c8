"""Fresh processes: a child's JSON, a command's wall time and the peak RSS of its process tree."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

#: The benchmarks folder, and the checkout root (children run there as ``-m benchmarks.NAME``).
HERE = Path(__file__).resolve().parents[1]
ROOT = HERE.parent


class ChildFailed(RuntimeError):
    """A child process exited nonzero (or printed no JSON); ``stderr`` says why."""

    def __init__(self, returncode: int, stderr: str) -> None:
        super().__init__(f"child process exited with status {returncode}")
        self.returncode = returncode
        self.stderr = stderr


def run_json(args: Sequence[str], *, cwd: Path = ROOT, timeout: float | None = None) -> Any:
    """Run ``python ARGS...`` in a fresh process; the JSON its last stdout line holds."""
    done = subprocess.run(
        [sys.executable, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
        timeout=timeout,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise ChildFailed(done.returncode, done.stderr)
    return json.loads(lines[-1])


@dataclass
class Timed:
    """One command's run: wall seconds, peak RSS of its process tree, what it printed."""

    seconds: float
    peak_rss_bytes: int
    returncode: int
    stdout: str
    stderr: str

    def last_json(self) -> Any:
        """The JSON object on the last line of stdout (None when there is none)."""
        for line in reversed(self.stdout.strip().splitlines()):
            try:
                return json.loads(line)
            except ValueError:
                return None
        return None

    def stderr_tail(self, lines: int = 12) -> str:
        return "\n".join(self.stderr.rstrip().splitlines()[-lines:])


def timed(
    command: Sequence[str],
    *,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    interval: float = 0.05,
) -> Timed:
    """Run ``command`` in a fresh process; its wall time and sampled peak tree RSS.

    The RSS of the process and all its descendants (a LocalCluster's workers) is
    summed every ``interval`` seconds.  A run past ``timeout`` is killed and reported
    with return code -9.
    """
    import psutil  # noqa: PLC0415

    peak = 0
    stop = threading.Event()
    start = time.perf_counter()
    process = subprocess.Popen(
        list(map(str, command)),
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    root = psutil.Process(process.pid)

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            total = 0
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                tree = []
            for proc in tree:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    continue
            peak = max(peak, total)
            stop.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True, name="rss-sampler")
    sampler.start()
    try:
        stdout, stderr = process.communicate(timeout=timeout)
        returncode = process.returncode
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        stderr += f"\n(killed after {timeout} s)"
        returncode = -9
    seconds = time.perf_counter() - start
    stop.set()
    sampler.join()
    return Timed(seconds, peak, returncode, stdout, stderr)


def add_round_arguments(
    parser: argparse.ArgumentParser, systems: Sequence[str], repeats: int = 3
) -> None:
    """``--repeats`` (the rounds) and ``--systems`` (comma-separated, a list once parsed)."""
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--systems", type=lambda text: text.split(","), default=list(systems))


def child_rounds(
    module: str,
    systems: Sequence[str],
    repeats: int,
    prefix: str,
    child_args: Callable[[str, str], list[str]],
) -> dict[str, list[Any]] | None:
    """``repeats`` rounds of every system, each ``python -m MODULE --child ...`` in a fresh process.

    Parameters
    ----------
    module, systems, repeats
        The case module run as a child, the systems in each round's order, the rounds.
    prefix
        The prefix of the temporary folder the outputs are written in.
    child_args
        ``child_args(system, out)``: the arguments after ``--child``; ``out`` is the
        path of that system's output in the temporary folder.

    Returns
    -------
    dict or None
        Each system's runs (the JSON each child printed last), or None when a child
        failed (its stderr printed).
    """
    runs: dict[str, list[Any]] = {s: [] for s in systems}
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        for _ in range(repeats):
            for system in systems:
                out = str(Path(scratch) / f"{system}.zarr")
                try:
                    runs[system].append(
                        run_json(["-m", module, "--child", *child_args(system, out)])
                    )
                except ChildFailed as failure:
                    print(failure.stderr, file=sys.stderr)
                    return None
    return runs


def child_or_main(
    main: Callable[[], int], child: Callable[..., Any], *, prefix: str = ""
) -> NoReturn:
    """A case's entry point: ``--child ARGS...`` runs one measurement, anything else ``main()``.

    Parameters
    ----------
    main
        The case's driver; its return value is the exit status.
    child
        ``child(*ARGS)``: one measurement in this fresh process, printed as JSON on the
        last line of stdout (after ``prefix``) for the parent that started it.
    prefix
        Text before the JSON, for parents that look for a marked line.
    """
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(prefix + json.dumps(child(*sys.argv[2:])), flush=True)
        sys.exit(0)
    sys.exit(main())

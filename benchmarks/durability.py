"""Cost of durable commits (outofcore/storage/writing.py): one job with and without ``fsync``.

Writes (once) A and B, ``--size`` square float64 in ``--chunks`` chunks, in ``--dir``,
then runs the same in-process job (``client="sync"``) with the setting ``fsync`` on and
off, alternating, ``--repeats`` times each, and prints each run's seconds and the time
spent in the two durability calls (chunk flushes, journal writes).

    python -m benchmarks.durability --size 2048 --chunks 128 --memory 4MiB --repeats 3

Internal floor: it times the durability calls of ``outofcore.journal.store`` and
``outofcore.storage.writing`` themselves, so it imports those modules.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import outofcore.journal.store
import outofcore.storage.writing
from outofcore import config
from outofcore.api import run_job
from outofcore.frontends.generate import random_array

spent: collections.Counter[str] = collections.Counter()


def tally(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, adding its wall time to ``spent[name]``."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - started

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--chunks", type=int, default=128)
    parser.add_argument("--memory", default="4MiB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    folder = os.path.join(args.dir, f"outofcore-durability-{args.size}-{args.chunks}")
    a, b, c = (os.path.join(folder, name) for name in ("a.zarr", "b.zarr", "c.zarr"))
    shape, chunks = (args.size, args.size), (args.chunks, args.chunks)
    for path, seed in ((a, 1), (b, 2)):
        if not os.path.exists(path):
            random_array(path, shape, chunks, dtype="float64", seed=seed)
    outofcore.storage.writing.make_durable = tally("chunks", outofcore.storage.writing.make_durable)
    outofcore.journal.store.write_durably = tally("journal", outofcore.journal.store.write_durably)
    seconds: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.repeats):
        for flush in (True, False):
            shutil.rmtree(c, ignore_errors=True)
            spent.clear()
            with config.set({"fsync": flush}):
                result = run_job(a, b, c, memory=args.memory, client="sync", progress=False)
            seconds[flush].append(result.summary["seconds"])
            print(
                f"fsync {'on ' if flush else 'off'}: {result.summary['tiles']} tiles, "
                f"job {result.summary['seconds']:.3f} s, chunk flushes {spent['chunks']:.3f} s, "
                f"journal writes {spent['journal']:.3f} s"
            )
    on, off = statistics.median(seconds[True]), statistics.median(seconds[False])
    print(f"median: {on:.3f} s with fsync, {off:.3f} s without ({on - off:+.3f} s)")
    shutil.rmtree(c, ignore_errors=True)


if __name__ == "__main__":
    main()

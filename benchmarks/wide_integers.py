"""int32 ``A @ B`` exactly: outofcore's command against numpy's and dask.array's int64 matmul.

Count matrices are int32; numpy and dask.array multiply integers with numpy's own
loops (no BLAS), in int64 to hold the sums.  outofcore computes the same integers
exactly at BLAS speed (:mod:`outofcore.backends.limbs`: a panel whose values allow it is one
float64 ``gemm``, exact below ``2**53``; wider values go through 16-bit limbs).

One run makes (or reuses) two seeded int32 zarr arrays (``--n`` cubed, values in
``[-2**20, 2**20]``, zstd, ``--chunk``-square chunks), then times, alternating systems
within each of ``--repeats`` rounds, each in a fresh Python process:

* ``numpy``: ``A @ B`` in int64 on the arrays in memory (reading them and the
  conversion to int64 are not timed);
* ``dask``: ``(da.from_zarr(A).astype("int64") @ ...).to_zarr``, threaded scheduler;
* ``outofcore``: the command ``outofcore matmul A B -o C --scheduler sync`` (its whole
  wall time, interpreter start included).

Every result is compared with numpy's (exact equality of every element).  Prints
medians and ratios; writes JSON to ``--out-dir``.

Usage::

    python -m benchmarks.wide_integers                      # 2048^3, 3 rounds
    python -m benchmarks.wide_integers --n 256 --chunk 128 --repeats 1   # smoke
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.harness.inputs import add_folder_arguments, write_once
from benchmarks.harness.processes import ROOT, add_round_arguments, child_or_main, child_rounds
from benchmarks.harness.reports import save_json

SYSTEMS = ("numpy", "dask", "outofcore")
#: Largest magnitude of the values (counts, say).
LARGEST = 2**20


def counts(seed: int) -> Callable[[Any], None]:
    """A filler of seeded int32 values in ``[-LARGEST, LARGEST]``, one generator for the array."""

    def fill(array: Any) -> None:
        import numpy as np  # noqa: PLC0415

        rng = np.random.default_rng(seed)
        array[...] = rng.integers(
            -LARGEST, LARGEST, size=array.shape, dtype=np.int32, endpoint=True
        )

    return fill


def time_product(system: str, a: str, b: str, out: str) -> dict:
    """Time one system; returns seconds and a digest of the result."""
    import numpy as np  # noqa: PLC0415
    import zarr  # noqa: PLC0415

    shutil.rmtree(out, ignore_errors=True)
    if system == "numpy":
        x = zarr.open_array(a, mode="r")[...].astype(np.int64)
        y = zarr.open_array(b, mode="r")[...].astype(np.int64)
        t0 = time.perf_counter()
        result = x @ y
        seconds = time.perf_counter() - t0
    elif system == "dask":
        import dask  # noqa: PLC0415
        import dask.array as da  # noqa: PLC0415

        x, y = (da.from_zarr(p).astype(np.int64) for p in (a, b))
        t0 = time.perf_counter()
        with dask.config.set(scheduler="threads"):
            (x @ y).to_zarr(out)
        seconds = time.perf_counter() - t0
        result = zarr.open_array(out, mode="r")[...]
    else:
        command = [sys.executable, "-m", "outofcore.cli", "matmul", a, b, "-o", out]
        t0 = time.perf_counter()
        subprocess.run([*command, "--scheduler", "sync", "--quiet"], check=True, cwd=ROOT)
        seconds = time.perf_counter() - t0
        result = zarr.open_array(out, mode="r")[...]
    digest = np.frombuffer(result.astype(np.int64).tobytes(), dtype=np.uint64)
    return {
        "seconds": seconds,
        "dtype": str(result.dtype),
        "checksum": int(
            np.bitwise_xor.reduce(digest * np.arange(1, digest.size + 1, dtype=np.uint64))
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2048)
    parser.add_argument("--chunk", type=int, default=512)
    add_round_arguments(parser, SYSTEMS)
    add_folder_arguments(parser)
    args = parser.parse_args(argv)
    a = args.data_dir / f"int32-a-{args.n}-{args.chunk}.zarr"
    b = args.data_dir / f"int32-b-{args.n}-{args.chunk}.zarr"
    from zarr.codecs import ZstdCodec  # noqa: PLC0415

    for path, seed in ((a, 1), (b, 2)):
        write_once(
            path,
            counts(seed),
            shape=(args.n, args.n),
            chunks=(args.chunk, args.chunk),
            dtype="int32",
            compressors=ZstdCodec(level=3),
        )
    runs = child_rounds(
        "benchmarks.wide_integers",
        args.systems,
        args.repeats,
        "wide-integers-",
        lambda system, out: [system, str(a), str(b), out],
    )
    if runs is None:
        return 1
    reference = runs[args.systems[0]][0]["checksum"]
    wrong = sorted({s for s in args.systems for r in runs[s] if r["checksum"] != reference})
    medians = {s: statistics.median(r["seconds"] for r in runs[s]) for s in args.systems}
    result = {
        "n": args.n,
        "chunk": args.chunk,
        "largest": LARGEST,
        "repeats": args.repeats,
        "runs": runs,
        "median_seconds": medians,
        "agree": not wrong,
    }
    print(
        f"A @ B, int32 {args.n}^3 (values up to 2**20, zstd chunks {args.chunk}^2), "
        f"{args.repeats} round(s), medians:"
    )
    for s in args.systems:
        speedup = medians["numpy"] / medians[s] if "numpy" in medians else float("nan")
        print(
            f"  {s:<10} {medians[s]:8.3f} s  {2 * args.n**3 / medians[s] / 1e9:7.2f} G int-op/s"
            f"  numpy / {s}: {speedup:6.1f}x  (result {runs[s][0]['dtype']})"
        )
    print("  every element equal to numpy's: " + ("yes" if not wrong else f"NO: {wrong}"))
    path = save_json(args.out_dir / f"wide-integers-{args.n}.json", result)
    print(f"  wrote {path}")
    return 0 if not wrong else 1


if __name__ == "__main__":
    child_or_main(main, time_product)

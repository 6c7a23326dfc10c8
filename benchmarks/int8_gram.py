"""int8 Gram matrix ``G.T @ G``: outofcore against numpy's and dask.array's integer matmul.

GWAS users compute ``G.T @ G`` of 0/1/2 dosage matrices stored as int8.  numpy
and dask.array multiply integers without BLAS; outofcore computes the same
exact integers through float64 BLAS (every partial sum is an integer below
2**53, see docs/api.md "Data types"), reading ``G.T`` straight from ``G``.

One run makes (or reuses) a random 0/1/2 int8 zarr array ``G`` (``--rows`` x
``--cols``, zstd, ``--chunk``-row chunks), then times, alternating systems
within each of ``--repeats`` rounds, each in a fresh Python process:

* ``numpy``: ``G.T @ G`` in int64 on the array in memory (loading it and the
  conversion to int64 are not timed: numpy's int8 matmul would wrap around in int8);
* ``dask``: ``(G.T @ G).to_zarr`` in int64 (``da.from_zarr(G).astype("int64")``),
  threaded scheduler;
* ``outofcore``: ``matmul(G, G, transpose_a=True)`` on a LocalCluster of
  ``--workers`` single-thread workers (start-up not timed), zarr to zarr.

Every system's result is compared with the first numpy result (exact
equality).  Prints medians and ratios; writes JSON to ``--out-dir``.

Usage::

    python -m benchmarks.int8_gram                       # 131072 x 512, 3 rounds
    python -m benchmarks.int8_gram --rows 4096 --cols 64 --repeats 1   # smoke
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from typing import Any

from benchmarks.harness.inputs import add_folder_arguments, write_once
from benchmarks.harness.processes import add_round_arguments, child_or_main, child_rounds
from benchmarks.harness.reports import save_json

SYSTEMS = ("numpy", "dask", "outofcore")


def fill_dosages(array: Any) -> None:
    """Seeded 0/1/2 int8 values, one generator per chunk of rows (seeded ``(7, first row)``)."""
    import numpy as np  # noqa: PLC0415

    rows, cols = array.shape
    chunk = array.chunks[0]
    for r0 in range(0, rows, chunk):
        rng = np.random.default_rng((7, r0))
        r1 = min(rows, r0 + chunk)
        array[r0:r1] = rng.integers(0, 3, size=(r1 - r0, cols), dtype=np.int8)


def time_gram(system: str, g: str, out: str, workers: int) -> dict:
    """Time one system in this process; returns seconds and a digest of the result."""
    import numpy as np  # noqa: PLC0415
    import zarr  # noqa: PLC0415

    shutil.rmtree(out, ignore_errors=True)
    if system == "numpy":
        x = zarr.open_array(g, mode="r")[...].astype(np.int64)
        t0 = time.perf_counter()
        result = x.T @ x
        seconds = time.perf_counter() - t0
    elif system == "dask":
        import dask  # noqa: PLC0415
        import dask.array as da  # noqa: PLC0415

        x = da.from_zarr(g).astype(np.int64)
        t0 = time.perf_counter()
        with dask.config.set(scheduler="threads"):
            (x.T @ x).to_zarr(out)
        seconds = time.perf_counter() - t0
        result = zarr.open_array(out, mode="r")[...]
    else:
        from distributed import Client  # noqa: PLC0415

        import outofcore  # noqa: PLC0415
        from outofcore.runtime.cluster import start_local_cluster  # noqa: PLC0415

        with start_local_cluster(512 * 2**20, workers) as cluster, Client(cluster) as client:
            t0 = time.perf_counter()
            c = outofcore.matmul(
                g, g, out, transpose_a=True, client=client, memory="512MiB", progress=False
            )
            seconds = time.perf_counter() - t0
        result = c[...]
    return {
        "seconds": seconds,
        "dtype": str(result.dtype),
        "sum": int(result.astype(np.int64).sum()),
        "trace": int(np.trace(result.astype(np.int64))),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=131072)
    parser.add_argument("--cols", type=int, default=512)
    parser.add_argument("--chunk", type=int, default=8192, help="rows per chunk")
    parser.add_argument("--workers", type=int, default=2)
    add_round_arguments(parser, SYSTEMS)
    add_folder_arguments(parser)
    args = parser.parse_args(argv)
    g = args.data_dir / f"g-int8-{args.rows}x{args.cols}-{args.chunk}.zarr"
    write_once(
        g, fill_dosages, shape=(args.rows, args.cols), chunks=(args.chunk, args.cols), dtype="int8"
    )
    runs = child_rounds(
        "benchmarks.int8_gram",
        args.systems,
        args.repeats,
        "int8-gram-",
        lambda system, out: [system, str(g), out, str(args.workers)],
    )
    if runs is None:
        return 1
    reference = runs[args.systems[0]][0]
    wrong = [
        s
        for s in args.systems
        for r in runs[s]
        if (r["sum"], r["trace"]) != (reference["sum"], reference["trace"])
    ]
    medians = {s: statistics.median(r["seconds"] for r in runs[s]) for s in args.systems}
    flops = 2 * args.rows * args.cols * args.cols
    result = {
        "rows": args.rows,
        "cols": args.cols,
        "chunk": args.chunk,
        "workers": args.workers,
        "repeats": args.repeats,
        "runs": runs,
        "median_seconds": medians,
        "agree": not wrong,
    }
    print(
        f"G.T @ G, G {args.rows}x{args.cols} int8 (0/1/2), chunks {args.chunk} rows, "
        f"{args.repeats} round(s), medians:"
    )
    for s in args.systems:
        ratio = medians[s] / medians["numpy"] if "numpy" in medians else float("nan")
        print(
            f"  {s:<10} {medians[s]:8.3f} s  {flops / medians[s] / 1e9:7.2f} G int-op/s  "
            f"{ratio:6.2f}x numpy  (result {runs[s][0]['dtype']})"
        )
    if "dask" in medians and "outofcore" in medians:
        print(f"  dask.array / outofcore: {medians['dask'] / medians['outofcore']:.1f}x")
    print("  results agree (sum and trace): " + ("yes" if not wrong else f"NO: {wrong}"))
    path = save_json(args.out_dir / f"int8-gram-{args.rows}x{args.cols}.json", result)
    print(f"  wrote {path}")
    return 0 if not wrong else 1


if __name__ == "__main__":
    child_or_main(main, lambda system, g, out, workers: time_gram(system, g, out, int(workers)))

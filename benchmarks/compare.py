"""Side-by-side benchmark: numpy in memory, dask.array, cubed and outofcore.

One run makes (or reuses) two random float32 zarr inputs (zstd, the zarr
default codec) of ``--size``² in ``--chunk``² chunks, then times every system
over ``--repeats`` rounds, alternating systems within each round so that
machine noise hits all of them alike.  Each measurement runs in a fresh
Python process; a background thread in that process samples the RSS of its
whole process tree (client, scheduler, nanny and worker processes) with
psutil, and the tree's ``read_chars`` before and after the timed region.

What is timed, per system (cluster start-up is excluded and reported apart):

* ``numpy``: A and B are loaded into memory first (not timed, reported as
  ``load_seconds``); the time is ``np.matmul(A, B)`` alone, the in-memory
  BLAS limit.  Storing C is not timed either.
* ``dask``: ``(da.from_zarr(A) @ da.from_zarr(B)).to_zarr(C)`` with the
  threaded scheduler (zarr to zarr).
* ``dask-cluster``: the same on a LocalCluster of ``--workers`` single-thread
  workers (Dask's defaults otherwise).
* ``cubed``: ``cubed.from_zarr`` ... ``to_zarr`` with the threads executor and
  ``allowed_mem`` = the total budget.
* ``outofcore``: ``outofcore.api.run_job`` on the LocalCluster that
  ``outofcore.runtime.cluster.start_local_cluster`` starts for a job with no client (the
  command's, ``outofcore.matmul``'s: workers are threads of the job's process),
  with ``--memory`` (total) split evenly over ``--workers``; its output is
  uncompressed (its default).

Variants: ``outofcore@2`` runs on 2 workers sharing the budget;
``outofcore+zstd`` writes a zstd output (zarr's default codec, which
dask.array and cubed write; outofcore's own default is uncompressed);
``outofcore+warm`` first runs ``B @ A`` once, untimed, on the same cluster
(a service's workers, which have run a job of the same size before; none of
its panels is one the timed job reads); ``outofcore+processes`` gives each
worker a process of its own, as a user's own ``LocalCluster()`` does.

BLAS: some machines set ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` to work
around old OpenBLAS builds, which makes a current one run an older, slower
kernel.  By default (``--blas native``) every system's process runs without
both, so numpy and the others use the kernel OpenBLAS picks for this CPU; the
kernels each process ran are recorded (threadpoolctl) and printed.

Bytes read: ``read_chars`` of the process tree during the timed region
(compressed bytes as stored, page cache included), and that figure scaled by
the inputs' compression ratio to decoded bytes, against the plan's lower bound
``max(|A| + |B|, 2mnk·w/√(M/w) − 2M)`` for a per-worker budget ``M``
(``outofcore.planner.io_model.io_lower_bound``).

Usage::

    python -m benchmarks.compare --quick
    python -m benchmarks.compare --size 16384 --chunk 2048 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.harness.inputs import ensure_inputs, stored_bytes
from benchmarks.harness.processes import child_or_main
from benchmarks.harness.reports import GIB, markdown_table, pyplot, summarise
from benchmarks.harness.timing import (
    BLAS_OVERRIDES,
    RESULT,
    add_timing_arguments,
    measure,
    measure_child,
)

ALL_SYSTEMS = ("numpy", "dask", "dask-cluster", "cubed", "outofcore")
DEFAULT_SYSTEMS = ("numpy", "dask", "cubed", "outofcore")


# --------------------------------------------------------------------------- sampling


# --------------------------------------------------------------------------- inputs


# --------------------------------------------------------------------------- one system


# --------------------------------------------------------------------------- driver


def table(result: dict) -> str:
    info, systems = result["info"], result["systems"]
    kernels = ", ".join(
        sorted({k for s in systems.values() for k in s.get("blas", [])}) or ["unknown"]
    )
    unset = info.get("blas", {}).get("unset")
    if unset:
        kernels += (
            " (unset for every system: " + ", ".join(f"{n}={v}" for n, v in unset.items()) + ")"
        )
    head = (
        f"{info['size']}² float32, chunks {info['chunk']}², {info['repeats']} round(s), "
        f"budget {info['memory'] / GIB:g} GiB over {info['workers']} worker(s); "
        f"lower bound {info['lower_bound_bytes'] / GIB:.2f} GiB; BLAS {kernels}"
    )
    columns = ("system", "median s", "× numpy", "peak RSS (all processes)")
    columns += ("read (decoded eq.)", "read / lower bound")
    return head + "\n\n" + markdown_table(columns, "lrrrrr", map(row, systems.items()))


def row(item: tuple[str, dict]) -> tuple[str, ...]:
    """A system's row of :func:`table`: its median time, ratio, peak RSS and reads."""
    name, s = item
    if "error" in s:
        return (name, "failed", "", "", "", "")
    return (
        name,
        f"{s['seconds_median']:.1f}",
        f"{s.get('ratio_to_numpy', float('nan')):.2f}",
        f"{s['peak_rss_bytes'] / GIB:.2f} GiB",
        f"{s['bytes_read_decoded_equiv'] / GIB:.2f} GiB",
        f"{s['read_over_lower_bound']:.2f}",
    )


def plot(result: dict, path: Path) -> None:
    plt = pyplot()

    systems = {k: v for k, v in result["systems"].items() if "error" not in v}
    names = list(systems)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    secs = [systems[n]["seconds_median"] for n in names]
    bars = left.bar(names, secs, color=["#888" if n == "numpy" else "#4a7" for n in names])
    for bar, name in zip(bars, names, strict=True):
        ratio = systems[name].get("ratio_to_numpy")
        if ratio:
            left.annotate(
                f"{ratio:.2f}×",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
            )
    left.set_ylabel("seconds (median)")
    left.set_title("time (× numpy in memory)")
    rss = [systems[n]["peak_rss_bytes"] / GIB for n in names]
    right.bar(names, rss, color="#57a")
    right.set_ylabel("GiB")
    right.set_title("peak RSS, all processes")
    info = result["info"]
    fig.suptitle(f"C = A @ B, {info['size']}² float32 zarr to zarr, chunks {info['chunk']}²")
    for ax in (left, right):
        ax.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def command_parser() -> argparse.ArgumentParser:
    """The command's options: the size, systems, rounds, budget and workers, and timing's."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=8192, help="m = k = n")
    parser.add_argument("--chunk", type=int, help="input chunk edge (default size/8)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--systems",
        default=",".join(DEFAULT_SYSTEMS),
        help=f"comma-separated, from {','.join(ALL_SYSTEMS)}",
    )
    parser.add_argument("--memory", default="1GiB", help="total budget over all workers")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="outofcore workers sharing --memory (default 1, the LocalCluster default); "
        "'outofcore@2' in --systems overrides it; dask-cluster starts one per core",
    )
    parser.add_argument("--quick", action="store_true", help="2048², 1 round: under 2 minutes")
    add_timing_arguments(parser, timeout=900)
    return parser


def main(argv: list[str] | None = None) -> int:
    options = command_parser()
    args = options.parse_args(argv)

    from outofcore.config import parse_size  # noqa: PLC0415

    if args.quick:
        args.size, args.chunk, args.repeats = 2048, 512, 1
    chunk = args.chunk or max(1, args.size // 8)
    systems = [s for s in args.systems.split(",") if s]
    unknown = {s.partition("@")[0].partition("+")[0] for s in systems} - set(ALL_SYSTEMS)
    if unknown:
        options.error(f"unknown system(s) {sorted(unknown)}; choose from {ALL_SYSTEMS}")
    if "cubed" in systems:
        try:
            import cubed  # noqa: F401, PLC0415
        except ImportError:
            print("cubed is not installed: skipped (pip install '.[bench]')", file=sys.stderr)
            systems.remove("cubed")
    memory = parse_size(args.memory)
    paths = ensure_inputs(args.data_dir, args.size, chunk)
    info = run_info(args, chunk, memory, paths)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = args.out_dir / f"compare-{args.size}"
    runs = rounds(systems, paths, info, args, stem)
    result = {"info": info, "systems": summarise(runs, info)}
    Path(f"{stem}.json").write_text(json.dumps(result, indent=2))
    plot(result, Path(f"{stem}.png"))
    print(table(result))
    print(f"\nwrote {stem}.json and {stem}.png", file=sys.stderr)
    return 0 if all("error" not in s for s in result["systems"].values()) else 1


def run_info(
    args: argparse.Namespace, chunk: int, memory: int, paths: tuple[Path, Path]
) -> dict[str, Any]:
    """What the results are of: sizes, budget, machine, compression, the reads' lower bound,
    the BLAS settings, and what each system's time counts."""
    from outofcore.planner.io_model import io_lower_bound  # noqa: PLC0415
    from outofcore.planner.problem import Problem  # noqa: PLC0415

    logical = 2 * args.size * args.size * 4
    square = Problem(args.size, args.size, args.size, 4, (chunk, chunk), (chunk, chunk))
    return {
        "size": args.size,
        "chunk": chunk,
        "repeats": args.repeats,
        "memory": memory,
        "workers": args.workers,
        "cpus": os.cpu_count(),
        "compression_ratio": logical / sum(stored_bytes(p) for p in paths),
        "lower_bound_bytes": io_lower_bound(square, memory // args.workers),
        "inputs_bytes": logical,
        "blas": {
            "mode": args.blas,
            "unset": {n: os.environ[n] for n in BLAS_OVERRIDES if n in os.environ}
            if args.blas == "native"
            else {},
        },
        "timed": {
            "numpy": "np.matmul on loaded arrays (load and store not timed)",
            "others": "zarr to zarr, cluster start-up not timed",
        },
    }


def rounds(
    systems: list[str],
    paths: tuple[Path, Path],
    info: dict[str, Any],
    args: argparse.Namespace,
    stem: Path,
) -> dict[str, list[dict]]:
    """``args.repeats`` rounds of every system, each in a fresh process, the order reversed
    every other round; after each round the summary so far is written to ``STEM.json``
    (a partial file survives an interrupted run).  Each system's runs."""
    scratch = tempfile.mkdtemp(prefix="compare-", dir=args.data_dir)
    cfg = {
        "memory": info["memory"],
        "workers": args.workers,
        "scratch": scratch,
        "blas": args.blas,
    }
    runs: dict[str, list[dict]] = {s: [] for s in systems}
    try:
        for round_ in range(args.repeats):
            order = systems if round_ % 2 == 0 else systems[::-1]
            for system in order:
                r = measure(system, paths, cfg, args.timeout)
                runs[system].append(r)
                shown = f"{r['seconds']:.2f} s" if "seconds" in r else r["error"][-300:]
                print(f"round {round_ + 1} {system:>12}: {shown}", file=sys.stderr)
            info["rounds_done"] = round_ + 1
            partial = {"info": info, "systems": summarise(runs, info)}
            Path(f"{stem}.json").write_text(json.dumps(partial, indent=2))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return runs


if __name__ == "__main__":
    child_or_main(main, measure_child, prefix=RESULT)

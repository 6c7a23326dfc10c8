"""Latency benchmark: the same product from local disk and from an S3 server 20 ms away.

A ``moto_server`` (a real S3 API, in memory) runs on loopback behind
:class:`benchmarks.s3_local.DelayProxy`, which delays every request by ``--delay``
seconds.  The inputs (``--size``² float32, ``--chunk``² chunks, zstd, the
same seeded values in both places) are written to local disk and, directly
(not through the proxy), to the S3 server.  Then, ``--repeats`` rounds, the
runs alternating within each round:

* ``outofcore local``: local inputs to a local output;
* ``outofcore S3``: inputs, output, journal and lease on the delayed S3;
* ``outofcore S3, 2 in flight``: the same with ``remote-concurrency`` 2
  (zarr's chunk requests in flight per task, as for local reads): what the
  many requests in flight buy;
* ``dask.array S3``: ``da.from_zarr(A) @ da.from_zarr(B)`` stored into a C
  on the delayed S3 that has dask's chunks (Dask's threaded scheduler).

The outofcore runs share one LocalCluster (``outofcore.runtime.cluster.start_local_cluster``,
``--workers``, ``--memory`` each), started and warmed up by one untimed job
before the timing; every time is the wall time of the whole call.  Both S3
systems get the same storage options.  The table gives medians, each one's
ratio to outofcore local, and the requests the proxy saw.

The S3 server runs on this machine: its CPU time (moto is Python, about
100 MiB/s here) competes with BLAS, so the S3 ratios include the server's
cost, not only the latency.

Usage::

    python -m benchmarks.latency --quick              # a smoke test: 512², 128² chunks
    python -m benchmarks.latency --size 8192 --chunk 1024 --repeats 3

Internals: ``outofcore.storage.locations`` and ``outofcore.storage.stores`` give
dask.array the same storage options as outofcore.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness.reports import text_row
from benchmarks.s3_local import DelayProxy, MotoServer

SYSTEMS = ("outofcore local", "outofcore S3", "outofcore S3, 2 in flight", "dask.array S3")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = _parser().parse_args(argv)
    if args.quick:
        args.size, args.chunk, args.repeats, args.memory = 512, 128, 1, "16MiB"
    server = MotoServer()
    try:
        with (
            DelayProxy(("127.0.0.1", server.port), args.delay) as proxy,
            tempfile.TemporaryDirectory(prefix="outofcore-latency-") as scratch,
        ):
            report = _run(args, server, proxy, Path(scratch))
    finally:
        server.stop()
    print(latency_table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return report


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument("--delay", type=float, default=0.02, help="seconds a request (0.02)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory", default="1GiB", help="budget per worker (1GiB)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="512², 128² chunks, one round")
    parser.add_argument("--json", help="also write the report here")
    return parser


def _run(args: argparse.Namespace, server: MotoServer, proxy: DelayProxy, folder: Path) -> dict:
    import s3fs  # noqa: PLC0415
    from distributed import Client  # noqa: PLC0415

    from outofcore.config import parse_size  # noqa: PLC0415
    from outofcore.frontends.generate import random_array  # noqa: PLC0415
    from outofcore.runtime.cluster import start_local_cluster  # noqa: PLC0415

    bucket = server.bucket("latency")
    delayed = {**server.options, "endpoint_url": proxy.endpoint}
    shape, chunks = (args.size, args.size), (args.chunk, args.chunk)
    paths = {"local": (folder / "a.zarr", folder / "b.zarr"), "s3": ()}
    paths["s3"] = (f"{bucket}/a.zarr", f"{bucket}/b.zarr")
    started = time.perf_counter()
    for seed, name in enumerate("ab"):
        random_array(folder / f"{name}.zarr", shape, chunks, seed=seed)
        random_array(
            f"{bucket}/{name}.zarr", shape, chunks, seed=seed, storage_options=server.options
        )
    print(f"inputs written in {time.perf_counter() - started:.1f} s", file=sys.stderr)

    fs = s3fs.S3FileSystem(**server.options, skip_instance_cache=True)
    memory = parse_size(args.memory)
    cluster = start_local_cluster(memory, args.workers)
    runs: dict[str, list[dict]] = {name: [] for name in SYSTEMS}
    requests_before = proxy.counts.requests
    try:
        with Client(cluster) as client:
            # Untimed: the workers' first task imports and warms up (BLAS, zarr, s3fs).
            _outofcore(*paths["s3"], f"{bucket}/warm.zarr", client, memory, delayed)
            for round_ in range(args.repeats):
                for name in SYSTEMS:
                    out = f"{bucket}/c-{round_}-{SYSTEMS.index(name)}.zarr"
                    requests_before = proxy.counts.requests
                    if name == "outofcore local":
                        seconds, detail = _outofcore(
                            *paths["local"], folder / "c.zarr", client, memory, None
                        )
                    elif name == "dask.array S3":
                        seconds, detail = _dask(*paths["s3"], out, delayed, args.chunk)
                    else:
                        in_flight = 2 if "2 in flight" in name else None
                        seconds, detail = _outofcore(
                            *paths["s3"], out, client, memory, delayed, in_flight
                        )
                    detail["requests"] = proxy.counts.requests - requests_before
                    runs[name].append({"seconds": seconds, **detail})
                    if fs.exists(out):  # moto keeps objects in memory
                        fs.rm(out, recursive=True)
                    print(f"round {round_ + 1}: {name}: {seconds:.2f} s", file=sys.stderr)
    finally:
        cluster.close()
    base = statistics.median(r["seconds"] for r in runs["outofcore local"])
    return {
        "size": args.size,
        "chunk": args.chunk,
        "delay_seconds": args.delay,
        "memory": args.memory,
        "workers": args.workers,
        "repeats": args.repeats,
        "systems": {
            name: {
                "median_seconds": statistics.median(r["seconds"] for r in found),
                "ratio_to_local": statistics.median(r["seconds"] for r in found) / base,
                "runs": found,
            }
            for name, found in runs.items()
        },
    }


def _outofcore(
    a: Any,
    b: Any,
    out: Any,
    client: Any,
    memory: int,
    options: dict | None,
    in_flight: int | None = None,
) -> tuple[float, dict]:
    from outofcore import config  # noqa: PLC0415
    from outofcore.api import run_job  # noqa: PLC0415

    settings = {"remote-concurrency": in_flight} if in_flight else {}
    started = time.perf_counter()
    with config.set(settings):
        result = run_job(
            a,
            b,
            out,
            client=client,
            memory=memory,
            overwrite=True,
            progress=False,
            storage_options=options,
        )
    seconds = time.perf_counter() - started
    s = result.summary
    return seconds, {
        "tiles": s["tiles"],
        "tile": s["tile"],
        "read_wait_seconds": s["read_wait_seconds"],
        "compute_seconds": s["compute_seconds"],
    }


def _dask(a: str, b: str, out: str, options: dict, chunk: int) -> tuple[float, dict]:
    import dask  # noqa: PLC0415
    import dask.array as da  # noqa: PLC0415
    import zarr  # noqa: PLC0415

    from outofcore.storage.locations import locate  # noqa: PLC0415
    from outofcore.storage.stores import zarr_options  # noqa: PLC0415

    started = time.perf_counter()
    x = da.from_zarr(zarr.open_array(a, mode="r", **zarr_options(locate(a, options))))
    y = da.from_zarr(zarr.open_array(b, mode="r", **zarr_options(locate(b, options))))
    product = x @ y
    # C made with dask's own chunks (dask#12583: to_zarr onto other chunks can corrupt).
    c = zarr.create_array(
        out,
        shape=product.shape,
        chunks=(chunk, chunk),
        dtype=product.dtype,
        overwrite=True,
        **zarr_options(locate(out, options)),
    )
    with dask.config.set(scheduler="threads"):
        da.store(product.rechunk((chunk, chunk)), c, lock=False)
    return time.perf_counter() - started, {}


#: The table's columns: system, median seconds, ratio to local, requests.
COLUMNS = ("<28", ">10", ">9", ">10")


def latency_table(report: dict) -> str:
    """The report as a table: one row per system, its median time against local disk's."""
    lines = [
        f"{report['size']}² float32 @ {report['size']}², {report['chunk']}² chunks, "
        f"+{report['delay_seconds'] * 1000:.0f} ms a request to S3, budget {report['memory']} "
        f"x {report['workers']} worker(s), median of {report['repeats']}",
        text_row(("system", "median s", "x local", "requests"), COLUMNS, sep=""),
    ]
    for name, found in report["systems"].items():
        requests = statistics.median(r["requests"] for r in found["runs"])
        figures = (found["median_seconds"], found["ratio_to_local"], requests)
        cells = (f"{figures[0]:.2f}", f"{figures[1]:.2f}", f"{figures[2]:.0f}")
        lines.append(text_row((name, *cells), COLUMNS, sep=""))
    return "\n".join(lines)


if __name__ == "__main__":
    main()

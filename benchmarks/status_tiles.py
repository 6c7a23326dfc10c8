"""How long ``outofcore status`` takes on a journal of many tiles on S3 20 ms away.

A journal with ``--tiles`` tile records (a square-ish grid of tiles) is put
straight into the memory of a ``moto`` S3 server run in this process
(``ThreadedMotoServer``: 10⁵ PUTs over HTTP take moto many minutes); then,
over HTTP through
:class:`benchmarks.s3_local.DelayProxy` (``--delay`` a request), it times

* ``status``: :func:`outofcore.api.job_status`, which lists the records (one
  paged listing per row of tiles, many in flight) and reads none;
* ``one listing``: the same records listed by one paged listing (1000 keys a
  request), as ``Journal.done_tiles`` does on resume;
* ``read every record``: a GET per record, ``--read-sample`` of them (the
  time is scaled to all), as status did before.

Usage::

    python -m benchmarks.status_tiles --tiles 100000

Internal floor: it writes the records with ``outofcore.journal.records.Journal`` and
``outofcore.storage.storeops`` and times the listings themselves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time

from benchmarks.s3_local import DelayProxy, MotoServer, free_port


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiles", type=int, default=100_000)
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--read-sample", type=int, default=2000)
    args = parser.parse_args(argv)
    from moto.server import ThreadedMotoServer  # noqa: PLC0415

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    try:
        report = _run(args, server)
    finally:
        server.stop()
    print(json.dumps(report, indent=2))
    return report


def _run(args: argparse.Namespace, server) -> dict:
    import boto3  # noqa: PLC0415
    from moto.s3.models import s3_backends  # noqa: PLC0415
    from zarr.core.sync import sync  # noqa: PLC0415

    from outofcore.api import job_status  # noqa: PLC0415
    from outofcore.journal.records import JOURNAL_DIR, Journal  # noqa: PLC0415
    from outofcore.storage import storeops  # noqa: PLC0415
    from outofcore.storage.locations import locate  # noqa: PLC0415

    port = server._server.server_port
    endpoint = f"http://127.0.0.1:{port}"
    options = {"key": MotoServer.KEY, "secret": MotoServer.SECRET, "endpoint_url": endpoint}
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=MotoServer.KEY,
        aws_secret_access_key=MotoServer.SECRET,
        region_name="us-east-1",
    )
    client.create_bucket(Bucket="status")
    backend = s3_backends[MotoServer.ACCOUNT]["global"]
    bucket = "s3://status"
    rows = math.isqrt(args.tiles)
    cols = math.ceil(args.tiles / rows)
    tiles = [(i, j) for i in range(rows) for j in range(cols)][: args.tiles]
    root = f"c.zarr/{JOURNAL_DIR}"
    job = {"journal_id": "j", "tiles_total": rows * cols, "plan": {"tiles_grid": [rows, cols]}}
    backend.put_object("status", f"{root}/job.json", json.dumps(job).encode())
    started = time.perf_counter()
    record = json.dumps({"finished": time.time(), "result": {}}).encode()
    for i, j in tiles:
        backend.put_object("status", f"{root}/tiles/j/tile-{i}-{j}.json", record)
    written = time.perf_counter() - started
    print(f"{len(tiles)} records written in {written:.0f} s", file=sys.stderr)

    with DelayProxy(("127.0.0.1", port), args.delay) as proxy:
        options = {**options, "endpoint_url": proxy.endpoint}
        out = f"{bucket}/c.zarr"
        report: dict = {"tiles": len(tiles), "grid": [rows, cols], "delay_seconds": args.delay}

        before, t0 = proxy.counts.requests, time.perf_counter()
        state = job_status(out, options)
        report["status"] = _took(t0, proxy, before, tiles_done=state["tiles_done"])

        journal = Journal.for_output(locate(out, options))
        before, t0 = proxy.counts.requests, time.perf_counter()
        done = journal.done_tiles("j")
        report["one_listing"] = _took(t0, proxy, before, tiles_done=len(done))

        keys = [journal.tile_key("j", f"tile-{i}-{j}") for i, j in tiles[: args.read_sample]]

        async def read_all() -> list:
            return await asyncio.gather(*(storeops.get_versioned(journal.store, k) for k in keys))

        before, t0 = proxy.counts.requests, time.perf_counter()
        sync(read_all())
        sample = _took(t0, proxy, before, records_read=len(keys))
        sample["seconds_scaled_to_all"] = sample["seconds"] * len(tiles) / len(keys)
        report["read_every_record"] = sample
    return report


def _took(started: float, proxy: DelayProxy, before: int, **extra: int) -> dict:
    return {
        "seconds": time.perf_counter() - started,
        "requests": proxy.counts.requests - before,
        **extra,
    }


if __name__ == "__main__":
    main()

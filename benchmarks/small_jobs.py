"""The first seconds: small and medium jobs, whole commands against numpy + zarr and dask.array.

Issue 22, item 3.  A job's fixed cost (imports, cluster start, fingerprints, lease,
plan, output creation, finish, cluster stop) decides small and medium jobs.  For
each case, one run times, over ``--repeats`` rounds with the order of systems
reversed every other round, each system as a user runs it, every one in a fresh
Python process, wall time of the whole process:

* ``numpy-zarr``: a script that reads A and B with zarr, multiplies with numpy
  (``x.T @ x`` for a Gram case) and writes C with zarr;
* ``dask``: the one-liner ``(da.from_zarr(a) @ da.from_zarr(b)).to_zarr(c)``
  (``x.T @ x``), dask's default (threaded) scheduler;
* ``command``: ``outofcore matmul a b -o c --workers W --json`` (``outofcore gram``),
  with the job's own seconds and its phases read from the JSON summary;
* ``api``: ``outofcore.matmul`` in a process that already has a ``Client`` of a
  LocalCluster of ``W`` workers (started and warmed with a small job, untimed): the
  call's wall time against the job's own seconds;
* ``blas``: numpy's in-memory product alone, inputs already loaded (the floor the
  compute-bound cases are held to).

Every output is compared with numpy's within a float32 tolerance that grows with k;
a wrong result fails the run.  Prints medians and the issue's ratios: command /
dask, command / numpy-zarr, command / blas, and the API call's time over its job's.
Writes ``benchmarks/results/small-jobs-<date>.json``.

Usage::

    python -m benchmarks.small_jobs --cases sq512 sq2048 --repeats 3      # a minute
    python -m benchmarks.small_jobs --repeats 3                           # the quarter sizes
    python -m benchmarks.small_jobs --cases gram-full large-k-full --repeats 1  # the issue's
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.harness.inputs import DEFAULT_DATA, DEFAULT_RESULTS
from benchmarks.harness.reports import markdown_table
from benchmarks.shape_zoo.cases import Shape, ensure_shape_inputs

#: The issue's shapes: small squares, and its Gram and large-k products at a quarter size
#: (shapes.py's :class:`Shape`: for a Gram case X is ``k×m`` in ``a_chunks``).
CASES = {
    s.name: s
    for s in (
        Shape("sq512", 512, 512, 512, (512, 512), (512, 512), "fixed cost"),
        Shape("sq2048", 2048, 2048, 2048, (2048, 2048), (2048, 2048), "fixed cost"),
        Shape("sq8192", 8192, 8192, 8192, (2048, 2048), (2048, 2048), "compute"),
        Shape("gram", 1024, 65536, 1024, (8192, 1024), (8192, 1024), "compute", gram=True),
        Shape("large-k", 1024, 131072, 1024, (1024, 8192), (8192, 1024), "compute"),
        # The issue's own sizes (X 1 GiB; A and B 2 GiB each): only when named.
        Shape("gram-full", 1024, 262144, 1024, (8192, 1024), (8192, 1024), "compute", gram=True),
        Shape("large-k-full", 1024, 524288, 1024, (1024, 8192), (8192, 1024), "compute"),
    )
}
#: What runs without ``--cases``: every case but the full-size ones (minutes, 5 GiB).
DEFAULT_CASES = ("sq512", "sq2048", "sq8192", "gram", "large-k")
#: Workers of each case's outofcore runs: one for the squares, two as in the issue.
WORKERS = {"sq512": 1, "sq2048": 1, "sq8192": 1, "gram": 2, "large-k": 2}
WORKERS |= {"gram-full": 2, "large-k-full": 2}
#: Each worker's budget (``--memory``; the API's ``memory=``): the issue's 512 MiB for its
#: Gram product, the default (1 GiB) otherwise.
MEMORY = {"gram-full": 512 * 2**20}
DEFAULT_MEMORY = 2**30
SYSTEMS = ("blas", "numpy-zarr", "dask", "command", "api")


# --------------------------------------------------------------------------- the systems

NUMPY_ZARR = """
import sys, numpy as np, zarr
a = zarr.open_array(sys.argv[1], mode="r")[...]
c = a.T @ a if sys.argv[4] == "gram" else a @ zarr.open_array(sys.argv[2], mode="r")[...]
out = zarr.create_array(sys.argv[3], shape=c.shape, chunks=(min(c.shape[0], 2048),
    min(c.shape[1], 2048)), dtype=c.dtype)
out[...] = c
"""

DASK = """
import sys, dask.array as da
a = da.from_zarr(sys.argv[1])
(a.T @ a if sys.argv[4] == "gram" else a @ da.from_zarr(sys.argv[2])).to_zarr(sys.argv[3])
"""

BLAS = """
import sys, time, json, numpy as np, zarr
a = zarr.open_array(sys.argv[1], mode="r")[...]
b = None if sys.argv[4] == "gram" else zarr.open_array(sys.argv[2], mode="r")[...]
t0 = time.perf_counter()
c = a.T @ a if b is None else a @ b
print("RESULT " + json.dumps({"blas_seconds": time.perf_counter() - t0}))
"""

API = """
import sys, time, json, tempfile, os
import outofcore
from distributed import Client, LocalCluster
from outofcore.frontends.generate import random_array
from outofcore.runtime.cluster import BLAS_THREAD_VARIABLES
from outofcore.runtime.worker_sizing import local_worker_limit

if __name__ == "__main__":
    a, b, out, kind, workers, budget = sys.argv[1:7]
    workers, budget = int(workers), int(budget)
    blas = str(max(1, (os.cpu_count() or 1) // workers))
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      memory_limit=local_worker_limit(budget), dashboard_address=":0",
                      env={name: blas for name in BLAS_THREAD_VARIABLES}) as cluster, \\
            Client(cluster) as client:
        warm = tempfile.mkdtemp()
        random_array(warm + "/w.zarr", (64, 64), (64, 64), seed=0)
        outofcore.matmul(warm + "/w.zarr", warm + "/w.zarr", warm + "/c.zarr", client=client,
                         memory=budget, progress=False)
        run = outofcore.gram if kind == "gram" else outofcore.matmul
        args = (a, out) if kind == "gram" else (a, b, out)
        t0 = time.perf_counter()
        c = run(*args, client=client, memory=budget, progress=False)
        seconds = time.perf_counter() - t0
        job = c.attrs["outofcore"]["summary"]["seconds"]
    print("RESULT " + json.dumps({"api_seconds": seconds, "job_seconds": job}))
"""


def run_fresh(system: str, case: Shape, a: Path, b: Path, out: Path) -> dict:
    """Run ``system`` once in a fresh process; its wall time and what it reported."""
    kind = "gram" if case.gram else "matmul"
    python = sys.executable
    if system == "command":
        tool = str(Path(python).parent / "outofcore")
        args = [str(a), "-o", str(out)] if case.gram else [str(a), str(b), "-o", str(out)]
        memory = f"{MEMORY.get(case.name, DEFAULT_MEMORY) // 2**20}MiB"
        cmd = [tool, kind, *args, "--workers", str(WORKERS[case.name]), "--memory", memory]
        cmd.append("--json")
    else:
        script = {"numpy-zarr": NUMPY_ZARR, "dask": DASK, "blas": BLAS, "api": API}[system]
        cmd = [python, "-c", script, str(a), str(b), str(out), kind, str(WORKERS[case.name])]
        cmd.append(str(MEMORY.get(case.name, DEFAULT_MEMORY)))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{system} on {case.name} failed ({proc.returncode}): {proc.stderr}")
    result: dict = {"wall_seconds": wall}
    if system == "command":
        summary = json.loads(proc.stdout)
        result["job_seconds"] = summary["seconds"]
        result["phases"] = summary.get("phases")
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result.update(json.loads(line[len("RESULT ") :]))
    return result


def check_output(out: Path, a: Path, b: Path, case: Shape) -> None:
    """Compare ``out`` with numpy's float64 product; raise when it is wrong."""
    import numpy as np  # noqa: PLC0415
    import zarr  # noqa: PLC0415

    x = zarr.open_array(str(a), mode="r")[...].astype(np.float64)
    y = x if case.gram else zarr.open_array(str(b), mode="r")[...].astype(np.float64)
    ref = x.T @ x if case.gram else x @ y
    got = zarr.open_array(str(out), mode="r")[...]
    scale = np.sqrt(case.k) * np.abs(ref).max()
    error = np.abs(got - ref).max()
    if not error <= 1e-5 * scale:
        raise RuntimeError(
            f"{case.name}: {out} is wrong (max error {error:.3g}, scale {scale:.3g})"
        )


# --------------------------------------------------------------------------- driver


def run_case(case: Shape, data_dir: Path, scratch: Path, repeats: int) -> dict:
    a, b = ensure_shape_inputs(data_dir, case)
    runs: dict[str, list[dict]] = {s: [] for s in SYSTEMS}
    for round_ in range(repeats):
        order = SYSTEMS if round_ % 2 == 0 else SYSTEMS[::-1]
        for system in order:
            out = scratch / f"{case.name}-{system}-{round_}.zarr"
            result = run_fresh(system, case, a, b, out)
            if system != "blas" and round_ == 0:
                check_output(out, a, b, case)
            subprocess.run(["rm", "-rf", str(out)], check=True)
            runs[system].append(result)
            print(f"  {case.name} {system}: {result['wall_seconds']:.2f} s", file=sys.stderr)
    return {
        "case": {**asdict(case), "workers": WORKERS[case.name]},
        "runs": runs,
        "medians": medians(runs),
    }


def medians(runs: dict[str, list[dict]]) -> dict[str, float]:
    def median(system: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[system])

    figures = {f"{s}_wall": median(s, "wall_seconds") for s in SYSTEMS}
    figures["blas"] = median("blas", "blas_seconds")
    figures["command_job"] = median("command", "job_seconds")
    figures["api_call"] = median("api", "api_seconds")
    figures["api_job"] = median("api", "job_seconds")
    return figures


def table(results: list[dict]) -> str:
    columns = ("case", "blas s", "numpy+zarr s", "dask.array s", "command s (job s)")
    columns += ("API s (job s)", "command / dask", "command / numpy+zarr", "command / blas")
    rows = []
    for entry in results:
        m = entry["medians"]
        rows.append(
            (
                entry["case"]["name"],
                f"{m['blas']:.2f}",
                f"{m['numpy-zarr_wall']:.2f}",
                f"{m['dask_wall']:.2f}",
                f"{m['command_wall']:.2f} ({m['command_job']:.2f})",
                f"{m['api_call']:.2f} ({m['api_job']:.2f})",
                f"{m['command_wall'] / m['dask_wall']:.2f}",
                f"{m['command_wall'] / m['numpy-zarr_wall']:.2f}",
                f"{m['command_wall'] / m['blas']:.2f}",
                f"{m['api_call'] - m['api_job']:.2f}",
            )
        )
    return markdown_table((*columns, "API - job s"), "l" * 10, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(DEFAULT_CASES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="small-jobs-") as scratch:
        for name in args.cases:
            results.append(run_case(CASES[name], args.data_dir, Path(scratch), args.repeats))
    print(table(results))
    args.results.mkdir(parents=True, exist_ok=True)
    path = args.results / f"small-jobs-{datetime.date.today()}.json"
    info = {"cpus": os.cpu_count(), "repeats": args.repeats, "results": results}
    path.write_text(json.dumps(info, indent=2))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

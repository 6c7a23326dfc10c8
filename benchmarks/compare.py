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
  ``scheduler.cluster.start_local_cluster`` starts, with ``--memory`` (total)
  split evenly over ``--workers``; its output is uncompressed (its default).

Variants: ``outofcore@2`` runs on 2 workers sharing the budget;
``outofcore+zstd`` writes a zstd output (zarr's default codec, which
dask.array and cubed write; outofcore's own default is uncompressed);
``outofcore+warm`` first runs ``B @ A`` once, untimed, on the same cluster
(a service's workers, which have run a job of the same size before; none of
its panels is one the timed job reads).

BLAS: some machines set ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` to work
around old OpenBLAS builds, which makes a current one run an older, slower
kernel.  By default (``--blas native``) every system's process runs without
both, so numpy and the others use the kernel OpenBLAS picks for this CPU; the
kernels each process ran are recorded (threadpoolctl) and printed.

Bytes read: ``read_chars`` of the process tree during the timed region
(compressed bytes as stored, page cache included), and that figure scaled by
the inputs' compression ratio to decoded bytes, against the plan's lower bound
``max(|A| + |B|, 2mnk·w/√(M/w) − 2M)`` for a per-worker budget ``M``
(``scheduler.io_model.io_lower_bound``).

Usage::

    python benchmarks/compare.py --quick
    python benchmarks/compare.py --size 16384 --chunk 2048 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE / "data"
DEFAULT_RESULTS = HERE / "results"
ALL_SYSTEMS = ("numpy", "dask", "dask-cluster", "cubed", "outofcore")
DEFAULT_SYSTEMS = ("numpy", "dask", "cubed", "outofcore")
GIB = 2**30


# --------------------------------------------------------------------------- sampling


class TreeSampler:
    """Samples the summed RSS and ``read_chars`` of this process and its descendants."""

    def __init__(self, interval: float = 0.05) -> None:
        import psutil  # noqa: PLC0415

        self._psutil = psutil
        self._root = psutil.Process()
        self.interval = interval
        self.peak_rss = 0
        self._reads: dict[int, int] = {}
        self._cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="tree-sampler")

    def _procs(self) -> list[Any]:
        try:
            return [self._root, *self._root.children(recursive=True)]
        except self._psutil.Error:
            return [self._root]

    def sample(self) -> None:
        total = 0
        for proc in self._procs():
            try:
                total += proc.memory_info().rss
                self._reads[proc.pid] = proc.io_counters().read_chars
                times = proc.cpu_times()
                self._cpu[proc.pid] = times.user + times.system
            except (self._psutil.Error, AttributeError):
                continue
        self.peak_rss = max(self.peak_rss, total)

    def read_chars(self) -> int:
        """Bytes read by the tree so far (processes that exited keep their last value)."""
        self.sample()
        return sum(self._reads.values())

    def cpu_seconds(self) -> float:
        """CPU seconds (user + system) used by the tree so far."""
        self.sample()
        return sum(self._cpu.values())

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> TreeSampler:
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


# --------------------------------------------------------------------------- inputs


def input_paths(data_dir: Path, size: int, chunk: int) -> tuple[Path, Path]:
    return (data_dir / f"a-{size}-{chunk}.zarr", data_dir / f"b-{size}-{chunk}.zarr")


def ensure_inputs(data_dir: Path, size: int, chunk: int) -> tuple[Path, Path]:
    """Make A and B (seeds 0 and 1) unless a finished copy is cached in ``data_dir``."""
    paths = input_paths(data_dir, size, chunk)
    for seed, path in enumerate(paths):
        ensure_array(path, (size, size), (chunk, chunk), seed)
    return paths


def ensure_array(path: Path, shape: tuple[int, int], chunks: tuple[int, int], seed: int) -> Path:
    """Make a seeded random float32 zarr array (zstd) at ``path`` unless a finished copy is there.

    A ``.complete`` marker, written last, says the cached copy is whole.
    """
    from outofcore.frontends.generate import random_array  # noqa: PLC0415

    done = path / ".complete"
    if not done.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        random_array(path, shape, chunks, seed=seed, overwrite=True)
        done.write_text("ok\n")
        print(f"made {path.name} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return path


def stored_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.name[0] != ".")


# --------------------------------------------------------------------------- one system


def _numpy(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    import numpy as np  # noqa: PLC0415
    import zarr  # noqa: PLC0415

    t0 = time.perf_counter()
    a = zarr.open_array(a_path, mode="r")[...]
    b = zarr.open_array(b_path, mode="r")[...]
    load = time.perf_counter() - t0
    return {"load_seconds": load, "_timed": lambda: np.matmul(a, b)}


def _dask(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    import dask  # noqa: PLC0415
    import dask.array as da  # noqa: PLC0415

    def timed() -> None:
        product = da.from_zarr(a_path) @ da.from_zarr(b_path)
        with dask.config.set(scheduler="threads"):
            product.to_zarr(out, overwrite=True)

    return {"_timed": timed}


def _dask_cluster(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    import dask.array as da  # noqa: PLC0415
    from distributed import Client, LocalCluster  # noqa: PLC0415

    t0 = time.perf_counter()
    cluster = LocalCluster(
        n_workers=os.cpu_count() or 1, threads_per_worker=1, dashboard_address=":0"
    )
    client = Client(cluster)
    client.run(_warm_dask)

    def timed() -> None:
        (da.from_zarr(a_path) @ da.from_zarr(b_path)).to_zarr(out, overwrite=True)

    return {
        "startup_seconds": time.perf_counter() - t0,
        "_timed": timed,
        "_close": lambda: (client.close(), cluster.close()),
    }


def _cubed(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    import cubed  # noqa: PLC0415
    import cubed.array_api as xp  # noqa: PLC0415

    work = tempfile.mkdtemp(prefix="cubed-", dir=cfg["scratch"])
    spec = cubed.Spec(work_dir=work, allowed_mem=cfg["memory"])

    def timed() -> None:
        a = cubed.from_zarr(a_path, spec=spec)
        b = cubed.from_zarr(b_path, spec=spec)
        cubed.to_zarr(xp.matmul(a, b), out, executor=_cubed_executor())

    return {"_timed": timed, "_close": lambda: shutil.rmtree(work, ignore_errors=True)}


def _cubed_executor() -> Any:
    try:
        from cubed.runtime.executors.local import ThreadsExecutor  # noqa: PLC0415

        return ThreadsExecutor(max_workers=os.cpu_count() or 1)
    except ImportError:  # older cubed: its default executor
        return None


def _outofcore(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    from outofcore.api import run_job  # noqa: PLC0415
    from scheduler.cluster import start_local_cluster  # noqa: PLC0415

    per_worker = cfg["memory"] // cfg["workers"]
    t0 = time.perf_counter()
    cluster = start_local_cluster(per_worker, cfg["workers"])
    from distributed import Client  # noqa: PLC0415

    client = Client(cluster)
    client.run(_warm_outofcore)  # worker imports count as start-up, as for dask-cluster
    extra: dict[str, Any] = {}
    # outofcore's default output is uncompressed; "+zstd" asks for zarr's default codec,
    # the one dask.array and cubed write with.
    codec = "zstd" if cfg.get("variant") == "zstd" else "none"

    def job(output: Any, first: str = a_path, second: str = b_path) -> Any:
        return run_job(
            first,
            second,
            output,
            memory=per_worker,
            backend="cpu",
            client=client,
            overwrite=True,
            progress=False,
            output_codec=codec,
        )

    if cfg.get("variant") == "warm":  # a cluster that has run a job before: a service
        # B @ A: the same shapes and chunks (square inputs), so the same buffer sizes,
        # but no panel of the timed job is left in a worker's memory.
        job(out + "-warm-up", b_path, a_path)
        shutil.rmtree(out + "-warm-up")

    def timed() -> None:
        result = job(out)
        s = result.summary
        extra["outofcore"] = {
            key: s[key]
            for key in (
                "seconds",
                "tile",
                "tk",
                "tiles",
                "workers",
                "bytes_read",
                "bytes_read_predicted",
                "io_lower_bound",
                "read_over_lower_bound",
                "task_bytes_projected",
                "task_budget_bytes",
                "peak_worker_bytes",
                "read_wait_seconds",
                "compute_seconds",
                "write_seconds",
            )
            if key in s
        }

    return {
        "startup_seconds": time.perf_counter() - t0,
        "_timed": timed,
        "_close": lambda: (client.close(), cluster.close()),
        "_extra": extra,
    }


def _warm_outofcore() -> None:
    from outofcore.compute.worker_context import worker_context  # noqa: PLC0415

    worker_context().engine("cpu")


def _warm_dask() -> None:
    import dask.array  # noqa: F401, PLC0415
    import zarr  # noqa: F401, PLC0415


RUNNERS = {
    "numpy": _numpy,
    "dask": _dask,
    "dask-cluster": _dask_cluster,
    "cubed": _cubed,
    "outofcore": _outofcore,
}


def blas_kernels() -> list[str]:
    """The BLAS libraries loaded in this process and the kernel each runs (threadpoolctl)."""
    from threadpoolctl import threadpool_info  # noqa: PLC0415

    return sorted(
        {
            f"{lib.get('internal_api')} {lib.get('version')} {lib.get('architecture', '?')}"
            for lib in threadpool_info()
            if lib.get("user_api") == "blas"
        }
    )


#: Set on some machines to work around old OpenBLAS builds; they pick a slower
#: kernel than the CPU has.  ``--blas native`` unsets both, together, for every
#: system's process, so numpy and the others all run the kernel OpenBLAS picks.
BLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def run_one(
    system: str, a_path: str, b_path: str, cfg: dict, runners: dict[str, Any] | None = None
) -> dict:
    """Run one system once in this process and return its measurements.

    ``runners`` maps a system's base name to its set-up function (default
    :data:`RUNNERS`); the output is removed afterwards unless ``cfg["keep_output"]``.
    """
    import dask.array  # noqa: F401, PLC0415 (imports before the baselines: their reads do not count)
    import distributed  # noqa: F401, PLC0415
    import zarr  # noqa: F401, PLC0415

    sampler = TreeSampler().start()
    out = os.path.join(cfg["scratch"], f"c-{system}.zarr")
    shutil.rmtree(out, ignore_errors=True)
    reads_before = sampler.read_chars()
    # "outofcore@2": on 2 workers; "outofcore+zstd": a zstd output;
    # "outofcore+warm": B @ A run once before, untimed, on the same cluster.
    base, _, workers = system.partition("@")
    base, _, variant = base.partition("+")
    cfg = {**cfg, "variant": variant}
    if workers:
        cfg = {**cfg, "workers": int(workers)}
    setup = (runners or RUNNERS)[base](a_path, b_path, out, cfg)
    if system != "numpy":  # numpy's reads are its load; the others read in the timed region
        reads_before = sampler.read_chars()
    sampler.peak_rss = 0  # the peak of the timed region only
    cpu_before = sampler.cpu_seconds()
    t0 = time.perf_counter()
    setup["_timed"]()
    seconds = time.perf_counter() - t0
    reads = sampler.read_chars() - reads_before
    cpu = sampler.cpu_seconds() - cpu_before
    peak = sampler.peak_rss
    if "_close" in setup:
        setup["_close"]()
    sampler.stop()
    if not cfg.get("keep_output"):
        shutil.rmtree(out, ignore_errors=True)
    result = {k: v for k, v in setup.items() if not k.startswith("_")}
    result.update(setup.get("_extra", {}))
    result["blas"] = blas_kernels()
    result.update(
        system=system, seconds=seconds, cpu_seconds=cpu, peak_rss_bytes=peak, read_chars=reads
    )
    return result


# --------------------------------------------------------------------------- driver


def measure(
    system: str,
    paths: tuple[Path, Path],
    cfg: dict,
    timeout: float,
    script: Path | None = None,
) -> dict:
    """Run ``system`` once in a fresh process (``script --child``, default this file).

    Returns the child's measurements, or ``{"system", "error"}`` when it failed.
    """
    cmd = [
        sys.executable,
        str(script or Path(__file__).resolve()),
        "--child",
        system,
        str(paths[0]),
        str(paths[1]),
        json.dumps(cfg),
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if cfg.get("blas") == "native":
        for name in BLAS_OVERRIDES:
            env.pop(name, None)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout)[-2000:]
        return {"system": system, "error": f"exit {proc.returncode}: {tail}"}
    return json.loads(lines[-1][len("RESULT ") :])


def summarise(runs: dict[str, list[dict]], info: dict) -> dict:
    systems: dict[str, Any] = {}
    for system, items in runs.items():
        ok = [r for r in items if "error" not in r]
        if not ok:
            systems[system] = {"error": items[-1].get("error", "no run")}
            continue
        # Stored bytes read, scaled up to the decoded bytes they hold (ratio = decoded / stored).
        decoded = statistics.median(r["read_chars"] for r in ok) * info["compression_ratio"]
        systems[system] = {
            "seconds_median": statistics.median(r["seconds"] for r in ok),
            "seconds_all": [r["seconds"] for r in ok],
            "cpu_seconds_median": statistics.median(r["cpu_seconds"] for r in ok),
            "peak_rss_bytes": max(r["peak_rss_bytes"] for r in ok),
            "read_chars_median": statistics.median(r["read_chars"] for r in ok),
            "bytes_read_decoded_equiv": decoded,
            "read_over_lower_bound": decoded / info["lower_bound_bytes"],
            "blas": sorted({k for r in ok for k in r.get("blas", [])}),
            "runs": ok,
        }
    base = systems.get("numpy", {}).get("seconds_median")
    for entry in systems.values():
        if base and "seconds_median" in entry:
            entry["ratio_to_numpy"] = entry["seconds_median"] / base
    # Ratios within each round too (same noise for both sides of the ratio).
    if "numpy" in runs:
        for system, items in runs.items():
            if system == "numpy" or "seconds_median" not in systems[system]:
                continue
            pairs = [
                s["seconds"] / n["seconds"]
                for s, n in zip(items, runs["numpy"], strict=False)
                if "error" not in s and "error" not in n
            ]
            if pairs:
                systems[system]["ratio_to_numpy_per_round_median"] = statistics.median(pairs)
    return systems


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
        f"lower bound {info['lower_bound_bytes'] / GIB:.2f} GiB; BLAS {kernels}\n\n"
        "| system | median s | × numpy | peak RSS (all processes) | read (decoded eq.) "
        "| read / lower bound |\n|---|---:|---:|---:|---:|---:|"
    )
    rows = [head]
    for name, s in systems.items():
        if "error" in s:
            rows.append(f"| {name} | failed | | | | |")
            continue
        ratio = s.get("ratio_to_numpy", float("nan"))
        rows.append(
            f"| {name} | {s['seconds_median']:.1f} | {ratio:.2f} "
            f"| {s['peak_rss_bytes'] / GIB:.2f} GiB "
            f"| {s['bytes_read_decoded_equiv'] / GIB:.2f} GiB "
            f"| {s['read_over_lower_bound']:.2f} |"
        )
    return "\n".join(rows)


def plot(result: dict, path: Path) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

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


def main(argv: list[str] | None = None) -> int:
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
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument("--timeout", type=float, default=900, help="seconds per measurement")
    parser.add_argument(
        "--blas",
        choices=("native", "inherit"),
        default="native",
        help="native (default): unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE for every "
        "system, so OpenBLAS picks its kernel for this CPU; inherit: keep this environment's",
    )
    args = parser.parse_args(argv)

    from outofcore.config import parse_size  # noqa: PLC0415
    from scheduler.io_model import io_lower_bound  # noqa: PLC0415
    from scheduler.problem import Problem  # noqa: PLC0415

    if args.quick:
        args.size, args.chunk, args.repeats = 2048, 512, 1
    chunk = args.chunk or max(1, args.size // 8)
    systems = [s for s in args.systems.split(",") if s]
    unknown = {s.partition("@")[0].partition("+")[0] for s in systems} - set(ALL_SYSTEMS)
    if unknown:
        parser.error(f"unknown system(s) {sorted(unknown)}; choose from {ALL_SYSTEMS}")
    if "cubed" in systems:
        try:
            import cubed  # noqa: F401, PLC0415
        except ImportError:
            print("cubed is not installed: skipped (pip install '.[bench]')", file=sys.stderr)
            systems.remove("cubed")
    memory = parse_size(args.memory)
    paths = ensure_inputs(args.data_dir, args.size, chunk)
    logical = 2 * args.size * args.size * 4
    square = Problem(args.size, args.size, args.size, 4, (chunk, chunk), (chunk, chunk))
    ratio = logical / sum(stored_bytes(p) for p in paths)
    info = {
        "size": args.size,
        "chunk": chunk,
        "repeats": args.repeats,
        "memory": memory,
        "workers": args.workers,
        "cpus": os.cpu_count(),
        "compression_ratio": ratio,
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
    args.out_dir.mkdir(parents=True, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="compare-", dir=args.data_dir)
    cfg = {"memory": memory, "workers": args.workers, "scratch": scratch, "blas": args.blas}
    runs: dict[str, list[dict]] = {s: [] for s in systems}
    stem = args.out_dir / f"compare-{args.size}"
    try:
        for round_ in range(args.repeats):
            order = systems if round_ % 2 == 0 else systems[::-1]
            for system in order:
                r = measure(system, paths, cfg, args.timeout)
                runs[system].append(r)
                shown = f"{r['seconds']:.2f} s" if "seconds" in r else r["error"][-300:]
                print(f"round {round_ + 1} {system:>12}: {shown}", file=sys.stderr)
            info["rounds_done"] = round_ + 1  # a partial file survives an interrupted run
            partial = {"info": info, "systems": summarise(runs, info)}
            Path(f"{stem}.json").write_text(json.dumps(partial, indent=2))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result = {"info": info, "systems": summarise(runs, info)}
    Path(f"{stem}.json").write_text(json.dumps(result, indent=2))
    plot(result, Path(f"{stem}.png"))
    print(table(result))
    print(f"\nwrote {stem}.json and {stem}.png", file=sys.stderr)
    return 0 if all("error" not in s for s in result["systems"].values()) else 1


def child(argv: list[str]) -> int:
    system, a_path, b_path, cfg = argv[0], argv[1], argv[2], json.loads(argv[3])
    result = run_one(system, a_path, b_path, cfg)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.exit(child(sys.argv[2:]))
    sys.exit(main())

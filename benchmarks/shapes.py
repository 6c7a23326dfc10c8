"""The shape zoo: numpy in memory, dask.array and outofcore on five shapes of product.

Issue 11, item 5.  For each shape, one run makes (once, cached in
``benchmarks/data/``) seeded random float32 zarr inputs (zstd, zarr's default
codec) and times, over ``--repeats`` rounds with the order of systems reversed
every other round, each system in a fresh Python process
(:func:`compare.run_one`, which samples the process tree's RSS, CPU time and
``read_chars``):

* ``numpy``: ``a @ b`` (``x.T @ x`` for the Gram shape: numpy's ``syrk``) on
  arrays already in memory; loading and storing are not timed;
* ``dask``: ``(da.from_zarr(a) @ da.from_zarr(b)).to_zarr(c)`` (``x.T @ x``),
  threaded scheduler, zarr to zarr;
* ``outofcore``: ``outofcore.matmul`` (``outofcore.gram`` for the Gram
  shape) on the
  LocalCluster ``scheduler.cluster.start_local_cluster`` starts with
  ``--workers`` single-thread workers (start-up not timed), ``--memory`` split
  evenly over them, output codec ``--output-codec`` (outofcore's default:
  uncompressed); Dask's task stream gives each worker's tasks and busy seconds;
* the floors of the I/O-bound shapes, with the same cores (one thread per
  core): ``read-floor`` reads and decodes every chunk of A and B and nothing
  else, with outofcore's chunk-file reader (``read-floor-zarr``: with zarr's
  own ``array[rows]``; the floor is the faster of the two); ``write-floor``
  encodes and writes an output of C's shape, dtype, chunks and codec.

The shapes (``--scale s`` divides every dimension of 2048 or more, and the
chunk edges along it, by ``s``):

========  ==============================  ==========  ====================
name      product                         chunks      bound by
========  ==============================  ==========  ====================
square    16384² @ 16384²                 2048²       compute
large-k   2048x262144 @ 262144x2048       2048²       compute
gram      X.T @ X, X 524288x512           8192x512    compute (syrk)
skinny    262144x4096 @ 4096x64           2048²       reading A
flat      32768x256 @ 256x32768           8192x256    writing C
========  ==============================  ==========  ====================

Every dask.array and outofcore output is compared with numpy's, element by
element, within a float32 tolerance that grows with k (:func:`tolerance`);
a wrong result fails the run.  Prints, per shape, time / numpy, dask.array /
outofcore, bytes read / the lower bound (``scheduler.io_model.io_lower_bound``;
outofcore's exact decoded bytes, the others' ``read_chars`` scaled to decoded
bytes), time / floor for the I/O-bound shapes, each worker's tasks and busy
fraction, and the plan, with the issue's targets beside each figure.  Writes
``benchmarks/results/shapes-<date>.json`` and a grouped bar chart to ``--png``.

Usage::

    python benchmarks/shapes.py --scale 16 --repeats 1 --png /tmp/zoo.png   # minutes
    python benchmarks/shapes.py --repeats 3 --png docs/performance-shapes.png
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # compare.py's helpers, as when run from benchmarks/

from compare import (  # noqa: E402
    DEFAULT_DATA,
    DEFAULT_RESULTS,
    GIB,
    _warm_outofcore,
    ensure_array,
    measure,
    run_one,
    stored_bytes,
    summarise,
)

SYSTEMS = ("numpy", "dask", "outofcore")
FLOORS = {"read": ("read-floor", "read-floor-zarr"), "write": ("write-floor",)}
#: Dimensions (and chunk edges along them) at least this large are divided by ``--scale``.
BIG = 2048
#: Issue 11's targets.
COMPUTE_TARGET = 1.2  # time / numpy, compute-bound shapes
FLOOR_TARGET = 1.25  # time / floor, I/O-bound shapes
DASK_TARGET = 1.3  # dask.array time / outofcore time, every shape
READ_TARGET = 1.5  # bytes read / lower bound, every shape
#: A worker counts as busy when its tasks ran for at least this fraction of the job.
BUSY_FRACTION = 0.8
#: Allowed difference in units of float32 rounding (see :func:`tolerance`).
TOLERANCE_FACTOR = 8


@dataclass(frozen=True)
class Shape:
    """One product of the zoo: ``C (m×n) = A (m×k) @ B (k×n)``, or ``X.T @ X`` (``gram``).

    For a Gram product the one stored input ``X`` is ``k×m`` with ``a_chunks``,
    and ``b_chunks`` is unused.
    """

    name: str
    m: int
    k: int
    n: int
    a_chunks: tuple[int, int]
    b_chunks: tuple[int, int]
    #: "compute", "read" (reading the inputs) or "write" (writing C).
    bound: str
    gram: bool = False

    @property
    def a_shape(self) -> tuple[int, int]:
        """Shape of the stored A (X for a Gram product)."""
        return (self.k, self.m) if self.gram else (self.m, self.k)

    @property
    def b_shape(self) -> tuple[int, int]:
        """Shape of the stored B (X again for a Gram product)."""
        return (self.k, self.n) if not self.gram else (self.k, self.m)

    def scaled(self, scale: float) -> Shape:
        """This shape with every dimension >= :data:`BIG` (and chunks along it) divided."""

        def dim(d: int) -> int:
            return max(1, int(d // scale)) if d >= BIG and scale != 1 else d

        def chunks(shape: tuple[int, int], chunk: tuple[int, int]) -> tuple[int, int]:
            return tuple(
                min(dim(d), max(1, int(c // scale)) if d >= BIG and scale != 1 else c)
                for d, c in zip(shape, chunk, strict=True)
            )

        return Shape(
            self.name,
            dim(self.m),
            dim(self.k),
            dim(self.n),
            chunks(self.a_shape, self.a_chunks),
            chunks(self.b_shape, self.b_chunks),
            self.bound,
            self.gram,
        )


SHAPES = {
    s.name: s
    for s in (
        Shape("square", 16384, 16384, 16384, (2048, 2048), (2048, 2048), "compute"),
        Shape("large-k", 2048, 262144, 2048, (2048, 2048), (2048, 2048), "compute"),
        Shape("gram", 512, 524288, 512, (8192, 512), (8192, 512), "compute", gram=True),
        Shape("skinny", 262144, 4096, 64, (2048, 2048), (2048, 64), "read"),
        Shape("flat", 32768, 256, 32768, (8192, 256), (256, 8192), "write"),
    )
}


# --------------------------------------------------------------------------- inputs


def ensure_shape_inputs(data_dir: Path, shape: Shape) -> tuple[Path, Path]:
    """A and B of ``shape`` (X twice for a Gram product), made once and cached."""

    def name(tag: str, dims: tuple[int, int], chunks: tuple[int, int]) -> Path:
        return data_dir / f"zoo-{tag}-{dims[0]}x{dims[1]}-{chunks[0]}x{chunks[1]}.zarr"

    a = ensure_array(name("a", shape.a_shape, shape.a_chunks), shape.a_shape, shape.a_chunks, 0)
    if shape.gram:
        return a, a
    b = ensure_array(name("b", shape.b_shape, shape.b_chunks), shape.b_shape, shape.b_chunks, 1)
    return a, b


def outofcore_plan(a_path: str, b_path: str, shape: Shape, per_worker: int, workers: int) -> Any:
    """The plan ``outofcore.matmul`` makes for ``shape`` on ``workers`` workers (the job's
    own planning function, :func:`outofcore.jobs.planning.plan_job`, for single-threaded
    workers as the LocalCluster's)."""
    from outofcore.jobs.inputs import open_product  # noqa: PLC0415
    from outofcore.jobs.planning import plan_job  # noqa: PLC0415
    from outofcore.jobs.spec import JobSpec  # noqa: PLC0415
    from scheduler.executors import WorkerShape  # noqa: PLC0415

    spec = JobSpec(transpose_a=shape.gram, memory=per_worker, backend="cpu")
    shape_of_workers = WorkerShape(workers, threads_per_worker=1, blas_threads=1)
    return plan_job(open_product(a_path, b_path, spec), spec, shape_of_workers).plan


# --------------------------------------------------------------------------- systems


def _shape(cfg: dict) -> Shape:
    spec = dict(cfg["shape"])
    spec["a_chunks"], spec["b_chunks"] = tuple(spec["a_chunks"]), tuple(spec["b_chunks"])
    return Shape(**spec)


def _numpy(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    import numpy as np  # noqa: PLC0415
    import zarr  # noqa: PLC0415

    shape = _shape(cfg)
    t0 = time.perf_counter()
    a = zarr.open_array(a_path, mode="r")[...]
    b = a if shape.gram else zarr.open_array(b_path, mode="r")[...]
    load = time.perf_counter() - t0
    held: dict[str, np.ndarray] = {}

    def timed() -> None:
        held["c"] = a.T @ a if shape.gram else np.matmul(a, b)

    def store() -> None:  # untimed: the reference the other systems are checked against
        c = held.pop("c")
        chunks = (min(c.shape[0], BIG), min(c.shape[1], BIG))
        ref = zarr.create_array(out, shape=c.shape, chunks=chunks, dtype=c.dtype, compressors=None)
        ref[...] = c

    return {"load_seconds": load, "_timed": timed, "_close": store}


def _dask(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    import dask  # noqa: PLC0415
    import dask.array as da  # noqa: PLC0415

    shape = _shape(cfg)

    def timed() -> None:
        a = da.from_zarr(a_path)
        product = a.T @ a if shape.gram else a @ da.from_zarr(b_path)
        with dask.config.set(scheduler="threads"):
            product.to_zarr(out, overwrite=True)

    return {"_timed": timed}


def _outofcore(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    import zarr  # noqa: PLC0415
    from distributed import Client, get_task_stream  # noqa: PLC0415

    import outofcore  # noqa: PLC0415
    from scheduler.cluster import start_local_cluster  # noqa: PLC0415

    shape = _shape(cfg)
    per_worker = cfg["memory"] // cfg["workers"]
    t0 = time.perf_counter()
    cluster = start_local_cluster(per_worker, cfg["workers"])
    client = Client(cluster)
    client.run(_warm_outofcore)  # worker imports count as start-up
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    gram = outofcore.gram if shape.gram else None
    options = {
        "memory": per_worker,
        "backend": "cpu",
        "client": client,
        "overwrite": True,
        "progress": False,
        "output_codec": cfg["output_codec"],
    }
    extra: dict[str, Any] = {}

    def timed() -> None:
        started = time.perf_counter()
        with get_task_stream(client) as stream:
            if gram is not None:
                gram(a_path, out, **options)
            else:
                outofcore.matmul(a_path, b_path, out, transpose_a=shape.gram, **options)
        seconds = time.perf_counter() - started
        record = zarr.open_array(out, mode="r").attrs["outofcore"]
        extra["outofcore"] = {
            "api": "outofcore.gram" if gram is not None else "outofcore.matmul",
            "summary": record.get("summary", {}),
            "plan": record.get("plan", {}),
            "workers": worker_load(stream.data, workers, seconds),
        }

    return {
        "startup_seconds": time.perf_counter() - t0,
        "_timed": timed,
        "_close": lambda: (client.close(), cluster.close()),
        "_extra": extra,
    }


def worker_load(stream: list[dict], workers: list[str], seconds: float) -> dict:
    """Tasks and busy seconds of each worker from Dask's task stream, over ``seconds``.

    Parameters
    ----------
    stream
        ``distributed.get_task_stream(...).data``: one record per task run.
    workers
        Every worker's address, so that an idle worker shows up with no tasks.
    seconds
        The job's wall time, the denominator of the busy fractions.

    Returns
    -------
    dict
        ``tasks`` (all workers), and per worker address its ``tasks``,
        ``busy_seconds`` (time spent computing) and ``busy_fraction``.
    """
    per: dict[str, dict[str, float]] = {w: {"tasks": 0, "busy_seconds": 0.0} for w in workers}
    for record in stream:
        entry = per.setdefault(record.get("worker", "?"), {"tasks": 0, "busy_seconds": 0.0})
        entry["tasks"] += 1
        entry["busy_seconds"] += sum(
            s["stop"] - s["start"] for s in record.get("startstops", ()) if s["action"] == "compute"
        )
    for entry in per.values():
        entry["busy_fraction"] = entry["busy_seconds"] / seconds if seconds > 0 else 0.0
    return {"tasks": len(stream), "per_worker": per}


def _read_floor(a_path: str, b_path: str, out: str, cfg: dict, *, direct: bool = True) -> dict:
    """Read and decode every chunk of A and B, one thread per core, nothing else."""
    import numpy as np  # noqa: PLC0415
    import zarr  # noqa: PLC0415

    from outofcore.operands.reading import read_panel  # noqa: PLC0415

    shape = _shape(cfg)
    inputs = [zarr.open_array(a_path, mode="r")]
    if not shape.gram:
        inputs.append(zarr.open_array(b_path, mode="r"))
    blocks = [
        (x, slice(r0, min(r0 + x.chunks[0], x.shape[0])))
        for x in inputs
        for r0 in range(0, x.shape[0], x.chunks[0])
    ]
    cores = cfg["cores"]
    largest = max(x.chunks[0] * x.shape[1] for x in inputs)
    buffers = [np.empty(largest, np.float32) for _ in range(cores)]  # touched untimed
    for buffer in buffers:
        buffer.fill(0)

    def read(index: int) -> None:
        for x, rows in blocks[index::cores]:
            if direct:
                size = (rows.stop - rows.start) * x.shape[1]
                panel = buffers[index][:size].reshape(rows.stop - rows.start, x.shape[1])
                read_panel(x, (rows, slice(0, x.shape[1])), panel)
            else:
                x[rows, :]

    def timed() -> None:
        with ThreadPoolExecutor(cores) as pool:
            list(pool.map(read, range(cores)))

    return {"_timed": timed}


def _read_floor_zarr(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    return _read_floor(a_path, b_path, out, cfg, direct=False)


def _write_floor(a_path: str, b_path: str, out: str, cfg: dict) -> dict:
    """Encode and write an output of C's shape, dtype, chunks and codec, one thread per core."""
    import numpy as np  # noqa: PLC0415

    from outofcore.operands.arrays import create_output  # noqa: PLC0415
    from outofcore.storage.locations import locate  # noqa: PLC0415
    from outofcore.storage.writing import write_region  # noqa: PLC0415

    shape = _shape(cfg)
    per_worker = cfg["memory"] // cfg["workers"]
    chunks = outofcore_plan(a_path, b_path, shape, per_worker, cfg["workers"]).out_chunks
    c = create_output(
        locate(out), (shape.m, shape.n), np.dtype(np.float32), chunks, True, {}, cfg["output_codec"]
    )
    rows = chunks[0]
    # Values like a product's (random floats, so zstd sees what it would), made untimed.
    values = np.random.default_rng(3).standard_normal((min(rows, shape.m), shape.n), np.float32)
    starts = list(range(0, shape.m, rows))
    cores = cfg["cores"]

    def write(index: int) -> None:
        for r0 in starts[index::cores]:
            write_region(c, (r0, 0), values[: min(rows, shape.m - r0)])

    def timed() -> None:
        with ThreadPoolExecutor(cores) as pool:
            list(pool.map(write, range(cores)))

    return {"_timed": timed}


RUNNERS = {
    "numpy": _numpy,
    "dask": _dask,
    "outofcore": _outofcore,
    "read-floor": _read_floor,
    "read-floor-zarr": _read_floor_zarr,
    "write-floor": _write_floor,
}


# --------------------------------------------------------------------------- checking


def tolerance(k: int) -> tuple[float, float]:
    """``(rtol, atol)`` for two float32 products of depth ``k`` of standard normal inputs.

    Entries of C are about ``√k`` (off the diagonal of a Gram product) or ``k``
    (on it); summing ``k`` float32 products loses about ``eps·√k`` relative to
    the sum of the terms' magnitudes, so ``rtol = F·eps·√k``, ``atol = F·eps·k``
    with ``F`` = :data:`TOLERANCE_FACTOR`.  A lost or repeated k-panel of depth
    ``d`` moves entries by about ``√d``, far outside this.
    """
    import numpy as np  # noqa: PLC0415

    eps = float(np.finfo(np.float32).eps)
    return TOLERANCE_FACTOR * eps * math.sqrt(k), TOLERANCE_FACTOR * eps * k


def compare_outputs(path: str, reference: str, k: int) -> dict:
    """Compare a stored product with numpy's, row block by row block.

    Returns
    -------
    dict
        ``ok``, ``error_ratio`` (the largest ``|c − ref| / (atol + rtol·|ref|)``:
        at most 1 passes; NaN or a missing output fails), ``max_abs_error``,
        ``rtol`` and ``atol``.
    """
    import numpy as np  # noqa: PLC0415
    import zarr  # noqa: PLC0415

    rtol, atol = tolerance(k)
    report: dict[str, Any] = {"rtol": rtol, "atol": atol}
    try:
        c, ref = zarr.open_array(path, mode="r"), zarr.open_array(reference, mode="r")
    except Exception as error:  # noqa: BLE001 (no output is a failed check, not a crash)
        return {**report, "ok": False, "error": f"cannot open: {error}"}
    if c.shape != ref.shape:
        return {**report, "ok": False, "error": f"shape {c.shape}, numpy's {ref.shape}"}
    worst, largest = 0.0, 0.0
    step = max(1, (64 * 2**20) // (4 * max(1, ref.shape[1])))
    for r0 in range(0, ref.shape[0], step):
        got = np.asarray(c[r0 : r0 + step], np.float64)
        want = np.asarray(ref[r0 : r0 + step], np.float64)
        diff = np.abs(got - want)
        worst = max(worst, float(np.max(diff / (atol + rtol * np.abs(want)), initial=0.0)))
        largest = max(largest, float(np.max(diff, initial=0.0)))
        if not np.all(np.isfinite(got)):
            worst = math.inf
    ok = worst <= 1.0
    return {**report, "ok": ok, "error_ratio": worst, "max_abs_error": largest}


# --------------------------------------------------------------------------- the run


def run_shape(shape: Shape, args: argparse.Namespace, systems: list[str]) -> dict:
    """Every system on ``shape`` over ``args.repeats`` rounds; its JSON entry."""
    from scheduler.io_model import io_lower_bound  # noqa: PLC0415

    paths = ensure_shape_inputs(args.data_dir, shape)
    per_worker = args.memory_bytes // args.workers
    plan = outofcore_plan(str(paths[0]), str(paths[1]), shape, per_worker, args.workers)
    stored = [paths[0]] if shape.gram else list(paths)
    logical = 4 * math.prod(shape.a_shape) + (0 if shape.gram else 4 * math.prod(shape.b_shape))
    info = {
        "compression_ratio": logical / sum(stored_bytes(p) for p in stored),
        "lower_bound_bytes": io_lower_bound(plan.problem, per_worker),
    }
    floors = list(FLOORS.get(shape.bound, ())) if args.floors else []
    everyone = systems + floors
    scratch = tempfile.mkdtemp(prefix=f"shapes-{shape.name}-", dir=args.data_dir)
    cfg = {
        "memory": args.memory_bytes,
        "workers": args.workers,
        "cores": args.cores,
        "scratch": scratch,
        "blas": args.blas,
        "output_codec": args.output_codec,
        "shape": asdict(shape),
        "keep_output": True,
    }
    runs: dict[str, list[dict]] = {s: [] for s in everyone}
    checks: dict[str, list[dict]] = {s: [] for s in systems if s != "numpy"}
    try:
        for round_ in range(args.repeats):
            order = everyone if round_ % 2 == 0 else everyone[::-1]
            for system in order:
                r = measure(system, paths, cfg, args.timeout, script=Path(__file__))
                runs[system].append(r)
                shown = f"{r['seconds']:.2f} s" if "seconds" in r else r["error"][-300:]
                print(f"{shape.name} round {round_ + 1} {system:>15}: {shown}", file=sys.stderr)
            reference = os.path.join(scratch, "c-numpy.zarr")
            for system in checks:
                if "numpy" in runs and os.path.exists(reference):
                    got = os.path.join(scratch, f"c-{system}.zarr")
                    checks[system].append(compare_outputs(got, reference, shape.k))
                    if not checks[system][-1]["ok"]:
                        print(
                            f"{shape.name}: {system} WRONG: {checks[system][-1]}", file=sys.stderr
                        )
            for system in everyone:
                shutil.rmtree(os.path.join(scratch, f"c-{system}.zarr"), ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "shape": asdict(shape),
        "flops": 2 * shape.m * shape.n * shape.k,
        "bytes_c": 4 * shape.m * shape.n,
        "inputs_bytes": logical,
        **info,
        "plan": plan.summary(),
        "systems": summarise(runs, info),
        "verified": {
            s: {"ok": all(c["ok"] for c in cs) and bool(cs), "checks": cs}
            for s, cs in checks.items()
        },
    }


# --------------------------------------------------------------------------- figures


#: Words in the names of ``Plan.summary()`` fields that split-k and symmetric
#: products (being added beside this script) may bring; such fields are shown.
NEW_PLAN_WORDS = ("split", "reduc", "partial", "symm", "mirror", "gram", "diagonal")


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def figures(entry: dict) -> dict:
    """The derived figures of one shape and the issue's targets beside them."""
    systems = entry["systems"]

    def seconds(name: str) -> float | None:
        return systems.get(name, {}).get("seconds_median")

    numpy_s, dask_s, ours_s = seconds("numpy"), seconds("dask"), seconds("outofcore")
    runs = [
        r["outofcore"] for r in systems.get("outofcore", {}).get("runs", []) if "outofcore" in r
    ]
    lower = entry["lower_bound_bytes"]
    out: dict[str, Any] = {
        "outofcore_over_numpy": ours_s / numpy_s if ours_s and numpy_s else None,
        "dask_over_outofcore": dask_s / ours_s if dask_s and ours_s else None,
        "read_over_lower_bound": {
            name: s["read_over_lower_bound"]
            for name, s in systems.items()
            if "read_over_lower_bound" in s and name in SYSTEMS
        },
    }
    if runs:  # outofcore's own count of the bytes it decoded is exact
        out["read_over_lower_bound"]["outofcore"] = (
            _median([r["summary"].get("bytes_read", 0) for r in runs]) / lower
        )
        load = [r["workers"] for r in runs]
        out["tasks"] = _median([w["tasks"] for w in load])
        # Every round starts a new cluster (new addresses): match workers by rank, the
        # busiest first, and take the median of each rank over the rounds.
        ranked = [
            sorted(w["per_worker"].values(), key=lambda x: -x.get("busy_fraction", 0.0))
            for w in load
        ]
        out["workers"] = {
            f"worker {rank + 1}": {
                "tasks": _median([r[rank].get("tasks", 0) if rank < len(r) else 0 for r in ranked]),
                "busy_fraction": _median(
                    [r[rank].get("busy_fraction", 0.0) if rank < len(r) else 0.0 for r in ranked]
                ),
            }
            for rank in range(max(len(r) for r in ranked))
        }
        out["plan"] = runs[-1]["plan"] or entry["plan"]
    else:
        out["plan"] = entry["plan"]
    floor_names = [f for f in FLOORS.get(entry["shape"]["bound"], ()) if seconds(f)]
    if floor_names:
        fastest = min(floor_names, key=seconds)
        out["floor"] = {"system": fastest, "seconds": seconds(fastest)}
        if ours_s:
            out["outofcore_over_floor"] = ours_s / seconds(fastest)
    out["targets"] = targets(entry, out)
    return out


def targets(entry: dict, fig: dict) -> list[dict]:
    """Issue 11's targets for this shape: name, value, limit, pass."""
    found: list[dict] = []

    def add(name: str, value: float | None, limit: float, at_most: bool = True) -> None:
        if value is not None:
            ok = value <= limit if at_most else value >= limit
            found.append({"target": name, "value": value, "limit": limit, "pass": ok})

    if entry["shape"]["bound"] == "compute":
        add("time / numpy", fig["outofcore_over_numpy"], COMPUTE_TARGET)
        busy = [w["busy_fraction"] for w in fig.get("workers", {}).values()]
        add("least busy worker", min(busy) if busy else None, BUSY_FRACTION, at_most=False)
    else:
        add("time / floor", fig.get("outofcore_over_floor"), FLOOR_TARGET)
    add("dask / outofcore", fig["dask_over_outofcore"], DASK_TARGET, at_most=False)
    add("read / lower bound", fig["read_over_lower_bound"].get("outofcore"), READ_TARGET)
    return found


def plan_text(plan: dict) -> str:
    """Tiles, tile shape, panel depth, and any field this script does not know yet."""
    if not plan:
        return ""
    text = (
        f"{plan.get('tiles')} tile(s) {plan.get('tiles_grid')} of {plan.get('tile')}, "
        f"tk {plan.get('tk')}, {plan.get('panels_per_tile')} panel(s)"
    )
    new = {k: v for k, v in plan.items() if any(word in k for word in NEW_PLAN_WORDS)}
    return text + "".join(f"; {k} {v}" for k, v in new.items())


def _mark(value: float | None, targets_: list[dict], name: str) -> str:
    if value is None:
        return ""
    for t in targets_:
        if t["target"] == name:
            sign = "≤" if name not in ("dask / outofcore", "least busy worker") else "≥"
            return f"{value:.2f} ({sign}{t['limit']:g} {'pass' if t['pass'] else 'MISS'})"
    return f"{value:.2f}"


def table(result: dict) -> str:
    """The zoo's table (markdown), one row per shape, targets beside the figures."""
    info = result["info"]
    head = (
        f"float32, zarr (zstd) to zarr, scale 1/{info['scale']:g}, {info['repeats']} round(s), "
        f"outofcore: {info['workers']} workers x 1 thread, "
        f"{info['memory'] / GIB:g} GiB in all, output codec {info['output_codec']}\n\n"
        "| shape | m x k x n | numpy s | dask s | outofcore s | outofcore / numpy "
        "| dask / outofcore | read / lower bound (outofcore; numpy; dask) | floor s "
        "| outofcore / floor | tasks; busy per worker | plan | verified |\n"
        "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|---|---|"
    )
    rows = [head]
    for name, entry in result["shapes"].items():
        s, fig = entry["shape"], entry["figures"]
        systems, marks = entry["systems"], fig["targets"]

        def secs(system: str, systems: dict = systems) -> str:
            item = systems.get(system, {})
            return f"{item['seconds_median']:.2f}" if "seconds_median" in item else "failed"

        reads = fig["read_over_lower_bound"]
        read = "; ".join(
            _mark(reads[x], marks, "read / lower bound") if x == "outofcore" else f"{reads[x]:.2f}"
            for x in ("outofcore", "numpy", "dask")
            if x in reads
        )
        busy = ", ".join(
            f"{w['tasks']:g} / {w['busy_fraction']:.0%}" for w in fig.get("workers", {}).values()
        )
        if fig.get("workers"):
            busy = f"{fig['tasks']:g}; {busy}"
            least = [t for t in marks if t["target"] == "least busy worker"]
            if least:
                idle = f" (MISS: a worker <{BUSY_FRACTION:.0%} busy)"
                busy += " (all busy)" if least[0]["pass"] else idle
        floor = fig.get("floor")
        floor_text = f"{floor['seconds']:.2f} ({floor['system']})" if floor else ""
        verified = ", ".join(
            f"{x} {'yes' if v['ok'] else 'NO'}" for x, v in entry["verified"].items()
        )
        rows.append(
            f"| {name}{' (X.T @ X)' if s['gram'] else ''} | {s['m']}x{s['k']}x{s['n']} "
            f"| {secs('numpy')} | {secs('dask')} | {secs('outofcore')} "
            f"| {_mark(fig['outofcore_over_numpy'], marks, 'time / numpy')} "
            f"| {_mark(fig['dask_over_outofcore'], marks, 'dask / outofcore')} | {read} "
            f"| {floor_text} "
            f"| {_mark(fig.get('outofcore_over_floor'), marks, 'time / floor')} "
            f"| {busy} | {plan_text(fig['plan'])} | {verified} |"
        )
    return "\n".join(rows)


def plot(result: dict, path: Path) -> None:
    """Grouped bars: each system's median time over numpy's, per shape."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    shapes = list(result["shapes"])
    series = {"numpy": "#888", "dask": "#c84", "outofcore": "#4a7", "floor": "#57a"}
    fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(shapes)), 4))
    width = 0.8 / len(series)
    for i, (system, colour) in enumerate(series.items()):
        heights = []
        for name in shapes:
            entry = result["shapes"][name]
            numpy_s = entry["systems"].get("numpy", {}).get("seconds_median")
            if system == "floor":
                seconds = entry["figures"].get("floor", {}).get("seconds")
            else:
                seconds = entry["systems"].get(system, {}).get("seconds_median")
            heights.append(seconds / numpy_s if seconds and numpy_s else 0.0)
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(shapes))]
        bars = ax.bar(xs, heights, width, label=system, color=colour)
        for bar, h in zip(bars, heights, strict=True):
            if h:
                ax.annotate(
                    f"{h:.2f}",
                    (bar.get_x() + bar.get_width() / 2, h),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
    ax.set_yscale("log")  # dask.array and the floors can be 100x apart at small scales
    ax.axhline(1.0, color="#444", linewidth=0.6)
    ax.set_xticks(range(len(shapes)), shapes)
    ax.set_ylabel("median time / numpy in memory (log)")
    info = result["info"]
    ax.set_title(
        f"shape zoo, float32 zarr to zarr, scale 1/{info['scale']:g}, "
        f"outofcore {info['workers']} workers, {info['date']}"
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- driver


def main(argv: list[str] | None = None) -> int:
    """Run the zoo; exit status 1 if any system failed or any output was wrong."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma list of shapes")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma list of systems")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="divide dimensions >= 2048 by this"
    )
    parser.add_argument("--repeats", type=int, default=3, help="rounds (medians)")
    parser.add_argument(
        "--memory", default="2GiB", help="outofcore's budget over all workers (split evenly)"
    )
    parser.add_argument("--workers", type=int, default=2, help="outofcore's workers (1 thread)")
    parser.add_argument("--output-codec", default="none", help="outofcore's and the write floor's")
    parser.add_argument(
        "--no-floors", dest="floors", action="store_false", help="skip the I/O floors"
    )
    parser.add_argument("--png", type=Path, help="write the bar chart here")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per measurement")
    parser.add_argument(
        "--blas",
        choices=("native", "inherit"),
        default="native",
        help="as in compare.py: native unsets OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE per system",
    )
    args = parser.parse_args(argv)

    from outofcore.config import parse_size  # noqa: PLC0415

    names = [s for s in args.shapes.split(",") if s]
    systems = [s for s in args.systems.split(",") if s]
    unknown = (set(names) - set(SHAPES)) | (set(systems) - set(SYSTEMS))
    if unknown:
        parser.error(f"unknown {sorted(unknown)}; shapes {list(SHAPES)}, systems {SYSTEMS}")
    if args.scale <= 0 or args.repeats < 1 or args.workers < 1:
        parser.error("--scale must be > 0, --repeats and --workers >= 1")
    args.memory_bytes = parse_size(args.memory)
    args.cores = os.cpu_count() or 1
    args.data_dir.mkdir(parents=True, exist_ok=True)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    date = datetime.date.today().isoformat()
    suffix = "" if args.scale == 1 else f"-scale{args.scale:g}"
    json_path = args.out_dir / f"shapes-{date}{suffix}.json"
    result: dict[str, Any] = {
        "info": {
            "date": date,
            "scale": args.scale,
            "repeats": args.repeats,
            "memory": args.memory_bytes,
            "workers": args.workers,
            "cores": args.cores,
            "output_codec": args.output_codec,
            "blas": args.blas,
            "systems": systems,
            "tolerance_factor": TOLERANCE_FACTOR,
            "busy_fraction": BUSY_FRACTION,
            "timed": {
                "numpy": "a @ b (x.T @ x) on loaded arrays; load and store not timed",
                "others": "zarr to zarr; cluster start-up not timed",
                "floors": "read: every input chunk read and decoded; write: C encoded and "
                "written; one thread per core",
            },
        },
        "shapes": {},
    }
    for name in names:
        shape = SHAPES[name].scaled(args.scale)
        entry = run_shape(shape, args, systems)
        entry["figures"] = figures(entry)
        result["shapes"][name] = entry
        json_path.write_text(json.dumps(result, indent=2))  # a partial file survives
    print(table(result))
    if args.png:
        plot(result, args.png)
    print(f"\nwrote {json_path}" + (f" and {args.png}" if args.png else ""), file=sys.stderr)
    failed = [
        f"{name} {system}"
        for name, entry in result["shapes"].items()
        for system, s in entry["systems"].items()
        if "error" in s
    ]
    wrong = [
        f"{name} {system}"
        for name, entry in result["shapes"].items()
        for system, v in entry["verified"].items()
        if not v["ok"]
    ]
    if failed or wrong:
        print(f"FAILED: {failed}; WRONG RESULTS: {wrong}", file=sys.stderr)
        return 1
    return 0


def child(argv: list[str]) -> int:
    """One measurement in this fresh process (``compare.measure`` runs it)."""
    system, a_path, b_path, cfg = argv[0], argv[1], argv[2], json.loads(argv[3])
    print("RESULT " + json.dumps(run_one(system, a_path, b_path, cfg, RUNNERS)), flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.exit(child(sys.argv[2:]))
    sys.exit(main())

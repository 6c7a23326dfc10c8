"""The shape zoo's report: each shape's figures, its targets met or missed, table and plot."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from benchmarks.harness.reports import GIB, markdown_table, pyplot
from benchmarks.shape_zoo.cases import (
    BUSY_FRACTION,
    COMPUTE_TARGET,
    DASK_TARGET,
    FLOOR_TARGET,
    FLOORS,
    READ_TARGET,
    SYSTEMS,
)

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
        f"{info['memory'] / GIB:g} GiB in all, output codec {info['output_codec']}"
    )
    columns = ("shape", "m x k x n", "numpy s", "dask s", "outofcore s", "outofcore / numpy")
    columns += ("dask / outofcore", "read / lower bound (outofcore; numpy; dask)", "floor s")
    columns += ("outofcore / floor", "tasks; busy per worker", "plan", "verified")
    rows = []
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
            (
                f"{name}{' (X.T @ X)' if s['gram'] else ''}",
                f"{s['m']}x{s['k']}x{s['n']}",
                secs("numpy"),
                secs("dask"),
                secs("outofcore"),
                _mark(fig["outofcore_over_numpy"], marks, "time / numpy"),
                _mark(fig["dask_over_outofcore"], marks, "dask / outofcore"),
                read,
                floor_text,
                _mark(fig.get("outofcore_over_floor"), marks, "time / floor"),
                busy,
                plan_text(fig["plan"]),
                verified,
            )
        )
    return head + "\n\n" + markdown_table(columns, "llrrrrrlrrlll", rows)


def plot(result: dict, path: Path) -> None:
    """Grouped bars: each system's median time over numpy's, per shape."""
    plt = pyplot()

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

"""Reports: summaries of timed runs (medians, ratios to numpy, reads against the bound), sizes.

Each case prints its own table; what they share is here.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

#: Bytes in a GiB, for tables.
GIB = 2**30


def summarise(runs: dict[str, list[dict]], info: dict) -> dict:
    """Each system's medians over its runs: seconds, peak RSS, bytes read, ratios to numpy."""
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


def format_bytes(n: float) -> str:
    """``n`` bytes in B, KiB, MiB or GiB, for a table."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"  # pragma: no cover


def markdown_table(head: Sequence[str], aligns: str, rows: Iterable[Sequence[object]]) -> str:
    """A markdown table: its heading, its alignment (``l`` or ``r`` a column), its rows."""
    rule = {"l": "---", "r": "---:"}
    lines = [markdown_row(head), "|" + "|".join(rule[a] for a in aligns) + "|"]
    lines += [markdown_row(row) for row in rows]
    return "\n".join(lines)


def markdown_row(cells: Sequence[object]) -> str:
    """One row of a markdown table (an empty cell as ``| |``)."""
    return "|" + "|".join(f" {cell} " if cell != "" else " " for cell in cells) + "|"


def text_row(cells: Sequence[object], specs: Sequence[str], sep: str = " ") -> str:
    """One row of a fixed-width table: each cell formatted by its column's spec (``"<12"``).

    A table names its columns' specs once and formats its heading and rows with them;
    a row with fewer cells fills the first columns.
    """
    return sep.join(format(cell, spec) for cell, spec in zip(cells, specs, strict=False))


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (files only, no display needed)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def save_json(path: str | Path, value: Any, indent: int = 2) -> Path:
    """Write ``value`` as JSON at ``path``, its folder made first; the path written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=indent))
    return path

"""What the ``outofcore`` command prints: its results as JSON or as text.

The text of a job's summary, a plan (its predictions and the machine's measured figures),
a job's status and Freivalds' verdict; :mod:`outofcore.cli` runs the commands.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dask.utils import format_bytes, format_time


def print_result(
    data: dict[str, Any],
    as_json: bool,
    formatter: Callable[[dict[str, Any]], str],
    quiet: bool = False,
) -> None:
    """Print a command's result: JSON, or the formatter's text unless ``quiet``."""
    if as_json:
        print(json.dumps(data, indent=2))
    elif not quiet:
        print(formatter(data))


def format_summary(s: dict[str, Any]) -> str:
    """A job's summary (``matmul``, ``gram``, ``demo``) as the lines the command prints."""
    product = s.get("product") or {}
    formula = formula_of(product)
    if s.get("empty"):
        return (
            f"{formula} written to {s['output']}: {_shape(s['shape'])} "
            f"{s['dtype']}, k = {s['k']}: an empty product, nothing to multiply "
            f"({s['seconds']:.2f} s)"
        )
    tiles = "tile" if s["tiles"] == 1 else "tiles"
    if product.get("symmetric"):
        tiles += " (on and above the diagonal, mirrored)"
    split = ""
    if s.get("splits", 1) > 1:
        split = (
            f", k split in {s['splits']} parts ({s['partial_tasks_computed']} partial tasks; "
            f"partial tiles {format_bytes(s['scratch_bytes'])} written, "
            f"{format_bytes(s['scratch_bytes_read'])} read back)"
        )
    lines = [
        f"{formula} written to {s['output']}: {_shape(s['shape'])} {s['dtype']}, "
        f"k = {s['k']}, backend {s['backend']}, {s['workers']} worker(s)",
        f"  tiles          {s['tiles']} {tiles} of {s['tile'][0]}x{s['tile'][1]}, panels "
        f"{s['tk']} deep ({s['tiles_skipped']} skipped){split}",
        f"  time           {s['seconds']:.2f} s, {s['gflops']:.1f} GFLOP/s",
        f"  read           {format_bytes(s['bytes_read'])} {_read_ratio(s)}",
        f"  written        {format_bytes(s['bytes_written'])}",
        f"  memory         peak worker RSS {format_bytes(s['peak_worker_bytes'])} (a task "
        f"grew it by at most {format_bytes(s.get('peak_task_bytes', 0))}); a task projected "
        f"{format_bytes(s['task_bytes_projected'])} of its "
        f"{format_bytes(s['task_budget_bytes'])} budget",
        f"  task time      compute {s['compute_seconds']:.2f} s, waiting for reads "
        f"{s['read_wait_seconds']:.2f} s, writing {s['write_seconds']:.2f} s (summed)",
        *_format_phases(s.get("phases")),
    ]
    # The headline names the product and where it went whole (a test or a script reads
    # it); the figures under it keep within the columns.
    return "\n".join([lines[0], *(wrapped(line) for line in lines[1:])])


#: The columns the command's lines keep within (details in --json).
COLUMNS = 100


def wrapped(line: str) -> str:
    """``line`` broken at spaces to :data:`COLUMNS`, a summary line's continuations
    indented under its text."""
    lead = len(line) - len(line.lstrip(" "))
    indent = " " * (lead + 15 if lead == 2 else lead + 2 if lead < 17 else lead)
    glued = _NUMBER_UNIT.sub("\0", line)  # "decode 64.71 us" stays on one line
    text = textwrap.fill(
        glued, COLUMNS, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    )
    return text.replace("\0", " ")


#: The space between a number and the words on either side (its name, its unit), which
#: :func:`wrapped` keeps.
_NUMBER_UNIT = re.compile(r"(?<=\d) (?=[A-Za-z%µ(])|(?<=[A-Za-z]) (?=\d)")


def _format_phases(phases: dict[str, float] | None) -> list[str]:
    """The job's wall time by phase (outofcore/jobs/phases.py), on one line."""
    if not phases:
        return []
    total = sum(phases.values())
    shown = {name: seconds for name, seconds in phases.items() if seconds >= 0.005}
    parts = ", ".join(f"{name.replace('_', ' ')} {seconds:.2f}" for name, seconds in shown.items())
    return [f"  wall time      {total:.2f} s: {parts} (the rest under 0.01 s; --json: all)"]


def _read_ratio(s: dict[str, Any]) -> str:
    """The read against the lower bound, or why there is none (a resumed job)."""
    bound = format_bytes(s["io_lower_bound"])
    if s["read_over_lower_bound"] is None:
        return (
            f"(resumed: {s['tiles_skipped']} of {s['tiles']} tiles were done before; the lower "
            f"bound {bound} is a whole job's)"
        )
    return f"({s['read_over_lower_bound']:.2f}x the lower bound {bound})"


def formula_of(product: dict[str, Any]) -> str:
    """What a job computes, from its product summary: ``C = 2*A.T @ B - D (D = ...)``.

    Scales are written as in algebra: none for 1, a sign alone for -1, and a negative
    real ``beta`` subtracts (``- 0.5*D``, never ``+ -0.5*D``).
    """
    a = "A.T" if product.get("transpose_a") else "A"
    b = "B.T" if product.get("transpose_b") else "B"
    alpha, beta = product.get("alpha", 1), product.get("beta", 0)
    scale = "" if alpha == 1 else "-" if alpha == -1 else f"{_number_text(alpha)}*"
    if product.get("symmetric"):
        gram = f"G = {scale}{'X @ X.T' if product.get('transpose_b') else 'X.T @ X'}"
        return gram + _computed(product, ("X",))
    formula = f"C = {scale}{a} @ {b}"
    if product.get("addend"):
        sign = "+"
        if isinstance(beta, int | float) and beta < 0:
            sign, beta = "-", -beta
        factor = "" if beta == 1 else f"{_number_text(beta)}*"
        formula += f" {sign} {factor}D (D = {product['addend']})"
    return formula + _computed(product, ("A", "B"))


def _computed(product: dict[str, Any], names: tuple[str, ...]) -> str:
    """What computes the operands as they are read (a region of the stored array,
    elementwise steps), as `` (X = stored - its mean over k, from the panel sums)`` or
    `` (A = stored[0:500, 3:40].astype(float64) * 2)``; empty for stored arrays read as
    they are."""
    symbols = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
    said = []
    for name in names:
        key = "a" if name in ("A", "X") else "b"
        window = product.get(f"{key}_window")
        steps = product.get(f"{key}_steps", [])
        if not window and not steps:
            continue
        expression, loose = "stored", False  # loose: a sum, parenthesised before * or /
        if window:
            spans = zip(window["start"], window["shape"], strict=True)
            expression += "[" + ", ".join(f"{s}:{s + n}" for s, n in spans) + "]"
        for step in steps:
            if step["op"] == "astype":
                expression += f".astype({step['dtype']})"
                continue
            if step.get("shift"):
                expression += " - its mean over k, from the panel sums"
                continue
            other = "a vector" if "vector" in step else _number_text(step.get("scalar"))
            if loose and step["op"] in ("mul", "div"):
                expression = f"({expression})"
            loose = step["op"] in ("add", "sub")
            symbol = symbols[step["op"]]
            if step.get("reflected"):
                expression = f"{other} {symbol} {expression}"
            else:
                expression = f"{expression} {symbol} {other}"
        said.append(f"{name} = {expression}")
    return f" ({'; '.join(said)})" if said else ""


def _exactly(product: dict[str, Any]) -> str:
    """How an exact product is exact: through float64, or 16-bit limbs on the CPU."""
    if not product["exact"]:
        return ""
    limbs = product.get("limbs")
    if limbs:
        return f" (exact: {limbs[0]} x {limbs[1]} 16-bit limbs through float64 BLAS, on the CPU)"
    return " (exact)"


def _wrapping(product: dict[str, Any]) -> str:
    """Where an exact result can exceed the output dtype: modulo 2**64, as numpy's."""
    if not product.get("wraps"):
        return ""
    return f" (sums beyond {product['output']} wrap modulo 2**64, as numpy's 64-bit product)"


def _number_text(value: Any) -> str:
    """A scale as the user wrote it: 2, -0.5, (1+2j); JSON keeps complex ones as pairs."""
    if isinstance(value, list | tuple):  # [real, imag]
        value = complex(*value)
    if isinstance(value, complex):
        return f"({value.real:g}{value.imag:+g}j)"
    if isinstance(value, int):  # exact: 9007199254740993, not 9.0072e+15
        return str(value)
    return f"{value:g}"


def format_plan(p: dict[str, Any], verbose: bool = False) -> str:
    """A job's plan (``outofcore plan``) as the lines the command prints, within
    :data:`COLUMNS`; this machine's measured figures and the what-ifs only ``verbose``."""
    product = p["product"]
    a = "A.T" if product["transpose_a"] else "A"
    b = "B.T" if product["transpose_b"] else "B"
    lines = [
        formula_of(product),
        f"  operands       {a} {p['m']}x{p['k']} (chunks {p['a_chunks'][0]}x"
        f"{p['a_chunks'][1]}) @ "
        f"{b} {p['k']}x{p['n']} (chunks {p['b_chunks'][0]}x{p['b_chunks'][1]}), "
        f"accumulated in {product['compute']}{_exactly(product)}, written as "
        f"{product['output']}{_wrapping(product)}",
        *_format_stack(product),
        f"  budget         {format_bytes(p['task_budget_bytes'])} per task, "
        f"{format_bytes(p['worker_budget_bytes'])} per worker of "
        f"{p['threads_per_worker']} thread(s), {p['workers']} worker(s)",
        f"  tiles          {p['tiles']} ({p['tiles_grid'][0]}x{p['tiles_grid'][1]}"
        f"{', on and above the diagonal' if p['symmetric'] else ''}) of "
        f"{p['tile'][0]}x{p['tile'][1]}, {p['panels_per_tile']} panel(s) of {p['tk']}",
        *(
            [
                "  symmetric      one array times its transpose: each tile also writes its "
                "mirror, diagonal tiles by syrk; the output is exactly symmetric"
            ]
            if p["symmetric"]
            else []
        ),
        *_format_split(p),
        f"  output chunks  {p['out_chunk_count']} of {p['out_chunks'][0]}x{p['out_chunks'][1]}"
        + _format_shards(p.get("out_shards"), p.get("out_layout")),
        f"  task memory    {format_bytes(p['task_bytes'])} projected"
        + _format_kinds(p.get("task_bytes_by_kind") or {}),
        *_format_backend(p),
        *_format_device(p.get("device")),
        f"  bytes read     {format_bytes(p['bytes_read'])} predicted, lower bound "
        f"{format_bytes(p['io_lower_bound'])} ({p['read_over_lower_bound']:.2f}x)",
        f"  bytes written  {format_bytes(p['bytes_written'])}",
        f"  work           {p['flops'] / 1e9:.1f} GFLOP",
        *_format_predictions(p.get("predicted", []), p.get("machine"), verbose),
    ]
    return "\n".join([lines[0], *(wrapped(line) for line in lines[1:])])


def _format_backend(p: dict[str, Any]) -> list[str]:
    """The plan's line on the GPU backend that multiplies, beside our kernel's rate (where
    ``auto`` chose cuBLAS, why: outofcore.backends.registry.auto_gpu_backend)."""
    gpu = p.get("gpu")
    if not gpu:
        return []
    choice = p.get("backend_choice") or gpu["engine"]
    return [f"  backend        {gpu['backend']}: {choice}"]


def _shape(shape: list[int]) -> str:
    """An output's shape as the summary prints it: ``37x23``, ``16x2048x2048``, ``37``,
    or ``0-d`` (a dot product's)."""
    return "x".join(str(n) for n in shape) if shape else "0-d"


def _format_stack(product: dict[str, Any]) -> list[str]:
    """The plan's line on numpy.matmul's shapes, for a product that is not of two matrices."""
    stack = product.get("stack")
    if not stack:
        return []
    said = []
    if stack["batch"]:
        said.append(f"a stack of {'x'.join(map(str, stack['batch']))} products, one task a tile")
    if stack["a_vector"]:
        said.append("A is a vector: one row")
    if stack["b_vector"]:
        said.append("B is a vector: one column")
    return [f"  shapes         output {_shape(stack['out_shape'])}: " + "; ".join(said)]


def _format_kinds(kinds: dict[str, int]) -> str:
    """Each kind's projection, when the plan runs more than one kind of task."""
    if len(kinds) < 2:
        return ""
    return " (" + ", ".join(f"{kind} {format_bytes(n)}" for kind, n in kinds.items()) + ")"


def _format_split(p: dict[str, Any]) -> list[str]:
    """The split-k lines of a plan: its partial tasks, the reduction and the scratch."""
    if p["splits"] == 1:
        busy = f"{p['busy_workers']} of {p['workers']} worker(s)"
        return [f"  split-k        none: {busy} get a tile"]
    return [
        f"  split-k        k in {p['splits']} parts: {p['partial_tasks']} partial tasks on "
        f"{p['busy_workers']} of {p['workers']} worker(s), then {p['tiles']} reduction task(s)",
        f"  partial tiles  {format_bytes(p['scratch_bytes'])} written next to the output "
        "and read back once by the reduction (deleted when the job completes)",
    ]


def _format_shards(shards: list[int] | None, layout: str | None = None) -> str:
    """The rest of the output chunks line: its shards, and who chose them
    (:func:`outofcore.jobs.planning.out_layout`)."""
    said = {"asked": " as asked", "existing": " (the existing output's)"}.get(layout or "", "")
    if not shards:
        return said
    each = "" if layout in ("asked", "existing") else " (one per tile)"
    return f"{said}, in shards of {shards[0]}x{shards[1]}{each}"


def _format_predictions(
    predictions: list[dict[str, Any]], machine: dict[str, Any] | None = None, verbose: bool = True
) -> list[str]:
    """The time model's lines (outofcore/planner/model.py): this machine's prediction from its
    measured figures (:mod:`outofcore.machine.probe`), then (``verbose``) the figures and
    the assumed machines as what-ifs; else a warning of figures taken under load, and
    where the rest is."""
    measured = [p for p in predictions if p.get("basis") == "measured"]
    assumed = [p for p in predictions if p.get("basis") != "measured"]
    lines = []
    for p in measured:
        where = "this machine" if not machine or machine["runs_here"] else "if run here"
        lines.append(
            f"  predicted time {format_time(p['seconds'])} {where} ({p['busy_workers']} of "
            f"{p['workers']} worker(s) busy), bound by {p['bottleneck']}: {_streams(p)}"
        )
        if machine and verbose:
            lines += _format_machine(machine)
        elif machine and machine.get("under_load"):
            lines += _format_machine(machine)[-1:]
        if p.get("rates") == "gpu" and p.get("gpu_basis"):
            lines.append(f"                 GPU rates: {p['gpu_basis']}")
            if verbose:
                lines.append(_stage_table(p))
        elif machine and machine.get("note"):
            lines.append(f"                 (a what-if: {machine['note']})")
    if assumed and not verbose:
        lines.append("  details        --verbose: this machine's figures, and what-ifs on others")
        return lines
    if assumed:
        lines.append("  what if        (assumed rates, not measured: outofcore/planner/model.py)")
    for p in assumed:
        lines.append(
            f"    {p['machine']:<22} {p['busy_workers']:>4}/{p['workers']:<4} busy"
            f"  {format_time(p['seconds']):>9}  bound by {p['bottleneck']} ({_streams(p)})"
        )
    return lines


def _format_machine(machine: dict[str, Any]) -> list[str]:
    """Where this machine's figures come from, and the figures (``plan``'s two lines)."""
    f = machine["figures"]
    cache, home = machine["cache"], str(Path.home())
    if cache.startswith(home + os.sep):
        cache = "~" + cache[len(home) :]
    when = f"cache {cache}"
    if machine["probed_now"]:
        when = f"just now: {machine['probed_because']}"
    return [
        f"  this machine   measured {f['measured'].replace('T', ' ')[:16]} UTC ({when}; "
        f"--reprobe measures again), load {_load(f['load'])}, {f['threads']} thread(s) per "
        f"worker, a thread's share of a core {f['cpu_share']:.2f}",
        f"                 sgemm {f['sgemm_flops'] / 1e9:.1f} GFLOP/s "
        f"({f['sgemm_small_flops'] / 1e9:.1f} at 1024³), dgemm "
        f"{f['dgemm_small_flops'] / 1e9:.1f} GFLOP/s at 1024³; decode "
        f"{f['zstd_decode_bps'] / 1e6:.0f} MB/s zstd, {f['raw_read_bps'] / 1e6:.0f} "
        f"uncompressed ({100 * f['overlap']:.0f}% hidden behind BLAS); write "
        f"{f['raw_write_bps'] / 1e6:.0f} MB/s uncompressed, {f['zstd_encode_bps'] / 1e6:.0f} "
        f"zstd; disk {f['disk_read_bps'] / 1e6:.0f} MB/s",
        *(
            [
                f"                 measured under load {f['load']:.1f} "
                f"({machine['load_per_core']:.2f} per core): the figures may be low and the "
                "time predicted too long; --reprobe on a quiet machine"
            ]
            if machine.get("under_load")
            else []
        ),
    ]


def _stage_table(p: dict[str, Any]) -> str:
    """A GPU prediction's stages, each over the busiest worker's tiles: the kernel, the
    host's decoding, the PCIe copies, the writes of C, and what of C's copies back and
    writes the next tiles do not hide (``exposed``)."""
    stages = (("kernel", "compute"), ("decode", "decode"), ("PCIe", "pcie"))
    stages += (("write", "write"), ("exposed", "exposed"))
    cells = ", ".join(f"{label} {format_time(p[key])}" for label, key in stages)
    flight = p.get("tiles_in_flight", 1)
    return f"                 stages: {cells} ({flight} tile(s) in flight per GPU)"


def _streams(p: dict[str, Any]) -> str:
    """A prediction's streams, those that take time (``compute 9.2 s, decode 1.1 s, ...``)."""
    names = (
        "compute", "decode", "pcie", "disk", "network", "write", "scratch", "cores",
        "exposed", "fill", "start",
    )  # fmt: skip
    shown = [name for name in names if p[name] > 0]
    return ", ".join(
        f"{'PCIe' if name == 'pcie' else name} {format_time(p[name])}" for name in shown
    )


def _load(load: float | None) -> str:
    return "unknown" if load is None else f"{load:.1f}"


def _format_device(d: dict[str, Any] | None) -> list[str]:
    """The device tiling lines of ``outofcore plan --device-memory``."""
    if not d:
        return []
    rows, cols = d["device_tiles"]
    how = f"sub-tiled, {rows}x{cols} per host tile"
    if d["mode"] == "resident":
        how = "the whole host tile, resident"
    return [
        f"  device tile    {d['device_tile'][0]}x{d['device_tile'][1]} ({how}), slices "
        f"{d['dk']} deep: {format_bytes(d['device_bytes'])} of a "
        f"{format_bytes(d['device_budget_bytes'])} device budget",
        f"  PCIe           {format_bytes(d['pcie_bytes_per_tile'])} per host tile (H2D "
        f"{format_bytes(d['h2d_bytes_per_tile'])}, D2H {format_bytes(d['d2h_bytes_per_tile'])}), "
        f"{format_bytes(d['pcie_bytes'])} in all",
    ]


def format_verify(v: dict[str, Any]) -> str:
    """Freivalds' verdict (``outofcore verify``) on one line."""
    verdict = "PASSED" if v["passed"] else "FAILED"
    text = (
        f"verify (Freivalds, {v['rounds']} rounds): {verdict}; largest relative residual "
        f"{v['max_relative_residual']:.3g} (tolerance {v['tolerance']:.3g})"
    )
    if v.get("exact") and not v["tolerance"]:
        text = (
            f"verify (Freivalds, {v['rounds']} rounds, exact integers): {verdict}; largest "
            f"residual {v['max_relative_residual']:.0f} (tolerance 0)"
        )
    elif v.get("exact"):  # an integer product written as a float: each element rounded once
        text = (
            f"verify (Freivalds, {v['rounds']} rounds, exact integers rounded to the output): "
            f"{verdict}; largest relative residual {v['max_relative_residual']:.3g} "
            f"(tolerance {v['tolerance']:.3g})"
        )
    if v.get("unchecked_elements"):
        text += (
            f"; {v['unchecked_elements']} element(s) in {v['unchecked_rows']} row(s) "
            "unchecked (the reference is Inf there, or the row may overflow or has NaN/Inf "
            "in the addend: only NaN/Inf-ness is checked)"
        )
    if not v["passed"]:
        text += (
            f"; {v['failing_rows']} row(s) fail, the first is row {v['first_failing_row']}"
            + (
                f" of matrix {tuple(v['first_failing_matrix'])}"
                if v.get("first_failing_matrix") is not None
                else ""
            )
            + f" ({v['nonfinite_mismatches']} with NaN/Inf where none was expected or vice versa)"
        )
    return text

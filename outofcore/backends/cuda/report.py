"""Compile report of the GEMM kernels for real GPUs, made on a machine without one.

``python -m outofcore.backends.cuda.report [--json] [--arch sm_80 sm_90]`` compiles every
kernel variant (float32, float64, complex64 and complex128, production tile
parameters; the checked kernel of each, and the interior kernel of each dtype that has
one, ``kernels.has_interior_kernel``) as the runtime's ``cuda.jit`` does, with the same
options (``outofcore.backends.cuda.kernels.compile_options``: launch bounds of two
blocks per SM, no link-time optimisation): ``numba.cuda.compile`` makes PTX (or LTO-IR
with LTO), nvJitLink links it to a cubin per architecture (its info log gives
registers, spills and shared memory), then ``cuobjdump -sass`` disassembles the cubin
and the inner loop's FMA instructions are counted against its shared-memory loads, its
global loads, its compares and everything.

It exits 1 when a variant spills, uses more registers per thread than two of
its blocks may share on one SM (128 for 256 threads:
``kernels.register_limit``), does not compile for sm_90, misses its targets
(:data:`TARGETS`: the FMA share of the loop and FMA per shared load, for every dtype
and both kernels; an interior loop has no global load narrower than 128 bits and no
compare but the loop's own, one a k-tile), or a float32 or complex64 loop has a
float64 instruction; 2 when the toolchain is not installed.
The toolchain is ``numba-cuda[cu13]`` (NVVM, nvJitLink) plus the
``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm`` wheels.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field

import numpy as np

#: ``(kernel, dtype)``: the least FMA share of the inner loop and FMA per shared load, a
#: little under what the production kernels compile to (docs/gpu.md, "The kernel's inner
#: loop"), at sm_80 and sm_90 alike.  complex128 has no interior kernel.
TARGETS: dict[tuple[str, str], tuple[float, float]] = {
    ("interior", "float32"): (0.91, 16.0),
    ("interior", "complex64"): (0.915, 16.0),
    ("interior", "float64"): (0.73, 4.0),
    ("checked", "float32"): (0.84, 16.0),
    ("checked", "complex64"): (0.80, 16.0),
    ("checked", "float64"): (0.62, 4.0),
    ("checked", "complex128"): (0.80, 8.0),
}
#: Issue 54's bound: FFMA at least 92 % of the float32 interior loop at sm_90 (where an
#: FFMA takes one issue slot; at sm_80 it takes two, and the mix allows 100 % anyway).
SM90_FLOAT32_SHARE = 0.92
#: The architectures compiled unless ``--arch`` names others (CI's suite compiles sm_90 in
#: tests/cuda/test_cuda_report.py and .ci/run's step sm_80: each once).
DEFAULT_ARCHS = ("sm_80", "sm_90")

#: FMA lanes per SM sub-partition (one warp instruction issued per clock each):
#: a warp FMA occupies the issue slot for 32 / lanes clocks.
FMA_LANES = {
    ("sm_80", "float32"): 16,
    ("sm_80", "float64"): 8,
    ("sm_90", "float32"): 32,
    ("sm_90", "float64"): 16,
    ("sm_80", "complex64"): 16,
    ("sm_80", "complex128"): 8,
    ("sm_90", "complex64"): 32,
    ("sm_90", "complex128"): 16,
}
#: The FMA instruction of each dtype's inner loop (a complex one is real FMAs).
FMA_OPS = {"float32": "FFMA", "complex64": "FFMA", "float64": "DFMA", "complex128": "DFMA"}
DTYPES = tuple(FMA_OPS)

_SASS_LINE = re.compile(
    r"/\*(?P<addr>[0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?(?P<op>[A-Z][A-Z0-9_.]*)(?P<args>[^;]*);"
)
_BRANCH_TARGET = re.compile(r"0x([0-9a-f]+)")


@dataclass
class LoopStats:
    """Instruction counts of the inner loop (the innermost loop with the most FMAs)."""

    start: int = 0
    end: int = 0
    instructions: int = 0
    fma: int = 0
    shared_loads: int = 0
    shared_loads_128: int = 0
    global_loads: int = 0
    global_loads_128: int = 0
    compares: int = 0
    float64_ops: int = 0

    @property
    def fma_per_lds(self) -> float:
        return self.fma / self.shared_loads if self.shared_loads else float("inf")

    @property
    def fma_share(self) -> float:
        return self.fma / self.instructions if self.instructions else 0.0


@dataclass
class VariantReport:
    """What one kernel variant compiled to on one architecture."""

    name: str
    dtype: str
    arch: str
    params: dict
    #: "checked" (bounds checks, any shape) or "interior" (whole blocks, wide accesses)
    kernel: str = "checked"
    compiled: bool = False
    error: str = ""
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_bytes: int = 0
    shared_bytes: int = 0
    local_bytes: int = 0
    #: registers per thread allowed (``kernels.register_limit``); 0: not checked
    max_registers: int = 0
    loop: LoopStats = field(default_factory=LoopStats)
    problems: list[str] = field(default_factory=list)

    @property
    def issue_bound(self) -> float:
        """Fraction of FMA peak the inner loop's instruction mix allows at most."""
        lanes = FMA_LANES.get((self.arch, self.dtype), 32)
        return min(1.0, self.loop.fma_share * 32 / lanes)

    def as_dict(self) -> dict:
        d = asdict(self)
        per_lds = self.loop.fma_per_lds  # inf (no shared load) is not JSON: None
        d["loop"].update(
            fma_per_lds=per_lds if per_lds != float("inf") else None,
            fma_share=self.loop.fma_share,
        )
        d["issue_bound"] = self.issue_bound
        return d


def find_cuobjdump() -> str | None:
    """Return the path of ``cuobjdump`` (PATH, the pip wheels, a CUDA install) or None."""
    try:
        from cuda.pathfinder import find_nvidia_binary_utility  # noqa: PLC0415

        found = find_nvidia_binary_utility("cuobjdump")
    except Exception:
        found = None
    if found is None:
        found = _which("cuobjdump")
    if found is None:  # older cuda-pathfinder: look into the pip wheels ourselves
        import glob  # noqa: PLC0415
        import importlib.util  # noqa: PLC0415

        spec = importlib.util.find_spec("nvidia")
        for root in spec.submodule_search_locations if spec else ():
            hits = sorted(glob.glob(os.path.join(root, "*", "bin", "cuobjdump")))
            if hits:
                return hits[-1]
    return found


def missing_toolchain() -> str | None:
    """Return why the report cannot run here (a missing piece), or None when it can."""
    try:
        from cuda.bindings import nvjitlink  # noqa: F401, PLC0415
        from cuda.pathfinder import load_nvidia_dynamic_lib  # noqa: PLC0415

        load_nvidia_dynamic_lib("nvvm")
        load_nvidia_dynamic_lib("nvJitLink")
    except Exception as exc:  # ImportError, DynamicLibNotFoundError, ...
        return f"NVVM/nvJitLink not found ({exc}); pip install 'numba-cuda[cu13]'"
    tool = find_cuobjdump()
    if tool is None:
        return "cuobjdump not found; pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm"
    nvdisasm = os.path.join(os.path.dirname(tool), "nvdisasm")
    if not os.path.exists(nvdisasm) and not _which("nvdisasm"):
        return "nvdisasm not found; pip install nvidia-cuda-nvdisasm"
    return None


def _which(name: str) -> str | None:
    import shutil  # noqa: PLC0415

    return shutil.which(name)


def link(code: bytes, arch: str, lto: bool) -> tuple[bytes, str]:
    """Link LTO-IR (``lto``) or PTX to a cubin for ``arch`` with nvJitLink.

    The options numba-cuda's linker gives nvJitLink for a kernel: the
    architecture, and ``-lto`` for LTO-IR.  Returns ``(cubin, info log)``.
    """
    from cuda.bindings import nvjitlink  # noqa: PLC0415

    options = [f"-arch={arch}", "-verbose", *(["-lto"] if lto else [])]
    handle = nvjitlink.create(len(options), options)
    try:
        kind = nvjitlink.InputType.LTOIR if lto else nvjitlink.InputType.PTX
        name = "kernel.ltoir" if lto else "kernel.ptx"
        try:
            nvjitlink.add_data(handle, kind, code, len(code), name)
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as exc:
            size = nvjitlink.get_error_log_size(handle)
            log = bytearray(size)
            nvjitlink.get_error_log(handle, log)
            raise RuntimeError(
                f"nvJitLink failed for {arch}: {exc}: {log.decode(errors='replace')}"
            ) from exc
        size = nvjitlink.get_info_log_size(handle)
        log = bytearray(size)
        nvjitlink.get_info_log(handle, log)
        size = nvjitlink.get_linked_cubin_size(handle)
        cubin = bytearray(size)
        nvjitlink.get_linked_cubin(handle, cubin)
    finally:
        nvjitlink.destroy(handle)
    return bytes(cubin), log.decode(errors="replace").rstrip("\x00")


def parse_info_log(log: str, report: VariantReport) -> None:
    """Fill registers, spills, stack, shared and local memory from an nvJitLink info log."""

    def grab(pattern: str) -> int:
        found = re.findall(pattern, log)
        return max((int(x) for x in found), default=0)

    report.registers = grab(r"[Uu]sed (\d+) registers")
    report.spill_stores = grab(r"(\d+) bytes spill stores")
    report.spill_loads = grab(r"(\d+) bytes spill loads")
    report.stack_bytes = grab(r"(\d+) bytes stack frame")
    report.shared_bytes = grab(r"(\d+) bytes smem")
    report.local_bytes = grab(r"(\d+) bytes lmem")


def disassemble(cubin: bytes) -> str:
    """Return ``cuobjdump -sass`` of a cubin, with the tool's folder on PATH (for nvdisasm)."""
    tool = find_cuobjdump()
    if tool is None:
        raise RuntimeError("cuobjdump not found; pip install nvidia-cuda-cuobjdump")
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(tool) + os.pathsep + env.get("PATH", "")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        done = subprocess.run(
            [tool, "-sass", path], capture_output=True, text=True, env=env, check=False
        )
    if done.returncode != 0:
        raise RuntimeError(f"cuobjdump failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def parse_sass(sass: str) -> list[tuple[int, str, str]]:
    """Return ``(address, opcode, operands)`` per instruction of the first function."""
    out: list[tuple[int, str, str]] = []
    functions = 0
    for line in sass.splitlines():
        if "Function :" in line:
            functions += 1
            if functions > 1:
                break
            continue
        match = _SASS_LINE.search(line)
        if match:
            out.append((int(match["addr"], 16), match["op"], match["args"]))
    return out


def inner_loop(instructions: list[tuple[int, str, str]], fma_op: str) -> LoopStats:
    """Find the inner loop and count its instructions.

    A loop is the span from a backward branch's target to the branch.  The
    inner loop is, among the loops with ``fma_op`` instructions that contain no
    other such loop, the one with the most of them.
    """
    spans = set()
    for addr, op, args in instructions:
        if op.startswith("BRA"):
            target = _BRANCH_TARGET.search(args)
            if target and int(target.group(1), 16) <= addr:
                spans.add((int(target.group(1), 16), addr))
    loops = [_count(instructions, start, end, fma_op) for start, end in sorted(spans)]
    loops = [lp for lp in loops if lp.fma]
    innermost = [
        lp
        for lp in loops
        if not any(
            (o.start, o.end) != (lp.start, lp.end) and lp.start <= o.start and o.end <= lp.end
            for o in loops
        )
    ]
    if not innermost:
        return LoopStats()
    return max(innermost, key=lambda lp: (lp.fma, -lp.instructions))


def _count(
    instructions: list[tuple[int, str, str]], start: int, end: int, fma_op: str
) -> LoopStats:
    body = [op for a, op, _ in instructions if start <= a <= end and op != "NOP"]
    return LoopStats(
        start=start,
        end=end,
        instructions=len(body),
        fma=sum(op.split(".")[0] == fma_op for op in body),
        shared_loads=sum(op.startswith("LDS") for op in body),
        shared_loads_128=sum(op.startswith("LDS") and ".128" in op for op in body),
        global_loads=sum(op.startswith("LDG") for op in body),
        global_loads_128=sum(op.startswith("LDG") and ".128" in op for op in body),
        compares=sum(op.startswith(("ISETP", "UISETP")) for op in body),
        float64_ops=sum(
            op.split(".")[0] in ("DFMA", "DADD", "DMUL") or ".F64" in op for op in body
        ),
    )


def report_variant(
    dtype: np.dtype, arch: str, params=None, kernel: str = "checked"
) -> VariantReport:
    """Compile one variant (``kernel``: "checked" or "interior") for ``arch``
    (``"sm_90"``) and analyse it."""
    from numba import cuda  # noqa: PLC0415

    from outofcore.backends.cuda import kernels  # noqa: PLC0415

    dtype = np.dtype(dtype)
    params = params or kernels.PRODUCTION[dtype]
    fn = kernels.make_gemm_function(params, dtype, interior=kernel == "interior")
    report = VariantReport(
        name=fn.__name__,
        dtype=dtype.name,
        arch=arch,
        params=asdict(params),
        kernel=kernel,
        max_registers=kernels.register_limit(params),
    )
    cc = (int(arch[3:-1]), int(arch[-1]))
    sig = f"void({dtype.name}[:, ::1], {dtype.name}[:, ::1], {dtype.name}[:, ::1], boolean)"
    options = kernels.compile_options(params)
    lto = bool(options.pop("lto", False))  # cuda.jit's lto: LTO-IR linked with -lto
    try:
        code, _ = cuda.compile(
            fn, sig, device=False, abi="numba", cc=cc, output="ltoir" if lto else "ptx", **options
        )
        cubin, log = link(bytes(code) if lto else code.encode(), arch, lto)
        sass = disassemble(cubin)
    except Exception as exc:  # report it, and let the caller decide
        report.error = f"{type(exc).__name__}: {exc}"
        report.problems.append(f"does not compile for {arch}: {report.error}")
        return report
    report.compiled = True
    parse_info_log(log, report)
    fma_op = FMA_OPS[dtype.name]
    report.loop = inner_loop(parse_sass(sass), fma_op)
    check(report)
    return report


def check(report: VariantReport) -> None:
    """Append to ``report.problems`` what misses the targets."""
    if report.spill_stores or report.spill_loads or report.local_bytes:
        report.problems.append(
            f"spills: {report.spill_stores} B stored, {report.spill_loads} B loaded, "
            f"{report.local_bytes} B local memory"
        )
    if report.max_registers and report.registers > report.max_registers:
        report.problems.append(
            f"{report.name} on {report.arch} uses {report.registers} registers per thread, "
            f"over the limit of {report.max_registers} (two blocks per SM)"
        )
    if report.loop.fma == 0:
        report.problems.append("no FMA found in any loop")
    loop = report.loop
    if report.dtype in ("float32", "complex64") and loop.float64_ops:
        report.problems.append(f"{loop.float64_ops} float64 instructions in a {report.dtype} loop")
    fma = FMA_OPS.get(report.dtype, "FMA")
    target = TARGETS.get((report.kernel, report.dtype))
    if target is not None:
        share, per_lds = target
        if loop.fma_share < share:
            report.problems.append(f"{fma} share {loop.fma_share:.1%} < {share:.1%}")
        if loop.fma_per_lds < per_lds:
            report.problems.append(f"{loop.fma_per_lds:.1f} {fma} per shared load < {per_lds}")
    if report.kernel != "interior":
        return
    sm90_float32 = report.dtype == "float32" and report.arch == "sm_90"
    if sm90_float32 and loop.fma_share < SM90_FLOAT32_SHARE:
        report.problems.append(
            f"FFMA share {loop.fma_share:.1%} < {SM90_FLOAT32_SHARE:.0%} at sm_90 (issue 54)"
        )
    narrow = loop.global_loads - loop.global_loads_128
    if narrow:
        report.problems.append(f"{narrow} global loads narrower than 128 bits in the loop")
    turn = int(report.params.get("turn", 1))
    if loop.compares > turn + 1:  # the loop's own: one a k-tile (and one spare)
        report.problems.append(
            f"{loop.compares} compares in the loop, over {turn + 1} (bounds checks?)"
        )


def variants(dtypes=DTYPES) -> list[tuple[str, str]]:
    """``(dtype, kernel)`` of every kernel variant: the checked kernel of each dtype, and
    the interior one where the dtype has it."""
    from outofcore.backends.cuda import kernels  # noqa: PLC0415

    out = []
    for dt in dtypes:
        out.append((dt, "checked"))
        if kernels.has_interior_kernel(np.dtype(dt)):
            out.append((dt, "interior"))
    return out


def run(archs=DEFAULT_ARCHS, dtypes=DTYPES, jobs: int = 1) -> list[VariantReport]:
    """Compile and analyse every variant for every architecture, ``jobs`` at a time (each
    in a fresh process of its own where more than one: NVVM compiles one kernel on one
    core, for minutes at sm_90), in the order of :func:`variants`."""
    work = [(dt, arch, kernel) for dt, kernel in variants(dtypes) for arch in archs]
    if jobs <= 1 or len(work) <= 1:
        return [_report(item) for item in work]
    context = multiprocessing.get_context("spawn")  # no state of this process's numba
    with ProcessPoolExecutor(min(jobs, len(work)), mp_context=context) as pool:
        return list(pool.map(_report, work))


def _report(item: tuple[str, str, str]) -> VariantReport:
    """:func:`report_variant` of one ``(dtype, arch, kernel)``."""
    dtype, arch, kernel = item
    return report_variant(np.dtype(dtype), arch, kernel=kernel)


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        return os.cpu_count() or 1


def format_table(reports: list[VariantReport]) -> str:
    """Return the reports as a Markdown table."""
    head = (
        "| kernel | arch | regs | spills (st/ld B) | smem B | loop instr | FMA | "
        "LDS (of them .128) | FMA/LDS | FMA share | LDG (of them .128) | compares | "
        "issue bound |"
    )
    rows = [head, "|" + "---|" * 13]
    for r in reports:
        if not r.compiled:
            rows.append(f"| {r.name} | {r.arch} | failed: {r.error[:60]} |" + " |" * 10)
            continue
        lp = r.loop
        rows.append(
            f"| {r.name} | {r.arch} | {r.registers} | {r.spill_stores}/{r.spill_loads} | "
            f"{r.shared_bytes} | {lp.instructions} | {lp.fma} | "
            f"{lp.shared_loads} ({lp.shared_loads_128}) | {lp.fma_per_lds:.1f} | "
            f"{lp.fma_share:.1%} | {lp.global_loads} ({lp.global_loads_128}) | "
            f"{lp.compares} | {r.issue_bound:.0%} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Command line entry; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m outofcore.backends.cuda.report", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--arch", nargs="+", default=list(DEFAULT_ARCHS), help="e.g. sm_80 sm_90")
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="variants compiled at once, each in a process (default: the cores here)",
    )
    args = parser.parse_args(argv)
    reason = missing_toolchain()
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        reason = "NUMBA_ENABLE_CUDASIM=1: numba.cuda cannot compile PTX under the simulator"
    if reason:
        print(f"compile report: toolchain missing: {reason}", file=sys.stderr)
        return 2
    archs = list(dict.fromkeys(args.arch))  # as asked: `--arch sm_80` compiles sm_80 alone
    reports = run(archs, jobs=cores() if args.jobs is None else args.jobs)
    problems = [f"{r.name} {r.arch}: {p}" for r in reports for p in r.problems]
    if args.json:
        print(
            json.dumps({"variants": [r.as_dict() for r in reports], "problems": problems}, indent=2)
        )
    else:
        print(format_table(reports))
        print()
        print("issue bound: the fraction of FMA peak the inner loop's instruction mix allows")
        print("(one warp instruction issued per clock per SM sub-partition).")
        for p in problems:
            print(f"PROBLEM {p}")
        if not problems:
            print(
                "OK: no spills, registers within the limits, every variant compiles for "
                f"{' and '.join(archs)}, every target met"
            )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""The compile report: the kernels compiled for sm_90 without a GPU, and its parsers.

The compile test runs ``python -m outofcore.backends.cuda.report`` in a subprocess,
because the other CUDA test modules switch this process to numba's simulator,
which cannot compile PTX.  It needs the cuda-tools toolchain wheels
(``numba-cuda[cu13]``, ``nvidia-cuda-cuobjdump``, ``nvidia-cuda-nvdisasm``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from outofcore.backends.cuda import report
from tests.helpers import ROOT

SASS = """
        Function : kernel
        /*0000*/                   MOV R1, c[0x0][0x28] ;                 /* 0x000 */
        /*0010*/                   LDS.128 R4, [R2] ;                     /* 0x000 */
        /*0020*/                   FFMA R8, R4, R5, R8 ;                  /* 0x000 */
        /*0030*/                   FFMA R9, R6, R7, R9 ;                  /* 0x000 */
        /*0040*/                   LDS R10, [R2+0x10] ;                   /* 0x000 */
        /*0050*/                   FFMA R8, R10, R10, R8 ;                /* 0x000 */
        /*0060*/                   IADD3 R2, R2, 0x20, RZ ;               /* 0x000 */
        /*0070*/               @P0 BRA 0x10 ;                             /* 0x000 */
        /*0080*/                   FFMA R8, R8, R8, R8 ;                  /* 0x000 */
        /*0090*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;          /* 0x000 */
        /*00a0*/              @!P1 BRA 0x0 ;                              /* 0x000 */
        /*00b0*/                   EXIT ;                                 /* 0x000 */
        /*00c0*/                   BRA 0xc0;                              /* 0x000 */
        /*00d0*/                   NOP;                                   /* 0x000 */
"""

LOG = """ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 127 registers, used 1 barriers
info    : used 127 registers, used 1 barriers, 0 stack, 17408 bytes smem, 745 bytes cmem[0], \
16 bytes lmem
"""


def test_inner_loop_is_the_smallest_loop_with_the_most_fma():
    stats = report.inner_loop(report.parse_sass(SASS), "FFMA")
    assert (stats.start, stats.end) == (0x10, 0x70)
    assert stats.instructions == 7
    assert stats.fma == 3
    assert (stats.shared_loads, stats.shared_loads_128) == (2, 1)
    assert stats.fma_per_lds == 1.5
    assert stats.fma_share == pytest.approx(3 / 7)


#: An interior loop's counts: two wide global loads, and one scalar one with a compare.
SASS_GLOBAL = """
        Function : kernel
        /*0000*/                   LDG.E.128 R4, desc[UR6][R2.64] ;       /* 0x000 */
        /*0010*/                   LDG.E R8, desc[UR6][R2.64+0x10] ;      /* 0x000 */
        /*0020*/                   FFMA R8, R4, R5, R8 ;                  /* 0x000 */
        /*0030*/                   ISETP.GE.U32.OR P1, PT, R9, UR4, P0 ;  /* 0x000 */
        /*0040*/                   LDG.E.128 R12, desc[UR6][R2.64+0x20] ; /* 0x000 */
        /*0050*/                   ISETP.NE.AND P0, PT, R9, UR5, PT ;     /* 0x000 */
        /*0060*/               @P0 BRA 0x0 ;                              /* 0x000 */
"""


def test_global_loads_and_compares_are_counted():
    stats = report.inner_loop(report.parse_sass(SASS_GLOBAL), "FFMA")
    assert (stats.global_loads, stats.global_loads_128, stats.compares) == (3, 2, 2)


def interior(loop: report.LoopStats, turn: int = 2) -> report.VariantReport:
    r = report.VariantReport(
        name="k", dtype="float32", arch="sm_90", params={"turn": turn}, kernel="interior"
    )
    r.compiled, r.loop = True, loop
    report.check(r)
    return r


def test_an_interior_loop_has_only_wide_global_loads_and_its_own_compares():
    good = report.LoopStats(
        instructions=2220, fma=2048, shared_loads=128, global_loads=8, global_loads_128=8
    )
    good.compares = 3  # the loop's own: one a k-tile, and one spare
    assert interior(good).problems == []
    narrow = report.LoopStats(**{**good.__dict__, "global_loads": 10})
    assert interior(narrow).problems == ["2 global loads narrower than 128 bits in the loop"]
    checks = report.LoopStats(**{**good.__dict__, "compares": 4})
    assert interior(checks).problems == ["4 compares in the loop, over 3 (bounds checks?)"]
    slow = report.LoopStats(**{**good.__dict__, "instructions": 2300})
    assert interior(slow).problems == [
        "FFMA share 89.0% < 91.0%",
        "FFMA share 89.0% < 92% at sm_90 (issue 54)",
    ]
    sm80 = report.LoopStats(**{**good.__dict__, "instructions": 2235})  # 91.6 %
    assert interior(sm80).problems == ["FFMA share 91.6% < 92% at sm_90 (issue 54)"]
    r = interior(sm80)
    r.arch, r.problems = "sm_80", []
    report.check(r)
    assert r.problems == []


def test_every_dtype_and_kernel_has_targets():
    assert set(report.TARGETS) == {(kernel, dtype) for dtype, kernel in report.variants()}
    assert report.variants(["complex128"]) == [("complex128", "checked")]


def test_info_log_parsing():
    r = report.VariantReport(name="k", dtype="float32", arch="sm_90", params={})
    report.parse_info_log(LOG, r)
    assert (r.registers, r.spill_stores, r.spill_loads) == (127, 4, 12)
    assert (r.stack_bytes, r.shared_bytes, r.local_bytes) == (8, 17408, 16)
    report.check(r)
    assert any("spills" in p for p in r.problems)
    assert any("FFMA per shared load" in p or "no FMA" in p for p in r.problems)


#: nvJitLink's info log of a kernel without spills that uses 132 registers per thread
LOG_132 = """ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 132 registers, used 1 barriers
info    : used 132 registers, used 1 barriers, 0 stack, 33792 bytes smem, 745 bytes cmem[0], \
0 bytes lmem
"""


def over_the_limit() -> report.VariantReport:
    """A complex128 variant whose log shows 132 registers, checked against 128."""
    r = report.VariantReport(
        name="gemm_complex128_64x64x8_4x4",
        dtype="complex128",
        arch="sm_90",
        params={},
        compiled=True,
        max_registers=128,
    )
    report.parse_info_log(LOG_132, r)
    r.loop = report.LoopStats(instructions=630, fma=512, shared_loads=64, shared_loads_128=64)
    report.check(r)
    return r


def test_registers_over_the_limit_are_a_problem():
    r = over_the_limit()
    assert (r.registers, r.spill_stores, r.spill_loads, r.local_bytes) == (132, 0, 0, 0)
    assert r.problems == [
        "gemm_complex128_64x64x8_4x4 on sm_90 uses 132 registers per thread, "
        "over the limit of 128 (two blocks per SM)"
    ]
    r.registers, r.problems = 128, []  # at the limit: fine
    report.check(r)
    assert r.problems == []


def test_the_report_exits_1_on_a_kernel_over_the_limit(monkeypatch, capsys):
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    monkeypatch.setattr(report, "missing_toolchain", lambda: None)
    monkeypatch.setattr(report, "run", lambda archs, jobs=1: [over_the_limit()])
    assert report.main(["--arch", "sm_90"]) == 1
    out = capsys.readouterr().out
    assert "| gemm_complex128_64x64x8_4x4 | sm_90 | 132 | 0/0 |" in out
    assert (
        "PROBLEM gemm_complex128_64x64x8_4x4 sm_90: gemm_complex128_64x64x8_4x4 on sm_90 "
        "uses 132 registers per thread, over the limit of 128" in out
    )
    assert "OK" not in out


def test_issue_bound_depends_on_the_fma_pipe_width():
    r = report.VariantReport(name="k", dtype="float32", arch="sm_90", params={})
    r.loop = report.LoopStats(instructions=100, fma=80, shared_loads=8)
    assert r.issue_bound == pytest.approx(0.8)  # H100: 32 FP32 lanes per sub-partition
    r.arch = "sm_80"
    assert r.issue_bound == 1.0  # A100: an FFMA takes the 16-lane pipe two clocks


MISSING = report.missing_toolchain()


@pytest.mark.skipif(MISSING is not None, reason=f"cuda-tools toolchain not installed: {MISSING}")
def test_kernels_compile_for_sm90_without_spills_and_meet_targets():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-m", "outofcore.backends.cuda.report", "--json", "--arch", "sm_90"],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    result = json.loads(done.stdout)
    assert result["problems"] == [], result["problems"]
    assert done.returncode == 0
    variants = {(v["kernel"], v["dtype"]): v for v in result["variants"] if v["arch"] == "sm_90"}
    assert set(variants) == set(report.TARGETS)  # 4 checked kernels, 3 interior ones
    for (kernel, dtype), v in variants.items():
        assert v["compiled"], v["error"]
        assert v["spill_stores"] == v["spill_loads"] == v["local_bytes"] == 0
        # registers allow two 256-thread blocks per SM (65536 registers): every dtype
        assert v["max_registers"] == 128
        assert 0 < v["registers"] <= v["max_registers"]
        loop = v["loop"]
        share, per_lds = report.TARGETS[kernel, dtype]
        assert loop["fma_share"] >= share and loop["fma_per_lds"] >= per_lds
        assert loop["shared_loads_128"] == loop["shared_loads"]  # every one 128-bit wide
        if kernel == "interior":  # wide global loads only, no bounds checks
            assert loop["global_loads"] == loop["global_loads_128"] > 0
            assert loop["compares"] <= v["params"]["turn"] + 1
    f32 = variants["interior", "float32"]
    assert f32["loop"]["fma_share"] >= 0.92  # issue 54: FFMA >= 92 % of the loop at sm_90
    assert f32["issue_bound"] >= 0.92
    assert f32["loop"]["float64_ops"] == 0  # accumulates in float32
    assert variants["interior", "complex64"]["loop"]["float64_ops"] == 0  # float32 parts


def test_missing_toolchain_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(report, "find_cuobjdump", lambda: None)
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    assert report.main([]) == 2
    assert "toolchain missing" in capsys.readouterr().err


def test_simulator_cannot_compile(monkeypatch, capsys):
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    assert report.main(["--json"]) == 2
    assert "NUMBA_ENABLE_CUDASIM=1" in capsys.readouterr().err

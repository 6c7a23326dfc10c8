"""The device level of the two-level plan (pure arithmetic, no GPU)."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st

from outofcore import cli
from outofcore.backends.cuda.blocks import KERNEL_BLOCKS
from outofcore.errors import BudgetError, InputError
from outofcore.planner.device_plan import (
    DevicePlan,
    device_bytes,
    job_pcie_bytes,
    kernel_block,
)
from tests.helpers import cuda_device_plan


def simulate_transfers(plan: DevicePlan) -> tuple[int, int]:
    """Bytes the engine's loop moves for ``plan``: panels of ``tk`` (the last one shorter)."""
    w = plan.itemsize
    depths = [plan.tk] * (plan.k // plan.tk) + ([plan.k % plan.tk] if plan.k % plan.tk else [])
    h2d = d2h = 0
    for s, depth in enumerate(depths):
        for r0, r1, c0, c1 in plan.subtiles():
            height, width = r1 - r0, c1 - c0
            if not plan.resident and s > 0:
                h2d += w * height * width  # load C_sub
            for d0 in range(0, depth, plan.dk):
                slice_depth = min(depth, d0 + plan.dk) - d0
                h2d += w * slice_depth * (height + width)
            if not plan.resident:
                d2h += w * height * width  # store C_sub
    if plan.resident:
        d2h += w * plan.tm * plan.tn
    return h2d, d2h


def ab_traffic(tm: int, tn: int, dm: int, dn: int) -> int:
    """A and B elements across PCIe per unit of k."""
    return math.ceil(tn / dn) * tm + math.ceil(tm / dm) * tn


def test_resident_when_the_whole_tile_fits():
    budget = device_bytes(100, 80, 64, 4)
    plan = cuda_device_plan(100, 80, 64, 4, budget, k=640)
    assert plan.resident and (plan.dm, plan.dn, plan.dk) == (100, 80, 64)
    assert (plan.rows, plan.cols, plan.host_panels) == (1, 1, 10)
    assert plan.h2d_bytes == 4 * (100 * 640 + 640 * 80)
    assert plan.d2h_bytes == 4 * 100 * 80
    assert plan.device_bytes == budget


def test_resident_with_slices_shallower_than_the_host_panel():
    """Just room for 16-deep slices (the float32 kernel's depth): still resident, the host
    panel goes in 4 slices."""
    plan = cuda_device_plan(100, 80, 64, 4, device_bytes(100, 80, 16, 4) + 4 * 359)
    assert plan.resident and plan.dk == 16
    more = cuda_device_plan(100, 80, 64, 4, device_bytes(100, 80, 40, 4))
    assert more.resident and more.dk == 32  # slices are multiples of the kernel's depth
    assert cuda_device_plan(100, 80, 64, 4, 10**9).dk == 64  # never deeper than the host panel


def test_sub_tiled_just_below_the_resident_size():
    budget = device_bytes(1000, 1000, 8, 4) - 1
    plan = cuda_device_plan(1000, 1000, 512, 4, budget, k=2048)
    assert not plan.resident
    assert plan.device_bytes <= budget
    panels = 4
    c_bytes = 4 * 1000 * 1000
    assert plan.d2h_bytes == panels * c_bytes
    assert plan.h2d_bytes == (panels - 1) * c_bytes + 4 * 2048 * (
        plan.cols * 1000 + plan.rows * 1000
    )


def test_square_host_tile_gets_square_device_tiles():
    budget = device_bytes(2048, 2048, 256, 4, c_buffers=2)  # sub-tiled: two C buffers
    plan = cuda_device_plan(4096, 4096, 1024, 4, budget, k=8192)
    assert (plan.dm, plan.dn) == (2048, 2048) and plan.dk == 256
    assert (plan.rows, plan.cols) == (2, 2)


def test_tall_host_tile_keeps_its_width():
    plan = cuda_device_plan(20000, 1000, 512, 8, 2**27)
    assert plan.dn == 1000 and plan.dm % 64 == 0 and plan.rows > 1
    assert plan.device_bytes <= 2**27


def test_block_multiples():
    plan = cuda_device_plan(1000, 900, 700, 4, 2 * 2**20)
    assert not plan.resident
    assert plan.dm % 128 == 0 or plan.dm == 1000
    assert plan.dn % 128 == 0 or plan.dn == 900
    assert plan.dk % 16 == 0 or plan.dk == 700
    assert kernel_block(8, KERNEL_BLOCKS) == (64, 64, 16)
    assert kernel_block(16, KERNEL_BLOCKS) == (64, 64, 8)
    with pytest.raises(InputError, match="itemsize = 2: .* elements of 4, 8, 16 bytes"):
        kernel_block(2, KERNEL_BLOCKS)


def test_smallest_device_tile_that_does_not_fit_names_the_bytes():
    needed = device_bytes(8, 8, 4, 4, c_buffers=2)  # 4 * (2*64 + 2*4*16) = 1024
    assert needed == 1024
    assert cuda_device_plan(19, 23, 9, 4, needed, block=(8, 8, 4)).dm == 8
    with pytest.raises(BudgetError, match=r"device budget of 1023 bytes .* needs 1024 bytes"):
        cuda_device_plan(19, 23, 9, 4, needed - 1, block=(8, 8, 4))
    # A transposed operand's scratch slice: 4 * (2*64 + 2*4*16 + 4*8) = 1152.
    with pytest.raises(BudgetError, match=r"needs 1152 bytes .* \+ 4\*8\)"):
        cuda_device_plan(19, 23, 9, 4, 1151, block=(8, 8, 4), transposed=True)
    assert (
        cuda_device_plan(19, 23, 9, 4, 1152, block=(8, 8, 4), transposed=True).device_bytes == 1152
    )
    with pytest.raises(BudgetError, match=r"128x128 with 16-deep .*\(--device-memory\)"):
        cuda_device_plan(4096, 4096, 1024, 4, 81_919)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 5, 5, 4, 100), "tm = 0"),
        ((5, 5, 5, 4, 0), "device budget = 0 bytes"),
        ((5, 5, 1.5, 4, 100), "tk = 1.5"),
    ],
)
def test_bad_input(args, message):
    with pytest.raises(InputError, match=message):
        cuda_device_plan(*args)


def test_job_pcie_bytes_adds_the_host_tiles():
    shapes = [(100, 80), (100, 80), (30, 80), (0, 5)]
    total = job_pcie_bytes(shapes, 64, 640, 4, 70_000, KERNEL_BLOCKS[4])
    one = [cuda_device_plan(m, n, 64, 4, 70_000, k=640).pcie_bytes for m, n in shapes[:3]]
    assert total == sum(one)


def test_summary_is_plain_data():
    summary = cuda_device_plan(300, 200, 100, 8, 200_000, k=250).summary()
    assert summary["mode"] == "sub-tiled"
    assert summary["pcie_bytes_per_tile"] == (
        summary["h2d_bytes_per_tile"] + summary["d2h_bytes_per_tile"]
    )
    assert all(isinstance(v, (int, str, list)) for v in summary.values())


blocks = st.tuples(st.integers(1, 16), st.integers(1, 16), st.integers(1, 8))


@given(
    tm=st.integers(1, 300),
    tn=st.integers(1, 300),
    tk=st.integers(1, 200),
    panels=st.integers(1, 4),
    extra=st.integers(0, 199),
    itemsize=st.sampled_from([4, 8]),
    block=blocks,
    budget=st.integers(1, 2_000_000),
    transposed=st.booleans(),
)
def test_properties(tm, tn, tk, panels, extra, itemsize, block, budget, transposed):
    k = (panels - 1) * tk + min(tk, extra + 1)
    bm, bn, bk = block

    def needs(dm: int, dn: int, dk: int) -> int:  # two C buffers unless resident
        c_buffers = 1 if (dm, dn) == (tm, tn) else 2
        return device_bytes(dm, dn, dk, itemsize, c_buffers=c_buffers, transposed=transposed)

    smallest = needs(min(tm, bm), min(tn, bn), min(tk, bk))
    options = {"k": k, "block": block, "transposed": transposed}
    if smallest > budget:
        with pytest.raises(BudgetError, match=f"needs {smallest} bytes"):
            cuda_device_plan(tm, tn, tk, itemsize, budget, **options)
        return
    plan = cuda_device_plan(tm, tn, tk, itemsize, budget, **options)
    assert plan.device_bytes <= budget
    assert plan.device_bytes == needs(plan.dm, plan.dn, plan.dk)
    assert plan.c_buffers == (1 if plan.resident else 2)
    assert 1 <= plan.dm <= tm and 1 <= plan.dn <= tn and 1 <= plan.dk <= tk
    assert plan.dm % bm == 0 or plan.dm == tm
    assert plan.dn % bn == 0 or plan.dn == tn
    assert plan.dk % bk == 0 or plan.dk == tk
    whole_fits = needs(tm, tn, min(tk, bk)) <= budget
    assert plan.resident == whole_fits
    # The device tiles cover the host tile exactly once.
    cover = np.zeros((tm, tn), dtype=np.int8)
    for r0, r1, c0, c1 in plan.subtiles():
        cover[r0:r1, c0:c1] += 1
    assert (cover == 1).all() and len(plan.subtiles()) == plan.rows * plan.cols
    # The prediction is what the engine's loop moves.
    assert (plan.h2d_bytes, plan.d2h_bytes) == simulate_transfers(plan)
    # No block-aligned tiling with slices as deep moves fewer A and B bytes.
    if not plan.resident:
        best = ab_traffic(tm, tn, plan.dm, plan.dn)
        heights = sorted({*range(bm, tm, bm), tm})
        widths = sorted({*range(bn, tn, bn), tn})
        for dm in heights:
            fitting = [dn for dn in widths if needs(dm, dn, plan.dk) <= budget]
            if fitting:
                assert ab_traffic(tm, tn, dm, fitting[-1]) >= best


# -- the command line ---------------------------------------------------------------------
@pytest.fixture
def operands(tmp_path):
    paths = []
    for name, shape, chunks in (("a", (600, 500), (100, 100)), ("b", (500, 700), (100, 100))):
        path = str(tmp_path / f"{name}.zarr")
        zarr.create_array(path, shape=shape, chunks=chunks, dtype="float32")
        paths.append(path)
    return paths


def test_plan_shows_the_device_tiling(operands, capsys):
    args = ["plan", *operands, "--memory", "2MiB", "--device-memory", "150KiB"]
    assert cli.main([*args, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    device = summary["device"]
    host = cuda_device_plan(*summary["tile"], summary["tk"], 4, 150 * 1024, k=500)
    assert device == {**host.summary(), "pcie_bytes": device["pcie_bytes"]}
    assert device["mode"] == "sub-tiled" and device["device_bytes"] <= 150 * 1024
    per_tile = device["pcie_bytes_per_tile"]
    assert per_tile < device["pcie_bytes"] <= summary["tiles"] * per_tile
    assert cli.main(args) == 0
    text = capsys.readouterr().out
    assert "device tile    " in text and "sub-tiled" in text and "PCIe           " in text
    assert cli.main(["plan", *operands, "--memory", "2MiB"]) == 0
    assert "device tile" not in capsys.readouterr().out


def test_plan_with_too_little_device_memory_names_the_bytes(operands, capsys):
    assert cli.main(["plan", *operands, "--device-memory", "1000B"]) == 2
    assert "device budget of 1000 bytes" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:  # a unit forgotten: argparse refuses it
        cli.main(["plan", *operands, "--device-memory", "1000"])
    assert refused.value.code == 2
    assert "is 1000 bytes: did you mean 1000MiB?" in capsys.readouterr().err


def test_matmul_passes_the_device_memory_to_the_job(operands, monkeypatch, tmp_path):
    from outofcore import api

    seen = {}

    def fake_run_job(a, b, out, spec, **kwargs):
        seen["device_memory"] = spec.device_memory
        return SimpleNamespace(summary={})

    monkeypatch.setattr(api, "run_job", fake_run_job)
    out = str(tmp_path / "c.zarr")
    assert cli.main(["matmul", *operands, "-o", out, "--device-memory", "2GiB", "--json"]) == 0
    assert seen["device_memory"] == 2 * 2**30
    assert cli.main(["matmul", *operands, "-o", out, "--json"]) == 0
    assert seen["device_memory"] is None


def test_plan_of_a_transposed_product_keeps_the_scratch_slice(tmp_path, capsys):
    """--transpose-a: the device plan holds the slice a transposed panel is copied into."""
    a = str(tmp_path / "a.zarr")
    zarr.create_array(a, shape=(500, 600), chunks=(100, 100), dtype="float32")
    args = ["plan", a, a, "--transpose-a", "--memory", "2MiB", "--device-memory", "120KiB"]
    assert cli.main([*args, "--json"]) == 0
    device = json.loads(capsys.readouterr().out)["device"]
    assert device["transposed_scratch"] is True and device["device_bytes"] <= 120 * 1024
    plan = cuda_device_plan(*device["host_tile"], device["host_tk"], 4, 120 * 1024, transposed=True)
    assert device["device_tile"] == [plan.dm, plan.dn] and device["dk"] == plan.dk

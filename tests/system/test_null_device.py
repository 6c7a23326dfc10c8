"""benchmarks.null_device on small inputs: the real panel loop with the timed device's
engine, which only takes the modelled device time, for 1..N decode threads (issue 44,
item 7; the timed device: issue 51, item 2)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from benchmarks import null_device
from benchmarks.null_device import DeviceModel, Sizes
from outofcore.backends.protocol import TileEngine
from outofcore.runtime.cores import usable_cores

SIZES = Sizes(m=768, k=1024, n=512, chunk=128, tile=256, tk=256)
#: A slow modelled device, so its time is a clear part of every task.
SLOW = DeviceModel(kernel_flops=4e9, pcie_bps=2e9)


def modelled_seconds(sizes: Sizes, model: DeviceModel) -> tuple[float, float]:
    """The timed device's kernel and copy seconds over the whole product: kernels, and
    panels in and tiles out."""
    m, k, n, t = sizes.m, sizes.k, sizes.n, sizes.tile
    tiles_down, tiles_across = math.ceil(m / t), math.ceil(n / t)
    panel_bytes = 4 * k * (m * tiles_across + n * tiles_down)  # each tile reads its rows, cols
    return 2 * m * n * k / model.kernel_flops, (panel_bytes + 4 * m * n) / model.pcie_bps


def test_the_table_holds_for_every_thread_count(tmp_path):
    rows = null_device.run(tmp_path, SIZES, SLOW)
    assert [row.threads for row in rows] == null_device.thread_counts()
    assert rows[-1].threads == usable_cores() and rows[0].threads == 1
    kernel, copies = modelled_seconds(SIZES, SLOW)
    device = kernel + copies
    for row in rows:
        figures = row.as_dict()
        assert all(math.isfinite(v) for v in figures.values() if isinstance(v, float)), figures
        assert row.tasks == 3 * 2
        # The engine's modelled time is in the tasks' figures; its kernels and copies overlap
        # (streams), and the waits are real: the tasks take at least the slower of them.
        assert row.device_s == pytest.approx(device, rel=1e-6)
        assert max(kernel, copies) <= row.measured_s
        assert 0 <= row.read_wait_s < row.measured_s and 0 <= row.read_wait_pct < 100
        assert row.decode_gb_s > 0 and row.write_gb_s > 0
        assert row.predicted_s >= device / 2  # the model's compute and PCIe streams overlap
        assert row.ratio == row.measured_s / row.predicted_s
    for row in rows[1:]:  # more threads never make decoding much slower
        assert row.decode_gb_s >= 0.5 * rows[0].decode_gb_s


def test_the_command_prints_the_table_and_writes_the_rows(tmp_path, capsys):
    out = tmp_path / "rows.json"
    argv = ["--size", "512", "--chunk", "128", "--tile", "256", "--tk", "128", "--threads", "1"]
    argv += ["--kernel-tflops", "0.004", "--data-dir", str(tmp_path), "--json", str(out)]
    assert null_device.main(argv) == 0
    printed = capsys.readouterr().out
    header = "| threads | decode GB/s | predicted task s | measured task s | read wait % | ratio |"
    assert header in printed
    assert re.search(
        r"^\| 1 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9]+ \| [0-9.]+ \|$", printed, re.M
    )
    report = json.loads(out.read_text())
    assert report["model"] == pytest.approx({"kernel_flops": 4e9, "pcie_bps": 55e9})
    assert [row["threads"] for row in report["rows"]] == [1]
    assert report["rows"][0]["device_s"] >= 2 * 512**3 / 4e9


def test_the_benchmark_engine_is_the_timed_device_touching_no_data():
    """The engine is the device engine on a timed device of the model that only waits: its
    timings are the modelled ones, its tile the device's noise (finite, not zero)."""
    engine: TileEngine = null_device.make_engine(DeviceModel(kernel_flops=1e9, pcie_bps=1e9))
    assert not engine.device.arithmetic and not engine.capabilities.row_blocks
    null_device.warm(engine, (64, 32), np.dtype(np.float32))
    engine.start_tile((64, 32), np.dtype(np.float32))
    engine.accumulate(np.ones((64, 100), np.float32), np.ones((100, 32), np.float32))
    tile = engine.finish_tile()
    assert tile.shape == (64, 32) and tile.dtype == np.float32
    assert np.isfinite(tile).all() and np.count_nonzero(tile) > 0.9 * tile.size
    timings = engine.timings()
    assert timings["kernel_seconds"] == pytest.approx(2 * 64 * 32 * 100 / 1e9)
    assert timings["copy_seconds"] == pytest.approx(4 * (64 * 100 + 100 * 32 + 64 * 32) / 1e9)
    with pytest.raises(ValueError, match="positive"):
        DeviceModel(kernel_flops=0)

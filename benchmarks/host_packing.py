"""Host time to send a transposed panel to the GPU: packing it (before) against one 2-D copy.

A transposed operand (``--transpose-a``, every diagonal Gram tile) reaches the CUDA
engine as a strided view of the panel as stored.  The engine used to pack it into
pinned memory with ``np.copyto`` in the task thread (the ``Stager``), 8 MiB at a time;
it now describes one ``cuMemcpy2DAsync`` of the panel as stored and transposes it on
the device (``outofcore.backends.cuda.buffers.copy_to_device``).  This measures, on the CPU and
without a GPU, the host's share of each: the packing copy, and building the 2-D copy's
descriptor (``describe_2d_copy``) with the layout test.  The driver call and the
transpose kernel's launch add a few microseconds each on a GPU node
(``python -m tools.gpu_check`` measures the engine's host CPU time per panel there).

    python -m benchmarks.host_packing                 # 16384 x 2048 float32, 9 repeats
    python -m benchmarks.host_packing --rows 4096 --depth 512 --json out.json

Exits 1 when the 2-D copy's host time is not at least 10x below the packing's.

Internal floor: it times ``outofcore.backends.cuda.buffers.describe_2d_copy`` and
``outofcore.backends.device.buffers`` (``layout``, ``STAGE_BYTES``) themselves.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from benchmarks.harness.reports import save_json
from outofcore.backends.cuda.buffers import describe_2d_copy
from outofcore.backends.device.buffers import STAGE_BYTES, layout


def median_seconds(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=16384, help="rows of the panel (m)")
    parser.add_argument("--depth", type=int, default=2048, help="columns of the panel (k)")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    stored = rng.standard_normal((args.depth, args.rows), dtype=np.float32)  # A as stored
    panel = stored.T  # what the engine gets: rows x depth, strided
    staged = np.empty(panel.shape, dtype=panel.dtype)
    per = max(1, STAGE_BYTES // (panel.shape[1] * panel.itemsize))

    def pack() -> None:  # the Stager's host work: 8 MiB parts copied into pinned buffers
        for r0 in range(0, panel.shape[0], per):
            np.copyto(staged[r0 : r0 + per], panel[r0 : r0 + per])

    def describe() -> None:  # the 2-D copy's host work: the layout and one descriptor
        if layout(panel) != "columns":
            raise SystemExit(f"unexpected layout {layout(panel)}")
        describe_2d_copy(panel.T, 1 << 40)

    packing = median_seconds(pack, args.repeats)
    copy_2d = median_seconds(describe, max(args.repeats, 101))
    if not np.array_equal(staged, panel):
        raise SystemExit("the packed panel differs from the view")
    ratio = packing / copy_2d
    result = {
        "panel": [args.rows, args.depth],
        "dtype": "float32",
        "bytes": int(panel.nbytes),
        "packing_ms": packing * 1e3,
        "two_d_copy_host_ms": copy_2d * 1e3,
        "ratio": ratio,
    }
    print(
        f"transposed {args.rows}x{args.depth} float32 panel ({panel.nbytes / 2**20:.0f} MiB): "
        f"packing {packing * 1e3:.1f} ms, 2-D copy descriptor {copy_2d * 1e6:.1f} us on the "
        f"host: {ratio:,.0f}x less host time (medians of {args.repeats} and "
        f"{max(args.repeats, 101)})"
    )
    if args.json:
        save_json(args.json, result, indent=1)
    return 0 if ratio >= 10 else 1


if __name__ == "__main__":
    sys.exit(main())

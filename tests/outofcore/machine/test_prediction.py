"""The probe's figures turned into the model's machine (issue 21, item 6): the kernel
rate by dtype and product size, the codecs, the cores shared, the job's start."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest

from outofcore.machine import prediction, probe
from outofcore.machine.prediction import local_machine
from tests.outofcore.machine.test_probe import FIGURES

SIZED = replace(FIGURES, sgemm_flops=4e9, sgemm_small_flops=1e9, dgemm_small_flops=5e8)
SMALL, LARGE = prediction._side(probe.GEMM_SMALL), prediction._side(probe.GEMM_LARGE)
MIDDLE = (SMALL * LARGE) ** 0.5


@pytest.mark.parametrize(
    ("dtype", "size", "kernel"),
    [
        (np.float32, SMALL / 4, 1e9),  # no smaller than the small product measured
        (np.float32, SMALL, 1e9),
        (np.float32, MIDDLE, 2e9),  # halfway by the logarithm: the geometric mean
        (np.float32, LARGE, 4e9),
        (np.float32, 4 * LARGE, 4e9),  # no larger than the large one
        (np.float64, SMALL, 5e8),
        (np.float64, MIDDLE, 1e9),  # dgemm grows as sgemm does
        (np.complex64, LARGE, 1e9),  # four real multiply-adds per complex one
        (np.complex128, SMALL, 5e8 / 4),
    ],
)
def test_the_kernel_rate_follows_the_dtype_and_the_size_of_the_products(dtype, size, kernel):
    assert prediction.kernel_flops(SIZED, np.dtype(dtype), size) == pytest.approx(kernel, rel=1e-12)
    cores = os.cpu_count() or 1
    machine = local_machine(replace(SIZED, threads=cores), 1, np.dtype(dtype), size)
    assert machine.kernel_flops == pytest.approx(kernel, rel=1e-12)
    assert machine.workers == 1 and machine.pcie_bps is None and machine.network_bps is None
    assert machine.overlap == SIZED.overlap


def test_the_machine_takes_the_codecs_and_shares_the_cores():
    cores = os.cpu_count() or 1
    figures = replace(FIGURES, threads=1)
    plain = local_machine(figures, cores, np.float32, SMALL, inputs_compressed=False)
    assert plain.decode_bps == FIGURES.raw_read_bps and plain.compression == 1.0
    assert plain.encode_bps == FIGURES.raw_write_bps
    zstd = local_machine(figures, cores, np.float32, SMALL, output_compressed=True)
    assert zstd.decode_bps == FIGURES.zstd_decode_bps and zstd.compression == 0.9
    assert zstd.encode_bps == FIGURES.zstd_encode_bps
    # Four times as many single-threaded workers as cores: each gets a quarter.
    crowded = local_machine(figures, 4 * cores, np.float32, SMALL)
    assert crowded.kernel_flops == pytest.approx(FIGURES.sgemm_flops / 4)
    assert crowded.decode_bps == pytest.approx(FIGURES.zstd_decode_bps / 4)
    start = prediction.JOB_START_CPU_SECONDS + prediction.WORKER_START_CPU_SECONDS
    assert crowded.start_seconds == pytest.approx(start / FIGURES.cpu_share)
    assert crowded.task_seconds == prediction.TASK_CPU_SECONDS / FIGURES.cpu_share
    alone = local_machine(figures, 1, np.float32, SMALL, worker_processes=False)
    assert alone.start_seconds == pytest.approx(
        prediction.JOB_START_CPU_SECONDS / FIGURES.cpu_share
    )

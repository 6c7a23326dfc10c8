"""The planner knows the device pipeline (issue 52, item 3): with one output tile in flight
a GPU worker's writes follow its loops; with two or more the copies back and writes are a
stream beside the loops and only one tile's share is exposed, and the tiling then prefers
tiles enough per device to hide the write."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from outofcore.errors import InputError
from outofcore.planner.gpu_rates import device_pipeline, gpu_seconds
from outofcore.planner.model import gpu_machine, predict
from outofcore.planner.problem import Problem
from outofcore.planner.tiling import make_output_plan
from tests.helpers import cuda_target

GiB = 2**30


def square(n: int, chunk: int, k: int | None = None) -> Problem:
    k = n if k is None else k
    return Problem(m=n, k=k, n=n, itemsize=4, a_chunks=(chunk, chunk), b_chunks=(chunk, chunk))


def slow_writer(tiles_in_flight: int, write_bps: float = 2e9):
    """Our kernel's rates with a disk that writes slowly: the write is comparable to the
    loop, or longer."""
    return replace(cuda_target("float32", tiles_in_flight=tiles_in_flight), write_bps=write_bps)


def test_the_pipeline_exposes_every_write_with_one_tile_in_flight_and_one_share_with_more():
    assert device_pipeline(3.0, 2.0, 4, 1) == (3.0, 2.0)  # loops, then every write
    assert device_pipeline(3.0, 2.0, 4, 2) == (3.0, 0.5)  # the last tile's write
    assert device_pipeline(2.0, 3.0, 4, 2) == (3.0, 0.5)  # write-bound: the first loop
    assert device_pipeline(3.0, 2.0, 1, 3) == (3.0, 2.0)  # one tile: nothing hides it
    assert device_pipeline(3.0, 2.0, 0, 2) == (3.0, 2.0)


@pytest.mark.parametrize("in_flight", [1, 2, 3])
def test_a_gpu_prediction_exposes_what_the_pipeline_does_not_hide(in_flight):
    gpu = slow_writer(in_flight)
    plan = make_output_plan(square(16384, 2048), 2 * GiB, 4, gpu=gpu, tile=(4096, 4096))
    p = predict(plan, gpu_machine(gpu, 4, 8, name="node", disk_bps=1e12))
    tiles = math.ceil(len(plan.tasks) / 4)
    written = plan.bytes_written / 4
    output = written / gpu.write_bps + written / gpu.pcie_bps
    loop = max(p.compute, p.decode, p.pcie, p.disk, p.scratch)
    assert tiles == 4 and p.tiles_in_flight == in_flight and p.write > 0
    slowest, exposed = device_pipeline(loop, output, tiles, in_flight)
    assert p.exposed == pytest.approx(exposed)
    assert p.seconds == pytest.approx(slowest + exposed + p.fill + p.start)
    if in_flight == 1:
        assert p.exposed == pytest.approx(output)  # the device idles for every write
    else:
        assert p.exposed == pytest.approx(min(loop, output) / tiles)  # one tile's share


def test_two_tiles_in_flight_are_predicted_faster_where_the_write_is_comparable_to_the_loop():
    problem = square(16384, 2048)
    serial, pipelined = slow_writer(1), slow_writer(2)
    plan = make_output_plan(problem, 2 * GiB, 1, gpu=serial, tile=(4096, 4096))
    one = predict(plan, gpu_machine(serial, 1, 8, name="a", disk_bps=1e12))
    two = predict(plan, gpu_machine(pipelined, 1, 8, name="b", disk_bps=1e12))
    assert two.seconds < 0.8 * one.seconds
    # The tiling's own estimate counts the same way.
    args = (problem, 4096, 4096, 2048, 1, 1, 8)
    assert gpu_seconds(*args, pipelined) < 0.8 * gpu_seconds(*args, serial)


def test_with_tiles_in_flight_the_plan_cuts_tiles_enough_per_device_to_hide_the_write():
    """A product whose write is as long as its loop, and whose whole output fits one tile
    per device: with one tile in flight nothing overlaps whatever the tiling, so the fewest
    reads win (one tile); with two in flight the planner cuts more tiles, so that the loops
    hide behind the writes."""
    problem = square(8192, 1024, k=8192)
    serial = make_output_plan(problem, 8 * GiB, 1, gpu=slow_writer(1, 1e9), io_concurrency=16)
    pipelined = make_output_plan(problem, 8 * GiB, 1, gpu=slow_writer(2, 1e9), io_concurrency=16)
    assert len(serial.tasks) == 1
    assert len(pipelined.tasks) >= 2


def test_tiles_in_flight_must_be_a_positive_integer():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InputError, match="tiles in flight"):
            cuda_target("float32", tiles_in_flight=bad)

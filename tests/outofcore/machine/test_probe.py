"""The machine probe (issue 21, item 6): its real measurements through the job's paths,
and its figures' round trip through a cache entry.  The cache is tested in
``test_probe_cache.py``, the figures turned into the model's machine in
``test_prediction.py``."""

from __future__ import annotations

import json

import numpy as np
import zarr

from outofcore.machine import probe
from outofcore.machine.probe import Figures

FIGURES = Figures(
    measured="2026-11-24T10:00:00+00:00",
    threads=2,
    sgemm_flops=1e9,
    sgemm_small_flops=1e9,
    dgemm_small_flops=5e8,
    zstd_decode_bps=1e8,
    zstd_encode_bps=5e7,
    raw_read_bps=4e8,
    raw_write_bps=2e8,
    disk_read_bps=1e9,
    disk_unbuffered=True,
    compression=0.9,
    overlap=0.25,
    cpu_share=0.5,
    rounds=3,
    load=1.5,
    seconds=1.2,
)


def test_a_real_probe_measures_every_rate_through_the_jobs_paths(monkeypatch):
    monkeypatch.setattr(probe, "PROBE_SECONDS", 0.05)  # the least: MIN_ROUNDS rounds
    before = {key: zarr.config.get(key) for key in ("threading.max_workers", "async.concurrency")}
    figures = probe.probe(1)
    assert figures.threads == 1 and figures.rounds >= probe.MIN_ROUNDS
    rates = [figures.sgemm_flops, figures.sgemm_small_flops, figures.dgemm_small_flops]
    rates += [figures.zstd_decode_bps]
    rates += [figures.zstd_encode_bps, figures.raw_read_bps, figures.raw_write_bps]
    assert all(np.isfinite(rate) and rate > 0 for rate in [*rates, figures.disk_read_bps])
    assert 0 < figures.cpu_share <= 1 and 0 <= figures.overlap <= 1
    # zstd on standard normal float32 saves a little: about 8% (docs/performance.md).
    assert 0.8 < figures.compression < 1.0
    assert isinstance(figures.disk_unbuffered, bool)
    assert Figures.from_dict(json.loads(json.dumps(figures.as_dict()))) == figures
    assert {key: zarr.config.get(key) for key in before} == before  # zarr's settings restored

"""benchmarks.prediction end to end on small inputs: ``outofcore plan --reprobe`` and the
job, back to back, for the demo's case and the 8192² one (issue 21, item 6)."""

from __future__ import annotations

import json
from importlib import import_module

from outofcore.machine.probe_cache import CACHE_NAME


def test_the_prediction_benchmark_pairs_each_plan_with_its_job(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the processes' probe cache
    prediction = import_module("benchmarks.prediction")
    out = tmp_path / "pairs.json"
    argv = ["--scale", "16", "--repeats", "1", "--dir", str(tmp_path / "data"), "--json", str(out)]
    pairs = prediction.main(argv)
    assert json.loads(out.read_text()) == pairs
    assert [(p["case"], p["round"]) for p in pairs] == [("demo/16", 1), ("8192/16", 1)]
    for pair in pairs:
        assert pair["predicted"] > 0 and pair["measured"] > 0
        assert pair["ratio"] == pair["measured"] / pair["predicted"]
        assert pair["bottleneck"] in ("cores", "disk")
        assert set(pair["streams"]) == set(prediction.STREAMS)
        assert pair["figures"]["sgemm_flops"] > 0 and pair["figures"]["threads"] >= 1
        assert pair["job"]["tiles"] >= 1
    # Each plan measured this machine anew (--reprobe) into the cache the jobs' plans use.
    cached = json.loads((tmp_path / "cache" / "outofcore" / CACHE_NAME).read_text())
    assert pairs[-1]["figures"] in cached["figures"].values()
    assert pairs[0]["figures"]["measured"] <= pairs[1]["figures"]["measured"]

"""``outofcore plan`` predicts this machine from its probe's figures (issue 21, item 6):
the figures injected through the cache, the predicted seconds follow them by the model's
arithmetic, ``--json`` carries them, the assumed machines are what-ifs."""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace

import pytest

from outofcore import cli
from outofcore.frontends.generate import random_array
from outofcore.machine import prediction, probe, probe_cache
from outofcore.runtime.worker_sizing import local_blas_threads
from tests.helpers import unwrapped
from tests.outofcore.machine.test_probe import FIGURES


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """Inputs of several tiles, and a cache holding :data:`FIGURES` for this machine."""
    random_array(tmp_path / "a.zarr", (300, 400), (50, 100), seed=1)
    random_array(tmp_path / "b.zarr", (400, 250), (100, 50), seed=2)
    random_array(tmp_path / "a64.zarr", (300, 400), (50, 100), "float64", seed=3)
    random_array(tmp_path / "b64.zarr", (400, 250), (100, 50), "float64", seed=4)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    inject(FIGURES)
    return tmp_path


def inject(figures, threads=None):
    """Cache ``figures`` for this machine's identity (for a worker's threads)."""
    threads = threads or local_blas_threads(1)
    probe_cache.machine_figures(
        threads, reprobe=True, measure=lambda t: replace(figures, threads=t)
    )


def plan(capsys, *args):
    assert cli.main(["plan", *args]) == 0
    return capsys.readouterr().out


def within_columns(text: str) -> bool:
    """Every line within 100 columns, but a word longer than that (a long path) alone."""
    return all(len(line) <= 100 or " " not in line.strip() for line in text.splitlines())


def plan_json(capsys, *args):
    return json.loads(plan(capsys, *args, "--json"))


def expected_seconds(p, figures, kernel, encode=None, worker_processes=False):
    """The model's arithmetic by hand: one busy worker, every core to BLAS (by default in
    the job's process)."""
    encode = encode or figures.raw_write_bps
    compute = p["flops"] / kernel
    codecs = p["bytes_read"] / figures.zstd_decode_bps + p["bytes_written"] / encode
    cores = compute + codecs - figures.overlap * min(compute, codecs)
    disk = figures.compression * (p["bytes_read"] + p["bytes_written"]) / figures.disk_read_bps
    tasks = p["tiles"]
    first = p["itemsize"] * p["tk"] * (p["tile"][0] + p["tile"][1])
    per_byte = figures.compression / figures.disk_read_bps
    per_byte += figures.overlap / figures.zstd_decode_bps
    fill = tasks * first * per_byte
    start = prediction.JOB_START_CPU_SECONDS + tasks * prediction.TASK_CPU_SECONDS
    start += prediction.WORKER_START_CPU_SECONDS if worker_processes else 0
    return max(cores, disk) + fill + start / figures.cpu_share


def test_the_local_prediction_follows_the_injected_figures(folder, capsys):
    p = plan_json(capsys, "a.zarr", "b.zarr", "--memory", "600KiB")
    assert p["tiles"] > 1 and p["workers"] == 1
    local = p["predicted"][0]
    assert local["basis"] == "measured" and local["machine"] == "this machine"
    assert local["compute"] == pytest.approx(p["flops"] / FIGURES.sgemm_flops, rel=1e-12)
    assert local["decode"] == pytest.approx(p["bytes_read"] / FIGURES.zstd_decode_bps, rel=1e-12)
    assert local["seconds"] == pytest.approx(expected_seconds(p, FIGURES, 1e9), rel=1e-12)
    # Twice the BLAS rate: the compute stream halves, the total follows the arithmetic.
    fast = replace(FIGURES, sgemm_flops=2e9, sgemm_small_flops=2e9)
    inject(fast)
    faster = plan_json(capsys, "a.zarr", "b.zarr", "--memory", "600KiB")["predicted"][0]
    assert faster["compute"] == pytest.approx(local["compute"] / 2, rel=1e-12)
    assert faster["seconds"] == pytest.approx(expected_seconds(p, fast, 2e9), rel=1e-12)
    assert faster["seconds"] < local["seconds"]
    # Hidden decoding: with none the cores add up, with all only the longer counts.
    for overlap in (0.0, 1.0):
        inject(replace(FIGURES, overlap=overlap))
        q = plan_json(capsys, "a.zarr", "b.zarr", "--memory", "600KiB")["predicted"][0]
        codecs = q["decode"] + q["write"]
        added = q["compute"] + codecs
        assert q["cores"] == pytest.approx(added if overlap == 0 else max(q["compute"], codecs))
    # A busier machine: the start and the tasks' own costs grow with 1 / the core's share.
    busy = replace(FIGURES, cpu_share=FIGURES.cpu_share / 4)
    inject(busy)
    slower = plan_json(capsys, "a.zarr", "b.zarr", "--memory", "600KiB")["predicted"][0]
    assert slower["start"] == pytest.approx(4 * local["start"], rel=1e-12)
    assert slower["seconds"] == pytest.approx(expected_seconds(p, busy, 1e9), rel=1e-12)


def test_float64_products_and_zstd_outputs_take_their_own_rates(folder, capsys):
    p = plan_json(capsys, "a64.zarr", "b64.zarr", "--memory", "1MiB", "--output-codec", "zstd")
    local = p["predicted"][0]
    assert local["compute"] == pytest.approx(p["flops"] / FIGURES.dgemm_small_flops, rel=1e-12)
    assert local["write"] == pytest.approx(p["bytes_written"] / FIGURES.zstd_encode_bps, rel=1e-12)
    expected = expected_seconds(p, FIGURES, 5e8, encode=FIGURES.zstd_encode_bps)
    assert p["tile"][0] * p["tile"][1] * p["tk"] < 1024**3  # small products: the small rate
    assert local["seconds"] == pytest.approx(expected, rel=1e-12)


def test_plan_json_carries_the_figures_and_the_cache(folder, capsys):
    p = plan_json(capsys, "a.zarr", "b.zarr", "--memory", "600KiB")
    machine = p["machine"]
    threads = local_blas_threads(1)
    assert machine["figures"] == replace(FIGURES, threads=threads).as_dict()
    assert machine["identity"] == probe_cache.machine_identity()
    assert machine["cache"] == str(folder / "cache" / "outofcore" / "machine.json")
    assert machine["probed_now"] is False and machine["probed_because"] is None
    assert machine["runs_here"] is True and machine["note"] is None
    bases = [x["basis"] for x in p["predicted"]]
    assert bases[0] == "measured" and set(bases[1:]) == {"assumed"} and len(bases) > 1


def test_the_text_says_where_the_figures_come_from(folder, capsys):
    text = plan(capsys, "a.zarr", "b.zarr", "--memory", "600KiB", "--verbose")
    assert within_columns(text)
    lines = unwrapped(text).splitlines()  # each line with its continuations, to read whole
    (predicted,) = [line for line in lines if line.startswith("  predicted time")]
    assert "this machine (1 of 1 worker(s) busy), bound by cores" in predicted
    (measured,) = [line for line in lines if line.startswith("  this machine")]
    assert "measured 2026-11-24 10:00 UTC" in measured
    assert "load 1.5" in measured and "--reprobe" in measured and "share of a core 0.50" in measured
    # The rates follow on the lines under it.
    assert "sgemm 1.0 GFLOP/s (1.0 at 1024³), dgemm 0.5 GFLOP/s at 1024³" in measured
    assert "decode 100 MB/s zstd, 400 uncompressed (25% hidden behind BLAS)" in measured
    what_if = lines.index(
        "  what if        (assumed rates, not measured: outofcore/planner/model.py)"
    )
    assert "gpu-node" in lines[what_if + 1]
    assert "ci-2core" not in text  # no preset stands for this machine any more


def test_without_verbose_the_plan_names_where_the_details_are(folder, capsys):
    text = plan(capsys, "a.zarr", "b.zarr", "--memory", "600KiB")
    assert "predicted time" in text and "  details        --verbose" in text
    assert "sgemm" not in text and "gpu-node" not in text
    assert within_columns(text)
    assert plan(capsys, "a.zarr", "b.zarr", "--memory", "600KiB", "--quiet") == ""


def test_a_probe_taken_under_load_is_said_to_be(folder, capsys):
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    inject(replace(FIGURES, load=2.0 * cores))
    text = unwrapped(plan(capsys, "a.zarr", "b.zarr", "--memory", "600KiB"))
    (said,) = [line for line in text.splitlines() if "measured under load" in line]
    assert f"measured under load {2.0 * cores:.1f} (2.00 per core)" in said
    assert "may be low" in said and "--reprobe on a quiet machine" in said
    machine = plan_json(capsys, "a.zarr", "b.zarr", "--memory", "600KiB")["machine"]
    assert machine["under_load"] is True and machine["load_per_core"] == pytest.approx(2.0)
    for quiet in (0.4 * cores, None):  # at most half a core busy elsewhere, or unknown
        inject(replace(FIGURES, load=quiet))
        assert "under load" not in plan(capsys, "a.zarr", "b.zarr", "--memory", "600KiB")
        assert (
            plan_json(capsys, "a.zarr", "b.zarr", "--memory", "600KiB")["machine"]["under_load"]
            is False
        )


def test_workers_get_their_share_of_the_cores(folder, capsys):
    workers = 2 * (os.cpu_count() or 1)  # more single-threaded workers than cores
    inject(FIGURES, threads=1)
    options = ["--memory", "600KiB", "--workers", str(workers), "--splits", "1"]
    p = plan_json(capsys, "a.zarr", "b.zarr", *options)
    local = p["predicted"][0]
    assert p["machine"]["figures"]["threads"] == 1
    busy = min(workers, p["tiles"])
    assert local["busy_workers"] == busy
    assert local["decode"] == pytest.approx(p["bytes_read"] / busy / (FIGURES.zstd_decode_bps / 2))
    tasks = math.ceil(p["tiles"] / busy)
    # In this process: no worker process starts.
    start = prediction.JOB_START_CPU_SECONDS + tasks * prediction.TASK_CPU_SECONDS
    assert p["machine"]["worker_processes"] is False
    assert local["start"] == pytest.approx(start / FIGURES.cpu_share, rel=1e-12)


def test_worker_processes_pay_their_imports_first(folder, capsys, outofcore_settings):
    """One CPU worker runs in the job's process (nothing to import); with
    OUTOFCORE_IN_PROCESS_WORKER=0 it is a process, whose first task imports the task's
    modules: the prediction's start grows by that; ``sync`` is this process too."""
    options = ["a.zarr", "b.zarr", "--memory", "600KiB"]
    here = plan_json(capsys, *options)
    assert here["machine"]["worker_processes"] is False
    assert (
        plan_json(capsys, *options, "--scheduler", "sync")["machine"]["worker_processes"] is False
    )
    outofcore_settings(in_process_worker=False)  # OUTOFCORE_IN_PROCESS_WORKER=0
    apart = plan_json(capsys, *options)
    assert apart["machine"]["worker_processes"] is True
    extra = prediction.WORKER_START_CPU_SECONDS / FIGURES.cpu_share
    assert apart["predicted"][0]["start"] == pytest.approx(here["predicted"][0]["start"] + extra)
    expected = expected_seconds(apart, FIGURES, 1e9, worker_processes=True)
    assert apart["predicted"][0]["seconds"] == pytest.approx(expected, rel=1e-12)


def test_a_job_elsewhere_is_a_what_if_for_this_machine(folder, capsys):
    """A scheduler elsewhere is asked for its workers (the plan is theirs); this machine's
    prediction is then a what-if."""
    from distributed import LocalCluster  # noqa: PLC0415

    with LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        p = plan_json(capsys, "a.zarr", "b.zarr", "--scheduler", address)
        assert p["machine"]["runs_here"] is False and address in p["machine"]["note"]
        assert p["workers"] == 1 and p["threads_per_worker"] == 2
        assert p["task_budget_bytes"] == p["worker_budget_bytes"] // 2
        text = plan(capsys, "a.zarr", "b.zarr", "--scheduler", address)
    assert "if run here" in text and f"(a what-if: the job runs on the workers of {address}" in text


def test_a_scheduler_that_does_not_answer_is_refused_as_the_job_refuses_it(
    folder, capsys, monkeypatch
):
    monkeypatch.setenv("OUTOFCORE_CONNECT_TIMEOUT", "1")
    address = "tcp://127.0.0.1:9"  # discard: nothing answers
    assert cli.main(["plan", "a.zarr", "b.zarr", "--scheduler", address]) == 2
    said = capsys.readouterr().err
    assert "no Dask scheduler answered" in said and address in said


def test_reprobe_measures_this_machine_for_real(folder, capsys, monkeypatch):
    monkeypatch.setattr(probe, "PROBE_SECONDS", 0.05)  # the least: MIN_ROUNDS rounds
    p = plan_json(capsys, "a.zarr", "b.zarr", "--memory", "600KiB", "--reprobe")
    machine = p["machine"]
    assert machine["probed_now"] and machine["probed_because"] == "asked to measure again"
    assert machine["figures"]["sgemm_flops"] != FIGURES.sgemm_flops  # measured, not injected
    cached = json.loads((folder / "cache" / "outofcore" / "machine.json").read_text())
    assert cached["figures"][str(local_blas_threads(1))] == machine["figures"]
    again = plan_json(capsys, "a.zarr", "b.zarr", "--memory", "600KiB")
    assert again["machine"]["probed_now"] is False
    assert again["predicted"][0]["seconds"] == p["predicted"][0]["seconds"]

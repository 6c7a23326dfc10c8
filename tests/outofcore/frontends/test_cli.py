"""The ``outofcore`` command end to end, as a user runs it (subprocesses)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
import zarr

from outofcore.frontends.generate import random_array
from tests.helpers import assert_product_close, break_chunk, restore_chunk, unwrapped


def outofcore(*args: str, cwd=None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "outofcore.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def test_random_plan_matmul_verify_on_ragged_chunks_with_a_64mib_budget(tmp_path):
    a, b, c = (str(tmp_path / name) for name in ("a.zarr", "b.zarr", "c.zarr"))
    made = outofcore("random", a, "--shape", "3000,2000", "--chunks", "700,450", "--seed", "1")
    assert made.returncode == 0, made.stderr
    made = outofcore("random", b, "--shape", "2000,2500", "--chunks", "300,600", "--seed", "2")
    assert made.returncode == 0, made.stderr

    plan = outofcore("plan", a, b, "--memory", "64MiB", "--json")
    assert plan.returncode == 0, plan.stderr
    planned = json.loads(plan.stdout)
    assert planned["task_bytes"] <= 64 * 2**20
    assert planned["symmetric"] is False
    assert "symmetric" not in outofcore("plan", a, b, "--memory", "64MiB").stdout
    assert planned["tile"][0] % 700 == 0 or planned["tile"][0] == 3000

    run = outofcore("matmul", a, b, "-o", c, "--memory", "64MiB", "--workers", "2", "--json")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    for key in (
        "tiles",
        "tiles_skipped",
        "seconds",
        "gflops",
        "bytes_read",
        "bytes_written",
        "io_lower_bound",
        "peak_worker_bytes",
    ):
        assert key in summary
    assert summary["tiles"] >= 2 and summary["tiles_skipped"] == 0
    assert summary["bytes_written"] == 3000 * 2500 * 4
    assert summary["bytes_read"] >= summary["io_lower_bound"]
    assert summary["peak_worker_bytes"] > 0

    a_np = zarr.open_array(a, mode="r")[...]
    b_np = zarr.open_array(b, mode="r")[...]
    assert_product_close(zarr.open_array(c, mode="r")[...], a_np, b_np)

    checked = outofcore("verify", a, b, c, "--json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert json.loads(checked.stdout)["passed"] is True

    # A budget too small is refused with the numbers, exit status 2, nothing written.
    small = outofcore("matmul", a, b, "-o", str(tmp_path / "d.zarr"), "--memory", "4MiB")
    assert small.returncode == 2
    assert "budget of 4194304 bytes (4.0 MiB) is too small" in small.stderr
    assert "needs" in small.stderr and "700x600" in small.stderr
    assert not (tmp_path / "d.zarr").exists()

    # The human summary.
    again = outofcore(
        "matmul", a, b, "-o", c, "--memory", "64MiB", "--scheduler", "sync", "--overwrite"
    )
    assert again.returncode == 0, again.stderr
    assert "GFLOP/s" in again.stdout
    assert "lower bound" in again.stdout


def test_verify_exits_one_on_a_wrong_product(tmp_path):
    rng = np.random.default_rng(0)
    a_np = rng.standard_normal((50, 40)).astype("f4")
    b_np = rng.standard_normal((40, 30)).astype("f4")
    for name, data in (("a", a_np), ("b", b_np), ("c", a_np @ b_np)):
        zarr.create_array(
            str(tmp_path / f"{name}.zarr"), shape=data.shape, chunks=(16, 16), dtype="f4"
        )[...] = data
    paths = [str(tmp_path / f"{x}.zarr") for x in "abc"]
    right = outofcore("verify", *paths, "--quiet")  # the exit status says it
    assert (right.returncode, right.stdout, right.stderr) == (0, "", "")
    c = zarr.open_array(str(tmp_path / "c.zarr"))
    c[7, 7] = c[7, 7] + 100
    out = outofcore("verify", *paths)
    assert out.returncode == 1
    assert "FAILED" in out.stdout and "row 7" in out.stdout
    quiet = outofcore("verify", *paths, "-q")  # a wrong product is still said
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (1, out.stdout, "")


def test_demo_runs_and_verifies(tmp_path):
    out = outofcore(
        "demo", "--size", "640", "--chunk", "128", "--memory", "2MiB", "--json", "--workers", "2"
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["verify"]["passed"] is True
    assert summary["tiles"] > 1
    # The inputs are larger than the budget the demo uses.
    assert summary["task_budget_bytes"] < 2 * 640 * 640 * 4


def test_errors_are_one_line_with_status_two(tmp_path):
    out = outofcore(
        "matmul", str(tmp_path / "x.zarr"), str(tmp_path / "y.zarr"), "-o", str(tmp_path / "z.zarr")
    )
    assert out.returncode == 2
    assert out.stderr.startswith("outofcore: error: input A: no zarr array at")
    bad = outofcore("plan", "a", "b", "--memory", "lots")
    assert bad.returncode == 2 and "cannot read the size 'lots'" in bad.stderr


def test_every_dtype_from_the_command_line_with_transposes_and_an_addend(tmp_path):
    """random --dtype, plan, matmul and verify with --transpose-a/-b, --alpha/--beta/--addend."""
    from tests.helpers import assert_gemm_close

    cases = [  # (dtype, accumulated in (None: exact), output dtype, extra matmul options)
        ("int8", None, "int32", []),
        ("float16", "float32", "float16", ["--out-dtype", "float16"]),
        ("complex64", "complex64", "complex64", []),
    ]
    for dtype, accumulated, output, extra in cases:
        folder = tmp_path / dtype
        x, d, c = (str(folder / name) for name in ("x.zarr", "d.zarr", "c.zarr"))
        for path, shape, chunks, seed in ((x, "211,37", "50,9", "1"), (d, "37,37", "10,10", "2")):
            made = outofcore(
                "random", path, "--shape", shape, "--chunks", chunks, "--seed", seed,
                "--dtype", dtype,
            )  # fmt: skip
            assert made.returncode == 0, made.stderr
        plan = outofcore("plan", x, x, "--transpose-a", *extra, "--memory", "1MiB")
        assert plan.returncode == 0, plan.stderr
        text = unwrapped(plan.stdout)
        assert "A.T 37x211" in text and f"written as {output}" in text
        product = ["--transpose-a", "--alpha", "2", "--beta", "-1", "--addend", d]
        run = outofcore("matmul", x, x, "-o", c, *product, *extra, "--memory", "1MiB", "--json")
        assert run.returncode == 0, run.stderr
        summary = json.loads(run.stdout)
        assert summary["dtype"] == output and summary["product"]["transpose_a"] is True
        checked = outofcore("verify", x, x, c, *product, "--json")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert json.loads(checked.stdout)["exact"] == (accumulated is None)
        x_np, d_np = zarr.open_array(x)[...], zarr.open_array(d)[...]
        assert_gemm_close(
            zarr.open_array(c)[...], x_np, x_np, accumulated_in=accumulated,
            rounded_to=output if extra else None, transpose_a=True, alpha=2, beta=-1,
            addend=d_np,
        )  # fmt: skip
        # verify without the addend is a different product: it fails, exit status 1.
        wrong = outofcore("verify", x, x, c, "--transpose-a", "--alpha", "2")
        assert wrong.returncode == 1 and "FAILED" in wrong.stdout
    refused = outofcore(
        "matmul", x, x, "-o", str(tmp_path / "e.zarr"), "--transpose-a", "--beta", "2"
    )
    assert refused.returncode == 2 and "beta = 2 needs an addend" in refused.stderr


def test_version_is_the_installed_packages():
    done = outofcore("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"outofcore {importlib.metadata.version('outofcore')}\n"
    assert re.fullmatch(r"outofcore \d+\.\d+\.\d+\S*\n", done.stdout)


def test_quiet_jobs_print_nothing_but_what_they_are_asked_for(tmp_path):
    """--quiet: no cluster line, no progress, no summary; --json still prints its object."""
    a, b, c, g = (str(tmp_path / name) for name in ("a.zarr", "b.zarr", "c.zarr", "g.zarr"))
    for path, shape in ((a, "300,200"), (b, "200,250")):
        made = outofcore("random", path, "--shape", shape, "--chunks", "64,64", "--quiet")
        assert (made.returncode, made.stdout, made.stderr) == (0, "", "")
    run = outofcore("matmul", a, b, "-o", c, "--memory", "256KiB", "--workers", "1", "--quiet")
    assert (run.returncode, run.stdout, run.stderr) == (0, "", "")  # a LocalCluster job
    assert_product_close(zarr.open_array(c)[...], zarr.open_array(a)[...], zarr.open_array(b)[...])
    in_process = ("--scheduler", "sync", "--memory", "256KiB")
    gram = outofcore("gram", a, "-o", g, *in_process, "--quiet", "--json")
    assert gram.returncode == 0 and gram.stderr == "", gram.stderr
    assert json.loads(gram.stdout)["tiles"] > 1
    demo = outofcore("demo", "--size", "256", "--chunk", "64", "--memory", "256KiB", "--quiet")
    assert (demo.returncode, demo.stdout, demo.stderr) == (0, "", "")


def test_json_keeps_stdout_to_its_object_and_stderr_to_the_progress(tmp_path):
    """--json (issue 55, item 4): the object alone on stdout; the cluster line and the
    progress still on stderr, as without it (only --quiet silences them)."""
    a, b, c = (str(tmp_path / name) for name in ("a.zarr", "b.zarr", "c.zarr"))
    random_array(a, (300, 200), (64, 64), seed=1)
    random_array(b, (200, 250), (64, 64), seed=2)
    run = outofcore("matmul", a, b, "-o", c, "--memory", "256KiB", "--workers", "1", "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["tiles"] > 1  # nothing else on stdout
    assert "Started a LocalCluster: 1 worker(s)" in run.stderr
    assert re.search(r"matmul: \d+/\d+ tiles \(100%\) in ", run.stderr), run.stderr
    demo = outofcore("demo", "--size", "256", "--chunk", "64", "--memory", "256KiB", "--json")
    assert demo.returncode == 0, demo.stderr
    assert json.loads(demo.stdout)["verify"]["passed"] is True
    assert "matmul: " in demo.stderr


def test_progress_into_a_log_file_is_lines_without_redraws(tmp_path):
    """stderr to a file (a batch job's log): a line at the start and one at the end, no \\r."""
    a, b, c = (str(tmp_path / name) for name in ("a.zarr", "b.zarr", "c.zarr"))
    random_array(a, (300, 200), (64, 64), seed=1)
    random_array(b, (200, 250), (64, 64), seed=2)
    with open(tmp_path / "job.log", "w") as log:
        done = subprocess.run(
            [sys.executable, "-m", "outofcore.cli", "matmul", a, b, "-o", c, "--memory", "256KiB"],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            timeout=600,
        )
    text = (tmp_path / "job.log").read_text()
    assert done.returncode == 0, text
    assert "\r" not in text
    lines = text.splitlines()
    tiles = int(re.search(r"  tiles +(\d+) tiles", done.stdout).group(1))
    assert lines[0].startswith("Started a LocalCluster: 1 worker(s)")
    assert lines[1] == f"matmul: 0/{tiles} tiles (0%)"
    assert re.fullmatch(rf"matmul: {tiles}/{tiles} tiles \(100%\) in .+, .+ tiles/s", lines[-1])
    assert all(line.startswith("matmul: ") for line in lines[1:]), text


@pytest.mark.parametrize("workers", ["1", "2"])
def test_warnings_of_local_cluster_workers_reach_the_command_as_warning_lines(tmp_path, workers):
    """A read retried in a worker is logged there; the command shows it as an
    ``outofcore: warning:`` line, never as a bare line: from the worker in its own process
    (one worker), forwarded from worker processes (two, ``OUTOFCORE_IN_PROCESS_WORKER=0``)."""
    a = random_array(tmp_path / "a.zarr", (90, 70), (30, 35), seed=3)
    random_array(tmp_path / "b.zarr", (70, 50), (35, 25), seed=4)
    broken = break_chunk(tmp_path / "b.zarr", "1/0")  # every read of it fails, then is retried
    processes = {"OUTOFCORE_IN_PROCESS_WORKER": "0" if workers == "2" else "1"}
    done = outofcore(
        "matmul", "a.zarr", "b.zarr", "-o", "c.zarr", "--workers", workers, cwd=tmp_path,
        env=processes,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    lines = done.stderr.splitlines()
    retries = [line for line in lines if "a read failed" in line]
    assert retries and all(line.startswith("outofcore: warning: ") for line in retries), lines
    assert "b.zarr" in retries[0]
    # Each retry once for each task reading the chunk (a ReadError is final: no task runs
    # twice): a worker in this process whose records were forwarded to this process's
    # logger forwarded them again, thousands of lines.
    assert max(Counter(retries).values()) <= 3 * 6, Counter(retries)
    restore_chunk(broken)
    assert a.shape == (90, 70)  # the inputs are left as they were

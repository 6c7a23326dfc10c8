"""What the command and the API say, checked against what is true (issue 19, item 7):
``status`` of what is not a job's output, ``verify`` of an unfinished output, the
summary's formula, a Gram job's written bytes and progress bar, a resumed job's read,
messages that name the right operand."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr

import outofcore
from outofcore.api import job_status, run_job
from outofcore.errors import InputError
from outofcore.frontends.cli_output import formula_of
from outofcore.runtime.memory_cap import memory_cap
from tests.helpers import (
    assert_gemm_close,
    break_chunk,
    cli,
    random_matrix,
    restore_chunk,
    write_zarr,
)


@pytest.fixture
def folder(tmp_path, monkeypatch):
    rng = np.random.default_rng(7)
    write_zarr(tmp_path / "a.zarr", random_matrix(rng, (29, 23), "float32"), (6, 5))
    write_zarr(tmp_path / "b.zarr", random_matrix(rng, (23, 19), "float32"), (5, 6))
    write_zarr(tmp_path / "d.zarr", random_matrix(rng, (29, 19), "float32"), (6, 6))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_status_says_what_is_there_instead_of_a_job(folder):
    (folder / "results").mkdir()
    (folder / "results" / "notes.txt").write_text("x")
    for path, says in (
        ("nothing.zarr", "there is nothing at 'nothing.zarr'"),
        ("a.zarr", "'a.zarr' is a zarr array with no outofcore job journal"),
        ("results", "'results' is a folder, not the output of an outofcore job"),
    ):
        with pytest.raises(InputError, match=says) as raised:
            job_status(path)
        assert "older version" not in str(raised.value)
        done = cli("status", path)
        assert done.returncode == 2 and says in done.stderr


def test_verify_refuses_an_unfinished_output(folder, outofcore_settings):
    outofcore_settings(read_retries=0)
    broken = break_chunk(folder / "b.zarr", "4/3")
    with pytest.raises(outofcore.errors.JobFailedError):
        run_job("a.zarr", "b.zarr", "c.zarr", client="sync", progress=False, tile=(6, 6))
    restore_chunk(broken)
    done = job_status("c.zarr")["tiles_done"]
    with pytest.raises(InputError, match=rf"is incomplete: .*\({done} of \d+ tiles done\)"):
        outofcore.verify("a.zarr", "b.zarr", "c.zarr")
    refused = cli("verify", "a.zarr", "b.zarr", "c.zarr")
    assert refused.returncode == 2 and "rerun the same matmul command" in refused.stderr


def test_the_summary_says_what_was_computed(folder):
    done = cli(
        "matmul", "a.zarr", "b.zarr", "-o", "c.zarr", "--scheduler", "sync",
        "--alpha", "2", "--beta", "-0.5", "--addend", "d.zarr",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"C = 2*A @ B - 0.5*D (D = file://{folder}/d.zarr) written")
    gram = cli("gram", "a.zarr", "-o", "g.zarr", "--scheduler", "sync", "--memory", "24KiB")
    assert gram.returncode == 0 and gram.stdout.startswith("G = X.T @ X written")
    assert "gram:" in gram.stderr and "matmul:" not in gram.stderr  # the progress bar's name


@pytest.mark.parametrize(
    ("scales", "formula"),
    [
        ({"alpha": 2, "beta": -1}, "C = 2*A @ B - D (D = d)"),
        ({"alpha": 1, "beta": 1}, "C = A @ B + D (D = d)"),
        ({"alpha": -1, "beta": 0.5}, "C = -A @ B + 0.5*D (D = d)"),
        ({"alpha": -0.5, "beta": -2.5}, "C = -0.5*A @ B - 2.5*D (D = d)"),
        ({"alpha": [1, 2], "beta": [0, -1]}, "C = (1+2j)*A @ B + (0-1j)*D (D = d)"),
    ],
)
def test_the_formula_is_written_as_algebra(scales, formula):
    assert formula_of({**scales, "addend": "d"}) == formula


@pytest.mark.parametrize(("tile", "splits"), [((12, 12), 1), (None, 3)], ids=["tiles", "split"])
def test_the_read_counts_the_addend_as_the_bound_does(folder, tile, splits):
    """The addend is read once (tiles finish with it; a split tile's reduction does), and
    both the read and the lower bound count it: an addend job reads at least the bound."""
    result = run_job(
        "a.zarr", "b.zarr", "c.zarr", alpha=2, beta=-1, addend="d.zarr", client="sync",
        progress=False, tile=tile, splits=splits,
    )  # fmt: skip
    s, addend = result.summary, 29 * 19 * 4
    assert s["splits"] == splits
    assert s["bytes_read"] == result.plan.bytes_read  # A, B and the addend, each as planned
    assert s["io_lower_bound"] >= 29 * 23 * 4 + 23 * 19 * 4 + addend
    assert s["read_over_lower_bound"] >= 1
    without = run_job(
        "a.zarr", "b.zarr", "e.zarr", client="sync", progress=False, tile=tile, splits=splits
    )
    assert s["bytes_read"] - without.summary["bytes_read"] == addend


def test_a_gram_job_counts_the_mirror_tiles_it_writes(folder):
    result = run_job(
        "a.zarr", "a.zarr", "g.zarr", transpose_a=True, client="sync", progress=False,
        tile=(10, 10),
    )  # fmt: skip
    assert result.plan.problem.symmetric and len(result.plan.tasks) > 2
    assert result.summary["bytes_written"] == 23 * 23 * 4  # every element of G once


def test_a_resumed_job_claims_no_ratio_to_a_whole_jobs_bound(folder, outofcore_settings):
    outofcore_settings(read_retries=0)
    broken = break_chunk(folder / "b.zarr", "4/3")
    options = {"client": "sync", "progress": False, "tile": (6, 6)}
    with pytest.raises(outofcore.errors.JobFailedError):
        run_job("a.zarr", "b.zarr", "c.zarr", **options)
    restore_chunk(broken)
    summary = run_job("a.zarr", "b.zarr", "c.zarr", **options).summary
    assert summary["tiles_skipped"] > 0 and summary["read_over_lower_bound"] is None
    shown = json.loads(cli("status", "c.zarr", "--json").stdout)
    assert shown["complete"] is True


def test_messages_name_the_operand_at_fault(folder):
    bad = str(folder / "bad.zarr")
    zarr.create_array(bad, shape=(29, 19), chunks=(6, 6), dtype="datetime64[s]")
    with pytest.raises(InputError, match=r"^the addend \(.*has dtype datetime64") as raised:
        outofcore.matmul("a.zarr", "b.zarr", "c.zarr", beta=1.0, addend="bad.zarr", client="sync")
    assert "input the addend" not in str(raised.value) and "A.astype" not in str(raised.value)
    with pytest.raises(InputError, match=r"^the addend: no zarr array at 'missing.zarr'"):
        outofcore.matmul("a.zarr", "b.zarr", "c.zarr", beta=1.0, addend="missing.zarr")
    assert not memory_cap().describe().startswith("this")  # messages say "the <cap>"


@pytest.mark.parametrize(("dtype", "zarr_format"), [(">f8", 2), (">i2", 2), (">c8", 2), (">f4", 3)])
def test_big_endian_inputs_are_read_as_their_values(tmp_path, dtype, zarr_format):
    """Byte order is the store's: a big-endian array multiplies like a native one."""
    rng = np.random.default_rng(11)
    native = np.dtype(dtype).newbyteorder("=")
    if native.kind == "i":
        a, b = rng.integers(-300, 300, (31, 17)), rng.integers(-300, 300, (17, 13))
    else:
        a, b = random_matrix(rng, (31, 17), "f8"), random_matrix(rng, (17, 13), "f8")
        if native.kind == "c":
            a, b = (
                a + 1j * random_matrix(rng, a.shape, "f8"),
                b - 2j * random_matrix(rng, b.shape, "f8"),
            )
    a, b = a.astype(native), b.astype(native)
    for name, data, chunks in (("a", a, (8, 5)), ("b", b, (5, 6))):
        options = {"zarr_format": zarr_format}
        if zarr_format == 3:
            options["serializer"] = zarr.codecs.BytesCodec(endian="big")
        stored = zarr.create_array(
            str(tmp_path / f"{name}.zarr"), shape=data.shape, chunks=chunks, dtype=dtype, **options
        )
        stored[...] = data
    c = outofcore.matmul(
        tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr", client="sync",
        progress=False, memory="32KiB",
    )  # fmt: skip
    accumulated = None if native.kind == "i" else native
    assert_gemm_close(c[...], a, b, accumulated_in=accumulated)
    assert outofcore.verify(tmp_path / "a.zarr", tmp_path / "b.zarr", c).passed

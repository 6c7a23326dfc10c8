"""Bad input: a clear error naming the values, before any task runs, nothing written."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest
import zarr

import outofcore
from outofcore.config import parse_size
from outofcore.errors import (
    BackendError,
    BudgetError,
    ClusterError,
    InputError,
    OutputExistsError,
)
from outofcore.jobs.opening import open_product
from outofcore.journal.lease import lease_timeout
from outofcore.operands.reading import read_retry_settings
from tests.helpers import cli, random_matrix, write_zarr


@pytest.fixture
def inputs(tmp_path):
    rng = np.random.default_rng(1)
    a = write_zarr(tmp_path / "a.zarr", random_matrix(rng, (40, 30), "float32"), (10, 10))
    b = write_zarr(tmp_path / "b.zarr", random_matrix(rng, (30, 20), "float32"), (10, 10))
    return tmp_path, a, b


def snapshot(folder):
    """Every file under ``folder`` with its size and modification time."""
    state = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            info = os.stat(path)
            state[path] = (info.st_size, info.st_mtime_ns)
    return state


def run(a, b, out, **kwargs):
    return outofcore.matmul(a, b, out, client="sync", progress=False, **kwargs)


def test_zero_dimensional(inputs):
    """numpy.matmul refuses 0-d operands; so does outofcore, naming the array."""
    folder, _, b = inputs
    zarr.create_array(str(folder / "s.zarr"), shape=(), chunks=(), dtype="f4")[...] = 1.5
    before = snapshot(folder)
    with pytest.raises(InputError, match=r"input A \(file://.*s\.zarr\) is 0-d \(shape \(\)\)"):
        run(folder / "s.zarr", b, folder / "c.zarr")
    assert snapshot(folder) == before


def test_vector_of_another_length(inputs):
    """A 1-D operand of the wrong length names both shapes, as numpy does."""
    folder, _, b = inputs
    zarr.create_array(str(folder / "v.zarr"), shape=(31,), chunks=(10,), dtype="f4")[...] = 1
    before = snapshot(folder)
    with pytest.raises(InputError, match=r"A is a vector of 31 and B is 30x20 \(31 != 30\)"):
        run(folder / "v.zarr", b, folder / "c.zarr")
    assert snapshot(folder) == before


def test_inner_dimensions_differ(inputs):
    folder, a, _ = inputs
    write_zarr(folder / "b2.zarr", np.ones((31, 20), "f4"), (10, 10))
    before = snapshot(folder)
    with pytest.raises(InputError, match=r"A is 40x30 and B is 31x20 \(30 != 31\)"):
        run(a, folder / "b2.zarr", folder / "c.zarr")
    assert snapshot(folder) == before


@pytest.mark.parametrize("dtype", ["datetime64[s]", "timedelta64[s]"])
def test_other_dtypes_say_what_to_do(inputs, dtype):
    folder, _, b = inputs
    rng = np.random.default_rng(5)
    write_zarr(folder / "bad.zarr", rng.integers(0, 10**6, (40, 30)).astype(dtype), (10, 10))
    with pytest.raises(
        InputError, match=rf"dtype {re.escape(dtype)}.*bool, integer, float and complex.*astype"
    ):
        run(folder / "bad.zarr", b, folder / "c.zarr")
    assert not (folder / "c.zarr").exists()


def test_transposed_inner_dimensions_are_named_with_the_transpose(inputs):
    folder, a, b = inputs
    with pytest.raises(InputError, match=r"A.T is 30x40 and B is 30x20 \(40 != 30\)"):
        run(a, b, folder / "c.zarr", transpose_a=True)
    assert not (folder / "c.zarr").exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"beta": 2.0}, r"beta = 2.0 needs an addend"),
        ({"addend": "d.zarr"}, r"addend .*d.zarr.* was given with beta = 0"),
        (
            {"addend": "d_wrong.zarr", "beta": 1},
            r"addend .* has shape \(20, 40\); the output is \(40, 20\)",
        ),
        ({"addend": "a.zarr", "beta": 1}, r"the addend .*a.zarr.* is the same array as input A"),
        ({"alpha": 1j}, r"alpha = 1j is complex but the product is float32"),
        (
            {"out_dtype": "int8"},
            r"out_dtype = int8: a float32 result .* float64, complex64 or complex128",
        ),
        ({"transpose_b": "yes"}, r"transpose_b = 'yes': need True or False"),
        ({"alpha": float("inf")}, r"alpha = inf: need a finite number"),
    ],
)
def test_bad_product_parameters_are_named_before_anything_is_written(inputs, options, message):
    folder, a, b = inputs
    rng = np.random.default_rng(3)
    write_zarr(folder / "d.zarr", random_matrix(rng, (40, 20), "float32"), (10, 10))
    write_zarr(folder / "d_wrong.zarr", random_matrix(rng, (20, 40), "float32"), (10, 10))
    options = {
        key: str(folder / value) if key == "addend" else value for key, value in options.items()
    }
    before = snapshot(folder)
    with pytest.raises(InputError, match=message):
        run(a, b, folder / "c.zarr", **options)
    assert snapshot(folder) == before


def test_integer_product_beyond_float64s_exact_range_goes_through_limbs(tmp_path):
    # int16 x int16 with k = 2**23 + 1 could reach 2**53 + 2**30: not exact in float64, so
    # it is summed exactly in int64 through 16-bit limbs (it was refused before).
    # The arrays are never read (no chunk is written), so they cost nothing.
    k = 2**23 + 1
    a = zarr.create_array(str(tmp_path / "a.zarr"), shape=(2, k), chunks=(2, 2**20), dtype="i2")
    b = zarr.create_array(str(tmp_path / "b.zarr"), shape=(k, 3), chunks=(2**20, 3), dtype="i2")
    types = open_product(a, b).types
    assert types.bound == k * 2**30 and types.limbs is not None and str(types.compute) == "int64"
    with pytest.raises(InputError, match=r"alpha = 0.5 is not a whole number"):
        run(a, b, tmp_path / "c.zarr", alpha=0.5)
    assert not (tmp_path / "c.zarr").exists()


def test_missing_input_path(inputs):
    folder, a, _ = inputs
    with pytest.raises(InputError, match="input B: no zarr array at .*nowhere.zarr"):
        run(a, folder / "nowhere.zarr", folder / "c.zarr")
    assert not (folder / "c.zarr").exists()


def test_input_that_is_a_group_or_not_zarr(inputs):
    folder, a, _ = inputs
    zarr.open_group(str(folder / "group.zarr"), mode="w")
    with pytest.raises(InputError, match="is a zarr group, not an array"):
        run(a, folder / "group.zarr", folder / "c.zarr")
    (folder / "plain").mkdir()
    (folder / "plain" / "notes.txt").write_text("hello")
    with pytest.raises(InputError, match="input B"):
        run(a, folder / "plain", folder / "c.zarr")
    assert not (folder / "c.zarr").exists()


def test_existing_output_needs_overwrite(inputs):
    folder, a, b = inputs
    run(a, b, folder / "c.zarr")
    before = snapshot(folder / "c.zarr")
    with pytest.raises(
        OutputExistsError, match=r"c.zarr' already exists \(.*\); pass overwrite=True"
    ):
        run(a, b, folder / "c.zarr")
    assert snapshot(folder / "c.zarr") == before
    time.sleep(0.01)
    c = run(a, b, folder / "c.zarr", overwrite=True)
    assert c.attrs["outofcore"]["complete"] is True


def test_output_is_an_input_even_with_overwrite(inputs):
    folder, a, b = inputs
    before = snapshot(folder)
    with pytest.raises(InputError, match="same array as input A"):
        run(a, b, folder / "a.zarr", overwrite=True)
    with pytest.raises(InputError, match="same array as input B"):
        run(a, b, b, overwrite=True)
    with pytest.raises(InputError, match="nested"):
        run(a, b, folder, overwrite=True)  # replacing the folder would delete both inputs
    assert snapshot(folder) == before


def test_existing_output_of_wrong_shape_or_dtype(inputs):
    folder, a, b = inputs
    wrong_shape = zarr.create_array(
        str(folder / "ws.zarr"), shape=(40, 21), chunks=(10, 7), dtype="f4"
    )
    with pytest.raises(
        InputError, match=r"\(40, 21\) float32, but the product is \(40, 20\) float32"
    ):
        run(a, b, wrong_shape)
    wrong_dtype = zarr.create_array(
        str(folder / "wd.zarr"), shape=(40, 20), chunks=(10, 10), dtype="f8"
    )
    with pytest.raises(InputError, match="float64, but the product is .* float32"):
        run(a, b, wrong_dtype)


def test_budget_too_small_is_refused_with_numbers(inputs):
    folder, a, b = inputs
    with pytest.raises(BudgetError, match=r"budget of 1000 bytes .* needs \d+ bytes"):
        run(a, b, folder / "c.zarr", memory=1000)
    assert not (folder / "c.zarr").exists()


def test_scheduler_address_that_does_not_answer(inputs, outofcore_settings):
    folder, a, b = inputs
    outofcore_settings(connect_timeout=2)
    started = time.monotonic()
    with pytest.raises(ClusterError, match=r"'tcp://127.0.0.1:9' within 2 s"):
        outofcore.matmul(a, b, folder / "c.zarr", client="tcp://127.0.0.1:9", progress=False)
    assert time.monotonic() - started < 30
    assert not (folder / "c.zarr").exists()


def test_unknown_backend(inputs):
    folder, a, b = inputs
    with pytest.raises(BackendError, match="unknown backend 'tpu'"):
        run(a, b, folder / "c.zarr", backend="tpu")


def test_cuda_backend_without_gpu_is_a_clear_error(inputs):
    # A fresh process without the simulator (tests/conftest.py turns it on here).
    folder, a, b = inputs
    code = (
        "import outofcore, sys\n"
        "from outofcore.backends.registry import gpu_visible\n"
        "from outofcore.errors import BackendError\n"
        "if gpu_visible(): print('GPU'); sys.exit(0)\n"
        "try:\n"
        f"    outofcore.matmul({str(a.store.root)!r}, {str(b.store.root)!r}, "
        f"{str(folder / 'c.zarr')!r}, backend='cuda', client='sync')\n"
        "except BackendError as exc:\n"
        "    print(exc)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    if out.stdout.strip() != "GPU":  # on a GPU machine the backend is legitimately usable
        assert "backend 'cuda' needs a CUDA GPU and driver" in out.stdout
        assert not (folder / "c.zarr").exists()


@pytest.mark.parametrize("text", ["lots", "-5MiB", "12 parsecs", "0", "", "MiB", "0.5"])
def test_bad_memory_sizes(text):
    with pytest.raises(InputError):
        parse_size(text)


def test_sizes():
    assert parse_size("512MiB") == 512 * 2**20
    assert parse_size("1.5GB") == 1_500_000_000
    assert parse_size("2 gib") == 2 * 2**30
    assert parse_size(4096) == 4096


def test_settings_come_from_the_environment_and_bad_ones_are_named(outofcore_settings):
    code = (
        "from outofcore.operands.reading import read_retry_settings; "
        "from outofcore.journal.lease import lease_timeout; "
        "print(read_retry_settings(), lease_timeout())"
    )
    env = {**os.environ, "OUTOFCORE_READ_RETRIES": "7", "OUTOFCORE_LEASE_TIMEOUT": "2.5"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["(7,", "0.2)", "2.5"]
    outofcore_settings(lease_timeout="soon")
    with pytest.raises(InputError, match=r"outofcore.lease-timeout='soon' is not a number"):
        lease_timeout()
    outofcore_settings(lease_timeout=0, read_retries=1.5)
    with pytest.raises(InputError, match=r"outofcore.lease-timeout=0: need a number > 0"):
        lease_timeout()
    with pytest.raises(InputError, match=r"outofcore.read-retries=1.5 is not a whole number"):
        read_retry_settings()


def test_local_cluster_larger_than_this_machine_is_refused(inputs):
    import psutil

    folder, a, b = inputs
    total = psutil.virtual_memory().total
    with pytest.raises(ClusterError, match=r"4 worker\(s\) with a budget of \d+ bytes each"):
        outofcore.matmul(a, b, folder / "c.zarr", memory=total // 2, workers=4, progress=False)
    assert not (folder / "c.zarr").exists()


def test_workers_of_a_brought_cluster_short_of_memory_are_named(inputs, own_local_cluster):
    import dask
    from distributed import Client

    folder, a, b = inputs
    # A 4 KiB limit is below any process: keep the worker running (not paused) with it, on
    # a cluster of its own (no other test could use it).
    no_monitor = {f"distributed.worker.memory.{x}": False for x in ("target", "spill", "pause")}
    with dask.config.set(no_monitor):
        cluster = own_local_cluster(1, 2, processes=False, memory_limit=4096)
        address = next(iter(cluster.scheduler.workers))
        before = snapshot(folder)
        with Client(cluster) as client, pytest.raises(ClusterError) as refused:
            outofcore.matmul(a, b, folder / "c.zarr", client=client, progress=False)
    assert f"{address} (4096 bytes for 2 thread(s): 0 per task after the" in str(
        refused.value
    )  # nothing left beside the worker's own WORKER_OVERHEAD_BYTES
    assert re.search(r"a task of this plan needs \d+ bytes", str(refused.value))
    assert snapshot(folder) == before and not (folder / "c.zarr").exists()


@pytest.mark.parametrize("greeting", [b"", b"SSH-2.0-OpenSSH_9.6\r\n", b"HTTP/1.1 200 OK\r\n\r\n"])
def test_a_port_that_accepts_but_is_not_dask_is_refused_in_time_before_any_write(
    inputs, outofcore_settings, greeting
):
    """Issue 28: a server that accepts and says nothing (or an SSH banner, an HTTP reply)
    held the job forever after it had written the output's lease."""
    import socket  # noqa: PLC0415
    import threading  # noqa: PLC0415

    folder, a, b = inputs
    outofcore_settings(connect_timeout=2)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    held = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            held.append(conn)  # the job connected; kept open, silent after the greeting
            if greeting:
                with contextlib.suppress(OSError):  # the job may have given up already
                    conn.sendall(greeting)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        with pytest.raises(ClusterError, match=rf"127.0.0.1:{port}' within 2 s"):
            outofcore.matmul(a, b, folder / "c.zarr", client=f"tcp://127.0.0.1:{port}",
                             progress=False)  # fmt: skip
        assert time.monotonic() - started < 15
        assert held, "the job never connected: the test would prove nothing"
        assert not (folder / "c.zarr").exists()  # no lease, no array
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


@pytest.mark.parametrize("shape", ["[40.0, 30]", "[-3, 30]", '"x"', "[40]", "null", "[1e400, 30]"])
def test_an_input_whose_metadata_has_a_hostile_shape_is_named(inputs, shape):
    """A float, a negative size, text, one axis, none or infinity in an input's ``shape``
    is one line naming the input, its metadata file and the field, before anything is
    written (a float ended as 'TypeError ... (unexpected)', exit 3; issue 53 names the
    file and field)."""
    folder, _, _ = inputs
    a, b = folder / "a.zarr", folder / "b.zarr"
    metadata = (a / "zarr.json").read_text()
    (a / "zarr.json").write_text(re.sub(r'"shape": \[[^\]]*\]', f'"shape": {shape}', metadata))
    before = snapshot(folder)
    named = r"input A: .*a\.zarr/zarr\.json: field '(shape|chunk_grid)"
    with pytest.raises(InputError, match=named):
        run(a, b, folder / "c.zarr")
    refused = cli("matmul", str(a), str(b), "-o", str(folder / "c.zarr"), "--scheduler", "sync")
    assert refused.returncode == 2, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert snapshot(folder) == before

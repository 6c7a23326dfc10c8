"""Shared test helpers: seeded data on disk, a dtype- and k-aware comparison, processes
and ports, and docker-compose.yml's variables.  Import as ``from tests.helpers import ...``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import zarr

from benchmarks import s3_local as _S3_LOCAL  # a moto_server process, a delaying proxy
from outofcore.frontends.generate import random_array
from outofcore.journal.records import JOURNAL_DIR

#: The repository's root folder.
ROOT = Path(__file__).resolve().parents[1]


def unwrapped(text: str) -> str:
    """The command's text with each wrapped line joined back (its continuations are
    indented under it: outofcore.frontends.cli_output.wrapped), to look for a phrase."""
    return re.sub(r"\n +(?=\S)", lambda m: " " if len(m.group()) > 5 else m.group(), text)


def write_zarr(path: Path, data: np.ndarray, chunks: tuple[int, int]) -> zarr.Array:
    """Write ``data`` to a new zarr array at ``path`` with ``chunks``."""
    array = zarr.create_array(str(path), shape=data.shape, chunks=chunks, dtype=data.dtype)
    array[...] = data
    return array


def random_matrix(rng: np.random.Generator, shape: tuple[int, int], dtype: str) -> np.ndarray:
    """Normal values with a nonzero mean, so errors do not cancel by luck."""
    return (rng.standard_normal(shape) + 0.25).astype(dtype)


def assert_product_close(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """``got`` equals ``a @ b`` (float64 reference) within the worst-case rounding bound.

    |got - ref| <= 2 * k * u * (|a| @ |b|) elementwise, u the dtype's unit roundoff.
    """
    assert got.dtype == a.dtype, (got.dtype, a.dtype)
    assert_gemm_close(got, a, b, accumulated_in=a.dtype)


def reference_gemm(
    a: np.ndarray,
    b: np.ndarray,
    *,
    transpose_a: bool = False,
    transpose_b: bool = False,
    alpha: complex = 1.0,
    beta: complex = 0.0,
    addend: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """``alpha * op(a) @ op(b) + beta * addend`` and the magnitude its rounding scales with.

    Exact int64 arithmetic when every operand is an integer (the magnitude is
    then None); else float64, or complex128 when any operand is complex.
    """
    op_a, op_b = _op(a, transpose_a), _op(b, transpose_b)
    operands = [op_a, op_b] + ([] if addend is None else [addend])
    if all(x.dtype.kind in "iu" for x in operands):
        ref = int(np.real(alpha)) * (op_a.astype(np.int64) @ op_b.astype(np.int64))
        if addend is not None:
            ref += int(np.real(beta)) * addend.astype(np.int64)
        return ref, None
    wide = np.complex128 if any(x.dtype.kind == "c" for x in operands) else np.float64
    ref = alpha * (op_a.astype(wide) @ op_b.astype(wide))
    size = abs(alpha) * (np.abs(op_a.astype(wide)) @ np.abs(op_b.astype(wide)))
    if addend is not None:
        ref = ref + beta * addend.astype(wide)
        size = size + abs(beta) * np.abs(addend.astype(wide))
    return ref, size


def _op(x: np.ndarray, transposed: bool) -> np.ndarray:
    """``x`` with its last two axes swapped (numpy.matmul's transpose; a vector is its own)."""
    return np.swapaxes(x, -1, -2) if transposed and x.ndim > 1 else x


def assert_gemm_close(
    got: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    *,
    accumulated_in: np.dtype | str | None,
    rounded_to: np.dtype | str | None = None,
    **product,
) -> None:
    """``got`` equals :func:`reference_gemm` within the worst-case rounding bound.

    ``accumulated_in`` is the dtype the test expects the product to be summed in
    (None: exact, an integer product, compared for equality); ``rounded_to`` a
    coarser output dtype that rounds each element once more.  Elementwise:
    ``|got - ref| <= 2 * (k * u + u_out) * size``.
    """
    ref, size = reference_gemm(a, b, **product)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    if accumulated_in is None:
        assert got.dtype.kind in "iu", got.dtype
        mismatch = np.argwhere(got.astype(np.int64) != ref)
        assert mismatch.size == 0, f"{len(mismatch)} elements differ, first at {mismatch[:1]}"
        return
    k = _op(a, product.get("transpose_a", False)).shape[-1]
    unit = np.finfo(np.dtype(accumulated_in)).eps / 2
    out_unit = 0.0 if rounded_to is None else np.finfo(np.dtype(rounded_to)).eps / 2
    tolerance = 2 * (k * unit + out_unit) * size + np.finfo(np.dtype(accumulated_in)).tiny
    excess = np.abs(got.astype(ref.dtype) - ref) - tolerance
    worst = np.unravel_index(np.argmax(excess), excess.shape) if excess.size else None
    assert (excess <= 0).all(), f"largest error over tolerance at {worst}: {excess[worst]}"


def wait_for(condition, timeout: float, what: str) -> None:
    """Poll ``condition`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def overwrite_in_place(path: Path, data: bytes) -> None:
    """Write ``data`` (of the file's size) over ``path``, keeping its inode and mtime."""
    info = path.stat()
    assert len(data) == info.st_size
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def break_chunk(array: Path, chunk: str) -> Path:
    """Make every read of one chunk see zeros of its size (no zstd frame), in this
    process and every process the tests start, leaving the file as it is: as a store
    that returns a damaged body would (tests/faults/sitecustomize.py).  Its fingerprint
    does not change, so a job stopped by it resumes once it is mended by
    :func:`restore_chunk`."""
    from tests.faults.sitecustomize import entry_name, registry  # noqa: PLC0415

    path = array / "c" / chunk
    folder = registry()
    assert folder is not None, "damaged reads need tests/conftest.py's registry"
    zeros = Path(folder) / entry_name(path)
    zeros.write_bytes(bytes(path.stat().st_size))
    return zeros


def restore_chunk(broken: Path) -> None:
    """Mend a chunk :func:`break_chunk` damaged: reads of it see its bytes again."""
    broken.unlink()


def cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``outofcore ARGS`` in a new process; its output is captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "outofcore.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def tile_records(c: Path) -> list[Path]:
    """Finished-tile records of every journal under the output ``c``."""
    return sorted((c / JOURNAL_DIR / "tiles").glob("*/tile-*.json"))


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def long_job_inputs(folder: Path) -> tuple[str, str, str]:
    """Paths of A (2000²) and B (2000x1100), 100² chunks, written, and of C: at
    ``--memory 512KiB`` a job of 220 tiles, long enough to be interrupted."""
    a, b, c = (str(folder / name) for name in ("a.zarr", "b.zarr", "c.zarr"))
    random_array(a, (2000, 2000), (100, 100), seed=1)
    random_array(b, (2000, 1100), (100, 100), seed=2)
    return a, b, c


COMPOSE_VARIABLE = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(:-([^}]*))?\}")


def interpolate(value: str, overrides: dict[str, str] | None = None) -> str:
    """Compose's ``${VAR:-default}`` interpolation, with ``overrides`` as the environment."""
    overrides = overrides or {}

    def replace(match: re.Match) -> str:
        name, default = match.group(1), match.group(3)
        if name in overrides:
            return overrides[name]
        if default is None:
            raise AssertionError(f"${{{name}}} has no default in docker-compose.yml")
        return default

    return COMPOSE_VARIABLE.sub(replace, value)


async def with_sync_client(scheduler, fn):
    """``fn(client)`` in a worker thread with a synchronous ``distributed.Client`` of
    ``scheduler`` (a gen_cluster test's Scheduler), awaited from the test's event loop.

    DaskExecutor and open_executor use Dask's synchronous API, which must not
    block the loop the in-process scheduler and workers run on.
    """
    from distributed import Client  # noqa: PLC0415

    def call():
        with Client(scheduler.address, timeout=10) as client:
            return fn(client)

    return await asyncio.to_thread(call)


def engine_protocol_gaps(engine) -> set[str]:
    """Members of :class:`outofcore.backends.protocol.TileEngine` that ``engine`` lacks
    (empty: none)."""
    from outofcore.backends.protocol import TileEngine  # noqa: PLC0415

    wanted = {name for name in dir(TileEngine) if not name.startswith("_")}
    wanted |= set(TileEngine.__annotations__)
    if not wanted >= {"configure", "accumulate_rows", "capabilities", "release", "kept_bytes"}:
        raise AssertionError(f"the TileEngine protocol lost members: {sorted(wanted)}")
    return {name for name in wanted if not hasattr(engine, name)}


MotoServer = _S3_LOCAL.MotoServer


def s3_object_store(
    server: MotoServer, bucket_url: str, prefix: str = ""
) -> zarr.storage.ObjectStore:
    """zarr's ``ObjectStore`` on an obstore ``S3Store`` of the moto server's bucket
    ``bucket_url`` (``s3://name``), under ``prefix``."""
    from obstore.store import S3Store  # noqa: PLC0415 (the s3 extra)

    store = S3Store(
        bucket_url.removeprefix("s3://"),
        prefix=prefix or None,
        endpoint=server.endpoint,
        access_key_id=server.KEY,
        secret_access_key=server.SECRET,
        region="us-east-1",
        client_options={"allow_http": True},
    )
    return zarr.storage.ObjectStore(store)


#: Where ``.ci/run`` installs Azurite (npm's ``azurite``), unless ``$OUTOFCORE_AZURITE``
#: names an ``azurite-blob`` program.
AZURITE_PREFIX = (
    Path(os.environ.get("OUTOFCORE_TEST_REAL_HOME") or Path.home())
    / ".cache"
    / "outofcore"
    / "azurite"
)
#: The Azurite release ``.ci/run`` installs.
AZURITE_VERSION = "3.35.0"


def azurite_program() -> str | None:
    """The ``azurite-blob`` program: ``$OUTOFCORE_AZURITE``, the one ``.ci/run`` installs,
    or one on the PATH; None when there is none."""
    import shutil  # noqa: PLC0415

    for candidate in (
        os.environ.get("OUTOFCORE_AZURITE"),
        str(AZURITE_PREFIX / "node_modules" / ".bin" / "azurite-blob"),
        shutil.which("azurite-blob"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


class AzuriteServer:
    """Azurite's blob service (Azure Blob Storage's emulator) on a free loopback port, in
    memory, in its own process; its well-known development account."""

    ACCOUNT = "devstoreaccount1"
    #: Azurite's published development key (not a secret).
    KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

    def __init__(self, program: str) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}/{self.ACCOUNT}"
        self.process = subprocess.Popen(
            [program, "--blobHost", "127.0.0.1", "--blobPort", str(self.port)]
            + ["--inMemoryPersistence", "--skipApiVersionCheck", "--silent"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        _S3_LOCAL.wait_listening(self.process, self.port, "azurite-blob", self.stop)

    def container(self, name: str) -> str:
        """Create the container ``name`` (a REST call signed with the account's key)."""
        import base64  # noqa: PLC0415
        import email.utils  # noqa: PLC0415
        import hashlib  # noqa: PLC0415
        import hmac  # noqa: PLC0415
        import urllib.request  # noqa: PLC0415

        headers = {
            "x-ms-date": email.utils.formatdate(usegmt=True),
            "x-ms-version": "2021-08-06",
            "Content-Type": "application/octet-stream",
        }
        signed = (
            "PUT\n\n\n\n\napplication/octet-stream\n\n\n\n\n\n\n"
            f"x-ms-date:{headers['x-ms-date']}\nx-ms-version:{headers['x-ms-version']}\n"
            f"/{self.ACCOUNT}/{self.ACCOUNT}/{name}\nrestype:container"
        )
        digest = hmac.new(base64.b64decode(self.KEY), signed.encode(), hashlib.sha256).digest()
        headers["Authorization"] = f"SharedKey {self.ACCOUNT}:{base64.b64encode(digest).decode()}"
        request = urllib.request.Request(
            f"{self.endpoint}/{name}?restype=container", data=b"", method="PUT", headers=headers
        )
        urllib.request.urlopen(request, timeout=10).close()  # raises unless 2xx
        return name

    def store(self, container: str, prefix: str = "") -> zarr.storage.ObjectStore:
        """zarr's ``ObjectStore`` on an obstore ``AzureStore`` of ``container``."""
        from obstore.store import AzureStore  # noqa: PLC0415

        store = AzureStore(
            container,
            prefix=prefix or None,
            account_name=self.ACCOUNT,
            account_key=self.KEY,
            endpoint=self.endpoint,
            client_options={"allow_http": True},
        )
        return zarr.storage.ObjectStore(store)

    def stop(self) -> None:
        _S3_LOCAL.stop_process(self.process)


def stop_processes(processes: list) -> None:
    """Stop ``(process, log file)`` pairs a fixture started (last first), close their logs,
    and kill what they spawned (a nanny's worker processes)."""
    spawned = []
    for process, _ in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            spawned += psutil.Process(process.pid).children(recursive=True)
    for process, log in reversed(processes):
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
    for child in spawned:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()


@contextlib.contextmanager
def serve_folder(folder: Path):
    """A plain HTTP server (Python's http.server, not S3) on loopback serving ``folder``
    read only, with directory listings; yields its URL."""
    import functools  # noqa: PLC0415
    import http.server  # noqa: PLC0415
    import threading  # noqa: PLC0415

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def smallest_budget(a, b, out, **options) -> int:
    """The smallest budget per worker the chunks allow (as the refusal names it)."""
    import outofcore  # noqa: PLC0415
    from outofcore.errors import BudgetError  # noqa: PLC0415

    try:
        outofcore.matmul(a, b, out, client="sync", memory=1, progress=False, **options)
    except BudgetError as refused:
        return int(re.search(r"needs (\d+) bytes", str(refused)).group(1))
    raise AssertionError("1 byte was enough")


def set_worker_status(status):
    """A function for ``client.run`` that sets each worker's status on its own event loop,
    as Dask's memory monitor does (``distributed.core.Status.paused``, ``.running``)."""

    def set_it(dask_worker):
        dask_worker.status = status

    return set_it


def cuda_target(dtype: str, *, backend: str = "cuda", **options):
    """:func:`outofcore.planner.gpu_rates.gpu_target` at the CUDA backend's measured rates
    (our kernel; cuBLAS for ``backend="cupy"``): the plan's GPU as a CUDA job gets it."""
    from outofcore.backends import registry  # noqa: PLC0415
    from outofcore.planner.gpu_rates import gpu_target  # noqa: PLC0415

    return gpu_target(dtype, registry.get(backend).rates, backend=backend, **options)


def cuda_device_plan(tm: int, tn: int, tk: int, itemsize: int, budget: int, **options):
    """:func:`outofcore.planner.device_plan.plan_device` cut in the CUDA kernel's blocks
    (``block=`` overrides them)."""
    from outofcore.backends.cuda.blocks import KERNEL_BLOCKS  # noqa: PLC0415
    from outofcore.planner.device_plan import plan_device  # noqa: PLC0415

    options.setdefault("block", KERNEL_BLOCKS[itemsize])
    return plan_device(tm, tn, tk, itemsize, budget, **options)

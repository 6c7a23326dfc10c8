"""``backend="auto"`` is decided by the job's workers, not by the submitting machine
(issue 20, item 6): a client without a GPU submitting to workers that declare a ``GPU``
resource runs the CUDA engine there (numba's CUDA simulator in CI)."""

from __future__ import annotations

import numpy as np
import pytest
from distributed.utils_test import gen_cluster

from outofcore.api import run_job
from outofcore.backends import cuda as ooc_cuda
from outofcore.backends.registry import gpu_visible
from outofcore.errors import BackendError
from outofcore.runtime.gpu_cluster import GPU_RESOURCE
from tests.helpers import assert_product_close, random_matrix, with_sync_client, write_zarr

pytestmark = pytest.mark.skipif(
    not ooc_cuda.simulator_enabled(),
    reason="runs the CUDA engine on in-process workers: needs numba's CUDA simulator",
)


def operands(folder):
    rng = np.random.default_rng(6)
    a, b = random_matrix(rng, (9, 7), "float32"), random_matrix(rng, (7, 5), "float32")
    write_zarr(folder / "a.zarr", a, (5, 4))
    write_zarr(folder / "b.zarr", b, (4, 3))
    return a, b


#: zarr's I/O loop, tqdm's monitor and the chunk-file pools outlive a job by design.
LASTING_THREADS = {"threads": False}


@gen_cluster(
    nthreads=[("127.0.0.1", 1, {"resources": {GPU_RESOURCE: 1}})],
    timeout=300,
    clean_kwargs=LASTING_THREADS,
)
async def test_auto_runs_cuda_on_workers_that_declare_a_gpu(s, gpu):
    import tempfile  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    folder = Path(tempfile.mkdtemp(prefix="outofcore-backend-"))
    a, b = operands(folder)
    assert not gpu_visible(simulator_counts=False)  # this "client machine" has no GPU

    def job(client):
        return run_job(
            folder / "a.zarr",
            folder / "b.zarr",
            folder / "c.zarr",
            client=client,
            progress=False,
            memory="1MiB",
            tile=(5, 3),
        )

    result = await with_sync_client(s, job)
    assert result.summary["backend"] == "cuda"
    assert len(result.results) == len(result.plan.tasks) == 4  # tiles of 5x3
    assert_product_close(result.output[...], a, b)


@gen_cluster(nthreads=[("127.0.0.1", 1)], timeout=120, clean_kwargs=LASTING_THREADS)
async def test_auto_runs_cpu_and_cuda_is_refused_on_workers_without_a_gpu(s, cpu):
    import tempfile  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    folder = Path(tempfile.mkdtemp(prefix="outofcore-backend-"))
    a, b = operands(folder)

    def job(client, backend, out):
        return run_job(
            folder / "a.zarr",
            folder / "b.zarr",
            folder / out,
            client=client,
            progress=False,
            memory="1MiB",
            backend=backend,
        )

    result = await with_sync_client(s, lambda client: job(client, "auto", "c.zarr"))
    assert result.summary["backend"] == "cpu"
    assert_product_close(result.output[...], a, b)
    with pytest.raises(BackendError, match="no worker of the scheduler at .* declares a GPU"):
        await with_sync_client(s, lambda client: job(client, "cuda", "d.zarr"))
    assert not (folder / "d.zarr").exists()

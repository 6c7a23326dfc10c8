"""The probe's figures turned into the time model's machine, and a job's predicted seconds.

:func:`local_machine` turns the figures (:class:`outofcore.machine.probe.Figures`) into a
:class:`outofcore.planner.model.Machine` for one job (its workers, compute dtype, panel sizes
and codecs): the model stays arithmetic.  A GPU job's machine (:func:`gpu_plan_machine`)
takes its kernel, PCIe and decode rates from the job's
:class:`~outofcore.planner.gpu_rates.GpuTarget` (the measured figures' one home) and only its disk
and fixed costs from the probe.  :func:`predicted_seconds` predicts a job from the cached
figures (:mod:`outofcore.machine.probe_cache`), or from :data:`ASSUMED_FIGURES` where this
machine has not been probed.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from outofcore.backends.registry import gpu_node, is_gpu
from outofcore.machine.probe import GEMM_LARGE, GEMM_SMALL, Figures
from outofcore.machine.probe_cache import cached_figures, machine_figures
from outofcore.planner.gpu_rates import GpuTarget
from outofcore.planner.model import Machine, gpu_machine, predict
from outofcore.runtime.cluster import is_local, tasks_run_here
from outofcore.runtime.worker_sizing import local_blas_threads

if TYPE_CHECKING:
    from outofcore.operands.product import Product
    from outofcore.planner.plan import Plan

#: CPU seconds a job on a LocalCluster pays besides its streams: once (Dask's first
#: submission, the first BLAS call), once more where its workers are processes (each
#: one's first task imports zarr, SciPy's BLAS and outofcore's task modules; a single
#: CPU worker runs in the job's process, which has them), and per task (scheduling,
#: opening its arrays, its journal record).  Measured here (2026-11-24,
#: docs/performance.md) with a thread's whole core: a one-tile 512² job took 0.06 s with
#: the worker in the job's process and 0.3 s with a worker process, 32 such tiles 0.4 s
#: more; under load (a thread getting 0.4 to 0.55 of a core) the demo's job spent 0.5 to
#: 1 s besides its BLAS calls and read waits with a worker process.  Each is divided by
#: the probe's ``cpu_share``.
JOB_START_CPU_SECONDS = 0.05
WORKER_START_CPU_SECONDS = 0.25
TASK_CPU_SECONDS = 0.005


def kernel_flops(figures: Figures, compute_dtype: np.dtype, size: float) -> float:
    """The BLAS rate of a job whose products are about ``size`` on a side, FLOP/s.

    ``size`` is the geometric mean of a product's sides (``(m·k·n)^(1/3)``: a tile task
    multiplies ``tm x tk`` by ``tk x tn``).  sgemm's rate is taken between the small
    and the large product measured (:data:`~outofcore.machine.probe.GEMM_SMALL`,
    :data:`~outofcore.machine.probe.GEMM_LARGE`) by the size's logarithm, and no further than
    either: BLAS runs small products slower.
    float16 and int8 products are multiplied in float32.  float64 (and the exact
    integer products): dgemm's small rate, grown as sgemm's grows with the size.  A
    complex product counts ``2·m·n·k`` flops like a real one and does four real
    multiply-adds per complex one, so it runs at a quarter of the real rate.
    """
    small, large = np.log2(_side(GEMM_SMALL)), np.log2(_side(GEMM_LARGE))
    where = min(1.0, max(0.0, float((np.log2(max(size, 1.0)) - small) / (large - small))))
    growth = (figures.sgemm_flops / figures.sgemm_small_flops) ** where
    dtype = np.dtype(compute_dtype)
    small_rate = figures.sgemm_small_flops
    if dtype in (np.float64, np.complex128):
        small_rate = figures.dgemm_small_flops
    real = small_rate * growth
    return real / 4 if dtype.kind == "c" else real


def _side(shape: tuple[int, int, int]) -> float:
    """The geometric mean of a product's sides."""
    return float(np.prod(shape, dtype=np.float64)) ** (1 / 3)


def local_machine(
    figures: Figures,
    workers: int,
    compute_dtype: np.dtype,
    product_size: float,
    *,
    inputs_compressed: bool = True,
    output_compressed: bool = False,
    worker_processes: bool = True,
    name: str = "this machine",
) -> Machine:
    """The :class:`~outofcore.planner.model.Machine` of ``workers`` LocalCluster workers here.

    Each worker gets ``figures.threads`` threads (measure with
    :func:`outofcore.runtime.worker_sizing.local_blas_threads`); where the workers' threads
    outnumber the cores, each worker's rates are its share.
    The kernel rate is :func:`kernel_flops` for the plan's ``product_size`` (the
    geometric mean of its tiles' sides and panel depth).  Decoding is zstd's or the uncompressed
    read's (``inputs_compressed``), writing likewise (``output_compressed``); the part
    of them hidden behind BLAS is the probe's ``overlap``.  The job's start and each
    task's own cost are :data:`JOB_START_CPU_SECONDS` (and :data:`WORKER_START_CPU_SECONDS`
    with ``worker_processes``) and :data:`TASK_CPU_SECONDS` over the share of a core a
    thread got.
    """
    share = min(1.0, (os.cpu_count() or 1) / (workers * figures.threads))
    start = JOB_START_CPU_SECONDS + (WORKER_START_CPU_SECONDS if worker_processes else 0.0)
    decode = figures.zstd_decode_bps if inputs_compressed else figures.raw_read_bps
    encode = figures.zstd_encode_bps if output_compressed else figures.raw_write_bps
    return Machine(
        name=name,
        nodes=1,
        workers_per_node=workers,
        kernel_flops=kernel_flops(figures, compute_dtype, product_size) * share,
        decode_bps=decode * share,
        encode_bps=encode * share,
        scratch_write_bps=figures.raw_write_bps * share,  # partial tiles are raw .npy
        scratch_read_bps=figures.raw_read_bps * share,
        pcie_bps=None,
        disk_bps=figures.disk_read_bps,
        network_bps=None,
        compression=figures.compression if inputs_compressed else 1.0,
        overlap=figures.overlap,
        start_seconds=start / figures.cpu_share,
        task_seconds=TASK_CPU_SECONDS / figures.cpu_share,
    )


#: Figures of a slow machine, for a job's own decisions where this one has not been
#: probed yet (:func:`predicted_seconds`): a third of the rates the probe measured on
#: this project's 2-core EPYC with both cores free (2026-12-02: sgemm 188 GFLOP/s, zstd
#: decode 1.17 GB/s, raw reads 3.5 GB/s and writes 554 MB/s, disk reads 1.9 GB/s;
#: docs/performance.md), so that a job is rather thought long, but a 3 s job not 17 s
#: (the dashboard's import is 0.4 s of it: :func:`outofcore.jobs.placement.wants_dashboard`).
ASSUMED_FIGURES = Figures(
    measured="assumed",
    threads=1,
    sgemm_flops=63e9,
    sgemm_small_flops=55e9,
    dgemm_small_flops=30e9,
    zstd_decode_bps=390e6,
    zstd_encode_bps=130e6,
    raw_read_bps=1.15e9,
    raw_write_bps=185e6,
    disk_read_bps=630e6,
    disk_unbuffered=False,
    compression=0.92,
    overlap=0.0,
    cpu_share=1.0,
    rounds=0,
    load=None,
    seconds=0.0,
)


def plan_machine(
    figures: Figures, plan: Plan, product: Product, output_codec: str, worker_processes: bool
) -> Machine:
    """The :func:`local_machine` that runs ``plan`` of ``product`` here: its workers, its
    compute dtype and tile size, its inputs' codecs and ``output_codec``."""
    return local_machine(
        figures,
        plan.workers,
        product.types.compute,
        _side((plan.tm, plan.tk, plan.tn)),
        inputs_compressed=any(bool(x.compressors) for x in (product.a, product.b)),
        output_compressed=output_codec != "none",
        worker_processes=worker_processes,
    )


def gpu_plan_machine(
    figures: Figures, plan: Plan, product: Product, gpu: GpuTarget, worker_processes: bool
) -> Machine:
    """The machine of ``plan``'s GPU workers here: ``gpu``'s kernel, PCIe and write rates,
    its decode rate per thread times the plan's decode threads (``io_concurrency``), this
    machine's disk (the probe's), and the fixed costs of a GPU job
    (``gpu``'s ``start_seconds``, and its ``cluster_start_seconds`` with
    ``worker_processes``)."""
    compressed = any(bool(x.compressors) for x in (product.a, product.b))
    start = JOB_START_CPU_SECONDS / figures.cpu_share + gpu.start_seconds
    if worker_processes:
        start += gpu.cluster_start_seconds
    return gpu_machine(
        gpu,
        plan.workers,
        plan.io_concurrency,
        name="this machine's GPUs",
        disk_bps=figures.disk_read_bps,
        compression=figures.compression if compressed else 1.0,
        start_seconds=start,
        task_seconds=TASK_CPU_SECONDS / figures.cpu_share,
    )


def predicted_seconds(
    plan: Plan, product: Product, output_codec: str, worker_processes: bool
) -> float:
    """The job's seconds the model predicts here, from the cached figures (never a probe:
    :func:`~outofcore.machine.probe_cache.cached_figures`), or from :data:`ASSUMED_FIGURES`
    where there are none."""
    figures = cached_figures(local_blas_threads(plan.workers)) or ASSUMED_FIGURES
    machine = plan_machine(figures, plan, product, output_codec, worker_processes)
    return predict(plan, machine).seconds


def machine_prediction(
    product: Product,
    plan: Plan,
    client: Any,
    *,
    gpus: Any,
    backend: str,
    output_codec: str,
    reprobe: bool = False,
    gpu: GpuTarget | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """This machine's figures (probed or cached) and its prediction of ``plan``
    (``basis`` "measured"), with a note where the job runs elsewhere; ``gpus``,
    ``backend`` and ``output_codec`` are the job's (:class:`outofcore.jobs.spec.JobSpec`).

    ``gpu``: the job's tiles are multiplied on GPUs with these rates
    (:func:`gpu_plan_machine`); the prediction's ``rates`` is then ``"gpu"`` and its
    ``gpu_basis`` (also the note) says which rates it rests on."""
    from outofcore.config import flag  # noqa: PLC0415 (imports dask)

    # The tasks run in this process ("sync", or a LocalCluster's CPU workers) or in
    # worker processes, which import the task's modules first.
    node = gpu_node(backend) if gpus else None
    here = tasks_run_here(client, gpus, flag("in-process-worker"), node)

    probed = machine_figures(local_blas_threads(plan.workers), reprobe=reprobe)
    local = plan_machine(probed.figures, plan, product, output_codec, not here)
    rates: dict[str, Any] = {"rates": "cpu"}
    if gpu is not None:
        local = gpu_plan_machine(probed.figures, plan, product, gpu, not here)
        basis = f"{gpu.basis(plan.io_concurrency)}; disk from this machine's probe"
        rates = {"rates": "gpu", "gpu_basis": basis, "gpu": gpu.as_dict()}
    elsewhere = None
    if not is_local(client):
        elsewhere = f"the job runs on the workers of {client}, not here"
    elif gpu is not None:
        elsewhere = f"the job runs on GPUs, predicted with {rates['gpu_basis']}"
    elif gpus or is_gpu(backend):
        elsewhere = "the job runs on GPUs; the probe measured this machine's CPUs"
    machine = {
        "figures": probed.figures.as_dict(),
        "identity": probed.identity,
        "cache": str(probed.cache),
        "probed_now": probed.fresh,
        "probed_because": probed.why,
        "load_per_core": probed.load_per_core,
        "under_load": probed.under_load,
        "runs_here": elsewhere is None,
        "worker_processes": not here,
        "note": elsewhere,
    }
    return machine, {**predict(plan, local).as_dict(), "basis": "measured", **rates}

"""A time model of a plan on paper: one CPU node, a GPU node, an N-node cluster.

Pure arithmetic on a :class:`~outofcore.planner.plan.Plan` and a :class:`Machine`; no
Dask, numba or zarr.  Every stage of a tile task is a stream that runs in
parallel with the others once the pipeline is full (the next panel is decoded
and copied while the current one is multiplied; the tile's rows are written
while its last two panels are multiplied), so the job takes about as long as its
slowest stream, plus the part of each task that cannot overlap, plus what a
job pays besides its streams::

    T ≈ max(T_compute, T_decode, T_pcie, T_disk, T_network, T_write, T_scratch)
        + T_exposed + T_fill + T_start

On a GPU worker the write of C hides behind the next tile only where the worker keeps two
or more tiles in flight (``tiles_in_flight``): the copies back and writes are then a stream
beside the loops, and ``T_exposed`` the other's share of one tile (the last tile's write
after the loops, or the first tile's loop before the writes); with one tile in flight the
device idles while each tile is written, so ``T_exposed`` is every tile's copy back and
write (:func:`outofcore.planner.gpu_rates.device_pipeline`).

On a CPU worker the kernel, the codecs and the writer share the same cores:
``T_cores`` takes the three's place in the ``max``, between their sum (the
cores are all BLAS's, so every second of decoding is one less of BLAS) and
their ``max`` (cores to spare: a machine others use hands the job's reader
thread its own share), by the measured ``overlap`` ``h`` (the part of the
codecs' time hidden behind BLAS, :mod:`outofcore.machine.probe`)::

    T_cores = T_compute + T_codecs - h * min(T_compute, T_codecs),
    T_codecs = T_decode + T_write + T_scratch

There the first panel's decoding is in ``T_cores`` except for its hidden part,
which nothing hides at a task's start: ``T_fill`` counts that part and the
first panel's stored read.

with ``W`` = the workers that get a task (``nodes * workers_per_node``, but
never more than the plan's tasks),
``R`` = the plan's bytes read (decoded), ``O`` = bytes written, ``S`` = the
partial tiles of a split-k plan (written once and read back once, raw),
``c`` = stored/decoded size ratio::

    T_compute = busiest worker's flops / kernel_flops
    T_decode  = R / W / decode_bps            (codec work, per busy worker)
    T_pcie    = (R + O + S) / W / pcie_bps    (GPU only: panels in, tile out)
    T_disk    = (c*(R + O) + 2S) / min(nodes*disk_bps, storage_bps)
    T_network = (c*(R + O) + 2S) / (nodes*network_bps)   (cluster with remote storage)
    T_write   = O / W / encode_bps
    T_scratch = S / W * (1/scratch_write_bps + 1/scratch_read_bps)   (parts write, reductions read)
    T_fill    = tasks per busy worker * (first panel: decode + PCIe + stored read)
                (CPU: h * decode + stored read)
    T_start   = start_seconds + tasks per busy worker * task_seconds

The busiest worker's flops come from the plan's tasks (tiles, or parts of
tiles when k is split) handed out largest first to the least loaded worker
(:func:`outofcore.planner.workload.busiest_worker`, the planner's own estimate).  Rates
are inputs: ``outofcore plan`` builds this machine's from a short probe
(:mod:`outofcore.machine.probe`); a GPU's kernel, PCIe and decode rates are the
measured figures of :mod:`outofcore.planner.gpu_rates` (:func:`gpu_machine`, their one home);
the presets below are stated assumptions (the GPU node's count of GPUs and host
threads, the CPU cluster, :func:`what_ifs`) to be replaced by measurements, and one
historical measurement (:data:`CI_2CORE`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from outofcore.planner.gpu_rates import GpuTarget, device_pipeline
from outofcore.planner.plan import Plan
from outofcore.planner.tiling import make_output_plan
from outofcore.planner.workload import busiest_worker


@dataclass(frozen=True)
class Machine:
    """Rates of one kind of node, and how many of them there are."""

    name: str
    nodes: int
    workers_per_node: int
    #: Sustained multiply rate of one worker's engine (BLAS threads or one GPU), FLOP/s.
    kernel_flops: float
    #: Decoded bytes/s one worker's codec threads produce (zstd, zarr's default).
    decode_bps: float
    #: Decoded bytes/s one worker's codec threads encode for the output.
    encode_bps: float
    #: Host-to-device bytes/s of one GPU (None: a CPU worker, nothing crosses PCIe).
    pcie_bps: float | None
    #: Local storage read bandwidth of one node, bytes/s.
    disk_bps: float
    #: Network bandwidth of one node, bytes/s (None: storage is local to a single node).
    network_bps: float | None
    #: Aggregate bandwidth of shared storage (None: unlimited beyond the nodes' links).
    storage_bps: float | None = None
    #: Stored bytes per decoded byte (zstd on random float32: about 0.92).
    compression: float = 0.92
    #: CPU workers: the part of the codecs' time hidden behind BLAS, from 0 (the cores
    #: add up: every second of decoding is one less of BLAS) to 1 (only the longer counts).
    overlap: float = 0.0
    #: Raw bytes/s of one worker writing partial tiles (split-k) and reading them back;
    #: None: ``encode_bps`` and ``decode_bps``.
    scratch_write_bps: float | None = None
    scratch_read_bps: float | None = None
    #: Seconds a job pays once before its streams flow: each worker's first task
    #: imports the task's modules and starts BLAS's threads (all workers at once).
    start_seconds: float = 0.0
    #: Seconds each task costs besides its streams: scheduling, opening its arrays,
    #: its journal record.
    task_seconds: float = 0.0
    #: GPU workers: output tiles each keeps in flight.  One: a tile's copy back and write
    #: follow its last kernel with the device idle; two or more: they overlap the next
    #: tile's panels, and only the last tile's are exposed (:func:`exposed_output`).
    tiles_in_flight: int = 1

    @property
    def workers(self) -> int:
        return self.nodes * self.workers_per_node

    def scaled(self, nodes: int) -> Machine:
        """The same node kind, ``nodes`` of them."""
        return replace(self, nodes=nodes, name=f"{self.name} x{nodes}")


GB = 1e9
#: Measured once on an earlier CI machine (docs/performance.md, 2026-11), with
#: OpenBLAS's own kernel for the CPU (SkylakeX on those AMD EPYC cores;
#: ``OPENBLAS_CORETYPE`` unset): sgemm ~400 GFLOP/s on the two cores; chunk files +
#: zstd decoding ~0.9 CPU-s/GiB, so ~2.4 GB/s of the two cores' time; uncompressed
#: output written unbuffered ~0.5 CPU-s/GiB (~4 GB/s of the cores), the disk taking
#: ~1.2 GB/s; inputs in the page cache.  Not this machine's rates: ``outofcore plan``
#: measures those (:mod:`outofcore.machine.probe`); kept as a worked example for the tests.
CI_2CORE = Machine(
    name="ci-2core",
    nodes=1,
    workers_per_node=1,
    kernel_flops=400e9,
    decode_bps=2.4 * GB,
    encode_bps=4.0 * GB,
    pcie_bps=None,
    disk_bps=2 * GB,
    network_bps=None,
)


def gpu_machine(
    gpu: GpuTarget,
    workers: int,
    threads: int,
    *,
    name: str,
    disk_bps: float,
    nodes: int = 1,
    compression: float = 0.92,
    start_seconds: float = 0.0,
    task_seconds: float = 0.0,
) -> Machine:
    """The :class:`Machine` of ``nodes`` nodes of ``workers`` GPU workers each, each decoding
    with ``threads`` host threads: the kernel, PCIe, decode and write rates are ``gpu``'s
    (:mod:`outofcore.planner.gpu_rates`, the figures' one home), the disk ``disk_bps``."""
    return Machine(
        name=name,
        nodes=nodes,
        workers_per_node=workers,
        kernel_flops=gpu.kernel_flops,
        decode_bps=gpu.decode_bps(threads),
        encode_bps=gpu.write_bps,
        pcie_bps=gpu.pcie_bps,
        disk_bps=disk_bps,
        network_bps=None,
        compression=compression,
        scratch_write_bps=gpu.scratch_write_bps,
        scratch_read_bps=gpu.scratch_read_bps,
        start_seconds=start_seconds,
        task_seconds=task_seconds,
        tiles_in_flight=gpu.tiles_in_flight,
    )


#: Assumed: an 8-GPU H100 node, 8 host threads decoding per GPU, NVMe RAID at 25 GB/s.
GPU_NODE_GPUS, GPU_NODE_THREADS, GPU_NODE_DISK_BPS = 8, 8, 25 * GB


def gpu_node(gpu: GpuTarget) -> Machine:
    """The assumed GPU node (:data:`GPU_NODE_GPUS` and its threads) with ``gpu``'s rates (a
    backend's table for a dtype, :func:`outofcore.planner.gpu_rates.gpu_target`)."""
    return gpu_machine(
        gpu,
        GPU_NODE_GPUS,
        GPU_NODE_THREADS,
        name=f"gpu-node ({GPU_NODE_GPUS}x H100)",
        disk_bps=GPU_NODE_DISK_BPS,
    )


#: Assumed: CPU nodes of 64 cores (~3.5 TFLOP/s sgemm), one worker each, 100 Gb/s
#: network to shared object storage of 100 GB/s aggregate.
CPU_CLUSTER_NODE = Machine(
    name="cpu-cluster",
    nodes=1,
    workers_per_node=1,
    kernel_flops=3.5e12,
    decode_bps=16 * GB,
    encode_bps=8 * GB,
    pcie_bps=None,
    disk_bps=3 * GB,
    network_bps=12.5 * GB,
    storage_bps=100 * GB,
)


@dataclass(frozen=True)
class Prediction:
    """Predicted seconds of each stream, the total and the bottleneck."""

    machine: str
    workers: int
    #: Workers with a task (no more than the plan's tasks).
    busy_workers: int
    compute: float
    decode: float
    pcie: float
    disk: float
    network: float
    write: float
    #: Partial tiles of a split-k plan written by the parts and read back by the reductions.
    scratch: float
    #: CPU workers: BLAS, codecs and writer on the same cores (``T_cores``; 0 on a GPU).
    cores: float
    #: GPU: the copies back and writes of C not hidden behind the next tile's work
    #: (all of them with one tile in flight, the last tile's with two or more).
    exposed: float
    fill: float
    #: The job's start and the tasks' own costs (``T_start``).
    start: float
    seconds: float
    bottleneck: str
    #: GPU workers: the output tiles each keeps in flight (:attr:`Machine.tiles_in_flight`).
    tiles_in_flight: int = 1

    def as_dict(self) -> dict:
        return asdict(self)


def predict(plan: Plan, machine: Machine) -> Prediction:
    """Predict the job time of ``plan`` on ``machine`` (see the module docstring)."""
    workers = min(machine.workers, len(plan.tasks) * plan.splits)  # those with a task
    read, written, scratch = plan.bytes_read, plan.bytes_written, plan.scratch_bytes
    stored = machine.compression * (read + written) + 2 * scratch
    p = plan.problem
    busiest = 2 * p.k * busiest_worker(p, plan.tm, plan.tn, machine.workers, plan.splits)
    compute = busiest * p.limb_gemms / machine.kernel_flops  # a limb product: several gemm
    decode = read / workers / machine.decode_bps
    pcie = (read + written + scratch) / workers / machine.pcie_bps if machine.pcie_bps else 0.0
    disk_bps = machine.nodes * machine.disk_bps
    if machine.storage_bps:
        disk_bps = min(disk_bps, machine.storage_bps)
    disk = stored / disk_bps
    network = stored / (machine.nodes * machine.network_bps) if machine.network_bps else 0.0
    write = written / workers / machine.encode_bps
    scratch_seconds_per_byte = 1 / (machine.scratch_write_bps or machine.encode_bps) + 1 / (
        machine.scratch_read_bps or machine.decode_bps
    )
    scratch_io = scratch / workers * scratch_seconds_per_byte
    # The first panel of every task is read before anything overlaps it; on a CPU the
    # part of its decoding T_cores does not hide behind BLAS is in T_cores already.
    first = p.itemsize * plan.tk * (plan.tm + plan.tn)
    per_byte = machine.compression / machine.disk_bps
    if machine.pcie_bps:
        per_byte += 1 / machine.decode_bps + 1 / machine.pcie_bps
    else:
        per_byte += machine.overlap / machine.decode_bps
    tasks = len(plan.tasks) * plan.splits + (len(plan.tasks) if plan.splits > 1 else 0)
    per_worker = math.ceil(tasks / workers)
    fill = math.ceil(len(plan.tasks) * plan.splits / workers) * first * per_byte
    start = machine.start_seconds + per_worker * machine.task_seconds
    streams = {
        "compute": compute,
        "decode": decode,
        "pcie": pcie,
        "disk": disk,
        "network": network,
        "write": write,
        "scratch": scratch_io,
    }
    competing = dict(streams)
    cores = exposed = 0.0
    if machine.pcie_bps is None:  # CPU: BLAS, codecs and writer share the cores
        codecs = decode + write + scratch_io
        cores = compute + codecs - machine.overlap * min(compute, codecs)
        competing = {"cores": cores, "disk": disk, "network": network}
    else:  # GPU: the writes a stream beside the loops only with tiles in flight
        output = write + written / workers / machine.pcie_bps  # copies back and writes
        competing.pop("write")
        loop_bottleneck = max(competing, key=competing.__getitem__)
        tiles = math.ceil(len(plan.tasks) * plan.splits / workers)
        slowest, exposed = device_pipeline(
            competing[loop_bottleneck], output, tiles, machine.tiles_in_flight
        )
        competing = {"write" if slowest > competing[loop_bottleneck] else loop_bottleneck: slowest}
    bottleneck = max(competing, key=competing.__getitem__)
    return Prediction(
        machine=machine.name,
        workers=machine.workers,
        busy_workers=workers,
        **streams,
        cores=cores,
        exposed=exposed,
        fill=fill,
        start=start,
        seconds=competing[bottleneck] + exposed + fill + start,
        bottleneck=bottleneck,
        tiles_in_flight=machine.tiles_in_flight if machine.pcie_bps else 1,
    )


def what_ifs(
    plan: Plan,
    nodes: tuple[int, ...] = (4, 16),
    *,
    tile: tuple[int, int] | None = None,
    tk: int | None = None,
    splits: int | None = None,
    shards: bool | None = None,
    gpu: GpuTarget | None = None,
) -> list[Prediction]:
    """Predictions on assumed machines: a GPU node of ``gpu``'s rates (none when None) and
    CPU clusters of ``nodes`` nodes.

    Their node counts and CPU rates are assumptions (:func:`gpu_node`,
    :data:`CPU_CLUSTER_NODE`), the GPU's rates a backend's table (measured elsewhere): what
    the plan would take there, not what it takes here.  Each machine gets its own plan
    (:func:`assumed_plans`, with the job's options).
    """
    options = {"tile": tile, "tk": tk, "splits": splits, "shards": shards, "gpu": gpu}
    return [
        predict(replanned, machine) for machine, replanned in assumed_plans(plan, nodes, **options)
    ]


def assumed_plans(
    plan: Plan,
    nodes: tuple[int, ...] = (4, 16),
    *,
    tile: tuple[int, int] | None = None,
    tk: int | None = None,
    splits: int | None = None,
    shards: bool | None = None,
    gpu: GpuTarget | None = None,
) -> list[tuple[Machine, Plan]]:
    """The assumed machines of :func:`what_ifs` and the plan each gets: made for its number
    of workers, with the same budget per task and the options the job was planned with
    (``tile``, ``tk``, ``splits`` forced; ``shards`` for an output it creates, None: as
    ``plan`` is sharded): :func:`~outofcore.planner.tiling.make_output_plan`, pure and fast.  The
    GPU node's plan (with ``gpu``) is always made again, ranked by its GPU's rates (the
    job's decode threads)."""
    machines = [gpu_node(gpu)] if gpu is not None else []
    machines += [CPU_CLUSTER_NODE.scaled(n) for n in nodes]
    if shards is None:
        shards = plan.problem.shard_tiles
    options = {"tile": tile, "tk": tk, "splits": splits, "shards": shards}
    plans = []
    for machine in machines:
        replanned = plan
        on_gpu = machine.pcie_bps is not None
        if on_gpu or machine.workers != plan.workers:
            replanned = make_output_plan(
                replace(plan.problem, shard_tiles=False),  # the sharding is decided again
                plan.task_budget_bytes,
                machine.workers,
                io_concurrency=plan.io_concurrency,
                gpu=gpu if on_gpu else None,
                **options,
            )
        plans.append((machine, replanned))
    return plans

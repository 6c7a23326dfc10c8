"""The workers of a node's CUDA GPUs: what the runtime's GPU cluster needs of NVIDIA's.

Each worker sees every GPU, rotated so that its own GPU is device 0
(``CUDA_VISIBLE_DEVICES=1,2,3,0`` for the second of four, as dask-cuda does), and has
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (:data:`GPU_WORKER_ENV`), so that CUDA numbers the devices
as NVML and ``nvidia-smi`` do (CUDA's own default puts the fastest first).
:data:`CUDA_NODE` says so to the runtime (:class:`outofcore.runtime.gpu_cluster.GpuNode`).

Two kinds give these workers (:func:`outofcore.runtime.gpu_cluster.start_gpu_cluster`):

* dask-cuda's ``LocalCUDACluster`` (the ``[gpu]`` extra), which adds to them a
  CPU affinity per GPU (the cores of the GPU's NUMA node as NVML gives them,
  near which pinned host buffers belong) and a CUDA context made as each
  starts (its RMM options stay off: the engine allocates through numba), where
  dask-cuda is installed and NVML shows the listed GPUs: it reads NVML as it
  starts and cannot start without a GPU;
* otherwise the runtime's ``SpecCluster`` of Nannies
  (:func:`outofcore.runtime.gpu_cluster.gpu_worker_specs`), with this module's environment.

:func:`choose_gpu_cluster` decides, from facts :func:`probe_gpu_cluster` gathers.  Nothing
here imports numba; dask-cuda and NVML are imported only where a cluster starts.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import sys
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from outofcore.errors import ClusterError
from outofcore.runtime.blas_idle import IDLE_SPIN
from outofcore.runtime.gpu_cluster import GPU_RESOURCE
from outofcore.runtime.loopback import LOCAL_DASHBOARD_ADDRESS, LOCAL_HOST

#: What to install for dask-cuda's ``LocalCUDACluster`` and ``dask cuda worker``.
GPU_EXTRA = "pip install 'outofcore[gpu]'"
#: How the start of a cluster names a LocalCUDACluster.
DASK_CUDA_KIND = "LocalCUDACluster (dask-cuda)"
#: Environment of every GPU worker outofcore starts (beside its ``CUDA_VISIBLE_DEVICES``):
#: CUDA numbers devices in PCI bus order, as NVML and ``nvidia-smi`` do, so ``--gpus``
#: and the rotated ``CUDA_VISIBLE_DEVICES`` name the GPUs ``nvidia-smi -L`` lists; BLAS
#: threads that sleep soon after a call (:data:`outofcore.runtime.blas_idle.IDLE_SPIN`).
GPU_WORKER_ENV = MappingProxyType({"CUDA_DEVICE_ORDER": "PCI_BUS_ID", **IDLE_SPIN})
logger = logging.getLogger("outofcore")
#: CUDA's variable for its device order, and the order ``nvidia-smi`` (and ``--gpus``) use.
DEVICE_ORDER = ("CUDA_DEVICE_ORDER", GPU_WORKER_ENV["CUDA_DEVICE_ORDER"])


def number_devices_as_nvidia_smi(environ: MutableMapping[str, str] | None = None) -> None:
    """Have CUDA in this process number devices as ``nvidia-smi`` does (PCI bus order),
    unless ``$CUDA_DEVICE_ORDER`` is set: call it before CUDA starts (the command does)."""
    environ = os.environ if environ is None else environ
    environ.setdefault(*DEVICE_ORDER)


def numbers_devices_as_nvidia_smi() -> bool:
    """Whether CUDA in this process numbers devices as ``--gpus`` means them."""
    name, order = DEVICE_ORDER
    return os.environ.get(name) == order


def prepare_process() -> None:
    """Ready this process for CUDA before numba or CUDA start: compiled kernels kept
    between processes (:func:`outofcore.backends.cuda.cache_folder.use_kernel_cache`) and
    devices numbered as ``nvidia-smi`` and ``--gpus`` number them (so that one GPU's worker
    can run here).  The command calls it first, through the registry."""
    from outofcore.backends.cuda.cache_folder import use_kernel_cache  # noqa: PLC0415

    use_kernel_cache()
    number_devices_as_nvidia_smi()


def worker_env(gpus: Sequence[int], position: int) -> dict[str, str]:
    """The CUDA environment of the worker of ``gpus[position]``: every listed GPU visible,
    rotated so that its own is device 0, numbered as ``nvidia-smi`` does."""
    rotated = [*gpus[position:], *gpus[:position]]
    return {**GPU_WORKER_ENV, "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in rotated)}


@dataclass(frozen=True)
class GpuClusterChoice:
    """The cluster ``gpus`` start: dask-cuda's ``LocalCUDACluster`` or not, and why;
    ``warn`` where dask-cuda is installed but cannot be used."""

    dask_cuda: bool
    reason: str
    warn: bool = False


def choose_gpu_cluster(
    gpus: Sequence[int], *, dask_cuda_installed: bool, nvml_gpus: int, nvml_note: str = ""
) -> GpuClusterChoice:
    """Which cluster to start for ``gpus``: a pure function of what this node has.

    Parameters
    ----------
    gpus
        The GPU indices the job lists (``--gpus``), as NVML and ``nvidia-smi`` number them.
    dask_cuda_installed
        Whether ``dask_cuda`` can be imported here.
    nvml_gpus
        The GPUs NVML shows on this node (0 where NVML cannot be loaded).
    nvml_note
        Why NVML shows none, where it shows none (NVML's own error).

    Raises
    ------
    ClusterError
        Where NVML shows GPUs but not every listed one, naming both: a worker
        would start on a device that does not exist.
    """
    if not dask_cuda_installed:
        return GpuClusterChoice(
            False,
            f"dask-cuda is not installed ({GPU_EXTRA} for a LocalCUDACluster, with a CPU "
            "affinity per GPU)",
        )
    if nvml_gpus < 1:
        found = f" ({nvml_note})" if nvml_note else ""
        return GpuClusterChoice(
            False,
            f"dask-cuda is installed, but NVML shows no GPU on this node{found}, and a "
            "LocalCUDACluster cannot start without one (is the NVIDIA driver installed, and "
            "the GPU visible here?)",
            warn=True,
        )
    missing = [gpu for gpu in gpus if gpu >= nvml_gpus]
    if missing:
        raise ClusterError(
            f"--gpus {','.join(map(str, gpus))}: NVML shows {nvml_gpus} GPU(s) on this node, "
            f"numbered 0 to {nvml_gpus - 1}, so there is no GPU "
            f"{', '.join(map(str, missing))} (`nvidia-smi -L` lists them)"
        )
    return GpuClusterChoice(True, f"dask-cuda is installed and NVML shows {nvml_gpus} GPU(s)")


def check_gpus_usable(gpus: Sequence[int], device_count: int, simulator: bool) -> None:
    """Refuse ``gpus`` where no CUDA GPU is usable, before any work: a pure function.

    Parameters
    ----------
    gpus
        The GPU indices the job lists (``--gpus``).
    device_count
        The devices the CUDA driver shows this process (0 without a driver).
    simulator
        Whether numba's CUDA simulator stands in for a GPU (``NUMBA_ENABLE_CUDASIM=1``,
        as in the tests): then any ``gpus`` pass.

    Raises
    ------
    ClusterError
        Where the driver shows no device and the simulator is off, naming ``gpus`` and
        the driver's count: the workers would start with no GPU to run on.
    """
    if simulator or device_count > 0:
        return
    raise ClusterError(
        f"--gpus {','.join(map(str, gpus))}: no CUDA GPU is usable here (the CUDA driver "
        f"shows {device_count} devices); leave out --gpus to run on this machine's CPUs, "
        "or run where `nvidia-smi -L` lists the GPUs"
    )


def nvml_gpu_count() -> tuple[int, str]:
    """The GPUs NVML shows on this node, as dask-cuda reads them (``pynvml``, which
    dask-cuda brings), and for none, why: NVML's error, or pynvml missing."""
    try:
        import pynvml  # noqa: PLC0415 (dask-cuda's dependency; only with --gpus)
    except ImportError:
        return 0, "pynvml, which dask-cuda needs, cannot be imported"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return 0, f"NVML: {exc}"
    try:
        return int(pynvml.nvmlDeviceGetCount()), ""
    except pynvml.NVMLError as exc:
        return 0, f"NVML: {exc}"
    finally:
        pynvml.nvmlShutdown()


def dask_cuda_installed() -> bool:
    """Whether ``dask_cuda`` can be found (the ``[gpu]`` extra); imports nothing."""
    try:
        return importlib.util.find_spec("dask_cuda") is not None
    except (ImportError, ValueError):
        return False


def probe_gpu_cluster(gpus: Sequence[int]) -> GpuClusterChoice:
    """:func:`choose_gpu_cluster` for this node: NVML is asked only where dask-cuda is
    installed (it brings pynvml)."""
    installed = dask_cuda_installed()
    count, note = nvml_gpu_count() if installed else (0, "")
    return choose_gpu_cluster(gpus, dask_cuda_installed=installed, nvml_gpus=count, nvml_note=note)


def start_local_cuda_cluster(
    gpus: Sequence[int],
    memory_limit: int,
    silence_logs: int,
    dashboard: bool,
    tiles_in_flight: int = 1,
) -> Any | None:
    """dask-cuda's ``LocalCUDACluster`` for ``gpus`` where :func:`probe_gpu_cluster` chooses
    it, else None (the runtime then starts its own workers with :func:`worker_env`).  The
    choice and its reason go to the ``outofcore`` logger: a warning where dask-cuda is
    installed but cannot be used."""
    choice = probe_gpu_cluster(gpus)
    if not choice.dask_cuda:
        logger.log(
            logging.WARNING if choice.warn else logging.INFO,
            "starting outofcore's own GPU workers, not dask-cuda's LocalCUDACluster: %s",
            choice.reason,
        )
        return None
    logger.info("starting a %s: %s", DASK_CUDA_KIND, choice.reason)
    return local_cuda_cluster_class()(
        CUDA_VISIBLE_DEVICES=list(gpus),
        n_workers=len(gpus),
        threads_per_worker=tiles_in_flight,
        memory_limit=memory_limit,
        resources={GPU_RESOURCE: tiles_in_flight},
        host=LOCAL_HOST,
        dashboard_address=LOCAL_DASHBOARD_ADDRESS,
        scheduler_kwargs={"dashboard": dashboard},
        silence_logs=silence_logs,
    )


@functools.cache
def local_cuda_cluster_class() -> type:
    """dask-cuda's ``LocalCUDACluster`` with :data:`GPU_WORKER_ENV` in each worker's
    environment (made once, on first use: dask_cuda is imported only here).

    ``LocalCUDACluster`` sets each worker's ``env`` to its ``CUDA_VISIBLE_DEVICES``
    alone (``new_worker_spec``), replacing any ``env`` passed to it, so the variable is
    added to each spec it makes rather than to this process's environment.
    """
    from dask_cuda import LocalCUDACluster  # noqa: PLC0415 (the [gpu] extra)

    class OrderedLocalCUDACluster(LocalCUDACluster):
        """``LocalCUDACluster`` whose workers number devices as ``nvidia-smi`` does."""

        def new_worker_spec(self) -> dict[str, Any]:
            specs = super().new_worker_spec()
            for spec in specs.values():
                options = spec.setdefault("options", {})
                options["env"] = {**GPU_WORKER_ENV, **options.get("env", {})}
            return specs

    return OrderedLocalCUDACluster


def dask_cuda_kind(cluster: Any) -> str | None:
    """:data:`DASK_CUDA_KIND` for a dask-cuda ``LocalCUDACluster``, else None."""
    dask_cuda = sys.modules.get("dask_cuda")  # imported where one was started
    if dask_cuda is not None and isinstance(cluster, dask_cuda.LocalCUDACluster):
        return DASK_CUDA_KIND
    return None


@dataclass(frozen=True)
class CudaNode:
    """The CUDA GPUs of a node, as the runtime's GPU cluster asks for them
    (:class:`outofcore.runtime.gpu_cluster.GpuNode`)."""

    def worker_env(self, gpus: Sequence[int], position: int) -> Mapping[str, str]:
        return worker_env(gpus, position)

    def numbers_devices_as_listed(self) -> bool:
        return numbers_devices_as_nvidia_smi()

    def own_cluster(
        self,
        gpus: Sequence[int],
        memory_limit: int,
        silence_logs: int,
        dashboard: bool,
        tiles_in_flight: int = 1,
    ) -> Any | None:
        return start_local_cuda_cluster(
            gpus, memory_limit, silence_logs, dashboard, tiles_in_flight
        )

    def cluster_kind(self, cluster: Any) -> str | None:
        return dask_cuda_kind(cluster)

    def check_usable(self, gpus: Sequence[int]) -> None:
        """:func:`check_gpus_usable` for this process: the CUDA driver's device count
        (without importing numba; numba's CUDA simulator counts as a GPU)."""
        from outofcore.backends.cuda import probe  # noqa: PLC0415 (the standard library)

        simulator = probe.simulator_enabled()
        check_gpus_usable(gpus, 0 if simulator else probe.device_count(), simulator)


#: The node every CUDA backend's GPU workers are started for.
CUDA_NODE = CudaNode()

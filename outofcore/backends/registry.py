"""The backends, by name: each an object that says what it is and makes its engine.

distributed picks a transport and cubed an executor from a registry of objects; here a
:class:`Backend` holds everything about one way of multiplying tiles that the rest of
outofcore asks: whether it is a GPU, how to probe for it without importing its libraries,
what to install when it is missing, its engine, its capabilities, and (for a device) the
rates table the planner ranks tiles with and the kernel's block table the device tiling
follows.  ``"auto"`` is resolved here (:func:`resolve_backend`), and no other module names a
backend in a tuple: ask :func:`get` (``get(name).gpu``) instead.

Importing this module imports no GPU library: probes use the standard library
(:mod:`outofcore.backends.cuda.probe`) and engines are made on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from outofcore.backends import timed
from outofcore.backends.cpu import CpuEngine
from outofcore.backends.cuda import blocks as cuda_blocks
from outofcore.backends.cuda import probe as cuda_probe
from outofcore.backends.cuda import rates as cuda_rates
from outofcore.backends.cuda.workers import CUDA_NODE
from outofcore.backends.cuda.workers import prepare_process as prepare_for_cuda
from outofcore.backends.protocol import EngineCapabilities, TileEngine
from outofcore.errors import BackendError
from outofcore.planner.gpu_rates import DeviceRates, GpuTarget, gpu_target
from outofcore.runtime.gpu_cluster import GpuNode

__all__ = [
    "AUTO",
    "BACKENDS",
    "KEEP_OUR_KERNEL_WITHIN",
    "OUR_KERNEL",
    "Backend",
    "backend_names",
    "check_backend",
    "assumed_gpu",
    "auto_gpu_backend",
    "backend_choice",
    "get",
    "gpu_node",
    "gpu_visible",
    "is_gpu",
    "job_gpu_target",
    "make_engine",
    "prepare_process",
    "register",
    "resolve_backend",
]

#: The name that picks a backend for the machine (or cluster) the tasks run on.
AUTO = "auto"


@dataclass(frozen=True)
class Backend:
    """One way of multiplying a tile's panels, and everything outofcore asks about it."""

    name: str
    #: Whether its engines multiply on a GPU (the plan ranks tiles by a device's rates, the
    #: job asks for GPU workers).
    gpu: bool
    capabilities: EngineCapabilities
    #: Makes a new engine (costly for a device: the caller keeps it for its thread).
    engine: Callable[[], TileEngine]
    #: ``usable(simulator_counts)``: whether this machine can run it, cheaply (no import of
    #: the backend's libraries).  ``simulator_counts``: numba's CUDA simulator counts.
    usable: Callable[[bool], bool]
    #: Raises BackendError naming what to install when the backend's libraries are missing.
    require: Callable[[], None]
    #: A GPU backend: its device's rates (the planner's table); None on the CPU.
    rates: DeviceRates | None = None
    #: A GPU backend: its kernel's block ``(bm, bn, bk)`` by element size, which device tiles
    #: are cut in multiples of; None on the CPU.
    blocks: Mapping[int, tuple[int, int, int]] | None = None
    #: A GPU backend: what its GPU workers need of a node (the devices each sees, their
    #: numbering, a vendor's own cluster), for the runtime; None on the CPU.
    node: GpuNode | None = None
    #: One line for ``--help`` and messages.
    summary: str = ""
    #: Readies a process for the backend before its libraries start (environment the
    #: device library reads once); the command calls every backend's first.
    prepare: Callable[[], None] = lambda: None
    #: Whether ``"auto"`` may choose it, on a machine with a GPU, for a dtype its rates
    #: multiply fastest (:func:`auto_gpu_backend`); never a stand-in such as the timed device.
    auto: bool = False

    def installed(self) -> bool:
        """Whether its libraries are installed here (``require`` passes); imports nothing."""
        try:
            self.require()
        except BackendError:
            return False
        return True


def _nothing_to_install() -> None:
    """The CPU backend needs nothing beyond the base install."""


def _cuda_engine(name: str, require: Callable[[], None]) -> Callable[[], TileEngine]:
    def make() -> TileEngine:
        from outofcore.backends.cuda import make_engine as make_cuda_engine  # noqa: PLC0415

        require()  # what to install, named (CuPy for "cupy"), before numba starts
        return make_cuda_engine(name)

    return make


def gpu_visible(simulator_counts: bool = True) -> bool:
    """Return True when CUDA kernels can run here, without importing numba.

    A real GPU (the CUDA driver shows a device) counts when numba-cuda is installed;
    numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) counts only when
    ``simulator_counts``: asked for by name it is fine for tests, but ``"auto"`` must never
    pick a simulator.
    """
    if not cuda_probe.numba_cuda_installed():
        return False
    if cuda_probe.simulator_enabled():
        return simulator_counts
    return cuda_probe.device_count() > 0


_REGISTRY: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    """Add ``backend`` to the registry (a name taken once); return it.

    Raises
    ------
    BackendError
        For a name already registered, or ``"auto"``.
    """
    if backend.name == AUTO or backend.name in _REGISTRY:
        raise BackendError(f"backend name {backend.name!r} is taken")
    _REGISTRY[backend.name] = backend
    return backend


register(
    Backend(
        name="cpu",
        gpu=False,
        capabilities=CpuEngine.capabilities,
        engine=CpuEngine,
        usable=lambda simulator_counts: True,
        require=_nothing_to_install,
        summary="BLAS (SciPy's OpenBLAS) on the worker's cores",
    )
)
for _name, _rates, _require, _summary in (
    ("cuda", cuda_rates.OUR_KERNEL, cuda_probe.require_numba_cuda, "outofcore's numba CUDA kernel"),
    ("cupy", cuda_rates.CUBLAS, cuda_probe.require_cupy, "cuBLAS through CuPy"),
):
    register(
        Backend(
            name=_name,
            gpu=True,
            capabilities=EngineCapabilities(timings=True, device=True),
            engine=_cuda_engine(_name, _require),
            usable=gpu_visible,
            require=_require,
            rates=_rates,
            blocks=cuda_blocks.KERNEL_BLOCKS,
            node=CUDA_NODE,
            summary=_summary,
            prepare=prepare_for_cuda,
            auto=True,
        )
    )


# The timed device (issue 51, item 2): the device engine over a GPU that only takes the
# time a GPU would, on the host (outofcore.backends.timed); never chosen by "auto".
register(
    Backend(
        name=timed.NAME,
        gpu=True,
        capabilities=timed.CAPABILITIES,
        engine=timed.TimedEngine,
        usable=lambda simulator_counts: True,
        require=_nothing_to_install,
        rates=timed.RATES,
        blocks=timed.RATES.blocks,
        node=timed.TIMED_NODE,
        summary=timed.SUMMARY,
    )
)


def backend_names() -> tuple[str, ...]:
    """Every name a job takes: ``"auto"`` and each registered backend's."""
    return (AUTO, *_REGISTRY)


#: The names a job takes, for the command line's choices (``"auto"`` first).
BACKENDS = backend_names()


def get(name: str) -> Backend:
    """The registered backend called ``name``.

    Raises
    ------
    BackendError
        For ``"auto"`` (resolve it first: :func:`resolve_backend`) or an unknown name.
    """
    check_backend(name)
    if name == AUTO:
        raise BackendError("backend 'auto' names no backend until it is resolved")
    return _REGISTRY[name]


def check_backend(backend: str) -> str:
    """``backend`` if it is ``"auto"`` or a registered name (nothing is probed).

    Raises
    ------
    BackendError
        For an unknown name.
    """
    if backend != AUTO and backend not in _REGISTRY:
        raise BackendError(
            f"unknown backend {backend!r}; choose one of {', '.join(backend_names())}"
        )
    return backend


def is_gpu(backend: str) -> bool:
    """Whether ``backend`` names a GPU backend (``"auto"`` is none until resolved)."""
    return backend != AUTO and get(backend).gpu


#: ``"auto"`` keeps our kernel for a dtype while its rate is at least this share of the
#: fastest backend's that is installed here (issue 54: float32's target against cuBLAS);
#: below it, the faster one multiplies (cuBLAS's DMMA for float64 and complex128, 4x ours).
KEEP_OUR_KERNEL_WITHIN = 0.85
#: The backend ``"auto"`` chooses on a GPU unless another multiplies a dtype faster.
OUR_KERNEL = "cuda"


def auto_gpu_backend(dtype: str | None, candidates: Iterable[Backend] | None = None) -> str:
    """The GPU backend ``"auto"`` chooses for products multiplied in ``dtype`` (a compute
    dtype's name; None: not known yet, our kernel): ours, unless one of ``candidates`` (the
    registered backends ``"auto"`` may choose, installed here) multiplies ``dtype`` at over
    ``1 / KEEP_OUR_KERNEL_WITHIN`` times our kernel's rate; then the fastest of those.  The
    rates are each backend's table (:attr:`Backend.rates`)."""
    ours = get(OUR_KERNEL)
    if dtype is None or ours.rates is None or dtype not in ours.rates.kernel_flops:
        return ours.name
    if candidates is None:
        candidates = [b for b in _REGISTRY.values() if b.auto and b.gpu and b.installed()]
    floor = ours.rates.kernel_flops[dtype] / KEEP_OUR_KERNEL_WITHIN
    rates = {
        b.name: b.rates.kernel_flops[dtype]
        for b in candidates
        if b.rates is not None and dtype in b.rates.kernel_flops
    }
    faster = {name: rate for name, rate in rates.items() if rate > floor}
    return max(faster, key=faster.__getitem__) if faster else ours.name


def backend_choice(backend: str, dtype: str) -> str:
    """In words, how ``backend`` multiplies ``dtype`` beside our kernel, by their rates
    tables (for ``outofcore plan``): ``"cuBLAS 57.3 TFLOP/s float64, our kernel 14.6
    (0.25 of it)"``; empty for a backend without rates."""
    chosen, ours = get(backend).rates, get(OUR_KERNEL).rates
    if chosen is None or dtype not in chosen.kernel_flops:
        return ""
    text = f"{chosen.engine} {chosen.kernel_flops[dtype] / 1e12:.1f} TFLOP/s {dtype}"
    if backend == OUR_KERNEL or ours is None or dtype not in ours.kernel_flops:
        return text
    share = ours.kernel_flops[dtype] / chosen.kernel_flops[dtype]
    return f"{text}, our kernel {ours.kernel_flops[dtype] / 1e12:.1f} ({share:.2f} of it)"


def resolve_backend(
    backend: str, gpu_workers: int | None = None, where: str = "", dtype: str | None = None
) -> str:
    """Turn ``"auto"`` into a concrete backend and check the one asked for is usable.

    ``gpu_workers`` None: the tasks run on this machine (in this process or a
    LocalCluster), and ``"auto"`` is a GPU backend when a real GPU is visible here: our
    kernel, or for a product multiplied in ``dtype`` a backend installed here whose rates
    beat it clearly (:func:`auto_gpu_backend`: cuBLAS through CuPy for float64).  Else the
    tasks run on a cluster's workers (the scheduler at ``where``), of which ``gpu_workers``
    declare a ``GPU`` resource: ``"auto"`` is ``"cuda"`` when any does, whatever the
    machine submitting has (what the workers have installed is not known here).

    Raises
    ------
    BackendError
        For an unknown name, or a GPU backend where no GPU is visible (no worker declaring
        one), or its libraries are not installed.
    """
    check_backend(backend)
    if backend == AUTO:
        if gpu_workers is not None:
            return OUR_KERNEL if gpu_workers else "cpu"
        return auto_gpu_backend(dtype) if get(OUR_KERNEL).usable(False) else "cpu"
    chosen = get(backend)
    if gpu_workers is not None:
        if chosen.gpu and not gpu_workers:
            raise BackendError(
                f"backend {backend!r} needs GPU workers, and no worker of the scheduler at "
                f"{where} declares a GPU resource (start them with `dask worker ... "
                "--resources GPU=1`), or use backend 'cpu'"
            )
        return backend
    chosen.require()
    if not chosen.usable(True):
        raise BackendError(
            f"backend {backend!r} needs a CUDA GPU and driver, and none is visible here "
            "(set NUMBA_ENABLE_CUDASIM=1 to use numba's CUDA simulator, or use backend 'cpu')"
        )
    return backend


def gpu_node(backend: str) -> GpuNode:
    """The node of the GPU workers a job with ``backend`` starts where it lists GPUs: the
    backend's own, else (``"auto"``, or a CPU backend on GPU workers) our kernel's."""
    own = get(backend).node if backend != AUTO else None
    node = own or get("cuda").node
    if node is None:  # pragma: no cover (the CUDA backend always has its node)
        raise BackendError("the 'cuda' backend has no GPU node")
    return node


def prepare_process() -> None:
    """Ready this process for every backend before any backend's library starts (the
    command calls it first): each backend's ``prepare``, once."""
    for prepare in dict.fromkeys(backend.prepare for backend in _REGISTRY.values()):
        prepare()


def make_engine(backend: str) -> TileEngine:
    """Return a new tile engine for a concrete backend name (``cpu``, ``cuda``, ...).

    Raises
    ------
    BackendError
        For ``"auto"`` or an unknown name, or a backend that cannot run here.
    """
    return get(backend).engine()


def job_gpu_target(
    backend: str,
    gpu_workers: bool,
    dtype: str,
    *,
    device_memory: int | None = None,
    transposed: bool = False,
    tiles_in_flight: int = 1,
) -> GpuTarget | None:
    """The GPU a job's tiles are multiplied on, as the plan sees it, or None (a CPU job).

    A job is on GPUs when its ``backend`` is a GPU backend, or ``auto`` with ``gpu_workers``
    (``--gpus``, or a cluster's workers that declare a GPU: our kernel, ``cuda``); its kernel
    multiplies in ``dtype``, the product's compute dtype (a dtype the backend's kernel does
    not take, such as a wide integer product's, runs on the CPU: None), at the rates of the
    backend's table, on ``device_memory`` (None: each engine's own share, unknown here), with
    a device scratch slice where an operand is ``transposed``, each GPU worker keeping
    ``tiles_in_flight`` output tiles in flight (its threads).
    """
    if backend == AUTO:
        if not gpu_workers:
            return None
        backend = OUR_KERNEL
    chosen = get(backend)
    if not chosen.gpu or chosen.rates is None or dtype not in chosen.rates.kernel_flops:
        return None
    return gpu_target(
        dtype,
        chosen.rates,
        device_memory=device_memory,
        transposed=transposed,
        backend=backend,
        tiles_in_flight=tiles_in_flight,
    )


def assumed_gpu(dtype: str) -> GpuTarget:
    """The GPU of the assumed GPU node ``outofcore plan`` predicts on: our kernel (backend
    ``cuda``) in ``dtype``, or in float64 for a dtype it does not take (a wide integer
    product's float64 limbs)."""
    rates = get("cuda").rates
    if rates is None:  # pragma: no cover (the CUDA backend always has its table)
        raise BackendError("the 'cuda' backend has no rates table")
    return gpu_target(dtype if dtype in rates.kernel_flops else "float64", rates)

"""The timed backend: the device engine over the timed device, a GPU that only takes time.

The device engine (:class:`outofcore.backends.device.engine.DeviceEngine`, the same code
the CUDA backend runs on numba-cuda) runs here over a
:class:`~outofcore.backends.timed.device.TimedDevice`: each copy and kernel is a real wait
of its modelled time on the device's per-stream threads, by default with the CUDA
backend's measured H100/H200 figures (:data:`RATES`), so a machine with no GPU measures
what a GPU schedule gives (the overlap of streams, the exposed copies) while decoding,
writing and recording stay real.  Imports no GPU library.

* :class:`TimedEngine`: the engine, on a device of its own or the process's
  (:func:`process_device`, which :func:`use_process_device` replaces: a benchmark's model).
* :data:`TIMED_NODE`: the timed device's GPU workers (one timed device per worker
  process, made as the job's process's is: :data:`DEVICE_VARIABLE`; a single one's
  worker a thread of the job's process).
* :data:`RATES`: the backend's rates table for the planner; :data:`CAPABILITIES`.
* The registry's ``"timed"`` backend (:mod:`outofcore.backends.registry`) makes
  :class:`TimedEngine` with no arguments.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from outofcore.backends.cuda import rates as cuda_rates
from outofcore.backends.device.engine import DeviceEngine
from outofcore.backends.device.share import DEVICE_FRACTION
from outofcore.backends.protocol import EngineCapabilities
from outofcore.backends.timed.device import Ledger, TimedDevice, TimedModel
from outofcore.errors import InputError
from outofcore.planner.gpu_rates import DeviceRates

__all__ = [
    "CAPABILITIES",
    "DEVICE_VARIABLE",
    "NAME",
    "RATES",
    "SUMMARY",
    "Ledger",
    "TimedDevice",
    "TimedEngine",
    "TimedModel",
    "TIMED_NODE",
    "TimedNode",
    "process_device",
    "use_process_device",
]

#: The backend's name in the registry.
NAME = "timed"
#: One line for ``--help`` and messages.
SUMMARY = "the timed device: the CUDA engine's schedule as real waits, on the host"
#: What the engine offers: the device engine's (timings from the ledger, a device budget).
CAPABILITIES = EngineCapabilities(timings=True, device=True)
#: The timed device's rates: the CUDA backend's measured kernel and copies, no CUDA context.
RATES: DeviceRates = dataclasses.replace(
    cuda_rates.OUR_KERNEL,
    engine="timed device",
    start_seconds=0.0,
    source=f"timed device, modelled on {cuda_rates.OUR_KERNEL.source}",
)

#: The environment variable a timed GPU worker process makes its device from: the job's
#: process's device (:func:`describe`), so that N workers are N devices of one model.
DEVICE_VARIABLE = "OUTOFCORE_TIMED_DEVICE"

_lock = threading.Lock()
_process_device: TimedDevice | None = None


def process_device() -> TimedDevice:
    """The process's timed device, made on first use: as :data:`DEVICE_VARIABLE` describes
    it (a timed GPU worker's), else with :data:`RATES` and arithmetic; the one the
    registry's engines share, as task threads share a process's GPU."""
    global _process_device
    with _lock:
        if _process_device is None:
            described = os.environ.get(DEVICE_VARIABLE)
            _process_device = (
                from_description(described)
                if described
                else TimedDevice(TimedModel.from_rates(RATES))
            )
        return _process_device


def describe(device: TimedDevice) -> str:
    """``device``'s model and arithmetic as one line of JSON (:func:`from_description`)."""
    model = dataclasses.asdict(device.model)
    model["blocks"] = {str(size): list(block) for size, block in device.model.blocks.items()}
    return json.dumps({"model": model, "arithmetic": device.arithmetic})


def from_description(text: str) -> TimedDevice:
    """A new timed device as :func:`describe` wrote it.

    Raises
    ------
    InputError
        Naming :data:`DEVICE_VARIABLE`, where ``text`` describes no timed device.
    """
    try:
        described = json.loads(text)
        model = dict(described["model"])
        model["blocks"] = {int(size): tuple(block) for size, block in model["blocks"].items()}
        return TimedDevice(TimedModel(**model), arithmetic=bool(described["arithmetic"]))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"{DEVICE_VARIABLE}: not a timed device's description ({exc})") from None


def use_process_device(device: TimedDevice | None) -> TimedDevice | None:
    """Make ``device`` the process's timed device (None: a default one again, made on
    next use) for the engines made after; returns the one it replaces.  Engines already
    made keep theirs: a worker's thread keeps its engine, so set this before its tasks."""
    global _process_device
    with _lock:
        previous, _process_device = _process_device, device
        return previous


@dataclasses.dataclass(frozen=True)
class TimedNode:
    """The timed device's GPU workers (:class:`outofcore.runtime.gpu_cluster.GpuNode`):
    each worker process has its own timed device, made as the job's process's is
    (:data:`DEVICE_VARIABLE`), a worker thread of the job's process the process's (the
    in-process single-GPU worker); nothing to select, nothing to check."""

    def worker_env(self, gpus: Sequence[int], position: int) -> Mapping[str, str]:
        return {DEVICE_VARIABLE: describe(process_device())}

    def numbers_devices_as_listed(self) -> bool:
        return True

    def own_cluster(
        self,
        gpus: Sequence[int],
        memory_limit: int,
        silence_logs: int,
        dashboard: bool,
        tiles_in_flight: int = 1,
    ) -> Any | None:
        return None

    def cluster_kind(self, cluster: Any) -> str | None:
        return None

    def check_usable(self, gpus: Sequence[int]) -> None:
        """Every listed timed device is usable."""


#: The node every timed backend's GPU workers are started for.
TIMED_NODE = TimedNode()


class TimedEngine(DeviceEngine):
    """The device engine on a timed device (see ``outofcore.backends.protocol.TileEngine``).

    Parameters
    ----------
    device
        The timed device to run on; the process's (:func:`process_device`) when None.
    fraction
        Share of the device's memory the engines on it may use together.
    device_memory
        A further limit in bytes (``--device-memory``).

    ``timings()`` reports the ledger's modelled kernel and copy seconds of the last tile.
    """

    def __init__(
        self,
        device: TimedDevice | None = None,
        *,
        fraction: float = DEVICE_FRACTION,
        device_memory: int | None = None,
    ) -> None:
        self.device = process_device() if device is None else device
        super().__init__(NAME, self.device, fraction=fraction, device_memory=device_memory)

    def wrote(self, nbytes: int) -> None:
        """The task wrote ``nbytes`` of the finished tile: the device's modelled write
        (:meth:`~outofcore.backends.timed.device.TimedDevice.host_write`)."""
        self.device.host_write(nbytes)

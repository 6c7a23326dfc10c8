"""The timed backend: the device engine over the timed device, a GPU that only takes time.

The device engine (:class:`outofcore.backends.device.engine.DeviceEngine`, the same code
the CUDA backend runs on numba-cuda) runs here over a
:class:`~outofcore.backends.timed.device.TimedDevice`: each copy and kernel is a real wait
of its modelled time on the device's per-stream threads, by default with the CUDA
backend's measured H100/H200 figures (:data:`RATES`), so a machine with no GPU measures
what a GPU schedule gives (the overlap of streams, the exposed copies) while decoding,
writing and recording stay real.  Imports no GPU library.

* :class:`TimedEngine`: the engine, on a device of its own or the process's
  (:func:`process_device`).
* :data:`RATES`: the backend's rates table for the planner; :data:`CAPABILITIES`.
* The registry's ``"timed"`` backend (:mod:`outofcore.backends.registry`) makes
  :class:`TimedEngine` with no arguments.
"""

from __future__ import annotations

import dataclasses
import threading

from outofcore.backends.cuda import rates as cuda_rates
from outofcore.backends.device.engine import DeviceEngine
from outofcore.backends.device.share import DEVICE_FRACTION
from outofcore.backends.protocol import EngineCapabilities
from outofcore.backends.timed.device import Ledger, TimedDevice, TimedModel
from outofcore.planner.gpu_rates import DeviceRates

__all__ = [
    "CAPABILITIES",
    "NAME",
    "RATES",
    "SUMMARY",
    "Ledger",
    "TimedDevice",
    "TimedEngine",
    "TimedModel",
    "process_device",
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

_lock = threading.Lock()
_process_device: TimedDevice | None = None


def process_device() -> TimedDevice:
    """The process's timed device (made on first use, with :data:`RATES` and arithmetic):
    the one the registry's engines share, as task threads share a process's GPU."""
    global _process_device
    with _lock:
        if _process_device is None:
            _process_device = TimedDevice(TimedModel.from_rates(RATES))
        return _process_device


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

"""The GPU that a job's worker in this process uses (a single GPU's job, in process).

A GPU worker process of its own sees its GPU as device 0 (``CUDA_VISIBLE_DEVICES``,
:mod:`outofcore.backends.cuda.workers`); a worker thread of this process sees every GPU, so
each engine it makes selects the job's (:func:`select_for_this_thread`, numbered as
``nvidia-smi`` does: :func:`outofcore.backends.cuda.workers.numbers_devices_as_nvidia_smi`) while
:func:`in_process_device` holds.  Imports no numba until an engine selects.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from outofcore.errors import BackendError

_lock = threading.Lock()
_device: int | None = None


@contextlib.contextmanager
def in_process_device(gpu: int) -> Iterator[None]:
    """Engines made in this process while the block runs compute on GPU ``gpu``.

    Raises
    ------
    BackendError
        When a job in this process already computes on another GPU.
    """
    global _device
    with _lock:
        if _device is not None and _device != gpu:
            raise BackendError(
                f"a job in this process already computes on GPU {_device}; GPU {gpu} needs "
                "a worker process of its own: set the in-process-worker setting to 0"
            )
        previous, _device = _device, gpu
    try:
        yield
    finally:
        with _lock:
            _device = previous


def select_for_this_thread() -> None:
    """Make the GPU of the job in this process current in the calling thread (nothing
    when none is set: the process's current device, device 0 of a GPU worker)."""
    device = _device
    if device is None:
        return
    from numba import cuda  # noqa: PLC0415 (an engine is being made: numba is needed)

    cuda.select_device(device)

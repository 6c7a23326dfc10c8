"""What every task of one job shares on a worker (:class:`TileJob`): the product, the
output, the panels, how to compute."""

from __future__ import annotations

from dataclasses import dataclass

import zarr

from outofcore.operands.product import Product


@dataclass(frozen=True)
class TileJob:
    """What every task of one job shares: the product, the output, the panels, how to compute."""

    product: Product
    c: zarr.Array
    panels: tuple[tuple[int, int], ...]
    tm: int
    tn: int
    tk: int
    backend: str
    blas_threads: int
    io_concurrency: int
    #: This run's job id (fresh for every run, resumed ones too): kept panels belong to it.
    job_id: str
    #: Cap on the device bytes of a GPU engine (``--device-memory``); None: its own budget.
    device_memory: int | None = None
    #: Tasks a GPU worker runs at once on its device, each with its own engine (its
    #: threads: ``gpu-tiles-in-flight``); 1 on CPU workers.
    tiles_in_flight: int = 1

"""Operands that are stored arrays joined along one axis: ``da.concatenate([x, y])``.

A concatenation of 2-D dask arrays that each read a whole zarr array (the same dtype,
chunks and transpose, the same length across) is read part by part: a panel that
spans two arrays reads its rows (or columns) from each (:meth:`Joined.pieces`).  Every
part is an input of the job: fingerprinted, checked unchanged, never the output.
dask.array records no parts in its graph, only a block a source block; :func:`joined_reads`
rebuilds them from those blocks and checks that they tile the layer in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from outofcore.errors import InputError


@dataclass(frozen=True, eq=False)
class Joined:
    """Stored 2-D arrays joined along the stored ``axis`` (0: one under the other)."""

    arrays: tuple[Any, ...]
    axis: int

    def __post_init__(self) -> None:
        """Refuse parts that do not join: another dtype, length across, or shards."""
        problem = self.problem()
        if problem is not None:
            raise InputError(problem)

    def problem(self) -> str | None:
        """Why these parts do not join (None: they do)."""
        first = self.arrays[0]
        across = 1 - self.axis
        for array in self.arrays[1:]:
            same = (
                array.ndim == first.ndim == 2
                and np.dtype(array.dtype) == np.dtype(first.dtype)
                and array.shape[across] == first.shape[across]
                and array.shards == first.shards
            )
            if not same:
                return (
                    f"the arrays joined along axis {self.axis} differ: {_text(first)} and "
                    f"{_text(array)} (outofcore joins arrays of one dtype, shards and length "
                    "across); store the concatenation first"
                )
        return None

    @property
    def chunks(self) -> tuple[int, int]:
        """The largest chunk edges of the parts (what the plan counts per chunk)."""
        rows = max(array.chunks[0] for array in self.arrays)
        cols = max(array.chunks[1] for array in self.arrays)
        return rows, cols

    @property
    def shards(self) -> Any:
        return self.arrays[0].shards

    @property
    def shape(self) -> tuple[int, int]:
        """The joined shape, as stored."""
        shape = list(self.arrays[0].shape)
        shape[self.axis] = sum(array.shape[self.axis] for array in self.arrays)
        return shape[0], shape[1]

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.arrays[0].dtype)

    @property
    def ndim(self) -> int:
        return 2

    def pieces(self, start: int, stop: int) -> list[tuple[int, int, int, int]]:
        """The parts ``start:stop`` (along the joined axis) reads: ``(part, part_start,
        part_stop, offset)``, ``offset`` where the piece starts within ``start:stop``."""
        found, at = [], 0
        for index, array in enumerate(self.arrays):
            length = array.shape[self.axis]
            lo, hi = max(start, at), min(stop, at + length)
            if lo < hi:
                found.append((index, lo - at, hi - at, lo - start))
            at += length
        return found

    def describe(self) -> dict[str, Any]:
        """JSON-ready (the job's identity): the axis and each part's shape; the parts
        themselves are inputs of their own (fingerprinted)."""
        return {"axis": self.axis, "parts": [list(array.shape) for array in self.arrays]}


def joined_reads(graph: Any, name: str, reads: Any) -> tuple[Joined, bool] | None:
    """The stored arrays dask's concatenate layer ``name`` joins, and whether it joins
    their transposes (``reads(graph, part)``: a part's zarr array and flag, or None);
    None for any other layer, or parts that are more than reads."""
    from dask.utils import key_split  # noqa: PLC0415

    layer = graph.layers.get(name)
    if key_split(name) != "concatenate" or not hasattr(layer, "keys"):
        return None
    blocks = {}
    for key in layer:
        source = layer[key]
        source = getattr(source, "target", source)  # an Alias, or the key itself
        if not (isinstance(key, tuple) and len(key) == 3 and isinstance(source, tuple)):
            return None
        if len(source) != 3:
            return None
        blocks[key[1:]] = source
    return _parts(graph, blocks, reads)


def _parts(graph: Any, blocks: dict, reads: Any) -> tuple[Joined, bool] | None:
    """The parts of a concatenation from its blocks (``(i, j) -> (source, i', j')``):
    along one axis each source's blocks in order from 0, across it the same index."""
    if not blocks:
        return None
    counts = [1 + max(index[axis] for index in blocks) for axis in (0, 1)]
    if len(blocks) != counts[0] * counts[1]:
        return None
    for axis in (0, 1):  # the axis the concatenation runs along
        runs: list[tuple[str, int]] = []  # each source, with its blocks so far
        for i in range(counts[axis]):
            sources = []
            for j in range(counts[1 - axis]):
                source = blocks[(i, j) if axis == 0 else (j, i)]
                if source[2 - axis] != j:  # across: the same block index
                    sources = []
                    break
                sources.append((source[0], source[1 + axis]))
            if not sources or len(set(sources)) != 1:
                runs = []
                break
            source_name, block = sources[0]
            if block == 0:
                runs.append((source_name, 1))
            elif runs and runs[-1] == (source_name, block):
                runs[-1] = (source_name, block + 1)
            else:
                runs = []
                break
        if len(runs) > 1:
            found = [reads(graph, below_rechunks(graph, part)) for part, _ in runs]
            if any(f is None for f in found) or len({f[1] for f in found}) != 1:
                return None
            transposed = found[0][1]
            stored_axis = 1 - axis if transposed else axis
            try:
                return Joined(tuple(f[0] for f in found), stored_axis), transposed
            except InputError:  # parts that do not join: dask computes the operand
                return None
    return None


def is_rechunk(name: str) -> bool:
    """Whether layer ``name`` is a stage of dask.array's rechunk (tasks or p2p): the same
    values in other blocks."""
    from dask.utils import key_split  # noqa: PLC0415

    return key_split(name).startswith("rechunk-")


def below_rechunks(graph: Any, name: str) -> str:
    """The first layer at or below ``name`` that is no rechunk (outofcore reads its own
    panels, whatever the blocks)."""
    while is_rechunk(name) and len(graph.dependencies.get(name, ())) == 1:
        (name,) = graph.dependencies[name]
    return name


def _text(array: Any) -> str:
    return f"{tuple(array.shape)} {array.dtype} chunks {tuple(array.chunks)}"

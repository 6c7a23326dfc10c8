"""Operands that are a slice of a stored array: ``x[:, :1000]``, ``x[10_000:20_000]``.

A basic slice with unit steps of a 2-D dask array reading a zarr array is a contiguous
region of the stored array (a :class:`~outofcore.operands.stacking.Window`): a job reads that
region of it, as it reads any operand, and nothing is stored.  dask.array records no
selection in its graph, only a task a block (``getitem(block, (rows, cols))``, or an
alias for a whole block), so :func:`sliced_region` rebuilds the region from those tasks
and the chunks of the array below, and checks that the blocks tile it with nothing
missing, reordered or strided; anything else is not a window (None).
"""

from __future__ import annotations

from typing import Any

from outofcore.operands.stacking import Window

#: Chunks of a 2-D dask array: the block sizes along each axis.
Chunks = tuple[tuple[int, ...], tuple[int, ...]]


def read_chunks(graph: Any, name: str) -> Chunks | None:
    """The chunks of the blockwise layer ``name`` of ``graph`` that reads a stored 2-D
    array block by block (dask.array's ``from_zarr``/``from_array``), as stored; None for
    any other layer."""
    layer = graph.layers.get(name)
    for dependency in (getattr(layer, "io_deps", None) or {}).values():
        chunks = getattr(dependency, "chunks", None)
        if chunks is not None and len(chunks) == 2:
            return tuple(tuple(int(c) for c in axis) for axis in chunks)  # type: ignore[return-value]
    return None


def sliced_region(layer: Any, below: str, chunks: Chunks) -> tuple[Window, Chunks] | None:
    """The region of the 2-D array ``below`` (of ``chunks``) that a dask getitem
    ``layer`` selects, and the layer's own chunks; None for a selection that is not one
    unit-step slice an axis (integers, lists, ``None``, reversed or strided slices).

    Each block of the layer must be a whole block of ``below`` (an alias) or
    ``getitem(block, (rows, cols))`` of one, and the blocks must tile one rectangle in
    order.
    """
    parts = {}
    for key in getattr(layer, "keys", lambda: ())():
        part = _block_part(layer[key], below, chunks)
        if part is None or not isinstance(key, tuple) or len(key) != 3:
            return None
        parts[key[1:]] = part
    if not parts:
        return None
    counts = tuple(1 + max(index[axis] for index in parts) for axis in (0, 1))
    if len(parts) != counts[0] * counts[1]:
        return None
    ranges: list[list[tuple[int, int]]] = [[], []]
    for axis in (0, 1):
        for i in range(counts[axis]):
            along = {parts[(i, j) if axis == 0 else (j, i)][axis] for j in range(counts[1 - axis])}
            if len(along) != 1:  # one range of rows (columns) for every block of a row
                return None
            ranges[axis].append(along.pop())
        if any(a[1] != b[0] for a, b in zip(ranges[axis], ranges[axis][1:], strict=False)):
            return None  # blocks that leave a gap, overlap or come out of order
    start = (ranges[0][0][0], ranges[1][0][0])
    shape = (ranges[0][-1][1] - start[0], ranges[1][-1][1] - start[1])
    out_chunks = tuple(tuple(stop - begin for begin, stop in ranges[axis]) for axis in (0, 1))
    return Window(start, shape), out_chunks  # type: ignore[return-value]


def _block_part(node: Any, below: str, chunks: Chunks) -> tuple[tuple[int, int], ...] | None:
    """The rows and columns of ``below`` that one block of a getitem layer holds."""
    from dask._task_spec import Alias, Task, TaskRef  # noqa: PLC0415

    if isinstance(node, Alias):
        source, index = node.target, (slice(None), slice(None))
    elif isinstance(node, Task) and _is_getitem(node.func) and len(node.args) == 2:
        ref, index = node.args
        if node.kwargs or not isinstance(ref, TaskRef):
            return None
        source = ref.key
    else:
        return None
    if not isinstance(source, tuple) or len(source) != 3 or source[0] != below:
        return None
    if not isinstance(index, tuple) or len(index) != 2:
        return None
    found = []
    for axis, (block, selection) in enumerate(zip(source[1:], index, strict=True)):
        sizes = chunks[axis]
        if not isinstance(selection, slice) or not 0 <= block < len(sizes):
            return None
        begin, end, step = selection.indices(sizes[block])
        if step != 1 or end < begin:
            return None
        offset = sum(sizes[:block])
        found.append((offset + begin, offset + end))
    return tuple(found)


def _is_getitem(func: Any) -> bool:
    """dask.array's chunk getitem (or ``operator.getitem``)."""
    import operator  # noqa: PLC0415

    from dask.array import chunk  # noqa: PLC0415

    return func is operator.getitem or func is getattr(chunk, "getitem", None)

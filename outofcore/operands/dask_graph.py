"""Operands that compute, found in a dask graph (on the client): a stored zarr array with
elementwise steps (:mod:`outofcore.operands.steps` applies them as they are read).

``x - x.mean(axis=0)`` (a centred matrix), ``(x - mu) / sigma``, ``x * weights``,
``2 * x + 1`` and ``x.astype("float64")`` are a stored array ``x`` and a few elementwise
steps, each with a scalar or a vector broadcast along the rows or the columns.  A job
reads ``x`` as it reads any operand and applies the steps to each panel as numpy does
(:func:`apply`: numpy's ufunc on the decoded values, each step in the dtype numpy's
type resolution gives it, :func:`_typed`), then converts them to the accumulation
dtype, so the operand is never stored and equals dask's bit for bit.  The vectors (a
column mean, a weight vector) are computed once before the job by dask from the graph
(:func:`steps_behind`: the reference's own values), held by every task (counted in its
memory), and checksummed in the job's identity with the steps: a resume refuses a
changed expression or changed values.

:func:`steps_behind` reads dask.array's graph: blockwise layers of ``+ - * /`` and
``astype`` over one 2-D operand, down to a read of one zarr array (with transposes).
Anything else is not an operand outofcore reads (None), and the caller says so.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import zarr

from outofcore.operands.joined import below_rechunks, is_rechunk, joined_reads
from outofcore.operands.stacking import Window
from outofcore.operands.steps import UFUNCS, Step, stored_path
from outofcore.operands.windows import read_chunks, sliced_region
from outofcore.storage.locations import locate

#: The elementwise operations a step may be, by dask's function.
OPERATIONS = {
    operator.add: "add",
    operator.sub: "sub",
    operator.mul: "mul",
    operator.truediv: "div",
    np.add: "add",
    np.subtract: "sub",
    np.multiply: "mul",
    np.true_divide: "div",
}
#: The largest vector a step holds (every task holds it): a larger one is refused.
MAX_VECTOR_BYTES = 64 * 2**20


@dataclass
class Vectors:
    """The vectors of the steps of one product's operands, computed once for both
    (``x.T @ x`` of a centred ``x`` reads its column means once), and how a column or
    row sum of a stored array is read (``reduce(array, axis)``; None: dask computes it)."""

    reduce: Callable[[Any, int], np.ndarray] | None = None
    values: dict[str, np.ndarray | None] = field(default_factory=dict)
    #: ``sample(array, axis)``: means over ``axis`` of a sample of a stored array.  With
    #: it, ``x - x.mean(axis=...)`` is a :attr:`Step.shift` step: the product may
    #: centre from its panel sums (one read of ``x``), else :func:`exact_steps`.
    sample: Callable[[Any, int], np.ndarray] | None = None
    #: Exact sums already read (float64), by the stored array's path and axis.
    exact: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)
    #: Sample means (the values of shift steps), by the mean's layer: apart from
    #: ``values`` (exact), so that a mean used otherwise is never a sample's.
    samples: dict[str, np.ndarray] = field(default_factory=dict)
    #: The graph and block counts of each mean layer a shift stands for: its exact
    #: values, dask's own, are computed from them when the shift is made exact.
    layers: dict[str, tuple[Any, tuple[int, ...] | None]] = field(default_factory=dict)


def on_dask(steps: Sequence[Step], x: Any, read: Callable[[Any], Any] | None = None) -> Any:
    """The steps on a dask array ``x`` (the stored array): for Freivalds' check.
    ``read(array)`` is a stored other operand as a dask array (``x * y``)."""
    for step in steps:
        if step.op == "astype":
            x = x.astype(step.dtype)
            continue
        if step.shift:  # what the step means: the exact mean over the other axis
            x = x - x.mean(axis=1 - step.axis, keepdims=True).astype(step.dtype)
            continue
        other = step.other
        if step.stored_other:
            if read is None:
                raise ValueError("a step on a stored array needs a reader of it")
            other = read(other).T if step.other_transposed else read(other)
        elif isinstance(other, np.ndarray):
            other = other[:, None] if step.axis == 0 else other[None, :]
        function = {
            "add": operator.add,
            "sub": operator.sub,
            "mul": operator.mul,
            "div": operator.truediv,
        }[step.op]
        x = function(other, x) if step.reflected else function(x, other)
    return x


def steps_behind(
    graph: Any, name: str, reads: Any, vectors: Vectors | None = None
) -> tuple[Any, bool, tuple[Step, ...], Window | None] | None:
    """The zarr array layer ``name`` of a dask ``graph`` (a 2-D array) reads, whether the
    layer is its transpose, the elementwise steps on the way (in the stored
    orientation, first applied first, their vectors along the window) and the region of
    the stored array it reads (a :class:`~outofcore.operands.stacking.Window`, from slices on
    the way: :mod:`outofcore.operands.windows`; None for all of it); None when the layer is
    anything else.

    ``reads(graph, name)`` is the reader of a plain operand
    (:func:`outofcore.operands.interop.layer_reads`, 2-D): where it finds the zarr array the walk
    ends.  Vectors are computed here once (``vectors`` keeps them for the product's
    other operand): a mean or sum of the stored array by ``vectors.reduce``, any other
    with dask's threads.
    """
    vectors = Vectors() if vectors is None else vectors

    # Top down: each step or slice with the transposes above it (parity).
    found: list[tuple[Step | tuple[Any, str], bool]] = []
    flipped = False
    for _ in range(64):  # a few dozen layers at most
        plain = reads(graph, name) or joined_reads(graph, name, reads)  # one array, or parts
        if plain is not None:
            array, transposed = plain
            return _in_stored_array(graph, name, array, transposed, found, flipped, vectors)
        layer = graph.layers.get(name)
        below = graph.dependencies.get(name, set())
        if is_rechunk(name):  # the same values in other blocks: outofcore reads its own
            if len(below) != 1 or any(not isinstance(item, Step) for item, _ in found):
                return None  # a slice above it would need the new blocks
            (name,) = below
            continue
        sliced = _slices(name, layer)
        if _transposes(layer) is not None or sliced:
            if len(below) != 1:
                return None
            if sliced:
                found.append(((layer, next(iter(below))), flipped))
            else:  # a transpose of the 2-D array
                flipped = not flipped
            (name,) = below
            continue
        step = _step(graph, layer, reads, vectors)
        if step is None:
            return None
        step, below_name = step
        found.append((step, flipped))
        name = below_name
    return None


def _in_stored_array(
    graph: Any,
    name: str,
    array: Any,
    transposed: bool,
    found: list[tuple[Step | tuple[Any, str], bool]],
    flipped: bool,
    vectors: Vectors,
) -> tuple[Any, bool, tuple[Step, ...], Window | None] | None:
    """:func:`steps_behind`'s result, from the walk's ``found`` steps and slices (top
    down) over the layer ``name`` that reads ``array`` (``transposed``: the operand is
    its transpose; ``flipped``: transposes between the operand and ``name``)."""
    # A level (with ``flips`` transposes above it) holds the stored array's transpose
    # where the transposes between it and the stored array are odd.
    window = Window((0, 0), tuple(array.shape))
    chunks = None
    placed: list[tuple[Step, Window]] = []  # each step with the window its vector spans
    windowed = any(not isinstance(item, Step) for item, _ in found)
    for item, flips in reversed(found):  # bottom up: windows compose, steps see theirs
        stored_side = flips != (transposed != flipped)  # this level is the stored's transpose
        if isinstance(item, Step):
            step = _in_stored(item, stored_side)
            if step.stored_other and (windowed or not _alike(step, array)):
                return None  # another shape, chunks or region: dask computes it
            own = _same(step.mean_of, array) and step.mean_axis == 1 - step.axis
            if step.shift and (windowed or not own):  # not the operand's own mean: exact
                step = exact_steps((step,), vectors)[0]
            if isinstance(step.other, np.ndarray) and step.other.size != window.shape[step.axis]:
                return None  # a vector of another length (numpy would broadcast length 1)
            placed.append((step, window))
            continue
        reader = _below_transposes(graph, name)  # the layer that reads the stored array
        chunks = chunks or read_chunks(graph, reader)  # (None for a concatenation's)
        if chunks is None:
            return None
        layer, below = item
        seen = chunks[::-1] if stored_side else chunks
        region = sliced_region(layer, below, seen)  # type: ignore[arg-type]
        if region is None:
            return None
        inner, out_chunks = region
        window = window.within(inner.transposed() if stored_side else inner)
        chunks = out_chunks[::-1] if stored_side else out_chunks
    steps = [_along(step, spans, window) for step, spans in placed]  # first applied first
    whole = window.start == (0, 0) and window.shape == tuple(array.shape)
    flipped_operand = transposed != flipped  # the operand is the stored array's transpose
    return array, flipped_operand, _typed(steps, array.dtype), None if whole else window


def _along(step: Step, spans: Window, window: Window) -> Step:
    """``step`` with its vector cut to ``window`` (it spans ``spans``, a larger one)."""
    if not isinstance(step.other, np.ndarray):
        return step
    at = window.start[step.axis] - spans.start[step.axis]
    other = step.other[at : at + window.shape[step.axis]]
    return replace(step, other=other)


def _below_transposes(graph: Any, name: str) -> str:
    """The first layer at or below ``name`` that is not a transpose."""
    while _transposes(graph.layers.get(name)) is not None:
        (name,) = graph.dependencies[name]
    return name


def _slices(name: str, layer: Any) -> bool:
    """Whether ``layer`` (called ``name``) is dask.array's getitem layer
    (:mod:`outofcore.operands.windows` reads it)."""
    from dask.utils import key_split  # noqa: PLC0415

    return key_split(name) == "getitem" and hasattr(layer, "keys")


def _typed(steps: Any, stored: np.dtype) -> tuple[Step, ...]:
    """The steps with the dtype each gives: numpy's own, from its ufunc applied to empty
    arrays of the real dtypes (a Python scalar weak, as in numpy and dask), so true
    division is float and integers keep their dtype."""
    typed, dtype = [], np.dtype(stored)
    for step in steps:
        if step.op == "astype":
            dtype = np.dtype(step.dtype)
        else:
            other = step.other
            if isinstance(other, np.ndarray) or step.stored_other:
                other = np.empty(0, other.dtype)
            ufunc, values = UFUNCS[step.op], np.empty(0, dtype)
            with np.errstate(all="ignore"):
                dtype = (ufunc(other, values) if step.reflected else ufunc(values, other)).dtype
        typed.append(replace(step, dtype=dtype))
    return tuple(typed)


def _in_stored(step: Step, flips: bool) -> Step:
    """``step`` with its vector's axis in the stored orientation (``flips``: an odd
    number of transposes lie between the step and the stored array)."""
    if step.axis is None or not flips:
        return step
    if step.stored_other:
        return replace(step, other_transposed=not step.other_transposed) if flips else step
    return replace(step, axis=1 - step.axis)


def _transposes(layer: Any) -> bool | None:
    """True for a 2-D transpose layer; None for anything else."""
    task = getattr(layer, "task", None)
    if getattr(task, "func", None) is not np.transpose or len(layer.indices) != 1:
        return None
    return True if tuple(task.kwargs.get("axes", ())) == (1, 0) else None


def _step(graph: Any, layer: Any, reads: Any, vectors: Vectors) -> tuple[Step, str] | None:
    """The step a blockwise layer is, and the layer of its 2-D operand; None otherwise."""
    task = getattr(layer, "task", None)
    func = getattr(task, "func", None)
    indices = getattr(layer, "indices", None)
    out = tuple(getattr(layer, "output_indices", ()))
    if task is None or indices is None or len(out) != 2:
        return None
    arrays = [(i, (n, ix)) for i, (n, ix) in enumerate(indices) if ix is not None]
    main = [(i, n) for i, (n, ix) in arrays if tuple(ix) == out]
    if not main:
        return None
    position, below = main[0]
    dtype = np.dtype("f8")  # set by _typed, from the stored dtype up
    if getattr(func, "__name__", "") == "astype" and len(indices) == 1:
        target = task.kwargs.get("astype_dtype")
        return (Step("astype", np.dtype(target)), below) if target is not None else None
    op = OPERATIONS.get(func)
    if op is None or len(indices) != 2 or task.kwargs:
        return None
    other_index = 1 - position
    name, index = indices[other_index]
    blocks = layer.numblocks.get(name)
    broadcast = _broadcast_vector(graph, name) if index and tuple(index) == out else None
    if broadcast is not None:  # xarray's ``x - x.mean("time")``: the mean given a new axis
        name, kept, blocks = broadcast
        index = (out[kept],)
    if index is None:  # a scalar, inlined
        if isinstance(name, bool) or not isinstance(name, int | float | complex | np.number):
            return None
        other, axis = name, None
    elif tuple(index) == out:  # an operand of the same shape: one of them stored
        stored = reads(graph, below_rechunks(graph, name))
        if stored is None:  # the first is the stored one (``(y + 1) * x``)?
            stored = reads(graph, below_rechunks(graph, below))
            if stored is None:
                return None
            position, below = other_index, name
        step = Step(op, dtype, stored[0], reflected=position == 1, other_transposed=stored[1])
        return step, below
    else:
        if len(index) != 1 or index[0] not in out:
            return None  # a 2-D other operand: not a broadcast vector
        axis = out.index(index[0])
        reduced = _reduction(graph, name, reads) if vectors.reduce is not None else None
        subtracted_mean = reduced is not None and reduced[2] == "mean" and op == "sub"
        if subtracted_mean and position == 0 and vectors.sample is not None:
            array, over, _, vector_dtype = reduced  # ``x - x.mean(axis=0)``: a shift
            if name not in vectors.samples:
                vectors.samples[name] = vectors.sample(array, over).astype(vector_dtype)
                vectors.layers[name] = (graph, blocks)
            step = Step(op, dtype, vectors.samples[name], axis, shift=True, mean_layer=name)
            return replace(step, mean_of=array, mean_axis=over), below
        if vectors.values.get(name) is None:  # dask's own values: the reference's
            vectors.values[name] = _compute_vector(graph, name, blocks)
        other = vectors.values[name]
        if other is None:
            return None
    return Step(op, dtype, other, axis, reflected=position == 1), below


def _broadcast_vector(graph: Any, name: str) -> tuple[str, int, tuple[int]] | None:
    """A 1-D layer given a new axis to broadcast against a matrix (xarray's ``mean[None,
    :]``: a getitem layer each of whose blocks indexes one block of the vector with one
    ``None`` and one ``slice(None)``): the vector's layer, the matrix axis it runs along
    and its block count; None for any other layer."""
    from dask.array.chunk import getitem  # noqa: PLC0415
    from dask.utils import key_split  # noqa: PLC0415

    layer = graph.layers.get(name)
    below = graph.dependencies.get(name, set())
    if key_split(name) != "getitem" or layer is None or len(below) != 1:
        return None
    (vector,) = below
    axes, blocks = set(), 0
    for key, task in dict(layer).items():
        args = getattr(task, "args", ())
        if getattr(task, "func", None) is not getitem or len(args) != 2 or len(key) != 3:
            return None
        ref, index = args
        if not isinstance(index, tuple) or len(index) != 2 or index.count(None) != 1:
            return None
        if slice(None) not in index:
            return None
        axis = index.index(slice(None))
        if getattr(ref, "key", None) != (vector, key[1 + axis]) or key[2 - axis] != 0:
            return None
        axes.add(axis)
        blocks += 1
    if len(axes) != 1:
        return None
    return vector, axes.pop(), (blocks,)


#: The layers of dask.array's ``mean`` and ``sum`` above their chunk layer.
_REDUCTION_LAYERS = {
    "mean_agg-aggregate": "mean",
    "mean_combine-partial": "mean",
    "sum-aggregate": "sum",
    "sum-partial": "sum",
}


def _reduction(graph: Any, name: str, reads: Any) -> tuple[Any, int, str, np.dtype] | None:
    """What layer ``name`` is when it is a column or row mean (or sum) of a stored array,
    ``x.mean(axis=0)``: that array, the stored axis it runs over, "mean" or "sum", and
    the vector's dtype; None for any other layer."""
    from dask.utils import key_split  # noqa: PLC0415

    kinds = set()
    while key_split(name) in _REDUCTION_LAYERS:
        kinds.add(_REDUCTION_LAYERS[key_split(name)])
        below = graph.dependencies.get(name, set())
        if len(below) != 1:
            return None
        (name,) = below
    chunk = graph.layers.get(name)
    func = getattr(getattr(chunk, "task", None), "func", None)
    inner = getattr(func, "func", None)  # functools.partial(mean_chunk or sum, dtype=...)
    kind = {"mean_chunk": "mean", "sum": "sum"}.get(getattr(inner, "__name__", ""))
    if len(kinds) != 1 or kind not in kinds or len(chunk.indices) != 1:
        return None
    if set(func.keywords) != {"dtype"}:  # nanmean: mean_chunk with sum=nansum, numel=...
        return None  # NaN skipped, not summed: dask computes the vector (its own values)
    axis, dtype = chunk.task.kwargs.get("axis"), func.keywords.get("dtype")
    (operand, index) = chunk.indices[0]
    if axis not in ((0,), (1,)) or dtype is None or tuple(index) != tuple(chunk.output_indices):
        return None
    found = reads(graph, operand)
    if found is None:
        return None
    array, transposed = found
    return array, axis[0] if not transposed else 1 - axis[0], kind, np.dtype(dtype)


def _reduced_values(reduced: tuple[Any, int, str, np.dtype], vectors: Vectors) -> np.ndarray:
    """The exact values of a mean or sum of a stored array (:func:`_reduction`): float64
    sums read with outofcore's reader (``vectors.reduce``:
    :func:`outofcore.operands.reading.sums_along`, about twice as fast as dask's read), once an
    array and axis."""
    array, over, kind, dtype = reduced
    key = (stored_path(array), over)
    if key not in vectors.exact:
        vectors.exact[key] = vectors.reduce(array, over)  # type: ignore[misc]
    sums = vectors.exact[key]
    return (sums / array.shape[over] if kind == "mean" else sums).astype(dtype)


def exact_steps(steps: Sequence[Step], vectors: Vectors) -> tuple[Step, ...]:
    """``steps`` with every :attr:`Step.shift` made exact: its mean layer's values as
    dask computes them (:attr:`Vectors.layers`, once a layer: NaN, Inf and overflow as
    the reference's), else the mean of its stored array (:attr:`Step.mean_of`) over its
    axis (``vectors.reduce``, once an array and axis)."""
    exact = []
    for step in steps:
        if step.shift:
            values = _exact_mean(step, vectors)
            step = Step(step.op, step.dtype, values, step.axis, step.reflected)
        exact.append(step)
    return tuple(exact)


def _exact_mean(step: Step, vectors: Vectors) -> np.ndarray:
    """The exact values of a shift step's mean (:func:`exact_steps`)."""
    name = step.mean_layer
    if name is not None and name in vectors.layers:
        if vectors.values.get(name) is None:
            graph, blocks = vectors.layers[name]
            vectors.values[name] = _compute_vector(graph, name, blocks)
        values = vectors.values[name]
        if values is not None and values.size == step.other.size:
            return values.astype(step.other.dtype, copy=False)
    reduced = (step.mean_of, step.mean_axis, "mean", step.other.dtype)
    return _reduced_values(reduced, vectors)  # type: ignore[arg-type]


def _alike(step: Step, array: Any) -> bool:
    """Whether a step's stored other operand has ``array``'s shape, chunks and shards as
    the operand sees it (its reads then need nothing more than the operand's)."""
    other = step.other
    flip = (lambda v: tuple(v)[::-1]) if step.other_transposed else tuple
    shards = array.shards if isinstance(array, zarr.Array) else None
    return (
        isinstance(array, zarr.Array)
        and flip(other.shape) == tuple(array.shape)
        and flip(other.chunks) == tuple(array.chunks)
        and other.shards is None
        and shards is None
    )


def _same(one: Any, other: Any) -> bool:
    """Whether two zarr arrays are the same stored array (as
    :func:`outofcore.storage.stored_arrays.same_array` tells, which this layer cannot import)."""
    arrays = isinstance(one, zarr.Array) and isinstance(other, zarr.Array)
    return one is other or (arrays and locate(one) == locate(other))


def _compute_vector(graph: Any, name: str, blocks: tuple[int, ...] | None) -> np.ndarray | None:
    """The values of a 1-D layer (a column mean, a weight vector), computed now with
    dask's threads; None when it is larger than :data:`MAX_VECTOR_BYTES` or not 1-D."""
    import dask  # noqa: PLC0415

    if blocks is None or len(blocks) != 1:
        return None
    keys = [(name, j) for j in range(blocks[0])]
    culled = graph.cull(set(keys))
    parts = dask.threaded.get(culled, keys)
    vector = np.concatenate([np.asarray(p).reshape(-1) for p in parts])
    return vector if vector.nbytes <= MAX_VECTOR_BYTES else None

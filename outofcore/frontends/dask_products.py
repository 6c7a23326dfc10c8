"""The matrix product at the top of a dask array's graph, as outofcore's operands.

``a @ b``, ``da.matmul``, ``da.dot``, ``da.tensordot`` over one pair of axes and
``da.einsum`` of a plain product all build the same shape of graph in dask.array: one
blockwise layer multiplying block pairs (``_matmul``, ``_tensordot``,
``chunk_einsum``) whose output keeps the contracted axis, then a sum over that axis
(a chunk layer, maybe partial layers of a tree, and an aggregate).  When that is the
top of ``x``'s graph and each operand only reads one zarr array (with transposes,
:func:`outofcore.operands.interop.layer_reads`), :func:`product_at_top` returns them with
their transpose flags, so the product runs as an outofcore job instead of dask's
block products.  Anything else gives None, and nothing about ``x`` is guessed: the
caller checks that the product it opens has ``x``'s shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from outofcore.operands.dask_graph import Vectors, steps_behind
from outofcore.operands.interop import layer_reads
from outofcore.operands.stacking import Window
from outofcore.operands.steps import Step, applicable

#: The functions of dask.array's blockwise product layers, by the call that makes them.
PRODUCT_FUNCTIONS = {"_matmul": "matmul", "_tensordot": "tensordot", "chunk_einsum": "einsum"}
#: The names (dask's ``key_split``) of the layers of the sum over the contracted axis.
SUM_LAYERS = {"sum", "chunk_sum", "_chunk_sum"}


@dataclass(frozen=True)
class FoundProduct:
    """``op(a) @ op(b)``: the zarr arrays a dask product reads, its flags, which call."""

    a: zarr.Array
    b: zarr.Array
    transpose_a: bool
    transpose_b: bool
    #: "matmul", "tensordot" or "einsum": the dask call (for messages).
    call: str
    #: Elementwise steps that compute A (B) from its stored array as it is read.
    a_steps: tuple[Step, ...] = ()
    b_steps: tuple[Step, ...] = ()
    #: A scale on top of the product: ``(a @ b) * 2``, ``xc.T @ xc / (n - 1)``; an int
    #: where every factor is one (exact, never rounded through float).
    alpha: int | float = 1
    #: The regions of the stored arrays read (slices); None: all of it.
    a_window: Window | None = None
    b_window: Window | None = None

    def read_shape(self, role: str) -> tuple[int, ...]:
        """The shape of the values operand ``role`` ("A", "B") reads, as stored."""
        array, window = (self.a, self.a_window) if role == "A" else (self.b, self.b_window)
        return tuple(array.shape) if window is None else window.shape


def product_at_top(x: Any, vectors: Vectors | None = None) -> FoundProduct | None:
    """The 2-D matrix product ``x`` is, over zarr arrays it only reads (or computes from
    one by elementwise steps, their vectors computed into ``vectors``); else None."""
    top = top_product(x)
    if top is None:
        return None
    graph = x.__dask_graph__()
    name, call, alpha = top
    contraction = _contraction(graph.layers[name])
    if contraction is None:
        return None
    (a_name, ta), (b_name, tb), swapped = contraction
    vectors = Vectors() if vectors is None else vectors  # both operands' vectors, once
    a, b = _operand(graph, a_name, vectors), _operand(graph, b_name, vectors)
    if a is None or b is None:
        return None
    ta, tb = ta != a[1], tb != b[1]
    if swapped:  # the output is (A @ B).T = B.T @ A.T
        return FoundProduct(b[0], a[0], not tb, not ta, call, b[2], a[2], alpha, b[3], a[3])
    return FoundProduct(a[0], b[0], ta, tb, call, a[2], b[2], alpha, a[3], b[3])


def _operand(
    graph: Any, name: str, vectors: Vectors
) -> tuple[zarr.Array, bool, tuple[Step, ...], Window | None] | None:
    """The zarr array a product's operand layer reads, whether it is its transpose, the
    elementwise steps that compute it (:mod:`outofcore.operands.dask_graph`) and the region read
    (a slice: :mod:`outofcore.operands.windows`); None otherwise."""
    plain = layer_reads(graph, name, 2)
    if plain is not None:
        return plain[0], plain[1], (), None
    found = steps_behind(graph, name, lambda graph, name: layer_reads(graph, name, 2), vectors)
    if found is None or (found[2] and not applicable(found[2], found[0].dtype)):
        return None
    return found


def top_product(x: Any) -> tuple[str, str, int | float] | None:
    """The product layer at the top of 2-D ``x`` (under the sum over the contracted axis,
    or the squeeze of its one block), the call that made it ("matmul", "tensordot",
    "einsum") and the real scale on top of it (``* 2``, ``/ (n - 1)``: 1 for none; an int
    while every factor is an integer), whatever its operands are; None when ``x`` is not
    such a product."""
    from dask.utils import key_split  # noqa: PLC0415

    graph = x.__dask_graph__()
    layers = getattr(graph, "layers", None)
    if layers is None or x.ndim != 2:
        return None
    name, alpha = x.name, 1
    while (scaled := _scaled(layers.get(name))) is not None:
        factor, name = scaled
        alpha *= factor
    summed: list[str] = []
    while key_split(name).split("-")[0] in SUM_LAYERS:  # sum, partial sums, aggregate
        summed.append(name)
        below = graph.dependencies.get(name, set())
        if len(below) != 1:
            return None
        (name,) = below
    squeezed = not summed and key_split(name) == "getitem"  # one block of k: squeezed out
    if squeezed:
        below = graph.dependencies.get(name, set())
        if len(below) != 1:
            return None
        (name,) = below
    product = layers.get(name)
    func = getattr(getattr(product, "task", None), "func", None)
    call = PRODUCT_FUNCTIONS.get(getattr(func, "__name__", ""))
    if call is None:
        return None
    if not (_one_block_of_k(product) if squeezed else _sums_over(layers[summed[-1]], product)):
        return None
    return name, call, alpha


def products_within(x: Any) -> list[str]:
    """The calls ("matmul", "tensordot", "einsum") of the product layers anywhere in the
    graph of dask array ``x``, top first where dask orders them so: what dask.array would
    compute if it stored ``x``."""
    layers = getattr(x.__dask_graph__(), "layers", {})
    calls = []
    for layer in layers.values():
        func = getattr(getattr(layer, "task", None), "func", None)
        call = PRODUCT_FUNCTIONS.get(getattr(func, "__name__", ""))
        if call is not None:
            calls.append(call)
    return calls


def _scaled(layer: Any) -> tuple[int | float, str] | None:
    """For a layer multiplying its one 2-D operand by a real scalar (or dividing it by
    one): the factor (an int for an integer multiplier) and the operand's layer; None for
    anything else."""
    import operator  # noqa: PLC0415

    task = getattr(layer, "task", None)
    func = getattr(task, "func", None)
    indices = getattr(layer, "indices", None)
    if func not in (operator.mul, operator.truediv) or indices is None or len(indices) != 2:
        return None
    out = tuple(layer.output_indices)
    (first, first_index), (second, second_index) = indices
    if first_index is not None and tuple(first_index) == out and second_index is None:
        operand, scalar, reflected = first, second, False
    elif func is operator.mul and second_index is not None and tuple(second_index) == out:
        operand, scalar, reflected = second, first, True
    else:
        return None
    if isinstance(scalar, bool) or not isinstance(scalar, int | float | np.integer | np.floating):
        return None
    if func is operator.truediv and (reflected or scalar == 0):
        return None
    if func is operator.truediv:
        return 1.0 / float(scalar), operand
    return (int(scalar) if isinstance(scalar, int | np.integer) else float(scalar)), operand


def _contraction(product: Any) -> tuple[tuple[str, bool], tuple[str, bool], bool] | None:
    """For a product layer of two 2-D inputs sharing one index: each input's layer and
    whether the product takes its transpose, and whether the output's axes come in the
    order (B's, A's); None for any other layer."""
    inputs = [(name, index) for name, index in product.indices if index is not None]
    if len(inputs) != 2 or any(len(index) != 2 for _, index in inputs):
        return None
    (a_name, a_index), (b_name, b_index) = inputs
    shared = set(a_index) & set(b_index)
    if len(shared) != 1 or len(set(a_index)) != 2 or len(set(b_index)) != 2:
        return None
    (k,) = shared
    (i,), (j,) = set(a_index) - shared, set(b_index) - shared
    out = tuple(product.output_indices)
    if sorted(out) != sorted((i, j, k)):
        return None
    kept = tuple(axis for axis in out if axis != k)
    task = product.task
    einsum = getattr(task.func, "__name__", "") == "chunk_einsum"
    if einsum and task.kwargs.get("ncontract_inds") != 1:  # one contracted index
        return None
    return (a_name, a_index[0] == k), (b_name, b_index[1] == k), kept == (j, i)


def _one_block_of_k(product: Any) -> bool:
    """Whether the contracted axis of a product layer has one block (dask then squeezes
    it out instead of summing)."""
    inputs = [(name, index) for name, index in product.indices if index is not None]
    if len(inputs) != 2:
        return False
    shared = set(inputs[0][1]) & set(inputs[1][1])
    if len(shared) != 1:
        return False
    (k,) = shared
    name, index = inputs[0]
    blocks = product.numblocks.get(name)
    return blocks is not None and blocks[index.index(k)] == 1


def _sums_over(chunk: Any, product: Any) -> bool:
    """Whether ``chunk``, the first layer of the sum, sums the product layer's output over
    its contracted axis alone (the axis no input of the product keeps in the output)."""
    task = getattr(chunk, "task", None)
    kwargs = getattr(task, "kwargs", None) or {}
    axis = kwargs.get("axis")
    if not isinstance(axis, tuple) or len(axis) != 1 or kwargs.get("keepdims") is not True:
        return False
    inputs = [index for _, index in product.indices if index is not None]
    if len(inputs) != 2:
        return False
    shared = set(inputs[0]) & set(inputs[1])
    out = tuple(product.output_indices)
    return len(shared) == 1 and out[axis[0]] in shared

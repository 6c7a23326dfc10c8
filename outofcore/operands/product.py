"""What a job computes: ``out = alpha * op(A) @ op(B) + beta * addend``, checked once.

:class:`Product` holds the opened operands with their transpose flags, the
scales and the addend, and the dtypes the product is accumulated and written
in (:mod:`outofcore.operands.dtypes`).  ``op(A)`` is ``A`` or ``A.T``: a transposed
operand is never copied; a panel of ``A.T`` is a region of ``A``, read as it
is stored and handed to BLAS (or the GPU engine) as a transposed view.

The client opens a product (every check runs before any work), tile tasks
carry it to the workers, and :meth:`Product.finish_rows` turns accumulated
rows of a tile into the values written: scaled, the addend's rows added,
converted to the output dtype.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from outofcore.errors import InputError
from outofcore.operands import arrays, centring
from outofcore.operands.dtypes import OpView, ProductTypes, check_flag, product_types, typed_scale
from outofcore.operands.joined import Joined
from outofcore.operands.operand_checks import (
    check_addend_scale,
    check_steps,
    first_part,
    named_parts,
    read_shape,
    same_values,
)
from outofcore.operands.reading import read_converted, zarr_read_shards
from outofcore.operands.scales import check_scale
from outofcore.operands.stacking import Matrix, Stack, Window
from outofcore.operands.steps import Step, result_dtype, slab_itemsize, vector_bytes
from outofcore.operands.steps import describe as describe_steps
from outofcore.planner.problem import Problem
from outofcore.storage import stored_arrays
from outofcore.storage.presence import listed_array
from outofcore.storage.stores import request_bytes

if TYPE_CHECKING:
    from outofcore.storage.fingerprint import Fingerprint

#: An operand as opened (:func:`outofcore.operands.arrays.open_operand`): its array (or
#: arrays joined), whether its transpose was given, its elementwise steps, its window.
Opened = tuple["zarr.Array | Joined", bool, "tuple[Step, ...]", "Window | None"]


@dataclass(frozen=True)
class Product:
    """``alpha * op(A) @ op(B) + beta * addend`` on opened zarr arrays.

    Build one with :meth:`open`; the fields are then consistent and checked.
    """

    a: zarr.Array
    b: zarr.Array
    types: ProductTypes
    transpose_a: bool = False
    transpose_b: bool = False
    #: The scales: ints for an exact (integer) product, applied modulo ``2**64`` where it
    #: is accumulated in 64-bit integers; floats (or complex) for a floating one.
    alpha: int | float | complex = 1.0
    beta: int | float | complex = 0.0
    addend: zarr.Array | None = None
    #: ``X.T @ X`` or ``X @ X.T`` of one array and no addend: the output is symmetric,
    #: so only the tiles on and above the diagonal are computed (:mod:`outofcore.planner.plan`).
    symmetric: bool = False
    #: Elementwise steps that compute A (B) from the stored array as it is read, in the
    #: stored orientation (:mod:`outofcore.operands.dask_graph`: a centred matrix, ``astype``).
    a_steps: tuple[Step, ...] = ()
    b_steps: tuple[Step, ...] = ()
    #: The region of the stored A (B) read: a slice (:mod:`outofcore.operands.windows`); None:
    #: all of it.  The steps' vectors run along the region.
    a_window: Window | None = None
    b_window: Window | None = None
    #: A (B) as stored arrays joined along one axis (``da.concatenate``,
    #: :mod:`outofcore.operands.joined`); ``a`` (``b``) is then its first part.  None: one array.
    a_joined: Joined | None = None
    b_joined: Joined | None = None

    @classmethod
    def of(
        cls,
        a: Opened,
        b: Opened,
        addend_array: zarr.Array | None = None,
        *,
        transpose_a: bool = False,
        transpose_b: bool = False,
        alpha: int | float | complex = 1.0,
        beta: int | float | complex = 0.0,
        out_dtype: Any = None,
    ) -> Product:
        """The product of operands already opened (:func:`outofcore.jobs.opening.open_product`
        opens them and reads what centring needs), checked; nothing is read or written.

        Raises
        ------
        InputError
            Naming the shapes, dtypes, scales or paths that do not make a product:
            inner dimensions that differ, a dtype not taken, ``beta != 0``
            without an addend (or an addend with ``beta == 0``), an addend of
            another shape.
        """
        (a_array, a_flipped, a_steps, a_window), (b_array, b_flipped, b_steps, b_window) = a, b
        # numpy.matmul's shape rules (:mod:`outofcore.operands.stacking`); a 1-D operand is
        # its own transpose, so its flag is False (the job's identity does not depend on it).
        stack = Stack.of(
            read_shape(a_array, a_window),
            read_shape(b_array, b_window),
            check_flag(transpose_a, "transpose_a") != a_flipped,
            check_flag(transpose_b, "transpose_b") != b_flipped,
        )
        if addend_array is not None and tuple(addend_array.shape) != stack.out_shape:
            raise InputError(
                f"the addend ({stored_arrays.describe(addend_array)}) has shape "
                f"{tuple(addend_array.shape)}; the output is {stack.out_shape}"
            )
        for name, array, steps in (("A", a_array, a_steps), ("B", b_array, b_steps)):
            check_steps(name, array, steps)
        types = product_types(
            result_dtype(a_steps, a_array.dtype),
            result_dtype(b_steps, b_array.dtype),
            stack.k,
            addend=None if addend_array is None else addend_array.dtype,
            alpha=alpha,
            beta=beta,
            out_dtype=out_dtype,
        )
        check_addend_scale(beta, addend_array)
        return cls(
            a=first_part(a_array),
            b=first_part(b_array),
            a_joined=a_array if isinstance(a_array, Joined) else None,
            b_joined=b_array if isinstance(b_array, Joined) else None,
            types=types,
            transpose_a=stack.transpose_a,
            transpose_b=stack.transpose_b,
            alpha=typed_scale(check_scale(alpha, "alpha"), types),
            beta=typed_scale(check_scale(beta, "beta"), types),
            addend=addend_array,
            symmetric=stack.transpose_a != stack.transpose_b
            and addend_array is None
            and same_values(a_array, b_array)
            and describe_steps(a_steps) == describe_steps(b_steps)
            and a_window == b_window,
            a_steps=a_steps,
            b_steps=b_steps,
            a_window=a_window,
            b_window=b_window,
        )

    @property
    def panel_sums(self) -> bool:
        """Whether the operands are centred over k from the panel sums the tasks add up
        (:mod:`outofcore.operands.centring`): each tile subtracts its block of ``s t^T / k``."""
        return centring.uses_panel_sums(self.a_steps, self.b_steps)

    @property
    def stack(self) -> Stack:
        """numpy.matmul's shapes of this product: batch, 1-D operands, the output's shape."""
        return Stack.of(
            read_shape(self.values("A"), self.a_window),
            read_shape(self.values("B"), self.b_window),
            self.transpose_a,
            self.transpose_b,
        )

    def values(self, role: str) -> zarr.Array | Joined:
        """What operand ``role`` ("A", "B") is read from: its array, or the arrays joined."""
        if role == "A":
            return self.a if self.a_joined is None else self.a_joined
        return self.b if self.b_joined is None else self.b_joined

    @property
    def dimension_names(self) -> arrays.DimensionNames:
        """The output's dimension names (:func:`outofcore.operands.arrays.output_names`)."""
        return arrays.output_names(self.a, self.b, self.stack)

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the output, as numpy.matmul gives it (1-D and 0-d for vectors)."""
        return self.stack.out_shape

    @property
    def matrix_shape(self) -> tuple[int, int]:
        """``(m, n)``: the shape of each output matrix (1 for a vector's unit axis)."""
        stack = self.stack
        return stack.m, stack.n

    @property
    def k(self) -> int:
        """The inner dimension."""
        return self.stack.k

    @property
    def empty(self) -> bool:
        """Nothing to multiply: no matrix in the stack, or a dimension of 0 (m, n or k)."""
        stack = self.stack
        return stack.count == 0 or 0 in (stack.m, stack.n, stack.k)

    def matrix(self, role: str, entry: int | None = None) -> Matrix:
        """Matrix ``entry`` (None: the only one) of "A", "B" or "out" (the output, and the
        addend, of the output's shape) inside its array
        (:class:`~outofcore.operands.stacking.Matrix`)."""
        window = {"A": self.a_window, "B": self.b_window}.get(role)
        if window is not None:  # a 2-D region of the stored array
            return self.stack.matrix(role, window.shape, entry or 0, window.start)
        shape = self.values(role).shape if role in ("A", "B") else self.shape
        return self.stack.matrix(role, shape, entry or 0)

    def op_view(self, role: str) -> OpView:
        """Shape, dtype and chunk grid of one matrix of ``op(A)`` ("A") or ``op(B)`` ("B")."""
        array = self.values(role)  # a joined operand's chunks: its parts' largest
        transposed = self.transpose_a if role == "A" else self.transpose_b
        return self.matrix(role).op_view(array.dtype, array.chunks, transposed)

    @property
    def inputs(self) -> dict[str, zarr.Array]:
        """Every array read (A, B and the addend when there is one), by name."""
        named = {**named_parts("A", self.values("A")), **named_parts("B", self.values("B"))}
        for name, steps in (("A", self.a_steps), ("B", self.b_steps)):  # x * y: y is read
            stored = [step.other for step in steps if step.stored_other]
            named.update({f"{name} step {i}": y for i, y in enumerate(stored, start=1)})
        return named if self.addend is None else {**named, "addend": self.addend}

    @property
    def scaled(self) -> bool:
        """Whether finished rows need more than a plain write (scale, addend or conversion)."""
        return self.alpha != 1 or self.addend is not None or self.types.output != self.types.compute

    def problem(self, out: zarr.Array | None = None) -> Problem:
        """The plan's view: shapes, ``op`` chunk grids, element sizes and buffers."""
        compute = self.types.compute
        a_chunks, b_chunks = self.op_view("A").chunks, self.op_view("B").chunks
        staged = [x.dtype.itemsize if x.dtype != compute else 0 for x in (self.a, self.b)]
        for index, steps in enumerate((self.a_steps, self.b_steps)):  # x * y: y's panel
            staged[index] += max(
                (
                    compute.itemsize + (s.other.dtype.itemsize if s.other.dtype != compute else 0)
                    for s in steps
                    if s.stored_other
                ),
                default=0,
            )
        block_extra = 0
        if self.types.output != compute:
            block_extra += self.types.output.itemsize
        if self.addend is not None:
            block_extra += compute.itemsize
            if self.addend.dtype != compute:
                block_extra += self.addend.dtype.itemsize
        m, n = self.matrix_shape
        stack = self.stack
        return Problem(
            m=m,
            k=self.k,
            n=n,
            itemsize=compute.itemsize,
            a_chunks=a_chunks,
            b_chunks=b_chunks,
            out_grid=None if out is None else self._existing_grid(out),
            read_itemsizes=(self.a.dtype.itemsize, self.b.dtype.itemsize),
            staging=(staged[0], staged[1]),
            step_slabs=(
                slab_itemsize(self.a_steps, self.a.dtype),
                slab_itemsize(self.b_steps, self.b.dtype),
            ),
            out_itemsize=self.types.output.itemsize,
            block_extra=block_extra,
            addend_itemsize=0 if self.addend is None else self.addend.dtype.itemsize,
            addend_chunk_bytes=0
            if self.addend is None
            else math.prod(self.addend.chunks) * self.addend.dtype.itemsize,
            symmetric=self.symmetric,
            limbs=0 if self.types.limbs is None else self.types.limbs.counts[1],
            request_bytes=request_bytes(self.inputs.values()),
            read_shards=(
                zarr_read_shards(self.a, self.transpose_a),
                zarr_read_shards(self.b, self.transpose_b),
            ),
            held_bytes=vector_bytes(self.a_steps)
            + vector_bytes(self.b_steps)
            + (centring.held_bytes(m, n, compute) if self.panel_sums else 0),
            batch=stack.count if stack.batch else None,
            a_matrices=math.prod(stack.a_batch),
            b_matrices=math.prod(stack.b_batch),
            chunk_batch=(
                _entries_a_chunk(self.a, stack.a_batch),
                _entries_a_chunk(self.b, stack.b_batch),
            ),
        )

    def _existing_grid(self, out: zarr.Array) -> tuple[int, int]:
        """The grid of an existing output on its matrix axes; refused where a chunk (or
        shard) holds more than one matrix of a stack: the tasks of two matrices would
        both write it."""
        grid = arrays.output_grid(out)
        batch = grid[: len(self.stack.batch)]
        if any(size > 1 for size in batch):
            raise InputError(
                f"the output {stored_arrays.describe(out)} holds {math.prod(batch)} matrices of "
                f"the stack a {'shard' if out.shards else 'chunk'} ({grid}); outofcore writes "
                "each matrix by its own tasks, so it needs 1 on the batch dimensions "
                f"({(1,) * len(batch) + grid[len(batch) :]}): give a path, and it is created so"
            )
        return self.matrix("out").chunks2d(grid)

    def summary(self) -> dict[str, Any]:
        """JSON-ready description (job identity and the output's record).

        Products of two 2-D operands are described as they always were; others add
        ``"stack"``, the output's shape and which operands are vectors.
        """
        stack = self.stack
        shapes: dict[str, Any] = {
            f"{name}_steps": describe_steps(steps)
            for name, steps in (("a", self.a_steps), ("b", self.b_steps))
            if steps
        }
        for name, window in (("a", self.a_window), ("b", self.b_window)):
            if window is not None:
                shapes[f"{name}_window"] = window.describe()
        for name, joined in (("a", self.a_joined), ("b", self.b_joined)):
            if joined is not None:
                shapes[f"{name}_joined"] = joined.describe()
        if not stack.plain:
            shapes["stack"] = {
                "out_shape": list(stack.out_shape),
                "batch": list(stack.batch),
                "a_vector": stack.a_vector,
                "b_vector": stack.b_vector,
            }
        return {
            "transpose_a": self.transpose_a,
            "transpose_b": self.transpose_b,
            "alpha": _json_number(self.alpha),
            "beta": _json_number(self.beta),
            "addend": None if self.addend is None else stored_arrays.describe(self.addend),
            "symmetric": self.symmetric,
            **self.types.summary(),
            **shapes,
        }

    def finish_rows(
        self, rows: np.ndarray, origin: tuple[int, int], entry: int | None = None
    ) -> np.ndarray:
        """The values to write for accumulated ``rows`` of output matrix ``entry`` at
        ``origin`` (row and column in that matrix).

        ``rows`` (accumulation dtype) is scaled in place by ``alpha``; the
        addend's matching region, times ``beta``, is added; the result is
        converted to the output dtype (exact for an integer product).
        """
        wide = self.types.limbs is not None  # int64 or uint64, modulo 2**64
        # numpy multiplies complex values by a scale of 1 too, as (1+0j): an infinite part
        # times the other's 0 gives NaN (-inf+0j becomes -inf+nanj), and so must we.
        complex_values = rows.dtype.kind == "c"
        if self.alpha != 1 or complex_values:
            _scale(rows, self.alpha, wide)
        if self.addend is not None:
            (r0, c0), (h, w) = origin, rows.shape
            addend = np.empty(rows.shape, self.types.compute)
            where = self.matrix("out", entry)
            selection = where.selection(slice(r0, r0 + h), slice(c0, c0 + w))
            read_converted(self.addend, selection, where.view(addend))
            if self.beta != 1 or complex_values:
                _scale(addend, self.beta, wide)
            if wide:
                np.add(rows.view(np.uint64), addend.view(np.uint64), out=rows.view(np.uint64))
            else:
                rows += addend
        if self.types.boolean:  # numpy's bool product: whether any of the ands is true
            return (rows != 0).astype(self.types.output)
        if self.types.output == rows.dtype:
            return rows
        return rows.astype(self.types.output)


def _entries_a_chunk(array: zarr.Array, batch: tuple[int, ...]) -> int:
    """How many matrices of a stack one chunk of ``array`` holds (1 without a batch)."""
    return math.prod(min(c, n) for c, n in zip(array.chunks, batch, strict=False))


def _scale(values: np.ndarray, factor: int | float | complex, wide: bool) -> None:
    """``values *= factor`` in place; for 64-bit integers (``wide``) modulo ``2**64``, as
    numpy's int64 and uint64 arithmetic wraps (``factor`` is then an int, never rounded
    through float).  An exact product accumulated in float64 has ``|factor| <= 2**53``
    (its bound), so float64 holds the factor and every product exactly."""
    if wide:
        unsigned = values.view(np.uint64)
        np.multiply(unsigned, np.uint64(int(factor) % 2**64), out=unsigned)
    else:
        with np.errstate(invalid="ignore"):  # inf * 0 is NaN, as in numpy's product
            values *= factor


def listed_product(product: Product, fingerprints: Mapping[str, Fingerprint]) -> Product:
    """``product`` whose inputs are read as :func:`~outofcore.storage.presence.listed_array` twins,
    each checked against the keys of its fingerprint (``fingerprints``, by the names of
    ``product.inputs``).  An array given twice (a Gram product's A and B) stays one array."""
    twins: dict[int, zarr.Array] = {}

    def twin(name: str, array: zarr.Array) -> zarr.Array:
        if id(array) not in twins:
            where = f"input {name} ({stored_arrays.describe(array)})"
            twins[id(array)] = listed_array(array, fingerprints[name].tokens, where)
        return twins[id(array)]

    named = {name: twin(name, array) for name, array in product.inputs.items()}
    return replace(product, a=named["A"], b=named["B"], addend=named.get("addend", product.addend))


def _json_number(value: int | float | complex) -> int | float | list[float]:
    """A scale for JSON: an int stays an int (exact, whatever its size), complex a pair."""
    return [value.real, value.imag] if isinstance(value, complex) else value

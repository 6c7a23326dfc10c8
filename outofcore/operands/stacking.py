"""numpy.matmul's shape rules, and the 2-D matrices of a stack inside N-D arrays.

``A @ B`` in numpy takes operands of one or more dimensions:

* a 1-D A of shape ``(k,)`` is the ``1 x k`` matrix, a 1-D B the ``k x 1`` one, and the
  length-1 axis so added is removed from the output;
* the dimensions before the last two (the *batch*) broadcast, right-aligned: missing axes
  and axes of size 1 repeat the operand;
* a transpose swaps the last two axes of an operand of two or more dimensions (the
  transpose of a 1-D array is itself);
* 0-d operands are refused.

:class:`Stack` holds that algebra for a pair of shapes; :class:`Matrix` turns rows and
columns of one matrix of a stack (as stored) into the N-D selection of its array, and a
2-D buffer into a view with that region's shape.  Nothing here reads or writes data.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from outofcore.errors import InputError
from outofcore.operands.dtypes import OpView
from outofcore.storage.stored_arrays import shape_text

#: The roles :meth:`Stack.matrix` takes.
ROLES = ("A", "B", "out")
#: How messages name the matrix axes.
_AXES = ("rows", "columns")

_T = TypeVar("_T")


def _index(value: object) -> int:
    """``value`` as an int, where it is an integer (``operator.index``'s rule)."""
    try:
        return type(value).__index__(value)
    except AttributeError:
        raise TypeError(f"{value!r} is not an integer") from None


def _dims(shape: tuple[int, ...], name: str) -> tuple[int, ...]:
    """``shape`` as a tuple of ints, refusing negative sizes."""
    dims = tuple(_index(d) for d in shape)
    if any(d < 0 for d in dims):
        raise InputError(f"{name}'s shape {dims} has a negative size")
    return dims


def _refuse_scalar(shape: tuple[int, ...], name: str) -> None:
    """Refuse a 0-d operand, as numpy.matmul does."""
    if not shape:
        raise InputError(
            f"{name} does not have enough dimensions (has 0, shape ()): matmul needs at least 1"
        )


def _op_matrix(shape: tuple[int, ...], transposed: bool, vector: str) -> tuple[int, int]:
    """The 2-D matrix numpy multiplies for an operand: ``vector`` is "row" for A, "col" for B."""
    if len(shape) == 1:
        return (1, shape[0]) if vector == "row" else (shape[0], 1)
    rows, cols = shape[-2:]
    return (cols, rows) if transposed else (rows, cols)


def _describe(shape: tuple[int, ...], transposed: bool, name: str) -> str:
    """How messages name an operand and its shape: "A.T is 2x4x5", "B is a vector of 4"."""
    if len(shape) == 1:
        return f"{name} is a vector of {shape[0]}"
    if transposed:
        shape = (*shape[:-2], shape[-1], shape[-2])
        name = f"{name}.T"
    return f"{name} is {shape_text(shape)}"


def broadcast_batch(a_batch: tuple[int, ...], b_batch: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast of two batch shapes (right-aligned; size 1 and missing axes repeat).

    Raises
    ------
    InputError
        Where two sizes differ and neither is 1.
    """
    out = []
    for a, b in itertools.zip_longest(reversed(a_batch), reversed(b_batch), fillvalue=1):
        if a != b and 1 not in (a, b):
            raise InputError(f"A's batch dimensions {a_batch} and B's {b_batch} do not broadcast")
        out.append(b if a == 1 else a)
    return tuple(reversed(out))


def _unravel(entry: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The row-major index of flat position ``entry`` in ``shape`` (Python ints)."""
    index = []
    for size in reversed(shape):
        entry, i = divmod(entry, size)
        index.append(i)
    return tuple(reversed(index))


def _operand_index(full: tuple[int, ...], batch: tuple[int, ...]) -> tuple[int, ...]:
    """An operand's batch index of broadcast index ``full``: size-1 axes 0, missing dropped."""
    skip = len(full) - len(batch)
    return tuple(0 if size == 1 else i for i, size in zip(full[skip:], batch, strict=True))


@dataclass(frozen=True)
class Stack:
    """The shapes of ``op(A) @ op(B)`` under numpy.matmul's rules (build with :meth:`of`).

    Attributes
    ----------
    a_shape, b_shape
        The operands' shapes, as stored.
    a_batch, b_batch
        Their batch dimensions (all but the last two; ``()`` for 1-D and 2-D operands).
    batch
        The broadcast of ``a_batch`` and ``b_batch``: the output's leading dimensions.
    a_vector, b_vector
        Whether A (resp. B) is 1-D: ``1 x k`` (resp. ``k x 1``), the unit axis dropped
        from the output.
    m, k, n
        The matrix dimensions after the 1-D promotion and the transposes.
    out_shape
        numpy's output shape: ``batch``, then ``m`` unless A is 1-D, ``n`` unless B is.
    count
        The number of matrices in the output, ``prod(batch)``.
    transpose_a, transpose_b
        The transposes, False for a 1-D operand (whose transpose is itself).
    """

    a_shape: tuple[int, ...]
    b_shape: tuple[int, ...]
    a_batch: tuple[int, ...]
    b_batch: tuple[int, ...]
    batch: tuple[int, ...]
    a_vector: bool
    b_vector: bool
    m: int
    k: int
    n: int
    out_shape: tuple[int, ...]
    count: int
    transpose_a: bool
    transpose_b: bool

    @classmethod
    def of(
        cls,
        a_shape: tuple[int, ...],
        b_shape: tuple[int, ...],
        transpose_a: bool = False,
        transpose_b: bool = False,
    ) -> Stack:
        """The stack of ``op(A) @ op(B)`` for operands of these shapes.

        Raises
        ------
        InputError
            For a 0-d operand, batch dimensions that do not broadcast, or inner
            dimensions that differ.
        """
        a, b = _dims(a_shape, "A"), _dims(b_shape, "B")
        _refuse_scalar(a, "A")
        _refuse_scalar(b, "B")
        ta, tb = bool(transpose_a) and len(a) > 1, bool(transpose_b) and len(b) > 1
        m, ka = _op_matrix(a, ta, "row")
        kb, n = _op_matrix(b, tb, "col")
        if ka != kb:
            raise InputError(
                f"inner dimensions differ: {_describe(a, ta, 'A')} and "
                f"{_describe(b, tb, 'B')} ({ka} != {kb})"
            )
        a_batch, b_batch = a[:-2], b[:-2]
        batch = broadcast_batch(a_batch, b_batch)
        a_vector, b_vector = len(a) == 1, len(b) == 1
        out_shape = batch + ((m,) if not a_vector else ()) + ((n,) if not b_vector else ())
        return cls(
            a_shape=a,
            b_shape=b,
            a_batch=a_batch,
            b_batch=b_batch,
            batch=batch,
            a_vector=a_vector,
            b_vector=b_vector,
            m=m,
            k=ka,
            n=n,
            out_shape=out_shape,
            count=math.prod(batch),
            transpose_a=ta,
            transpose_b=tb,
        )

    @property
    def plain(self) -> bool:
        """Whether both operands are 2-D (one matrix, no vector): today's products."""
        return len(self.a_shape) == 2 and len(self.b_shape) == 2

    def entry_index(self, entry: int) -> tuple[int, ...]:
        """The output's batch index of matrix ``entry`` (row-major over ``batch``)."""
        entry = _index(entry)
        if not 0 <= entry < self.count:
            raise IndexError(f"entry {entry} is outside a stack of {self.count} matrices")
        return _unravel(entry, self.batch)

    def operand_index(self, entry: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The batch indices into A and into B of the output's matrix ``entry``."""
        full = self.entry_index(entry)
        return _operand_index(full, self.a_batch), _operand_index(full, self.b_batch)

    def matrix(
        self, role: str, shape: tuple[int, ...], entry: int, origin: tuple[int, int] = (0, 0)
    ) -> Matrix:
        """Matrix ``entry`` of A, B or the output ("out", also the addend's) in its array.

        ``shape`` is that array's shape (of the operand's :class:`Window` where it reads
        one, starting at ``origin``), checked against the stack's.
        """
        expected = self._role_shape(role)
        shape = tuple(_index(d) for d in shape)
        if shape != expected:
            raise ValueError(f"{role} of this stack has shape {expected}, not {shape}")
        a_index, b_index = self.operand_index(entry)
        if role == "A":
            return Matrix(shape, a_index, 0 if self.a_vector else None, origin)
        if role == "B":
            return Matrix(shape, b_index, 1 if self.b_vector else None, origin)
        return Matrix(shape, self.entry_index(entry), self._out_unit())

    def out_grid(self, rows: int, cols: int) -> tuple[int, ...]:
        """The output's chunks (or shards) that are ``rows x cols`` on each matrix: 1 on
        the batch axes (one matrix a chunk), a vector's unit axes left out."""
        matrix = ((rows, self.a_vector), (cols, self.b_vector))
        return (1,) * len(self.batch) + tuple(_index(v) for v, unit in matrix if not unit)

    def _role_shape(self, role: str) -> tuple[int, ...]:
        """The shape of the array that plays ``role``."""
        if role not in ROLES:
            raise ValueError(f"role {role!r} is none of {ROLES}")
        return {"A": self.a_shape, "B": self.b_shape, "out": self.out_shape}[role]

    def _out_unit(self) -> int | None:
        """The output matrix's one inserted axis (None for none, or for both)."""
        if self.a_vector != self.b_vector:
            return 0 if self.a_vector else 1
        return None


def _bounds(s: slice, size: int, what: str) -> tuple[int, int]:
    """``(start, stop)`` of a unit-step slice within ``range(size)`` (None: the ends)."""
    if not isinstance(s, slice):
        raise ValueError(f"{what} {s!r} is not a slice")
    if s.step not in (None, 1):
        raise ValueError(f"{what} {s} has step {s.step}: only unit steps select a region")
    start = 0 if s.start is None else _index(s.start)
    stop = size if s.stop is None else _index(s.stop)
    if not 0 <= start <= stop <= size:
        raise ValueError(f"{what} {start}:{stop} are outside 0:{size}")
    return start, stop


@dataclass(frozen=True)
class Window:
    """A contiguous region of a stored 2-D array read as an operand (``x[10:70, :300]``
    of a dask array): its first row and column and its shape, as stored."""

    start: tuple[int, int]
    shape: tuple[int, int]

    def __post_init__(self) -> None:
        """Check two non-negative starts and sizes."""
        start, shape = tuple(self.start), tuple(self.shape)
        if len(start) != 2 or len(shape) != 2:
            raise ValueError(f"a window is 2-D: start {start}, shape {shape}")
        object.__setattr__(self, "start", tuple(_index(i) for i in start))
        object.__setattr__(self, "shape", tuple(_index(i) for i in shape))
        if min(self.start + self.shape) < 0:
            raise ValueError(f"a window starts and spans at least 0: {start}, {shape}")

    def check(self, shape: tuple[int, ...], what: str) -> None:
        """Refuse a window that is not inside a 2-D array of ``shape`` (``what`` names it)."""
        if len(shape) != 2 or any(
            at + size > whole for at, size, whole in zip(self.start, self.shape, shape, strict=True)
        ):
            raise InputError(
                f"{what}: the region {self.text()} is not inside an array of shape {tuple(shape)}"
            )

    def within(self, inner: Window) -> Window:
        """``inner`` (a window of this window's values) as a window of the stored array."""
        start = tuple(a + b for a, b in zip(self.start, inner.start, strict=True))
        return Window(start, inner.shape)

    def transposed(self) -> Window:
        """This window of the transposed array."""
        return Window(self.start[::-1], self.shape[::-1])

    def text(self) -> str:
        """``[r0:r1, c0:c1]``, as numpy writes the selection."""
        parts = (f"{at}:{at + size}" for at, size in zip(self.start, self.shape, strict=True))
        return f"[{', '.join(parts)}]"

    def describe(self) -> dict[str, list[int]]:
        """JSON-ready (the job's identity)."""
        return {"start": list(self.start), "shape": list(self.shape)}


@dataclass(frozen=True)
class Matrix:
    """One 2-D matrix inside an N-D array, as stored (before any transpose).

    Attributes
    ----------
    shape
        The array's shape.
    prefix
        The matrix's batch index: the array's leading axes.
    unit
        Where the array holds one matrix axis: which matrix axis (0 the rows, 1 the
        columns) is the inserted length-1 one, as numpy promotes a 1-D operand.  None
        where both matrix axes are stored, or neither (the ``1 x 1`` matrices of a stack
        of dot products).
    """

    shape: tuple[int, ...]
    prefix: tuple[int, ...]
    unit: int | None
    #: Where the matrix starts inside the stored array (a 2-D :class:`Window` of it):
    #: ``(row, column)`` added to every selection; ``(0, 0)`` for the whole array.
    origin: tuple[int, int] = (0, 0)

    def __post_init__(self) -> None:
        """Check that the prefix indexes the array and leaves it 0 to 2 matrix axes."""
        object.__setattr__(self, "shape", tuple(_index(d) for d in self.shape))
        object.__setattr__(self, "prefix", tuple(_index(i) for i in self.prefix))
        object.__setattr__(self, "origin", tuple(_index(i) for i in self.origin))
        if self.origin != (0, 0) and (len(self.shape) != 2 or min(self.origin) < 0):
            raise ValueError(
                f"origin {self.origin} of a matrix of shape {self.shape}: only a 2-D array's "
                "window starts elsewhere than (0, 0), at indices of at least 0"
            )
        stored = len(self.shape) - len(self.prefix)
        if not 0 <= stored <= 2:
            raise ValueError(
                f"batch index {self.prefix} leaves {stored} axes of shape {self.shape}, not 0 to 2"
            )
        if any(not 0 <= i < size for i, size in zip(self.prefix, self.shape, strict=False)):
            raise ValueError(f"batch index {self.prefix} is outside shape {self.shape}")
        if self.unit not in ((0, 1) if stored == 1 else (None,)):
            raise ValueError(
                f"unit {self.unit!r} does not fit {stored} stored matrix axes "
                "(0 or 1 for one, None for two or none)"
            )

    def _inserted(self, axis: int) -> bool:
        """Whether matrix axis ``axis`` (0 rows, 1 columns) is an inserted length-1 one."""
        return len(self.shape) == len(self.prefix) or self.unit == axis

    def _two(self, stored: tuple[int, ...]) -> tuple[int, int]:
        """Values on the stored matrix axes as (rows, cols), 1 on inserted axes."""
        values = iter(stored)
        rows = 1 if self._inserted(0) else next(values)
        cols = 1 if self._inserted(1) else next(values)
        return rows, cols

    def _stored_of(self, rows: _T, cols: _T) -> tuple[_T, ...]:
        """Of (rows, cols) values, those on stored matrix axes."""
        return tuple(v for axis, v in enumerate((rows, cols)) if not self._inserted(axis))

    @property
    def matrix_shape(self) -> tuple[int, int]:
        """``(rows, cols)`` of the matrix as stored."""
        return self._two(self.shape[len(self.prefix) :])

    def selection(self, rows: slice, cols: slice) -> tuple[slice, ...]:
        """The N-D selection of rows x cols (batch indices as length-1 slices).

        Slices take unit steps within the matrix; on an inserted axis, only ``0:1``.
        """
        bounds = [
            _bounds(s, size, what)
            for s, size, what in zip(
                (rows, cols), self.matrix_shape, ("rows", "columns"), strict=True
            )
        ]
        for axis, (start, stop) in enumerate(bounds):
            if self._inserted(axis) and (start, stop) != (0, 1):
                raise ValueError(f"{_AXES[axis]} {start}:{stop} of an inserted axis: only 0:1")
        batch = tuple(slice(i, i + 1) for i in self.prefix)
        moved = [(a + at, b + at) for (a, b), at in zip(bounds, self.origin, strict=True)]
        return batch + self._stored_of(*(slice(start, stop) for start, stop in moved))

    def view(self, out2d: np.ndarray) -> np.ndarray:
        """``out2d`` (a rows x cols region) as a view with the N-D region's shape.

        Raises
        ------
        ValueError
            If ``out2d`` is not 2-D, has more than one row (column) on an inserted axis,
            or if the result would not share its memory.
        """
        if not isinstance(out2d, np.ndarray) or out2d.ndim != 2:
            raise ValueError(f"{type(out2d).__name__} of shape {np.shape(out2d)} is not 2-D")
        for axis in (0, 1):
            if self._inserted(axis) and out2d.shape[axis] != 1:
                raise ValueError(
                    f"a region of shape {out2d.shape} has {out2d.shape[axis]} {_AXES[axis]} "
                    "on an inserted axis (1 is stored)"
                )
        take = tuple(0 if self._inserted(axis) else slice(None) for axis in (0, 1))
        region = out2d[(None,) * len(self.prefix) + take + (Ellipsis,)]
        if out2d.size and not np.may_share_memory(region, out2d):
            raise ValueError(f"a view of shape {out2d.shape} as the region would copy")
        return region

    def start(self, r0: int, c0: int) -> tuple[int, ...]:
        """The N-D index of the matrix element ``(r0, c0)`` (where a region is written)."""
        for axis, value in enumerate((r0, c0)):
            if self._inserted(axis) and value != 0:
                raise ValueError(f"{_AXES[axis]} start {value} on an inserted axis: only 0")
        row, col = self.origin
        return self.prefix + self._stored_of(_index(r0) + row, _index(c0) + col)

    def chunks2d(self, chunks: tuple[int, ...]) -> tuple[int, int]:
        """``(rows, cols)`` of the array's chunks (or shards) on the matrix, 1 on inserted axes."""
        chunks = tuple(chunks)
        if len(chunks) != len(self.shape):
            raise ValueError(f"chunks {chunks} do not fit an array of shape {self.shape}")
        return self._two(chunks[len(self.prefix) :])

    def op_view(self, dtype: np.dtype, chunks: tuple[int, ...], transposed: bool) -> OpView:
        """The :class:`OpView` of this matrix, or of its transpose (the last two axes)."""
        shape, grid = self.matrix_shape, self.chunks2d(chunks)
        if transposed:
            shape, grid = shape[::-1], grid[::-1]
        return OpView(shape, np.dtype(dtype), grid)

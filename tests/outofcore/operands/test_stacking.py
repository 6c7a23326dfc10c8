"""numpy.matmul's shape rules (:mod:`outofcore.operands.stacking`) against numpy itself.

``Stack.of`` is compared with ``np.matmul`` of empty arrays (shapes and refusals), over every
small pair and over hypothesis-drawn ones; ``operand_index`` with ``np.broadcast_to`` of
index grids; ``Matrix`` selections and views by assembling each entry's product from
regions of the N-D arrays and comparing with ``np.matmul`` of the whole arrays.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from outofcore.errors import InputError
from outofcore.operands.stacking import Matrix, Stack

sizes = st.integers(min_value=0, max_value=3)
shapes = st.lists(sizes, max_size=4).map(tuple)
flags = st.booleans()


def op(x: np.ndarray, transposed: bool) -> np.ndarray:
    """numpy's ``op(x)``: the last two axes swapped, a 1-D array as it is."""
    return np.swapaxes(x, -1, -2) if transposed and x.ndim >= 2 else x


def numpy_shape(
    a_shape: tuple[int, ...], b_shape: tuple[int, ...], ta: bool, tb: bool
) -> tuple[int, ...] | None:
    """The shape of numpy's ``op(A) @ op(B)``, or None where numpy refuses."""
    a, b = op(np.empty(a_shape), ta), op(np.empty(b_shape), tb)
    try:
        return np.matmul(a, b).shape
    except ValueError:
        return None


def stack_shape(
    a_shape: tuple[int, ...], b_shape: tuple[int, ...], ta: bool, tb: bool
) -> tuple[int, ...] | None:
    """``Stack.of``'s output shape, or None where it refuses."""
    try:
        return Stack.of(a_shape, b_shape, ta, tb).out_shape
    except InputError:
        return None


@st.composite
def stacks(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], bool, bool]:
    """Operand shapes numpy multiplies (1-D, 2-D, broadcast batches), and transposes."""
    batch = tuple(draw(st.lists(sizes, max_size=2)))
    m, k, n = draw(sizes), draw(sizes), draw(sizes)

    def operand(rows: int, cols: int, vector: int) -> tuple[tuple[int, ...], bool]:
        transposed = draw(flags)
        if draw(st.integers(0, 3)) == 0:
            return (vector,), transposed
        kept = batch[len(batch) - draw(st.integers(0, len(batch))) :]
        ones = tuple(1 if draw(st.booleans()) else d for d in kept)
        return ones + ((cols, rows) if transposed else (rows, cols)), transposed

    (a_shape, ta), (b_shape, tb) = operand(m, k, k), operand(k, n, k)
    return a_shape, b_shape, ta, tb


@pytest.mark.parametrize(("ta", "tb"), list(itertools.product([False, True], repeat=2)))
def test_every_small_pair_agrees_with_numpy(ta, tb):
    """Every pair of shapes of 0 to 3 dimensions of sizes 0 to 2: same shape, same refusals."""
    small = [s for d in range(4) for s in itertools.product(range(3), repeat=d)]
    for a_shape, b_shape in itertools.product(small, repeat=2):
        expected = numpy_shape(a_shape, b_shape, ta, tb)
        assert stack_shape(a_shape, b_shape, ta, tb) == expected, (a_shape, b_shape)


@settings(max_examples=400)
@given(shapes, shapes, flags, flags)
def test_any_shapes_agree_with_numpy(a_shape, b_shape, ta, tb):
    """Shapes of 0 to 4 dimensions of sizes 0 to 3: numpy's shape, or refused as numpy does."""
    assert stack_shape(a_shape, b_shape, ta, tb) == numpy_shape(a_shape, b_shape, ta, tb)


@settings(max_examples=300)
@given(stacks())
def test_fields_agree_with_numpy(case):
    """Stacks numpy multiplies: shape, batch, count, m, k, n and the flags."""
    a_shape, b_shape, ta, tb = case
    s = Stack.of(a_shape, b_shape, ta, tb)
    a, b = op(np.empty(a_shape), ta), op(np.empty(b_shape), tb)
    assert s.out_shape == np.matmul(a, b).shape
    a2, b2 = (a[None, :] if a.ndim == 1 else a), (b[:, None] if b.ndim == 1 else b)
    assert s.batch == np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    assert (s.m, s.k, s.n) == (a2.shape[-2], a2.shape[-1], b2.shape[-1])
    assert (s.a_batch, s.b_batch) == (a_shape[:-2], b_shape[:-2])
    assert s.count == int(np.prod(s.batch))
    assert (s.a_vector, s.b_vector) == (len(a_shape) == 1, len(b_shape) == 1)
    assert (s.transpose_a, s.transpose_b) == (ta and len(a_shape) > 1, tb and len(b_shape) > 1)
    assert s.plain == (len(a_shape) == 2 and len(b_shape) == 2)


@pytest.mark.parametrize(
    ("a", "b", "ta", "tb", "out", "mkn"),
    [
        ((5, 4), (4, 6), False, False, (5, 6), (5, 4, 6)),
        ((4,), (4, 6), False, False, (6,), (1, 4, 6)),
        ((5, 4), (4,), False, False, (5,), (5, 4, 1)),
        ((4,), (4,), False, False, (), (1, 4, 1)),
        ((4, 5), (6, 4), True, True, (5, 6), (5, 4, 6)),
        ((2, 3, 5, 4), (3, 4, 6), False, False, (2, 3, 5, 6), (5, 4, 6)),
        ((4, 1, 5, 4), (1, 7, 4, 6), False, False, (4, 7, 5, 6), (5, 4, 6)),
        ((2, 5, 4), (4,), False, False, (2, 5), (5, 4, 1)),
        ((4,), (2, 4, 6), False, False, (2, 6), (1, 4, 6)),
        ((2, 4), (2, 4), False, False, None, None),
        ((0, 5, 4), (4, 6), False, False, (0, 5, 6), (5, 4, 6)),
    ],
)
def test_known_stacks(a, b, ta, tb, out, mkn):
    """A table of stacks: the output shape and (m, k, n), or a refusal (None)."""
    if out is None:
        with pytest.raises(InputError):
            Stack.of(a, b, ta, tb)
        return
    s = Stack.of(a, b, ta, tb)
    assert (s.out_shape, (s.m, s.k, s.n)) == (out, mkn)


def test_vector_transposes_are_normalised():
    """A 1-D operand's transpose is itself: the flag is taken and dropped."""
    assert Stack.of((4,), (4, 6), True, False) == Stack.of((4,), (4, 6))
    assert Stack.of((5, 4), (4,), False, True) == Stack.of((5, 4), (4,))
    assert Stack.of((4, 5), (4,), True, True).transpose_a


@pytest.mark.parametrize(
    ("a", "b", "ta", "tb", "message"),
    [
        ((), (4,), False, False, "A does not have enough dimensions (has 0, shape ())"),
        ((4,), (), False, False, "B does not have enough dimensions (has 0, shape ())"),
        (
            (2, 3, 5, 4),
            (4, 4, 6),
            False,
            False,
            "A's batch dimensions (2, 3) and B's (4,) do not broadcast",
        ),
        ((5, 4), (3, 6), False, False, "inner dimensions differ: A is 5x4 and B is 3x6 (4 != 3)"),
        ((5, 4), (3, 6), True, False, "inner dimensions differ: A.T is 4x5 and B is 3x6 (5 != 3)"),
        ((5, 4), (3,), False, False, "A is 5x4 and B is a vector of 3 (4 != 3)"),
        ((2, 5, 4), (6, 3), False, True, "A is 2x5x4 and B.T is 3x6 (4 != 3)"),
        ((-1, 4), (4, 6), False, False, "A's shape (-1, 4) has a negative size"),
    ],
)
def test_refusals_name_the_shapes(a, b, ta, tb, message):
    """Refusals say what numpy would, with the operands' shapes."""
    with pytest.raises(InputError, match=re.escape(message)):
        Stack.of(a, b, ta, tb)


def index_grid(batch: tuple[int, ...], full: tuple[int, ...]) -> list[tuple[int, ...]]:
    """numpy's operand index of each output entry: index grids broadcast to ``full``."""
    grids = [np.broadcast_to(g, full).ravel() for g in np.indices(batch, sparse=False)]
    return [tuple(int(g[e]) for g in grids) for e in range(int(np.prod(full)))]


@settings(max_examples=200)
@given(stacks())
def test_operand_index_agrees_with_broadcast_to(case):
    """Each entry's A and B batch indices are those numpy's broadcasting pairs."""
    s = Stack.of(*case)
    a_grid, b_grid = index_grid(s.a_batch, s.batch), index_grid(s.b_batch, s.batch)
    expected = list(zip(a_grid, b_grid, strict=True))
    assert [s.operand_index(e) for e in range(s.count)] == expected
    with pytest.raises(IndexError):
        s.operand_index(s.count)
    with pytest.raises(IndexError):
        s.operand_index(-1)


def read_matrix(matrix: Matrix, array: np.ndarray) -> np.ndarray:
    """The whole 2-D matrix, read into a buffer through ``selection`` and ``view``."""
    out2d = np.full(matrix.matrix_shape, -99, dtype=array.dtype)
    matrix.view(out2d)[...] = array[matrix.selection(slice(None), slice(None))]
    return out2d


def promoted_matrices(x: np.ndarray, row: bool, batch: tuple[int, ...]) -> np.ndarray:
    """numpy's matrices of an operand: 1-D promoted, broadcast to ``batch``, one per entry."""
    if x.ndim == 1:
        x = x[None, :] if row else x[:, None]
    full = np.broadcast_to(x, batch + x.shape[-2:])
    return full.reshape((int(np.prod(batch)), *x.shape[-2:]))


@settings(max_examples=200)
@given(stacks(), st.integers(0, 2**32 - 1))
def test_entries_assemble_numpy_matmul(case, seed):
    """Each entry's matrices, read through Matrix, multiplied and written through the
    output's Matrix, assemble numpy's product of the whole arrays."""
    a_shape, b_shape, ta, tb = case
    s = Stack.of(*case)
    rng = np.random.default_rng(seed)
    a, b = rng.integers(-3, 4, a_shape), rng.integers(-3, 4, b_shape)
    out = np.full(s.out_shape, -99, dtype=a.dtype)
    a_all = promoted_matrices(a, True, s.batch)
    b_all = promoted_matrices(b, False, s.batch)
    for e in range(s.count):
        a2 = read_matrix(s.matrix("A", a.shape, e), a)
        b2 = read_matrix(s.matrix("B", b.shape, e), b)
        np.testing.assert_array_equal(a2, a_all[e])
        np.testing.assert_array_equal(b2, b_all[e])
        product = op(a2, s.transpose_a) @ op(b2, s.transpose_b)
        assert product.shape == (s.m, s.n)
        m_out = s.matrix("out", out.shape, e)
        out[m_out.selection(slice(None), slice(None))] = m_out.view(product)
    np.testing.assert_array_equal(out, np.matmul(op(a, ta), op(b, tb)))


def inserted(matrix: Matrix, axis: int) -> bool:
    """Whether matrix axis ``axis`` is not stored (a 1-D operand's, a vector output's)."""
    return matrix.unit == axis or len(matrix.shape) == len(matrix.prefix)


@st.composite
def regions(draw: st.DrawFn) -> tuple[Matrix, np.ndarray, slice, slice]:
    """A matrix of a stack's A, B or output, its array, and a region of it (inserted axes
    whole, 0:1)."""
    s = Stack.of(*draw(stacks()))
    assume(s.count > 0)
    role = draw(st.sampled_from(["A", "B", "out"]))
    shape = {"A": s.a_shape, "B": s.b_shape, "out": s.out_shape}[role]
    matrix = s.matrix(role, shape, draw(st.integers(0, s.count - 1)))
    array = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)

    def cut(size: int, axis: int) -> slice:
        if inserted(matrix, axis):
            return slice(0, 1)
        start = draw(st.integers(0, size))
        return slice(start, draw(st.integers(start, size)))

    rows, cols = matrix.matrix_shape
    return matrix, array, cut(rows, 0), cut(cols, 1)


@settings(max_examples=300)
@given(regions())
def test_regions_are_views_of_2d_buffers(case):
    """A region read through selection into view(out2d) is that rows x cols block of the
    matrix; the view shares out2d's memory; writing it back at selection reproduces the
    region; start is the selection's first index."""
    matrix, array, rows, cols = case
    selection = matrix.selection(rows, cols)
    assert len(selection) == array.ndim
    assert all(isinstance(s, slice) and s.step is None for s in selection)
    whole = read_matrix(matrix, array)
    out2d = np.empty((rows.stop - rows.start, cols.stop - cols.start), dtype=array.dtype)
    view = matrix.view(out2d)
    assert view.shape == array[selection].shape
    if out2d.size:
        assert np.shares_memory(view, out2d)
    view[...] = array[selection]
    np.testing.assert_array_equal(out2d, whole[rows, cols])
    back = np.zeros_like(array)
    back[selection] = matrix.view(out2d)
    np.testing.assert_array_equal(back[selection], array[selection])
    assert matrix.start(rows.start, cols.start) == tuple(s.start for s in selection)


def test_view_of_a_strided_buffer_shares_memory():
    """A transposed (non-contiguous) buffer is viewed, not copied."""
    matrix = Matrix((3, 4, 5), (2,), None)
    buffer = np.zeros((5, 4)).T
    view = matrix.view(buffer)
    view[0, 1, 2] = 7.0
    assert view.shape == (1, 4, 5) and buffer[1, 2] == 7.0
    column = Matrix((2, 4), (1,), 1).view(np.zeros((6, 4)).T[:, :1])
    assert column.shape == (1, 4) and column.base is not None


@pytest.mark.parametrize(
    ("matrix", "matrix_shape", "selection", "view_shape", "start"),
    [
        (Matrix((5, 4), (), None), (5, 4), (slice(1, 3), slice(0, 4)), (2, 4), (1, 0)),
        (
            Matrix((2, 3, 5, 4), (1, 2), None),
            (5, 4),
            (slice(1, 2), slice(2, 3), slice(1, 2), slice(0, 4)),
            (1, 1, 1, 4),
            (1, 2, 1, 0),
        ),
        (Matrix((4,), (), 0), (1, 4), (slice(0, 4),), (4,), (0,)),
        (Matrix((4,), (), 1), (4, 1), (slice(1, 3),), (2,), (1,)),
        (Matrix((3, 4), (2,), 1), (4, 1), (slice(2, 3), slice(1, 3)), (1, 2), (2, 1)),
        (Matrix((3,), (2,), None), (1, 1), (slice(2, 3),), (1,), (2,)),
        (Matrix((), (), None), (1, 1), (), (), ()),
    ],
)
def test_matrix_table(matrix, matrix_shape, selection, view_shape, start):
    """A table of matrices: 2-D, batch, 1-D row and column, a stack's (m,) and () outputs."""
    assert matrix.matrix_shape == matrix_shape
    (r0, r1), (c0, c1) = _window(matrix, selection)
    assert matrix.selection(slice(r0, r1), slice(c0, c1)) == selection
    assert matrix.view(np.zeros((r1 - r0, c1 - c0))).shape == view_shape
    assert matrix.start(r0, c0) == start


def _window(matrix: Matrix, selection: tuple[slice, ...]) -> tuple[tuple[int, int], ...]:
    """The (rows, cols) bounds a table row's selection was written for."""
    stored = [(s.start, s.stop) for s in selection[len(matrix.prefix) :]]
    whole = [(0, 1), (0, 1)]
    if matrix.unit is None and stored:
        return tuple(stored)
    if matrix.unit is not None:
        whole[1 - matrix.unit] = stored[0]
    return tuple(whole)


@pytest.mark.parametrize(
    ("matrix", "chunks", "expected"),
    [
        (Matrix((50, 40), (), None), (16, 8), (16, 8)),
        (Matrix((3, 50, 40), (1,), None), (2, 16, 8), (16, 8)),
        (Matrix((40,), (), 0), (8,), (1, 8)),
        (Matrix((40,), (), 1), (8,), (8, 1)),
        (Matrix((3, 50), (0,), 1), (2, 16), (16, 1)),
        (Matrix((3,), (0,), None), (2,), (1, 1)),
    ],
)
def test_chunks2d(matrix, chunks, expected):
    """The matrix's chunk on its rows and columns, 1 on inserted axes."""
    assert matrix.chunks2d(chunks) == expected


def test_op_view_swaps_the_matrix_axes():
    """op_view swaps the last two axes only (dtypes.op_view reversed them all)."""
    matrix = Matrix((3, 50, 40), (1,), None)
    plain = matrix.op_view(np.dtype("float32"), (1, 16, 8), False)
    swapped = matrix.op_view(np.dtype("float32"), (1, 16, 8), True)
    assert (plain.shape, plain.chunks) == ((50, 40), (16, 8))
    assert (swapped.shape, swapped.chunks, swapped.dtype) == ((40, 50), (8, 16), np.float32)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Matrix((3, 4), (0, 0, 0), None), "leaves -1 axes"),
        (lambda: Matrix((3, 4, 5, 6), (), None), "leaves 4 axes"),
        (lambda: Matrix((3, 4, 5), (3,), None), "outside shape"),
        (lambda: Matrix((4,), (), None), "unit None does not fit 1"),
        (lambda: Matrix((4, 5), (), 0), "unit 0 does not fit 2"),
        (lambda: Matrix((4,), (), 2), "unit 2 does not fit 1"),
        (lambda: Matrix((5, 4), (), None).selection(slice(0, 4, 2), slice(None)), "step 2"),
        (lambda: Matrix((5, 4), (), None).selection(slice(0, 6), slice(None)), "outside 0:5"),
        (lambda: Matrix((5, 4), (), None).selection(slice(3, 2), slice(None)), "outside"),
        (lambda: Matrix((5, 4), (), None).selection(1, slice(None)), "not a slice"),
        (lambda: Matrix((4,), (), 0).selection(slice(0, 0), slice(None)), "inserted axis"),
        (lambda: Matrix((4,), (), 0).view(np.zeros((2, 4))), "inserted axis"),
        (lambda: Matrix((4,), (), 1).view(np.zeros((4, 2))), "inserted axis"),
        (lambda: Matrix((4, 5), (), None).view(np.zeros(4)), "is not 2-D"),
        (lambda: Matrix((4, 5), (), None).view([[1.0]]), "is not 2-D"),
        (lambda: Matrix((4,), (), 0).start(1, 0), "inserted axis"),
        (lambda: Matrix((4, 5), (), None).chunks2d((2,)), "do not fit"),
        (lambda: Stack.of((5, 4), (4, 6)).matrix("A", (4, 5), 0), "has shape (5, 4)"),
        (lambda: Stack.of((5, 4), (4, 6)).matrix("C", (5, 6), 0), "none of"),
    ],
)
def test_matrix_refusals(make, message):
    """Bad prefixes, units, slices, buffers and starts raise ValueError, naming them."""
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


def test_stack_matrix_units():
    """A's 1-D matrix is a row, B's a column; the output's drops whichever is inserted."""
    s = Stack.of((2, 5, 4), (4,))
    assert s.matrix("A", (2, 5, 4), 1) == Matrix((2, 5, 4), (1,), None)
    assert s.matrix("B", (4,), 1) == Matrix((4,), (), 1)
    assert s.matrix("out", (2, 5), 1) == Matrix((2, 5), (1,), 1)
    s = Stack.of((4,), (3, 1, 4, 6))
    assert s.matrix("A", (4,), 2) == Matrix((4,), (), 0)
    assert s.matrix("out", (3, 1, 6), 2) == Matrix((3, 1, 6), (2, 0), 0)
    assert Stack.of((2, 4), (4,)).matrix("out", (2,), 0) == Matrix((2,), (), 1)
    assert Stack.of((3, 1, 4), (4,)).matrix("out", (3, 1), 2) == Matrix((3, 1), (2,), 1)
    assert Stack.of((3, 4), (4, 1)).count == 1
    with pytest.raises(IndexError):
        Stack.of((0, 2, 4), (4, 3)).matrix("A", (0, 2, 4), 0)

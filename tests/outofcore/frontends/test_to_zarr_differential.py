"""``outofcore.to_zarr(expr)`` against dask's own compute, on generated expressions
(issue 42, item 7).

A small grammar builds ``lhs.T @ rhs``, ``lhs @ rhs`` or ``lhs @ rhs.T`` from stored zarr
arrays ``x`` and ``y`` of generated dtypes (bool, every integer width, float16/32/64,
complex64/128), values (NaN, Inf, signed zeros, the dtype's extremes), odd shapes and
ragged chunks, with steps: ``+ - * /`` by int and float scalars (either side),
``astype`` to any of those dtypes, transposes, unit-step slices, ``e - e.mean(axis=0)``,
``da.concatenate([x, y])`` and ``e * y``.  Each expression is either refused up front
(InputError; the output absent or not marked complete) or equals ``expr.compute()``:

* integer and bool results bit for bit with numpy's product of the computed operands in
  64 bits (outofcore's exact product; dask's integer product wraps block by block), or
  with dask's values where dask stored it;
* float and complex results in dask's dtype, NaN and Inf where dask has them wherever no
  finite part of the sum can overflow, and values within ``8 (k + 2) eps`` of the
  magnitudes of the terms (the stored values' sizes carried through the steps).
"""

from __future__ import annotations

import math
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import dask.array as da
import numpy as np
import zarr
from hypothesis import assume, event, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import outofcore
from outofcore.errors import InputError

DTYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
]  # fmt: skip
#: Scalars a step takes: Python ints and floats, signed zero, NaN, Inf, large and small.
SCALARS = st.one_of(
    st.integers(-5, 5),
    st.sampled_from([2, 0.5, -0.0, 3.25, -1.5, 1e30, 1e-30, math.nan, math.inf]),
)


@dataclass
class Operand:
    """A dask expression and the magnitudes of its values (float64, for the tolerance)."""

    expr: da.Array
    magnitude: np.ndarray


def _values(dtype: str) -> st.SearchStrategy:
    """Mostly small values, and the dtype's specials (NaN, Inf, -0.0, its extremes)."""
    kind = np.dtype(dtype).kind
    if kind == "b":
        return st.booleans()
    small = st.integers(-3, 3) if kind in "if" else st.integers(0, 3)
    if kind == "c":
        small = st.builds(complex, st.integers(-3, 3), st.integers(-3, 3))
    return st.one_of(small, small, hnp.from_dtype(np.dtype(dtype)))


@st.composite
def stored(draw: st.DrawFn, shape: tuple[int, int]) -> tuple[np.ndarray, tuple[int, int]]:
    """Values of a generated dtype and ragged chunks."""
    dtype = draw(st.sampled_from(DTYPES))
    data = draw(hnp.arrays(np.dtype(dtype), shape, elements=_values(dtype)))
    chunks = (draw(st.integers(1, shape[0])), draw(st.integers(1, shape[1])))
    return data, chunks


def _magnitude(values: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.abs(values.astype(np.complex128)).astype(np.float64)


def _step(draw: st.DrawFn, operand: Operand, y: Operand) -> Operand:
    """One generated step on ``operand``."""
    e, m = operand.expr, operand.magnitude
    kind = draw(st.sampled_from(["scalar", "scalar", "astype", "T", "slice", "centre", "y"]))
    with np.errstate(all="ignore"):
        if kind == "scalar":
            op, value = draw(st.sampled_from("+-*/")), draw(SCALARS)
            reflected = draw(st.booleans())
            size = abs(complex(value))
            expr = {
                "+": lambda a, b: a + b,
                "-": lambda a, b: a - b,
                "*": lambda a, b: a * b,
                "/": lambda a, b: a / b,
            }[op]
            result = expr(value, e) if reflected else expr(e, value)
            if op in "+-":
                return Operand(result, m + size)
            if op == "*":
                return Operand(result, m * size)
            return Operand(result, (size / m) if reflected else (m / size))
        if kind == "astype":
            dtype = draw(st.sampled_from(DTYPES))
            return Operand(e.astype(dtype), np.maximum(m, 1.0))  # a truncation moves by < 1
        if kind == "T":
            return Operand(e.T, m.T)
        if kind == "slice":
            r0 = draw(st.integers(0, e.shape[0] - 1))
            r1 = draw(st.integers(r0 + 1, e.shape[0]))
            c0 = draw(st.integers(0, e.shape[1] - 1))
            c1 = draw(st.integers(c0 + 1, e.shape[1]))
            return Operand(e[r0:r1, c0:c1], m[r0:r1, c0:c1])
        if kind == "centre":
            return Operand(e - e.mean(axis=0), m + np.max(m, axis=0, initial=0.0))
        if e.shape == y.expr.shape:
            return Operand(e * y.expr, m * y.magnitude)
        if e.shape == y.expr.shape[::-1]:
            return Operand(e * y.expr.T, m * y.magnitude.T)
        return operand


@st.composite
def expressions(draw: st.DrawFn, folder: Path) -> tuple[da.Array, Operand, Operand, str]:
    """A product of two generated operands, written as x.zarr and y.zarr in ``folder``."""
    shape = (draw(st.integers(1, 6)), draw(st.integers(1, 5)))
    leaves = {}
    for name in ("x", "y"):
        data, chunks = draw(stored(shape))
        array = zarr.create_array(str(folder / f"{name}.zarr"), data=data, chunks=chunks)
        leaves[name] = Operand(da.from_zarr(array), _magnitude(data))
    x, y = leaves["x"], leaves["y"]
    if draw(st.booleans()):  # joined along an axis
        axis = draw(st.integers(0, 1))
        x = Operand(
            da.concatenate([x.expr, y.expr], axis=axis),
            np.concatenate([x.magnitude, y.magnitude], axis=axis),
        )
    lhs = x
    for _ in range(draw(st.integers(0, 3))):
        lhs = _step(draw, lhs, y)
    rhs = draw(st.sampled_from(["same", "x", "y"]))
    rhs = {"same": lhs, "x": leaves["x"], "y": y}[rhs]
    for _ in range(draw(st.integers(0, 2))):
        rhs = _step(draw, rhs, y)
    forms = [
        form
        for form, fits in (
            ("lhs.T @ rhs", lhs.expr.shape[0] == rhs.expr.shape[0]),
            ("lhs @ rhs", lhs.expr.shape[1] == rhs.expr.shape[0]),
            ("lhs @ rhs.T", lhs.expr.shape[1] == rhs.expr.shape[1]),
        )
        if fits
    ]
    assume(forms)
    form = draw(st.sampled_from(forms))
    a = Operand(lhs.expr.T, lhs.magnitude.T) if form == "lhs.T @ rhs" else lhs
    b = Operand(rhs.expr.T, rhs.magnitude.T) if form == "lhs @ rhs.T" else rhs
    return a.expr @ b.expr, a, b, form


def _complete(path: Path) -> bool:
    try:
        record = zarr.open_array(str(path), mode="r").attrs.get("outofcore", {})
    except FileNotFoundError:
        return False
    return bool(record.get("complete"))


def _assert_integers(got: np.ndarray, want: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """Bit for bit: numpy's product of the operands in 64 bits; of two bool operands
    numpy's own (whether any of the ands is true: dask, which types it int64, adds up
    its blocks' instead)."""
    if a.dtype.kind == b.dtype.kind == "b":
        np.testing.assert_array_equal(got.astype(bool), np.matmul(a, b))
        return
    wide = np.uint64 if np.result_type(a, b).kind == "u" else np.int64
    exact = np.matmul(a.astype(wide), b.astype(wide))
    np.testing.assert_array_equal(got.astype(wide), exact)


def _assert_inexact(got: np.ndarray, want: np.ndarray, a: Operand, b: Operand) -> None:
    """NaN and Inf as dask's, values within the accumulation's bound of the terms."""
    av, bv = a.expr.compute(scheduler="sync"), b.expr.compute(scheduler="sync")
    info = np.finfo(want.dtype)
    k = av.shape[1]
    with np.errstate(all="ignore"):
        # A non-finite operand's own terms count 0 (its NaN and Inf are compared below);
        # a bound that overflows where the value does not leaves the element unchecked.
        ma = np.where(np.isfinite(av), np.nan_to_num(a.magnitude, nan=np.inf), 0.0)
        mb = np.where(np.isfinite(bv), np.nan_to_num(b.magnitude, nan=np.inf), 0.0)
        terms = ma @ mb
        finite_a = np.isfinite(av).all(axis=1)[:, None]
        finite_b = np.isfinite(bv).all(axis=0)[None, :]
    checked = np.isfinite(terms) & (terms <= float(info.max) / 8)
    tame = checked & finite_a & finite_b
    assert np.isfinite(got[tame]).all() and np.isfinite(want[tame]).all()
    bound = 8 * (k + 2) * float(info.eps) * terms + float(info.tiny)
    assert (np.abs(got - want)[tame] <= bound[tame]).all(), (got, want)
    wild = checked & ~(finite_a & finite_b)  # a non-finite operand: its NaN and Inf
    np.testing.assert_array_equal(~np.isfinite(got[wild]), ~np.isfinite(want[wild]))
    if want.dtype.kind == "f":
        np.testing.assert_array_equal(np.isnan(got[wild]), np.isnan(want[wild]))
        np.testing.assert_array_equal(np.isinf(got[wild]), np.isinf(want[wild]))


@given(data=st.data())
def test_to_zarr_equals_dasks_compute_or_refuses(data):
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folder = Path(folder)
        try:
            with np.errstate(all="ignore"):
                expr, a, b, form = data.draw(expressions(folder))
                want = expr.compute(scheduler="sync")
        except (OverflowError, TypeError, ValueError):  # numpy and dask refuse it too
            assume(False)
        path = folder / "out.zarr"
        # The output's chunks asked, for a matrix or a stack (both ways of storing take it).
        pair = st.tuples(st.integers(1, 40), st.integers(1, 40))
        chunks = data.draw(st.none() | pair) if want.ndim >= 2 else None
        try:
            out = outofcore.to_zarr(expr, str(path), client="sync", progress=False, chunks=chunks)
        except InputError:
            event("refused")
            assert not _complete(path), form
            return
        got = out[...]
        record = out.attrs.get("outofcore", {})
        assert got.shape == want.shape
        if chunks is not None:
            event("chunks asked")
            clipped = tuple(max(1, min(c, n)) for c, n in zip(chunks, want.shape[-2:], strict=True))
            assert out.chunks[-2:] == clipped, (out.chunks, chunks, want.shape)
        if record.get("stored_by") == "dask.array.to_zarr":  # dask computed it
            event("stored by dask")
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
            return
        product = record["product"]
        steps = product.get("a_steps", []) + product.get("b_steps", [])
        event(f"outofcore's job, {want.dtype.kind}" + (", steps" if steps else ""))
        if any(step.get("shift") for step in steps):
            event("a centred Gram from panel sums")
        if want.dtype.kind in "biu":
            assert got.dtype.kind in "biu" and product["exact"] is True
            av, bv = a.expr.compute(scheduler="sync"), b.expr.compute(scheduler="sync")
            _assert_integers(got, want, av, bv)
        else:
            assert got.dtype == want.dtype and product["exact"] is False
            _assert_inexact(got, want, a, b)


@given(data=st.data())
def test_a_centred_gram_equals_dasks_or_refuses(data):
    """``xc.T @ xc`` (centred from panel sums where it can be) against dask's compute,
    on rows enough that the mean's sample leaves some out, with NaN, Inf and huge values."""
    dtype = data.draw(st.sampled_from(["float16", "float32", "float64", "complex64"]))
    shape = (data.draw(st.integers(16, 40)), data.draw(st.integers(1, 4)))
    values = data.draw(hnp.arrays(np.dtype(dtype), shape, elements=_values(dtype)))
    chunks = (data.draw(st.integers(1, 8)), data.draw(st.integers(1, shape[1])))
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folder = Path(folder)
        x = da.from_zarr(zarr.create_array(str(folder / "x.zarr"), data=values, chunks=chunks))
        if data.draw(st.booleans()):
            x = x.astype(data.draw(st.sampled_from(["float32", "float64", "complex128"])))
        xc = x - x.mean(axis=0)
        with np.errstate(all="ignore"):
            want = (xc.T @ xc).compute(scheduler="sync")
        path = folder / "out.zarr"
        try:
            out = outofcore.to_zarr(xc.T @ xc, str(path), client="sync", progress=False)
        except InputError:
            event("refused")
            assert not _complete(path)
            return
        steps = out.attrs["outofcore"]["product"]["a_steps"]
        event("from panel sums" if steps[-1].get("shift") else "exact means")
        magnitude = _magnitude(values)
        magnitude = magnitude + np.max(magnitude, axis=0, initial=0.0)  # |x| + |mean|
        operand = Operand(xc, magnitude)
        assert out.dtype == want.dtype
        _assert_inexact(out[...], want, Operand(xc.T, magnitude.T), operand)

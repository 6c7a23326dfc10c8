"""``outofcore.xarray.dot`` against ``xr.dot`` itself, on generated DataArrays (issue 42, item 7).

Two DataArrays are stored in zarr by xarray (dims in either order, sizes from 1,
ragged chunks, 2-D or a stack), with coordinates on the summed dimension that are
equal, absent, permuted, a run of the other's, overlapping in part, gapped, disjoint or
duplicated, numeric or strings; coordinates on the kept dims, non-dimension and scalar
ones; values with NaN, Inf, signed zeros and huge integers in every dtype outofcore
takes; xarray's ``arithmetic_join`` inner, exact or outer.  They are opened as a user
opens them (dask-backed or lazily, possibly transposed) and
``outofcore.xarray.dot(..., client="sync")`` must either raise
InputError with nothing written, or give what ``xr.dot`` gives (out of core, or by
dask.array with a FallbackWarning where the alignment is no read of the stored arrays,
issue 53): the same dims,
coordinates (names, dims, values) and name, NaN where it has NaN, and values equal bit
for bit for integer products (outofcore writes a wider integer: its values are cast to
xr.dot's dtype, which wraps as numpy does), within a k- and dtype-aware bound for
inexact ones.  Wherever ``xr.dot`` raises, outofcore must refuse.

The reference is ``xr.dot`` of the operands loaded into memory (numpy's einsum):
dask's einsum of bool or narrow integer blocks sums the blocks' results in int64, so
its values depend on the chunking.
"""

from __future__ import annotations

import os
import tempfile
import warnings

import numpy as np
import xarray as xr
from hypothesis import event, given
from hypothesis import strategies as st

import outofcore.xarray as ox
from outofcore.errors import FallbackWarning, InputError

DTYPES = [
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
]  # fmt: skip
#: How the summed coordinates of b relate to a's.
RELATIONS = ["equal", "none", "only-a", "permuted", "run", "overlap", "gap", "dup", "disjoint"]


def values_of(draw, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Values of ``dtype``: small ones, the extremes of integers, and for inexact dtypes
    NaN, Inf, signed zeros and a magnitude whose square overflows (float16's kept small:
    outofcore accumulates it in float32, numpy in float16)."""
    size = int(np.prod(shape))
    if dtype.kind == "b":
        return np.array(draw(st.lists(st.booleans(), min_size=size, max_size=size)), bool).reshape(
            shape
        )
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        pool = st.one_of(
            st.integers(max(info.min, -9), 9),
            st.sampled_from([info.min, info.max, info.max // 3]),
        )
        items = draw(st.lists(pool, min_size=size, max_size=size))
        return np.array(items, dtype=dtype).reshape(shape)
    huge = {"e": 8.0, "f": 1e20, "c": 1e20}.get(dtype.char.lower(), 1e200)
    if dtype == np.float16:
        huge = 8.0
    special = [np.nan, np.inf, -np.inf, -0.0, 0.0, 0.5, huge, -huge]
    pool = st.one_of(st.integers(-9, 9).map(float), st.sampled_from(special))
    real = np.array(draw(st.lists(pool, min_size=size, max_size=size)), dtype=np.float64)
    if dtype.kind == "c":
        imag = np.array(draw(st.lists(pool, min_size=size, max_size=size)), dtype=np.float64)
        return (real + 1j * imag).astype(dtype).reshape(shape)
    return real.astype(dtype).reshape(shape)


def summed_coordinates(draw, k: int) -> tuple[object, object, str]:
    """The coordinates of the summed dim for a (k values, or None) and b, and how b's
    relate to a's."""
    relation = draw(st.sampled_from(RELATIONS))
    strings = draw(st.booleans())
    base = draw(st.integers(-3, 3))
    ticks = np.arange(base, base + 3 * k + 6)
    pool = np.array([f"c{t}" for t in ticks]) if strings else ticks * 2
    a = pool[3 : 3 + k]
    if relation == "equal":
        return a, a.copy(), relation
    if relation == "none":
        return None, None, relation
    if relation == "only-a":
        return a, None, relation
    if relation == "permuted":
        return a, a[draw(st.permutations(range(k)))], relation
    if relation == "run":  # a run of a's, or a's a run of b's
        start = draw(st.integers(0, 3 + k - 1))
        stop = draw(st.integers(start + 1, 3 + k + 3))
        return a, pool[start:stop], relation
    if relation == "overlap":
        shift = draw(st.integers(-k, k))
        return a, pool[3 + shift : 3 + shift + k], relation
    if relation == "gap":
        chosen = sorted(draw(st.sets(st.integers(0, len(pool) - 1), min_size=1, max_size=k + 2)))
        return a, pool[chosen], relation
    if relation == "dup":
        extra = draw(st.integers(0, k - 1))
        b = np.concatenate([a[: extra + 1], a[extra:]])
        return a, b if draw(st.booleans()) else b[::-1], relation
    return a, pool[3 + k : 3 + 2 * k], relation  # disjoint


def kept_coordinates(draw, dim: str, size: int) -> dict:
    """Maybe an index on a kept dim (duplicates allowed) and a non-dimension coordinate."""
    coords: dict = {}
    if draw(st.booleans()):
        values = draw(st.lists(st.integers(-5, 5), min_size=size, max_size=size))
        coords[dim] = [f"{dim}{v}" for v in values] if draw(st.booleans()) else values
    if draw(st.booleans()):
        coords[f"{dim}_weight"] = (
            dim,
            np.linspace(-1, 1, size) * draw(st.sampled_from([1, np.nan])),
        )
    return coords


def chunks_of(draw, shape: tuple[int, ...]) -> tuple[int, ...]:
    """One chunk edge per dim, from 1 to the size: ragged where it does not divide."""
    return tuple(draw(st.integers(1, max(1, n))) for n in shape)


@st.composite
def pairs(draw):
    """Everything one example needs: stored values, dims, coordinates and how to open."""
    stack = draw(st.integers(0, 3)) == 0
    m, k, n = (draw(st.integers(1, 5)) for _ in range(3))
    ka, kb, relation = summed_coordinates(draw, k)
    k_b = k if kb is None else len(kb)
    if relation == "none" and draw(st.integers(0, 5)) == 0:
        k_b = draw(st.integers(1, k + 1))  # sizes that differ with no index: xr refuses
    a_dtype, b_dtype = (np.dtype(draw(st.sampled_from(DTYPES))) for _ in range(2))
    a_dims = ("i", "k") if draw(st.booleans()) else ("k", "i")
    b_dims = ("k", "j") if draw(st.booleans()) else ("j", "k")
    sizes_a = {"i": m, "k": k}
    sizes_b = {"k": k_b, "j": n}
    coords_a = {**kept_coordinates(draw, "i", m)}
    coords_b = {**kept_coordinates(draw, "j", n)}
    if ka is not None:
        coords_a["k"] = ka
        if draw(st.booleans()):
            coords_a["k_unit"] = ("k", np.arange(k))  # on the summed dim: dropped
    if kb is not None:
        coords_b["k"] = kb
    if draw(st.booleans()):
        coords_a["scalar"] = 1
        coords_b["scalar"] = draw(st.sampled_from([1, 2]))  # xr.dot drops a conflict
    batch = ()
    if stack:
        runs = draw(st.integers(1, 2))
        batch = ("run",)
        coords_a["run"] = np.arange(runs)
        coords_b["run"] = draw(st.sampled_from([np.arange(runs), np.arange(runs)[::-1]]))
        sizes_a["run"] = sizes_b["run"] = runs
        a_dims, b_dims = ("run", "i", "k"), ("run", "k", "j")  # stacks: matrices in order
    shape_a = tuple(sizes_a[d] for d in a_dims)
    shape_b = tuple(sizes_b[d] for d in b_dims)
    return {
        "a": (values_of(draw, a_dtype, shape_a), a_dims, coords_a, chunks_of(draw, shape_a)),
        "b": (values_of(draw, b_dtype, shape_b), b_dims, coords_b, chunks_of(draw, shape_b)),
        "names": (draw(st.sampled_from(["x", "y"])), draw(st.sampled_from(["x", "y", None]))),
        "chunks": (chunks := draw(st.sampled_from([{}, {}, None]))),
        "transpose": chunks == {} and not batch and draw(st.integers(0, 3)) == 0,
        "name": draw(st.sampled_from([None] * 5 + ["product", "k", "i", "i_weight"])),
        "join": draw(st.sampled_from(["inner", "inner", "inner", "inner", "exact", "outer"])),
        "relation": relation,
        "batch": batch,
    }


def store(folder: str, label: str, spec: tuple, chunks: dict | None) -> xr.DataArray:
    """Store one operand with xarray and open it as a user does."""
    values, dims, coords, chunk = spec
    path = os.path.join(folder, f"{label}.zarr")
    x = xr.DataArray(values, dims=dims, coords=coords, name=label)
    x.to_dataset().to_zarr(path, consolidated=False, encoding={label: {"chunks": chunk}})
    return xr.open_dataarray(path, engine="zarr", consolidated=False, chunks=chunks)


def inexact_bound(a: xr.DataArray, b: xr.DataArray, expected: xr.DataArray) -> np.ndarray:
    """How far an inexact product may be from xr.dot's: a few rounding units of the
    result's precision per term, times the sum of the terms' magnitudes (in float64)."""
    eps = np.finfo(expected.dtype).eps
    k = max(1, a.sizes["k"])
    a, b = (abs(x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)) for x in (a, b))
    with np.errstate(invalid="ignore", over="ignore"):
        magnitudes = xr.dot(a, b, dim="k").transpose(*expected.dims).values
        return 4 * k * eps * magnitudes


def assert_values(got: xr.DataArray, expected: xr.DataArray, bound: np.ndarray) -> None:
    """Integers bit for bit in xr.dot's dtype; inexact: NaN where xr.dot has NaN, the
    same infinities, finite values within ``bound``."""
    values = got.values
    if expected.dtype.kind in "biu":
        with np.errstate(over="ignore", invalid="ignore"):
            np.testing.assert_array_equal(values.astype(expected.dtype), expected.values)
        return
    with np.errstate(over="ignore", invalid="ignore"):
        values = values.astype(expected.dtype)  # float16 products are written as float32
    if expected.dtype.kind == "c":
        # numpy's own complex products differ where a term is infinite ((inf+0j) * 1:
        # einsum gives inf+nanj, np.matmul and BLAS nan+nanj): there, non-finite is asked;
        # elsewhere, both parts as below.
        mine_finite = np.isfinite(values.real) & np.isfinite(values.imag)
        theirs_finite = np.isfinite(expected.values.real) & np.isfinite(expected.values.imag)
        np.testing.assert_array_equal(mine_finite, theirs_finite)
        values = np.where(theirs_finite, values, 0)
        expected = expected.copy(data=np.where(theirs_finite, expected.values, 0))
    parts = (np.real, np.imag) if expected.dtype.kind == "c" else (np.real,)
    for part in parts:
        mine, theirs = part(values), part(expected.values)
        np.testing.assert_array_equal(np.isnan(mine), np.isnan(theirs))
        infinite = np.isinf(theirs)
        np.testing.assert_array_equal(mine[infinite], theirs[infinite])
        finite = np.isfinite(theirs) & np.isfinite(bound)
        with np.errstate(invalid="ignore"):
            err = np.abs(mine[finite].astype(np.float64) - theirs[finite].astype(np.float64))
        assert (err <= bound[finite]).all(), (err, bound[finite])


def assert_as_xr_dot(got: xr.DataArray, expected: xr.DataArray, bound: np.ndarray) -> None:
    """Dims, coordinates (names, dims, values), name and values as xr.dot gives them."""
    assert got.dims == expected.dims
    assert got.name == expected.name
    assert sorted(got.coords) == sorted(expected.coords)
    for key, coordinate in expected.coords.items():
        assert got.coords[key].dims == coordinate.dims
        np.testing.assert_array_equal(got.coords[key].values, coordinate.values)
    assert_values(got, expected, bound)


@given(case=pairs())
def test_dot_is_xr_dot_or_refused_before_anything_is_written(tmp_path, case):
    folder = tempfile.mkdtemp(dir=tmp_path)
    with (
        warnings.catch_warnings(record=True) as caught,
        xr.set_options(arithmetic_join=case["join"]),
    ):
        warnings.simplefilter("always")  # zarr's unstable string dtype; numpy's overflows
        a = store(folder, "a", case["a"], case["chunks"])
        b = store(folder, "b", case["b"], case["chunks"])
        a.name, b.name = case["names"]
        b = b.T if case["transpose"] else b
        try:
            expected = xr.dot(a.compute(), b.compute(), dim="k")
        except ValueError as exc:  # xr.dot refuses: so must outofcore
            expected = exc
        out = os.path.join(folder, "c.zarr")
        try:
            got = ox.dot(a, b, dim="k", out=out, name=case["name"], client="sync", progress=False)
        except InputError as exc:
            assert not os.path.exists(out)  # refused before anything was written
            event(f"refused ({'as xr.dot' if isinstance(expected, Exception) else 'by outofcore'})")
            event(f"refusal: {str(exc)[:50]}")
            return
        by_dask = any(issubclass(w.category, FallbackWarning) for w in caught)
        event(f"computed ({case['relation']}{', by dask' if by_dask else ''})")
        assert not isinstance(expected, Exception), f"xr.dot refused it: {expected}"
        if case["name"] is not None:
            expected = expected.rename(case["name"])
        bound = (
            inexact_bound(a.compute(), b.compute(), expected)
            if expected.dtype.kind in "fc"
            else None
        )
        assert_as_xr_dot(got.load(), expected, bound)

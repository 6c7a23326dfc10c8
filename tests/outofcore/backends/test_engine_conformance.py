"""The engine conformance suite: one contract, every tile engine (issue 51, item 4).

zarr runs one suite (``zarr.testing.StoreTests``) over every store; here :data:`ENGINES` lists
every engine once, and each test runs on each of them, driven by what the engine declares
in its ``capabilities`` (:class:`outofcore.backends.protocol.EngineCapabilities`): a
capability declared must work, and a step of one not declared raises BackendError.

The contract (the tile loop's, ``outofcore/compute/tile.py``):

- the protocol: every member of :class:`~outofcore.backends.protocol.TileEngine`, and
  declared capabilities;
- products against a float64 (complex128) reference within a rounding bound of the dtype
  and the depth ``k``, every compute dtype, ragged shapes, one panel and several, empty
  panels and tiles, ``k = 0`` (the tile is zero), panels that are views (transposed,
  sliced, strided), panels decoded into the same host buffers (scribbled over once
  ``accumulate`` returns), random tiles (hypothesis);
- ``start_tile`` resets; steps out of order raise RuntimeError; panels that do not fit
  the tile raise InputError naming the shapes (or the dtypes);
- Gram tiles (``accumulate_gram``), exact integer products through limbs, row slabs
  (``accumulate_rows``) and ``timings()``: each as the capabilities say;
- host buffers reused across tiles of different shapes and dtypes; ``kept_bytes`` and
  ``release``; ``configure``.

The checks are functions (``check_*``) taking an engine and raising AssertionError, so
that planted bad engines (the last tests) show the suite can fail.  On numba's CUDA
simulator (one Python thread per CUDA thread) every case stays tiny: 8x8 blocks and tiles
of at most 24 (docs: design.md, "Checking GPU code without a GPU").
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outofcore.backends.cuda.probe import numba_cuda_installed
from outofcore.backends.protocol import EngineCapabilities, TileEngine
from outofcore.errors import BackendError, InputError
from outofcore.operands.dtypes import COMPUTE_DTYPES, Limbs, limb_count
from tests.helpers import engine_protocol_gaps


# -- the engines ----------------------------------------------------------------------------
def cpu_engine() -> TileEngine:
    """BLAS on the host."""
    from outofcore.backends.cpu import CpuEngine  # noqa: PLC0415

    return CpuEngine()


def cuda_simulator_engine() -> TileEngine:
    """Our numba kernel: on numba's CUDA simulator (tests/conftest.py turns it on), or on the
    chip when ``NUMBA_ENABLE_CUDASIM=0`` on a GPU node; tiny blocks either way."""
    import outofcore.backends.cuda as ooc_cuda  # noqa: PLC0415
    from outofcore.backends.cuda.kernels import TileParams  # noqa: PLC0415

    if not ooc_cuda.is_available():
        pytest.skip("NUMBA_ENABLE_CUDASIM=0 and no GPU is visible to numba.cuda")
    return ooc_cuda.make_engine("cuda", params=TileParams(bm=8, bn=8, bk=4, tm=2, tn=2))


def cupy_engine() -> TileEngine:
    """cuBLAS through CuPy (a GPU node with CuPy installed)."""
    import outofcore.backends.cuda as ooc_cuda  # noqa: PLC0415

    return ooc_cuda.make_engine("cupy")


def timed_device_engine() -> TileEngine:
    """The timed device (issue 51, item 2): the device engine over real waits of modelled
    time, the CUDA backend's figures by default (microseconds for tiles this small)."""
    try:
        from outofcore.backends.timed import TimedEngine  # noqa: PLC0415
    except ModuleNotFoundError as missing:
        if missing.name != "outofcore.backends.timed":
            raise
        pytest.skip("the timed device engine is not written yet (issue 51, item 2)")
    return TimedEngine()


def _cupy_missing() -> bool:
    return importlib.util.find_spec("cupy") is None


#: Every engine the suite runs, once.  A new engine is one line here.
ENGINES = [
    pytest.param(cpu_engine, id="cpu"),
    pytest.param(
        cuda_simulator_engine,
        id="cuda-simulator",
        marks=pytest.mark.skipif(
            not numba_cuda_installed(), reason="numba-cuda is not installed here"
        ),
    ),
    pytest.param(
        cupy_engine,
        id="cupy",
        marks=pytest.mark.skipif(_cupy_missing(), reason="CuPy is not installed here"),
    ),
    pytest.param(timed_device_engine, id="timed-device"),
]

#: Hypothesis examples per engine where the profile's are too many (the simulator).
FEW_EXAMPLES = {"cuda-simulator": 4}


@pytest.fixture(params=ENGINES)
def engine(request) -> TileEngine:
    made = request.param()
    yield made
    made.release()


def capabilities(engine: TileEngine) -> EngineCapabilities:
    declared = getattr(engine, "capabilities", None)
    assert isinstance(declared, EngineCapabilities), (
        f"{type(engine).__name__} declares no capabilities (an EngineCapabilities), "
        f"it has {declared!r}"
    )
    return declared


# -- values, references and bounds ----------------------------------------------------------
DTYPES = tuple(str(dtype) for dtype in COMPUTE_DTYPES)


def random_panel(rng: np.random.Generator, shape: tuple[int, int], dtype) -> np.ndarray:
    """Normal values with a nonzero mean (errors do not cancel by luck); complex parts both."""
    values = rng.standard_normal(shape) + 0.25
    if np.dtype(dtype).kind == "c":
        values = values + 1j * (rng.standard_normal(shape) - 0.25)
    return values.astype(dtype)


def _wide(dtype) -> type:
    return np.complex128 if np.dtype(dtype).kind == "c" else np.float64


def reference(pairs: Sequence[tuple[np.ndarray, np.ndarray]], shape, dtype):
    """``sum(a @ b)`` in float64 (complex128), and ``sum(|a| @ |b|)``, its rounding's scale."""
    wide = _wide(dtype)
    ref, magnitude = np.zeros(shape, wide), np.zeros(shape)
    for a, b in pairs:
        ref += a.astype(wide) @ b.astype(wide)
        magnitude += np.abs(a.astype(wide)) @ np.abs(b.astype(wide))
    return ref, magnitude


def bound(magnitude: np.ndarray, dtype, k: int) -> np.ndarray:
    """The worst-case rounding of a depth-``k`` dot product in ``dtype``, elementwise.

    ``2 (k + 1) u |a| |b|`` (u the unit roundoff); twice that for complex, whose products
    round each of four real products and two sums.  Zero for ``k = 0``: the tile is zero.
    """
    unit = np.finfo(np.dtype(dtype)).eps / 2
    factor = 4 if np.dtype(dtype).kind == "c" else 2
    return factor * (k + 1) * unit * magnitude


def assert_close(got: np.ndarray, ref: np.ndarray, magnitude: np.ndarray, dtype, k: int, what=""):
    error = np.abs(got.astype(ref.dtype) - ref)
    excess = error - bound(magnitude, dtype, k)
    if excess.size and not (excess <= 0).all():
        worst = tuple(int(i) for i in np.unravel_index(np.argmax(excess), excess.shape))
        raise AssertionError(
            f"{what}{dtype} k={k}: {int((excess > 0).sum())} of {excess.size} elements beyond "
            f"the rounding bound, worst at {worst}: got {got[worst].item()}, "
            f"want {ref[worst].item()}"
        )


def assert_tile(tile: np.ndarray, pairs, shape, dtype) -> None:
    """``tile`` is the finished product of ``pairs``: shape, dtype, C order and values."""
    dtype = np.dtype(dtype)
    assert isinstance(tile, np.ndarray), type(tile)
    assert tile.shape == tuple(shape), (tile.shape, shape)
    assert tile.dtype == dtype, (tile.dtype, dtype)
    assert tile.flags.c_contiguous, "finish_tile must return a C-ordered array"
    ref, magnitude = reference(pairs, shape, dtype)
    assert_close(tile, ref, magnitude, dtype, sum(a.shape[1] for a, _ in pairs))


# -- driving a tile as a task does ----------------------------------------------------------
def run_tile(engine, shape, widths, dtype, *, seed, buffers=None):
    """Multiply one tile panel by panel as a tile task does; return ``(tile copy, pairs)``.

    Each panel is decoded into the same flat host buffers (``engine.host_buffer``, or
    ``buffers`` kept from an earlier tile), which are scribbled over (NaN) once
    ``accumulate`` returns: the engine may not need them any more.
    """
    m, n = shape
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    deepest = max(widths, default=0)
    if buffers is None:
        buffers = (
            engine.host_buffer(max(1, m * deepest), dtype),
            engine.host_buffer(max(1, deepest * n), dtype),
        )
    a_buffer, b_buffer = buffers
    engine.start_tile(tuple(shape), dtype)
    pairs = []
    for width in widths:
        a = a_buffer[: m * width].reshape(m, width)
        b = b_buffer[: width * n].reshape(width, n)
        a[...] = random_panel(rng, a.shape, dtype)
        b[...] = random_panel(rng, b.shape, dtype)
        pairs.append((a.copy(), b.copy()))
        engine.accumulate(a, b)
        a_buffer[...] = np.nan
        b_buffer[...] = np.nan
    tile = engine.finish_tile()
    assert_tile(tile, pairs, shape, dtype)
    return tile.copy(), pairs


def check_product(engine, shape, widths, dtype, *, seed=0, buffers=None) -> None:
    run_tile(engine, shape, widths, dtype, seed=seed, buffers=buffers)


# -- the protocol ---------------------------------------------------------------------------
def test_the_engine_has_the_whole_protocol_and_declares_its_capabilities(engine):
    assert isinstance(engine, TileEngine)
    assert engine_protocol_gaps(engine) == set()
    assert isinstance(engine.name, str) and engine.name
    capabilities(engine)


def test_the_registry_says_what_the_engine_declares(engine):
    """The plan reads a backend's capabilities from the registry, without making an engine:
    they are the engine's own."""
    from outofcore.backends import registry  # noqa: PLC0415

    if engine.name not in registry.backend_names():
        pytest.skip(f"{engine.name!r} is not a registered backend")
    assert registry.get(engine.name).capabilities == capabilities(engine)


# -- products -------------------------------------------------------------------------------
PRODUCT_CASES = [
    *(pytest.param(dtype, (5, 7), [3], id=f"{dtype}-one-panel") for dtype in DTYPES),
    *(pytest.param(dtype, (6, 3), [2, 5, 1], id=f"{dtype}-three-panels") for dtype in DTYPES),
    pytest.param("float32", (11, 9), [4, 3], id="float32-ragged-blocks"),
    pytest.param("complex128", (9, 13), [6], id="complex128-ragged-blocks"),
    pytest.param("float64", (1, 13), [5, 2], id="float64-one-row"),
    pytest.param("complex64", (13, 1), [2, 5], id="complex64-one-column"),
    pytest.param("float64", (4, 5), [0, 3, 0], id="float64-empty-panels"),
    pytest.param("float32", (0, 3), [2], id="float32-no-rows"),
    pytest.param("complex128", (4, 0), [2], id="complex128-no-columns"),
]


@pytest.mark.parametrize(("dtype", "shape", "widths"), PRODUCT_CASES)
def test_products_match_a_float64_reference(engine, dtype, shape, widths):
    check_product(engine, shape, widths, dtype, seed=sum(shape) + len(widths))


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_tile_with_no_panels_is_zero_even_after_one_with_panels(engine, dtype):
    """``k = 0``: nothing to accumulate, the tile is zero (not what the last one left)."""
    for seed, widths in enumerate([[], [3], [], [0]]):
        check_product(engine, (5, 4), widths, dtype, seed=seed)


def test_start_tile_resets_the_accumulator(engine):
    """Two tiles of one shape in a row: the second is its own product, not added to the
    first (an engine reusing its accumulator must overwrite it), and so is a third after a
    tile left unfinished."""
    check_product(engine, (6, 5), [4, 2], "float64", seed=1)
    check_product(engine, (6, 5), [3], "float64", seed=2)
    engine.start_tile((6, 5), np.dtype("float64"))
    engine.accumulate(np.ones((6, 2)), np.ones((2, 5)))  # abandoned: a task that failed
    check_product(engine, (6, 5), [1, 2], "float64", seed=3)


VIEWS = {
    "transposed": lambda x: np.ascontiguousarray(x.T).T,  # a stored X read as X.T
    "sliced": lambda x: np.pad(x, ((0, 0), (1, 2)))[:, 1:-2],  # a panel narrower than its rows
    "strided": lambda x: np.repeat(np.repeat(x, 2, axis=0), 2, axis=1)[::2, ::2],
    "fortran": np.asfortranarray,
}


@pytest.mark.parametrize(("a_view", "b_view"), [("transposed", "sliced"), ("strided", "fortran")])
def test_panels_may_be_views_of_any_layout(engine, a_view, b_view):
    """A transposed operand (``--transpose-a``, a Gram tile's right panel), a slice of a wider
    array, a view strided both ways: the engine reads what the view holds."""
    rng = np.random.default_rng(7)
    pairs = [
        (random_panel(rng, (9, width), "float32"), random_panel(rng, (width, 7), "float32"))
        for width in (5, 3)
    ]
    engine.start_tile((9, 7), np.dtype("float32"))
    for a, b in pairs:
        a_panel, b_panel = VIEWS[a_view](a), VIEWS[b_view](b)
        np.testing.assert_array_equal(a_panel, a)
        np.testing.assert_array_equal(b_panel, b)
        engine.accumulate(a_panel, b_panel)
    assert_tile(engine.finish_tile(), pairs, (9, 7), "float32")


def test_random_tiles_match_the_reference(engine, request):
    """Random shapes, depths and dtypes through one engine in a row (its buffers reused)."""
    examples = FEW_EXAMPLES.get(request.node.callspec.id, settings.default.max_examples)

    @settings(max_examples=examples, deadline=None)
    @given(
        shape=st.tuples(st.integers(0, 10), st.integers(0, 10)),
        widths=st.lists(st.integers(0, 6), max_size=3),
        dtype=st.sampled_from(DTYPES),
        seed=st.integers(0, 2**32 - 1),
    )
    def check(shape, widths, dtype, seed):
        check_product(engine, shape, widths, dtype, seed=seed)

    check()


# -- steps out of order and panels that do not fit ------------------------------------------
def check_steps_out_of_order_raise(engine) -> None:
    a, b = np.ones((2, 3)), np.ones((3, 2))
    with pytest.raises(RuntimeError, match="start_tile"):
        engine.finish_tile()
    with pytest.raises(RuntimeError, match="start_tile"):
        engine.accumulate(a, b)
    engine.start_tile((2, 2), np.dtype("float64"))
    engine.accumulate(a, b)
    np.testing.assert_array_equal(engine.finish_tile(), 3.0)
    with pytest.raises(RuntimeError, match="start_tile"):  # the tile is finished
        engine.accumulate(a, b)
    with pytest.raises(RuntimeError, match="start_tile"):
        engine.finish_tile()


def test_steps_out_of_order_raise(engine):
    check_steps_out_of_order_raise(engine)


def _names_shape(message: str, shape: tuple[int, ...]) -> bool:
    """Whether ``message`` spells ``shape`` as ``(4, 3)`` or ``4x3``."""
    spelled = [re.escape(str(tuple(shape)))]
    if len(shape) == 2:
        spelled.append(rf"\b{shape[0]} ?x ?{shape[1]}\b")
    return any(re.search(pattern, message) for pattern in spelled)


def _in_place(shapes, dtype="float64") -> list[np.ndarray]:
    """Arrays of ``shapes`` at the start of buffers much larger than they are: an engine that
    does not check the shapes and multiplies what it is told reads only memory it owns."""
    out = []
    for shape in shapes:
        buffer = np.ones(4096, dtype)
        out.append(buffer[: int(np.prod(shape))].reshape(shape))
    return out


BAD_PANELS = [
    pytest.param((4, 3), (3, 5), id="b-too-narrow"),
    pytest.param((4, 3), (3, 7), id="b-too-wide"),
    pytest.param((4, 3), (2, 6), id="inner-sizes-differ"),
    pytest.param((3, 3), (3, 6), id="a-too-short"),
    pytest.param((5, 3), (3, 6), id="a-too-tall"),
]


@pytest.mark.parametrize(("a_shape", "b_shape"), BAD_PANELS)
def test_panels_that_do_not_fit_the_tile_raise_naming_the_shapes(engine, a_shape, b_shape):
    check_bad_panel_shapes(engine, a_shape, b_shape)


def check_bad_panel_shapes(engine, a_shape, b_shape, tile=(4, 6)) -> None:
    a, b = _in_place([a_shape, b_shape])
    engine.start_tile(tile, np.dtype("float64"))
    with pytest.raises(InputError) as raised:
        engine.accumulate(a, b)
    message = str(raised.value)
    named = [
        s for s in (a_shape, b_shape, tile, (a_shape[0], b_shape[1])) if _names_shape(message, s)
    ]
    assert len(named) >= 2, f"the message names fewer than two of the shapes: {message!r}"


def test_panels_of_another_dtype_or_not_2d_raise(engine):
    engine.start_tile((4, 6), np.dtype("float64"))
    with pytest.raises(InputError) as raised:
        engine.accumulate(np.ones((4, 3), np.float32), np.ones((3, 6)))
    assert "float32" in str(raised.value) and "float64" in str(raised.value), raised.value
    with pytest.raises(InputError, match="2-D") as raised:
        engine.accumulate(np.ones(4), np.ones((3, 6)))
    assert "(4,)" in str(raised.value), raised.value
    engine.accumulate(np.ones((4, 2)), np.ones((2, 6)))  # the tile is still usable
    np.testing.assert_array_equal(engine.finish_tile(), 2.0)


# -- Gram tiles -----------------------------------------------------------------------------
def check_gram(engine, n, widths, dtype, *, seed=0, transposed=False) -> None:
    """``accumulate_gram`` panel by panel: the upper triangle of the tile is ``sum(a a^T)``.

    ``transposed``: each panel is the transposed view of a stored ``X`` (a Gram job's ``A``
    is ``X.T``), as a Gram task reads it.
    """
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    engine.start_tile((n, n), dtype)
    pairs = []
    for width in widths:
        panel = random_panel(rng, (width, n) if transposed else (n, width), dtype)
        panel = panel.T if transposed else panel
        pairs.append((panel.copy(), panel.T.copy()))
        engine.accumulate_gram(panel)
    tile = engine.finish_tile()
    assert tile.shape == (n, n) and tile.dtype == dtype and tile.flags.c_contiguous
    ref, magnitude = reference(pairs, (n, n), dtype)
    upper = np.triu_indices(n)
    assert_close(tile[upper], ref[upper], magnitude[upper], dtype, sum(widths), "gram upper ")


def check_gram_capability(engine) -> None:
    if capabilities(engine).gram:
        for index, dtype in enumerate(DTYPES):
            check_gram(engine, 7, [3, 4], dtype, seed=index, transposed=bool(index % 2))
        check_gram(engine, 10, [5], "float64", seed=9, transposed=True)  # ragged blocks
        check_gram(engine, 4, [], "float32")  # no panel: zero
        check_bad_gram_panel(engine)
        return
    engine.start_tile((4, 4), np.dtype("float32"))
    with pytest.raises(BackendError, match="gram"):
        engine.accumulate_gram(np.ones((4, 2), np.float32))


def check_bad_gram_panel(engine) -> None:
    """A Gram panel with other rows than the (square) tile raises InputError naming them."""
    (panel,) = _in_place([(3, 2)])
    engine.start_tile((4, 4), np.dtype("float64"))
    with pytest.raises(InputError) as raised:
        engine.accumulate_gram(panel)
    message = str(raised.value)
    assert _names_shape(message, (4, 4)) or _names_shape(message, (3, 2)), message


def test_gram_tiles_as_the_capabilities_say(engine):
    check_gram_capability(engine)


# -- exact integer products through limbs ---------------------------------------------------
def _huge_integers(rng, shape, dtype) -> np.ndarray:
    """Values over the whole range of ``dtype``, its extremes among them: products wrap."""
    info = np.iinfo(dtype)
    values = rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    values.flat[:: max(1, values.size // 3)] = info.max
    values.flat[1 :: max(1, values.size // 3)] = info.min
    return values


LIMB_CASES = [("int64", "int64"), ("uint64", "uint64"), ("int32", "int64"), ("uint32", "int64")]
LIMB_CASES.append(("int8", "int64"))


def check_limbs(engine, a_dtype, b_dtype, shape=(5, 7), widths=(3, 4), *, seed=0) -> None:
    """Integer inputs too wide for float64 through limbs: bit for bit numpy's wrapping
    ``a @ b`` in 64 bits, summed over the panels.  The panels come as the task gives them,
    in the tile's 64-bit dtype; the limbs say how many 16-bit limbs each input's dtype
    needs and whether it is signed."""
    a_dtype, b_dtype = np.dtype(a_dtype), np.dtype(b_dtype)
    wide = np.result_type(a_dtype, b_dtype)
    limbs = Limbs(
        counts=(limb_count(a_dtype), limb_count(b_dtype)),
        signed=(a_dtype.kind == "i", b_dtype.kind == "i"),
    )
    rng = np.random.default_rng(seed)
    m, n = shape
    engine.start_tile(shape, wide, limbs)
    expected = np.zeros(shape, wide)
    for width in widths:
        a = _huge_integers(rng, (m, width), a_dtype).astype(wide)
        b = _huge_integers(rng, (width, n), b_dtype).astype(wide)
        engine.accumulate(a, b)
        expected += a @ b  # numpy wraps modulo 2**64
    tile = engine.finish_tile()
    assert tile.dtype == wide and tile.shape == shape, (tile.dtype, tile.shape)
    mismatch = np.argwhere(tile != expected)
    assert mismatch.size == 0, f"{len(mismatch)} elements differ, first at {mismatch[:1]}"


def check_limbs_capability(engine) -> None:
    if capabilities(engine).limbs:
        for index, (a_dtype, b_dtype) in enumerate(LIMB_CASES):
            check_limbs(engine, a_dtype, b_dtype, seed=index)
        return
    with pytest.raises(BackendError):
        engine.start_tile((2, 2), np.dtype("int64"), Limbs(counts=(4, 4), signed=(True, True)))


def test_exact_integer_products_through_limbs_as_the_capabilities_say(engine):
    check_limbs_capability(engine)


def test_an_exact_gram_tile_through_limbs(engine):
    """A Gram tile of wide integers: its upper triangle exact (where both are offered)."""
    if not (capabilities(engine).gram and capabilities(engine).limbs):
        pytest.skip("the engine does not offer both gram and limbs")
    rng = np.random.default_rng(4)
    x = _huge_integers(rng, (6, 5), np.dtype("int64"))
    engine.start_tile((6, 6), np.dtype("int64"), Limbs(counts=(4, 4), signed=(True, True)))
    engine.accumulate_gram(x[:, :2])
    engine.accumulate_gram(x[:, 2:])
    upper = np.triu_indices(6)
    np.testing.assert_array_equal(engine.finish_tile()[upper], (x @ x.T)[upper])


# -- row slabs ------------------------------------------------------------------------------
def check_row_blocks(engine, shape, first, last, block, dtype, *, seed=0) -> None:
    """The first panels through ``accumulate``, the last ones block of rows by block: each
    returned block holds its rows of the finished product; the finished tile all of them."""
    rng = np.random.default_rng(seed)
    m, n = shape
    dtype = np.dtype(dtype)
    engine.start_tile(shape, dtype)
    pairs = [(random_panel(rng, (m, w), dtype), random_panel(rng, (w, n), dtype)) for w in first]
    for a, b in pairs:
        engine.accumulate(a, b)
    slab = [(random_panel(rng, (m, w), dtype), random_panel(rng, (w, n), dtype)) for w in last]
    pairs += slab
    ref, magnitude = reference(pairs, shape, dtype)
    k = sum(first) + sum(last)
    for r0 in range(0, m, block):
        r1 = min(m, r0 + block)
        rows = engine.accumulate_rows(r0, [(a[r0:r1], b) for a, b in slab])
        assert rows.shape == (r1 - r0, n), rows.shape
        assert_close(rows, ref[r0:r1], magnitude[r0:r1], dtype, k, f"rows {r0}:{r1} ")
    assert_tile(engine.finish_tile(), pairs, shape, dtype)


def check_row_blocks_capability(engine) -> None:
    if capabilities(engine).row_blocks:
        check_row_blocks(engine, (19, 7), [6], [5], 8, "float64", seed=1)
        check_row_blocks(engine, (9, 5), [], [3, 2], 4, "float32", seed=2)  # only slabs
        check_row_blocks(engine, (6, 6), [2, 2], [1, 3], 6, "complex128", seed=3)
        return
    engine.start_tile((4, 3), np.dtype("float32"))
    with pytest.raises(BackendError, match="accumulate_rows|row_blocks"):
        engine.accumulate_rows(0, [(np.ones((4, 2), np.float32), np.ones((2, 3), np.float32))])


def test_row_slabs_as_the_capabilities_say(engine):
    check_row_blocks_capability(engine)


# -- timings --------------------------------------------------------------------------------
#: The keys ``timings()`` may hold (``TileEngine.timings``); the first two after each tile.
TIMING_KEYS = {"kernel_seconds", "copy_seconds", "first_launch_seconds"}


def check_timings_capability(engine) -> None:
    assert isinstance(engine.timings(), dict)
    check_product(engine, (5, 6), [4, 2], "float32")
    timings = engine.timings()
    assert isinstance(timings, dict)
    if not capabilities(engine).timings:
        assert timings == {}, timings
        return
    assert {"kernel_seconds", "copy_seconds"} <= set(timings) <= TIMING_KEYS, timings
    assert all(isinstance(v, float) and v >= 0 for v in timings.values()), timings
    timings.clear()  # a copy: the engine's own figures are not the caller's to change
    assert set(engine.timings()) >= {"kernel_seconds", "copy_seconds"}


def test_timings_as_the_capabilities_say(engine):
    check_timings_capability(engine)


# -- buffers --------------------------------------------------------------------------------
def test_host_buffers_are_flat_typed_and_reused_across_tiles_of_any_shape(engine):
    """Two pairs of host buffers kept from tile to tile (as the tile loop keeps them), tiles of
    different shapes and dtypes in a row, each decoded into a view of the same memory."""
    for dtype in ("float32", "complex128"):
        buffer = engine.host_buffer(12, np.dtype(dtype))
        assert buffer.shape == (12,) and buffer.dtype == dtype
    a_buffer = engine.host_buffer(9 * 6, np.dtype("float64"))
    b_buffer = engine.host_buffer(6 * 9, np.dtype("float64"))
    for seed, (shape, widths) in enumerate([((7, 5), [3, 3]), ((5, 9), [6]), ((7, 5), [2])]):
        check_product(engine, shape, widths, "float64", seed=seed, buffers=(a_buffer, b_buffer))
    float32 = (a_buffer.view(np.float32), b_buffer.view(np.float32))  # the same memory
    check_product(engine, (9, 3), [5, 4], "float32", seed=5, buffers=float32)


def test_kept_bytes_and_release(engine):
    """``kept_bytes`` counts what the engine keeps between tiles; ``release`` never adds to
    it, may be called twice, and the engine multiplies the next tile right after it."""
    assert isinstance(engine.kept_bytes(), int) and engine.kept_bytes() >= 0
    check_product(engine, (8, 6), [3], "float64")
    kept = engine.kept_bytes()
    assert isinstance(kept, int) and kept >= 0
    engine.release()
    released = engine.kept_bytes()
    assert 0 <= released <= kept
    engine.release()
    assert engine.kept_bytes() == released
    check_product(engine, (8, 6), [2, 1], "float64", seed=1)


def test_configure_takes_a_jobs_settings(engine):
    """``configure`` before the tiles of a job: a device budget and the job's panel depth
    (engines without a device ignore them); the default settings again afterwards."""
    engine.configure(device_memory=1 << 20, panel_depth=4)
    check_product(engine, (7, 6), [2, 4], "float32")
    engine.configure()
    check_product(engine, (7, 6), [4], "float32", seed=1)


def test_two_tiles_in_flight_and_the_write_of_a_tile(engine):
    """``configure(tiles_in_flight=2)``: the worker runs two tasks at once on the engine's
    device, each with its own engine (a device engine takes half the device at most); the
    engine's products stay right, and ``wrote`` (the task wrote a finished tile) returns
    nothing on every engine (the timed device waits its modelled disk there)."""
    engine.configure(panel_depth=4, tiles_in_flight=2)
    check_product(engine, (7, 6), [2, 4], "float32")
    assert engine.wrote(7 * 6 * 4) is None
    engine.configure()
    check_product(engine, (7, 6), [4], "float32", seed=1)


# -- the suite can fail ---------------------------------------------------------------------
#: How a check fails: an assertion, or pytest.raises that saw nothing raised.
FAILS = (AssertionError, pytest.fail.Exception)


def _planted(**overrides: Callable) -> TileEngine:
    """The CPU engine with some methods replaced (declaring every capability it has)."""
    from outofcore.backends.cpu import CpuEngine  # noqa: PLC0415

    return type("PlantedEngine", (CpuEngine,), overrides)()


def _gram_overwriting(self, a_panel):
    """Each Gram panel overwrites the tile instead of adding to it."""
    self._fresh = True
    super(type(self), self).accumulate_gram(a_panel)


def _gram_without_its_last_column(self, a_panel):
    """The upper triangle's last column left out."""
    super(type(self), self).accumulate_gram(a_panel)
    self._c[:, -1] = 0


def _finish_without_zeroing(self):
    """A tile with no panel returns what its memory held."""
    if self._fresh:
        self._c[...] = 1
    self._fresh = False
    return super(type(self), self).finish_tile()


def _start_keeping_the_last_tile(self, shape, dtype, limbs=None):
    """The next tile of the same shape adds to what the last one left."""
    spare = self._spare
    super(type(self), self).start_tile(shape, dtype, limbs)
    if spare is not None and spare.shape == tuple(shape):
        self._c, self._fresh = spare, False


def _accumulate_without_checks(self, a_panel, b_panel):
    """Adds what fits of whatever product it is given, checking nothing."""
    c = self._require_tile()
    if self._fresh:
        c[...] = 0
    c[: a_panel.shape[0], : b_panel.shape[1]] += (a_panel @ b_panel)[: c.shape[0], : c.shape[1]]
    self._fresh = False


@pytest.mark.parametrize(
    ("overrides", "check"),
    [
        pytest.param(
            {"accumulate_gram": _gram_overwriting}, check_gram_capability, id="gram-overwrites"
        ),
        pytest.param(
            {"accumulate_gram": _gram_without_its_last_column},
            check_gram_capability,
            id="gram-upper-triangle-wrong",
        ),
        pytest.param(
            {"finish_tile": _finish_without_zeroing},
            lambda engine: check_product(engine, (5, 4), [], "float64"),
            id="no-panels-not-zero",
        ),
        pytest.param(
            {"start_tile": _start_keeping_the_last_tile},
            lambda engine: [check_product(engine, (6, 5), [2], "float64", seed=s) for s in (1, 2)],
            id="start-tile-does-not-reset",
        ),
        pytest.param(
            {"accumulate": _accumulate_without_checks},
            lambda engine: check_bad_panel_shapes(engine, (4, 3), (3, 5)),
            id="panels-unchecked",
        ),
    ],
)
def test_a_planted_bad_engine_fails_the_suite(overrides, check):
    engine = _planted(**overrides)
    if "accumulate_gram" in overrides:
        assert capabilities(engine).gram  # it declares what it does wrong
    with pytest.raises(FAILS):
        check(engine)


def test_a_planted_engine_whose_capabilities_are_wrong_fails_the_suite():
    """Capabilities that leave out what the engine does fail (a step not declared must
    raise BackendError); so does an engine that declares none."""
    undeclared = EngineCapabilities(row_blocks=True, gram=False, limbs=True)
    with pytest.raises(FAILS):
        check_gram_capability(_planted(capabilities=undeclared))
    with pytest.raises(AssertionError, match="declares no capabilities"):
        capabilities(_planted(capabilities=None))

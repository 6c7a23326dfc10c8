"""The numba CUDA GEMM kernels, run on numba's CUDA simulator (no GPU needed).

The simulator runs one Python thread per CUDA thread, so the cases are tiny
and most use tiny tile parameters; a few run the production parameters of
each dtype.  The simulator lets a kernel slice empty device arrays, which numba
refuses on a GPU: the launch tests record what the kernel receives instead.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numba import cuda

import outofcore.backends.cuda as ooc_cuda
from outofcore.backends.cuda import kernels
from outofcore.backends.cuda.blocks import KERNEL_BLOCKS
from outofcore.backends.cuda.kernels import PRODUCTION, TileParams
from outofcore.backends.cuda.reference import launch_reference
from outofcore.errors import InputError
from outofcore.operands.dtypes import COMPUTE_DTYPES

# tests/conftest.py turns numba's CUDA simulator on unless NUMBA_ENABLE_CUDASIM is set.
pytestmark = pytest.mark.skipif(
    not ooc_cuda.simulator_enabled() and not ooc_cuda.is_available(),
    reason="NUMBA_ENABLE_CUDASIM=0 and no GPU is visible to numba.cuda",
)

TINY = TileParams(bm=8, bn=8, bk=4, tm=2, tn=2)  # 4x4 threads
TALL = TileParams(bm=16, bn=8, bk=2, tm=4, tn=2)  # non-square block, 4x4 threads
#: 4x4 threads, each with the production float32 kernel's 8-element loads of A and B (two
#: wide loads of four) and runs of two columns; four k-tiles a turn, as in production.
WIDE = TileParams(bm=16, bn=16, bk=8, tm=4, tn=4, turn=4)
#: TINY with one k-tile a turn (the buffer read chosen at run time, as for complex128).
ONE_TURN = TileParams(bm=8, bn=8, bk=4, tm=2, tn=2, turn=1)
DTYPES = [np.float32, np.float64]
#: The complex variants too (the simulator is slow: used where the shapes matter most).
ALL_DTYPES = [*DTYPES, np.complex64, np.complex128]


def operands(m: int, n: int, k: int, dtype, seed: int = 0):
    rng = np.random.default_rng(seed + 1000 * m + 100 * n + k)

    def draw(shape):
        values = rng.standard_normal(shape)
        if np.dtype(dtype).kind == "c":
            values = values + 1j * rng.standard_normal(shape)
        return values.astype(dtype)

    return draw((m, k)), draw((k, n)), draw((m, n))


def assert_product(out, a, b, c0, accumulate: bool) -> None:
    """``out`` equals ``c0 + a @ b`` (or ``a @ b``) within a dtype- and k-dependent bound."""
    wide = np.complex128 if np.dtype(a.dtype).kind == "c" else np.float64
    a64, b64 = a.astype(wide), b.astype(wide)
    expected = a64 @ b64 + (c0.astype(wide) if accumulate else 0.0)
    magnitude = np.abs(a64) @ np.abs(b64) + (np.abs(c0) if accumulate else 0.0)
    eps = np.finfo(out.dtype).eps
    bound = 2 * (a.shape[1] + 1) * eps * magnitude + np.finfo(out.dtype).tiny
    err = np.abs(np.asarray(out, dtype=wide) - expected)
    assert out.dtype == a.dtype
    assert np.all(err <= bound), (
        f"max error {err.max():.3g}, bound there {bound.flat[err.argmax()]:.3g}"
    )


SHAPES = [
    (1, 1, 1),
    (7, 13, 5),  # primes, below one block
    (17, 3, 11),  # crosses block rows, ragged k-tiles
    (13, 17, 1),  # k = 1
    (3, 19, 9),  # wide, odd number of k-tiles
    (16, 8, 8),  # exact multiples
]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_tiled_kernel_matches_numpy(m, n, k, dtype):
    a, b, c = operands(m, n, k, dtype)
    c0 = c.copy()
    out = ooc_cuda.gemm(a, b, c, params=TINY)
    assert out is c
    assert_product(c, a, b, c0, accumulate=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("m", "n", "k"), [(1, 1, 1), (19, 5, 7), (2, 23, 3)])
def test_non_square_block_parameters(m, n, k, dtype):
    a, b, c = operands(m, n, k, dtype, seed=1)
    c0 = c.copy()
    ooc_cuda.gemm(a, b, c, params=TALL)
    assert_product(c, a, b, c0, accumulate=True)


@pytest.mark.parametrize(("dtype", "shape"), [(np.float32, (130, 5, 9)), (np.float64, (67, 3, 10))])
def test_production_parameters(dtype, shape):
    """The real tile shape: two block rows, two k-tiles, ragged everywhere."""
    a, b, c = operands(*shape, dtype, seed=2)
    c0 = c.copy()
    ooc_cuda.gemm(a, b, c)  # params=None: PRODUCTION[dtype]
    assert_product(c, a, b, c0, accumulate=True)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize(
    "shape",
    [
        (67, 5, 9),  # two block rows, the second with 3 rows; two k-tiles, the second 1 deep
        (5, 70, 17),  # two block columns, the second with 6 columns; three k-tiles
    ],
)
def test_production_parameters_complex(dtype, shape):
    """The complex kernels' real tile shape (64x64 blocks of 16x16 threads), ragged edges."""
    params = PRODUCTION[np.dtype(dtype)]
    assert (params.bm, params.bn, params.threads) == (64, 64, (16, 16))
    a, b, c = operands(*shape, dtype, seed=3)
    c[...] = np.nan + 1j * np.nan
    ooc_cuda.gemm(a, b, c, accumulate=False)  # params=None: PRODUCTION[dtype]
    assert_product(c, a, b, np.zeros_like(c), accumulate=False)


@pytest.mark.parametrize("dtype", DTYPES)
def test_accumulate_false_overwrites_even_nan(dtype):
    a, b, c = operands(9, 10, 6, dtype)
    c[...] = np.nan
    ooc_cuda.gemm(a, b, c, accumulate=False, params=TINY)
    assert_product(c, a, b, np.zeros_like(c), accumulate=False)


def test_accumulate_adds_twice():
    a, b, c = operands(5, 6, 7, np.float64)
    c0 = c.copy()
    ooc_cuda.gemm(a, b, c, params=TINY)
    ooc_cuda.gemm(a, b, c, params=TINY)
    np.testing.assert_allclose(c, c0 + 2 * (a @ b), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_kernel_matches_numpy_and_tiled(dtype):
    a, b, c = operands(11, 6, 5, dtype)
    c_ref, c_tiled = c.copy(), c.copy()
    d_ref = cuda.to_device(c_ref)
    launch_reference(cuda.to_device(a), cuda.to_device(b), d_ref, True, block=(4, 4))
    d_ref.copy_to_host(c_ref)
    assert_product(c_ref, a, b, c, accumulate=True)
    ooc_cuda.gemm(a, b, c_tiled, params=TINY)
    np.testing.assert_allclose(c_tiled, c_ref, rtol=8 * np.finfo(dtype).eps * 5, atol=1e-6)


def test_device_arrays_stay_on_device():
    a, b, c = operands(6, 5, 4, np.float32)
    d_c = cuda.to_device(c)
    out = ooc_cuda.gemm(cuda.to_device(a), cuda.to_device(b), d_c, params=TINY)
    assert out is d_c
    assert_product(d_c.copy_to_host(), a, b, c, accumulate=True)


def test_mixed_host_and_device_operands():
    a, b, c = operands(6, 5, 4, np.float64)
    c0 = c.copy()
    ooc_cuda.gemm(cuda.to_device(a), b, c, params=TINY)
    assert_product(c, a, b, c0, accumulate=True)


def test_launch_on_a_stream():
    a, b, c = operands(6, 5, 4, np.float32)
    c0 = c.copy()
    stream = cuda.stream()
    ooc_cuda.gemm(a, b, c, stream=stream, params=TINY)
    assert_product(c, a, b, c0, accumulate=True)


def test_tall_matrices_take_several_launches(monkeypatch):
    """A grid taller than CUDA's y limit is cut into row slabs (limit shrunk to 1 here)."""
    monkeypatch.setattr(kernels, "MAX_GRID_Y", 1)
    a, b, c = operands(21, 5, 3, np.float32)
    c0 = c.copy()
    ooc_cuda.gemm(a, b, c, params=TINY)
    assert_product(c, a, b, c0, accumulate=True)


class RecordingKernel:
    """A compiled kernel that records each launch's configuration and arguments, then runs."""

    def __init__(self, kernel, launches: Launches, interior: bool) -> None:
        self.kernel = kernel
        self.launches = launches
        self.interior = interior

    def __getitem__(self, config):
        def run(*args):
            self.launches.append((config, args))
            self.launches.interior.append(self.interior)
            self.kernel[config](*args)

        return run


class Launches(list):
    """``[(config, args), ...]`` of the launches; ``interior``: whether each ran the
    interior kernel."""

    def __init__(self) -> None:
        super().__init__()
        self.interior: list[bool] = []


@pytest.fixture
def launches(monkeypatch) -> list:
    """The launches of the tiled kernel in this test (:class:`Launches`)."""
    recorded = Launches()
    build = kernels.build_gemm_kernel

    def recording(params, dtype, interior=False):
        return RecordingKernel(build(params, dtype, interior), recorded, interior)

    monkeypatch.setattr(kernels, "build_gemm_kernel", recording)
    return recorded


def test_one_slab_launch_gets_the_arrays_as_they_are(launches):
    """Below MAX_GRID_Y block rows ``launch`` passes its arrays unsliced (slices of an
    empty device array fail on a GPU, not on the simulator)."""
    a, b, c = operands(17, 5, 3, np.float32)
    d_a, d_b, d_c = cuda.to_device(a), cuda.to_device(b), cuda.to_device(c)
    kernels.launch(d_a, d_b, d_c, True, params=TINY)
    [(config, args)] = launches
    assert config[0] == (1, 3)  # ceil(5 / 8) block columns, ceil(17 / 8) block rows
    assert args[0] is d_a and args[1] is d_b and args[2] is d_c
    assert_product(d_c.copy_to_host(), a, b, c, accumulate=True)


def test_tall_matrices_take_one_launch_per_slab(monkeypatch, launches):
    monkeypatch.setattr(kernels, "MAX_GRID_Y", 2)  # slabs of 2 block rows (16 rows)
    a, b, c = operands(37, 5, 3, np.float32)
    d_a, d_b, d_c = cuda.to_device(a), cuda.to_device(b), cuda.to_device(c)
    kernels.launch(d_a, d_b, d_c, True, params=TINY)
    assert [cfg[0] for cfg, _ in launches] == [(1, 2), (1, 2), (1, 1)]
    assert [args[0].shape for _, args in launches] == [(16, 3), (16, 3), (5, 3)]
    assert [args[2].shape for _, args in launches] == [(16, 5), (16, 5), (5, 5)]
    assert all(args[1] is d_b for _, args in launches)
    assert_product(d_c.copy_to_host(), a, b, c, accumulate=True)


def test_empty_shapes(launches):
    a, b, c = operands(0, 5, 3, np.float32)
    assert ooc_cuda.gemm(a, b, c, params=TINY) is c
    a, b, c = operands(4, 5, 0, np.float32)
    ooc_cuda.gemm(a, b, c, accumulate=False, params=TINY)
    np.testing.assert_array_equal(c, 0)
    assert launches == []


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_k_zero_launches_nothing(dtype, launches):
    """``a @ b`` with k = 0 is zero: no kernel runs, ``c`` is zeroed or left alone."""
    a, b, c = operands(4, 5, 0, dtype)
    c0 = c.copy()
    assert ooc_cuda.gemm(a, b, c, params=TINY) is c  # host c, accumulate
    np.testing.assert_array_equal(c, c0)
    c[...] = np.nan
    ooc_cuda.gemm(a, b, c, accumulate=False)  # host c, production parameters
    np.testing.assert_array_equal(c, 0)

    d_a, d_b = cuda.to_device(a), cuda.to_device(b)
    d_c = cuda.to_device(c0)
    assert ooc_cuda.gemm(d_a, d_b, d_c, params=TINY) is d_c  # device c, accumulate
    np.testing.assert_array_equal(d_c.copy_to_host(), c0)
    d_c = cuda.to_device(np.full_like(c0, np.nan))
    stream = cuda.stream()
    ooc_cuda.gemm(d_a, d_b, d_c, accumulate=False, stream=stream)
    stream.synchronize()
    np.testing.assert_array_equal(d_c.copy_to_host(), 0)

    d_c = cuda.to_device(c0)  # and launch itself, as the engine calls it
    kernels.launch(d_a, d_b, d_c, True, params=TINY)
    np.testing.assert_array_equal(d_c.copy_to_host(), c0)
    kernels.launch(d_a, d_b, d_c, False)
    np.testing.assert_array_equal(d_c.copy_to_host(), 0)
    assert launches == []


def test_is_available():
    assert ooc_cuda.is_available()  # the simulator, or a GPU when NUMBA_ENABLE_CUDASIM=0


@pytest.mark.parametrize(
    ("a", "b", "c", "message"),
    [
        (
            np.ones((3, 4)),
            np.ones((5, 2)),
            np.ones((3, 2)),
            "inner dimensions differ: a is 3x4 and b is 5x2",
        ),
        (
            np.ones((3, 4)),
            np.ones((4, 2)),
            np.ones((2, 3)),
            r"c has shape \(2, 3\); a @ b needs \(3, 2\)",
        ),
        (np.ones(3), np.ones((3, 2)), np.ones((1, 2)), r"a must be 2-D, got shape \(3,\)"),
        (
            np.ones((3, 4), np.float32),
            np.ones((4, 2)),
            np.ones((3, 2)),
            "a is float32, b is float64 and c is float64",
        ),
        (
            np.ones((3, 4), np.int32),
            np.ones((4, 2), np.int32),
            np.ones((3, 2), np.int32),
            "unsupported dtype int32",
        ),
        (
            np.ones((3, 4), np.float16),
            np.ones((4, 2), np.float16),
            np.ones((3, 2), np.float16),
            "unsupported dtype float16",
        ),
        (
            np.ones((3, 8))[:, ::2],
            np.ones((4, 2)),
            np.ones((3, 2)),
            r"a must be C-contiguous \(strides \(64, 16\)",
        ),
        (
            np.ones((3, 4)),
            np.asfortranarray(np.ones((4, 2))),
            np.ones((3, 2)),
            "b must be C-contiguous",
        ),
        (
            [[1.0]],
            np.ones((1, 1)),
            np.ones((1, 1)),
            "a must be a numpy array or a CUDA device array, not list",
        ),
    ],
)
def test_bad_input_is_a_clear_error(a, b, c, message):
    with pytest.raises(InputError, match=message):
        ooc_cuda.gemm(a, b, c, params=TINY)


def test_non_contiguous_device_array_is_rejected():
    d_a = cuda.to_device(np.ones((3, 8), np.float32))[:, :4]
    with pytest.raises(InputError, match="a must be C-contiguous"):
        ooc_cuda.gemm(d_a, np.ones((4, 2), np.float32), np.ones((3, 2), np.float32), params=TINY)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (TileParams(8, 8, 4, 3, 2), "tm and tn must be even"),
        (TileParams(8, 8, 4, 0, 2), "every parameter must be >= 1"),
        (TileParams(10, 8, 4, 4, 2), "bm must be a multiple of tm"),
        (TileParams(8, 8, 1, 2, 2), "multiples of the thread count"),
        (TileParams(256, 256, 8, 2, 2), "threads per block exceed 1024"),
        (TileParams(8, 8, 4, 2, 2, turn=3), "turn must be 1 or even"),
        (TileParams(8, 8, 4, 2, 2, turn=0), "every parameter must be >= 1"),
    ],
)
def test_bad_tile_parameters(params, message):
    a, b, c = operands(2, 2, 2, np.float32)
    with pytest.raises(InputError, match=message):
        ooc_cuda.gemm(a, b, c, params=params)


def test_production_parameters_are_valid():
    assert set(PRODUCTION) == set(COMPUTE_DTYPES)
    for params in PRODUCTION.values():
        params.check()
        assert params.threads == (16, 16)
    assert PRODUCTION[np.dtype(np.float32)] == TileParams(128, 128, 16, 8, 8, turn=4)
    assert PRODUCTION[np.dtype(np.float64)] == TileParams(64, 64, 16, 4, 4, turn=2)
    assert PRODUCTION[np.dtype(np.complex64)] == TileParams(64, 64, 16, 4, 4, turn=2)
    assert PRODUCTION[np.dtype(np.complex128)] == TileParams(64, 64, 8, 4, 4, turn=1)
    for dtype, params in PRODUCTION.items():  # the device tiling's blocks, as deep or deeper
        bm, bn, bk = KERNEL_BLOCKS[dtype.itemsize]
        assert (params.bm, params.bn) == (bm, bn) and params.bk % bk == 0


def test_compile_options_keep_two_production_blocks_per_sm():
    """Every production kernel is compiled for two 256-thread blocks per SM: 128 registers."""
    for params in PRODUCTION.values():
        options = kernels.compile_options(params)
        assert options == {"launch_bounds": (256, kernels.BLOCKS_PER_SM), "lto": False}
        assert kernels.register_limit(params) == 128 == 65536 // (2 * 256)
    assert kernels.register_limit(TINY) == 255  # 16 threads: the per-thread maximum


def is_whole(m: int, n: int, k: int, params: TileParams) -> bool:
    return m % params.bm == 0 and n % params.bn == 0 and k % params.bk == 0


def blocks_and_ragged(size: int, most: int = 2):
    """1 to ``most`` blocks of ``size``, whole or cut short (odd sizes too)."""
    return st.integers(1, most).flatmap(
        lambda blocks: st.sampled_from([blocks * size, blocks * size - 1, blocks * size - 3])
    )


@given(
    data=st.data(),
    params=st.sampled_from([WIDE, ONE_TURN, TINY]),
    dtype=st.sampled_from(ALL_DTYPES),
    accumulate=st.booleans(),
)
def test_interior_and_checked_kernels_match_numpy(launches, data, params, dtype, accumulate):
    """Whole blocks run the interior kernel (but for complex128, which has none), anything
    ragged the checked one, and both agree with float64 numpy within the rounding bound."""
    m = data.draw(blocks_and_ragged(params.bm), "m")
    n = data.draw(blocks_and_ragged(params.bn), "n")
    k = data.draw(blocks_and_ragged(params.bk, most=6), "k")  # past a whole turn
    a, b, c = operands(m, n, k, dtype, seed=data.draw(st.integers(0, 9), "seed"))
    d_a, d_b, d_c = cuda.to_device(a), cuda.to_device(b), cuda.to_device(c)
    aligned = all(kernels._device_address(x) % kernels.VECTOR_BYTES == 0 for x in (d_a, d_b, d_c))
    launches.clear()
    launches.interior.clear()
    kernels.launch(d_a, d_b, d_c, accumulate, params=params)
    interior = is_whole(m, n, k, params) and aligned and np.dtype(dtype) != np.complex128
    assert launches.interior == [interior]
    assert_product(d_c.copy_to_host(), a, b, c, accumulate)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("accumulate", [True, False])
def test_the_interior_kernel_gives_the_checked_kernels_bits(
    monkeypatch, launches, dtype, accumulate
):
    """On whole blocks both kernels add the same products in the same order: the same bits,
    rerun after rerun."""
    a, b, c = operands(16, 16, 40, dtype, seed=4)  # five k-tiles: a turn of four, and one
    results = []
    for force_checked in (False, False, True):
        if force_checked:
            monkeypatch.setattr(kernels, "is_interior", lambda *args: False)
        d_c = cuda.to_device(c)
        kernels.launch(cuda.to_device(a), cuda.to_device(b), d_c, accumulate, params=WIDE)
        results.append(d_c.copy_to_host())
    expected = np.dtype(dtype) != np.complex128
    assert launches.interior == [expected, expected, False]
    assert results[0].tobytes() == results[1].tobytes() == results[2].tobytes()
    assert_product(results[0], a, b, c, accumulate)


def test_misaligned_or_strided_arrays_take_the_checked_kernel(launches):
    """Whole blocks, but an operand that starts off a 16-byte boundary (a device view one
    element in) or whose rows are not ``shape[1]`` long: the checked kernel, right."""
    a, b, c = operands(16, 16, 16, np.float32, seed=5)
    d_a, d_b, d_c = cuda.to_device(a), cuda.to_device(b), cuda.to_device(c)
    assert kernels.is_interior(d_a, d_b, d_c, WIDE)
    flat = cuda.to_device(np.concatenate([np.zeros(1, a.dtype), a.ravel()]))
    shifted = flat[1:].reshape(a.shape)  # the same values, 4 bytes past an aligned start
    assert kernels._device_address(shifted) % kernels.VECTOR_BYTES == 4
    assert not kernels.is_interior(shifted, d_b, d_c, WIDE)
    kernels.launch(shifted, d_b, d_c, True, params=WIDE)
    wide = cuda.to_device(np.concatenate([b, b], axis=1))
    assert not kernels.is_interior(d_a, wide[:, :16], d_c, WIDE)
    assert launches.interior == [False]
    assert_product(d_c.copy_to_host(), a, b, c, accumulate=True)


def test_every_tall_slab_of_an_interior_launch_is_interior(monkeypatch, launches):
    monkeypatch.setattr(kernels, "MAX_GRID_Y", 1)  # slabs of one block row (16 rows)
    a, b, c = operands(48, 16, 8, np.float64, seed=6)
    d_c = cuda.to_device(c)
    kernels.launch(cuda.to_device(a), cuda.to_device(b), d_c, True, params=WIDE)
    assert launches.interior == [True, True, True]
    assert [args[0].shape for _, args in launches] == [(16, 8)] * 3
    assert_product(d_c.copy_to_host(), a, b, c, accumulate=True)


def test_complex128_has_no_interior_kernel():
    assert [kernels.has_interior_kernel(np.dtype(d)) for d in ALL_DTYPES] == [1, 1, 1, 0]
    with pytest.raises(InputError, match="no interior kernel for complex128"):
        kernels.make_gemm_function(TINY, np.dtype(np.complex128), interior=True)


def test_vector_widths():
    """A run's widest access: 16 bytes at most, a divisor of the run."""
    f32, f64, c128 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.complex128)
    assert [kernels.vector_width(run, f32) for run in (1, 2, 4, 8, 6)] == [1, 2, 4, 4, 2]
    assert [kernels.vector_width(run, f64) for run in (1, 2, 4)] == [1, 2, 2]
    assert kernels.vector_width(4, c128) == 1

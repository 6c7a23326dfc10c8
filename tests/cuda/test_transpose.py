"""The device transpose a transposed operand goes through (transpose.launch_transpose)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import outofcore.backends.cuda as ooc_cuda
from outofcore.backends.cuda import transpose
from outofcore.errors import InputError
from tests.helpers import ROOT

pytestmark = pytest.mark.skipif(
    not ooc_cuda.simulator_enabled() and not ooc_cuda.is_available(),
    reason="NUMBA_ENABLE_CUDASIM=0 and no GPU is visible to numba.cuda",
)

DTYPES = ("float32", "float64", "complex64", "complex128")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (1, 19), (17, 1), (9, 23), (33, 8)])
def test_transpose_matches_numpy_on_ragged_shapes(dtype, shape):
    from numba import cuda  # noqa: PLC0415

    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    x = x.astype(dtype)
    out = cuda.to_device(np.full(shape[::-1], np.nan, dtype))
    transpose.launch_transpose(cuda.to_device(x), out)
    np.testing.assert_array_equal(out.copy_to_host(), x.T)


def test_transpose_into_the_wrong_shape_is_refused():
    from numba import cuda  # noqa: PLC0415

    with pytest.raises(InputError, match=r"transpose of a 3x4 array into \(3, 4\)"):
        transpose.launch_transpose(cuda.device_array((3, 4)), cuda.device_array((3, 4)))


def test_transpose_compiles_for_the_real_chip():
    """The simulator does not type-check: compile the production kernel to PTX for sm_90.

    The first GPU run found a shared-array shape the simulator took and numba's typing
    refused (``(tile, tile + 1)``: not a constant)."""
    script = (
        "import numpy as np\n"
        "from numba import cuda, types, from_dtype\n"
        "from outofcore.backends.cuda import transpose\n"
        f"for name in {DTYPES!r}:\n"
        "    arr = types.Array(from_dtype(np.dtype(name)), 2, 'C')\n"
        "    fn = transpose.make_transpose_function(np.dtype(name))\n"
        "    ptx, _ = cuda.compile_ptx(fn, (arr, arr), cc=(9, 0))\n"
        "    assert '.shared' in ptx and transpose.TRANSPOSE_TILE == 32, name\n"
        "print('compiled')\n"
    )
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
        check=False,
    )
    if result.returncode and "NVVM" in result.stderr and "not found" in result.stderr.lower():
        pytest.skip(f"numba-cuda's NVVM is not installed here: {result.stderr[-300:]}")
    assert result.returncode == 0 and "compiled" in result.stdout, result.stderr[-3000:]

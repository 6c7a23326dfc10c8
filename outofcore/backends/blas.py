"""BLAS through ctypes: ``gemm`` and ``syrk`` on numpy arrays with the GIL released.

SciPy's OpenBLAS routines are taken from ``scipy.linalg.cython_blas`` (the
Fortran interface; loaded on first use, without ``scipy.linalg``'s own
imports where possible: :func:`cython_blas`) and called through ctypes, so the GIL is released while
BLAS runs and a panel decoded in another thread of the process makes
progress.  Row-major numpy arrays are column-major transposes to BLAS; a
transposed view of a panel is handed over with BLAS's transpose flag, never
copied.  Every function returns False when it cannot make the call (no
SciPy, a dtype or layout BLAS does not take) and the caller falls back to numpy.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.machinery
import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType

import numpy as np

#: BLAS routine per accumulation dtype.
_GEMM_NAMES = {
    np.dtype(np.float32): "sgemm",
    np.dtype(np.float64): "dgemm",
    np.dtype(np.complex64): "cgemm",
    np.dtype(np.complex128): "zgemm",
}


#: ``syrk`` (C = alpha·A·Aᵀ + beta·C, one triangle) per accumulation dtype.
_SYRK_NAMES = {dtype: "?syrk".replace("?", name[0]) for dtype, name in _GEMM_NAMES.items()}
_INTEGER = ctypes.POINTER(ctypes.c_int)
_CHAR, _POINTER = ctypes.c_char_p, ctypes.c_void_p
#: Fortran argument lists: flags, sizes (by pointer), scalars and arrays (by pointer).
_PROTOTYPES = {
    "gemm": (_CHAR, _CHAR, _INTEGER, _INTEGER, _INTEGER, _POINTER, _POINTER, _INTEGER)
    + (_POINTER, _INTEGER, _POINTER, _POINTER, _INTEGER),
    "syrk": (_CHAR, _CHAR, _INTEGER, _INTEGER, _POINTER, _POINTER, _INTEGER, _POINTER)
    + (_POINTER, _INTEGER),
}


def _blas_function(name: str) -> ctypes._CFuncPtr | None:
    """SciPy's Fortran BLAS routine ``name`` (``sgemm``, ``dsyrk``, ...) via ctypes, or None.

    ``scipy.linalg.blas.sgemm`` (f2py) holds the GIL for the whole product, so
    a panel being decoded in another thread of the same process makes no
    progress while BLAS runs.  Calling the same BLAS routine through ctypes
    releases the GIL during the call, and decoding overlaps compute.  Scalars
    (``alpha``, ``beta``) are passed by pointer, as pairs for the complex ones.
    """
    with _lock:
        if name in _cache:
            return _cache[name]
        function = None
        try:
            capsule = cython_blas().__pyx_capi__[name]
            get_name = ctypes.pythonapi.PyCapsule_GetName
            get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
            get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
            get_pointer.restype = ctypes.c_void_p
            get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
            address = get_pointer(capsule, get_name(capsule))
            function = ctypes.CFUNCTYPE(None, *_PROTOTYPES[name[1:]])(address)
        except (ImportError, KeyError, AttributeError, ValueError, TypeError):
            function = None
        _cache[name] = function
        return function


def load() -> None:
    """Load the BLAS library this module calls (SciPy's), where SciPy is installed.

    It is not numpy's: a thread limit set before it is loaded does not cover it
    (:meth:`outofcore.compute.worker_context.WorkerContext.blas_threads` loads it first).
    """
    with _lock, contextlib.suppress(ImportError, OSError, AttributeError, ValueError):
        cython_blas()  # where it cannot be loaded, tasks use numpy's BLAS


def cython_blas() -> ModuleType:
    """SciPy's ``scipy.linalg.cython_blas``, whose capsules hold the BLAS routines' addresses.

    ``from scipy.linalg import cython_blas`` first runs ``scipy.linalg/__init__``,
    which imports all of ``scipy.linalg`` (about 0.3 s, in every worker process)
    for nothing this module calls.  The extension module is loaded from its file
    instead, after the light ``import scipy`` (which sets up where SciPy's own
    libraries are found); the import above is the fallback when that fails.
    Called under ``_lock``; the module is kept.

    Raises
    ------
    ImportError
        When SciPy is not installed.
    """
    global _cython_blas
    if _cython_blas is None:
        _cython_blas = sys.modules.get("scipy.linalg.cython_blas") or _load_cython_blas()
    return _cython_blas


def _load_cython_blas() -> ModuleType:
    import scipy  # noqa: PLC0415

    folder = Path(scipy.__file__).parent / "linalg"
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = folder / f"cython_blas{suffix}"
        if not path.is_file():
            continue
        try:
            spec = importlib.util.spec_from_file_location("scipy.linalg.cython_blas", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        except Exception:  # noqa: BLE001 (any failure: the ordinary import below)
            break
        if isinstance(getattr(module, "__pyx_capi__", None), dict):
            return module
        break
    from scipy.linalg import cython_blas as module  # noqa: PLC0415

    return module


_cython_blas: ModuleType | None = None
_cache: dict[str, ctypes._CFuncPtr | None] = {}
_lock = threading.Lock()
#: BLAS takes 32-bit sizes (SciPy's OpenBLAS is LP64).
_INT_MAX = 2**31 - 1


def _blas_operand(x: np.ndarray) -> tuple[bytes, int] | None:
    """How BLAS (column-major) reads ``x.T``: the transpose flag and leading dimension.

    A row-major ``x`` (unit stride along its columns) is ``x.T`` column-major:
    ``"N"``.  A column-major ``x``, such as the transposed view of a panel read
    from a stored ``A`` when ``op(A) = A.T``, is ``x`` column-major: ``"T"``.
    None when neither axis has unit stride (or a stride is negative).
    """
    rows, cols = x.shape
    item = x.itemsize
    row_stride, col_stride = x.strides
    if (col_stride == item or cols == 1) and row_stride >= 0 and row_stride % item == 0:
        return b"N", max(1, cols, row_stride // item if rows > 1 else cols)
    if (row_stride == item or rows == 1) and col_stride >= 0 and col_stride % item == 0:
        return b"T", max(1, rows, col_stride // item if cols > 1 else rows)
    return None


def _scalar(value: float, dtype: np.dtype) -> ctypes.Array:
    """A BLAS scalar argument of ``dtype``: one real, or a (real, imaginary) pair."""
    if dtype.kind == "c":
        real = ctypes.c_float if dtype == np.complex64 else ctypes.c_double
        return (real * 2)(complex(value).real, complex(value).imag)
    real = ctypes.c_float if dtype == np.float32 else ctypes.c_double
    return (real * 1)(float(value))


def gemm_accumulate(
    c: np.ndarray, a: np.ndarray, b: np.ndarray, beta: float, alpha: float = 1.0
) -> bool:
    """``c = alpha * a @ b + beta * c`` in place with the GIL released; False if it cannot.

    ``c`` must have unit stride along its columns (a C-ordered array or a block
    of its rows); ``a`` and ``b`` may be row- or column-major views (a
    transposed panel is handed over as a view, with BLAS's transpose flag, never
    copied).  All three share one of :data:`outofcore.operands.dtypes.COMPUTE_DTYPES`.
    Column-major BLAS sees the row-major ``c`` as ``c^T`` and computes
    ``c^T = alpha * b^T a^T + beta * c^T``.
    """
    m, n = c.shape
    k = a.shape[1]
    if not (a.dtype == b.dtype == c.dtype and _blas_target(c, k)):
        return False
    b_op, a_op = _blas_operand(b), _blas_operand(a)
    function = _blas_function(_GEMM_NAMES[c.dtype])
    if function is None or b_op is None or a_op is None:
        return False
    (b_flag, ldb), (a_flag, lda) = b_op, a_op
    ldc = _leading(c)
    function(
        ctypes.c_char_p(b_flag),
        ctypes.c_char_p(a_flag),
        ctypes.byref(ctypes.c_int(n)),
        ctypes.byref(ctypes.c_int(m)),
        ctypes.byref(ctypes.c_int(k)),
        _scalar(alpha, c.dtype),
        b.ctypes.data,
        ctypes.byref(ctypes.c_int(ldb)),
        a.ctypes.data,
        ctypes.byref(ctypes.c_int(lda)),
        _scalar(beta, c.dtype),
        c.ctypes.data,
        ctypes.byref(ctypes.c_int(ldc)),
    )
    return True


def multiply_into(c: np.ndarray, a: np.ndarray, b: np.ndarray, *, accumulate: bool) -> None:
    """``c += a @ b`` (or ``c = a @ b``) in place: BLAS, else numpy's matmul."""
    if gemm_accumulate(c, a, b, 1.0 if accumulate else 0.0):
        return
    if accumulate:
        c += a @ b
    else:
        np.matmul(a, b, out=c)


def _blas_target(c: np.ndarray, k: int) -> bool:
    """Whether BLAS can write ``c`` (row-major, unit stride along its columns) with depth ``k``."""
    m, n = c.shape
    return (
        c.dtype in _GEMM_NAMES
        and max(m, n, k) <= _INT_MAX
        and min(m, n, k) > 0
        and (c.strides[1] == c.itemsize or n == 1)
        and c.strides[0] % c.itemsize == 0
        and c.strides[0] >= 0
    )


def _leading(c: np.ndarray) -> int:
    """The leading dimension BLAS is given for a row-major ``c``."""
    m, n = c.shape
    return max(1, n, c.strides[0] // c.itemsize if m > 1 else n)


def syrk_accumulate(c: np.ndarray, a: np.ndarray, beta: float) -> bool:
    """``c = a @ a.T + beta * c`` on the upper triangle of ``c`` only; False if it cannot.

    Half the multiply-adds of ``gemm``: ``numpy`` uses the same ``syrk`` for
    ``x.T @ x``.  ``c`` is square (row-major, unit column stride) and only its
    upper triangle (``j >= i``) is written; the strictly lower one is left as
    it was (mirror it, :func:`mirror_upper`).  ``a`` may be a row-major or a
    transposed (column-major) view.  Column-major BLAS sees row-major ``c`` as
    ``c^T`` (the same symmetric matrix), whose lower triangle is ``c``'s upper.
    """
    n, k = a.shape
    if not (a.dtype == c.dtype and c.shape == (n, n) and _blas_target(c, k)):
        return False
    operand, function = _blas_operand(a), _blas_function(_SYRK_NAMES[c.dtype])
    if function is None or operand is None:
        return False
    # BLAS sees a row-major ``a`` as ``a^T`` (k x n): C = (a^T)^T a^T is trans = "T";
    # a column-major ``a`` it sees as is (n x k): C = a a^T is trans = "N".
    flag, lda = operand
    trans = b"T" if flag == b"N" else b"N"
    function(
        ctypes.c_char_p(b"L"),
        ctypes.c_char_p(trans),
        ctypes.byref(ctypes.c_int(n)),
        ctypes.byref(ctypes.c_int(k)),
        _scalar(1.0, c.dtype),
        a.ctypes.data,
        ctypes.byref(ctypes.c_int(lda)),
        _scalar(beta, c.dtype),
        c.ctypes.data,
        ctypes.byref(ctypes.c_int(_leading(c))),
    )
    return True


def gram_into(c: np.ndarray, a: np.ndarray, *, accumulate: bool) -> None:
    """``c += a @ a.T`` (or ``c = a @ a.T``) on at least the upper triangle of ``c``.

    BLAS ``syrk`` (upper triangle only), else numpy's matmul (all of ``c``).
    """
    if syrk_accumulate(c, a, 1.0 if accumulate else 0.0):
        return
    multiply_into(c, a, a.T, accumulate=accumulate)


def mirror_upper(c: np.ndarray, block: int = 512) -> None:
    """Copy the upper triangle of the square ``c`` onto its lower one: ``c`` exactly symmetric.

    In blocks of ``block`` rows, so that no temporary is larger than ``block`` rows of ``c``.
    """
    n = c.shape[0]
    for r0 in range(0, n, block):
        r1 = min(n, r0 + block)
        c[r0:r1, :r0] = c[:r0, r0:r1].T
        for i in range(r0 + 1, r1):
            c[i, r0:i] = c[r0:i, i]

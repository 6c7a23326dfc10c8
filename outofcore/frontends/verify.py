"""Checking ``C = alpha·op(A)·op(B) + beta·D`` without recomputing it (Freivalds' method).

For random ±1 vectors ``r`` (one per round) compare ``C·r`` with
``alpha·op(A)·(op(B)·r) + beta·D·r``: ``O(mn + mk + kn)`` work per round
instead of ``O(mnk)``, streamed chunk by chunk (Dask's threaded scheduler in
this process).

**Floating-point products** are checked in float64 (complex128 for complex
ones).  If ``C = exact + E`` then ``C·r − (...)= E·r``.  Accumulated in a
dtype of unit roundoff ``u``, ``|E_ij| ≤ γ·(|alpha|·‖a_i‖₂·‖b_j‖₂ + |beta|·|d_ij|)``
and with random signs ``|(E·r)_i| ≲ γ·s_i`` where
``s_i = |alpha|·‖a_i‖₂·‖op(B)‖_F + |beta|·‖d_i‖₂``, with ``γ = √k·u`` and
``u`` the accumulation's unit roundoff (float32's for float16 inputs).  An
output written in a coarser dtype (float16) rounds each element once more,
by at most ``u_out·|c_ij|``: ``u_out·‖c_i‖₂`` for the row.  Row ``i`` passes when

    |(C·r)_i − (...)_i|  ≤  16 · (√k·u·s_i + u_out·‖c_i‖₂);

the report's ``tolerance`` is ``16·√k·u`` and ``max_relative_residual`` the
largest left side over ``s_i + (u_out / (√k·u))·‖c_i‖₂`` (just ``s_i`` unless
the output is coarser), so a row passes when its ratio is within the
tolerance.  ``C`` is judged in its own kind: a real product written as complex
must have imaginary parts exactly 0.

**NaN and Inf**: one in row ``i`` of ``op(A)`` makes row ``i`` of the reference
non-finite, one in column ``j`` of ``op(B)`` column ``j``, one in the addend its
element.  Those elements are checked one by one (NaN where a NaN is among the
inputs: a match; NaN or Inf where only Infs are: *unchecked*, its value not
confirmed; a finite value: wrong), and left out of the random check (columns of
``op(B)`` in a second pass, when the first finds any).  A row that may overflow
the dtypes and holds an Inf, or has NaN/Inf in the addend, is not compared
(unchecked).  The report counts the unchecked rows and elements.

**Integer products** are exact, and are checked exactly: in int64 arithmetic,
which wraps modulo ``2**64``, the scales exact integers modulo ``2**64``.  A wrong
element changes ``(C·r)_i`` by twice its error on one sign of ``r_j``, so each
round misses it with probability at most 1/2; the tolerance is 0.  Written as a
float, each element is the 64-bit result rounded once: ``C`` is read back as whole
numbers modulo ``2**64`` and the exact residual of row ``i`` is within
``2·u_out·‖c_i‖₁``.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dask
import dask.array as da
import numpy as np
import zarr

from outofcore import config
from outofcore.compute.worker_context import worker_context
from outofcore.frontends.verify_exact import verify_exact
from outofcore.frontends.verify_report import (
    VerifyReport,
    count_failures,
    dask_operands,
    largest_magnitude,
    row_bounds,
    row_scales,
)
from outofcore.jobs.opening import open_product
from outofcore.journal.targets import JOB_ATTRIBUTE
from outofcore.operands import arrays
from outofcore.operands.product import Product
from outofcore.operands.reading import ReadError
from outofcore.runtime.addresses import computing_on
from outofcore.runtime.cores import usable_cores
from outofcore.storage import stored_arrays
from outofcore.storage.codecs import ChunkSizeError
from outofcore.storage.locations import locate

SAFETY = 16.0


def _check_complete(c: zarr.Array) -> None:
    """Refuse an output whose job has not finished: its unwritten tiles read as NaN (or 0)."""
    record = c.attrs.get(JOB_ATTRIBUTE)
    if not isinstance(record, dict) or record.get("complete", True):
        return  # an array outofcore's jobs did not write, or a finished one
    from outofcore.journal.records import Journal  # noqa: PLC0415

    journal = Journal.for_output(c)
    document = journal.read_job() or {}
    done = ""
    if "journal_id" in document:
        done = (
            f" ({len(journal.done_tiles(document['journal_id']))} of "
            f"{document.get('tiles_total')} tiles done)"
        )
    raise arrays.InputError(
        f"C ({stored_arrays.describe(c)}) is incomplete: its job has not finished{done}, so its "
        "unwritten tiles hold no product; rerun the same matmul command to resume it, then "
        "verify"
    )


#: Most random vectors one verification uses (each holds n or k numbers in memory).
MAX_ROUNDS = 64


def verify(
    a: arrays.ArrayLike,
    b: arrays.ArrayLike,
    c: arrays.ArrayLike,
    *,
    rounds: int = 2,
    seed: int | None = None,
    transpose_a: bool = False,
    transpose_b: bool = False,
    alpha: float | complex = 1.0,
    beta: float | complex = 0.0,
    addend: arrays.ArrayLike | None = None,
    storage_options: dict[str, Any] | None = None,
    client: Any = None,
) -> VerifyReport:
    """Check that ``c`` holds ``alpha * op(a) @ op(b) + beta * addend``, reading each once.

    Parameters
    ----------
    a, b, c
        ``zarr.Array`` objects or paths / URLs; ``c`` must have the product's shape.
    rounds
        Random vectors to test with; a wrong element escapes all of them
        only when its error is below the tolerance.
    seed
        Seed of the random vectors (fresh ones when None).
    transpose_a, transpose_b, alpha, beta, addend
        The product, as given to :func:`outofcore.matmul`.
    storage_options
        fsspec options of URLs (credentials, endpoint; :mod:`outofcore.storage.stores`).
    client
        Where the products run, as for :func:`outofcore.matmul`: a ``distributed.Client``
        or a scheduler address (its workers read the arrays), ``"sync"`` (this thread);
        None: Dask's convention (the default Client when one is open, else what
        ``dask.config`` names), else threads of this process.
    """
    _check_rounds_and_seed(rounds, seed)
    # Each array named by a path or URL is located once, with the options that open it.
    a, b, c, addend = (
        locate(x, storage_options) if isinstance(x, str | os.PathLike) else x
        for x in (a, b, c, addend)
    )
    c_arr = arrays.open_input(c, "C", dtypes=None)
    _check_complete(c_arr)
    product = _checked_product(
        a,
        b,
        c_arr,
        transpose_a=transpose_a,
        transpose_b=transpose_b,
        alpha=alpha,
        beta=beta,
        addend=addend,
    )
    rng = np.random.default_rng(seed)
    r = rng.choice(np.array([-1, 1]), size=(product.matrix_shape[1], rounds))
    try:
        with (
            computing_on(client, config.number("connect-timeout", positive=True)),
            _own_threads(),
        ):
            if product.types.exact:
                return verify_exact(product, c_arr, r)
            return _verify_rounded(product, c_arr, r)
    except ChunkSizeError as exc:  # a decompression bomb, refused from its header
        read = [stored_arrays.describe(x) for x in (*product.inputs.values(), c_arr)]
        raise ReadError(f"a chunk of {', '.join(read)} is corrupt: {exc}") from exc
    finally:  # the chunk-file buffers the reads kept (outofcore.operands.reading, as a job's tasks)
        worker_context().release_in_process()


def _check_rounds_and_seed(rounds: Any, seed: Any) -> None:
    """Refuse a number of rounds or a seed :func:`verify` cannot use, naming it."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= MAX_ROUNDS:
        raise arrays.InputError(
            f"rounds = {rounds!r}: need a whole number from 1 to {MAX_ROUNDS} (each round is "
            "one random vector kept in memory; a wrong result escapes two already only below "
            "the tolerance)"
        )
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63
    ):
        raise arrays.InputError(f"seed = {seed!r}: need None or a whole number from 0 to 2**63-1")


def _checked_product(a: Any, b: Any, c_arr: zarr.Array, **options: Any) -> Product:
    """The product ``c_arr`` should hold (:func:`outofcore.jobs.opening.open_product` with
    ``options``), refused when ``c_arr`` has another shape or the product is a bool one."""
    product = open_product(a, b, **options, out_dtype=c_arr.dtype)
    if tuple(c_arr.shape) != product.shape:
        raise arrays.InputError(
            f"C is {tuple(c_arr.shape)} but the product "
            f"({'A.T' if product.transpose_a else 'A'} @ "
            f"{'B.T' if product.transpose_b else 'B'}) is {product.shape}"
        )
    if product.types.boolean:
        raise arrays.InputError(
            f"C ({stored_arrays.describe(c_arr)}) is a bool product: it holds whether any of the "
            "ands is true, not a sum, and Freivalds' check multiplies sums; compare it with "
            "the inputs' product as integers (outofcore matmul ... --out-dtype int64), nonzero"
        )
    return product


@contextlib.contextmanager
def _own_threads() -> Iterator[None]:
    """Dask's threaded scheduler on a pool of this call's own, shut down (its running
    reads finished) before the buffers they keep are freed: a read that fails leaves no
    task of the check still reading after :func:`verify` returns (Dask's shared pool
    kept them running).  A Client or the synchronous scheduler ignores it."""
    with (
        ThreadPoolExecutor(usable_cores()) as pool,
        dask.config.set(pool=pool),
    ):
        yield


def _verify_rounded(product: Product, c: zarr.Array, r: np.ndarray) -> VerifyReport:
    """Floats and complex: residuals against ``γ·s_i`` (see the module docstring), on the
    elements whose reference is finite; those where it is not are checked one by one."""
    report, tainted = _rounded_pass(product, c, r, None)
    if tainted is None:
        return report
    # Columns of op(B) holding NaN or Inf make whole columns of the reference non-finite:
    # a second pass leaves them out of the random check (their values are checked alone).
    report, _ = _rounded_pass(product, c, r, tainted)
    return report


def _rounded_pass(
    product: Product,
    c: zarr.Array,
    r: np.ndarray,
    tainted: tuple[np.ndarray, np.ndarray] | None,
) -> tuple[VerifyReport, tuple[np.ndarray, np.ndarray] | None]:
    """One pass of the floating check, with the columns of op(B) known to hold NaN or Inf
    (``tainted``: which hold any, which hold NaN; None: none known).  Returns the report,
    and the tainted columns where the pass found some it did not know."""
    types = product.types
    dtype = np.dtype(np.complex128 if types.compute.kind == "c" else np.float64)
    a, b, c_d, addend = dask_operands(product, c)
    a, b = a.astype(dtype), b.astype(dtype)
    addend = None if addend is None else addend.astype(dtype)
    if types.output.kind == "c" and dtype.kind != "c":  # a real product written as complex
        imaginary = (c_d.imag != 0).sum(axis=-1)
        c_d = c_d.real
    else:
        imaginary = da.zeros(())
    c_d = c_d.astype(dtype)
    a_bad, a_nan = (~da.isfinite(a)).any(axis=-1), da.isnan(a).any(axis=-1)
    b_bad, b_nan = (~da.isfinite(b)).any(axis=-2), da.isnan(b).any(axis=-2)
    r = r.astype(np.float64)
    # Elements whose reference is NaN or Inf for certain: in a tainted column of op(B), or
    # where the addend is; NaN for certain where a NaN is.
    columns_bad = columns_nan = np.zeros((1, 1), dtype=bool)
    if tainted is not None:
        b = da.where(da.isfinite(b), b, 0)
        r = r * ~tainted[0][..., :, None]
        columns_bad, columns_nan = tainted[0][..., None, :], tainted[1][..., None, :]
    excluded: Any = columns_bad
    sure_nan: Any = columns_nan
    by_addend: Any = da.zeros(())
    if addend is not None:
        # The random check cannot leave out one element of a row: a row with NaN or Inf in
        # the addend is checked element by element only (its finite values unconfirmed).
        by_addend = (~da.isfinite(addend)).sum(axis=-1)
        excluded = excluded | ~da.isfinite(addend)
        sure_nan = sure_nan | da.isnan(addend)
        addend = da.where(da.isfinite(addend), addend, 0)
    finite = da.isfinite(c_d)
    kept = da.where(excluded | ~finite, 0, c_d)
    counts = [
        finite.sum(axis=-1),  # C finite (wrong in a row of NaN or Inf)
        da.isnan(c_d).sum(axis=-1),
        (excluded & finite).sum(axis=-1),  # finite where the reference is not
        (sure_nan & ~da.isnan(c_d)).sum(axis=-1),  # not NaN where the reference is
        (excluded & ~sure_nan & ~finite).sum(axis=-1),  # NaN or Inf as expected, unconfirmed
        (~excluded & ~finite).sum(axis=-1),  # NaN or Inf where the reference is finite
        (excluded | da.zeros(c_d.shape[-1:], dtype=bool)).sum(axis=-1),
        by_addend,
    ]
    bounds = row_bounds(product, a, b, addend)
    computed = dask.compute(
        kept @ r,
        _reference(product, a, b, addend, r),
        da.sqrt((abs(kept) ** 2).sum(axis=-1)),
        imaginary,
        a_bad,
        a_nan,
        b_bad,
        b_nan,
        *bounds,
        *counts,
    )
    cr, abr, c_norms, imaginary, a_bad, a_nan, b_bad, b_nan = computed[:8]
    bounds, counts = computed[8:11], computed[11:]
    if tainted is None and np.any(b_bad):
        return None, (np.asarray(b_bad), np.asarray(b_nan))  # type: ignore[return-value]
    return _judge(product, r, (cr, abr, c_norms, imaginary, a_bad, a_nan), bounds, counts), None


def _judge(
    product: Product, r: np.ndarray, values: tuple, bounds: tuple, counts: list
) -> VerifyReport:
    """The verdict of one floating pass from its computed parts."""
    cr, abr, c_norms, imaginary, a_bad, a_nan = values
    finite_all, nan_all, finite_excluded, not_nan, unconfirmed, stray, excluded, by_addend = counts
    types = product.types
    n = product.matrix_shape[1]
    shape = np.broadcast_shapes(np.shape(finite_all), np.shape(a_bad), np.shape(cr)[:-1])
    a_bad, a_nan = np.broadcast_to(a_bad, shape), np.broadcast_to(a_nan, shape)
    finite_all, nan_all = np.broadcast_to(finite_all, shape), np.broadcast_to(nan_all, shape)
    accumulation = math.sqrt(product.k) * types.unit_roundoff()
    reach = row_scales(product, *bounds)
    largest = min(largest_magnitude(types.compute), largest_magnitude(types.output))
    may_overflow = np.broadcast_to(~(2 * reach < largest), shape)
    scale = reach
    if types.output_roundoff():
        scale = scale + types.output_roundoff() / accumulation * np.nan_to_num(c_norms)
    scale = scale[..., None]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        residual = np.abs(cr - abr)
        relative = np.where(scale > 0, residual / scale, np.where(residual > 0, np.inf, 0.0))
    relative = np.broadcast_to(
        np.where(np.isnan(relative), np.inf, relative), (*shape, r.shape[-1])
    )
    tolerance = SAFETY * accumulation
    # A row whose reference is NaN or Inf throughout (NaN or Inf in its row of op(A)).
    whole_wrong = (finite_all > 0) | (a_nan & (nan_all < n))
    whole_unconfirmed = a_bad & ~a_nan
    # Other rows: the random check on the elements whose reference is finite.
    stray = np.broadcast_to(stray, shape)
    overflowing = ~a_bad & may_overflow & ((stray > 0) | ~np.isfinite(relative).all(axis=-1))
    overflowing = overflowing | (~a_bad & (np.broadcast_to(by_addend, shape) > 0))
    compared = ~a_bad & ~overflowing
    nonfinite = np.broadcast_to((finite_excluded > 0) | (not_nan > 0), shape) | (
        (stray > 0) & ~may_overflow
    )
    wrong = np.where(
        a_bad, whole_wrong, nonfinite | (compared & (relative > tolerance).any(axis=-1))
    )
    wrong = wrong | (np.broadcast_to(imaginary, shape) > 0)
    failing, row, matrix = count_failures(wrong)
    unconfirmed = np.where(
        a_bad,
        np.where(whole_unconfirmed, n - finite_all, 0),
        np.broadcast_to(unconfirmed, shape)
        + np.where(overflowing, n - np.broadcast_to(excluded, shape), 0),
    )
    checked = np.where(compared[..., None], relative, 0.0)
    return VerifyReport(
        passed=failing == 0,
        rounds=r.shape[-1],
        max_relative_residual=float(checked.max()) if checked.size else 0.0,
        tolerance=tolerance,
        failing_rows=failing,
        first_failing_row=row,
        nonfinite_mismatches=int((np.where(a_bad, whole_wrong, nonfinite)).sum()),
        first_failing_matrix=matrix,
        unchecked_rows=int((unconfirmed > 0).sum()),
        unchecked_elements=int(unconfirmed.sum()),
    )


def _reference(product: Product, a: da.Array, b: da.Array, addend, r: np.ndarray) -> da.Array:
    expected = a @ (b @ r)
    if product.alpha != 1:
        expected = expected * product.alpha
    if addend is not None:
        expected = expected + (addend @ r) * product.beta
    return expected

"""``outofcore.to_zarr(x, url)``: store a dask array, its matrix product by outofcore.

Code written for dask.array reaches outofcore with one line changed:
``(x.T @ x).to_zarr(url)`` becomes ``outofcore.to_zarr(x.T @ x, url)``.  When the
last operation of ``x`` is a matrix product of arrays that only read zarr arrays
(:func:`outofcore.frontends.dask_products.product_at_top`), that product is an outofcore job
(memory contract, resume, progress, summary; a Gram product ``x.T @ x`` computes half
its tiles).  Anything else is stored by dask.array's own ``to_zarr`` into an array
outofcore creates (and marks complete once written), so the same rules for replacing an
output hold.  Where what dask.array computes holds a matrix product (a product whose
operands compute, or one below the top), that fallback is an
:class:`~outofcore.errors.FallbackWarning` naming the part and why, or under
``fallback="error"`` (the ``outofcore.fallback`` setting) a
:class:`~outofcore.errors.FallbackError` before anything is written.
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import zarr

from outofcore import config
from outofcore.errors import FallbackError, FallbackWarning, InputError, InputTypeError
from outofcore.frontends.dask_products import (
    FoundProduct,
    product_at_top,
    products_within,
    top_product,
)
from outofcore.frontends.generate import clear_own_array
from outofcore.jobs.entry import matmul
from outofcore.jobs.planning import asked_layout
from outofcore.jobs.spec import JobSpec, with_job_options
from outofcore.journal.targets import JOB_ATTRIBUTE, check_replaceable
from outofcore.operands.arrays import named_dimensions
from outofcore.operands.dask_graph import Vectors
from outofcore.operands.dtypes import product_types
from outofcore.operands.interop import Operand, by_path, steps_by_path, type_name
from outofcore.operands.reading import sample_means, sums_along
from outofcore.operands.steps import result_dtype
from outofcore.runtime.addresses import computing_on
from outofcore.storage.locations import locate
from outofcore.storage.stored_arrays import WRITE_CONFIG, describe
from outofcore.storage.stores import zarr_options

logger = logging.getLogger("outofcore")


@with_job_options(excluding=("transpose_a", "transpose_b"))
def to_zarr(
    x: Any,
    url: Any,
    *,
    spec: JobSpec | None = None,
    client: Any = None,
    compute: bool = True,
    fallback: str | None = None,
    **options: Any,
) -> Any:
    """Store the dask array ``x`` as a zarr array at ``url``; return it, opened.

    ``compute=False``: dask's contract, a ``dask.delayed`` object that stores ``x`` so
    when computed (and returns the array); its options are checked now.

    Where ``x`` is a matrix product at its top (``a @ b``, ``da.matmul``, ``da.dot``,
    ``da.tensordot`` over one pair of axes, ``da.einsum("ij,jk->ik", ...)``, with
    ``.T`` on either side) of dask arrays that only read zarr arrays, the product runs
    as :func:`outofcore.matmul` does, with ``spec`` / ``options`` (``memory``,
    ``overwrite``, ...) and ``client``, written in ``x``'s dtype where that holds every
    value.  Otherwise dask.array's ``to_zarr`` computes and stores ``x`` (on ``client``,
    as :func:`outofcore.verify` runs its products), without the memory budget.

    Parameters
    ----------
    fallback
        What to do when dask.array would compute a matrix product of ``x`` (one whose
        operands compute, such as ``(x ** 2).T @ x``, or one below the top, such as
        ``(a @ b) + 1``): ``"warn"`` (an :class:`~outofcore.errors.FallbackWarning` naming
        the part and why, then dask.array stores it), ``"error"`` (an
        :class:`~outofcore.errors.FallbackError`, nothing written) or ``"allow"`` (a log
        record only).  None (the default): the ``outofcore.fallback`` setting
        (``dask.config.set({"outofcore.fallback": "error"})``; default ``"warn"``).  An
        ``x`` with no matrix product is stored by dask.array, as its ``to_zarr`` would.

    Raises
    ------
    InputError
        For an ``x`` that is not a dask array, and what :func:`outofcore.matmul` refuses.
    FallbackError
        Under ``fallback="error"``, for a product dask.array would compute.
    """
    import dask.array as da  # noqa: PLC0415

    fallback = fallback_level(fallback)
    if not compute:
        JobSpec.of(spec, options)  # an unknown option is refused now, not when computed
        return _later(x, url, spec, client, options, fallback)
    if not isinstance(x, da.Array):
        raise InputError(
            f"to_zarr stores a dask array; got a {type_name(x)}: for zarr arrays, paths and "
            "numpy arrays call outofcore.matmul(a, b, out)"
        )
    job = dask_job(x, JobSpec.of(spec, options))
    if job.dask_computes is not None:
        level = fallback if job.falls_back else "allow"
        part = f"x ({x.name!r}, {x.dtype} {'x'.join(map(str, x.shape))}) {job.dask_computes}"
        return store_with_dask(x, url, client, job.spec, part, level)
    logger.info("outofcore.to_zarr: %s runs as an outofcore job", job.described)
    out = matmul(job.a, job.b, url, spec=job.spec, client=client)
    if tuple(out.shape) != tuple(x.shape):  # never: product_at_top's rules
        raise RuntimeError(f"the product {out.shape} is not x's {x.shape}")
    return out


@dataclass(frozen=True)
class DaskJob:
    """What outofcore makes of a dask array ``x``: the outofcore job of the matrix product
    at its top (operands ``a`` and ``b``, their steps and windows, and ``spec`` with the
    product's transposes, scale and dtype), or why dask.array computes ``x`` instead."""

    spec: JobSpec
    a: Operand | None = None
    b: Operand | None = None
    #: The product, in words (``"matmul of a.zarr.T and a.zarr"``); empty for dask's.
    described: str = ""
    #: Why dask.array computes ``x`` (``"has no matrix product"``); None: outofcore does.
    dask_computes: str | None = None
    #: Whether what dask computes holds a matrix product (a fallback to warn of).
    falls_back: bool = False


def dask_job(x: Any, spec: JobSpec) -> DaskJob:
    """The :class:`DaskJob` of the dask array ``x`` with the job options ``spec`` (what
    :func:`to_zarr` runs and :func:`outofcore.plan` of one array plans); its vectors
    (means, weights) are computed now, as the job's."""
    found = product_at_top(x, Vectors(reduce=sums_along, sample=sample_means))
    refusal = _why_dask_stores(x, found)
    if found is None or refusal is not None:
        why, falls_back = refusal if refusal is not None else ("has no matrix product", False)
        return DaskJob(spec, dask_computes=why, falls_back=falls_back)
    alpha = _times(spec.alpha, found.alpha)  # (a @ b) / (n - 1): the scale on top
    out_dtype = spec.out_dtype if spec.out_dtype is not None else _dtype_kept(found, x, alpha)
    spec = replace(
        spec,
        transpose_a=found.transpose_a,
        transpose_b=found.transpose_b,
        out_dtype=out_dtype,
        alpha=alpha,
    )
    described = (
        f"{found.call} of {describe(found.a)}"
        f"{'' if found.a_window is None else found.a_window.text()}"
        f"{'.T' if found.transpose_a else ''} and {describe(found.b)}"
        f"{'' if found.b_window is None else found.b_window.text()}"
        f"{'.T' if found.transpose_b else ''}"
    )
    a_steps, b_steps = steps_by_path(found.a_steps), steps_by_path(found.b_steps)
    a = Operand(by_path(found.a), steps=a_steps, window=found.a_window)  # flags: the spec's
    b = Operand(by_path(found.b), steps=b_steps, window=found.b_window)
    return DaskJob(spec, a, b, described)


def _why_dask_stores(x: Any, found: FoundProduct | None) -> tuple[str, bool] | None:
    """Why dask.array stores ``x`` rather than an outofcore job, and whether a product
    dask computes is the reason (a fallback to warn of); None where outofcore runs it."""
    if found is not None and not math.isfinite(found.alpha):
        return f"is a product scaled by {found.alpha} (outofcore takes finite scales)", True
    if found is not None and not _whole(found.alpha) and _integer_product(found):
        why = f"is an integer product scaled by {found.alpha:g} (exact products take whole scales)"
        return why, True
    if found is not None:
        return None
    top = top_product(x)
    below = products_within(x)
    why = (
        f"is a {top[1]} whose operands compute (more than reads of zarr arrays: outofcore "
        "multiplies stored arrays; store the operands to run it out of core)"
        if top is not None
        else f"has a {below[0]} below its top (outofcore runs a product at the top of the "
        "array: store the product first, with outofcore.to_zarr, then compute the rest)"
        if below
        else "has no matrix product"
    )
    return why, bool(below)


def _later(
    x: Any, url: Any, spec: JobSpec | None, client: Any, options: dict, fallback: str
) -> Any:
    """A ``dask.delayed`` object that runs :func:`to_zarr` when computed; ``x`` is held in
    its closure, not as an argument, so that dask does not compute it first.  Computed
    on a Dask worker, the job runs on that worker's cluster (``worker_client``: the task
    leaves its thread to the job's tasks meanwhile)."""
    import dask  # noqa: PLC0415

    def store() -> zarr.Array:
        try:
            from distributed import get_worker, worker_client  # noqa: PLC0415

            get_worker()
        except (ImportError, ValueError):  # not in a Dask worker's task
            return to_zarr(x, url, spec=spec, client=client, fallback=fallback, **options)
        with worker_client() as here:
            here_client = client or here
            return to_zarr(x, url, spec=spec, client=here_client, fallback=fallback, **options)

    return dask.delayed(store, pure=False)()


def _integer_product(found: FoundProduct) -> bool:
    """Whether the product is of integer or bool values (exact: whole scales only)."""
    a = result_dtype(found.a_steps, found.a.dtype)
    b = result_dtype(found.b_steps, found.b.dtype)
    return a.kind in "biu" and b.kind in "biu"


def _whole(value: int | float) -> bool:
    return isinstance(value, int) or float(value).is_integer()


def _times(first: int | float | complex, second: int | float) -> int | float | complex:
    """``first * second``, exactly (an int) where both are whole numbers: a scale of
    ``2**53 + 1`` on top of an integer product is never rounded through float."""
    if not isinstance(first, complex) and _whole(first) and _whole(second):
        return int(first) * int(second)
    return first * second


def _dtype_kept(found: FoundProduct, x: Any, alpha: int | float | complex) -> np.dtype | None:
    """``x``'s dtype (dask's, numpy's) where outofcore can write the product in it; else
    None (the product's own: numpy's int8 @ int8 wraps in int8, outofcore's is exact)."""
    k = found.read_shape("A")[0 if found.transpose_a else 1]
    a_dtype = result_dtype(found.a_steps, found.a.dtype)
    b_dtype = result_dtype(found.b_steps, found.b.dtype)
    try:
        product_types(a_dtype, b_dtype, k, alpha=alpha, out_dtype=x.dtype)
    except InputError:
        logger.warning(
            "outofcore.to_zarr: the product is written as outofcore's exact %s, not as "
            "%s (which dask's product would wrap in)",
            product_types(a_dtype, b_dtype, k, alpha=alpha).output,
            np.dtype(x.dtype),
        )
        return None
    return np.dtype(x.dtype)


def fallback_level(value: str | None) -> str:
    """``fallback=`` checked (``"warn"``, ``"error"``, ``"allow"``), or the setting's."""
    if value is None:
        return config.value("fallback")
    if not isinstance(value, str):
        raise InputTypeError(f"fallback = {value!r}: need a str ('warn', 'error' or 'allow')")
    return config.checked("fallback", value, "fallback")


def store_with_dask(
    x: Any,
    url: Any,
    client: Any,
    spec: JobSpec,
    part: str,
    fallback: str,
    *,
    caller: str = "outofcore.to_zarr",
    instead: str = "fallback='warn' lets dask.array store it",
    dimension_names: tuple[str, ...] | None = None,
) -> zarr.Array:
    """dask.array's ``to_zarr`` of ``x`` into an array outofcore creates at ``url`` (named
    ``dimension_names``, in ``spec.zarr_format``), marked complete once stored; ``part``
    (what dask computes and why, in words) warned of by ``caller``, or refused, as
    ``fallback`` says (``instead``: what to do about a refusal).

    Raises
    ------
    FallbackError
        Under ``fallback="error"``, before anything is written.
    InputError
        For options of an outofcore product in ``spec`` (dask.array takes none of them).
    """
    import dask.array as da  # noqa: PLC0415

    said = (
        f"{caller}: {part}; dask.array computes it, without outofcore's memory budget, resume "
        "or progress"
    )
    if fallback == "error":
        raise FallbackError(
            f"{said}: refused, as fallback='error' (or the outofcore.fallback setting) asks; "
            f"{instead}"
        )

    default = JobSpec()
    product_options = sorted(
        f.name
        for f in fields(JobSpec)
        if f.name not in ("overwrite", "storage_options", "progress", "zarr_format")
        and not (f.name == "chunks" and x.ndim >= 2)
        and getattr(spec, f.name) != getattr(default, f.name)
    )
    if product_options:
        raise InputError(
            f"{product_options} are options of an outofcore product, and {part}: it is "
            "stored by dask.array, which takes overwrite, storage_options, zarr_format and "
            "(for a matrix or a stack) chunks"
        )
    where = locate(url, spec.storage_options)
    clear_own_array(where, check_replaceable(where, deep=spec.overwrite), spec.overwrite)
    if fallback == "warn":
        said += " (fallback='error' refuses it, fallback='allow' says nothing)"
        warnings.warn(said, FallbackWarning, stacklevel=_caller_level())
    else:
        logger.info("%s", said)
    chunks = tuple(max(1, size) for size in x.chunksize)
    asked, _ = asked_layout(spec, *x.shape[-2:]) if x.ndim >= 2 else (None, None)
    if asked is not None:  # the matrices' chunks asked, clipped as a job's; a stack's batch 1
        chunks = (1,) * (x.ndim - 2) + tuple(max(1, size) for size in asked)
    record = {JOB_ATTRIBUTE: {"complete": False, "stored_by": "dask.array.to_zarr"}}
    names, attributes = named_dimensions(dimension_names, x.ndim, spec.zarr_format, record)
    target = zarr.create_array(
        where.target,
        **zarr_options(where),
        shape=x.shape,
        chunks=chunks,
        dtype=x.dtype,
        zarr_format=spec.zarr_format,
        dimension_names=names,
        attributes=attributes,
        config=WRITE_CONFIG,
    )
    with computing_on(client, config.number("connect-timeout", positive=True)):
        da.store(x.rechunk(chunks), target, lock=False)  # a block a chunk: whole chunks
    target.attrs[JOB_ATTRIBUTE] = {"complete": True, "stored_by": "dask.array.to_zarr"}
    return target


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside outofcore: the user's ``to_zarr``
    call, where the warning points."""
    import sys  # noqa: PLC0415

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level

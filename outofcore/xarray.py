"""``outofcore.xarray.dot``: ``xr.dot`` of zarr-backed DataArrays, out of core.

``dot(a, b, dim="sample", out="results.zarr")`` has ``xr.dot``'s meaning for two
DataArrays whose product is a matrix product: one contracted dimension, one more
dimension of each operand kept, and dimensions both share before those (a stack's
batch, in the same order) kept as they are.  The product runs as an outofcore job on
the zarr arrays behind ``a`` and ``b`` (:func:`outofcore.operands.interop.resolve`); the result is
written where xarray opens it, ``xr.open_dataarray(out, engine="zarr")``: a zarr group
holding the product (named ``name``) with its dimensions, and the coordinates ``xr.dot``
gives it.  The DataArray returned is that, opened lazily.

Coordinates are xarray's, never re-derived: before any work, ``xr.align`` and ``xr.dot``
themselves run on stand-ins of ``a`` and ``b`` (their coordinates over a zero-size
graph), which gives the alignment (the positions of each operand that xr.dot pairs,
with xarray's ``arithmetic_join``), the result's dims, coordinates and name, and
xarray's own refusals (duplicate or conflicting indexes).  Where the alignment reads
each operand as stored, or as one run of consecutive positions of a matrix (a window,
:mod:`outofcore.operands.windows`), the job reads exactly that; anything else (coordinates in
another order, shared values that are no run of positions, a stack's subset) is
computed by dask.array as ``xr.dot`` computes it, and stored in the group as the
product: a :class:`~outofcore.errors.FallbackWarning` naming the dimension and why (and
the lines that align and store the operands first, to run it out of core), or under
``fallback="error"`` a refusal before anything is written (issue 53).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from outofcore.errors import InputError
from outofcore.frontends.dask_store import fallback_level, store_with_dask
from outofcore.frontends.plan_report import DaskComputes, PlanReport
from outofcore.frontends.xarray_dot import (
    ALIGN_FIRST,
    DEFAULT_NAME,
    as_xr_dot,
    one_dim,
    product_dims,
    product_name,
    write_product,
)
from outofcore.jobs.preview import plan_product
from outofcore.jobs.spec import JobSpec, with_job_options
from outofcore.operands.interop import type_name

__all__ = ["DEFAULT_NAME", "SET_BY_DOT", "dot", "plan"]

#: Job options :func:`dot` sets from the dims; given as keywords they are refused.
SET_BY_DOT = ("transpose_a", "transpose_b", "dimension_names")


@with_job_options(excluding=SET_BY_DOT)
def dot(
    a: Any,
    b: Any,
    *,
    dim: Any = None,
    out: str,
    name: str | None = None,
    fallback: str | None = None,
    spec: JobSpec | None = None,
    client: Any = None,
    **options: Any,
) -> Any:
    """``xr.dot(a, b, dim=dim)`` computed out of core into the zarr group ``out``.

    Parameters
    ----------
    a, b
        ``xarray.DataArray`` objects whose data is a zarr array (``xr.open_dataarray(...,
        engine="zarr")``, with ``chunks=`` or without), or in memory with ``client="sync"``.
    dim
        The dimension summed over (a name, or a list of one); None: as ``xr.dot``, every
        dimension both share, which must be one.
    out
        Path or URL of the zarr group written: the product as ``out/name``, and one
        array for each coordinate of the result.
    name
        The product's name in ``out``; None: the name ``xr.dot`` gives it, else
        :data:`DEFAULT_NAME`.  A dimension's or coordinate's name is refused.
    fallback
        Where xr.dot's alignment is no read of the stored arrays (shared labels in
        another order, values that are no run of positions, a stack's subset), dask.array
        computes ``xr.dot`` and stores it: ``"warn"`` (a
        :class:`~outofcore.errors.FallbackWarning` naming the dimension and why),
        ``"allow"`` (silent) or ``"error"`` (a :class:`~outofcore.errors.FallbackError`
        before anything is written).  None: the ``outofcore.fallback`` setting (default
        ``"warn"``), as :func:`outofcore.to_zarr`.
    spec, client, **options
        As :func:`outofcore.matmul` (``memory``, ``overwrite``, ...), less the options
        the dims decide (:data:`SET_BY_DOT`).

    Returns
    -------
    xarray.DataArray
        ``xr.open_dataset(out, engine="zarr", chunks={})[name]``: the product's dims,
        coordinates and name, as ``xr.dot`` gives them (``xr.open_dataarray(out,
        engine="zarr")`` opens it too while the group holds no other variable).

    Raises
    ------
    TypeError
        For a keyword that is no option (``xr.dot``'s einsum ones included).
    InputError
        Before anything is written: when ``a`` and ``b`` do not make a matrix product
        (naming their dims), when ``xr.dot`` would refuse them, or for a ``name`` that is
        not one; a :class:`~outofcore.errors.FallbackError` under ``fallback="error"``
        where dask.array would compute it; where dask.array computes it, for job
        options it does not take (``memory``, ...).
    """
    import xarray as xr  # noqa: PLC0415

    job = _dot_job(a, b, dim, spec, options)
    name = product_name(name, job.reference)
    spec = job.spec
    store = None
    if job.reads is None:  # an alignment outofcore cannot read: dask computes xr.dot
        store = _by_dask(a, b, job, fallback_level(fallback), client)
    where = write_product(out, name, job.reads, job.reference, job.dims, spec, client, store)
    opened = xr.open_dataset(
        where.target,
        engine="zarr",
        consolidated=False,
        chunks={},
        backend_kwargs={"storage_options": spec.storage_options} if spec.storage_options else {},
    )
    return opened[name]


@with_job_options(excluding=SET_BY_DOT)
def plan(
    a: Any,
    b: Any,
    *,
    dim: Any = None,
    spec: JobSpec | None = None,
    client: Any = None,
    reprobe: bool = False,
    **options: Any,
) -> PlanReport | DaskComputes | None:
    """The plan :func:`dot` would run for ``xr.dot(a, b, dim=dim)``, with its predictions,
    as :func:`outofcore.plan` gives it (``str()``: the table ``outofcore plan`` prints;
    ``.runs`` names the product).  Nothing is written and no cluster starts; what
    :func:`dot` refuses is refused here, before anything.

    Parameters
    ----------
    a, b, dim, spec, client, **options
        As :func:`dot`.
    reprobe
        Measure this machine again for the predicted time instead of using its cached
        figures.

    Returns
    -------
    PlanReport, DaskComputes or None
        The plan; a :class:`~outofcore.frontends.plan_report.DaskComputes` naming the
        dimension where xr.dot's alignment is no read of the stored arrays (dask.array
        computes it: :func:`dot`'s ``fallback``); None for an empty product.
    """
    job = _dot_job(a, b, dim, spec, options)
    if job.reads is None:
        return DaskComputes(_dask_computes(job), True, job.call, "dot")
    product, job_plan = plan_product(*job.reads, job.spec, {}, client, reprobe)
    if job_plan is None:
        return None
    return PlanReport(job_plan, product, job.call)


@dataclass(frozen=True)
class _DotJob:
    """What :func:`dot` and :func:`plan` make of their arguments."""

    summed: Any
    dims: tuple[Any, ...]
    reference: Any
    #: What the job reads of a and b; None where xr.dot's alignment is no read of them
    #: (``unread`` says why) and dask computes the product.
    reads: tuple[Any, Any] | None
    spec: JobSpec
    unread: str = ""

    @property
    def call(self) -> str:
        """The product, as the user would write it."""
        return f"xr.dot(a, b, dim={self.summed!r})"


def _dask_computes(job: _DotJob) -> str:
    """Why dask computes ``job``'s product, in words that follow its call."""
    return f"aligns a and b as outofcore cannot read them ({job.unread})"


def _by_dask(a: Any, b: Any, job: _DotJob, fallback: str, client: Any) -> Callable[[str], Any]:
    """What stores ``xr.dot(a, b)`` with dask.array at a path (its data, as the stored
    arrays' chunks read it; warned of, or under ``fallback="error"`` refused, before
    anything is written: :func:`outofcore.frontends.dask_store.store_with_dask`)."""
    import dask.array as da  # noqa: PLC0415
    import xarray as xr  # noqa: PLC0415

    # The options the user gave (those dot sets from the dims are dask's to keep).
    options = replace(job.spec, transpose_a=False, transpose_b=False, dimension_names=None)
    part = f"{job.call} {_dask_computes(job)}"

    def store(url: str) -> Any:
        data = xr.dot(_as_dask(a), _as_dask(b), dim=job.summed).data  # lazy over dask
        if not isinstance(data, da.Array):  # operands in memory (client="sync")
            data = da.from_array(data, chunks=-1)
        return store_with_dask(
            data, url, client, options, part, fallback,
            caller="outofcore.xarray.dot", instead=f"to run it out of core, {ALIGN_FIRST}",
            dimension_names=job.spec.dimension_names,
        )  # fmt: skip

    return store


def _as_dask(x: Any) -> Any:
    """``x`` over dask, chunked as its zarr array is stored where it is opened lazily
    (``xr.open_dataarray`` without ``chunks=``), so that dask reads it in chunks; dask's
    or an in-memory one as it is."""
    if x.chunks is not None or "chunks" not in x.encoding:
        return x
    return x.chunk(dict(zip(x.dims, x.encoding["chunks"], strict=False)))


def _dot_job(a: Any, b: Any, dim: Any, spec: JobSpec | None, options: Mapping[str, Any]) -> _DotJob:
    """The product ``xr.dot(a, b, dim=dim)`` is, checked before any work: the summed and
    kept dims, xr.dot's result on stand-ins, what the job reads of each operand, and the
    job's spec with the transposes and dimension names the dims decide."""
    import xarray as xr  # noqa: PLC0415

    _check_options(options, spec)
    for label, x in (("a", a), ("b", b)):
        if not isinstance(x, xr.DataArray):
            raise InputError(f"{label} is a {type_name(x)}; outofcore.xarray.dot takes DataArrays")
    summed, batch, kept = product_dims(a.dims, b.dims, one_dim(dim))
    dims = (*batch, *kept)
    xr_dot = as_xr_dot(a, b, summed, dims)
    job_spec = replace(
        JobSpec.of(spec, options),
        transpose_a=a.dims[-2] == summed,
        transpose_b=b.dims[-1] == summed,
        dimension_names=tuple(str(d) for d in dims),
    )
    return _DotJob(summed, dims, xr_dot.reference, xr_dot.reads, job_spec, xr_dot.unread)


def _check_options(options: Mapping[str, Any], spec: JobSpec | None) -> None:
    """Refuse a keyword that is no job option (TypeError, as Python does), and the job
    options the dims decide, as keywords or in ``spec``."""
    known = {f.name for f in fields(JobSpec)}
    for key in options:
        if key not in known or key in SET_BY_DOT:
            why = (
                "dot sets it from the dims"
                if key in SET_BY_DOT
                else f"the options are outofcore.matmul's: {sorted(known - set(SET_BY_DOT))}"
            )
            raise TypeError(f"dot() got an unexpected keyword argument {key!r} ({why})")
    for key in SET_BY_DOT if spec is not None else ():
        if getattr(spec, key) not in (False, None):
            raise InputError(
                f"spec sets {key}={getattr(spec, key)!r}; outofcore.xarray.dot sets it from the "
                "dims (leave it at its default)"
            )

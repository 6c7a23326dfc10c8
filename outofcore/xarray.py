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
refused, naming the dimension and why, with the lines that align and store the
operands first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any

from outofcore.errors import InputError
from outofcore.frontends.xarray_dot import (
    DEFAULT_NAME,
    as_xr_dot,
    one_dim,
    product_dims,
    product_name,
    write_product,
)
from outofcore.jobs.spec import JobSpec, with_job_options
from outofcore.operands.interop import type_name

__all__ = ["DEFAULT_NAME", "SET_BY_DOT", "dot"]

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
        (naming their dims), when ``xr.dot`` would refuse them, when its alignment is
        not a read of the stored arrays (naming the dimension and why), or for a
        ``name`` that is not one.
    """
    import xarray as xr  # noqa: PLC0415

    _check_options(options, spec)
    for label, x in (("a", a), ("b", b)):
        if not isinstance(x, xr.DataArray):
            raise InputError(f"{label} is a {type_name(x)}; outofcore.xarray.dot takes DataArrays")
    summed, batch, kept = product_dims(a.dims, b.dims, one_dim(dim))
    spec = JobSpec.of(spec, options)
    dims = (*batch, *kept)
    reference, (a_read, b_read) = as_xr_dot(a, b, summed, dims)
    name = product_name(name, reference)
    spec = replace(
        spec,
        transpose_a=a.dims[-2] == summed,
        transpose_b=b.dims[-1] == summed,
        dimension_names=tuple(str(d) for d in dims),
    )
    where = write_product(out, name, (a_read, b_read), reference, dims, spec, client)
    opened = xr.open_dataset(
        where.target,
        engine="zarr",
        consolidated=False,
        chunks={},
        backend_kwargs={"storage_options": spec.storage_options} if spec.storage_options else {},
    )
    return opened[name]


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

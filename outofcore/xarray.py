"""``outofcore.xarray.dot``: ``xr.dot`` of zarr-backed DataArrays, out of core.

``dot(a, b, dim="sample", out="results.zarr")`` has ``xr.dot``'s meaning for two
DataArrays whose product is a matrix product: one contracted dimension, one more
dimension of each operand kept, and dimensions both share before those (a stack's
batch, in the same order) kept as they are.  The product runs as an outofcore job on
the zarr arrays behind ``a`` and ``b`` (:func:`outofcore.interop.resolve`); the result is
written where xarray opens it, ``xr.open_dataarray(out, engine="zarr")``: a zarr group
holding the product (named ``name``) with its dimensions, and the coordinates of its kept
dimensions.  The DataArray returned is that, opened lazily.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import numpy as np
import zarr

from outofcore.api import matmul
from outofcore.errors import InputError
from outofcore.generate import clear_own_array
from outofcore.interop import type_name
from outofcore.locations import Location, locate
from outofcore.spec import JobSpec
from outofcore.stores import zarr_options
from outofcore.targets import JOB_ATTRIBUTE, check_replaceable

#: The name of the product's array in the output group, unless ``name`` is given.
DEFAULT_NAME = "dot"


def dot(
    a: Any,
    b: Any,
    *,
    dim: str | None = None,
    out: str,
    name: str = DEFAULT_NAME,
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
        The dimension summed over; None: the one dimension both share that is not a
        leading (batch) dimension of both.
    out
        Path or URL of the zarr group written: the product as ``out/name``, and one
        array for each coordinate of a kept dimension.
    spec, client, **options
        As :func:`outofcore.matmul` (``memory``, ``overwrite``, ...).

    Returns
    -------
    xarray.DataArray
        ``xr.open_dataset(out, engine="zarr", chunks={})[name]``: the product's dims and
        the coordinates of the kept dimensions (``xr.open_dataarray(out, engine="zarr")``
        opens it too while the group holds no other variable).

    Raises
    ------
    InputError
        When ``a`` and ``b`` do not make a matrix product (no shared dimension to sum,
        several, or kept dimensions of one name, which ``xr.dot`` would not multiply but
        match), naming their dims.
    """
    import xarray as xr  # noqa: PLC0415

    for label, x in (("a", a), ("b", b)):
        if not isinstance(x, xr.DataArray):
            raise InputError(f"{label} is a {type_name(x)}; outofcore.xarray.dot takes DataArrays")
    summed, batch, kept = _dims(a.dims, b.dims, dim)
    spec = JobSpec.of(spec, options)
    dims = (*batch, *kept)
    options = {
        "transpose_a": a.dims[-2] == summed,
        "transpose_b": b.dims[-1] == summed,
        "dimension_names": dims,
    }
    spec = replace(spec, **options)
    where = locate(out, spec.storage_options)
    _open_group(where)
    matmul(a, b, f"{out}/{name}", spec, client=client)
    for coordinate in dims:
        values = _coordinate(a, b, coordinate)
        if values is not None:
            _write_coordinate(out, coordinate, values, spec)
    opened = xr.open_dataset(
        where.target,
        engine="zarr",
        consolidated=False,
        chunks={},
        backend_kwargs={"storage_options": spec.storage_options} if spec.storage_options else {},
    )
    return opened[name]


def _dims(
    a_dims: tuple[Any, ...], b_dims: tuple[Any, ...], dim: str | None
) -> tuple[Any, tuple[Any, ...], tuple[Any, Any]]:
    """The summed dimension, the batch dimensions and the two kept ones of ``a @ b``."""
    said = f"a has dims {a_dims} and b {b_dims}"
    if len(a_dims) < 2 or len(b_dims) < 2 or len(a_dims) != len(b_dims):
        raise InputError(
            f"{said}: outofcore.xarray.dot multiplies two matrices, or two stacks of "
            "matrices with the same leading dims"
        )
    batch = tuple(a_dims[:-2])
    if tuple(b_dims[:-2]) != batch:
        raise InputError(f"{said}: the leading (batch) dims must be the same, in one order")
    shared = [d for d in a_dims[-2:] if d in b_dims[-2:]]
    if dim is None:
        if len(shared) != 1:
            raise InputError(f"{said}: give dim=, the one dimension to sum over")
        dim = shared[0]
    if dim not in a_dims[-2:] or dim not in b_dims[-2:]:
        raise InputError(f"{said}: dim={dim!r} is not one of the last two dims of both")
    (i,) = [d for d in a_dims[-2:] if d != dim]
    (j,) = [d for d in b_dims[-2:] if d != dim]
    if i == j:
        raise InputError(
            f"{said}: both keep {i!r}, which xr.dot matches instead of multiplying; rename "
            f"one (b.rename({{{i!r}: {i + '_2' if isinstance(i, str) else 'other'!r}}}))"
        )
    return dim, batch, (i, j)


def _open_group(where: Location) -> None:
    """Open the zarr group ``where``, or create it where nothing is: a folder of other
    files, or an array, is refused (nothing is written into it)."""
    if where.is_local and os.path.exists(where.path):
        names = set(os.listdir(where.path)) if os.path.isdir(where.path) else None
        if names is not None and not names:
            pass  # an empty folder: the group is made in it
        elif names is None or not names & {"zarr.json", ".zgroup"}:
            raise InputError(
                f"out {str(where)!r} is {'a file' if names is None else 'a folder'} that is "
                "not a zarr group; choose a new path (a group is created there)"
            )
    try:
        zarr.open_group(where.target, mode="a", **zarr_options(where))
    except (ValueError, KeyError, OSError) as exc:  # an array there, or metadata zarr refuses
        raise InputError(f"out {str(where)!r} is not a zarr group ({exc})") from None


def _coordinate(a: Any, b: Any, dim: Any) -> np.ndarray | None:
    """The values of the index coordinate of ``dim`` in ``a`` (else ``b``), or None."""
    for x in (a, b):
        if dim in x.coords and x.coords[dim].dims == (dim,):
            return np.asarray(x.coords[dim].values)
    return None


def _write_coordinate(out: str, dim: Any, values: np.ndarray, spec: JobSpec) -> None:
    """Write coordinate ``dim`` into the group ``out`` (an array of outofcore's: replaced
    only with ``overwrite``, as any output)."""
    where = locate(f"{out}/{dim}", spec.storage_options)
    clear_own_array(where, check_replaceable(where, deep=spec.overwrite), spec.overwrite)
    zarr.create_array(
        where.target,
        **zarr_options(where),
        data=values,
        dimension_names=(str(dim),),
        attributes={JOB_ATTRIBUTE: {"complete": True, "coordinate_of": str(out)}},
    )

"""The machinery of :func:`outofcore.xarray.dot`: dimensions and alignment as ``xr.dot`` has
them (xarray's own ``align`` and ``dot`` on stand-ins), the windows read, the output's group,
name and coordinates."""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from outofcore.errors import InputError, OutputExistsError
from outofcore.frontends.generate import clear_own_array
from outofcore.jobs.entry import matmul
from outofcore.jobs.spec import JobSpec
from outofcore.journal.targets import JOB_ATTRIBUTE, Occupant, check_replaceable
from outofcore.operands.interop import Operand, resolve
from outofcore.operands.stacking import Window
from outofcore.storage.locations import Location, locate
from outofcore.storage.stores import zarr_options

#: The name of the product's array in the output group when neither ``name`` nor
#: ``xr.dot`` gives one (``xr.dot`` names the product after its operands when they
#: share a name, else None).
DEFAULT_NAME = "dot"


#: Name of the stand-ins' coordinate of positions along a dimension (and its number).
_POSITION = "\0outofcore position along dim {}"


def one_dim(dim: Any) -> Any:
    """``dim`` as one name: a list, tuple or set of one name is that name (as ``xr.dot``
    reads it); None stays None."""
    if isinstance(dim, list | tuple | set | frozenset):
        if len(dim) != 1:
            raise InputError(
                f"dim={dim!r}: outofcore.xarray.dot sums over one dimension (a matrix product)"
            )
        (dim,) = dim
    if dim is not None and not isinstance(dim, Hashable):
        raise InputError(f"dim={dim!r} is not a dimension name")
    return dim


def product_dims(
    a_dims: tuple[Any, ...], b_dims: tuple[Any, ...], dim: Any
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
    if dim is None:  # xr.dot sums every dimension both have, batch ones too
        shared = [d for d in a_dims if d in b_dims]
        if len(shared) != 1:
            raise InputError(
                f"{said}: without dim=, xr.dot sums over every dimension both have "
                f"({shared}), which is no matrix product; give dim=, the one dimension to sum over"
            )
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
    for d in (*batch, i, j):
        if not isinstance(d, str):
            raise InputError(f"{said}: the result's dim {d!r} is no str; zarr names dims by str")
    return dim, batch, (i, j)


@dataclass(frozen=True)
class XrDot:
    """``xr.dot`` of two operands as outofcore sees it, before any work."""

    #: ``xr.dot`` of stand-ins (nothing computed): the result's dims, coordinates and name.
    reference: Any
    #: What the job reads for each operand as xr.dot aligns it (the DataArray itself, or
    #: the window of its stored array); None where the alignment is no read of them.
    reads: tuple[Any, Any] | None
    #: Why the alignment is no read (naming the dimension), where ``reads`` is None.
    unread: str = ""


class _NotARead(Exception):
    """The alignment xr.dot makes of an operand is no read of its stored array."""


def as_xr_dot(a: Any, b: Any, summed: Any, dims: tuple[Any, ...]) -> XrDot:
    """``xr.dot(a, b, dim=summed)`` of stand-ins of ``a`` and ``b``, and what the job reads
    of each as xr.dot aligns it, or why that alignment is no read of them.

    Raises
    ------
    InputError
        Where xarray refuses the operands.
    """
    import xarray as xr  # noqa: PLC0415
    from xarray.core.options import OPTIONS  # noqa: PLC0415

    join = "exact" if OPTIONS["arithmetic_join"] == "exact" else "inner"  # as xr.dot
    try:
        reference = xr.dot(_stand_in(a), _stand_in(b), dim=summed)
        aligned = xr.align(_stand_in(a, True), _stand_in(b, True), join=join, copy=False)
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(
            f"xr.dot(a, b, dim={summed!r}) refuses a and b (dims {a.dims} and {b.dims}): "
            f"{exc}; outofcore computes only what xr.dot computes: fix the coordinates (unique "
            "values, or .drop_vars), store the operands, and pass the stored copies"
        ) from None
    if tuple(reference.dims) != dims:  # xr.dot's dims are the job's, or nothing runs
        raise InputError(
            f"xr.dot(a, b, dim={summed!r}) gives dims {reference.dims}, not the matrix "
            f"product's {dims}"
        )
    positions = [_positions(x, y) for x, y in zip((a, b), aligned, strict=True)]
    why = {d: _why_differ(a, b, d, positions, join) for p in positions for d in p}
    try:
        reads = (_read(a, "a", positions[0], why), _read(b, "b", positions[1], why))
    except _NotARead as exc:
        return XrDot(reference, None, str(exc))
    return XrDot(reference, reads)


def _stand_in(x: Any, positions: bool = False) -> Any:
    """A DataArray with ``x``'s dims, coordinates and name over a graph that computes
    nothing; ``positions``: with a coordinate of positions along each dim."""
    import dask.array as da  # noqa: PLC0415
    import xarray as xr  # noqa: PLC0415

    data = da.zeros(x.shape, dtype=np.int8, chunks=-1)
    stand_in = xr.DataArray(data, dims=x.dims, coords=x.coords, name=x.name)
    if not positions:
        return stand_in
    names = {_POSITION.format(i): (d, np.arange(n)) for i, (d, n) in enumerate(x.sizes.items())}
    if set(names) & set(x.coords):
        raise InputError(f"a coordinate of {x.name!r} is named as outofcore's own: {set(x.coords)}")
    return stand_in.assign_coords(names)


def _positions(x: Any, aligned: Any) -> dict[Any, np.ndarray]:
    """The positions of ``x`` that its alignment ``aligned`` reads along each dimension
    where they are not all of them, in order."""
    moved = {}
    for i, (d, n) in enumerate(x.sizes.items()):
        at = np.asarray(aligned.coords[_POSITION.format(i)].values)
        if at.shape != (n,) or not np.array_equal(at, np.arange(n)):
            moved[d] = at
    return moved


def _run(at: np.ndarray) -> slice | None:
    """``at`` as one slice of consecutive positions (a unit step), or None."""
    if at.size == 0 or not np.array_equal(at, np.arange(at[0], at[0] + at.size)):
        return None
    return slice(int(at[0]), int(at[0]) + at.size)


def _read(x: Any, label: str, moved: dict[Any, np.ndarray], why: dict[Any, str]) -> Any:
    """What the job reads for operand ``x`` (``label``) aligned as xr.dot aligns it:
    ``x`` where that reads all of it, the window of a matrix where it reads one run of
    positions along one dim; anything else is refused, with ``why`` (by dim)."""
    if not moved:
        return x
    d, at = next(iter(moved.items()))
    run = _run(at)
    if x.ndim != 2 or len(moved) != 1 or run is None:
        reads = "a stack only whole" if x.ndim != 2 else "a matrix whole or one run of positions"
        raise _NotARead(
            f"{why[d]}; xr.dot aligns them first (the shared values, paired by value), and "
            f"outofcore reads each operand as stored ({reads}), which this alignment of "
            f"{label} is not"
        )
    operand = resolve(x, label, None)
    if operand.steps:
        raise _NotARead(
            f"{why[d]}, and {label} computes something ({len(operand.steps)} elementwise "
            "steps), which outofcore does not read in part"
        )
    axis = x.dims.index(d)
    stored_axis = 1 - axis if operand.transposed else axis
    whole = tuple(x.shape[::-1]) if operand.transposed else tuple(x.shape)
    base = operand.window or Window((0, 0), whole)
    start, shape = [0, 0], list(base.shape)
    start[stored_axis], shape[stored_axis] = run.start, run.stop - run.start
    window = base.within(Window(tuple(start), tuple(shape)))
    return Operand(operand.source, operand.transposed, operand.steps, window)


#: What to do about an alignment outofcore cannot read, to run the product out of core.
ALIGN_FIRST = (
    "align and store them first, then pass the stored copies: a, b = xr.align(a, b); "
    "a.to_zarr('a_aligned.zarr'); b.to_zarr('b_aligned.zarr'); and reopen each with "
    "xr.open_dataarray(path, engine='zarr', chunks={})"
)


def _why_differ(a: Any, b: Any, d: Any, positions: list[dict[Any, np.ndarray]], join: str) -> str:
    """How the coordinates of ``d`` differ between ``a`` and ``b``, and what xr.dot
    does about it (its ``join``), in words."""
    values = [np.asarray(x.indexes[d]) if d in x.indexes else None for x in (a, b)]
    shared = next((len(p[d]) for p in positions if d in p), 0)
    said = f"the coordinates of dimension {d!r} differ between a and b"
    if values[0] is None or values[1] is None:
        return f"{said} (one has no index, and their sizes differ)"
    sizes = f"a has {len(values[0])} values, b {len(values[1])}, {shared} shared"
    if shared == 0:
        how = f"they share no value ({sizes}: xr.dot's {join} join sums over none)"
    elif len(values[0]) == len(values[1]) == shared:
        how = f"the same values in another order ({sizes})"
    elif shared in (len(values[0]), len(values[1])):
        how = f"they differ in length ({sizes})"
    else:
        how = f"they overlap only in part ({sizes})"
    return f"{said}: {how}"


def _check_group(where: Location) -> bool:
    """Whether a zarr group is at ``where`` (False: nothing, or an empty folder, where
    :func:`_make_group` makes one after the job); a file, a folder of other files, or an
    array is refused, and nothing is written into it."""
    if where.is_local and os.path.exists(where.path):
        names = set(os.listdir(where.path)) if os.path.isdir(where.path) else None
        if names is not None and not names:
            return False  # an empty folder: the group is made in it
        if names is None or not names & {"zarr.json", ".zgroup"}:
            raise InputError(
                f"out {str(where)!r} is {'a file' if names is None else 'a folder'} that is "
                "not a zarr group; choose a new path (a group is created there)"
            )
    try:
        zarr.open_group(where.target, mode="r", **zarr_options(where))
    except FileNotFoundError:
        return False
    except (ValueError, KeyError, OSError) as exc:  # an array there, or metadata zarr refuses
        raise InputError(f"out {str(where)!r} is not a zarr group ({exc})") from None
    return True


def _make_group(where: Location, zarr_format: int) -> None:
    """Make the zarr group ``where`` (of the product's ``zarr_format``) where none is."""
    zarr.open_group(where.target, mode="a", zarr_format=zarr_format, **zarr_options(where))


def _unmake_group(where: Location, remove_folder: bool) -> None:
    """Delete the group :func:`_make_group` made at ``where`` while it holds no member
    (its metadata, and with ``remove_folder`` a local folder left empty)."""
    from zarr.core.sync import sync  # noqa: PLC0415

    group = zarr.open_group(where.target, mode="a", **zarr_options(where))
    if list(group.keys()):
        return
    for key in ("zarr.json", ".zgroup", ".zattrs"):
        sync(group.store.delete(f"{group.path}/{key}" if group.path else key))
    if (
        remove_folder
        and where.is_local
        and os.path.isdir(where.path)
        and not os.listdir(where.path)
    ):
        os.rmdir(where.path)


def product_name(name: Any, reference: Any) -> str:
    """The product's name in the group: ``name``, else xr.dot's, else :data:`DEFAULT_NAME`;
    refused where xarray could not store it beside the result's dims and coordinates."""
    said = "name"
    if name is None:
        name, said = reference.name, "xr.dot's name for the product (its operands' name)"
        if name is None:
            name, said = DEFAULT_NAME, "name"
    _check_node_name(name, said)
    taken = {str(d) for d in (*reference.dims, *reference.coords)}
    if name in taken:
        raise InputError(
            f"{said} {name!r} is the name of a dimension or coordinate of the product "
            f"({sorted(taken)}); xarray cannot store a DataArray under it (DataArray.to_dataset "
            "refuses it, or reads it back as a coordinate): pass another name="
        )
    return name


def _check_node_name(name: Any, said: str) -> None:
    """Refuse a name that is no member of a zarr group: not a str, empty, ``.``, ``..``,
    or holding a path separator (it would be written outside the group)."""
    if not isinstance(name, str) or name in ("", ".", "..") or any(c in name for c in "/\\\0"):
        raise InputError(
            f"{said} {name!r} is no name of an array in a zarr group (a non-empty str, not "
            "'.' or '..', without '/', '\\' or NUL)"
        )


def _coordinates(reference: Any) -> Any:
    """The coordinates of xr.dot's result ``reference`` as a Dataset to store: values
    loaded (in this process), no encoding of the operands', outofcore's mark on each."""
    import dask  # noqa: PLC0415
    import xarray as xr  # noqa: PLC0415

    coordinates = xr.Dataset(coords=reference.coords)
    for key in coordinates.variables:
        _check_node_name(key, "the coordinate")
    with dask.config.set(scheduler="sync"):
        coordinates = coordinates.compute()
    for variable in coordinates.variables.values():
        variable.encoding = {}
        variable.attrs = {**variable.attrs, JOB_ATTRIBUTE: {"complete": True, "coordinate": True}}
    try:  # stored in memory first: what xarray cannot store is refused before the job
        coordinates.to_zarr(zarr.storage.MemoryStore(), consolidated=False)
    except (ValueError, TypeError, NotImplementedError) as exc:
        raise InputError(
            f"xarray cannot store the coordinates xr.dot gives the result "
            f"({sorted(map(str, coordinates.variables))}): {exc}; drop or convert them "
            "first (.drop_vars, .reset_index)"
        ) from None
    return coordinates


def _coordinate_targets(
    where: Location, coordinates: Any, dims: tuple[str, ...], spec: JobSpec
) -> dict[str, tuple[Location, Occupant]]:
    """What is at each path of the group ``where`` that the result's coordinates take, or
    that xarray would read as one (a dim's name, a coordinate outofcore wrote before),
    checked before any work: someone else's array there is refused, one of outofcore's
    is replaced only with ``overwrite``."""
    names = {*map(str, coordinates.variables), *dims, *_own_coordinates(where)}
    targets = {}
    for name in sorted(names):
        _check_node_name(name, "the dimension")
        at = locate(f"{where.target}/{name}", spec.storage_options)
        occupant = check_replaceable(at, deep=spec.overwrite)
        if occupant.kind != "nothing" and not spec.overwrite:
            raise OutputExistsError(
                f"{str(at)!r} already exists (a coordinate of the product); pass "
                "overwrite=True to replace it"
            )
        targets[name] = (at, occupant)
    return targets


def _own_coordinates(where: Location) -> list[str]:
    """The arrays of the group ``where`` that an earlier :func:`dot` wrote as coordinates."""
    group = zarr.open_group(where.target, mode="r", **zarr_options(where))
    own = []
    for key, member in group.members():
        mark = member.attrs.get(JOB_ATTRIBUTE) if isinstance(member, zarr.Array) else None
        if isinstance(mark, dict) and ("coordinate" in mark or "coordinate_of" in mark):
            own.append(key)
    return own


def _write_coordinates(
    where: Location,
    coordinates: Any,
    targets: dict[str, tuple[Location, Occupant]],
    overwrite: bool,
) -> None:
    """Clear the ``targets`` outofcore made (checked before the job), then store the
    ``coordinates`` into the group as xarray does (``to_zarr``: its encodings, and the
    group's ``coordinates`` attribute naming those that index no dim)."""
    for at, occupant in targets.values():
        clear_own_array(at, occupant, overwrite)
        if at.is_local and os.path.isdir(at.path) and not os.listdir(at.path):
            os.rmdir(at.path)  # an empty folder left: zarr would warn of it as no member
    group = zarr.open_group(where.target, mode="a", **zarr_options(where))
    listed = group.attrs.get("coordinates")
    if isinstance(listed, str) and set(listed.split()) <= set(targets):
        del group.attrs["coordinates"]  # an earlier result's; xarray writes this one's
    coordinates.to_zarr(
        where.target,
        mode="a",
        consolidated=False,
        storage_options=zarr_options(where).get("storage_options"),
    )


def write_product(
    out: str,
    name: str,
    reads: tuple[Any, Any] | None,
    reference: Any,
    dims: tuple[Any, ...],
    spec: JobSpec,
    client: Any,
    store: Callable[[str], Any] | None = None,
) -> Location:
    """Write ``xr.dot``'s product (``reference``: its stand-in) into the group ``out``:
    the group made where there is none (and removed again, with a folder made for it, when
    the job is refused before any work), the product as ``out/name`` from the operands'
    ``reads`` (or, where ``reads`` is None, by ``store`` of that path), then its
    coordinates.  Returns the group's location."""
    coordinates = _coordinates(reference)
    where = locate(out, spec.storage_options)
    made = not _check_group(where)
    folder = where.is_local and os.path.isdir(where.path)  # an empty one of the user's
    if made:
        _make_group(where, spec.zarr_format)
    try:
        targets = _coordinate_targets(where, coordinates, dims, spec)
        if reads is not None:
            matmul(*reads, f"{out}/{name}", spec, client=client)
        elif store is not None:
            store(f"{out}/{name}")
        else:  # pragma: no cover (dot passes one or the other)
            raise RuntimeError("write_product got neither reads nor store")
    except InputError:  # refused before any work: the group made for it goes too
        if made:
            _unmake_group(where, remove_folder=not folder)
        raise
    _write_coordinates(where, coordinates, targets, spec.overwrite)
    return where

"""Arrays of the PyData stack given as job arguments: dask arrays read from zarr, numpy arrays.

A job reads zarr arrays, so that its workers can read them, its inputs can be
fingerprinted for a resume, and its memory contract holds.  Other arrays are
taken only where those guarantees still hold:

* a dask array that does nothing but read one zarr array, built by
  ``da.from_zarr`` (or ``da.from_array`` of a ``zarr.Array``), possibly
  transposed (``.T``, ``.transpose()``): the job reads that zarr array
  directly, as if it had been given (transposed by flag, never copied).  Its
  dask chunks play no part: tiles follow the stored chunks.  A local array dask
  opened through fsspec is reopened by its path, so a resume sees one array
  however it was spelled;
* a numpy array: copied into an in-memory zarr array (chunks of at most
  :data:`IN_MEMORY_CHUNK` per side), which runs where the tasks run in this process
  (``client="sync"``, ``dask.config``'s ``"threads"``, the job's own LocalCluster of
  worker threads, a user's ``LocalCluster(processes=False)``:
  :func:`outofcore.runtime.in_process.tasks_run_here`; the job stays here, never pickled into
  its tasks: :mod:`outofcore.runtime.job_argument`) and is fingerprinted by content, as any
  in-memory zarr array.  Dask worker processes cannot see this process's memory, so
  with those it is refused before any work, with the line that stores it
  (:func:`check_shareable`);
* any other dask array (sliced, rechunked, computed): refused, with the line
  that stores it (``da.to_zarr``).  The job does not compute graphs: a graph's
  name does not change when the data it reads does, so a resume could not
  tell that its input changed, and its blocks' memory is outside the plan.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr
from zarr.storage import FsspecStore, MemoryStore

from outofcore.errors import InputError
from outofcore.operands.dask_graph import Vectors, steps_behind
from outofcore.operands.dtypes import check_input_dtype
from outofcore.operands.joined import Joined
from outofcore.operands.steps import Step, applicable, result_dtype
from outofcore.runtime.gpu_cluster import GpuNode
from outofcore.runtime.in_process import tasks_run_here
from outofcore.storage.locations import locate

if TYPE_CHECKING:
    from outofcore.operands.stacking import Window

#: Largest chunk edge of the in-memory zarr copy of a numpy input.
IN_MEMORY_CHUNK = 1024
#: Chunk edge the refusal messages suggest for a stored copy.
SUGGESTED_CHUNK = 2048


@dataclass(frozen=True)
class Operand:
    """An argument as outofcore reads it: a zarr array (or its path or URL), whether the
    argument is its transpose, and the elementwise steps applied as it is read
    (:mod:`outofcore.operands.dask_graph`; ``()`` for a stored array read as it is)."""

    source: Any
    transposed: bool = False
    steps: tuple[Step, ...] = ()
    #: The region of the stored array read (a slice ``x[:, :1000]``); None: all of it.
    window: Window | None = None


def resolve(
    source: Any,
    label: str,
    dtypes: tuple[np.dtype, ...] | None,
    vectors: Vectors | None = None,
) -> Operand:
    """What to open for the argument ``source`` (called ``label`` in messages): the
    array, whether the argument is its transpose, and the steps that compute it.

    Zarr arrays, paths and URLs are returned as they are; see the module docstring
    for dask and numpy arrays.  ``dtypes``: the dtypes a numpy array may have (None:
    any), checked before it is copied.  An :class:`Operand` is returned as it is.
    ``vectors`` keeps the vectors of elementwise steps between the operands of one
    product (:class:`outofcore.operands.dask_graph.Vectors`).

    Raises
    ------
    InputError
        For a dask array that is more than a read of one zarr array, a numpy array
        of a dtype not taken, or an object of any other type,
        naming its type and what to do.
    """
    if isinstance(source, Operand):
        return source
    given = source  # what the user passed: the line that stores it is for it
    if _is_data_array(source):  # its zarr array, dask array or numpy values
        source, label = _data_array_data(source, label)
    if isinstance(source, zarr.Array | str | os.PathLike):
        return Operand(source)
    if _is_dask_array(source):
        found = zarr_behind(source)
        if found is not None:
            return Operand(*found)
        found = _computed_behind(source, vectors)
        if found is None:
            raise InputError(
                f"{label} is a dask array ({type_name(source)} {source.name!r}) that computes "
                f"something ({_layer_summary(source)}), not one that only reads a zarr array; "
                "outofcore reads stored arrays (it cannot fingerprint a graph for a resume, nor "
                "bound its memory). Store it first, then pass the path: "
                f"{store_line(label, given)}"
            )
        return found
    if isinstance(source, np.ndarray) and not isinstance(source, np.ma.MaskedArray):
        return Operand(_in_memory(source, label, dtypes))
    raise InputError(
        f"{label} is a {type_name(source)}; outofcore reads a zarr.Array, a path or URL of one, "
        "a dask array made by da.from_zarr (or its .T), or a numpy array (in this process, "
        f"client='sync'). Store it as a zarr array first, e.g. {store_line(label, source)}"
    )


def zarr_behind(x: Any) -> tuple[zarr.Array, bool] | None:
    """The zarr array a dask array ``x`` only reads, and whether ``x`` is its transpose;
    None when ``x`` is anything more (a slice, rechunk, arithmetic, another source).

    ``x``'s graph must be: the zarr array (a layer of its own, or inlined in the
    reading task), one blockwise layer reading it whole with dask's ``getter``, and
    any number of transposes of the last two axes on top (``.T`` of a 2-D array,
    ``.mT`` or ``swapaxes(-1, -2)`` of any; ``.T`` of a 1-D array is itself).
    """
    graph = x.__dask_graph__()
    if getattr(graph, "layers", None) is None or x.ndim < 1:
        return None
    found = layer_reads(graph, x.name, x.ndim)
    if found is None:
        return None
    source, transposed = found
    shape = tuple(x.shape[:-2]) + tuple(x.shape[-2:][::-1]) if transposed else tuple(x.shape)
    if shape != tuple(source.shape) or np.dtype(x.dtype) != np.dtype(source.dtype):
        return None
    return by_path(source), transposed


def _computed_behind(x: Any, vectors: Vectors | None = None) -> Operand | None:
    """A 2-D dask array that is a stored zarr array with elementwise steps (a centred
    or scaled matrix, ``astype``) and slices (``x[:, :1000]``): that array, its flag, the
    steps, with the vectors they use computed now, and the region read
    (:func:`outofcore.operands.dask_graph.steps_behind`); None otherwise."""
    if x.ndim != 2:
        return None
    graph = x.__dask_graph__()
    found = steps_behind(graph, x.name, lambda graph, name: layer_reads(graph, name, 2), vectors)
    if found is None:
        return None
    array, transposed, steps, window = found
    shape = tuple(x.shape[::-1]) if transposed else tuple(x.shape)
    read = tuple(array.shape) if window is None else window.shape
    if shape != read or result_dtype(steps, array.dtype) != np.dtype(x.dtype):
        return None
    if steps and not applicable(steps, array.dtype):
        return None
    return Operand(by_path(array), transposed, steps_by_path(steps), window)


def steps_by_path(steps: tuple[Step, ...]) -> tuple[Step, ...]:
    """``steps`` with their stored other operands (``x * y``) reopened :func:`by_path`."""
    return tuple(replace(s, other=by_path(s.other)) if s.stored_other else s for s in steps)


def layer_reads(graph: Any, name: str, ndim: int) -> tuple[zarr.Array, bool] | None:
    """The zarr array that layer ``name`` of a high-level dask ``graph`` (an array of
    ``ndim`` dimensions) only reads, and whether the layer is its transpose; None when
    the layer, or any layer below it, does anything more (:func:`zarr_behind`'s rule)."""
    below_all = _below(graph, name)
    transposed, seen = False, set()
    while (swaps := _transpose_swaps(_layer(graph, name), ndim)) is not None:
        seen.add(name)
        transposed = transposed != swaps
        below = graph.dependencies.get(name, set())
        if len(below) != 1:
            return None
        (name,) = below
    reader = _layer(graph, name)
    if not _is_getter(reader) or len(reader.indices) != 2:
        return None
    seen.add(name)
    source = reader.indices[0][0]  # the array, or a reference to the layer holding it
    if not isinstance(source, zarr.Array):
        key = getattr(source, "key", None)
        holder = _layer(graph, key)
        if holder is None or graph.dependencies.get(name) != {key} or len(holder) != 1:
            return None
        seen.add(key)
        source = _unwrap_xarray(holder[key])  # xarray's adapters of a zarr array, or it
    if not isinstance(source, zarr.Array) or seen != below_all or source.ndim != ndim:
        return None
    return source, transposed


def _is_data_array(value: Any) -> bool:
    """Whether ``value`` is an ``xarray.DataArray`` (xarray is not imported for it)."""
    xarray = sys.modules.get("xarray")
    return xarray is not None and isinstance(value, xarray.DataArray)


def _data_array_data(x: Any, label: str) -> tuple[Any, str]:
    """The data of an ``xarray.DataArray`` as outofcore takes it: the zarr array under
    xarray's lazy wrappers, its dask array, or the numpy array of values in memory; and
    how messages call it.  Values xarray decodes on reading (a fill value masked to NaN,
    a scale or an offset) are refused: outofcore reads the stored values."""
    what = f"{label} (the xarray.DataArray {x.name!r}, dims {x.dims})"
    decoded = sorted(k for k in ("scale_factor", "add_offset") if k in x.encoding)
    fill = x.encoding.get("_FillValue")
    if fill is not None and not (isinstance(fill, float | np.floating) and np.isnan(fill)):
        decoded.append(f"_FillValue {fill!r}")
    data = getattr(x.variable, "_data", None)  # xarray's lazy array (None: refused below)
    if not _is_dask_array(data):
        data = _unwrap_xarray(data)  # a zarr array, or values loaded into memory
    if decoded or data is None or np.dtype(data.dtype) != np.dtype(x.dtype):
        why = (
            f"values decoded on reading ({', '.join(decoded)})"
            if decoded
            else ("data that is not one zarr array read whole")
        )
        scaled = (
            "; to multiply the stored values, open it with mask_and_scale=False "
            "(a scale_factor s of both operands is then alpha=s_a*s_b)"
            if decoded
            else ""
        )
        raise InputError(
            f"{what} holds {why}; outofcore reads stored zarr arrays as they are: open it "
            "with xr.open_dataarray(path, engine='zarr') (or xr.open_zarr) without "
            "subsetting, or store it first: x.to_dataset(name='x').to_zarr('x.zarr') and "
            f"pass 'x.zarr/x'{scaled}"
        )
    return data, what


#: xarray's lazy wrappers that hand a backend array on unchanged (by their class name).
_XARRAY_PASSING = {"ImplicitToExplicitIndexingAdapter", "CopyOnWriteArray", "MemoryCachedArray"}


def _unwrap_xarray(value: Any) -> Any:
    """The zarr array under xarray's lazy wrappers of one (read whole, nothing decoded),
    or the numpy array of values xarray has loaded; ``value`` itself when it is either;
    None for anything else."""
    for _ in range(8):  # a few wrappers deep, never a cycle
        if isinstance(value, zarr.Array | np.ndarray):
            return value
        kind = type(value).__name__
        if kind == "LazilyIndexedArray":
            shape = getattr(value.array, "shape", None)
            key = getattr(getattr(value, "key", None), "tuple", None)
            if shape is None or key is None or len(key) != len(shape):
                return None
            if any(
                not isinstance(k, slice) or k.indices(n) != (0, n, 1)
                for k, n in zip(key, shape, strict=True)
            ):
                return None
            value = value.array
        elif kind in _XARRAY_PASSING or kind == "NumpyIndexingAdapter":
            value = value.array
        elif kind == "ZarrArrayWrapper":
            value = getattr(value, "_array", None)
        else:
            return None
    return None


def _layer(graph: Any, name: Any) -> Any:
    """Layer ``name`` of a high-level dask ``graph``, or None."""
    return graph.layers.get(name)


def _below(graph: Any, name: str) -> set[str]:
    """Layer ``name`` and every layer it depends on, directly or not."""
    found, todo = set(), [name]
    while todo:
        layer = todo.pop()
        if layer not in found:
            found.add(layer)
            todo.extend(graph.dependencies.get(layer, ()))
    return found


def check_shareable(
    named: dict[str, Any],
    client: Any,
    gpus: tuple[int, ...] | None,
    node: GpuNode | None = None,
) -> None:
    """Refuse arguments that live in this process's memory (numpy arrays, zarr arrays
    in a ``MemoryStore``), for a job on ``client`` whose tasks run in Dask worker
    processes; where they run in this process
    (:func:`outofcore.runtime.in_process.tasks_run_here`: ``"sync"``, ``dask.config``'s
    ``"threads"``, the job's LocalCluster of CPU worker threads, a user's Client of a
    ``LocalCluster(processes=False)``) they see them.

    Called with the arguments as given, by how messages call them
    (``{"input A": a, "input B": b, "the addend": addend}``), before anything is
    opened, so the message names what the user passed.  ``node``: the GPU backend's, where
    the job lists ``gpus`` (a single GPU's worker may be a thread here).
    """
    from outofcore.config import flag  # noqa: PLC0415 (imports dask)

    if tasks_run_here(client, gpus, flag("in-process-worker"), node):
        return
    for label, value in named.items():
        if isinstance(value, np.ndarray):
            what = f"a {type_name(value)}"
        elif isinstance(value, zarr.Array) and isinstance(value.store, MemoryStore):
            what = "a zarr array in a MemoryStore"
        else:
            continue
        raise InputError(
            f"{label} is {what} in this process's memory, so Dask worker processes "
            "cannot see it. Store it where the workers can read it and pass the path: "
            f"{store_line(label, value)}, or run in this process with client='sync'"
        )


def store_line(label: str, value: Any) -> str:
    """The line of code that stores ``value`` (argument ``label``) as a zarr array, and
    for a DataArray the path to pass (valid code, run by the tests)."""
    variable = _variable(label)
    path = f"{variable}.zarr"
    # zarr stores regular chunks only (equal, but for a smaller last one): dask's "auto"
    irregular = _irregular(getattr(value, "chunks", None))
    if _is_data_array(value):
        chunked = ".chunk('auto')" if irregular else ""
        return (
            f"{variable}.to_dataset(name={variable!r}){chunked}.to_zarr({path!r}) and pass "
            f"{path + '/' + variable!r}"
        )
    if _is_dask_array(value):
        rechunked = ".rechunk('auto')" if irregular else ""
        return f"da.to_zarr({variable}{rechunked}, {path!r})"
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) >= 1:
        batch = (1,) * max(0, len(shape) - 2)
        chunks = batch + tuple(max(1, min(int(n), SUGGESTED_CHUNK)) for n in shape[len(batch) :])
    else:
        chunks = (SUGGESTED_CHUNK, SUGGESTED_CHUNK)
    if isinstance(value, np.ma.MaskedArray):
        data = f"{variable}.filled()"  # masked values: the user's call
    elif isinstance(value, np.ndarray):
        data = variable
    elif isinstance(value, zarr.Array):
        data = f"{variable}[...]"
    else:
        data = f"np.asarray({variable})"
    return f"zarr.create_array({path!r}, data={data}, chunks={chunks})"


def type_name(value: Any) -> str:
    """``module.Class`` of ``value``'s type, e.g. ``numpy.ndarray``."""
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def _in_memory(x: np.ndarray, label: str, dtypes: tuple[np.dtype, ...] | None) -> zarr.Array:
    what = f"{label} (a {type_name(x)})"
    if dtypes is not None:
        check_input_dtype(x.dtype, what, dtypes)
    # A stack's matrices one per chunk (each task reads one); matrices in square chunks.
    batch = (1,) * max(0, x.ndim - 2)
    chunks = batch + tuple(max(1, min(n, IN_MEMORY_CHUNK)) for n in x.shape[len(batch) :])
    return zarr.create_array(MemoryStore(), data=x, chunks=chunks, compressors=None)


def by_path(array: Any) -> Any:
    """``array``, reopened by its path when it is on this machine's disks behind fsspec
    (as ``da.from_zarr("a.zarr")`` opens it): one array, one fingerprint, however spelled;
    each part of a :class:`~outofcore.operands.joined.Joined` so."""
    if isinstance(array, Joined):
        return Joined(tuple(by_path(part) for part in array.arrays), array.axis)
    if not isinstance(array.store, FsspecStore):
        return array
    location = locate(array)
    return zarr.open_array(location.target, mode="r") if location.is_local else array


def _is_dask_array(value: Any) -> bool:
    import dask.array as da  # noqa: PLC0415

    return isinstance(value, da.Array)


def _is_getter(layer: Any) -> bool:
    from dask.array.core import getter, getter_inline, getter_nofancy  # noqa: PLC0415

    task = getattr(layer, "task", None)
    return getattr(task, "func", None) in (getter, getter_inline, getter_nofancy)


def _transpose_swaps(layer: Any, ndim: int) -> bool | None:
    """For a transpose layer of an ``ndim``-D array (``transpose`` or ``swapaxes``): True
    where it swaps the last two axes (numpy.matmul's transpose), False where it keeps
    every axis; None for anything else."""
    task = getattr(layer, "task", None)
    func = getattr(task, "func", None)
    if func not in (np.transpose, np.swapaxes) or len(layer.indices) != 1:
        return None
    kept = tuple(range(ndim))
    axes = tuple(task.kwargs.get("axes", ()))
    if func is np.swapaxes:
        first, second = task.kwargs.get("axis1"), task.kwargs.get("axis2")
        axes = list(kept)
        if isinstance(first, int) and isinstance(second, int) and max(first, second) < ndim:
            axes[first], axes[second] = axes[second], axes[first]
        axes = tuple(axes) if axes != list(kept) or first == second else ()
    if axes == kept:
        return False
    return True if ndim > 1 and axes == (*kept[:-2], ndim - 1, ndim - 2) else None


def _layer_summary(x: Any, limit: int = 4) -> str:
    """The kinds of the layers of ``x``'s graph, e.g. ``"from-zarr, getitem"``."""
    from dask.utils import key_split  # noqa: PLC0415

    layers = getattr(x.__dask_graph__(), "layers", {})
    kinds = [key_split(name) for name in layers]
    more = f" and {len(kinds) - limit} more" if len(kinds) > limit else ""
    return "layers " + ", ".join(kinds[:limit]) + more if kinds else "a graph"


def _irregular(chunks: Any) -> bool:
    """Whether dask ``chunks`` (a tuple of each dimension's sizes; None: not a dask
    array's) are ones zarr cannot store: sizes that differ, but for a smaller last one."""
    if not isinstance(chunks, tuple) or not all(isinstance(c, tuple) for c in chunks):
        return False  # a zarr array's chunk shape, or not chunked
    return any(
        len(set(sizes[:-1])) > 1 or (len(sizes) > 1 and sizes[-1] > sizes[0]) for sizes in chunks
    )


def _variable(label: str) -> str:
    """The argument's name in code: ``"input A"`` -> ``a``, ``"the addend"`` -> ``addend``
    (what a label adds in parentheses, a DataArray's name and dims, left out)."""
    words = label.split(" (", 1)[0].split()
    name = words[-1].lower() if words else ""
    return name if name.isidentifier() else "x"

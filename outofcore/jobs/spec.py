"""What a job is asked to do, parsed and checked once: :class:`JobSpec`.

The CLI builds a spec from its arguments, :func:`outofcore.matmul` and
:func:`outofcore.api.run_job` from their keyword arguments; both then run
through the same function.  Every value is checked here, before any array is
opened, so a bad option fails at once with the value named.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import operator
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, TypeVar

import numpy as np

from outofcore.backends.registry import check_backend, is_gpu
from outofcore.config import parse_size
from outofcore.errors import InputError, InputTypeError, OptionError
from outofcore.journal.lease import lease_timeout
from outofcore.operands.arrays import ZARR_FORMATS
from outofcore.operands.dtypes import check_flag, parse_dtype
from outofcore.operands.scales import check_scale
from outofcore.runtime.gpu_cluster import parse_gpus
from outofcore.storage.codecs import DEFAULT_OUTPUT_CODEC, check_output_codec
from outofcore.storage.stores import check_storage_options

#: Seconds a job started on its own LocalCluster is predicted to take here, from which it
#: serves Dask's dashboard by default (:attr:`JobSpec.dashboard`).
DASHBOARD_AFTER_SECONDS = 10.0


@dataclass(frozen=True)
class JobSpec:
    """The options of one product ``out = alpha * op(a) @ op(b) + beta * addend``.

    Sizes are bytes or text like ``"512MiB"``.

    Attributes
    ----------
    transpose_a, transpose_b
        Multiply by ``a.T`` (``b.T``) instead of ``a`` (``b``), read straight
        from the stored array (no transposed copy).
    alpha, beta
        Scales of the product and of the addend (``beta`` needs an addend).
    addend
        An array of the output's shape (``zarr.Array``, path or URL), read tile
        by tile and never written; must not be the output or an input.
    out_dtype
        Write the output in this dtype instead of the product's own
        (:mod:`outofcore.operands.dtypes`: float32 for float16 inputs, int32/int64 for
        integer ones), e.g. ``"float16"``.
    memory
        Memory budget of one worker; tiles are sized to it.  None (the default):
        1 GiB, or less on this machine where its memory cap (a cgroup's limit)
        leaves less per worker (:func:`outofcore.runtime.worker_sizing.default_budget`);
        chosen by :func:`outofcore.api.run_job`, which knows where the job runs.
    device_memory
        Cap on each GPU engine's device memory (default: its own budget, a
        share of the free device memory); CPU engines ignore it.
    backend
        ``"cpu"``, ``"cuda"``, ``"cupy"`` or ``"auto"``: cuda when the job's
        workers have a GPU (a cluster's workers that declare a ``GPU`` resource, or
        this machine's GPU for a local job), whatever the submitting machine has;
        resolved by :func:`outofcore.api.run_job` once it knows the workers.
    output_codec
        Compression of an output created by the job: ``"none"`` or ``"zstd"``.
    overwrite
        Replace an existing output (and its journal).
    chunks
        The chunk shape ``(rows, columns)`` of an output the job creates, on its matrix
        axes (a stack's batch axes are chunked 1, one matrix a chunk; a vector output's
        missing axis takes 1); an int is both.  None (the default): the plan chooses
        (a divisor of the tile, at most 2048).  The tiles are planned on it (each task
        writes whole chunks), so chunks that are not a multiple of the inputs' make the
        tiles a multiple of both.  A value larger than the output is clipped to it, as
        dask clips (a chunk beyond the array would only store its padding).  An
        existing output keeps its own chunks: resuming one with other ``chunks`` is
        refused.
    shards
        True (the default): a large output is created sharded, one zarr shard per tile,
        when it has more than :data:`outofcore.planner.tiling.SHARD_OVER_CHUNKS` chunks, so each
        tile writes one whole object.  False: plain chunks always.  A shape ``(rows,
        columns)``: shards of that shape, which needs ``chunks``, a divisor of it, and
        zarr format 3; the tiles are planned on them (each task writes whole shards).
    zarr_format
        Format of an output the job creates: 3 (default) or 2, for readers
        that know only format 2 (it has no shards: a large output is written
        as plain chunks, with a warning).
    tile, tk
        Force the plan's tile shape ``(tm, tn)`` and panel depth.
    splits
        Force the number of parts each tile's k is split into (1: never
        split); default: the planner's choice (split-k when the tiles are too
        few for the workers, :mod:`outofcore.jobs.splitk`).
    lease_timeout
        Seconds without a heartbeat after which the job's lease is dead
        (default: the ``lease-timeout`` setting, 60 s).
    workers
        Workers of the LocalCluster the job starts; with a scheduler address,
        the workers to wait for.
    gpus
        Start one worker per listed GPU on this node instead of a CPU cluster.
    progress
        Show a progress bar on stderr (and announce a LocalCluster): the command line's
        way; off by default, a Python call prints nothing (Dask's own progress and
        dashboard, or logging, tell what a job does).
    dashboard
        Serve Dask's dashboard from the LocalCluster the job starts: True, False, or
        None (the default): when the job is predicted to take at least
        :data:`DASHBOARD_AFTER_SECONDS` here
        (:func:`outofcore.machine.prediction.predicted_seconds`).
        A shorter job is over before the page loads, and the dashboard's import (bokeh)
        costs 0.5 to 1 s of the cluster's start.  A cluster the job does not start
        keeps its own.
    dimension_names
        The output's dimension names, one a dimension (a name or None); default: from
        the inputs' (:attr:`outofcore.operands.product.Product.dimension_names`).
    storage_options
        fsspec options for every URL of the job (inputs, addend, output and
        its journal), e.g. ``{"endpoint_url": ..., "key": ..., "secret": ...}``
        for ``s3://`` (:mod:`outofcore.storage.stores`); left out of the spec's repr.
    """

    transpose_a: bool = False
    transpose_b: bool = False
    alpha: int | float | complex = 1.0
    beta: int | float | complex = 0.0
    addend: Any = None
    out_dtype: Any = None
    memory: int | str | None = None
    device_memory: int | str | None = None
    backend: str = "auto"
    output_codec: str = DEFAULT_OUTPUT_CODEC
    overwrite: bool = False
    chunks: int | tuple[int, int] | None = None
    shards: bool | tuple[int, int] = True
    zarr_format: int = 3
    tile: tuple[int, int] | None = None
    tk: int | None = None
    splits: int | None = None
    lease_timeout: float | None = None
    workers: int | None = None
    gpus: tuple[int, ...] | None = None
    progress: bool = False
    dashboard: bool | None = None
    dimension_names: tuple[str | None, ...] | None = None
    storage_options: dict[str, Any] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        _check_types(self)
        device, out_dtype, dashboard = self.device_memory, self.out_dtype, self.dashboard
        parsed = {
            "transpose_a": check_flag(self.transpose_a, "transpose_a"),
            "transpose_b": check_flag(self.transpose_b, "transpose_b"),
            "alpha": check_scale(self.alpha, "alpha"),
            "beta": check_scale(self.beta, "beta"),
            "out_dtype": None if out_dtype is None else parse_dtype(out_dtype, "out_dtype"),
            "memory": None if self.memory is None else parse_size(self.memory),
            "device_memory": None if device is None else parse_size(device),
            "backend": check_backend(self.backend),  # resolved where the tasks run (run_job)
            "output_codec": check_output_codec(self.output_codec),
            "chunks": None if self.chunks is None else _chunk_shape(self.chunks, "chunks"),
            "shards": _shards(self.shards, self.zarr_format),
            "zarr_format": _zarr_format(self.zarr_format),
            "tile": None if self.tile is None else _positive_pair(self.tile),
            "tk": None if self.tk is None else _positive(self.tk, "tk"),
            "splits": None if self.splits is None else _positive(self.splits, "splits"),
            "lease_timeout": lease_timeout(self.lease_timeout),
            "workers": None if self.workers is None else _positive(self.workers, "workers"),
            "gpus": None if self.gpus is None else _gpus(self.gpus),
            "dashboard": None if dashboard is None else check_flag(dashboard, "dashboard"),
            "dimension_names": _names(self.dimension_names),
            "storage_options": check_storage_options(self.storage_options),
        }
        for name, value in parsed.items():
            object.__setattr__(self, name, value)
        _check_shards_hold_chunks(self.chunks, self.shards)

    @classmethod
    def of(cls, spec: JobSpec | None, options: dict[str, Any]) -> JobSpec:
        """``spec``, or a spec built from keyword ``options`` (not both).

        Raises
        ------
        InputError
            For an option a spec does not have, naming the ones it has.
        """
        if spec is not None:
            if options:
                raise InputError(f"pass options in the JobSpec or as keywords, not both: {options}")
            return spec
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise OptionError(
                f"unexpected keyword argument(s) {unknown}: no job option; the options are "
                f"{sorted(known)}"
            )
        return cls(**options)

    @property
    def on_gpu(self) -> bool:
        """Whether the job's engines run on a GPU (its backend is a GPU backend by name;
        ``"auto"`` is none until resolved)."""
        return is_gpu(self.backend)


F = TypeVar("F", bound=Callable[..., Any])


def with_job_options(*, excluding: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Give a function taking the job options as ``**options`` a signature that lists
    them, keyword-only, with :class:`JobSpec`'s defaults (its fields: one definition),
    less ``excluding``: what ``help()``, ``inspect.signature`` and completion show.
    What it accepts is unchanged (:meth:`JobSpec.of` refuses an unknown one, a
    ``TypeError``).

    The function's own parameters after its operands and output (``spec``, ``client``,
    ...) are keyword-only too, as numpy's and dask's options are: one more positional
    argument is Python's ``TypeError`` naming the call (``matmul() takes 3 positional
    arguments but 4 were given``).  For now a :class:`JobSpec` in that place is still
    taken as ``spec=``: the command line (``outofcore/cli.py``) and ``outofcore.xarray.dot``
    pass theirs so, until their next change passes ``spec=``; anything else there is
    refused."""

    def decorate(func: F) -> F:
        signature = inspect.signature(func)
        kept = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
        taken = {p.name for p in kept} | set(excluding)
        options = [
            inspect.Parameter(
                f.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=f.default if f.default is not MISSING else None,
                annotation=f.type,
            )
            for f in fields(JobSpec)
            if f.name not in taken
        ]
        positional = sum(p.kind is p.POSITIONAL_OR_KEYWORD for p in kept)

        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            spec = args[-1] if len(args) == positional + 1 else None
            if isinstance(spec, JobSpec) and "spec" not in kwargs:  # the transition above
                *args, kwargs["spec"] = args
            return func(*args, **kwargs)

        call.__signature__ = signature.replace(parameters=[*kept, *options])  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return decorate


def _check_types(spec: JobSpec) -> None:
    """Refuse an option of the wrong type as numpy does, a ``TypeError``
    (:class:`~outofcore.errors.InputTypeError`), before its value is checked (a bad value
    of the right type is a ``ValueError``: :class:`~outofcore.errors.InputError`)."""
    wrong = [
        (name, need)
        for name, need, fits in (
            ("backend", "a str", lambda v: isinstance(v, str)),
            ("output_codec", "a str", lambda v: isinstance(v, str)),
            ("memory", "bytes (an int) or text such as '512MiB'", _is_size),
            ("device_memory", "bytes (an int) or text such as '512MiB'", _is_size),
            ("alpha", "a number", _is_number),
            ("beta", "a number", _is_number),
        )
        if (value := getattr(spec, name)) is not None and not fits(value)
    ]
    if wrong:
        name, need = wrong[0]
        value = getattr(spec, name)
        raise InputTypeError(f"{name} = {value!r}: need {need}, not a {type(value).__name__}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, bool | np.bool_)


def _is_size(value: Any) -> bool:
    return _is_int(value) or isinstance(value, str | float | np.floating)


def _names(value: Any) -> tuple[str | None, ...] | None:
    """Dimension names: None, or a sequence of names (str) and None."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise InputTypeError(f"dimension_names = {value!r}: need a list of names (str or None)")
    if any(name is not None and not isinstance(name, str) for name in value):
        raise InputTypeError(f"dimension_names = {value!r}: each must be a str or None")
    return tuple(value)


def _chunk_shape(value: Any, name: str) -> tuple[int, int]:
    """An output's chunk (or shard) shape on its matrix axes: two whole numbers >= 1
    (numpy integers taken), or one for both."""
    pair = (value, value) if isinstance(value, int | np.integer) else value
    try:
        rows, cols = pair
        if any(isinstance(v, bool | np.bool_) for v in pair):
            raise TypeError
        shape = (operator.index(rows), operator.index(cols))
    except (TypeError, ValueError):
        shape = (0, 0)
    if min(shape) < 1:
        raise InputError(
            f"{name} = {value!r}: need two whole numbers >= 1, the (rows, columns) of the "
            "output's matrix axes (a stack's batch axes are chunked 1), or one for both"
        )
    if max(shape) > MAX_EDGE:
        raise InputError(
            f"{name} = {value!r}: an edge is at most 2**63 - 1 (zarr keeps it as a 64-bit "
            "integer); an edge longer than the output is clipped to it, so its extent will do"
        )
    return shape


#: The longest chunk or shard edge asked: zarr's metadata keeps them as 64-bit integers.
MAX_EDGE = 2**63 - 1


def _shards(value: Any, zarr_format: Any) -> bool | tuple[int, int]:
    """``shards``: True, False, or a shard shape (zarr format 3 only)."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    shape = _chunk_shape(value, "shards")
    if zarr_format == 2:
        raise InputError(
            f"shards = {value!r} with zarr_format = 2: zarr format 2 has no shards; "
            "use zarr_format=3, or chunks= alone"
        )
    return shape


def _check_shards_hold_chunks(
    chunks: tuple[int, int] | None, shards: bool | tuple[int, int]
) -> None:
    """Refuse a shard shape without the chunks it holds, or not a multiple of them."""
    if isinstance(shards, bool):
        return
    if chunks is None:
        raise InputError(
            f"shards = {shards} needs chunks=(rows, cols) too (--out-chunks): the chunks each "
            "shard holds (what a reader decodes at once), dividing it: e.g. shards = "
            "(4096, 4096) with chunks = (1024, 1024)"
        )
    if any(shard % chunk for shard, chunk in zip(shards, chunks, strict=True)):
        raise InputError(
            f"shards = {shards} is not a multiple of chunks = {chunks}: a shard holds whole "
            "chunks (zarr's sharding), e.g. shards = "
            f"{tuple(-(-s // c) * c for s, c in zip(shards, chunks, strict=True))}"
        )


def _positive(value: Any, name: str) -> int:
    if not _is_int(value):
        raise InputTypeError(f"{name} = {value!r}: need a whole number >= 1, an int")
    if value < 1:
        raise InputError(f"{name} = {value!r}: need a whole number >= 1")
    return int(value)


def _zarr_format(value: Any) -> int:
    if not _is_int(value):
        raise InputTypeError(f"zarr_format = {value!r}: choose 2 or 3, an int")
    if value not in ZARR_FORMATS:
        raise InputError(f"zarr_format = {value!r}: choose 2 or 3")
    return int(value)


def _gpus(value: Any) -> tuple[int, ...]:
    """GPU indices from ``"0,1"`` or ``(0, 1)``, checked as ``--gpus`` is."""
    text = value if isinstance(value, str) else ",".join(str(gpu) for gpu in value)
    return parse_gpus(text)


def _positive_pair(value: Any) -> tuple[int, int]:
    try:
        first, second = value
    except (TypeError, ValueError):
        raise InputTypeError(f"tile = {value!r}: need two whole numbers (rows, columns)") from None
    return _positive(first, "tile rows"), _positive(second, "tile columns")

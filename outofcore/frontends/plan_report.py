"""``outofcore.plan(a, b, ...)``: a job's plan, not run, as an object that prints as
``outofcore plan`` prints it.

:class:`PlanReport` wraps the job's plan (:class:`outofcore.jobs.planning.JobPlan`, made
by :func:`outofcore.jobs.preview.plan_product` as the command makes it): ``str()`` is the
command's table, ``repr()`` one short line, ``.summary`` the dict ``outofcore plan
--json`` prints, and its figures are attributes (``.tiles``, ``.tile``, ``.tk``,
``.task_bytes``, ``.bytes_read``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dask.utils import format_bytes

from outofcore.errors import InputError
from outofcore.frontends.cli_output import format_plan
from outofcore.jobs.planning import JobPlan
from outofcore.jobs.preview import plan_product
from outofcore.jobs.spec import JobSpec, with_job_options
from outofcore.operands import arrays
from outofcore.operands.product import Product
from outofcore.planner.plan import Plan

if TYPE_CHECKING:
    from outofcore.frontends.dask_store import DaskJob

__all__ = ["DaskComputes", "PlanReport", "plan"]


class PlanReport:
    """The plan ``outofcore.matmul(a, b, out, ...)`` would run, with its predictions.

    ``str(report)`` is the table ``outofcore plan`` prints; ``report.summary`` the dict
    ``outofcore plan --json`` prints; the figures are attributes.

    Attributes
    ----------
    summary : dict
        What ``outofcore plan --json`` prints: the plan's figures, its budgets, workers,
        predictions and ``product`` (the operands' shapes, dtypes, transposes, scales).
    plan : outofcore.planner.plan.Plan
        The plan itself (its tasks, tiling and memory model).
    job_plan : outofcore.jobs.planning.JobPlan
        The plan with the workers it was made for and what was predicted of it.
    """

    def __init__(self, job_plan: JobPlan, product: Product, runs: str = "") -> None:
        self.job_plan = job_plan
        self.summary: dict[str, Any] = {**job_plan.summary(), "product": product.summary()}
        #: For what to_zarr or xarray.dot takes: the product outofcore runs, in words
        #: (``"x's matmul of x.zarr.T and x.zarr"``); empty for two operands.
        self.runs = runs

    @property
    def plan(self) -> Plan:
        """The plan (:class:`outofcore.planner.plan.Plan`): its tasks, tiling, memory."""
        return self.job_plan.plan

    @property
    def shape(self) -> tuple[int, int]:
        """The output's matrix shape ``(m, n)``."""
        return self.summary["m"], self.summary["n"]

    @property
    def tile(self) -> tuple[int, int]:
        """An output tile's shape ``(tm, tn)``: what one task computes."""
        return tuple(self.summary["tile"])  # type: ignore[return-value]

    @property
    def tk(self) -> int:
        """The panel depth: the k-extent of the A and B panels a task reads at once."""
        return self.summary["tk"]

    @property
    def tiles(self) -> int:
        """How many output tiles (tasks, besides split-k's reductions) the job runs."""
        return self.summary["tiles"]

    @property
    def workers(self) -> int:
        """The workers the plan was made for."""
        return self.summary["workers"]

    @property
    def task_bytes(self) -> int:
        """The memory one task is projected to use at most, in bytes."""
        return self.summary["task_bytes"]

    @property
    def task_budget_bytes(self) -> int:
        """The budget of one task (a worker's, split between its threads), in bytes."""
        return self.summary["task_budget_bytes"]

    @property
    def worker_budget_bytes(self) -> int:
        """The budget of one worker (``memory=``), in bytes."""
        return self.summary["worker_budget_bytes"]

    @property
    def bytes_read(self) -> int:
        """The bytes the job is predicted to read (inputs and addend, every panel)."""
        return self.summary["bytes_read"]

    @property
    def bytes_written(self) -> int:
        """The bytes the job writes (the output, and split-k's partial tiles)."""
        return self.summary["bytes_written"]

    @property
    def flops(self) -> float:
        """The floating-point operations of the product."""
        return self.summary["flops"]

    @property
    def seconds(self) -> float | None:
        """The time predicted on this machine (its measured figures), or None when no
        prediction was made."""
        for predicted in self.summary.get("predicted", []):
            if predicted.get("basis") == "measured":
                return predicted.get("seconds")
        return None

    def __str__(self) -> str:
        table = format_plan(self.summary)
        return f"outofcore runs {self.runs} as a job:\n{table}" if self.runs else table

    def __repr__(self) -> str:
        m, n = self.shape
        tm, tn = self.tile
        seconds = self.seconds
        predicted = "" if seconds is None else f", about {seconds:.3g} s here"
        return (
            f"<outofcore plan: {m}x{n} output, {self.tiles} tile(s) of {tm}x{tn} (tk "
            f"{self.tk}), {format_bytes(self.task_bytes)} a task, "
            f"{format_bytes(self.bytes_read)} read{predicted}>"
        )


@dataclass(frozen=True)
class DaskComputes:
    """What ``outofcore.plan(x)`` says of a dask array ``x`` that dask.array computes, not
    outofcore (as :func:`outofcore.to_zarr` would store it): ``why``, and whether a
    matrix product is in what dask computes (``to_zarr`` warns of it); and
    ``outofcore.xarray.plan`` of an ``xr.dot`` whose alignment dask computes (``what``
    is then the call, ``caller`` ``dot``)."""

    why: str
    falls_back: bool
    what: str = "x"
    caller: str = "to_zarr"

    def __str__(self) -> str:
        product = f" (a matrix product among it: {self.caller} warns)" if self.falls_back else ""
        return (
            f"dask.array computes {self.what}{product}, without outofcore's memory budget, "
            f"resume or progress: {self.what} {self.why}"
        )


@with_job_options()
def plan(
    a: Any,
    b: arrays.ArrayLike | None = None,
    *,
    spec: JobSpec | None = None,
    client: Any = None,
    reprobe: bool = False,
    **options: Any,
) -> PlanReport | DaskComputes | None:
    """The plan ``outofcore.matmul(a, b, out, ...)`` would run, with its predictions; or,
    of one dask array ``a``, what ``outofcore.to_zarr(a, out, ...)`` would run.

    Nothing is written and no cluster starts: the job's workers are those it would get
    (a scheduler elsewhere, ``client``, is asked for its own).

    Parameters
    ----------
    a, b
        The operands, as :func:`outofcore.matmul` takes them; or ``a`` alone, a dask
        array, as :func:`outofcore.to_zarr` takes it (``x.T @ x``, ``(x - x.mean(axis=0)).T
        @ y / n``): the plan of the product at its top, where outofcore runs it.
    spec
        The job's options as a :class:`~outofcore.jobs.spec.JobSpec`, or None to build
        one from ``options``.
    client
        Where the job would run, as :func:`outofcore.matmul` takes it.
    reprobe
        Measure this machine again for the predicted time instead of using its cached
        figures.
    **options
        :func:`outofcore.matmul`'s options (``memory``, ``backend``, ...).

    Returns
    -------
    PlanReport, DaskComputes or None
        The plan: ``print()`` shows the table ``outofcore plan`` prints, ``.summary`` is
        what ``outofcore plan --json`` prints (for one dask array, ``.runs`` names the
        product outofcore runs); a :class:`DaskComputes` saying why where dask.array
        would compute the one array given; None for an empty product (a dimension of
        0: no tile).

    Raises
    ------
    InputError
        For ``b`` left out where ``a`` is not a dask array.

    Examples
    --------
    >>> p = outofcore.plan("a.zarr", "b.zarr", memory="512MiB")  # doctest: +SKIP
    >>> print(p)  # the table `outofcore plan` prints                # doctest: +SKIP
    >>> p.tiles, p.task_bytes                                        # doctest: +SKIP
    """
    runs = ""
    if b is None:  # to_zarr's door: the product at the top of one dask array
        job = _dask_job_of(a, JobSpec.of(spec, options))
        if job.dask_computes is not None:
            return DaskComputes(job.dask_computes, job.falls_back)
        a, b, spec, options, runs = job.a, job.b, job.spec, {}, f"x's {job.described}"
    product, job_plan = plan_product(a, b, spec, options, client, reprobe)
    return None if job_plan is None else PlanReport(job_plan, product, runs)


def _dask_job_of(x: Any, spec: JobSpec) -> DaskJob:
    """:func:`outofcore.frontends.dask_store.dask_job` of ``x``, a dask array; its
    transposes are ``x``'s own (``x.T @ x``), as ``to_zarr`` reads them."""
    import dask.array as da  # noqa: PLC0415

    from outofcore.frontends.dask_store import dask_job  # noqa: PLC0415 (imports dask)

    if not isinstance(x, da.Array):
        raise InputError(
            f"plan takes two operands, or one dask array as to_zarr takes it; got a "
            f"{type(x).__module__}.{type(x).__qualname__} alone"
        )
    if spec.transpose_a or spec.transpose_b:
        raise InputError(
            f"transpose_a={spec.transpose_a}, transpose_b={spec.transpose_b}: plan of one "
            "dask array reads its transposes from the array (x.T @ x), as to_zarr does"
        )
    return dask_job(x, spec)

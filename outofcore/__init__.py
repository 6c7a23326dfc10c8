"""outofcore: out-of-core matrix multiplication of zarr arrays on Dask.

>>> import outofcore
>>> c = outofcore.matmul("a.zarr", "b.zarr", "c.zarr", memory="512MiB")  # doctest: +SKIP
>>> outofcore.verify("a.zarr", "b.zarr", c).passed                        # doctest: +SKIP
True

``outofcore.xarray.dot`` is ``xr.dot`` of zarr-backed DataArrays, out of core.

The layers, top to bottom (an import only goes down; ``tests/test_layers.py``): the faces
(this package, ``api``, ``cli``, ``generate``, ``xarray``), ``frontends``,
``jobs``, ``machine``, ``compute``, ``journal`` (beside compute: jobs -> journal ->
storage), ``operands``, ``storage``, ``config``, then side by side ``planner`` (the plan,
pure data) and ``runtime`` (the Dask runtime), and ``errors`` (which imports nothing of
outofcore).  Each folder's ``__init__`` says more.
The GPU check is a tool run from the checkout (``python -m tools.gpu_check``), not
part of the package.

The heavy modules (Dask, zarr, BLAS) load on first use of ``matmul`` or
``verify``, so ``import outofcore.planner.plan`` and ``outofcore.errors`` stay light.
"""

__version__ = "0.1.0"  # the package's version: pyproject.toml reads it from here
__all__ = [
    "FallbackWarning",
    "JobSpec",
    "OutputLayoutWarning",
    "PlanReport",
    "gram",
    "job_status",
    "matmul",
    "plan",
    "random_array",
    "to_zarr",
    "verify",
    "__version__",
]


#: The documented modules of the package, beside the names above.
_MODULES = ("api", "config", "errors", "generate", "xarray")


def __dir__() -> list[str]:
    """The public names (loaded on first use) and the documented modules: nothing
    imported for the package's own use."""
    return sorted({*__all__, *_MODULES})


def __getattr__(name: str) -> object:
    if name == "matmul":
        from outofcore.api import matmul

        return matmul
    if name == "plan":
        from outofcore.frontends.plan_report import plan

        return plan
    if name == "gram":
        from outofcore.api import gram

        return gram
    if name == "to_zarr":
        from outofcore.frontends.dask_store import to_zarr

        return to_zarr
    if name == "job_status":
        from outofcore.journal.status import job_status

        return job_status
    if name == "JobSpec":
        from outofcore.jobs.spec import JobSpec

        return JobSpec
    if name == "verify":
        from outofcore.frontends.verify import verify

        return verify
    if name == "random_array":
        from outofcore.frontends.generate import random_array

        return random_array
    if name == "PlanReport":
        from outofcore.frontends.plan_report import PlanReport

        return PlanReport
    if name == "FallbackWarning":
        from outofcore.errors import FallbackWarning

        return FallbackWarning
    if name == "OutputLayoutWarning":
        from outofcore.jobs.planning import OutputLayoutWarning

        return OutputLayoutWarning
    if name in _MODULES:
        import importlib

        return importlib.import_module(f"outofcore.{name}")
    raise AttributeError(f"module 'outofcore' has no attribute {name!r}")

"""The documented public names survive the restructure into layers (issue 43): each
resolves, and is the object the layers define (no second copy)."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest

import outofcore

#: name documented in README.md / docs/api.md -> where the layers define it
DOCUMENTED = {
    "outofcore.matmul": "outofcore.jobs.entry.matmul",
    "outofcore.gram": "outofcore.jobs.entry.gram",
    "outofcore.to_zarr": "outofcore.frontends.dask_store.to_zarr",
    "outofcore.verify": "outofcore.frontends.verify.verify",
    "outofcore.job_status": "outofcore.journal.status.job_status",
    "outofcore.JobSpec": "outofcore.jobs.spec.JobSpec",
    "outofcore.random_array": "outofcore.frontends.generate.random_array",
    "outofcore.generate.random_array": "outofcore.frontends.generate.random_array",
    "outofcore.OutputLayoutWarning": "outofcore.jobs.planning.OutputLayoutWarning",
}


def resolve(dotted: str) -> object:
    """The object a dotted name gives, importing the longest module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            value = getattr(value, part)
        return value
    raise ImportError(dotted)


@pytest.mark.parametrize("public", sorted(DOCUMENTED))
def test_a_documented_name_is_the_layers_object(public):
    try:
        home = resolve(DOCUMENTED[public])
    except (ImportError, AttributeError):
        pytest.fail(f"{DOCUMENTED[public]} moved: update this table to its new home")
    assert resolve(public) is home


def test_the_errors_and_xarray_faces_keep_their_names():
    from outofcore import errors, xarray  # noqa: PLC0415

    assert callable(xarray.dot)
    assert list(inspect.signature(resolve("outofcore.api.run_job")).parameters)[:3] == [
        "a",
        "b",
        "out",
    ]
    for name in ("OutOfCoreError", "InputError", "BudgetError", "JobFailedError"):
        assert issubclass(getattr(errors, name), Exception), name
    assert set(outofcore.__all__) - {"__version__"} <= set(dir(outofcore)) | {
        n.split(".")[1] for n in DOCUMENTED if n.count(".") == 1
    }


def test_importing_outofcore_stays_light():
    """``import outofcore`` loads none of Dask, zarr or numba (the faces load on use)."""
    code = "import sys, outofcore; print(sorted({'dask', 'zarr', 'numba'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_error_the_docs_name_is_importable_from_outofcore_errors():
    """docs/api.md's error tables name what a caller catches: each from outofcore.errors,
    one class wherever else it is imported from (issue 45)."""
    import builtins  # noqa: PLC0415
    import re  # noqa: PLC0415

    import outofcore.errors as errors  # noqa: PLC0415
    from outofcore.journal.resume import ResumeError  # noqa: PLC0415
    from outofcore.operands.reading import ReadError  # noqa: PLC0415
    from tests.helpers import ROOT  # noqa: PLC0415

    named = set(re.findall(r"`(\w+Error)`", (ROOT / "docs" / "api.md").read_text()))
    assert {"ReadError", "LeaseError", "ResumeError", "LeaseLostError"} <= named
    missing = sorted(n for n in named if not hasattr(errors, n) and not hasattr(builtins, n))
    assert not missing, f"docs/api.md names errors outofcore.errors lacks: {missing}"
    assert errors.ResumeError is ResumeError and errors.ReadError is ReadError

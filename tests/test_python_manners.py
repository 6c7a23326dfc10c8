"""numpy's manners in Python (issue 55, item 3): options after the operands and the output
keyword-only; a bad option value a ValueError and a wrong type a TypeError, where numpy
raises them; ``dir(outofcore)`` its public names only; the plan object printing as the
command's table, with a short repr and its figures as attributes; a bad setting refused
naming the ``dask.config`` key it came from."""

from __future__ import annotations

import inspect
import json
import re

import dask
import dask.utils
import numpy as np
import pytest
import zarr

import outofcore
import outofcore.errors as errors
from outofcore import config
from outofcore.cli import main
from tests.helpers import ROOT, write_zarr

#: Each public call and how many of its first parameters are its operands and output
#: (``random_array``'s ``dtype`` is positional too, as numpy's ``np.zeros(shape, dtype)``).
CALLS = {
    "matmul": 3,
    "gram": 2,
    "plan": 2,
    "to_zarr": 2,
    "verify": 3,
    "random_array": 4,
    "api.run_job": 3,
}


def _public(name: str):
    value = outofcore
    for part in name.split("."):
        value = getattr(value, part)
    return value


@pytest.fixture
def operands(tmp_path):
    rng = np.random.default_rng(55)
    write_zarr(tmp_path / "a.zarr", rng.standard_normal((60, 40)).astype("float32"), (20, 20))
    write_zarr(tmp_path / "b.zarr", rng.standard_normal((40, 30)).astype("float32"), (20, 15))
    return str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr")


@pytest.mark.parametrize("name", sorted(CALLS))
def test_options_after_the_operands_and_the_output_are_keyword_only(name):
    parameters = list(inspect.signature(_public(name)).parameters.values())
    positional = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert len(positional) == CALLS[name], positional
    assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in parameters[CALLS[name] :])


def test_a_fourth_positional_is_pythons_type_error_naming_the_call(operands, tmp_path):
    """The issue's ``outofcore.matmul("a.zarr", "b.zarr", "e.zarr", "sync")``: was
    ``AttributeError: 'str' object has no attribute 'gpus'``; now what Python says of a
    function with keyword-only options, word for word."""
    with pytest.raises(TypeError) as python:
        matmul(*operands, "e.zarr", "sync")
    out = tmp_path / "e.zarr"
    with pytest.raises(TypeError) as ours:
        outofcore.matmul(*operands, out, "sync")
    said = "matmul() takes 3 positional arguments but 4 were given"
    assert str(ours.value) == str(python.value) == said
    assert not out.exists()
    for call, extra in (
        (lambda: outofcore.gram(operands[0], out, "sync"), "gram() takes 2"),
        (lambda: outofcore.plan(*operands, "sync"), "plan() takes from 1 to 2"),
        (lambda: outofcore.verify(*operands, out, 3), "verify() takes 3"),
        (lambda: outofcore.api.run_job(*operands, out, None), "run_job() takes 3"),
        (lambda: outofcore.random_array(out, (4, 4), (2, 2), "float32", 7), "random_array()"),
    ):
        with pytest.raises(TypeError, match=re.escape(extra)):
            call()
    assert not out.exists()


def test_a_spec_is_a_keyword(operands, tmp_path):
    spec = outofcore.JobSpec(memory="64MiB", backend="cpu")
    c = outofcore.matmul(*operands, tmp_path / "c.zarr", spec=spec, client="sync")
    a, b = (zarr.open_array(path)[...] for path in operands)
    np.testing.assert_allclose(c[...], a @ b, rtol=1e-4, atol=1e-4)


def matmul(a, b, out, *, spec=None, client=None):  # noqa: ARG001
    """A function with keyword-only options, as Python refuses a positional too many."""


def _numpy_raises(call) -> type[BaseException]:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 (which built-in numpy raises is the point)
        return type(exc)
    raise AssertionError("numpy took it")


#: (our option, numpy's (or dask's) call refusing the same kind of thing, the built-in)
DIFFERENTIAL = [
    # A bad value of the right type: ValueError.
    ({"backend": "tpu"}, lambda: np.ones(2).astype("f4", casting="tpu"), ValueError),
    ({"memory": "lots"}, lambda: dask.utils.parse_bytes("lots"), ValueError),
    ({"workers": 0}, lambda: np.ones(-1), ValueError),
    ({"zarr_format": 4}, lambda: np.ones(2).astype("f4", casting="tpu"), ValueError),
    # A wrong type: TypeError.
    ({"out_dtype": "nope"}, lambda: np.dtype("nope"), TypeError),
    ({"workers": "2"}, lambda: np.ones("2"), TypeError),
    ({"backend": 3}, lambda: np.ones(2).astype("f4", casting=3), TypeError),
    ({"alpha": "2"}, lambda: np.multiply("2", np.ones(2)), TypeError),
    ({"zarr_format": "3"}, lambda: np.ones("3"), TypeError),
]


@pytest.mark.parametrize(("options", "numpy_call", "builtin"), DIFFERENTIAL)
def test_a_bad_value_is_a_value_error_and_a_wrong_type_a_type_error_as_numpy(
    options, numpy_call, builtin, tmp_path
):
    other = TypeError if builtin is ValueError else ValueError
    numpys = _numpy_raises(numpy_call)  # what numpy (dask) raises for the kind
    assert issubclass(numpys, builtin) and not issubclass(numpys, other), numpys.__mro__
    with pytest.raises(builtin) as refused:
        outofcore.matmul(tmp_path / "a", tmp_path / "b", tmp_path / "c", **options)
    assert isinstance(refused.value, errors.OutOfCoreError)
    assert refused.value.exit_status == errors.BAD_INPUT  # the command line's status kept
    if builtin is TypeError:
        assert isinstance(refused.value, errors.InputTypeError)
    else:
        assert not isinstance(refused.value, other), type(refused.value).__mro__
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    "options", [{"transpose_a": "yes"}, {"tile": 7}, {"dimension_names": "ab"}, {"tk": 2.5}]
)
def test_an_option_of_the_wrong_type_is_a_type_error(options, tmp_path):
    with pytest.raises(TypeError) as refused:
        outofcore.matmul(tmp_path / "a", tmp_path / "b", tmp_path / "c", **options)
    assert isinstance(refused.value, errors.InputTypeError)


def test_an_input_of_strings_is_a_type_error_as_numpys_matmul(tmp_path):
    strings = np.array([["a", "b"], ["c", "d"]])
    with pytest.raises(TypeError):
        np.matmul(strings, strings)
    stored = zarr.create_array(tmp_path / "s.zarr", shape=(2, 2), chunks=(2, 2), dtype="<U1")
    stored[...] = strings
    with pytest.raises(TypeError, match="has dtype <U1") as refused:
        outofcore.matmul(stored, stored, tmp_path / "c.zarr", client="sync")
    assert isinstance(refused.value, errors.InputError) and not (tmp_path / "c.zarr").exists()


def test_each_error_class_is_documented_with_its_builtin():
    """docs/api.md names every class of outofcore.errors, and the built-in each derives
    from beside OutOfCoreError."""
    text = (ROOT / "docs" / "api.md").read_text()
    classes = {
        name: value
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, Exception | Warning)
    }
    assert {"InputTypeError", "FallbackError", "FallbackWarning", "OptionError"} <= set(classes)
    missing = [name for name in classes if not re.search(rf"`[\w.]*\b{name}`", text)]
    assert not missing, missing
    assert issubclass(errors.BackendError, ValueError)  # as numpy's bad option value
    assert issubclass(errors.BackendError, RuntimeError)  # as it was: callers keep theirs
    assert issubclass(errors.InputTypeError, TypeError)
    assert issubclass(errors.OptionError, errors.InputTypeError)
    for name in ("InputTypeError", "BackendError"):
        assert re.search(rf"`{name}` \([^)]*`(TypeError|ValueError)`", text), name


def test_dir_lists_the_public_names_only():
    names = dir(outofcore)
    assert "Any" not in names and "annotations" not in names
    assert not [n for n in names if n.startswith("_") and n != "__version__"], names
    assert set(outofcore.__all__) <= set(names)
    for name in names:
        getattr(outofcore, name)  # each resolves


def test_the_plan_prints_as_the_command_with_a_short_repr_and_its_figures(operands, capsys):
    job_plan = outofcore.plan(*operands, memory="1MiB", client="sync")
    assert isinstance(job_plan, outofcore.PlanReport)
    command = ["plan", *operands, "--memory", "1MiB", "--scheduler", "sync"]
    assert main(command) == 0
    printed = capsys.readouterr().out

    def without_timing(text: str) -> list[str]:  # the prediction reads this machine's load
        lines = text.rstrip("\n").splitlines()
        return lines[: next(i for i, line in enumerate(lines) if "predicted time" in line)]

    assert without_timing(str(job_plan)) == without_timing(printed)
    shown = repr(job_plan)
    assert len(shown) < 200 and "\n" not in shown and shown.startswith("<outofcore plan")
    assert main([*command, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert isinstance(job_plan.summary, dict) and job_plan.summary.keys() == summary.keys()
    for key in ("tiles", "tk", "task_bytes", "bytes_read", "bytes_written", "workers"):
        assert getattr(job_plan, key) == summary[key], key
    assert job_plan.tile == tuple(summary["tile"]) and job_plan.shape == (60, 30)
    assert job_plan.tiles == len(job_plan.plan.tasks)
    assert job_plan.seconds is None or job_plan.seconds > 0


def test_a_bad_setting_from_dask_config_names_the_key_not_a_variable(
    operands, tmp_path, monkeypatch
):
    """The issue's ``dask.config.set({"outofcore.read-retries": "lots"})``: was refused as
    ``OUTOFCORE_READ_RETRIES='lots'``, a variable never set."""
    with dask.config.set({"outofcore.read-retries": "lots"}):
        with pytest.raises(ValueError, match=r"dask.config's outofcore.read-retries='lots'") as e:
            outofcore.matmul(*operands, tmp_path / "c.zarr", client="sync")
        assert "OUTOFCORE_READ_RETRIES" not in str(e.value)
        monkeypatch.setenv("DASK_OUTOFCORE__READ_RETRIES", "7")  # set, but not where it came
        with pytest.raises(ValueError, match=r"^dask.config's outofcore.read-retries='lots'"):
            config.check_all()
        monkeypatch.setenv("DASK_OUTOFCORE__READ_RETRIES", "lots")  # where it came from
        with pytest.raises(ValueError, match=r"^DASK_OUTOFCORE__READ_RETRIES='lots'"):
            config.check_all()
    assert not (tmp_path / "c.zarr").exists()

"""The markers ``cluster``, ``system`` and ``slow``, put on each test at collection
(``tests/conftest.py``'s ``pytest_collection_modifyitems``; registered in ``pyproject.toml``).

``cluster`` and ``system`` are read from what a test runs: its function, the fixtures it
takes, and the functions of ``tests/`` and ``benchmarks/`` that these name, followed call by call.
``slow`` is measured: the tests ``tests/slow_tests.txt`` lists, and all of ``tests/system/``.
"""

from __future__ import annotations

import dis
import functools
import importlib
import inspect
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
#: The packages whose code is followed: the tests and their helpers (moto from benchmarks).
FOLLOWED = ("tests", "benchmarks")

#: Fixtures that start a Dask cluster (tests/conftest.py; ``two_process_client`` takes one).
CLUSTER_FIXTURES = frozenset({"local_cluster", "own_local_cluster"})
#: What starts a Dask cluster in a test's code (or the code it calls): a LocalCluster,
#: ``gen_cluster``, or a job asked for workers (``workers=2``, ``--workers 2``).  A job
#: without a client runs on a LocalCluster it starts itself, one worker in this process:
#: that alone is not counted.
CLUSTER = re.compile(
    r"LocalCluster\(|LocalCUDACluster\(|gen_cluster"
    r"|(?:run_job|matmul|gram|to_zarr|dot)\((?:[^()]|\([^()]*\))*?\bworkers=(?!None\b|0\b)"
    r'|"--workers",\s*(?:"\d|str\(|\w)'
    r'|getfixturevalue\("(?:local_cluster|own_local_cluster|two_process_client)"'
)
#: What starts a process in a test's code (or the code it calls): the CLI through
#: ``tests.helpers.cli``, ``dask scheduler`` / ``dask worker``, moto, Azurite, scripts.
PROCESS = re.compile(
    r"subprocess\.|Popen\(|sys\.executable|os\.fork\("
    r'|getfixturevalue\("(?:moto_server|s3_bucket|azurite|azure_container)"'
)


@functools.cache
def slow_tests() -> frozenset[str]:
    """The test functions (``path::name``) and files that ``tests/slow_tests.txt`` lists."""
    lines = (TESTS / "slow_tests.txt").read_text().splitlines()
    return frozenset(line.split()[-1] for line in lines if line.strip() and line[0] != "#")


@functools.cache
def _source(code: types.CodeType) -> str:
    """The source of a function of ``tests/`` or ``benchmarks/``; empty elsewhere."""
    path = Path(code.co_filename).resolve()
    if not any(path.is_relative_to(ROOT / package) for package in FOLLOWED):
        return ""
    try:
        return inspect.getsource(code)
    except (OSError, TypeError):
        return ""


def _names(code: types.CodeType) -> tuple[set[str], set[types.ModuleType]]:
    """The global, attribute and imported names a function's code (its nested functions
    too) uses, and the modules of ``tests/`` it imports inside."""
    names, modules = set(code.co_names), set()
    for instruction in dis.get_instructions(code):
        module = str(instruction.argval)
        if instruction.opname == "IMPORT_NAME" and module.split(".")[0] in FOLLOWED:
            modules.add(sys.modules.get(module) or importlib.import_module(module))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            more_names, more_modules = _names(const)
            names |= more_names
            modules |= more_modules
    return names, modules


def _functions(value: Any) -> list[types.FunctionType]:
    """The functions of ``tests/`` or ``benchmarks/`` that ``value`` is (unwrapped from
    its decorators) or holds (a class's methods)."""
    if isinstance(value, type):
        if value.__module__.split(".")[0] not in FOLLOWED:
            return []
        return [f for v in vars(value).values() if callable(v) for f in _functions(v)]
    try:
        value = inspect.unwrap(value) if callable(value) else value
    except Exception:  # noqa: BLE001 - whatever an object's __wrapped__ does
        return []
    if isinstance(value, types.FunctionType) and _source(value.__code__):
        return [value]
    return []


@functools.cache
def _callees(function: types.FunctionType) -> tuple[types.FunctionType, ...]:
    """The functions of ``tests/`` and ``benchmarks/`` that ``function`` names: its
    module's globals, and the attributes of the modules of those packages it uses
    (``helpers.cli``, ``from tests.helpers import cli``)."""
    names, modules = _names(function.__code__)
    found = [function.__globals__[name] for name in names if name in function.__globals__]
    modules |= {
        value
        for value in found
        if isinstance(value, types.ModuleType) and value.__name__.split(".")[0] in FOLLOWED
    }
    found += [getattr(m, name) for m in modules for name in names if hasattr(m, name)]
    return tuple(f for value in found for f in _functions(value))


#: What :func:`_reaches` found: (pattern, code) -> whether that code, or code it calls, matches.
_KNOWN: dict[tuple[re.Pattern[str], types.CodeType], bool] = {}


def _reaches(function: types.FunctionType, pattern: re.Pattern[str]) -> bool:
    """Whether the code of ``function``, or of a function of ``tests/`` or ``benchmarks/``
    that it calls (followed through every call), matches ``pattern``."""
    seen = {function.__code__}
    todo = [function]
    while todo:
        current = todo.pop()
        known = _KNOWN.get((pattern, current.__code__))
        if known is False:  # all it reaches was searched before
            continue
        if known or pattern.search(_source(current.__code__)):
            _KNOWN[pattern, function.__code__] = True
            return True
        for callee in _callees(current):
            if callee.__code__ not in seen:
                seen.add(callee.__code__)
                todo.append(callee)
    _KNOWN.update(dict.fromkeys(((pattern, code) for code in seen), False))  # all searched
    return False


def _runs(item: Any) -> list[types.FunctionType]:
    """The functions a test runs: the test and every fixture it takes."""
    functions = _functions(getattr(item, "function", None))
    info = getattr(item, "_fixtureinfo", None)
    for definitions in getattr(info, "name2fixturedefs", {}).values():
        functions += [f for definition in definitions for f in _functions(definition.func)]
    return functions


def mark(items: list[Any]) -> None:
    """Put ``cluster``, ``system`` and ``slow`` on the tests that are so."""
    for item in items:
        relative = Path(item.path).resolve().relative_to(ROOT).as_posix()
        name = relative + "::" + item.nodeid.split("::", 1)[-1].split("[")[0]
        # tests/test_markers.py names the helpers it checks: it does not run them.
        runs = _runs(item) if relative != "tests/test_markers.py" else []
        in_system = relative.startswith("tests/system/")
        if CLUSTER_FIXTURES & set(item.fixturenames) or any(_reaches(f, CLUSTER) for f in runs):
            item.add_marker(pytest.mark.cluster)
        if in_system or any(_reaches(f, PROCESS) for f in runs):
            item.add_marker(pytest.mark.system)
        if in_system or relative in slow_tests() or name in slow_tests():
            item.add_marker(pytest.mark.slow)

"""One import direction (issues 43, 51): every import of outofcore runs down the layers,
never back up.

The layers, top to bottom (``outofcore/__init__.py`` says the same)::

    faces      outofcore/__init__, api, cli, generate, xarray
    frontends  the command line's parts, the dask and xarray bridges, verify, generate
    jobs       a job from spec to output
    machine    the probe, its cache, the prediction
    compute    the tile loop, a worker's kept state
    backends   the engines: the protocol, CPU BLAS, limbs, cuda/ (the CUDA backend)
    journal    records, lease, resume, status, targets     (jobs -> journal -> storage)
    operands   the product model, operands computed as read, dtypes, stacks
    storage    locations, stores, chunk files, codecs, reads, writes, deletes
    config     outofcore.config
    planner    the plan, the memory model, the tiling (pure data)   } side by side: neither
    runtime    the Dask runtime: cluster, executors, addresses      } imports the other
    errors     outofcore.errors: imports nothing of outofcore

The GPU check is no layer: it is a tool run from the checkout (``tools/gpu_check/``), not
installed.  Only ``outofcore/backends/cuda/`` imports ``numba.cuda``.

An import counts wherever it is written: at the top, inside a function, or under
``if TYPE_CHECKING:`` (a type is still a dependency a reader has to follow).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import ROOT

#: What each layer may import besides itself.
MAY_IMPORT: dict[str, set[str]] = {
    "faces": {
        "frontends", "jobs", "machine", "compute", "backends", "journal", "operands", "storage",
        "config", "planner", "runtime", "errors",
    },
    "frontends": {
        "jobs", "machine", "compute", "backends", "journal", "operands", "storage", "config",
        "planner", "runtime", "errors",
    },
    "jobs": {
        "machine", "compute", "backends", "journal", "operands", "storage", "config", "planner",
        "runtime", "errors",
    },
    "machine": {
        "compute", "backends", "operands", "storage", "config", "planner", "runtime", "errors",
    },
    "compute": {"backends", "operands", "storage", "config", "planner", "runtime", "errors"},
    "backends": {"operands", "storage", "config", "planner", "runtime", "errors"},
    "journal": {"storage", "config", "planner", "runtime", "errors"},
    "operands": {"storage", "config", "planner", "runtime", "errors"},
    "storage": {"config", "planner", "runtime", "errors"},
    "config": {"planner", "runtime", "errors"},
    "planner": {"errors"},
    "runtime": {"errors"},
    "errors": set(),
}  # fmt: skip
FACES = {"outofcore", "outofcore.api", "outofcore.cli", "outofcore.generate", "outofcore.xarray"}
BASE = {"outofcore.errors": "errors", "outofcore.config": "config"}


def layer_of(module: str) -> str:
    """The layer of a dotted module name of outofcore."""
    if module in FACES:
        return "faces"
    if module in BASE:
        return BASE[module]
    parts = module.split(".")
    if parts[0] == "outofcore" and len(parts) >= 2 and parts[1] in MAY_IMPORT:
        return parts[1]
    raise ValueError(f"{module}: in no layer; add it to tests/test_layers.py and the README")


def module_name(path: Path, root: Path) -> str:
    """The dotted name of the module at ``path`` under ``root``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, name: str, is_package: bool) -> set[str]:
    """The outofcore modules (or names inside them) ``source`` imports."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's own package
                package = name.split(".")
                package = package if is_package else package[:-1]
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return {m for m in found if m.split(".")[0] == "outofcore"}


def wrong_imports(root: Path) -> list[str]:
    """Every import under ``root`` (outofcore/) that runs against the layers:
    ``"importer (layer) -> imported (layer)"``."""
    modules = {}
    for path in sorted((root / "outofcore").rglob("*.py")):
        modules[module_name(path, root)] = path
    wrong = []
    for name, path in modules.items():
        here = layer_of(name)
        for target in sorted(imports_of(path.read_text(), name, path.name == "__init__.py")):
            while target not in modules and "." in target:  # a name inside a module
                target = target.rpartition(".")[0]
            if target not in modules:
                continue
            there = layer_of(target)
            if there != here and there not in MAY_IMPORT[here]:
                wrong.append(f"{name} ({here}) -> {target} ({there})")
    return wrong


def test_every_module_is_in_a_layer():
    for path in (ROOT / "outofcore").rglob("*.py"):
        layer_of(module_name(path, ROOT))


def test_nothing_is_installed_as_a_top_level_scheduler():
    """``scheduler`` is a name PyPI and users' code already use: outofcore's code is all in
    the ``outofcore`` package, and the top-level ``scheduler/`` folder holds no module."""
    assert not list((ROOT / "scheduler").rglob("*.py"))
    assert 'include = ["outofcore*"]' in (ROOT / "pyproject.toml").read_text()


def test_imports_run_down_the_layers():
    wrong = wrong_imports(ROOT)
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


PLANTED = {
    "outofcore/__init__.py": "",
    "outofcore/errors.py": "",
    "outofcore/storage/__init__.py": "",
    "outofcore/storage/stores.py": "from outofcore.errors import InputError\n",
    "outofcore/journal/__init__.py": "",
    "outofcore/journal/records.py": "from outofcore.storage import stores\n",
    "outofcore/operands/__init__.py": "",
    "outofcore/operands/product.py": "def f():\n    from outofcore.journal.records import x\n",
    "outofcore/compute/__init__.py": "",
    "outofcore/compute/tile.py": (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from outofcore.jobs import spec\n"
    ),
    "outofcore/jobs/__init__.py": "",
    "outofcore/jobs/spec.py": "from outofcore import api\n",
    "outofcore/api.py": "from outofcore.jobs import spec\n",
    "outofcore/planner/__init__.py": "",
    "outofcore/planner/plan.py": "from outofcore.runtime import cluster\n",
    "outofcore/runtime/__init__.py": "",
    "outofcore/runtime/cluster.py": "from outofcore.errors import InputError\n",
}


def test_the_check_catches_planted_wrong_imports(tmp_path):
    """A tree with four wrong imports (sideways in a function, up under TYPE_CHECKING, to
    a face, between the plan and the runtime) and four right ones: exactly the four are
    named."""
    for relative, text in PLANTED.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    assert sorted(wrong_imports(tmp_path)) == [
        "outofcore.compute.tile (compute) -> outofcore.jobs.spec (jobs)",
        "outofcore.jobs.spec (jobs) -> outofcore.api (faces)",
        "outofcore.operands.product (operands) -> outofcore.journal.records (journal)",
        "outofcore.planner.plan (planner) -> outofcore.runtime.cluster (runtime)",
    ]


@pytest.mark.parametrize("module", ["outofcore.tools", "outofcore.nowhere.x"])
def test_a_module_outside_the_layers_is_named(module):
    with pytest.raises(ValueError, match=module):
        layer_of(module)


@pytest.mark.parametrize(
    "layer",
    [
        "frontends",
        "jobs",
        "machine",
        "compute",
        "journal",
        "operands",
        "storage",
        "planner",
        "runtime",
    ],
)
def test_each_layer_names_its_modules(layer):
    """A layer's ``__init__`` docstring names every module in it (``name``, or ``name/`` for a
    package inside it) and says what the layer may import."""
    folder = ROOT / "outofcore" / layer
    text = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    modules = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
    packages = {p.parent.name for p in folder.glob("*/__init__.py")}
    unnamed = sorted(
        [m for m in modules if f"``{m}``" not in text]
        + [f"{p}/" for p in packages if f"``{p}/``" not in text]
    )
    assert not unnamed, f"outofcore/{layer}/__init__.py does not name {unnamed}"
    assert "May import:" in text


def imports_numba_cuda(source: str) -> bool:
    """Whether ``source`` imports ``numba.cuda`` (``from numba import cuda`` included)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(
            alias.name.startswith("numba.cuda") for alias in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("numba.cuda"):
                return True
            if node.module == "numba" and any(alias.name == "cuda" for alias in node.names):
                return True
    return False


def test_only_the_cuda_folder_imports_numba_cuda():
    """Everything of the package that imports ``numba.cuda`` is in ``backends/cuda/``; the
    check sees each form of the import (planted below)."""
    cuda = ROOT / "outofcore" / "backends" / "cuda"
    outside = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "outofcore").rglob("*.py"))
        if cuda not in path.parents and imports_numba_cuda(path.read_text())
    ]
    assert not outside, f"numba.cuda imported outside outofcore/backends/cuda/: {outside}"
    assert not (ROOT / "outofcore" / "gpu_check").exists()  # a tool, not installed
    for planted in (
        "from numba import cuda",
        "import numba.cuda",
        "from numba.cuda import jit",
        "def f():\n    from numba import njit, cuda\n",
    ):
        assert imports_numba_cuda(planted), planted
    assert not imports_numba_cuda("from numba import njit\nimport numbat")

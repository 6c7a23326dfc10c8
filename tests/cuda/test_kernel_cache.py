"""Kernels compiled once per machine, not per process (issue 44, item 1).

Every production kernel is made with numba-cuda's on-disk cache, each variant with an index
file and a key of its own that a second process computes alike, in the folder
:mod:`outofcore.backends.cuda.cache_folder` chooses; the command and the GPU workers a job
starts get the folder before numba is imported.  Saving and loading an entry needs a device
(design.md): what is checked here is everything up to it, in processes without the
simulator (numba-cuda makes its real dispatchers with no GPU present).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from outofcore.backends.cuda import cache_folder
from tests.helpers import ROOT

#: Prints, for every production kernel, what numba-cuda caches it under.
SHOW_CACHE = """
import json, hashlib, sys
import numpy as np
from numba.cuda import config as cuda_config
from outofcore.backends.cuda import kernels, transpose

class Device:  # the codegen's figures of one chip: CUDA version, compute capability
    def magic_tuple(self):
        return ((13, 0), (9, 0))

found = []
for dtype, params in kernels.PRODUCTION.items():
    built = [
        ("gemm", False, kernels.build_gemm_kernel(params, dtype)),
        ("transpose", False, transpose.build_transpose_kernel(dtype)),
    ]
    if kernels.has_interior_kernel(dtype):
        built.append(("gemm", True, kernels.build_gemm_kernel(params, dtype, True)))
    for kind, interior, kernel in built:
        cache = kernel._cache
        entry = {"kind": kind, "interior": interior, "dtype": dtype.name}
        entry["cache"] = type(cache).__name__
        if entry["cache"] == "CUDACache":
            n = dtype.name
            sig = (n + "[:, ::1], ") * (3 if kind == "gemm" else 2)
            key = cache._index_key(sig, Device())
            entry.update(
                folder=cache._cache_path,
                index=cache._impl.filename_base,
                locator=type(cache._impl.locator).__name__,
                key=hashlib.sha256(repr(key).encode()).hexdigest(),
                lto=kernel.targetoptions.get("lto"),
            )
        found.append(entry)
print(json.dumps({"simulator": bool(cuda_config.ENABLE_CUDASIM), "kernels": found}))
"""


def show_cache(env: dict[str, str]) -> dict:
    """What a fresh process without the simulator caches every production kernel under."""
    base = {
        k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "NUMBA_CACHE_DIR")
    }
    result = subprocess.run(
        [sys.executable, "-c", SHOW_CACHE],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**base, **env},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    shown = json.loads(result.stdout.strip().splitlines()[-1])
    assert shown["simulator"] is False
    return shown


def test_every_production_kernel_has_its_own_cache_entry_and_key(tmp_path):
    first = show_cache({"NUMBA_CACHE_DIR": str(tmp_path / "kernels")})["kernels"]
    # four dtypes, the GEMM and the transpose of each, and the interior GEMM of three
    assert len(first) == 11
    assert {k["cache"] for k in first} == {"CUDACache"}
    assert {k["locator"] for k in first} == {"_UserProvidedCacheLocator"}
    assert all(Path(k["folder"]).is_relative_to(tmp_path / "kernels") for k in first)
    assert len({k["index"] for k in first}) == 11  # an index file each
    assert len({k["key"] for k in first if not k["interior"]}) == 8  # and a key each, but:
    # the checked and interior kernels of a dtype can share their bytecode (``if interior:``
    # reads a value of the exec'd namespace, which the key does not see): their names,
    # so their index files, keep them apart
    checked = {k["dtype"]: k["index"] for k in first if k["kind"] == "gemm" and not k["interior"]}
    assert all(k["index"] != checked[k["dtype"]] for k in first if k["interior"])
    for k in first:  # the name says what shapes the kernel: dtype, tile, kind
        assert k["dtype"] in k["index"] and k["kind"] in k["index"]
        assert k["lto"] is False  # NVVM once: no measured gain from LTO
        # the interior kernel's intrinsics are not in its key: their version is in its name
        assert ("_interior_v" in k["index"]) == k["interior"]
    assert {k["dtype"] for k in first if k["interior"]} == {"float32", "float64", "complex64"}
    from outofcore.backends.cuda.kernels import PRODUCTION  # noqa: PLC0415

    for params in PRODUCTION.values():
        tile = f"{params.bm}x{params.bn}x{params.bk}_{params.tm}x{params.tn}_t{params.turn}"
        assert any(tile in k["index"] for k in first)
    # A second process finds each kernel under the same index file and key: it hits.
    second = show_cache({"NUMBA_CACHE_DIR": str(tmp_path / "kernels")})["kernels"]
    assert [(k["index"], k["key"]) for k in second] == [(k["index"], k["key"]) for k in first]


def test_without_the_variable_the_kernels_go_to_the_users_private_folder(tmp_path):
    shown = show_cache({"XDG_CACHE_HOME": str(tmp_path)})["kernels"]
    folder = tmp_path / "outofcore" / cache_folder.SUBFOLDER
    assert all(Path(k["folder"]).is_relative_to(folder) for k in shown)
    assert folder.stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="folder ownership is POSIX's")
def test_a_folder_others_may_write_to_is_not_a_kernel_cache(tmp_path):
    folder = tmp_path / "outofcore" / cache_folder.SUBFOLDER
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    shown = show_cache({"XDG_CACHE_HOME": str(tmp_path)})["kernels"]
    assert {k["cache"] for k in shown} == {"NullCache"}  # compiled per process, nothing loaded
    assert list(folder.iterdir()) == []


def test_which_folders_are_private(tmp_path):
    assert cache_folder.private_folder(str(tmp_path / "new" / "kernels"))
    assert (tmp_path / "new" / "kernels").stat().st_mode & 0o777 == 0o700
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    shared.chmod(0o770)
    assert not cache_folder.private_folder(str(shared))
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(target)
    assert not cache_folder.private_folder(str(tmp_path / "link"))
    (tmp_path / "file").write_text("")
    assert not cache_folder.private_folder(str(tmp_path / "file"))


def test_a_folder_the_user_set_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    environ = {"NUMBA_CACHE_DIR": str(tmp_path / "mine")}
    assert cache_folder.use_kernel_cache(environ) == str(tmp_path / "mine")
    assert environ == {"NUMBA_CACHE_DIR": str(tmp_path / "mine")}
    empty: dict[str, str] = {}
    assert cache_folder.use_kernel_cache(empty) == str(tmp_path / "xdg" / "outofcore" / "kernels")
    assert empty["NUMBA_CACHE_DIR"] == str(tmp_path / "xdg" / "outofcore" / "kernels")


def test_the_command_sets_the_folder_before_numba_is_imported(tmp_path):
    code = (
        "import os, sys\n"
        "from outofcore.cli import main\n"
        "try:\n"
        "    main(['matmul', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(os.environ.get('NUMBA_CACHE_DIR'), 'numba' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**env, "XDG_CACHE_HOME": str(tmp_path)},
        check=True,
    )
    folder, imported = result.stdout.strip().splitlines()[-1].rsplit(" ", 1)
    assert folder == str(tmp_path / "outofcore" / "kernels")
    assert imported == "False"


def test_the_gpu_workers_a_job_starts_get_the_folder(tmp_path, monkeypatch):
    """The worker processes of ``--gpus`` inherit the folder (outofcore's own GPU workers:
    this node has no GPU that dask-cuda would take)."""
    from outofcore.jobs.run import open_job_executor  # noqa: PLC0415
    from outofcore.jobs.spec import JobSpec  # noqa: PLC0415

    monkeypatch.setenv("NUMBA_CACHE_DIR", "placeholder")
    monkeypatch.delenv("NUMBA_CACHE_DIR")  # restored to unset after the test
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    spec = JobSpec(memory=64 * 2**20, gpus=(0,), progress=False)
    with open_job_executor(None, spec, dashboard=False) as executor:
        seen = executor.client.run(lambda: os.environ.get("NUMBA_CACHE_DIR"))
    assert list(seen.values()) == [str(tmp_path / "outofcore" / "kernels")]

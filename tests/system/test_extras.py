"""pyproject.toml's GPU extras and constraints.txt, read as data."""

from __future__ import annotations

import re
import tomllib

from tests.helpers import ROOT

#: A CUDA major version in a requirement: numba-cuda[cu13], dask-cuda[cu13], cupy-cuda13x,
#: and the floor of NVIDIA's CUDA tool wheels (nvidia-cuda-cuobjdump>=13).
CUDA_MAJOR = re.compile(r"\[cu(\d+)\]|-cuda(\d+)x\b|^nvidia-cuda-[\w-]+>=(\d+)")


def extras() -> dict[str, list[str]]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)["project"]["optional-dependencies"]


def test_gpu_extras_agree_on_one_cuda_major_version():
    majors = {
        (name, requirement): next(group for group in match.groups() if group)
        for name, requirements in extras().items()
        for requirement in requirements
        if (match := CUDA_MAJOR.search(requirement))
    }
    named = {name for name, _ in majors}
    assert {"cuda", "cuda-tools", "cupy", "gpu"} <= named, majors
    assert set(majors.values()) == {"13"}, majors


def test_the_gpu_extra_is_dask_cuda_on_top_of_cuda_and_pinned_with_the_rest():
    gpu = extras()["gpu"]
    assert "outofcore[cuda]" in gpu
    [dask_cuda] = [r for r in gpu if r.startswith("dask-cuda")]
    assert "sys_platform == 'linux'" in dask_cuda  # its wheels are Linux's alone
    # Resolved together with the test extra: the GPU image gets the dask and distributed
    # that the CPU image and the tests run (dask-cuda pins them).
    assert "--extra gpu" in (ROOT / "scripts" / "update-constraints").read_text()
    pins = dict(
        re.findall(r"^([\w.-]+)==(\S+)", (ROOT / "constraints.txt").read_text(), re.MULTILINE)
    )
    assert {"dask-cuda", "rapids-dask-dependency", "dask", "distributed"} <= set(pins)
    assert pins["dask"] == pins["distributed"]

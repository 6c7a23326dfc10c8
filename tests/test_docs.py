"""The docs' examples run as written (issue 19, items 5 and 6).

Every fenced ``bash`` block of the documents below is read from the markdown, so an
edited example is what runs: its ``outofcore`` commands run in order in a fresh
folder (their shapes a hundred times smaller, see :data:`SMALLER`; optional
``[...]`` parts left out), ``export`` lines set the environment of the commands after
them, and any other line must be one :data:`NOT_HERE` explains.  ``s3://data`` is a
bucket on a real S3 API server on loopback (moto), its credentials and endpoint put
where the docs write ``...`` and ``http://minio:9000``.  Every ``python`` block runs
as a script file (so the ``if __name__ == "__main__":`` guard the docs ask for is
exercised), next to small generated inputs.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from outofcore.generate import random_array
from tests.helpers import ROOT

DOCUMENTS = ("README.md", "docs/cli.md", "docs/getting-started.md", "docs/object-stores.md")
#: Lines of bash blocks that are not run here, by their start, and why.
NOT_HERE = {
    "python3 -m venv": "the install: .ci/run runs the README's commands themselves",
    "pip install": "an install: the test extra has what the examples need",
    ".venv/bin/pip": "an install: the test extra has what the examples need",
    "python benchmarks/": "a benchmark: tests/system/test_benchmarks.py runs each on small sizes",
}
#: Shapes and chunks a hundred times smaller (at least 1), so the examples take seconds.
SMALLER = re.compile(r"--(shape|chunks) (\d+),(\d+)")
OPTIONAL = re.compile(r"\s*\[[^\]]*\]")
BLOCK = re.compile(r"^```(bash|python)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(document: str, language: str) -> list[str]:
    text = (ROOT / document).read_text()
    return [body for kind, body in BLOCK.findall(text) if kind == language]


def commands(block: str) -> list[str]:
    """The block's lines: continuations joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    lines = (line.split("  #")[0].split(" # ")[0].strip() for line in joined.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def smaller(command: str) -> str:
    """A command line with its optional parts left out and its shapes made smaller."""

    def shrink(match: re.Match) -> str:
        rows, cols = (max(1, math.ceil(int(x) / 100)) for x in match.group(2, 3))
        return f"--{match.group(1)} {rows},{cols}"

    return SMALLER.sub(shrink, OPTIONAL.sub("", command))


def on_moto(text: str, server, bucket: str) -> str:
    """The docs' placeholders for an object store, made the moto server's."""
    for placeholder, value in (
        ("s3://data", bucket),
        ("http://minio:9000", server.endpoint),
        ("AWS_ACCESS_KEY_ID=...", f"AWS_ACCESS_KEY_ID={server.KEY}"),
        ("AWS_SECRET_ACCESS_KEY=...", f"AWS_SECRET_ACCESS_KEY={server.SECRET}"),
        ("key=...", f"key={server.KEY}"),
        ("secret=...", f"secret={server.SECRET}"),
        ('"key": "..."', f'"key": "{server.KEY}"'),
        ('"secret": "..."', f'"secret": "{server.SECRET}"'),
    ):
        text = text.replace(placeholder, value)
    return text


def run_block(block: str, folder: Path, env: dict[str, str]) -> int:
    """Run a bash block's commands in ``folder``; the number of outofcore commands run."""
    ran = 0
    for line in commands(block):
        if line.startswith("export "):
            env.update(pair.split("=", 1) for pair in shlex.split(line)[1:])
            continue
        if not line.startswith("outofcore "):
            why = [reason for start, reason in NOT_HERE.items() if line.startswith(start)]
            assert why, f"the docs test does not know how to run {line!r}: add it to NOT_HERE"
            continue
        command = smaller(line)
        done = subprocess.run(
            [sys.executable, "-m", "outofcore.cli", *shlex.split(command)[1:]],
            capture_output=True,
            text=True,
            cwd=folder,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        ran += 1
    return ran


@pytest.fixture
def env():
    """The environment of the examples: this checkout on the path, no AWS variables."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {**base, "PYTHONPATH": str(ROOT)}


@pytest.mark.parametrize("document", ["README.md", "docs/cli.md", "docs/getting-started.md"])
def test_the_shell_examples_run(document, tmp_path, env):
    ran = sum(run_block(block, tmp_path, env) for block in blocks(document, "bash"))
    assert ran >= 1, f"{document} has no outofcore command to run"


def test_the_object_store_examples_run(moto_server, s3_bucket, tmp_path, env):
    options = moto_server.options
    for name, shape, seed in (("a", (300, 200), 1), ("b", (200, 250), 2)):
        random_array(
            f"{s3_bucket}/{name}.zarr", shape, (64, 64), seed=seed, storage_options=options
        )
    ran = sum(
        run_block(on_moto(block, moto_server, s3_bucket), tmp_path, env)
        for block in blocks("docs/object-stores.md", "bash")
    )
    assert ran == 2  # matmul with the AWS variables, status with --storage-option


@pytest.mark.parametrize(
    "document", ["README.md", "docs/getting-started.md", "docs/object-stores.md"]
)
def test_the_python_examples_run_as_scripts(document, request, tmp_path, env):
    """Each python block as a script file; the default client starts worker processes,
    which import the script again: without the guard the docs ask for, this fails."""
    scripts = blocks(document, "python")
    assert scripts, f"{document} has no python example"
    if "s3://" in "".join(scripts):
        server = request.getfixturevalue("moto_server")
        bucket = request.getfixturevalue("s3_bucket")
        scripts = [on_moto(script, server, bucket) for script in scripts]
    else:
        random_array(tmp_path / "a.zarr", (300, 200), (64, 64), seed=1)
        random_array(tmp_path / "b.zarr", (200, 250), (64, 64), seed=2)
    for number, script in enumerate(scripts):
        assert 'if __name__ == "__main__":' in script, f"{document}: a script needs the guard"
        path = tmp_path / f"example{number}.py"
        path.write_text(
            script.replace("(3000, 2000)", "(300, 200)")
            .replace("(2000, 2500)", "(200, 250)")
            .replace("(1024, 1024)", "(64, 64)")
        )
        done = subprocess.run(
            [sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path,
            env=env, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, f"{document} example {number}\n{done.stdout}\n{done.stderr}"
        last = done.stdout.strip().splitlines()[-1]
        assert last.endswith(("True", "complete")), done.stdout

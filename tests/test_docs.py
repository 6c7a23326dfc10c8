"""The docs' examples run as written (issue 19, items 5 and 6; issue 29, item 6).

Every fenced ``bash`` block of the documents below is read from the markdown, so an
edited example is what runs: its ``outofcore`` commands run in order in a fresh
folder (their shapes a hundred times smaller, see :data:`SMALLER`; optional
``[...]`` parts left out), ``export`` lines set the environment of the commands after
them, and any other line must be one :data:`NOT_HERE` explains.  ``s3://data`` is a
bucket on a real S3 API server on loopback (moto), its credentials and endpoint put
where the docs write ``...`` and ``http://minio:9000``.  Every ``python`` block runs
as a script file, its LocalCluster's workers in processes of their own
(``OUTOFCORE_IN_PROCESS_WORKER=0``), which import the script again: the
``if __name__ == "__main__":`` guard the docs ask for is exercised.

The README and getting-started.md are run as a reader follows them: every block,
bash and python, in the order the document has them, in one folder, so an example
that trips over what an earlier one made (or needs what none made) fails here.
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

from outofcore.frontends.generate import random_array
from tests.helpers import ROOT

DOCUMENTS = (
    "README.md",
    "docs/cli.md",
    "docs/getting-started.md",
    "docs/object-stores.md",
    "docs/dask-and-xarray.md",
)
#: Lines of bash blocks that are not run here, by their start, and why.
NOT_HERE = {
    "python3 -m venv": "the install: .ci/run runs the README's commands themselves",
    "pip install": "an install: the test extra has what the examples need",
    ".venv/bin/pip": "an install: the test extra has what the examples need",
    "python -m benchmarks.": "a benchmark: tests/system/test_benchmarks.py runs each small",
    "source .venv/bin/activate": "the install's venv: the tests run in the one they run in",
}
#: Shapes and chunks a hundred times smaller (at least 1), so the examples take seconds.
SMALLER = re.compile(r"--(shape|chunks) (\d+(?:,\d+)*)")
OPTIONAL = re.compile(r"\s*\[[^\]]*\]")
BLOCK = re.compile(r"^```(bash|python)\n(.*?)^```", re.MULTILINE | re.DOTALL)
#: Documents a reader follows from the top in one folder: run whole, in order.
IN_ORDER = ("README.md", "docs/getting-started.md", "docs/dask-and-xarray.md")


def examples(document: str) -> list[tuple[str, str]]:
    """The document's bash and python blocks, ``(language, body)``, in its order."""
    return BLOCK.findall((ROOT / document).read_text())


def blocks(document: str, language: str) -> list[str]:
    return [body for kind, body in examples(document) if kind == language]


def commands(block: str) -> list[str]:
    """The block's lines: continuations joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    lines = (line.split("  #")[0].split(" # ")[0].strip() for line in joined.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def smaller(command: str) -> str:
    """A command line with its optional parts left out and its shapes made smaller."""

    def shrink(match: re.Match) -> str:
        """The matrix (or vector) sizes a hundred times smaller; a stack's batch kept."""
        sizes = [int(x) for x in match.group(2).split(",")]
        batch = sizes[:-2] if len(sizes) > 2 else []
        smaller = [max(1, math.ceil(x / 100)) for x in sizes[len(batch) :]]
        return f"--{match.group(1)} {','.join(map(str, batch + smaller))}"

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


def run_script(script: str, path: Path, env: dict[str, str]) -> str:
    """Run a python block as the script file ``path`` (its shapes made smaller), its
    LocalCluster's workers in processes that import it again; its output."""
    assert 'if __name__ == "__main__":' in script, f"{path.name}: a script needs the guard"
    path.write_text(
        script.replace("(3000, 2000)", "(300, 200)")
        .replace("(2000, 2500)", "(200, 250)")
        .replace("(1024, 1024)", "(64, 64)")
    )
    done = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, cwd=path.parent,
        env={**env, "OUTOFCORE_IN_PROCESS_WORKER": "0"}, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, f"{path.name}\n{done.stdout}\n{done.stderr}"
    last = done.stdout.strip().splitlines()[-1]
    assert last.endswith(("True", "complete")), done.stdout
    return done.stdout


@pytest.fixture
def env():
    """The environment of the examples: this checkout on the path, no AWS variables."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {**base, "PYTHONPATH": str(ROOT)}


@pytest.mark.parametrize("document", IN_ORDER)
def test_the_examples_run_in_order_in_one_folder(document, tmp_path, env):
    """As a reader follows the document: its blocks in order, in one folder."""
    ran = scripts = 0
    for kind, body in examples(document):
        if kind == "bash":
            ran += run_block(body, tmp_path, env)
        else:
            run_script(body, tmp_path / f"example{scripts}.py", env)
            scripts += 1
    assert ran >= 1 and scripts >= 1, f"{document}: {ran} commands and {scripts} scripts"


def test_the_shell_examples_run(tmp_path, env):
    ran = sum(run_block(block, tmp_path, env) for block in blocks("docs/cli.md", "bash"))
    assert ran >= 1, "docs/cli.md has no outofcore command to run"


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


def test_the_object_store_python_examples_run_as_scripts(moto_server, s3_bucket, tmp_path, env):
    """Each python block of object-stores.md as a script file, on the moto server; worker
    processes import the script again: without the guard the docs ask for, this fails."""
    scripts = blocks("docs/object-stores.md", "python")
    assert scripts, "docs/object-stores.md has no python example"
    for number, script in enumerate(scripts):
        run_script(on_moto(script, moto_server, s3_bucket), tmp_path / f"example{number}.py", env)


def test_the_readme_in_order_is_what_a_reader_meets():
    """The README's quick start is two commands, and its python example writes an output
    the command line block before it did not make (issue 29: it wrote c.zarr again)."""
    kinds = [kind for kind, _ in examples("README.md")]
    assert kinds[0] == "bash" and "python" in kinds
    quick_start = commands(blocks("README.md", "bash")[0])
    assert len(quick_start) == 2 and all(line.startswith("python3 -m venv") for line in quick_start)
    made = set(re.findall(r"-o (\S+\.zarr)", "".join(blocks("README.md", "bash"))))
    written = re.findall(
        r'matmul\("a.zarr", "b.zarr", "(\S+\.zarr)"', blocks("README.md", "python")[0]
    )
    assert written and not made & set(written), (made, written)

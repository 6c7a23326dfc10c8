"""Every code block of README.md and docs/*.md runs, as a reader follows it (issue 19,
items 5 and 6; issue 29, item 6; issue 45, item 6).

Each document is walked from its top in a fresh folder, block by block
(tests/docs_walk.py says what each kind of block does): an example that trips over
what an earlier one made, or needs what none made, fails here.  Blocks tagged
``needs-gpu`` or ``needs-cluster`` are the only ones not run, and each is reported as
a skip that names it.  In docs/object-stores.md ``s3://data`` is a bucket on a real S3
API server on loopback (moto), its credentials and endpoint put where the document
writes ``...`` and ``http://minio:9000``.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest

from tests.docs_walk import (
    NEEDS,
    Block,
    Walk,
    check_install,
    check_signatures,
    code_blocks,
    commands,
    documents,
    fresh_env,
    shown_blocks,
)
from tests.helpers import ROOT

#: The blocks this machine does not run, for the skips that name them.
NOT_RUN = [b for document in documents() for b in code_blocks(document) if b.tag in NEEDS]


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


@pytest.mark.parametrize("document", documents())
def test_every_code_block_runs_in_order_in_a_fresh_folder(document, tmp_path, request):
    """The document's code blocks, in order, in one fresh folder."""
    blocks = [block for block in code_blocks(document) if block.tag not in NEEDS]
    if document == "docs/object-stores.md":
        server = request.getfixturevalue("moto_server")
        bucket = request.getfixturevalue("s3_bucket")
        blocks = [
            dataclasses.replace(block, body=on_moto(block.body, server, bucket)) for block in blocks
        ]
    walk = Walk(tmp_path, fresh_env())
    for block in blocks:
        walk.block(block)
    assert walk.ran == [block.where for block in blocks]


@pytest.mark.parametrize("block", NOT_RUN, ids=[block.where for block in NOT_RUN])
def test_blocks_this_machine_cannot_run_say_so(block):
    pytest.skip(f"{block.where} ({block.language}) {NEEDS[block.tag]}: not run here")


def test_every_code_block_is_one_the_walk_knows():
    """A tag the walk does not know would be a block silently left out."""
    known = {"", "signature", *NEEDS}
    tags = {(block.where, block.tag) for d in documents() for block in code_blocks(d)}
    assert {tag for _, tag in tags} <= known, sorted(t for t in tags if t[1] not in known)
    assert len(tags) >= 60, len(tags)
    # A block that shows commands with a prompt is a transcript: console, so they run.
    prompts = [b.where for d in documents() for b in shown_blocks(d) if "\n$ " in "\n" + b.body]
    assert not prompts, f"blocks with $ prompts that are not console blocks: {prompts}"


def test_most_code_blocks_run_here():
    """The tags are for what truly needs a GPU or hosts: most blocks run."""
    every = [block for d in documents() for block in code_blocks(d)]
    assert len(NOT_RUN) <= len(every) // 3, [block.where for block in NOT_RUN]
    assert {block.document for block in every} >= {"README.md", "docs/api.md", "docs/plan.md"}


def test_the_readme_in_order_is_what_a_reader_meets():
    """The README's quick start is two commands, and its python example writes an output
    the command line block before it did not make (issue 29: it wrote c.zarr again)."""
    blocks = code_blocks("README.md")
    assert blocks[0].language == "bash" and any(b.language == "python" for b in blocks)
    quick_start = commands(blocks[0].body)
    assert len(quick_start) == 2 and all(line.startswith("python3 -m venv") for line in quick_start)
    bash = "".join(b.body for b in blocks if b.language == "bash")
    made = set(re.findall(r"-o (\S+\.zarr)", bash))
    python = next(b.body for b in blocks if b.language == "python")
    written = re.findall(r'matmul\("a.zarr", "b.zarr", "(\S+\.zarr)"', python)
    assert written and not made & set(written), (made, written)


# The walk's own checks fail where a document is wrong.


def test_a_signature_that_differs_from_the_code_fails():
    check_signatures("outofcore.verify(a, b, c, *, rounds=2, seed=None, transpose_a=False,\n"
                     "    transpose_b=False, alpha=1.0, beta=0.0, addend=None,\n"
                     "    storage_options=None, client=None) -> VerifyReport")  # fmt: skip
    for wrong, why in (
        ("outofcore.verify(a, b, c, *, rounds=3, seed=None, **options)", "rounds"),
        ("outofcore.matmul(a, b, out, *, spec=None, client=None)", "leaves out"),
        ("outofcore.matmul(a, b, out, *, spec=None, client=None, speed=1, **options)", "speed"),
        ("outofcore.nothing(a)", "nothing importable"),
    ):
        with pytest.raises(AssertionError, match=why):
            check_signatures(wrong)
    check_signatures("outofcore.matmul(a, b, out, *, spec=None, client=None, **options)")


def test_an_install_naming_an_extra_there_is_not_fails():
    check_install("pip install -c constraints.txt -e '.[test,s3]'")
    with pytest.raises(AssertionError, match="fast"):
        check_install("pip install 'outofcore[fast]'")
    with pytest.raises(AssertionError, match="no file"):
        check_install("pip install -c constraint.txt -e .")


def test_a_line_the_walk_cannot_run_fails(tmp_path):
    block = Block("x.md", 1, "bash", "", "rm -rf data\n")
    with pytest.raises(AssertionError, match="cannot run 'rm -rf data'"):
        Walk(tmp_path, fresh_env()).block(block)


@pytest.mark.parametrize(
    ("args", "status"),
    [(["--size", "64", "--repeats", "1"], 0), (["--sise", "64"], 2)],
)
def test_a_benchmark_command_is_parsed_not_run(args, status, tmp_path):
    """A document's benchmark line: parsed by the benchmark's own parser, not run."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.parse_only", "benchmarks.compare", *args],
        capture_output=True, text=True, cwd=tmp_path, env=fresh_env(), timeout=120,
    )  # fmt: skip
    assert done.returncode == status, done.stderr
    assert not list(tmp_path.iterdir())  # nothing ran: nothing written
    assert (ROOT / "benchmarks" / "compare.py").is_file()


def labels(text: str) -> list[str]:
    """What each line of a command's output is (its words up to the figures), in order:
    ``"Generating A and B"``, ``"tiles"``, ``"memory"``, ``"verify (Freivalds, 2 rounds)"``."""
    found = []
    for line in text.splitlines():
        if not line.strip() or line.startswith(" " * 17):  # a wrapped line's rest
            continue
        head = re.split(r"[:\d/]| {2,}", line.strip(), maxsplit=1)[0].strip()
        found.append(head)
    return found


def test_the_demos_sample_output_is_what_the_demo_prints_now(tmp_path):
    """getting-started.md's sample of ``outofcore demo`` (issue 55, item 4: it was stale)
    has the lines a demo prints today, in their order (the figures are the machine's)."""
    text = (ROOT / "docs" / "getting-started.md").read_text()
    sample = re.search(r"```\n(Generating A and B.*?)```", text, re.DOTALL)
    assert sample is not None, "the demo's sample output is gone from getting-started.md"
    done = subprocess.run(
        [sys.executable, "-m", "outofcore.cli", "demo", "--size", "512", "--chunk", "128"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert labels(sample[1]) == labels(done.stdout), (sample[1], done.stdout)

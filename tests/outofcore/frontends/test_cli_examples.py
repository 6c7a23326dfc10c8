"""The examples each command's ``--help`` shows run as written (issue 45)."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys

from outofcore.frontends.cli_examples import EXAMPLES, examples
from outofcore.frontends.cli_parser import build_parser
from tests.docs_walk import fresh_env, smaller


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_has_examples_that_its_help_shows():
    commands = _commands()
    assert set(EXAMPLES) == set(commands)
    for name, parser in commands.items():
        text = parser.format_help()
        assert text.rstrip().endswith(examples(name)), f"{name}: {text[-300:]}"
        assert all(len(line) <= 100 for line in text.splitlines()), name


def test_the_examples_run_in_order_in_an_empty_folder(tmp_path):
    """random makes what plan, matmul, gram, verify and status then read (shapes a hundred
    times smaller); every example exits 0."""
    ran = 0
    for lines in EXAMPLES.values():
        for line, _ in lines:
            args = shlex.split(smaller(line))[1:]
            done = subprocess.run(
                [sys.executable, "-m", "outofcore.cli", *args], capture_output=True, text=True,
                cwd=tmp_path, env=fresh_env(), timeout=300,
            )  # fmt: skip
            assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
            ran += 1
    assert ran == sum(len(lines) for lines in EXAMPLES.values())
    assert (tmp_path / "demo").is_dir()  # the demo kept its arrays where it was told

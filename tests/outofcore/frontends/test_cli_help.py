"""A command line that helps (issue 45, item 4): every argument explained, ``outofcore help
COMMAND``, the command's own usage and a "did you mean" on a typo, no silent
abbreviations."""

from __future__ import annotations

import argparse

import pytest

from outofcore.cli import main
from outofcore.frontends.cli_parser import build_parser


def every_action(parser: argparse.ArgumentParser, path: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                yield f"{path} {choice.dest}", choice
            for name, sub in action.choices.items():
                yield from every_action(sub, f"{path} {name}")
        elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            yield path, action


def test_every_argument_and_command_has_help_text():
    found = list(every_action(build_parser(), "outofcore"))
    assert len(found) > 100  # the walk reaches every command's options
    silent = [(where, a.dest) for where, a in found if not (a.help or "").strip()]
    assert not silent, f"arguments without help: {silent}"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        status = main(list(argv))
    except SystemExit as exc:
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


def test_a_mistyped_option_gets_the_commands_usage_and_a_suggestion(capsys):
    status, _, err = run(capsys, "matmul", "a.zarr", "b.zarr", "-o", "c.zarr", "--memroy", "1GiB")
    assert status == 2
    assert err.startswith("usage: outofcore matmul ")  # the command's usage, not the top's
    assert "unrecognized arguments: --memroy 1GiB (did you mean --memory" in err


def test_an_abbreviated_option_is_not_taken_silently(capsys):
    status, _, err = run(capsys, "matmul", "a.zarr", "b.zarr", "-o", "c.zarr", "--mem", "1GiB")
    assert status == 2
    assert "unrecognized arguments: --mem 1GiB (did you mean --memory?)" in err


@pytest.mark.parametrize(
    ("argv", "meant"),
    [(("mtmul",), "matmul"), (("random", "x.zarr", "--shape", "2", "--chunks", "1", "--dtype",
                               "flot32"), "float32")],
)  # fmt: skip
def test_a_mistyped_command_or_value_is_suggested(capsys, argv, meant):
    status, _, err = run(capsys, *argv)
    assert status == 2 and f"(did you mean {meant}" in err


def test_help_names_a_commands_options(capsys):
    status, out, _ = run(capsys, "help", "matmul")
    assert status == 0
    assert out.startswith("usage: outofcore matmul ") and "--memory SIZE" in out
    status, out, _ = run(capsys, "help")
    assert status == 0 and "COMMAND" in out and "matmul" in out

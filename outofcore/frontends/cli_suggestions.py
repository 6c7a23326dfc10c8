"""The command line's parser manners: the subcommand's usage on a mistake, a "did you
mean" for a mistyped option or command, and no silent abbreviations.

argparse hands an option a subcommand does not know to the top-level parser, which
printed the top-level usage alone; and it took ``--mem`` as ``--memory`` without a word.
:class:`CommandParser` makes every parser refuse abbreviations and, for an unknown
option, name the closest ones of the command that was typed, under its own usage.
:func:`add_command` gives each command its line of help as a description and its
examples (:mod:`~outofcore.frontends.cli_examples`) at the end of its ``--help``.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Sequence
from typing import Any, NoReturn

from outofcore.frontends.cli_examples import examples


class CommandParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` without abbreviations whose errors suggest what was meant."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """As argparse's; an unknown option is refused by the command it was given to."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self.command_parser(getattr(parsed, "command", None)) or self
            command.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def command_parser(self, name: str | None) -> argparse.ArgumentParser | None:
        """The parser of the subcommand ``name`` (None: none by that name)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and name in action.choices:
                return action.choices[name]
        return None

    def error(self, message: str) -> NoReturn:
        """Print this parser's usage and ``message`` with a suggestion, and exit 2."""
        super().error(message + suggestion(message, self))


def suggestion(message: str, parser: argparse.ArgumentParser) -> str:
    """``" (did you mean --memory?)"`` for the option, command or value ``message`` names
    as unknown, from those ``parser`` (or the choice listed) has; empty where none is
    close."""
    invalid = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if invalid:  # a command, or a value of an option with choices
        return _closest([invalid[1]], re.findall(r"'([^']*)'", invalid[2]))
    unknown = re.search(r"unrecognized arguments: (.*)", message)
    if unknown is None:
        return ""
    typed = [word.split("=")[0] for word in unknown[1].split() if word.startswith("-")]
    options = [o for action in parser._actions for o in action.option_strings]
    return _closest(typed, options)


def _closest(typed: list[str], known: list[str]) -> str:
    for word in typed:
        close = difflib.get_close_matches(word, known, n=2, cutoff=0.6)
        if close:
            return f" (did you mean {' or '.join(close)}?)"
    return ""


class ExamplesFormatter(argparse.HelpFormatter):
    """argparse's help, with the examples of :mod:`~outofcore.frontends.cli_examples` kept
    as written (one command a line)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def add_command(commands: Any, name: str, help: str) -> argparse.ArgumentParser:
    """A command's parser: its one line of help as the description too, its examples last."""
    return commands.add_parser(
        name, help=help, description=help, epilog=examples(name), formatter_class=ExamplesFormatter
    )

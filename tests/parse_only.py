"""``python -m tests.parse_only MODULE ARGS...``: MODULE's own argument parser reads ARGS,
and nothing else of it runs (a document's benchmark command, checked without its
minutes: tests/docs_walk.py).

Exit status 0 when the arguments parse; argparse's 2, with its message, when they do
not; 3 when the module finished without parsing any (it ran: it has no parser).
"""

from __future__ import annotations

import argparse
import runpy
import sys


class Parsed(Exception):
    """Raised once the module's parser has read the arguments."""


def main() -> int:
    module, args = sys.argv[1], sys.argv[2:]
    parse_args = argparse.ArgumentParser.parse_args

    def parse_only(self, *given, **options):
        parse_args(self, *given, **options)
        raise Parsed

    argparse.ArgumentParser.parse_args = parse_only
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except Parsed:
        return 0
    print(f"{module} ran without parsing its arguments", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())

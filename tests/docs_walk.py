"""Walk a document's code blocks as a reader would: in order, in one fresh folder.

A fenced block is code when its language is ``bash``, ``console``, ``python`` or
``yaml``; its info string may carry one tag after the language:

- ``needs-gpu``, ``needs-cluster``: not run here (no GPU; hosts, Docker or SLURM); the
  test reports each such block as a skip naming it.
- ``signature`` (python): each ``name(params) -> type`` is the named function's
  signature, checked against :func:`inspect.signature`.

What each kind of block does (:class:`Walk`):

- ``bash``: ``outofcore`` commands run as written, their shapes a hundred times
  smaller (:func:`smaller`); ``export`` lines set the environment of
  the commands after them; ``python -m MODULE ARGS`` of a benchmark or a report has its
  arguments parsed by the module's own parser and nothing run (the benchmarks run small
  in tests/system/test_benchmarks.py); ``python -c`` and ``scripts/make-certificates``
  run; installs are checked (every extra they name is in pyproject.toml, the
  constraints file exists); anything else must be one :data:`NOT_HERE` explains.
- ``console``: its ``$ `` lines, as ``bash`` lines; the rest is what they print.
- ``python`` with the ``if __name__ == "__main__":`` guard: a script file, run with its
  LocalCluster's workers in processes of their own, which import it again (the guard
  the docs ask for is exercised).  Without the guard: a fragment, run in the
  document's one namespace in this process (as a reader's session would), in order.
- ``yaml``: parsed, and must be a mapping.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib
import inspect
import math
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import dask
import yaml

from tests.helpers import ROOT

#: A fenced block: language, the rest of its info string, body.
BLOCK = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
#: Languages whose blocks are code (the others show what a command prints).
CODE = ("bash", "console", "python", "yaml")
#: Tags of blocks this machine cannot run, and why.
NEEDS = {
    "needs-gpu": "needs a GPU",
    "needs-cluster": "needs a cluster of hosts (Docker, SLURM or named hosts)",
}
#: Lines of bash blocks that are not run here, by their start, and why.
NOT_HERE = {
    "python3 -m venv": "the quick start: .ci/run runs the README's commands themselves",
    ".venv/bin/python -m pytest": "the test suite itself (.ci/run runs it)",
    "source .venv/bin/activate": "the install's venv: the tests run in the one they run in",
}
#: Modules whose arguments a document's command is checked against, not run.
PARSED_ONLY = ("benchmarks.", "outofcore.backends.cuda.report", "tools.gpu_check")
SMALLER = re.compile(r"--(shape|chunks) (\d+(?:,\d+)*)")
GUARD = 'if __name__ == "__main__":'


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced block of a document."""

    document: str
    line: int
    language: str
    tag: str
    body: str

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"


def documents() -> list[str]:
    """README.md and every document under docs/, relative to the checkout."""
    return ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]


def code_blocks(document: str) -> list[Block]:
    """The document's code blocks, in its order."""
    text = (ROOT / document).read_text()
    found = []
    for match in BLOCK.finditer(text):
        language, info, body = match.groups()
        if language in CODE:
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(document, line, language, info.strip(), body))
    return found


def shown_blocks(document: str) -> list[Block]:
    """The document's other blocks (what commands print, formulas)."""
    text = (ROOT / document).read_text()
    return [
        Block(document, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2), m.group(3))
        for m in BLOCK.finditer(text)
        if m.group(1) not in CODE
    ]


def commands(block: str) -> list[str]:
    """The block's lines: continuations joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    lines = (line.split("  #")[0].split(" # ")[0].strip() for line in joined.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def smaller(command: str) -> str:
    """A command line with its shapes made smaller (nothing else changed: a command in a
    document runs as a reader copies it, issue 55)."""

    def shrink(match: re.Match) -> str:
        """The matrix (or vector) sizes a hundred times smaller; a stack's batch kept."""
        sizes = [int(x) for x in match.group(2).split(",")]
        batch = sizes[:-2] if len(sizes) > 2 else []
        smaller = [max(1, math.ceil(x / 100)) for x in sizes[len(batch) :]]
        return f"--{match.group(1)} {','.join(map(str, batch + smaller))}"

    return SMALLER.sub(shrink, command)


def extras() -> set[str]:
    """The optional-dependency groups pyproject.toml defines."""
    with open(ROOT / "pyproject.toml", "rb") as file:
        return set(tomllib.load(file)["project"]["optional-dependencies"])


def check_install(line: str) -> None:
    """An install line names only extras there are, and a constraints file that exists."""
    named = re.findall(r"(?:outofcore|\.)\[([\w,-]+)\]", line)
    unknown = {extra for group in named for extra in group.split(",")} - extras()
    if unknown:
        raise AssertionError(f"{line!r} names extras pyproject.toml lacks: {sorted(unknown)}")
    for constraints in re.findall(r"-c (\S+)", line):
        if not (ROOT / constraints).is_file():
            raise AssertionError(f"{line!r}: no file {constraints}")


@dataclasses.dataclass
class Walk:
    """A document walked in ``folder``: its environment and its Python namespace."""

    folder: Path
    env: dict[str, str]
    namespace: dict[str, Any] = dataclasses.field(default_factory=dict)
    ran: list[str] = dataclasses.field(default_factory=list)

    def block(self, block: Block) -> None:
        """Run (or check) one block."""
        if block.language == "python" and block.tag == "signature":
            check_signatures(block.body)
        elif block.language == "python":
            self.python(block)
        elif block.language == "yaml":
            if not isinstance(yaml.safe_load(block.body), dict):
                raise AssertionError(f"{block.where}: the YAML is not a mapping")
        else:
            body = block.body
            if block.language == "console":
                body = "\n".join(x[2:] for x in body.splitlines() if x.startswith("$ "))
            for line in commands(body):
                self.line(line, block)
        self.ran.append(block.where)

    def line(self, line: str, block: Block) -> None:
        """One command line of a bash block."""
        if " && " in line:
            for part in line.split(" && "):
                self.line(part, block)
            return
        words = shlex.split(line)
        if line.startswith("export "):
            self.env.update(pair.split("=", 1) for pair in words[1:])
        elif words[0] in ("outofcore", ".venv/bin/outofcore"):
            self.run([sys.executable, "-m", "outofcore.cli", *shlex.split(smaller(line))[1:]])
        elif words[:2] == ["python", "-m"] and words[2].startswith(PARSED_ONLY):
            self.run([sys.executable, "-m", "tests.parse_only", *words[2:]])
        elif words[:2] == ["python", "-c"]:
            self.run([sys.executable, *words[1:]])
        elif words[0] == "scripts/make-certificates":
            self.run(["bash", str(ROOT / words[0]), *words[1:]])
        elif "pip" in words[0] and "install" in words:
            check_install(line)
        elif not any(line.startswith(start) for start in NOT_HERE):
            raise AssertionError(f"{block.where}: the docs walk cannot run {line!r}")

    def run(self, argv: list[str]) -> None:
        done = subprocess.run(
            argv, capture_output=True, text=True, cwd=self.folder, env=self.env, timeout=300
        )
        if done.returncode != 0:
            raise AssertionError(f"{shlex.join(argv)}\n{done.stdout}\n{done.stderr}")

    def python(self, block: Block) -> None:
        """A script (it has the guard) in a process, or a fragment in this one."""
        if GUARD in block.body:
            self.script(block)
            return
        code = compile(block.body, block.where, "exec")
        with contextlib.chdir(self.folder), dask.config.set({}):
            exec(code, self.namespace)  # noqa: S102 (the document's own example)

    def script(self, block: Block) -> None:
        """The block as a script file, its shapes made smaller; workers in processes."""
        path = self.folder / f"example{len(self.ran)}.py"
        path.write_text(
            block.body.replace("(3000, 2000)", "(300, 200)")
            .replace("(2000, 2500)", "(200, 250)")
            .replace("(1024, 1024)", "(64, 64)")
        )
        env = {**self.env, "OUTOFCORE_IN_PROCESS_WORKER": "0"}
        done = subprocess.run(
            [sys.executable, str(path)], capture_output=True, text=True, cwd=self.folder,
            env=env, timeout=300,
        )  # fmt: skip
        if done.returncode != 0:
            raise AssertionError(f"{block.where}\n{done.stdout}\n{done.stderr}")
        lines = done.stdout.strip().splitlines()
        if lines and lines[-1].endswith("False"):
            raise AssertionError(f"{block.where} printed False:\n{done.stdout}")


SIGNATURE = re.compile(r"^([\w.]+)\((.*)\)(?:\s*->\s*(\S.*))?$", re.DOTALL)


def signatures(body: str) -> list[str]:
    """The block's signatures: a line that starts with a name, and its indented lines."""
    found: list[str] = []
    for line in body.splitlines():
        if line.startswith((" ", "\t")) and found:
            found[-1] += " " + line.strip()
        elif line.strip():
            found.append(line.strip())
    return found


def resolve(name: str) -> Any:
    """The object a dotted name names: the longest importable module, then attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        with contextlib.suppress(ImportError, AttributeError):
            found = importlib.import_module(".".join(parts[:cut]))
            for attribute in parts[cut:]:
                found = getattr(found, attribute)
            return found
    raise AssertionError(f"{name!r} names nothing importable")


def documented(params: str) -> list[tuple[str, Any, str]]:
    """``(name, kind, default source)`` of a signature's parameters, as written."""
    args = ast.parse(f"def _({params}): pass").body[0].args
    kind = inspect.Parameter
    found = []
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for arg, default in zip(positional, defaults, strict=True):
        found.append((arg.arg, kind.POSITIONAL_OR_KEYWORD, default and ast.unparse(default)))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        found.append((arg.arg, kind.KEYWORD_ONLY, default and ast.unparse(default)))
    if args.kwarg:
        found.append((args.kwarg.arg, kind.VAR_KEYWORD, None))
    return found


def check_signatures(body: str) -> None:
    """Each signature of the block is its function's: the same parameters, kinds and
    defaults; ``**options`` stands for the job options (JobSpec's fields)."""
    from outofcore.jobs.spec import JobSpec

    options = {field.name for field in dataclasses.fields(JobSpec)}
    for text in signatures(body):
        match = SIGNATURE.match(text)
        if not match:
            raise AssertionError(f"not a signature: {text!r}")
        name, params, _ = match.groups()
        real = inspect.signature(resolve(name)).parameters
        written = documented(params)
        shown = {param for param, _, _ in written}
        for param, kind, default in written:
            if kind is inspect.Parameter.VAR_KEYWORD:
                continue
            if param not in real:
                raise AssertionError(f"{name}: no parameter {param!r}")
            actual = real[param]
            want = inspect.Parameter.empty if default is None else ast.literal_eval(default)
            if (actual.kind, actual.default) != (kind, want):
                raise AssertionError(f"{name}: {param} is {actual}, written as {param}={default}")
        rest = set(real) - shown
        if ("options", inspect.Parameter.VAR_KEYWORD, None) in written:
            rest -= options
        if rest:
            raise AssertionError(f"{name}: the signature leaves out {sorted(rest)}")


def fresh_env() -> dict[str, str]:
    """The environment of the examples: this checkout on the path, no AWS variables."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {**base, "PYTHONPATH": str(ROOT)}

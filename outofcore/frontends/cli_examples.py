"""The examples each command's ``--help`` ends with (issue 45: "each command with an
example").

They run as written, in the order of :data:`EXAMPLES`, in one empty folder
(tests/outofcore/frontends/test_cli_examples.py, shapes made smaller): ``random`` makes
the arrays the later ones read.
"""

from __future__ import annotations

#: Each command's example lines, in the order they run: a line, then its comment.
EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "random": (
        ("outofcore random a.zarr --shape 20000,15000 --chunks 2048,2048 --seed 1", "A"),
        ("outofcore random b.zarr --shape 15000,18000 --chunks 2048,2048 --seed 2", "B"),
        (
            "outofcore random d.zarr --shape 20000,18000 --chunks 2048,2048 --dtype float64",
            "an addend",
        ),
        ("outofcore random x.zarr --shape 50000,4000 --chunks 4096,2048 --seed 4", "tall X"),
    ),
    "plan": (
        ("outofcore plan a.zarr b.zarr --memory 512MiB", "tiles, memory, predicted time"),
        ("outofcore plan a.zarr b.zarr --memory 512MiB --workers 8 --json", "as JSON"),
    ),
    "matmul": (
        ("outofcore matmul a.zarr b.zarr -o c.zarr --memory 512MiB", "C = A @ B"),
        ("outofcore matmul x.zarr x.zarr -o xtx.zarr --transpose-a", "X.T @ X, no copy"),
        (
            "outofcore matmul a.zarr b.zarr -o e.zarr --alpha 2 --beta -1 --addend d.zarr",
            "2AB - D",
        ),
    ),
    "gram": (
        ("outofcore gram x.zarr -o g.zarr", "X.T @ X, half the tiles"),
        ("outofcore gram x.zarr -o rows.zarr --rows", "X @ X.T"),
    ),
    "verify": (
        ("outofcore verify a.zarr b.zarr c.zarr", "exit status 1 if wrong"),
        ("outofcore verify x.zarr x.zarr g.zarr --transpose-a --rounds 4", "X.T @ X"),
    ),
    "status": (
        ("outofcore status c.zarr", "complete, or tiles done and how to resume"),
        ("outofcore status c.zarr --json", "as JSON"),
    ),
    "demo": (
        ("outofcore demo", "4096² float32 in a temporary folder"),
        ("outofcore demo --size 2048 --dir demo", "smaller, the arrays kept in demo/"),
    ),
    "help": (("outofcore help matmul", "the same as outofcore matmul --help"),),
}


def examples(command: str) -> str:
    """The ``Examples:`` text of ``command``'s help, each comment after its line."""
    lines = EXAMPLES[command]
    width = max(len(line) for line, _ in lines)
    body = "\n".join(f"  {line:<{width}}  # {comment}" for line, comment in lines)
    return f"examples:\n{body}"

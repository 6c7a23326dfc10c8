"""The ``outofcore`` command line's parser: its commands, their options and the types
of their values; :mod:`outofcore.cli` runs what it parses."""

from __future__ import annotations

import argparse
import decimal
import importlib.metadata
from pathlib import Path
from typing import Any

from outofcore.backends.registry import BACKENDS
from outofcore.config import parse_size
from outofcore.errors import OutOfCoreError
from outofcore.frontends.cli_suggestions import CommandParser, add_command
from outofcore.operands.dtypes import INPUT_DTYPES
from outofcore.storage.codecs import DEFAULT_OUTPUT_CODEC, OUTPUT_CODECS

#: ``outofcore demo``'s defaults: m = k = n, the chunk of its inputs, the budget per worker.
DEMO_SIZE = 4096
DEMO_CHUNK = 512
DEMO_MEMORY = "40MiB"


def build_parser() -> argparse.ArgumentParser:
    """The ``outofcore`` command line: its options, and each command's name as ``command``
    (:data:`outofcore.cli.COMMANDS` runs it)."""
    parser = CommandParser(
        prog="outofcore",
        description="Out-of-core matrix multiplication of zarr arrays on Dask.",
        epilog="Exit status: 0 done; 1 verify found the product wrong; 2 bad command or "
        "input, nothing started; 3 the job started and failed (rerun the same command to "
        "resume); 130 interrupted.",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="print the traceback of an error (also OUTOFCORE_DEBUG=1)",
    )
    parser.add_argument("--version", action="version", version=f"outofcore {version()}")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=CommandParser
    )
    for add in (
        _add_matmul_command,
        _add_gram_command,
        _add_random_command,
        _add_plan_command,
        _add_status_command,
        _add_verify_command,
        _add_demo_command,
    ):
        add(commands)
    helper = add_command(commands, "help", help="show the help of a command: outofcore help matmul")
    helper.add_argument(
        "topic", nargs="?", choices=sorted(commands.choices), help="the command to explain"
    )
    return parser


def _add_matmul_command(commands: Any) -> None:
    """The ``matmul`` command's parser and options."""

    run = add_command(
        commands, "matmul", help="compute C = alpha * op(A) @ op(B) + beta * D into a zarr array"
    )
    run.add_argument("a", help="path or URL of the zarr array A (m×k, or k×m with --transpose-a)")
    run.add_argument("b", help="path or URL of the zarr array B (k×n, or n×k with --transpose-b)")
    run.add_argument("-o", "--out", required=True, help="path or URL of the output C (m×n)")
    _add_product(run)
    _add_job_options(run)


def _add_gram_command(commands: Any) -> None:
    """The ``gram`` command's parser and options."""
    gram = add_command(
        commands,
        "gram",
        help="compute G = alpha * X.T @ X (or X @ X.T) into a zarr array: the tiles on and "
        "above the diagonal, each mirrored; G is exactly symmetric",
    )
    gram.add_argument("x", help="path or URL of the zarr array X (k×n: G is n×n)")
    gram.add_argument("-o", "--out", required=True, help="path or URL of the output G")
    gram.add_argument(
        "--rows", action="store_true", help="G = X @ X.T, the Gram matrix of X's rows (m×m)"
    )
    gram.add_argument("--alpha", type=parse_scale, default=1.0, help="scale (default 1)")
    _add_job_options(gram)


def _add_random_command(commands: Any) -> None:
    """The ``random`` command's parser and options."""
    rand = add_command(commands, "random", help="write a seeded random array (inputs for tests)")
    rand.add_argument("path", help="path or URL of the new zarr array")
    rand.add_argument(
        "--shape",
        required=True,
        type=_sizes,
        metavar="M,N",
        help="sizes of the dimensions: M,N for a matrix, K for a vector, S,M,N for a stack",
    )
    rand.add_argument(
        "--chunks", required=True, type=_sizes, metavar="R,C", help="one chunk size a dimension"
    )
    rand.add_argument(
        "--dtype",
        choices=[str(d) for d in INPUT_DTYPES],
        default="float32",
        metavar="DTYPE",
        help=f"element type: {', '.join(str(d) for d in INPUT_DTYPES)} (default %(default)s)",
    )
    rand.add_argument(
        "--seed", type=int, default=0, help="seed of the values (default 0): same seed, same array"
    )
    rand.add_argument(
        "--overwrite", action="store_true", help="replace an array outofcore wrote at the path"
    )
    _add_storage_options(rand)
    _add_quiet(rand)


def _add_plan_command(commands: Any) -> None:
    """The ``plan`` command's parser and options."""
    plan = add_command(
        commands,
        "plan",
        help="print the plan of a matmul job without running it: it takes every option "
        "of matmul and plans as the job would, for the workers it would get (a --scheduler "
        "is asked for its workers)",
    )
    plan.add_argument("a", help="path or URL of the zarr array A")
    plan.add_argument("b", help="path or URL of the zarr array B")
    _add_product(plan)
    _add_job_options(plan)
    plan.add_argument(
        "--reprobe",
        action="store_true",
        help="measure this machine again for the predicted time (BLAS, decoding, writing: a "
        "few seconds) instead of using the figures cached for it",
    )
    plan.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also this machine's measured figures, and the time on other machines (what-ifs)",
    )


def _add_status_command(commands: Any) -> None:
    """The ``status`` command's parser and options."""
    status = add_command(
        commands, "status", help="show the state of the job writing an output (tiles done, lease)"
    )
    status.add_argument("c", help="path or URL of the output C")
    _add_storage_options(status)
    _add_json(status)


def _add_verify_command(commands: Any) -> None:
    """The ``verify`` command's parser and options."""
    check = add_command(commands, "verify", help="check C = A @ B by Freivalds' method")
    check.add_argument("a", help="path or URL of the zarr array A")
    check.add_argument("b", help="path or URL of the zarr array B")
    check.add_argument("c", help="path or URL of the product C to check")
    _add_product(check)
    check.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="random vectors C is checked with (default 2): each halves, at least, the chance "
        "that a wrong C passes",
    )
    check.add_argument(
        "--seed", type=int, help="seed of the random vectors (default: a fresh one each run)"
    )
    _add_storage_options(check)
    _add_json(check)
    _add_quiet(check, "print nothing when the product is right (the exit status says it)")


def _add_demo_command(commands: Any) -> None:
    """The ``demo`` command's parser and options."""
    demo = add_command(
        commands, "demo", help="generate inputs larger than the budget, multiply, verify, summarise"
    )
    demo.add_argument("--size", type=int, default=DEMO_SIZE, help="m = k = n")
    chunk = "chunk edge of the inputs (default %(default)s)"
    demo.add_argument("--chunk", type=int, default=DEMO_CHUNK, help=chunk)
    _add_memory(demo, DEMO_MEMORY)
    demo.add_argument("--workers", type=_workers, help="workers of the LocalCluster (default: one)")
    demo.add_argument("--dir", type=Path, help="keep the arrays here (default: a temporary dir)")
    _add_dashboard(demo)
    _add_json(demo)
    _add_quiet(demo, "no progress or summary; the verdict only when the product is wrong")


def _add_job_options(run: argparse.ArgumentParser) -> None:
    """The options of a job (``matmul``, ``gram``): budget, cluster, output, plan."""
    _add_out_dtype(run)
    _add_memory(run)
    _add_device_memory(
        run,
        "cap on the device memory of each GPU worker, e.g. 2GiB (default: "
        "80%% of its free memory); larger host tiles are cut into device tiles",
    )
    run.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="what multiplies the tiles: cpu (BLAS), cuda (our numba kernel), cupy (cuBLAS); "
        "auto (default): cuda where a GPU and numba-cuda are here (cupy for a dtype cuBLAS "
        "multiplies clearly faster, where CuPy is installed), else cpu",
    )
    run.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="Dask scheduler address (default: start a LocalCluster); 'sync' runs in-process",
    )
    for option, meaning in (
        ("--tls-ca-file", "CA certificate (PEM) a tls:// --scheduler's certificates are signed by"),
        ("--tls-cert", "this client's certificate (PEM), signed by that CA"),
        ("--tls-key", "its private key (PEM), unless in the --tls-cert file"),
    ):
        run.add_argument(option, metavar="PATH", help=f"{meaning} (as dask scheduler's)")
    run.add_argument(
        "--workers",
        type=_workers,
        help="workers of the LocalCluster (default: one, with every core for BLAS); "
        "with --scheduler, workers to wait for",
    )
    run.add_argument(
        "--gpus",
        metavar="LIST",
        help="start one worker per GPU on this node, e.g. 0,1,2,3 (GPU tasks land only there; "
        "refused where the CUDA driver shows no GPU)",
    )
    _add_splits(run)
    run.add_argument("--overwrite", action="store_true", help="replace an existing output")
    run.add_argument(
        "--output-codec",
        choices=OUTPUT_CODECS,
        default=DEFAULT_OUTPUT_CODEC,
        help="compression of a new output (default: %(default)s; zstd is zarr's default, "
        "about 8%% smaller on dense floats, slower to write and read)",
    )
    run.add_argument(
        "--zarr-format",
        type=int,
        choices=(2, 3),
        default=3,
        help="zarr format of a new output (default: %(default)s; 2 for older readers: no shards)",
    )
    _add_out_layout(run)
    _add_dashboard(run)
    _add_storage_options(run)
    _add_json(run)
    _add_quiet(run)


def _add_out_layout(run: argparse.ArgumentParser) -> None:
    """The chunks and shards of a new output (``chunks=``, ``shards=``)."""
    chunks = "chunk shape of a new output's matrices, e.g. 64,29; tiles are planned on it"
    run.add_argument("--out-chunks", type=_pair, metavar="ROWS,COLS", help=chunks)
    shards = run.add_mutually_exclusive_group()
    shards.add_argument(
        "--out-shards",
        dest="shards",
        type=_pair,
        metavar="ROWS,COLS",
        help="shard shape of a new output, a multiple of --out-chunks (zarr format 3); default: "
        "one shard per tile for more than 10^5 chunks",
    )
    shards.add_argument("--no-shards", dest="shards", action="store_false", help="never shard")
    run.set_defaults(shards=True)


def _pair(text: str) -> tuple[int, int]:
    """``ROWS,COLS`` (or one number for both) as two whole numbers >= 1."""
    sizes = _sizes(text) * (2 if text.isdigit() else 1)
    if len(sizes) != 2 or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected ROWS,COLS like 64,29, got {text!r}")
    return sizes[0], sizes[1]


def _add_dashboard(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dashboard",
        action=argparse.BooleanOptionalAction,
        help="serve Dask's dashboard from the LocalCluster the job starts (default: for a "
        "job predicted to take 10 s or more; its import costs 0.5 to 1 s)",
    )


def _add_transposes(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--transpose-a", action="store_true", help="use A.T (read from A as stored, no copy)"
    )
    parser.add_argument(
        "--transpose-b", action="store_true", help="use B.T (read from B as stored, no copy)"
    )


def _add_product(parser: argparse.ArgumentParser) -> None:
    """The options that say which product: transposes, scales and the addend."""
    _add_transposes(parser)
    parser.add_argument(
        "--alpha", type=parse_scale, default=1.0, help="scale of op(A) @ op(B) (default 1)"
    )
    parser.add_argument(
        "--beta",
        type=parse_scale,
        default=0.0,
        help="scale of the addend (default 0; needs --addend)",
    )
    parser.add_argument(
        "--addend",
        metavar="PATH",
        help="zarr array D of C's shape: C = alpha*op(A)@op(B) + beta*D (read, never written)",
    )


def _add_splits(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--splits",
        type=int,
        metavar="S",
        help="split each tile's k into S parts added up by a reduction (1: never); default: "
        "split only when the tiles are too few to keep every worker busy",
    )


def _add_out_dtype(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out-dtype",
        metavar="DTYPE",
        help="write C in this dtype, e.g. float16 (default: the product's own: float32 for "
        "float16 inputs, int32 or int64 for integer ones; see docs/api.md)",
    )


def parse_scale(text: str) -> int | float | complex:
    """A scale as typed: an integer (``9007199254740993``), or a whole number float64 would
    round (``9007199254740993.0``), is an int, exactly (never rounded through float:
    :func:`outofcore.operands.scales.check_scale`); else a float (``2.0``, ``1e20``: float64 holds
    them) or a complex number."""
    text = text.replace(" ", "")
    try:
        value = complex(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number like 2, -0.5 or 1+2j, got {text!r}"
        ) from None
    if value.imag:
        return value
    whole = _whole_text(text)
    return value.real if whole is None else whole


def _whole_text(text: str) -> int | None:
    """The int a real number's text denotes exactly where it is a whole number that float64
    would round (``9007199254740993``, ``1e20`` stays a float: float64 holds it); else None."""
    try:
        exact = decimal.Decimal(text)
    except decimal.InvalidOperation:
        return None  # complex text with a zero imaginary part, or not a plain number
    if not exact.is_finite() or exact.adjusted() >= 308 or exact != exact.to_integral():
        return None  # a fraction; or far beyond any scale taken: a float (inf) refused later
    whole = int(exact)
    if decimal.Decimal(float(whole)) == exact:
        return None if "." in text or "e" in text.lower() else whole
    return whole


def _add_memory(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    shown = default or (
        "1GiB, or less where this machine's memory cap (a cgroup's limit) leaves less per worker"
    )
    parser.add_argument(
        "--memory",
        default=default,
        type=_size,
        metavar="SIZE",
        help=f"memory budget per worker, e.g. 512MiB (default {shown})",
    )


def _add_device_memory(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument("--device-memory", type=_size, metavar="SIZE", help=text)


def _add_storage_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="fsspec option for every URL, repeatable: endpoint_url=http://host:9000, "
        "key=..., secret=..., client_kwargs.region_name=us-east-1 (docs/object-stores.md); "
        "s3fs also reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL",
    )


def _add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object on stdout (progress and warnings stay on stderr)",
    )


def _add_quiet(
    parser: argparse.ArgumentParser,
    text: str = "no progress and no summary: only warnings and errors (--json still prints)",
) -> None:
    parser.add_argument("-q", "--quiet", action="store_true", help=text)


def version() -> str:
    """The installed package's version (its metadata), or why there is none."""
    try:
        return importlib.metadata.version("outofcore")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed: no package metadata)"


def _sizes(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected integers separated by commas like 1000,2000 (or 1000, or 8,1000,2000), "
            f"got {text!r}"
        ) from None


#: The most workers ``--workers`` asks for (a LocalCluster's, or a cluster's to wait for).
MAX_WORKERS = 2**16


def _workers(text: str) -> int:
    try:
        workers = int(text)
    except ValueError:
        workers = 0
    if not 1 <= workers <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(
            f"expected a whole number of workers from 1 to {MAX_WORKERS}, got {text!r}"
        )
    return workers


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except OutOfCoreError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None

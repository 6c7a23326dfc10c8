"""The ``outofcore`` command line: matmul, gram, random, plan, status, verify, demo."""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import logging
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
from dask.utils import format_bytes

from outofcore.cli_output import (
    format_plan,
    format_status,
    format_summary,
    format_verify,
    print_result,
)
from outofcore.codecs import DEFAULT_OUTPUT_CODEC, OUTPUT_CODECS
from outofcore.config import flag, parse_size
from outofcore.dtypes import INPUT_DTYPES
from outofcore.engines import BACKENDS
from outofcore.errors import JOB_FAILED, OutOfCoreError

DEMO_SIZE = 4096
DEMO_CHUNK = 512
DEMO_MEMORY = "40MiB"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``outofcore`` command; returns the exit status.

    Every expected failure is one ``outofcore: error:`` line on stderr and an exit
    status that says what to do (docs/cli.md): 2, fix the command or its inputs
    (nothing was started); 3, the job started and failed (rerun to retry or resume);
    1, ``verify`` found the product wrong; 130, interrupted.  ``--debug`` (or
    ``OUTOFCORE_DEBUG=1``) adds the traceback.
    """
    started = time.time()
    parser = _parser()
    args = parser.parse_args(argv)
    args.startup_seconds = max(0.0, started - psutil.Process().create_time())
    debug = args.debug or flag("debug")
    _log_to_stderr(debug)
    signal.signal(signal.SIGINT, _interrupted)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        _quiet_shutdown()
        print("outofcore: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # `outofcore plan ... | head`: the reader left
        # Python's advice: point stdout at devnull so the exit flush raises nothing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE
    except Exception as exc:  # noqa: BLE001 (the edge: one line, never a traceback)
        if debug:
            traceback.print_exc()
        status = exc.exit_status if isinstance(exc, OutOfCoreError) else JOB_FAILED
        text = cli_wording(str(exc)) if isinstance(exc, OutOfCoreError) else _unexpected(exc)
        print(f"outofcore: error: {text}", file=sys.stderr)
        if not debug:  # reads left in flight by the failure: nothing more to say at exit
            sys.unraisablehook = lambda _: None
        return status
    finally:
        if not debug:  # the result is out: Dask's teardown has nothing for the log at exit
            _quiet_shutdown()


def command() -> None:
    """The ``outofcore`` console script: :func:`main`, then exit with its status.

    Before exiting it freezes what the interpreter holds (:func:`gc.freeze`), so that
    its finalization does not walk every object of Dask, zarr and bokeh looking for
    cycles: that walk took 0.45 s of a 512² job's 2.0 s (docs/performance.md, "The
    first seconds").  Exit handlers and module teardown still run; only cycles left at
    exit are not collected, as with any object alive at exit.
    """
    status = main()
    gc.freeze()
    sys.exit(status)


#: Exit status after Ctrl-C (128 + SIGINT), and when stdout's reader has gone (128 + SIGPIPE).
INTERRUPTED = 130
BROKEN_PIPE = 141


def _unexpected(exc: BaseException) -> str:
    """One line for an exception outofcore did not raise on purpose."""
    text = " ".join(str(exc).split()) or "(no message)"
    if len(text) > 300:
        text = text[:300] + " ..."
    return (
        f"{type(exc).__name__}: {text} (unexpected; what the job finished is kept: rerun to "
        "resume, or add --debug for the traceback)"
    )


def _log_to_stderr(debug: bool) -> None:
    """Show outofcore's log (warnings; with ``--debug``, everything) as ``outofcore: ...``."""
    logger = logging.getLogger("outofcore")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_LineFormatter())
        if not debug:  # said once, as the command's error line
            handler.addFilter(lambda record: not getattr(record, "repeated_as_error", False))
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.WARNING)


class _LineFormatter(logging.Formatter):
    """``outofcore: warning: ...``: one line, like the command's errors."""

    def format(self, record: logging.LogRecord) -> str:
        return f"outofcore: {record.levelname.lower()}: {record.getMessage()}"


def _interrupted(signum: int, frame: Any) -> None:
    """Ctrl-C: quiet Dask's logs before the cluster is torn down under the job, then stop."""
    _quiet_shutdown()
    raise KeyboardInterrupt


def _quiet_shutdown() -> None:
    """Silence Dask's logs of the cluster being torn down (after Ctrl-C, and once the
    command's outcome is printed: a future of the closed cluster's comms that timed
    out and was never read printed its traceback into a job's log at exit)."""
    for name in ("distributed", "tornado", "asyncio"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


#: Options as the library's messages name them (the Python API's spelling), and as this
#: command spells them.
CLI_SPELLINGS = {"overwrite=True": "--overwrite"}


def cli_wording(message: str) -> str:
    """A library message with the options named as on the command line."""
    for api, option in CLI_SPELLINGS.items():
        message = message.replace(api, option)
    return message


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    run = commands.add_parser(
        "matmul", help="compute C = alpha * op(A) @ op(B) + beta * D into a zarr array"
    )
    run.add_argument("a", help="path or URL of the zarr array A (m×k, or k×m with --transpose-a)")
    run.add_argument("b", help="path or URL of the zarr array B (k×n, or n×k with --transpose-b)")
    run.add_argument("-o", "--out", required=True, help="path or URL of the output C (m×n)")
    _add_product(run)
    _add_job_options(run)
    run.set_defaults(run=_matmul)

    gram = commands.add_parser(
        "gram",
        help="compute G = alpha * X.T @ X (or X @ X.T) into a zarr array: the tiles on and "
        "above the diagonal, each mirrored; G is exactly symmetric",
    )
    gram.add_argument("x", help="path or URL of the zarr array X (k×n: G is n×n)")
    gram.add_argument("-o", "--out", required=True, help="path or URL of the output G")
    gram.add_argument(
        "--rows", action="store_true", help="G = X @ X.T, the Gram matrix of X's rows (m×m)"
    )
    gram.add_argument("--alpha", type=_number, default=1.0, help="scale (default 1)")
    _add_job_options(gram)
    gram.set_defaults(run=_gram)

    rand = commands.add_parser("random", help="write a seeded random array (inputs for tests)")
    rand.add_argument("path")
    rand.add_argument("--shape", required=True, type=_pair, metavar="M,N")
    rand.add_argument("--chunks", required=True, type=_pair, metavar="R,C")
    rand.add_argument(
        "--dtype", choices=[str(d) for d in INPUT_DTYPES], default="float32", help="%(default)s"
    )
    rand.add_argument("--seed", type=int, default=0)
    rand.add_argument("--overwrite", action="store_true")
    _add_storage_options(rand)
    _add_quiet(rand)
    rand.set_defaults(run=_random)

    plan = commands.add_parser(
        "plan",
        help="print the plan of a matmul job without running it: it takes every option "
        "of matmul and plans as the job would, for the workers it would get (a --scheduler "
        "is asked for its workers)",
    )
    plan.add_argument("a")
    plan.add_argument("b")
    _add_product(plan)
    _add_job_options(plan)
    plan.add_argument(
        "--reprobe",
        action="store_true",
        help="measure this machine again for the predicted time (BLAS, decoding, writing: a "
        "few seconds) instead of using the figures cached for it",
    )
    plan.set_defaults(run=_plan)

    status = commands.add_parser(
        "status", help="show the state of the job writing an output (tiles done, lease)"
    )
    status.add_argument("c", help="path or URL of the output C")
    _add_storage_options(status)
    _add_json(status)
    status.set_defaults(run=_status)

    check = commands.add_parser("verify", help="check C = A @ B by Freivalds' method")
    check.add_argument("a")
    check.add_argument("b")
    check.add_argument("c")
    _add_product(check)
    check.add_argument("--rounds", type=int, default=2)
    check.add_argument("--seed", type=int)
    _add_storage_options(check)
    _add_json(check)
    _add_quiet(check, "print nothing when the product is right (the exit status says it)")
    check.set_defaults(run=_verify)

    demo = commands.add_parser(
        "demo", help="generate inputs larger than the budget, multiply, verify, summarise"
    )
    demo.add_argument("--size", type=int, default=DEMO_SIZE, help="m = k = n")
    demo.add_argument("--chunk", type=int, default=DEMO_CHUNK)
    _add_memory(demo, DEMO_MEMORY)
    demo.add_argument("--workers", type=int)
    demo.add_argument("--dir", type=Path, help="keep the arrays here (default: a temporary dir)")
    _add_dashboard(demo)
    _add_json(demo)
    _add_quiet(demo, "no progress or summary; the verdict only when the product is wrong")
    demo.set_defaults(run=_demo)
    return parser


def _add_job_options(run: argparse.ArgumentParser) -> None:
    """The options of a job (``matmul``, ``gram``): budget, cluster, output, plan."""
    _add_out_dtype(run)
    _add_memory(run)
    _add_device_memory(
        run,
        "cap on the device memory of each GPU worker, e.g. 2GiB (default: "
        "80%% of its free memory); larger host tiles are cut into device tiles",
    )
    run.add_argument("--backend", choices=BACKENDS, default="auto")
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
        type=int,
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
    run.add_argument(
        "--no-shards",
        dest="shards",
        action="store_false",
        help="never shard a new output (by default one of more than 10^5 chunks gets one "
        "zarr shard per tile)",
    )
    _add_dashboard(run)
    _add_storage_options(run)
    _add_json(run)
    _add_quiet(run)


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
        "--alpha", type=_number, default=1.0, help="scale of op(A) @ op(B) (default 1)"
    )
    parser.add_argument(
        "--beta", type=_number, default=0.0, help="scale of the addend (default 0; needs --addend)"
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


def _product_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "transpose_a": args.transpose_a,
        "transpose_b": args.transpose_b,
        "alpha": args.alpha,
        "beta": args.beta,
        "addend": args.addend,
    }


def _number(text: str) -> float | complex:
    try:
        value = complex(text.replace(" ", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number like 2, -0.5 or 1+2j, got {text!r}"
        ) from None
    return value if value.imag else value.real


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


def _storage(args: argparse.Namespace) -> dict[str, Any] | None:
    from outofcore.stores import parse_storage_options  # noqa: PLC0415

    return parse_storage_options(args.storage_option)


def _add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")


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


def _pair(text: str) -> tuple[int, int]:
    try:
        first, second = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected two integers like 1000,2000, got {text!r}"
        ) from None
    return first, second


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except OutOfCoreError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _matmul(args: argparse.Namespace) -> int:
    from outofcore.api import run_job  # noqa: PLC0415 (fast --help)

    spec = _job_spec(args, _product_options(args))
    with _tls(args):
        result = run_job(args.a, args.b, args.out, spec, client=args.scheduler)
    print_result(_with_startup(result.summary, args), args.json, format_summary, args.quiet)
    return 0


def _gram(args: argparse.Namespace) -> int:
    from outofcore.api import run_job  # noqa: PLC0415 (fast --help)

    product = {"transpose_a": not args.rows, "transpose_b": args.rows, "alpha": args.alpha}
    with _tls(args):
        result = run_job(args.x, args.x, args.out, _job_spec(args, product), client=args.scheduler)
    print_result(_with_startup(result.summary, args), args.json, format_summary, args.quiet)
    return 0


def _tls(args: argparse.Namespace) -> Any:
    """Dask's TLS settings for the job from ``--tls-ca-file``, ``--tls-cert``, ``--tls-key``
    (:func:`scheduler.tls.tls_settings`), as a context manager (none given: no change)."""
    import dask  # noqa: PLC0415

    from scheduler.tls import tls_settings  # noqa: PLC0415

    files = (args.tls_ca_file, args.tls_cert, args.tls_key)
    return dask.config.set(tls_settings(args.scheduler, *files))


def _with_startup(summary: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """``summary`` with the command's own start (interpreter and imports, up to parsing the
    command line) as the first of its phases."""
    if "phases" not in summary:
        return summary
    return {**summary, "phases": {"startup": args.startup_seconds, **summary["phases"]}}


def _job_spec(args: argparse.Namespace, product: dict[str, Any]) -> Any:
    """The :class:`~outofcore.spec.JobSpec` of a ``matmul`` or ``gram`` command line."""
    from outofcore.spec import JobSpec  # noqa: PLC0415
    from scheduler.gpu_cluster import parse_gpus  # noqa: PLC0415

    return JobSpec(
        **product,
        out_dtype=args.out_dtype,
        memory=args.memory,
        device_memory=args.device_memory,
        backend=args.backend,
        output_codec=args.output_codec,
        shards=args.shards,
        zarr_format=args.zarr_format,
        overwrite=args.overwrite,
        splits=args.splits,
        workers=args.workers,
        gpus=parse_gpus(args.gpus) if args.gpus else None,
        progress=not (args.json or args.quiet),
        dashboard=args.dashboard,
        storage_options=_storage(args),
    )


def _random(args: argparse.Namespace) -> int:
    from outofcore.generate import random_array  # noqa: PLC0415

    started = time.perf_counter()
    array = random_array(
        args.path,
        args.shape,
        args.chunks,
        args.dtype,
        seed=args.seed,
        overwrite=args.overwrite,
        storage_options=_storage(args),
    )
    nbytes = array.nbytes
    if args.quiet:
        return 0
    print(
        f"wrote {args.path}: {array.shape[0]}x{array.shape[1]} {array.dtype}, chunks "
        f"{array.chunks}, {format_bytes(nbytes)} in {time.perf_counter() - started:.2f} s"
    )
    return 0


def _plan(args: argparse.Namespace) -> int:
    from outofcore.api import open_product  # noqa: PLC0415
    from outofcore.planning import job_workers, plan_job, with_budget  # noqa: PLC0415
    from scheduler.cluster import is_local  # noqa: PLC0415
    from scheduler.tls import client_security  # noqa: PLC0415

    # The job's own spec, budget, workers and planning function: `plan` shows what
    # `matmul` runs.  A scheduler elsewhere is asked for its workers, as the job would.
    with _tls(args):  # the job's refusals (certificates, addresses)
        if args.scheduler and not is_local(args.scheduler):
            client_security(args.scheduler)
    spec = with_budget(_job_spec(args, _product_options(args)), args.scheduler)
    product = open_product(args.a, args.b, spec)
    if 0 in (*product.shape, product.k):
        m, n = product.shape
        print(
            f"{m}x{product.k} @ {product.k}x{n}: an empty product; matmul writes "
            f"{'an empty output' if 0 in (m, n) else 'beta * the addend, or zeros'}, no tile"
        )
        return 0
    with _tls(args):
        workers = job_workers(spec, args.scheduler)
    job_plan = plan_job(
        product,
        spec,
        workers,
        client=args.scheduler,
        predictions=True,
        reprobe=args.reprobe,
        device_memory=args.device_memory,
    )
    print_result({**job_plan.summary(), "product": product.summary()}, args.json, format_plan)
    return 0


def _status(args: argparse.Namespace) -> int:
    from outofcore.api import job_status  # noqa: PLC0415

    print_result(job_status(args.c, _storage(args)), args.json, format_status)
    return 0


def _verify(args: argparse.Namespace) -> int:
    from outofcore.freivalds import verify  # noqa: PLC0415

    report = verify(
        args.a,
        args.b,
        args.c,
        rounds=args.rounds,
        seed=args.seed,
        storage_options=_storage(args),
        **_product_options(args),
    )
    print_result(report.as_dict(), args.json, format_verify, args.quiet and report.passed)
    return 0 if report.passed else 1


def _demo(args: argparse.Namespace) -> int:
    from outofcore.api import run_job  # noqa: PLC0415
    from outofcore.freivalds import verify  # noqa: PLC0415
    from outofcore.generate import random_array  # noqa: PLC0415
    from outofcore.spec import JobSpec  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="outofcore-demo-") as scratch:
        folder = args.dir or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        size, chunk = args.size, args.chunk
        paths = {name: str(folder / f"{name}.zarr") for name in ("a", "b", "c")}
        quiet = args.json or args.quiet
        say = (lambda *_: None) if quiet else print
        say(f"Generating A and B: {size}x{size} float32 each, chunks {chunk}x{chunk}, in {folder}")
        for seed, name in enumerate(("a", "b")):
            random_array(paths[name], (size, size), (chunk, chunk), seed=seed, overwrite=True)
        inputs = 2 * size * size * 4
        say(
            f"Inputs hold {format_bytes(inputs)}; the budget is {format_bytes(args.memory)} "
            "per worker"
        )
        spec = JobSpec(
            memory=args.memory,
            workers=args.workers,
            overwrite=True,
            progress=not quiet,
            dashboard=args.dashboard,
        )
        result = run_job(paths["a"], paths["b"], paths["c"], spec)
        summary = _with_startup(result.summary, args)
        say(format_summary(summary))
        report = verify(paths["a"], paths["b"], paths["c"])
        if args.json:
            print(json.dumps({**summary, "verify": report.as_dict()}, indent=2))
        elif not (args.quiet and report.passed):
            print(format_verify(report.as_dict()))
    return 0 if report.passed else 1


if __name__ == "__main__":
    command()

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
from dask.utils import format_bytes, format_time

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
    _print(_with_startup(result.summary, args), args.json, _format_summary, args.quiet)
    return 0


def _gram(args: argparse.Namespace) -> int:
    from outofcore.api import run_job  # noqa: PLC0415 (fast --help)

    product = {"transpose_a": not args.rows, "transpose_b": args.rows, "alpha": args.alpha}
    with _tls(args):
        result = run_job(args.x, args.x, args.out, _job_spec(args, product), client=args.scheduler)
    _print(_with_startup(result.summary, args), args.json, _format_summary, args.quiet)
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
    _print({**job_plan.summary(), "product": product.summary()}, args.json, _format_plan)
    return 0


def _status(args: argparse.Namespace) -> int:
    from outofcore.api import job_status  # noqa: PLC0415

    _print(job_status(args.c, _storage(args)), args.json, _format_status)
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
    _print(report.as_dict(), args.json, _format_verify, args.quiet and report.passed)
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
        say(_format_summary(summary))
        report = verify(paths["a"], paths["b"], paths["c"])
        if args.json:
            print(json.dumps({**summary, "verify": report.as_dict()}, indent=2))
        elif not (args.quiet and report.passed):
            print(_format_verify(report.as_dict()))
    return 0 if report.passed else 1


def _print(data: dict[str, Any], as_json: bool, formatter: Any, quiet: bool = False) -> None:
    """The command's result: JSON, or the formatter's text unless ``quiet``."""
    if as_json:
        print(json.dumps(data, indent=2))
    elif not quiet:
        print(formatter(data))


def _format_summary(s: dict[str, Any]) -> str:
    product = s.get("product") or {}
    formula = formula_of(product)
    if s.get("empty"):
        return (
            f"{formula} written to {s['output']}: {s['shape'][0]}x{s['shape'][1]} "
            f"{s['dtype']}, k = {s['k']}: an empty product, nothing to multiply "
            f"({s['seconds']:.2f} s)"
        )
    tiles = "tiles (on and above the diagonal, mirrored)" if product.get("symmetric") else "tiles"
    split = ""
    if s.get("splits", 1) > 1:
        split = (
            f", k split in {s['splits']} parts ({s['partial_tasks_computed']} partial tasks; "
            f"partial tiles {format_bytes(s['scratch_bytes'])} written, "
            f"{format_bytes(s['scratch_bytes_read'])} read back)"
        )
    return "\n".join(
        [
            f"{formula} written to {s['output']}: {s['shape'][0]}x{s['shape'][1]} {s['dtype']}, "
            f"k = {s['k']}, backend {s['backend']}, {s['workers']} worker(s)",
            f"  tiles          {s['tiles']} {tiles} of {s['tile'][0]}x{s['tile'][1]}, panels "
            f"{s['tk']} deep ({s['tiles_skipped']} skipped){split}",
            f"  time           {s['seconds']:.2f} s, {s['gflops']:.1f} GFLOP/s",
            f"  read           {format_bytes(s['bytes_read'])} {_read_ratio(s)}",
            f"  written        {format_bytes(s['bytes_written'])}",
            f"  memory         peak worker RSS {format_bytes(s['peak_worker_bytes'])} during "
            f"the tasks (a task grew it by at most {format_bytes(s.get('peak_task_bytes', 0))}); "
            f"task projected {format_bytes(s['task_bytes_projected'])} of a "
            f"{format_bytes(s['task_budget_bytes'])} budget per task",
            f"  task time      compute {s['compute_seconds']:.2f} s, waiting for reads "
            f"{s['read_wait_seconds']:.2f} s, writing {s['write_seconds']:.2f} s (summed)",
            *_format_phases(s.get("phases")),
        ]
    )


def _format_phases(phases: dict[str, float] | None) -> list[str]:
    """The job's wall time by phase (outofcore/phases.py), on one line."""
    if not phases:
        return []
    total = sum(phases.values())
    parts = ", ".join(f"{name.replace('_', ' ')} {seconds:.2f}" for name, seconds in phases.items())
    return [f"  wall time      {total:.2f} s: {parts}"]


def _read_ratio(s: dict[str, Any]) -> str:
    """The read against the lower bound, or why there is none (a resumed job)."""
    bound = format_bytes(s["io_lower_bound"])
    if s["read_over_lower_bound"] is None:
        return (
            f"(resumed: {s['tiles_skipped']} of {s['tiles']} tiles were done before; the lower "
            f"bound {bound} is a whole job's)"
        )
    return f"({s['read_over_lower_bound']:.2f}x the lower bound {bound})"


def formula_of(product: dict[str, Any]) -> str:
    """What a job computes, from its product summary: ``C = 2*A.T @ B - D (D = ...)``.

    Scales are written as in algebra: none for 1, a sign alone for -1, and a negative
    real ``beta`` subtracts (``- 0.5*D``, never ``+ -0.5*D``).
    """
    a = "A.T" if product.get("transpose_a") else "A"
    b = "B.T" if product.get("transpose_b") else "B"
    alpha, beta = product.get("alpha", 1), product.get("beta", 0)
    scale = "" if alpha == 1 else "-" if alpha == -1 else f"{_number_text(alpha)}*"
    if product.get("symmetric"):
        return f"G = {scale}{'X @ X.T' if product.get('transpose_b') else 'X.T @ X'}"
    formula = f"C = {scale}{a} @ {b}"
    if product.get("addend"):
        sign = "+"
        if isinstance(beta, int | float) and beta < 0:
            sign, beta = "-", -beta
        factor = "" if beta == 1 else f"{_number_text(beta)}*"
        formula += f" {sign} {factor}D (D = {product['addend']})"
    return formula


def _number_text(value: Any) -> str:
    """A scale as the user wrote it: 2, -0.5, (1+2j); JSON keeps complex ones as pairs."""
    if isinstance(value, list | tuple):  # [real, imag]
        value = complex(*value)
    if isinstance(value, complex):
        return f"({value.real:g}{value.imag:+g}j)"
    return f"{value:g}"


def _format_plan(p: dict[str, Any]) -> str:
    product = p["product"]
    a = "A.T" if product["transpose_a"] else "A"
    b = "B.T" if product["transpose_b"] else "B"
    return "\n".join(
        [
            formula_of(product),
            f"  operands       {a} {p['m']}x{p['k']} (chunks {p['a_chunks'][0]}x"
            f"{p['a_chunks'][1]}) @ "
            f"{b} {p['k']}x{p['n']} (chunks {p['b_chunks'][0]}x{p['b_chunks'][1]}), "
            f"accumulated in {product['compute']}"
            f"{' (exact)' if product['exact'] else ''}, written as {product['output']}",
            f"  budget         {format_bytes(p['task_budget_bytes'])} per task, "
            f"{format_bytes(p['worker_budget_bytes'])} per worker of "
            f"{p['threads_per_worker']} thread(s), {p['workers']} worker(s)",
            f"  tiles          {p['tiles']} ({p['tiles_grid'][0]}x{p['tiles_grid'][1]}"
            f"{', on and above the diagonal' if p['symmetric'] else ''}) of "
            f"{p['tile'][0]}x{p['tile'][1]}, {p['panels_per_tile']} panel(s) of {p['tk']}",
            *(
                [
                    "  symmetric      one array times its transpose: each tile also writes its "
                    "mirror, diagonal tiles by syrk; the output is exactly symmetric"
                ]
                if p["symmetric"]
                else []
            ),
            *_format_split(p),
            f"  output chunks  {p['out_chunk_count']} of {p['out_chunks'][0]}x{p['out_chunks'][1]}"
            + _format_shards(p.get("out_shards")),
            f"  task memory    {format_bytes(p['task_bytes'])} projected"
            + _format_kinds(p.get("task_bytes_by_kind") or {}),
            *_format_device(p.get("device")),
            f"  bytes read     {format_bytes(p['bytes_read'])} predicted, lower bound "
            f"{format_bytes(p['io_lower_bound'])} ({p['read_over_lower_bound']:.2f}x)",
            f"  bytes written  {format_bytes(p['bytes_written'])}",
            f"  work           {p['flops'] / 1e9:.1f} GFLOP",
            *_format_predictions(p.get("predicted", []), p.get("machine")),
        ]
    )


def _format_kinds(kinds: dict[str, int]) -> str:
    """Each kind's projection, when the plan runs more than one kind of task."""
    if len(kinds) < 2:
        return ""
    return " (" + ", ".join(f"{kind} {format_bytes(n)}" for kind, n in kinds.items()) + ")"


def _format_split(p: dict[str, Any]) -> list[str]:
    """The split-k lines of a plan: its partial tasks, the reduction and the scratch."""
    if p["splits"] == 1:
        busy = f"{p['busy_workers']} of {p['workers']} worker(s)"
        return [f"  split-k        none: {busy} get a tile"]
    return [
        f"  split-k        k in {p['splits']} parts: {p['partial_tasks']} partial tasks on "
        f"{p['busy_workers']} of {p['workers']} worker(s), then {p['tiles']} reduction task(s)",
        f"  partial tiles  {format_bytes(p['scratch_bytes'])} written next to the output "
        "and read back once by the reduction (deleted when the job completes)",
    ]


def _format_shards(shards: list[int] | None) -> str:
    if not shards:
        return ""
    return f", in shards of {shards[0]}x{shards[1]} (one per tile)"


def _format_predictions(
    predictions: list[dict[str, Any]], machine: dict[str, Any] | None = None
) -> list[str]:
    """The time model's lines (scheduler/model.py): this machine's prediction from its
    measured figures (:mod:`outofcore.probe`), then the assumed machines as what-ifs."""
    measured = [p for p in predictions if p.get("basis") == "measured"]
    assumed = [p for p in predictions if p.get("basis") != "measured"]
    lines = []
    for p in measured:
        where = "this machine" if not machine or machine["runs_here"] else "if run here"
        lines.append(
            f"  predicted time {format_time(p['seconds'])} {where} ({p['busy_workers']} of "
            f"{p['workers']} worker(s) busy), bound by {p['bottleneck']}: {_streams(p)}"
        )
        if machine:
            lines += _format_machine(machine)
        if machine and machine.get("note"):
            lines.append(f"                 (a what-if: {machine['note']})")
    if assumed:
        lines.append("  what if        (assumed rates, not measured: scheduler/model.py)")
    for p in assumed:
        lines.append(
            f"    {p['machine']:<22} {p['busy_workers']:>4}/{p['workers']:<4} busy"
            f"  {format_time(p['seconds']):>9}  bound by {p['bottleneck']} ({_streams(p)})"
        )
    return lines


def _format_machine(machine: dict[str, Any]) -> list[str]:
    """Where this machine's figures come from, and the figures (``plan``'s two lines)."""
    f = machine["figures"]
    cache, home = machine["cache"], str(Path.home())
    if cache.startswith(home + os.sep):
        cache = "~" + cache[len(home) :]
    when = f"cache {cache}"
    if machine["probed_now"]:
        when = f"just now: {machine['probed_because']}"
    return [
        f"  this machine   measured {f['measured'].replace('T', ' ')[:16]} UTC ({when}; "
        f"--reprobe measures again), load {_load(f['load'])}, {f['threads']} thread(s) per "
        f"worker, a thread's share of a core {f['cpu_share']:.2f}",
        f"                 sgemm {f['sgemm_flops'] / 1e9:.1f} GFLOP/s "
        f"({f['sgemm_small_flops'] / 1e9:.1f} at 1024³), dgemm "
        f"{f['dgemm_small_flops'] / 1e9:.1f} GFLOP/s at 1024³; decode "
        f"{f['zstd_decode_bps'] / 1e6:.0f} MB/s zstd, {f['raw_read_bps'] / 1e6:.0f} "
        f"uncompressed ({100 * f['overlap']:.0f}% hidden behind BLAS); write "
        f"{f['raw_write_bps'] / 1e6:.0f} MB/s uncompressed, {f['zstd_encode_bps'] / 1e6:.0f} "
        f"zstd; disk {f['disk_read_bps'] / 1e6:.0f} MB/s",
        *(
            [
                f"                 measured under load {f['load']:.1f} "
                f"({machine['load_per_core']:.2f} per core): the figures may be low and the "
                "time predicted too long; --reprobe on a quiet machine"
            ]
            if machine.get("under_load")
            else []
        ),
    ]


def _streams(p: dict[str, Any]) -> str:
    """A prediction's streams, those that take time (``compute 9.2 s, decode 1.1 s, ...``)."""
    names = (
        "compute", "decode", "pcie", "disk", "network", "write", "scratch", "cores", "fill",
        "start",
    )  # fmt: skip
    shown = [name for name in names if p[name] > 0]
    return ", ".join(
        f"{'PCIe' if name == 'pcie' else name} {format_time(p[name])}" for name in shown
    )


def _load(load: float | None) -> str:
    return "unknown" if load is None else f"{load:.1f}"


def _format_device(d: dict[str, Any] | None) -> list[str]:
    """The device tiling lines of ``outofcore plan --device-memory``."""
    if not d:
        return []
    rows, cols = d["device_tiles"]
    how = f"sub-tiled, {rows}x{cols} per host tile"
    if d["mode"] == "resident":
        how = "the whole host tile, resident"
    return [
        f"  device tile    {d['device_tile'][0]}x{d['device_tile'][1]} ({how}), slices "
        f"{d['dk']} deep: {format_bytes(d['device_bytes'])} of a "
        f"{format_bytes(d['device_budget_bytes'])} device budget",
        f"  PCIe           {format_bytes(d['pcie_bytes_per_tile'])} per host tile (H2D "
        f"{format_bytes(d['h2d_bytes_per_tile'])}, D2H {format_bytes(d['d2h_bytes_per_tile'])}), "
        f"{format_bytes(d['pcie_bytes'])} in all",
    ]


def _format_status(s: dict[str, Any]) -> str:
    total, done = s["tiles_total"] or 0, s["tiles_done"]
    share = f" ({100 * done / total:.0f}%)" if total else ""
    progress = "no tile finished yet"
    if s["last_progress"]:
        progress = (
            f"last tile finished {s['last_progress']} ({s['last_progress_seconds_ago']:.0f} s ago)"
        )
    lease = s["lease"]
    if lease is None:
        holder = "none" if s["complete"] else "none; rerun the same matmul command to resume"
    elif lease["alive"]:
        holder = (
            f"job {lease['job_id']} (host {lease['host']}, pid {lease['pid']}), heartbeat "
            f"{lease['heartbeat_seconds_ago']:.0f} s ago"
        )
    else:
        holder = (
            f"job {lease['job_id']} (host {lease['host']}, pid {lease['pid']}) is dead: "
            f"{lease['dead_because']}; rerunning the matmul command takes over and resumes"
        )
    return "\n".join(
        [
            f"{s['output']}: {s['state']}, {done} of {total} tiles done{share}",
            f"  started        {s['started']} (journal {s['journal_id']}, {s['runs']} run(s), "
            f"tiles {s['tile'][0]}x{s['tile'][1]}, panels {s['tk']} deep)",
            f"  progress       {progress}",
            *(
                [f"  split-k        {s['partials_done']} part(s) of split tiles recorded"]
                if s.get("partials_done")
                else []
            ),
            f"  lease          {holder}",
            f"  complete       {'yes, ' + s['completed'] if s['complete'] else 'no'}",
        ]
    )


def _format_verify(v: dict[str, Any]) -> str:
    verdict = "PASSED" if v["passed"] else "FAILED"
    text = (
        f"verify (Freivalds, {v['rounds']} rounds): {verdict}; largest relative residual "
        f"{v['max_relative_residual']:.3g} (tolerance {v['tolerance']:.3g})"
    )
    if v.get("exact"):
        text = (
            f"verify (Freivalds, {v['rounds']} rounds, exact integers): {verdict}; largest "
            f"residual {v['max_relative_residual']:.0f} (tolerance 0)"
        )
    if not v["passed"]:
        text += (
            f"; {v['failing_rows']} row(s) fail, the first is row {v['first_failing_row']}"
            f" ({v['nonfinite_mismatches']} with NaN/Inf where none was expected or vice versa)"
        )
    return text


if __name__ == "__main__":
    command()

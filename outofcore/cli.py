"""The ``outofcore`` command line: matmul, gram, random, plan, status, verify, demo."""

# ruff: noqa: E402 (OpenBLAS's idle spin is set before the imports that load it)
from __future__ import annotations

import os
import signal
import sys
import time

#: When this module began loading: the command's own start (a shell that ``exec``s it
#: keeps its process, whose age would count the shell's time too).
_LOADING = time.monotonic()


def _interrupted_before_start(signum: int, frame: object) -> None:
    """Ctrl-C while the command still loads: nothing has started, so nothing to keep or
    tidy; one line and exit status 130 at once (no traceback of an import)."""
    os.write(2, b"outofcore: interrupted before anything started\n")
    os._exit(130)


#: The command itself loads this module (the console script, or ``python -m outofcore.cli``):
#: from here on Ctrl-C is the command's.  A program that imports it keeps its own handler.
_OWNS_CTRL_C = __name__ == "__main__" or os.path.basename(sys.argv[0]).startswith("outofcore")
if _OWNS_CTRL_C:
    signal.signal(signal.SIGINT, _interrupted_before_start)

from outofcore.runtime.blas_idle import shorten_blas_spin

shorten_blas_spin()  # before numpy and SciPy load OpenBLAS (below); outofcore.runtime.blas_idle

import argparse
import contextlib
import functools
import gc
import json
import logging
import math
import tempfile
import threading
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
from dask.utils import format_bytes

from outofcore.backends.registry import prepare_process
from outofcore.config import check_all, flag
from outofcore.errors import JOB_FAILED, OutOfCoreError
from outofcore.frontends.cli_output import format_plan, format_summary, format_verify, print_result
from outofcore.frontends.cli_parser import build_parser
from outofcore.frontends.status_output import format_status
from outofcore.storage.stored_arrays import shape_text


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``outofcore`` command; returns the exit status.

    Every expected failure is one ``outofcore: error:`` line on stderr and an exit
    status that says what to do (docs/cli.md): 2, fix the command or its inputs
    (nothing was started); 3, the job started and failed (rerun to retry or resume);
    1, ``verify`` found the product wrong; 130, interrupted.  ``--debug`` (or
    ``OUTOFCORE_DEBUG=1``) adds the traceback.
    """
    # Before any backend's library starts: what each needs of the process's environment
    # (the CUDA backend's kernel cache folder and device numbering)
    prepare_process()
    args = build_parser().parse_args(argv)
    try:  # every setting parsed once, before anything starts (outofcore.config)
        debug = args.debug or flag("debug")
        check_all()
    except OutOfCoreError as exc:
        print(f"outofcore: error: {exc}", file=sys.stderr)
        return exc.exit_status
    _log_to_stderr(debug)
    stop = Interruption(args)
    previous = signal.signal(signal.SIGINT, stop.handle)
    try:
        return stop.finished(COMMANDS[args.command](args))
    except KeyboardInterrupt:
        _quiet_shutdown()
        stop.say()
        return stop.finished(INTERRUPTED)
    except BrokenPipeError:  # `outofcore plan ... | head`: the reader left
        # Python's advice: point stdout at devnull so the exit flush raises nothing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return stop.finished(BROKEN_PIPE)
    except Exception as exc:  # noqa: BLE001 (the edge: one line, never a traceback)
        if debug:
            traceback.print_exc()
        status = exc.exit_status if isinstance(exc, OutOfCoreError) else JOB_FAILED
        text = cli_wording(str(exc)) if isinstance(exc, OutOfCoreError) else _unexpected(exc)
        print(f"outofcore: error: {text}", file=sys.stderr)
        if not debug:  # reads left in flight by the failure: nothing more to say at exit
            sys.unraisablehook = lambda _: None
        return stop.finished(status)
    finally:
        if not debug:  # the result is out: Dask's teardown has nothing for the log at exit
            _quiet_shutdown()
        if not _OWNS_CTRL_C:  # a program that called main() gets its own handler back
            signal.signal(signal.SIGINT, previous)


def command() -> None:
    """The ``outofcore`` console script: :func:`main`, then exit with its status.

    Before exiting it freezes what the interpreter holds (:func:`gc.freeze`), so that
    its finalization does not walk every object of Dask, zarr and bokeh looking for
    cycles: that walk took 0.45 s of a 512² job's 2.0 s (docs/performance.md, "The
    first seconds").  Exit handlers and module teardown still run; only cycles left at
    exit are not collected, as with any object alive at exit.
    """
    status = main()
    if status == INTERRUPTED:
        # What the job kept is durable and recorded, and the job's cluster is closed:
        # nothing is left for the interpreter's teardown but threads still inside a BLAS
        # call or a read, which its exit would wait for (OpenBLAS's exit handler joins its
        # threads: 90-180 s seen), so leave now.
        _exit_now(INTERRUPTED)
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


#: Seconds the command may take to stop after the first Ctrl-C before it exits anyway.
STOP_GRACE_SECONDS = 5.0


class Interruption:
    """Ctrl-C during a command: the first raises KeyboardInterrupt in the main thread (the
    job stops, its cluster closes, what it finished stays recorded) and starts a watch that
    exits after :data:`STOP_GRACE_SECONDS` if stopping hangs; a second exits at once.  Either
    way the last line says what the output's journal holds and how to resume."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.count = 0
        self.result: int | None = None
        self._said = threading.Lock()  # the last line is said once, by whoever comes first

    def finished(self, status: int) -> int:
        """The command's outcome is out (printed, its output complete or not): a Ctrl-C
        from here on, in Dask's teardown or the interpreter's, leaves at once with
        ``status`` instead of interrupting a stop that has nothing left to keep."""
        self.result = status
        return status

    def handle(self, signum: int, frame: Any) -> None:
        """The SIGINT handler (main thread)."""
        if self.result is not None:
            _exit_now(self.result)
        self.count += 1
        _quiet_shutdown()
        if self.count > 1:
            self.exit("interrupted again")
        watch = threading.Thread(target=self._watch, name="outofcore-stop", daemon=True)
        watch.start()
        raise KeyboardInterrupt

    def _watch(self) -> None:
        time.sleep(STOP_GRACE_SECONDS)
        self.exit(f"stopping took over {STOP_GRACE_SECONDS:g} s")

    def exit(self, why: str) -> None:
        """Say what was kept and leave now, whatever the other threads are doing."""
        try:
            self.say(why)
        finally:
            _exit_now(INTERRUPTED)

    def say(self, why: str = "") -> None:
        """The command's last line: ``outofcore: interrupted``, why where it did not stop by
        itself, what the journal holds; once (the stop and the watch may both come here)."""
        if not self._said.acquire(blocking=False):
            return
        reason = f" ({why})" if why else ""
        print(f"outofcore: interrupted{reason}{self.what_was_kept()}", file=sys.stderr)

    def what_was_kept(self) -> str:
        """After Ctrl-C on a job: what its journal holds (as ``outofcore status`` reads it),
        and how to go on."""
        args = self.args
        out = getattr(args, "out", None)
        if args.command not in ("matmul", "gram") or out is None:
            return ""
        kept = f"the tiles finished are kept in {out}"
        try:
            from outofcore.api import job_status  # noqa: PLC0415

            status = job_status(out, _storage(args))
            kept = f"{status['tiles_done']} of {status['tiles_total']} tiles are kept in {out}"
        except Exception:  # noqa: BLE001 (nothing recorded yet, or unreadable: say less)
            pass
        return f"; {kept}: rerun the same command to resume (outofcore status {out} shows them)"


def _exit_now(status: int) -> None:
    """Flush what was printed, end the processes this one started (a cluster's worker
    processes, where stopping did not close them) and end this one with ``status``,
    skipping the interpreter's teardown (threads still in BLAS or I/O are not waited for)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stream
            stream.flush()
    with contextlib.suppress(psutil.Error):
        children = psutil.Process().children(recursive=True)
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.terminate()
        _, alive = psutil.wait_procs(children, timeout=2)
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()
    os._exit(status)


def _process_age() -> float:
    """Seconds since the command started: the process's age (from the kernel's clock
    since boot on Linux: ``/proc/uptime`` and the start in clock ticks, 10 ms apart; psutil's
    ``create_time`` adds a boot time rounded to the second), or, where less, since this
    module began loading: a process that a shell ``exec``s into keeps the shell's start
    (``bash -c 'sleep 5 && outofcore demo'`` counted the 5 s)."""
    loading = time.monotonic() - _LOADING
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            fields = stat.read().rsplit(")", 1)[1].split()
            since_boot = float(uptime.read().split()[0])
        age = since_boot - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # starttime
    except (OSError, ValueError, IndexError):
        age = time.time() - psutil.Process().create_time()
    return max(0.0, min(age, loading))


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


def _quiet_shutdown() -> None:
    """Silence Dask's logs of the cluster being torn down (after Ctrl-C, and once the
    command's outcome is printed: a future of the closed cluster's comms that timed
    out and was never read printed its traceback into a job's log at exit)."""
    families = ("distributed", "tornado", "asyncio")
    # Their children too: Dask's logging config gives some a level of their own
    # (``tornado.application``: error), which a parent's level does not override.
    named = [n for n in logging.root.manager.loggerDict if n.split(".")[0] in families]
    for name in {*families, *named}:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


#: Options as the library's messages name them (the Python API's spelling), and as this
#: command spells them.
CLI_SPELLINGS = {"overwrite=True": "--overwrite"}


def cli_wording(message: str) -> str:
    """A library message with the options named as on the command line."""
    for api, option in CLI_SPELLINGS.items():
        message = message.replace(api, option)
    return message


def _product_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "transpose_a": args.transpose_a,
        "transpose_b": args.transpose_b,
        "alpha": args.alpha,
        "beta": args.beta,
        "addend": args.addend,
    }


def _storage(args: argparse.Namespace) -> dict[str, Any] | None:
    from outofcore.storage.stores import parse_storage_options  # noqa: PLC0415

    return parse_storage_options(args.storage_option)


def _matmul(args: argparse.Namespace) -> int:
    from outofcore.api import run_job  # noqa: PLC0415 (fast --help)

    spec = _job_spec(args, _product_options(args))
    with _tls(args):
        args.startup_seconds = _process_age()
        result = run_job(args.a, args.b, args.out, spec=spec, client=args.scheduler)
    print_result(_with_startup(result.summary, args), args.json, format_summary, args.quiet)
    return 0


def _gram(args: argparse.Namespace) -> int:
    from outofcore.api import run_job  # noqa: PLC0415 (fast --help)

    product = {"transpose_a": not args.rows, "transpose_b": args.rows, "alpha": args.alpha}
    with _tls(args):
        args.startup_seconds = _process_age()
        result = run_job(
            args.x, args.x, args.out, spec=_job_spec(args, product), client=args.scheduler
        )
    print_result(_with_startup(result.summary, args), args.json, format_summary, args.quiet)
    return 0


def _tls(args: argparse.Namespace) -> Any:
    """Dask's TLS settings for the job from ``--tls-ca-file``, ``--tls-cert``, ``--tls-key``
    (:func:`outofcore.runtime.tls.tls_settings`), as a context manager (none given: no change)."""
    # distributed's defaults first: leaving a dask.config.set entered before distributed's
    # first import deletes its whole `distributed` key (plan enters these settings twice).
    import dask  # noqa: PLC0415
    import distributed  # noqa: F401, PLC0415

    from outofcore.runtime.tls import tls_settings  # noqa: PLC0415

    files = (args.tls_ca_file, args.tls_cert, args.tls_key)
    return dask.config.set(tls_settings(args.scheduler, *files))


def _with_startup(summary: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """``summary`` with the command's own start (the interpreter, the imports and the
    command line, up to the job's start) as the first of its phases."""
    if "phases" not in summary or not hasattr(args, "startup_seconds"):
        return summary
    return {**summary, "phases": {"startup": args.startup_seconds, **summary["phases"]}}


def _job_spec(args: argparse.Namespace, product: dict[str, Any]) -> Any:
    """The :class:`~outofcore.jobs.spec.JobSpec` of a ``matmul`` or ``gram`` command line."""
    from outofcore.jobs.spec import JobSpec  # noqa: PLC0415
    from outofcore.runtime.gpu_cluster import parse_gpus  # noqa: PLC0415

    return JobSpec(
        **product,
        out_dtype=args.out_dtype,
        memory=args.memory,
        device_memory=args.device_memory,
        backend=args.backend,
        output_codec=args.output_codec,
        chunks=args.out_chunks,
        shards=args.shards,
        zarr_format=args.zarr_format,
        overwrite=args.overwrite,
        splits=args.splits,
        workers=args.workers,
        gpus=parse_gpus(args.gpus) if args.gpus else None,
        progress=not args.quiet,  # on stderr: --json keeps stdout to the object alone
        dashboard=args.dashboard,
        storage_options=_storage(args),
    )


def _random(args: argparse.Namespace) -> int:
    from outofcore.frontends.generate import random_array  # noqa: PLC0415

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
        f"wrote {args.path}: {shape_text(array.shape)} {array.dtype}, chunks "
        f"{array.chunks}, {format_bytes(nbytes)} in {time.perf_counter() - started:.2f} s"
    )
    return 0


def _plan(args: argparse.Namespace) -> int:
    from outofcore.jobs.preview import plan_product  # noqa: PLC0415

    # The job's own spec, budget, workers and planning function: `plan` shows what
    # `matmul` runs.  A scheduler elsewhere is asked for its workers, as the job would
    # (the one --scheduler names, or dask.config's, as the job's client=None follows).
    spec = _job_spec(args, _product_options(args))
    with _tls(args):
        product, job_plan = plan_product(args.a, args.b, spec, {}, args.scheduler, args.reprobe)
    if job_plan is None:
        print(
            f"{shape_text(product.a.shape)} @ {shape_text(product.b.shape)}: an empty product "
            f"({shape_text(product.shape)}); matmul writes "
            f"{'beta * the addend, or zeros' if math.prod(product.shape) else 'an empty output'}"
            ", no tile"
        )
        return 0
    print_result(
        {**job_plan.summary(), "product": product.summary()},
        args.json,
        functools.partial(format_plan, verbose=args.verbose),
        quiet=args.quiet,
    )
    return 0


def _status(args: argparse.Namespace) -> int:
    from outofcore.api import job_status  # noqa: PLC0415

    print_result(job_status(args.c, _storage(args)), args.json, format_status)
    return 0


def _verify(args: argparse.Namespace) -> int:
    from outofcore.frontends.verify import verify  # noqa: PLC0415

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
    from outofcore.frontends.generate import random_array  # noqa: PLC0415
    from outofcore.frontends.verify import verify  # noqa: PLC0415
    from outofcore.jobs.spec import JobSpec  # noqa: PLC0415

    args.startup_seconds = _process_age()  # generating the inputs is not the job's start
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
            progress=not args.quiet,  # stderr's; --json silences only the lines on stdout
            dashboard=args.dashboard,
        )
        result = run_job(paths["a"], paths["b"], paths["c"], spec=spec)
        summary = _with_startup(result.summary, args)
        say(format_summary(summary))
        report = verify(paths["a"], paths["b"], paths["c"])
        if args.json:
            print(json.dumps({**summary, "verify": report.as_dict()}, indent=2))
        elif not (args.quiet and report.passed):
            print(format_verify(report.as_dict()))
        if args.dir is None and not quiet:
            say(f"The arrays in {folder} are deleted now (--dir PATH keeps them)")
    return 0 if report.passed else 1


#: The function that runs each command
#: (:func:`outofcore.frontends.cli_parser.build_parser` names it).
def _help(args: argparse.Namespace) -> int:
    """``outofcore help [COMMAND]``: the command's help (or the command line's)."""
    parser = build_parser()
    (parser.command_parser(args.topic) if args.topic else parser).print_help()
    return 0


COMMANDS = {
    "help": _help,
    "matmul": _matmul,
    "gram": _gram,
    "random": _random,
    "plan": _plan,
    "status": _status,
    "verify": _verify,
    "demo": _demo,
}


if __name__ == "__main__":
    command()

"""Where a job's ``client`` points: the client a job runs on for ``None`` (Dask's
convention: :func:`resolve_client`), and a client given as text, checked before a job
starts: ``"sync"`` (:data:`SYNC`: no Dask, this process) or a scheduler address, its form
and protocol (:func:`check_client`) and whether a scheduler answers there
(:func:`probe_scheduler`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from outofcore.errors import ClusterError
from outofcore.runtime.tls import client_security, tls_failure

SYNC = ("sync", "synchronous")
#: Seconds to wait for a scheduler address to answer (``outofcore.config``: connect-timeout).
CONNECT_TIMEOUT_SECONDS = 10.0


def resolve_client(client: Any, gpus: tuple[int, ...] | None = None) -> Any:
    """The client a job runs on: ``client``, or for ``None`` Dask's convention: the
    default ``distributed.Client`` when one is open (``distributed.default_client()``:
    the one of ``with Client(...):``, or the last one made), else what ``dask.config``
    names (:func:`dask_configured_client`: ``"sync"`` or a scheduler address), else
    ``None`` (a LocalCluster for the job).

    Raises
    ------
    ClusterError
        For ``gpus`` (workers this job would start on this node's GPUs) while a
        default Client is open: the job would run on that Client's cluster; and for
        a ``client`` that is none of a ``distributed.Client``, a scheduler address,
        ``"sync"`` or None.
    """
    from distributed import Client, default_client  # noqa: PLC0415

    if client is not None:
        if not isinstance(client, str | Client):
            shown = repr(client) if len(repr(client)) <= 60 else repr(client)[:57] + "..."
            raise ClusterError(
                f"client = {shown} ({type(client).__name__}): give a distributed.Client, a "
                "scheduler address such as 'tcp://HOST:8786', 'sync' (this process), or None "
                "(a LocalCluster, or the default Client when one is open)"
            )
        return client

    try:
        found = default_client()
    except ValueError:  # no Client open: Dask's own settings, else a LocalCluster
        configured = dask_configured_client()
        if configured is not None and gpus:
            raise ClusterError(
                f"gpus={list(gpus)} starts workers on this node's GPUs, but dask.config says "
                f"the job runs {'in this process' if configured == 'sync' else f'on {configured}'}"
                " (its 'scheduler' or 'scheduler-address'): leave out gpus, or unset that"
            ) from None
        return configured
    if gpus:
        raise ClusterError(
            f"gpus={list(gpus)} starts workers on this node's GPUs, but a default Dask Client "
            f"is open (scheduler {client_address(found)}) and the job would run on its "
            "cluster: leave out gpus to run there, or close that Client first"
        )
    return found


@contextlib.contextmanager
def computing_on(client: Any, timeout: float = CONNECT_TIMEOUT_SECONDS) -> Iterator[None]:
    """Run the ``dask.compute`` calls inside on ``client`` (resolved as a job resolves it,
    :func:`resolve_client`): a ``distributed.Client`` as it is, a scheduler address
    through a Client of its own (closed after; ``timeout`` seconds to connect), ``"sync"``
    in this thread, and no cluster at all in threads of this process."""
    import dask  # noqa: PLC0415

    client = resolve_client(client)
    with contextlib.ExitStack() as held:
        if client is None:
            scheduler: Any = "threads"
        elif isinstance(client, str) and client.lower() in SYNC:
            scheduler = "sync"
        elif isinstance(client, str):
            from distributed import Client  # noqa: PLC0415

            check_client(client, timeout)  # an address where no scheduler answers: at once
            scheduler = held.enter_context(Client(client, timeout=timeout, set_as_default=False))
        else:
            scheduler = client
        held.enter_context(dask.config.set(scheduler=scheduler))
        yield


def client_address(client: Any) -> str:
    """The scheduler address of a ``distributed.Client``, as messages name it."""
    return str(getattr(getattr(client, "scheduler", None), "address", None) or "?")


def dask_configured_client() -> Any:
    """Where Dask's own settings run computations when no Client is open: ``"sync"`` for
    ``dask.config``'s ``scheduler`` ``"sync"``, ``"synchronous"`` or ``"single-threaded"``
    or ``dask.local.get_sync`` (this process); the ``distributed.Client`` of
    ``dask.config.set(scheduler=client)``; None for ``"threads"`` (the tasks run on threads
    here: :func:`outofcore.runtime.in_process.runs_in_threads`) or ``"processes"`` (a
    LocalCluster); else the ``scheduler-address`` (``DASK_SCHEDULER_ADDRESS``) when one is
    set; else None."""
    import dask  # noqa: PLC0415
    import dask.local  # noqa: PLC0415
    from distributed import Client  # noqa: PLC0415

    scheduler = dask.config.get("scheduler", None)
    if isinstance(scheduler, str):
        if scheduler.lower() in (*SYNC, "single-threaded"):
            return "sync"
        if scheduler.lower() in ("threads", "threading", "processes", "multiprocessing"):
            return None
    elif scheduler is dask.local.get_sync:
        return "sync"
    elif isinstance(scheduler, Client):
        return scheduler
    address = dask.config.get("scheduler-address", None)
    return str(address) if address else None


def check_client(client: Any, timeout: float = CONNECT_TIMEOUT_SECONDS) -> None:
    """Refuse a scheduler address that is not a Dask scheduler's, before any work.

    Raises
    ------
    ClusterError
        For a web address (the dashboard's, ``http://host:8787``), an address
        without a port, or an unknown protocol, with the form to use instead; for a
        TLS address (``tls://``, ``wss://``) without usable certificates
        (:func:`outofcore.runtime.tls.client_security`); and for an address where no Dask
        scheduler answers within ``timeout`` seconds (:func:`probe_scheduler`).
    """
    if not isinstance(client, str) or client.lower() in SYNC:
        return
    from distributed.comm.addressing import parse_address, parse_host_port  # noqa: PLC0415
    from distributed.comm.registry import backends  # noqa: PLC0415

    address = client.strip()
    scheme, _, rest = address.rpartition("://")
    host = rest.split("/")[0].rsplit(":", 1)[0] or "HOST"
    if scheme in ("http", "https"):
        raise ClusterError(
            f"--scheduler {client!r} is a web address (the dashboard's?); give the scheduler's "
            f"address, e.g. tcp://{host}:8786 (`dask scheduler` prints it)"
        )
    try:
        protocol, location = parse_address(address)
        if protocol not in backends:
            raise ValueError(f"unknown protocol {protocol!r}; Dask knows {', '.join(backends)}")
        if protocol in ("tcp", "tls", "ws", "wss"):
            parse_host_port(location)
        _check_special_protocol(protocol, location, backends[protocol])
    except ValueError as exc:
        raise ClusterError(
            f"--scheduler {client!r} is not a scheduler address ({exc}); give one like "
            f"tcp://{host}:8786, or 'sync' to run in this process"
        ) from None
    probe_scheduler(address, timeout, client_security(address))


def _check_special_protocol(protocol: str, location: str, backend: Any) -> None:
    """Refuse addresses of protocols no job can reach from here: an ``inproc://`` address
    of another process (it names a scheduler inside one process only), and ``ucx://``
    where only distributed's stub is installed (UCX was moved to distributed-ucxx).

    Raises
    ------
    ValueError
        Saying why.
    """
    if protocol == "inproc":
        parts = location.split("/")
        if len(parts) != 3 or not parts[1].isdigit():
            raise ValueError("an inproc address is inproc://HOST/PID/N")
        if int(parts[1]) != os.getpid():
            raise ValueError(
                f"inproc:// names a scheduler inside process {parts[1]}; only that process "
                "can reach it"
            )
    if protocol == "ucx" and type(backend).__module__ == "distributed.comm.ucx":
        raise ValueError("ucx:// needs distributed-ucxx, which is not installed here")


def probe_scheduler(
    address: str, timeout: float = CONNECT_TIMEOUT_SECONDS, security: Any = None
) -> None:
    """Ask the server at ``address`` who it is, the whole exchange within ``timeout`` s.

    A port that accepts connections and then says nothing (an HTTP or SSH server, a
    proxy) would hold a Dask Client forever: this answers first, before anything is
    written.  The exchange runs on its own event loop in another thread, so it works
    from code that is itself inside an event loop.

    ``security`` (a ``distributed.security.Security``; None: Dask's settings, checked by
    :func:`outofcore.runtime.tls.client_security`) gives the TLS context, as the job's Client uses
    it: the TLS handshake is bounded by ``timeout`` too.

    Raises
    ------
    ClusterError
        When nothing answers in time, or what answers is not a Dask scheduler; when the
        TLS handshake fails (:func:`outofcore.runtime.tls.tls_failure` says why).
    """
    import asyncio  # noqa: PLC0415
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    from distributed.comm import connect  # noqa: PLC0415

    if security is None:
        security = client_security(address)
    try:
        connection_args = security.get_connection_args("client")
    except (OSError, ValueError) as exc:
        raise ClusterError(f"cannot use the TLS certificates for {address!r}: {exc}") from None

    async def identity() -> Any:
        # The handshake (TLS included) is bounded too.
        comm = await connect(address, timeout=timeout, **connection_args)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    def ask() -> Any:
        return asyncio.run(asyncio.wait_for(identity(), timeout))

    try:
        with ThreadPoolExecutor(1, thread_name_prefix="outofcore-probe") as pool:
            reply = pool.submit(ask).result()
    except Exception as exc:  # refused, timed out, closed, or a protocol it cannot read
        raise not_answered(address, timeout, exc) from None
    kind = reply.get("type") if isinstance(reply, dict) else None
    if kind != "Scheduler":
        raise ClusterError(
            f"{address!r} answered, but as {kind or type(reply).__name__!r}, not a Dask "
            "scheduler: give the scheduler's address (`dask scheduler` prints it)"
        )


def not_answered(address: str, timeout: float, exc: BaseException) -> ClusterError:
    """The error of a scheduler address where no scheduler answered within ``timeout``
    (or TLS refused: :func:`outofcore.runtime.tls.tls_failure` says why), naming ``exc``."""
    refused = tls_failure(exc, address)
    if refused:
        return ClusterError(refused)
    return ClusterError(
        f"no Dask scheduler answered at {address!r} within {timeout:g} s "
        f"({type(exc).__name__}{': ' + str(exc)[:120] if str(exc) else ''}); is "
        "`dask scheduler` running there, and is the address right, its protocol the "
        "scheduler's (tcp://, tls://, ws://)?"
    )

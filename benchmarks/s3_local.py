"""A local S3 API server (moto_server) and a TCP proxy that delays every request by a
fixed time in front of it: an object store far away, on loopback.

Bytes from the client are forwarded to the server ``delay`` seconds after they
arrive, in order; bytes back are forwarded at once.  Each HTTP request to the
server therefore waits ``delay`` more before the server sees it (a round trip
``delay`` longer), however many requests a connection carries, while
bandwidth is unchanged.  It also counts connections and requests (request
lines seen at the start of a client segment: an estimate for pipelined
traffic, exact for S3 clients, which send one request at a time per connection).

Usage::

    python -m benchmarks.s3_local --listen 9001 --target 127.0.0.1:9000 --delay 0.02

or in a program: ``server = MotoServer(); with DelayProxy(("127.0.0.1", server.port),
0.02) as proxy: ...proxy.endpoint...; server.stop()``.  The tests start their
S3 server with :class:`MotoServer` too (tests/helpers.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

REQUEST_LINE = re.compile(rb"^(GET|PUT|POST|HEAD|DELETE) ")


@dataclass
class Counts:
    """What the proxy saw."""

    connections: int = 0
    requests: int = 0
    bytes_up: int = 0
    bytes_down: int = 0


async def _pipe_delayed(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float, counts: Counts
) -> None:
    """Forward ``reader`` to ``writer``, each segment ``delay`` seconds after it arrived."""
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(send())
    try:
        while data := await reader.read(1 << 16):
            if REQUEST_LINE.match(data):
                counts.requests += 1
            counts.bytes_up += len(data)
            queue.put_nowait((time.monotonic() + delay, data))
    finally:
        queue.put_nowait((0.0, b""))
        await sender
        writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, counts: Counts) -> None:
    try:
        while data := await reader.read(1 << 16):
            counts.bytes_down += len(data)
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def _serve(
    target: tuple[str, int], delay: float, counts: Counts, port: int, ready: asyncio.Future
) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        counts.connections += 1
        try:
            server_r, server_w = await asyncio.open_connection(*target)
        except OSError:
            client_w.close()
            return
        with contextlib.suppress(asyncio.CancelledError):  # the proxy is closing
            await asyncio.gather(
                _pipe_delayed(client_r, server_w, delay, counts),
                _pipe(server_r, client_w, counts),
                return_exceptions=True,
            )

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    ready.set_result(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()


class DelayProxy:
    """The proxy on a loopback port, served by its own thread and event loop.

    Parameters
    ----------
    target
        ``(host, port)`` of the server (the S3 API).
    delay
        Seconds added to every request.
    port
        Port to listen on (0: a free one; see :attr:`port`).
    """

    def __init__(self, target: tuple[str, int], delay: float, port: int = 0) -> None:
        if delay < 0:
            raise ValueError(f"delay = {delay}: need seconds >= 0")
        self.target, self.delay, self.counts = target, delay, Counts()
        self._loop = asyncio.new_event_loop()
        ready: asyncio.Future = self._loop.create_future()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="latency-proxy", daemon=True
        )
        self._thread.start()
        self._task = asyncio.run_coroutine_threadsafe(
            _serve(target, delay, self.counts, port, ready), self._loop
        )
        self.port: int = asyncio.run_coroutine_threadsafe(_wait(ready), self._loop).result(10)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        """Stop serving: cancel every task of the proxy's loop, then the loop."""
        asyncio.run_coroutine_threadsafe(_cancel_all(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def __enter__(self) -> DelayProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _wait(future: asyncio.Future) -> int:
    return await future


async def _cancel_all() -> None:
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def stop_process(process: subprocess.Popen) -> None:
    """Stop a server started for a test or a benchmark: SIGTERM, then SIGKILL after 10 s."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_listening(
    process: subprocess.Popen, port: int, name: str, stop: Callable[[], None], seconds: float = 30
) -> None:
    """Wait until ``process`` (a server called ``name``) listens on loopback ``port``.

    Raises
    ------
    RuntimeError
        When it exits first (with its stderr, if piped), or after ``seconds``; then it is
        stopped with ``stop()``.
    """
    deadline = time.monotonic() + seconds
    while True:
        if process.poll() is not None:
            error = process.stderr.read().decode(errors="replace").strip() if process.stderr else ""
            raise RuntimeError(f"{name} exited with status {process.returncode}: {error}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                stop()
                raise RuntimeError(
                    f"{name} did not listen on port {port} in {seconds:g} s"
                ) from None
            time.sleep(0.1)


class MotoServer:
    """A real S3 API server (``moto_server``) on a free loopback port, in its own process.

    ``options`` are the fsspec storage options that reach it; ``env`` the same as
    the AWS environment variables a user would set instead.
    """

    #: moto's default account, which owns the buckets.
    ACCOUNT = "123456789012"
    KEY = "outofcore-test-key"
    SECRET = "outofcore-test-secret"

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_listening(self.process, self.port, "moto_server", self.stop)

    @property
    def options(self) -> dict:
        return {"key": self.KEY, "secret": self.SECRET, "endpoint_url": self.endpoint}

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": self.KEY,
            "AWS_SECRET_ACCESS_KEY": self.SECRET,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def bucket(self, name: str) -> str:
        """Create bucket ``name``; return its URL ``s3://name``."""
        import boto3  # noqa: PLC0415 (moto's dependency, only with the test extra)

        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.KEY,
            aws_secret_access_key=self.SECRET,
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=name)
        return f"s3://{name}"

    def stop(self) -> None:
        stop_process(self.process)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", type=int, default=0, help="port (default: a free one)")
    parser.add_argument("--target", required=True, metavar="HOST:PORT")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds (default 0.02)")
    args = parser.parse_args()
    host, _, port = args.target.rpartition(":")
    proxy = DelayProxy((host or "127.0.0.1", int(port)), args.delay, args.listen)
    print(f"forwarding {proxy.endpoint} -> {args.target}, +{args.delay * 1000:.0f} ms a request")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        proxy.close()
        print(proxy.counts)


if __name__ == "__main__":
    main()

"""A fault-injecting HTTP proxy for object-store tests (issue 33): a real server on loopback.

:class:`FaultProxy` sits between a store client (s3fs, obstore, botocore) and a real S3
API server (``moto_server``).  Every request is forwarded as received (headers, Host
included, so signatures still match) unless a :class:`Fault` rule matches it, and then
the proxy misbehaves as servers, proxies and networks do:

==============  ==========================================================================
``status``      answer ``status`` (503, 500, 404, ...) without forwarding
``after``       forward (the server acts), then answer ``status`` instead of its reply
``drop``        close the connection before forwarding (the server never sees it)
``lost``        forward (the server acts), then close the connection: the reply is lost
``hang``        accept the request and never answer (until the proxy closes)
``delay``       wait ``seconds``, then forward
``truncate``    forward, then send the reply's headers and half its body, and close
``flip``        forward, then flip one byte in the middle of the reply's body
==============  ==========================================================================

A rule matches a request by method and by a regular expression searched in its path
(``key``), ``times`` times (``None``: for ever).  Every request is logged in
:attr:`FaultProxy.log` with what was done to it.  The proxy runs its own event loop in
a thread; use it as a context manager::

    with FaultProxy(moto_server.endpoint) as proxy:
        proxy.add(Fault("status", method="PUT", key=r"lease\\.json$", status=503, times=5))
        options = {**moto_server.options, "endpoint_url": proxy.endpoint}
"""

from __future__ import annotations

import asyncio
import re
import threading
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

#: What the proxy can do to a request (see the module docstring).
KINDS = frozenset({"status", "after", "drop", "lost", "hang", "delay", "truncate", "flip"})
#: Headers not passed on: hop-by-hop, and those the proxy recomputes.
_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}
)


@dataclass
class Fault:
    """One rule: do ``kind`` to the next ``times`` requests of ``method`` whose path
    matches ``key`` (None: any)."""

    kind: str
    method: str | None = None
    key: str | None = None
    times: int | None = 1
    status: int = 503
    seconds: float = 0.0
    #: How many requests it has hit so far.
    hits: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fault kind {self.kind!r}: one of {sorted(KINDS)}")

    def matches(self, method: str, path: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.method is not None and method != self.method:
            return False
        return self.key is None or re.search(self.key, path) is not None


class FaultProxy:
    """A proxy on 127.0.0.1 in front of ``target`` (an ``http://host:port`` endpoint)."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.faults: list[Fault] = []
        #: ``(method, path, what happened)`` per request, in order.
        self.log: list[tuple[str, str, str]] = []
        #: ``(path, Range header or None)`` of every GET, in order.
        self.gets: list[tuple[str, str | None]] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the fault proxy did not start in 30 s")

    # -- rules -----------------------------------------------------------------------------
    def add(self, *faults: Fault) -> None:
        """Apply ``faults`` to the requests from now on (the first matching rule wins)."""
        with self._lock:
            self.faults.extend(faults)

    def clear(self) -> None:
        """No more faults: every request is forwarded."""
        with self._lock:
            self.faults.clear()

    def _take(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.matches(method, path):
                    fault.hits += 1
                    return fault
        return None

    @property
    def endpoint(self) -> str:
        """The proxy's URL: give it to the client as its endpoint."""
        return f"http://127.0.0.1:{self.port}"

    # -- serving ---------------------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        self._stop = asyncio.Event()
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path_qs
        body = await request.read()
        fault = self._take(request.method, request.path)
        kind = fault.kind if fault else "forward"
        self.log.append((request.method, path, kind))
        if request.method == "GET":
            self.gets.append((path, request.headers.get("Range")))
        if kind == "status":
            return web.Response(status=fault.status, text=f"injected {fault.status}")
        if kind == "drop":
            return self._close(request)
        if kind == "hang":
            await self._stop.wait()
            return self._close(request)
        if kind == "delay":
            await asyncio.sleep(fault.seconds)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with self._session.request(
            request.method, f"{self.target}{path}", headers=headers, data=body
        ) as upstream:
            payload = await upstream.read()
            status, reply_headers = upstream.status, upstream.headers.copy()
        if kind == "after":
            return web.Response(status=fault.status, text=f"injected {fault.status}")
        if kind == "lost":
            return self._close(request)
        headers = {k: v for k, v in reply_headers.items() if k.lower() not in _HOP}
        if kind == "flip" and payload:
            middle = len(payload) // 2
            payload = payload[:middle] + bytes([payload[middle] ^ 0xFF]) + payload[middle + 1 :]
        if kind == "truncate":
            response = web.StreamResponse(status=status, headers=headers)
            response.content_length = len(payload)
            await response.prepare(request)
            await response.write(payload[: len(payload) // 2])
            return self._close(request)
        if request.method == "HEAD":  # no body: the size is the upstream's header
            response = web.StreamResponse(status=status, headers=headers)
            length = reply_headers.get("Content-Length")
            if length is not None:
                response.content_length = int(length)
            await response.prepare(request)
            return response
        return web.Response(status=status, headers=headers, body=payload)

    @staticmethod
    def _close(request: web.Request) -> web.Response:
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=599)  # never reaches the client

    # -- closing ---------------------------------------------------------------------------
    def close(self) -> None:
        """Stop serving (hung requests are let go) and join the thread."""
        if not self._loop.is_running():
            return

        async def stop() -> None:
            self._stop.set()
            await self._runner.cleanup()
            await self._session.close()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def requests(self, method: str | None = None, key: str | None = None) -> list[str]:
        """Paths of the logged requests of ``method`` whose path matches ``key``."""
        return [
            path
            for m, path, _ in self.log
            if (method is None or m == method) and (key is None or re.search(key, path))
        ]


def host_of(endpoint: str) -> str:
    """``host:port`` of an endpoint URL."""
    return urlsplit(endpoint).netloc

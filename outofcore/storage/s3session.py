"""An aiobotocore HTTP session that gives up on a request at its deadline (s3fs).

A request to S3 through s3fs is retried by three layers: botocore's attempts
(``retries.max_attempts``), s3fs's loop around every call (``S3FileSystem.retries``,
5: read timeouts, dropped connections, truncated bodies) and, for reads, a second
s3fs loop around the first.  Each layer starts its count afresh, so an endpoint that
accepts connections and never answers was waited on for minutes.

:class:`DeadlineSession` (``config_kwargs={"http_session_cls": ...}``, set by
:func:`outofcore.storage.stores.s3fs_options`) sees every attempt of every layer.  It
remembers when a request (its method and URL) first failed (an error, or a 5xx or
429 reply) and forgets it when the request succeeds; once a request has kept failing
for ``store-deadline`` seconds, the next attempt is not sent: it raises
:class:`~outofcore.storage.deadlines.StoreDeadlineError`, which no layer retries.  A request
therefore ends within the deadline plus one attempt (connect and read timeouts) and
a backoff.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

from aiobotocore.httpsession import AIOHTTPSession

from outofcore.storage.deadlines import Deadlines, StoreDeadlineError

#: Replies that count as a failed attempt (botocore retries them).
FAILED_STATUSES = frozenset({429, 500, 502, 503, 504})


class DeadlineSession(AIOHTTPSession):
    """aiobotocore's session with a deadline per request (see the module docstring).

    The deadline is the setting ``store-deadline`` of the process that makes the
    client (workers read their own environment).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = Deadlines.from_config().deadline
        #: ``(method, url)``: (when it first failed, attempts failed, the last failure).
        self._failing: dict[tuple[str, str], tuple[float, int, str]] = {}

    async def send(self, request: Any) -> Any:
        key = (str(request.method), str(request.url))
        now = time.monotonic()
        failing = self._failing.get(key)
        if failing is not None and now - failing[0] >= self._deadline:
            del self._failing[key]
            raise StoreDeadlineError(self._refusal(key, now, failing))
        try:
            response = await super().send(request)
        except Exception as exc:
            self._failed(key, now, f"{type(exc).__name__}: {' '.join(str(exc).split())}")
            raise
        if response.status_code in FAILED_STATUSES:
            self._failed(key, now, f"HTTP {response.status_code}")
        else:
            self._failing.pop(key, None)
        return response

    def _failed(self, key: tuple[str, str], now: float, what: str) -> None:
        first, count, _ = self._failing.get(key, (now, 0, ""))
        self._failing[key] = (first, count + 1, what)
        if len(self._failing) > 1024:  # requests that failed once and were never sent again
            stale = [k for k, v in self._failing.items() if now - v[0] > 2 * self._deadline]
            for old in stale:
                del self._failing[old]

    def _refusal(self, key: tuple[str, str], now: float, failing: tuple[float, int, str]) -> str:
        method, url = key
        parts = urlsplit(url)
        first, count, last = failing
        return (
            f"the object store at {parts.scheme}://{parts.netloc} kept failing {method} "
            f"{parts.path} for {now - first:.0f} s ({count} attempt(s), last: {last}); "
            f"gave up at the deadline of {self._deadline:g} s "
            "($OUTOFCORE_STORE_DEADLINE): is the store up and its endpoint right?"
        )

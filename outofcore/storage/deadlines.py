"""Every wait on an object store has an end: one set of deadlines for every store client.

Four settings (:mod:`outofcore.config`, ``$OUTOFCORE_STORE_*``) bound each request
outofcore sends to an object store:

=========================  =======  ===================================================
setting                    default  what it bounds
=========================  =======  ===================================================
``store-connect-timeout``  5 s      opening a connection
``store-read-timeout``     10 s     waiting for the reply's next bytes (the first too)
``store-attempts``         3        attempts of one request: the first and its retries
``store-deadline``         30 s     a request that keeps failing, its retries included
=========================  =======  ===================================================

They are applied where stores are made (:func:`outofcore.storage.stores.with_defaults` and its
:func:`outofcore.storage.stores.s3fs_options`, used by every fsspec store and zarr array
outofcore opens, and :mod:`outofcore.storage.obstores`):

* s3fs: botocore's ``connect_timeout``, ``read_timeout`` and ``retries``
  (``max_attempts``, standard mode) as ``config_kwargs``, and an HTTP session
  (:class:`outofcore.storage.s3session.DeadlineSession`) that refuses to send a request again
  once it has kept failing for ``store-deadline`` seconds.  s3fs retries read timeouts
  and dropped connections itself (``S3FileSystem.retries``, nested twice for reads),
  on top of botocore's attempts; the session bounds all of them together.  A user's
  own ``config_kwargs`` keys win (``http_session_cls`` too: aiobotocore's own session
  then has no deadline).
* obstore (the ``S3Store`` outofcore makes from an ``s3://`` URL's options):
  ``client_options`` ``connect_timeout``, ``read_timeout`` and ``timeout`` (one attempt,
  whole), ``retry_config`` ``max_retries`` and ``retry_timeout``.  A zarr
  ``ObjectStore`` given by the user keeps its own client options.

A request refused at its deadline raises :class:`StoreDeadlineError`: neither
botocore, s3fs nor outofcore's read retries retry it, and Dask does not rerun its task.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from outofcore import config
from outofcore.errors import JobFailedError


class StoreDeadlineError(JobFailedError, RuntimeError):
    """A request to an object store kept failing (no answer, errors) past its deadline."""


@dataclass(frozen=True)
class Deadlines:
    """The deadlines of object-store requests, in seconds (see the module docstring)."""

    connect: float
    read: float
    attempts: int
    deadline: float

    @classmethod
    def from_config(cls) -> Deadlines:
        """The settings ``store-connect-timeout``, ``store-read-timeout``,
        ``store-attempts`` and ``store-deadline`` of this process.

        Raises
        ------
        InputError
            Naming the variable when one is not a positive number.
        """
        return cls(
            connect=config.number("store-connect-timeout", positive=True),
            read=config.number("store-read-timeout", positive=True),
            attempts=int(config.number("store-attempts", integer=True, positive=True)),
            deadline=config.number("store-deadline", positive=True),
        )

    def describe(self) -> str:
        """The deadlines in words, for messages."""
        return (
            f"connect {self.connect:g} s, read {self.read:g} s, {self.attempts} attempt(s), "
            f"deadline {self.deadline:g} s"
        )


def obstore_options(config_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Keyword arguments of an obstore store (``client_options``, ``retry_config``) with
    this process's deadlines, or the user's botocore ``config_kwargs`` where given
    (``connect_timeout``, ``read_timeout``, ``retries.max_attempts``)."""
    limits = Deadlines.from_config()
    given = dict(config_kwargs or {})
    connect = float(given.get("connect_timeout") or limits.connect)
    read = float(given.get("read_timeout") or limits.read)
    retries = given.get("retries") if isinstance(given.get("retries"), Mapping) else {}
    attempts = int(retries.get("max_attempts") or retries.get("total_max_attempts") or 0)
    attempts = attempts or limits.attempts
    seconds = datetime.timedelta
    return {
        "client_options": {
            "connect_timeout": seconds(seconds=connect),
            "read_timeout": seconds(seconds=read),
            "timeout": seconds(seconds=max(limits.deadline, read)),
        },
        "retry_config": {
            "max_retries": max(0, attempts - 1),
            "retry_timeout": seconds(seconds=limits.deadline),
        },
    }

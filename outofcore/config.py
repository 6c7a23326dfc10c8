"""Every ``OUTOFCORE_*`` setting in one donfig config, and parsing byte sizes.

Settings come from their defaults, then from ``OUTOFCORE_<NAME>`` environment
variables (read when ``outofcore`` is imported, as dask and zarr read theirs),
then from :func:`set` in this process::

    OUTOFCORE_READ_RETRIES=0 outofcore matmul ...        # a job's workers and client
    with outofcore.config.set({"read-retries": 0}): ...  # this process only

Worker processes read their own environment: set the variables where the
workers start (``dask worker``, the compose file); a LocalCluster's workers
inherit the environment of the process that starts them.

=========================  =======  ==================================================
name                       default  meaning
=========================  =======  ==================================================
``connect-timeout``        10       seconds to wait for a scheduler address
``read-retries``           3        extra attempts of a failed input read
``read-retry-delay``       0.2      seconds before the first retry, doubling
``lease-timeout``          60       seconds without heartbeat before a lease is dead
``direct-writes``          1        0: write output chunk files via the page cache
``remote-concurrency``     16       chunk requests in flight per task on object stores
``debug``                  0        1: the command prints tracebacks (as ``--debug``)
``in-process-worker``      1        0: a LocalCluster's CPU workers get processes
``fingerprint``            stat     ``content``: inputs fingerprinted by their bytes
``fsync``                  1        0: a job's local writes are not flushed to disk
``store-connect-timeout``  5        seconds to open a connection to an object store
``store-read-timeout``     10       seconds to wait for an object store's next bytes
``store-attempts``         3        attempts of one object-store request, retries in
``store-deadline``         30       seconds one object-store request may keep failing
=========================  =======  ==================================================

The ``store-*`` deadlines apply to every store client outofcore makes
(:mod:`outofcore.deadlines`); storage options given by the user win over them.
"""

from __future__ import annotations

import re
from typing import Any

from dask.utils import parse_bytes
from donfig import Config

from outofcore.errors import InputError

DEFAULTS: dict[str, Any] = {
    "connect-timeout": 10.0,
    "read-retries": 3,
    "read-retry-delay": 0.2,
    "lease-timeout": 60.0,
    "direct-writes": True,
    "remote-concurrency": 16,
    "debug": False,
    "in-process-worker": True,
    "fingerprint": "stat",
    "fsync": True,
    "store-connect-timeout": 5.0,
    "store-read-timeout": 10.0,
    "store-attempts": 3,
    "store-deadline": 30.0,
}

config = Config("outofcore", defaults=[DEFAULTS], paths=[])
#: Override settings in this process: ``with set({"read-retries": 0}): ...``.
set = config.set


def env_name(name: str) -> str:
    """The environment variable of setting ``name``, e.g. ``OUTOFCORE_READ_RETRIES``."""
    return "OUTOFCORE_" + name.replace("-", "_").upper()


def number(name: str, *, integer: bool = False, positive: bool = False) -> float:
    """Setting ``name`` as a number, ``>= 0`` (``> 0`` when ``positive``).

    Raises
    ------
    InputError
        Naming the environment variable and its value when it is not such a number.
    """
    value = config.get(name)
    kind = "a whole number" if integer else "a number"
    try:
        if isinstance(value, bool):
            raise TypeError
        converted = int(value) if integer else float(value)
        if integer and converted != float(value):
            raise ValueError
    except (TypeError, ValueError):
        raise InputError(f"{env_name(name)}={value!r} is not {kind}") from None
    if converted < 0 or (positive and converted == 0):
        bound = "> 0" if positive else ">= 0"
        raise InputError(f"{env_name(name)}={value!r}: need {kind} {bound}")
    return converted


def flag(name: str) -> bool:
    """Setting ``name`` as on/off (``0``, ``false``, ``no``, ``off`` are off)."""
    value = config.get(name)
    if isinstance(value, str):
        return value.strip().lower() not in ("0", "false", "no", "off", "")
    return bool(value)


_SIZE = re.compile(r"^\s*[0-9]*\.?[0-9]+(?:e[0-9]+)?\s*[a-z]*\s*$", re.IGNORECASE)


def parse_size(size: int | str) -> int:
    """Return the number of bytes in ``size`` (an int, or text like ``"512MiB"``).

    Units are dask's (:func:`dask.utils.parse_bytes`): ``kB``, ``MB``, ``GB``
    are powers of 1000, ``KiB``, ``MiB``, ``GiB`` powers of 1024.

    Raises
    ------
    InputError
        When the text is not a positive size with a known unit.
    """
    if isinstance(size, bool):
        raise InputError(f"memory size must be bytes or text like '512MiB', got {size!r}")
    if isinstance(size, int):
        value = size
    else:
        try:
            if not _SIZE.match(str(size)):  # parse_bytes reads "" and "MiB" as sizes
                raise ValueError
            value = parse_bytes(str(size))
        except ValueError:
            raise InputError(
                f"cannot read the size {size!r}: use bytes or a number with a unit "
                "such as 512MiB, 2GiB or 1.5GB"
            ) from None
    if value <= 0:
        raise InputError(f"a memory size must be positive, got {size!r}")
    return value

"""outofcore's settings: ``dask.config`` keys under ``outofcore.``, and parsing byte sizes.

The settings are Dask's own configuration (``outofcore.read-retries`` and so on), so
they come as Dask's do: their defaults here, YAML files in Dask's config folders
(``~/.config/dask/*.yaml``: ``outofcore: {read-retries: 5}``), ``DASK_OUTOFCORE__*``
environment variables, and ``dask.config.set`` in this process; and they reach the
worker processes a job starts (a LocalCluster's nannies hand a new worker process the
configuration of the process that starts it) as Dask's own do.  The older
``OUTOFCORE_<NAME>`` variables are aliases, read when ``outofcore`` is imported
(``DASK_OUTOFCORE__*`` wins where both are set)::

    OUTOFCORE_READ_RETRIES=0 outofcore matmul ...              # an alias
    DASK_OUTOFCORE__READ_RETRIES=0 outofcore matmul ...        # Dask's form
    with dask.config.set({"outofcore.read-retries": 0}): ...   # this process
    with outofcore.config.set({"read-retries": 0}): ...        # the same, shorter

Workers of a cluster started elsewhere (``dask worker``, the compose file) read their
own configuration: set the variables (or YAML) where they start.

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

import contextlib
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

import dask.config
from dask.utils import parse_bytes

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

#: The namespace of outofcore's keys in ``dask.config``.
NAMESPACE = "outofcore"


def env_name(name: str) -> str:
    """The environment variable of setting ``name``, e.g. ``OUTOFCORE_READ_RETRIES``
    (an alias of Dask's ``DASK_OUTOFCORE__READ_RETRIES``)."""
    return "OUTOFCORE_" + name.replace("-", "_").upper()


def get(name: str) -> Any:
    """Setting ``name`` as configured (``dask.config.get("outofcore.NAME")``), or its
    registered default where something reset Dask's configuration to one taken before
    outofcore was imported (distributed's test utilities do)."""
    return dask.config.get(f"{NAMESPACE}.{name}", default=_registered[name])


@contextlib.contextmanager
def set(values: Mapping[str, Any]) -> Iterator[None]:  # noqa: A001 (dask.config's name)
    """Override settings in this process: ``with set({"read-retries": 0}): ...`` is
    ``dask.config.set({"outofcore.read-retries": 0})``."""
    with dask.config.set({f"{NAMESPACE}.{name}": value for name, value in values.items()}):
        yield


def _register() -> None:
    """Register the settings' defaults with Dask, each ``OUTOFCORE_<NAME>`` variable that
    is set in place of its default: a value set otherwise (``DASK_OUTOFCORE__*``, YAML, or
    the configuration a nanny hands its worker process) stays
    (``dask.config.update_defaults``), and ``dask.config.refresh()`` keeps them."""
    names = [name for name in DEFAULTS if env_name(name) in os.environ]
    _registered.update(DEFAULTS, **{name: os.environ[env_name(name)] for name in names})
    dask.config.update_defaults({NAMESPACE: dict(_registered)})


#: Each setting's default here: :data:`DEFAULTS`, or its ``OUTOFCORE_<NAME>`` variable.
_registered: dict[str, Any] = {}


_register()


def number(name: str, *, integer: bool = False, positive: bool = False) -> float:
    """Setting ``name`` as a number, ``>= 0`` (``> 0`` when ``positive``).

    Raises
    ------
    InputError
        Naming the environment variable and its value when it is not such a number.
    """
    value = get(name)
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
    value = get(name)
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

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
``stall-timeout``          300      seconds a job waits while no worker runs any task
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
``gpu-tiles-in-flight``    2        output tiles a GPU worker keeps in flight at once
``fallback``               warn     a product ``to_zarr`` hands to dask.array: ``warn``
                                    (a ``FallbackWarning``), ``error``, or ``allow``
=========================  =======  ==================================================

The ``store-*`` deadlines apply to every store client outofcore makes
(:mod:`outofcore.storage.deadlines`); storage options given by the user win over them.

Each setting is parsed by :func:`value` against its entry in :data:`SETTINGS` (its kind
and range): a value that is not finite, out of range, not on/off or not a choice is an
:class:`~outofcore.errors.InputError` naming the variable, the setting and the value;
:func:`check_all` parses them all before a job starts.  Sizes (``--memory``,
``memory=``) go through :func:`parse_size`: positive, finite, at most 1 EiB.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask.config
from dask.utils import parse_bytes

from outofcore.errors import InputError

#: Seconds in a day: the longest timeout or deadline a setting may have.
DAY = 86400.0
#: The most output tiles a GPU worker keeps in flight (``gpu-tiles-in-flight``): each
#: holds its own pinned buffers and a share of the device.
MAX_TILES_IN_FLIGHT = 8


@dataclass(frozen=True)
class Setting:
    """What values a setting takes: ``kind`` ``"seconds"`` or ``"count"`` (a number from
    ``low`` to ``high``, ``> low`` when ``above``), ``"flag"`` (on/off) or ``"choice"``
    (one of ``choices``); its ``default``."""

    default: Any
    kind: str
    low: float = 0
    high: float = 0
    above: bool = False
    choices: tuple[str, ...] = ()


#: Every setting: its default and the values it takes (:func:`value` parses them).  The
#: bounds keep each use finite: ``read-retries`` doublings of ``read-retry-delay`` stay
#: within what ``time.sleep`` takes; a lease times out within a day
#: (:data:`outofcore.journal.lease.MAX_LEASE_TIMEOUT`).
SETTINGS: dict[str, Setting] = {
    "connect-timeout": Setting(10.0, "seconds", 0, DAY, above=True),
    "stall-timeout": Setting(300.0, "seconds", 0, DAY, above=True),
    "read-retries": Setting(3, "count", 0, 20),
    "read-retry-delay": Setting(0.2, "seconds", 0, 600),
    "lease-timeout": Setting(60.0, "seconds", 0, DAY, above=True),
    "direct-writes": Setting(True, "flag"),
    "remote-concurrency": Setting(16, "count", 1, 1024),
    "debug": Setting(False, "flag"),
    "in-process-worker": Setting(True, "flag"),
    "fingerprint": Setting("stat", "choice", choices=("stat", "content")),
    "fsync": Setting(True, "flag"),
    "store-connect-timeout": Setting(5.0, "seconds", 0, DAY, above=True),
    "store-read-timeout": Setting(10.0, "seconds", 0, DAY, above=True),
    "store-attempts": Setting(3, "count", 1, 100),
    "store-deadline": Setting(30.0, "seconds", 0, DAY, above=True),
    # A GPU worker's task threads, each with its engine on the worker's one device: tile
    # i's copy back, write, fsync and record overlap tile i+1's copies and kernels.
    "gpu-tiles-in-flight": Setting(2, "count", 1, MAX_TILES_IN_FLIGHT),
    # What outofcore.to_zarr does with a product it cannot run out of core, which
    # dask.array computes without the memory budget (outofcore.errors.FallbackWarning).
    "fallback": Setting("warn", "choice", choices=("warn", "error", "allow")),
}
#: Each setting's default.
DEFAULTS: dict[str, Any] = {name: setting.default for name, setting in SETTINGS.items()}

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


def value(name: str) -> Any:
    """Setting ``name`` parsed and checked: a float (seconds), an int (counts), a bool
    (flags) or one of its choices (lowercase).

    Raises
    ------
    InputError
        Naming the variable, the setting and the value, when it is not such a value
        (not a number, not finite, out of range, not on/off, not a choice).
    """
    setting, raw = SETTINGS[name], get(name)
    if setting.kind == "flag":
        return _flag(name, raw)
    if setting.kind == "choice":
        text = str(raw).strip().lower()
        if text not in setting.choices:
            _refuse(name, raw, f"need one of {', '.join(setting.choices)}")
        return text
    return _number(name, raw, setting)


def check_all() -> None:
    """Parse every setting (:func:`value`), so that a bad one is refused before a job
    starts rather than where it is first used (a worker's task, a retry).

    Raises
    ------
    InputError
        Naming the first setting that is not a value it takes.
    """
    for name in SETTINGS:
        value(name)


def checked(name: str, raw: Any, label: str) -> Any:
    """``raw``, given for setting ``name`` another way (the API keyword ``label``, e.g.
    ``lease_timeout``), parsed and checked as the setting is (:func:`value`).

    Raises
    ------
    InputError
        Naming ``label`` and the value.
    """
    setting = SETTINGS[name]
    if setting.kind in ("seconds", "count"):
        return _number(name, raw, setting, label)
    if setting.kind == "flag":
        with contextlib.suppress(InputError):
            return _flag(name, raw)
        raise InputError(f"{label} = {_shown(raw)}: need True or False")
    if str(raw).strip().lower() not in setting.choices:
        raise InputError(f"{label} = {_shown(raw)}: need one of {', '.join(setting.choices)}")
    return str(raw).strip().lower()


def number(name: str, *, integer: bool = False, positive: bool = False) -> float:
    """Setting ``name`` as a number (:func:`value`): finite and within its range (``> 0``
    where ``positive``, whole where ``integer``, whatever the registry says too).

    Raises
    ------
    InputError
        Naming the environment variable and its value when it is not such a number.
    """
    setting = SETTINGS[name]
    if setting.kind not in ("seconds", "count"):
        raise KeyError(f"{name} is not a numeric setting")
    kind = "count" if integer else setting.kind
    low_open = setting.above or (positive and setting.low <= 0)
    checked = Setting(setting.default, kind, setting.low, setting.high, low_open)
    return _number(name, get(name), checked)


def flag(name: str) -> bool:
    """Setting ``name`` as on/off (``1``, ``true``, ``yes``, ``on``; ``0``, ``false``,
    ``no``, ``off`` or nothing).

    Raises
    ------
    InputError
        Naming the variable and its value when it is neither.
    """
    return _flag(name, get(name))


_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off", "")


def _flag(name: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int | float) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str) and raw.strip().lower() in _ON + _OFF:
        return raw.strip().lower() in _ON
    return _refuse(name, raw, "need 1 or 0 (or true/false, yes/no, on/off)")


def _number(name: str, raw: Any, setting: Setting, label: str | None = None) -> float:
    """``raw`` as the number ``setting`` takes, or an :class:`InputError` naming it (as
    ``label`` where given)."""
    integer = setting.kind == "count"
    kind = "a whole number" if integer else "a number"
    number = _as_number(raw)
    why = None
    if isinstance(number, float) and not math.isfinite(number):
        why = "is not a finite number"
    elif number is None or (integer and isinstance(number, float) and not number.is_integer()):
        why = f"is not {kind}"
    if why is not None:
        return _refuse(name, raw, why, " ", label)
    low, high = setting.low, setting.high
    if number < low or (setting.above and number == low) or number > high:
        bound = f"> {low:g}" if setting.above else f">= {low:g}"
        unit = " (seconds)" if setting.kind == "seconds" else ""
        return _refuse(name, raw, f"need {kind} {bound} and at most {high:g}{unit}", ": ", label)
    return int(number) if integer else float(number)


def _as_number(raw: Any) -> float | int | None:
    """``raw`` (a number, or text) as an int or float; None when it is not one."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float):
        return raw
    if isinstance(raw, str):
        text = raw.strip()
        try:
            return int(text)
        except ValueError:
            pass
        try:
            return float(text)
        except ValueError:
            return None
    if isinstance(raw, complex):
        return None
    try:  # numpy's numbers, Decimal, Fraction
        return float(raw)
    except (TypeError, ValueError, OverflowError):
        return None


def _refuse(name: str, raw: Any, why: str, joined: str = ": ", label: str | None = None) -> Any:
    """Raise the :class:`InputError` of setting ``name`` set to ``raw``: where the value
    came from (:func:`source`), the value (shortened) and ``why``; or ``label = value``
    where the value came as ``label`` (an API keyword)."""
    if label is not None:
        raise InputError(f"{label} = {_shown(raw)}{joined}{why}")
    where = source(name, raw)
    if where.startswith("dask.config"):
        raise InputError(f"{where}={_shown(raw)}{joined}{why}")
    raise InputError(f"{where}={_shown(raw)}{joined}{why} (setting {NAMESPACE}.{name})")


def dask_env_name(name: str) -> str:
    """Dask's environment variable of setting ``name``, e.g.
    ``DASK_OUTOFCORE__READ_RETRIES``."""
    return f"DASK_{NAMESPACE.upper()}__" + name.replace("-", "_").upper()


def source(name: str, raw: Any) -> str:
    """Where setting ``name``'s value ``raw`` came from, as a message names it: Dask's
    variable (``DASK_OUTOFCORE__READ_RETRIES``) or its alias (``OUTOFCORE_READ_RETRIES``)
    where one is set to it, else Dask's configuration (``dask.config's
    outofcore.read-retries``: ``dask.config.set``, :func:`set`, or a YAML file)."""
    dask_variable = dask_env_name(name)
    if dask_variable in os.environ:
        from_env = dask.config.collect_env({dask_variable: os.environ[dask_variable]})
        if _same(dask.config.get(f"{NAMESPACE}.{name}", None, config=from_env), raw):
            return dask_variable
    alias = env_name(name)
    if alias in os.environ and _same(os.environ[alias], raw):
        return alias
    return f"dask.config's {NAMESPACE}.{name}"


def _same(first: Any, second: Any) -> bool:
    """Whether two settings' values are one (NaN included: it is never equal to itself)."""
    return first is second or repr(first) == repr(second)


_SIZE = re.compile(r"^\s*[0-9]*\.?[0-9]+(?:e[0-9]+)?\s*[a-z]*\s*$", re.IGNORECASE)


#: The largest memory size taken (1 EiB): more than any machine has, less than overflows.
MAX_SIZE = 2**60


def parse_size(size: int | str, what: str = "memory") -> int:
    """Return the number of bytes in ``size`` (an int, or text like ``"512MiB"``).

    Units are dask's (:func:`dask.utils.parse_bytes`): ``kB``, ``MB``, ``GB``
    are powers of 1000, ``KiB``, ``MiB``, ``GiB`` powers of 1024.  ``what`` names it in
    messages (``"memory"``, ``"device memory"``).

    Raises
    ------
    InputError
        When the text is not a positive size with a known unit, at most :data:`MAX_SIZE`.
    """
    if isinstance(size, bool):
        raise InputError(f"{what} size must be bytes or text like '512MiB', got {size!r}")
    if isinstance(size, int):
        value = size
    else:
        try:
            text = str(size)
            if len(text) > 40 or not _SIZE.match(text):  # parse_bytes reads "" and "MiB"
                raise ValueError
            value = parse_bytes(text)
        except OverflowError:  # 1e400, 1e308TiB: infinity, not an int
            raise InputError(f"the {what} size {_shown(size)} is not finite") from None
        except ValueError:
            raise InputError(
                f"cannot read the size {_shown(size)}: use bytes or a number with a unit "
                "such as 512MiB, 2GiB or 1.5GB"
            ) from None
    if isinstance(size, str) and value > 0:
        _check_bare_number(size, what)
    if value <= 0:
        raise InputError(f"a {what} size must be positive, got {_shown(size)}")
    if value > MAX_SIZE:
        raise InputError(
            f"a {what} size must be at most 1 EiB ({MAX_SIZE} bytes), got {_shown(size)}"
        )
    return value


#: Text without a unit below this many bytes is taken for a forgotten unit.
BARE_NUMBER_BELOW = 2**20


def _check_bare_number(text: str, what: str) -> None:
    """Refuse a number without a unit that cannot be meant as bytes: a fraction of a byte
    (``"1.5"``), or under a MiB (``"64"``): the unit was forgotten; say which one."""
    number = text.strip()
    if not re.fullmatch(r"[0-9]*\.?[0-9]+(?:e[0-9]+)?", number, re.IGNORECASE):
        return  # it has a unit
    value = float(number)
    unit = "GiB" if value < 64 else "MiB"
    if value != int(value):
        raise InputError(
            f"the {what} size {number!r} is not a whole number of bytes: did you mean "
            f"{number}{unit}? (a size without a unit is bytes)"
        )
    if value < BARE_NUMBER_BELOW:
        raise InputError(
            f"the {what} size {number!r} is {int(value)} bytes: did you mean {number}{unit}? "
            "(a size without a unit is bytes; give the unit)"
        )


def _shown(value: Any) -> str:
    """``repr(value)``, shortened for a message."""
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def cache_dir() -> Path:
    """The user's cache folder for outofcore (the probe's figures, compiled kernels).

    ``$XDG_CACHE_HOME/outofcore`` where that is set; else ``~/Library/Caches/outofcore``
    on macOS, ``%LOCALAPPDATA%\\outofcore\\Cache`` on Windows, ``~/.cache/outofcore``
    elsewhere (the platformdirs conventions, without the dependency).
    """
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "outofcore"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "outofcore"
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "outofcore" / "Cache"
    return Path.home() / ".cache" / "outofcore"

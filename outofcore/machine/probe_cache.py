"""The probe's figures cached under the machine's identity.

The figures :func:`outofcore.machine.probe.probe` measures are cached in ``machine.json`` under
the user's cache folder (``$XDG_CACHE_HOME/outofcore``, ``~/.cache/outofcore``; see
:func:`cache_path`), keyed by the machine's identity (:func:`machine_identity`: CPU
model, cores, memory, the BLAS libraries and versions, numpy, SciPy, numcodecs and
Python): figures measured under another identity, or a file that cannot be read, are
never used, and the probe runs again.  ``outofcore plan --reprobe`` measures again
whatever the cache holds (the figures are the share of the machine the probe got: on a
machine others use, they change with the load).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from outofcore.backends import blas as blas_module
from outofcore.config import cache_dir
from outofcore.machine.probe import PROBE_VERSION, Figures, probe

#: The cache file's name in :func:`cache_dir`.
CACHE_NAME = "machine.json"


def machine_identity() -> dict[str, Any]:
    """What the figures belong to: a cache written under another identity is not used.

    The CPU model, logical and usable cores, a cgroup's CPU quota, physical memory, the
    BLAS libraries ``threadpoolctl`` sees once SciPy's BLAS (the one
    :mod:`outofcore.backends.blas` calls) and numpy's are loaded, with their versions and
    kernels, and the versions of numpy, SciPy, numcodecs (zstd) and Python.  No host
    name: two machines alike in all of these run at the same rates.
    """
    import numcodecs  # noqa: PLC0415
    import psutil  # noqa: PLC0415
    import scipy  # noqa: PLC0415
    from threadpoolctl import threadpool_info  # noqa: PLC0415

    blas_module.load()  # SciPy's BLAS, without scipy.linalg's imports (0.27 s)
    blas = sorted(
        {
            f"{info.get('internal_api')} {info.get('version')} {info.get('architecture')} "
            f"{Path(info.get('filepath') or '').name}"
            for info in threadpool_info()
            if info.get("user_api") == "blas"
        }
    )
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "probe_version": PROBE_VERSION,
        "cpu": _cpu_model(),
        "machine": platform.machine(),
        "system": platform.system(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable,
        "cpu_quota": _cpu_quota(),
        "memory_bytes": int(psutil.virtual_memory().total),
        "blas": blas,
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "numcodecs": numcodecs.__version__,
        "python": platform.python_version(),
    }


def _cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name (Linux's ``/proc/cpuinfo``), else what ``platform`` says."""
    with contextlib.suppress(OSError):
        for line in Path(cpuinfo).read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Hardware", "cpu model"):
                return value.strip()
    return platform.processor() or platform.machine() or "unknown"


def _cpu_quota(path: str = "/sys/fs/cgroup/cpu.max") -> str | None:
    """A cgroup v2 CPU quota (``"200000 100000"``: two cores' time), None where none is read."""
    with contextlib.suppress(OSError):
        return Path(path).read_text().strip()
    return None


def cache_path() -> Path:
    """The cache file of the probe's figures (:func:`cache_dir` / ``machine.json``)."""
    return cache_dir() / CACHE_NAME


@dataclass(frozen=True)
class Probed:
    """Figures for one thread count, whether they were measured now, and the cache file."""

    figures: Figures
    #: True: measured by this call; False: read from the cache.
    fresh: bool
    cache: Path
    #: The machine's identity the figures are cached under (:func:`machine_identity`).
    identity: dict[str, Any]
    #: Why the probe ran (None: the cache was used).
    why: str | None = None

    @property
    def load_per_core(self) -> float | None:
        """The load average the probe started under, per usable core (None: unknown)."""
        if self.figures.load is None:
            return None
        cores = self.identity.get("usable_cpus") or self.identity.get("logical_cpus") or 1
        return self.figures.load / cores

    @property
    def under_load(self) -> bool:
        """Whether other work held the cores when the probe started (a load average over
        :data:`BUSY_LOAD_PER_CORE` per core): its rates are then the share it got, often
        well below the machine's, and predictions from them too slow."""
        per_core = self.load_per_core
        return per_core is not None and per_core > BUSY_LOAD_PER_CORE


#: A load average per usable core above which a probe is said to be taken under load.
BUSY_LOAD_PER_CORE = 0.5


def machine_figures(
    threads: int,
    *,
    reprobe: bool = False,
    path: Path | None = None,
    identity: dict[str, Any] | None = None,
    measure: Callable[[int], Figures] | None = None,
) -> Probed:
    """This machine's figures for ``threads`` threads: cached, or measured and cached.

    The cache file (``path``, default :func:`cache_path`) is used only when it was
    written under this ``identity`` (default :func:`machine_identity`) and holds figures
    for ``threads``; else (a missing, unreadable or corrupt file, another identity,
    ``reprobe``) ``measure(threads)`` (default :func:`outofcore.machine.probe.probe`) runs and its
    figures replace the file's, or join them for another thread count of the same
    identity.
    A cache that cannot be written is not an error: the figures are still returned.
    """
    if threads < 1:
        raise ValueError(f"threads = {threads}: need at least 1")
    path = cache_path() if path is None else Path(path)
    identity = machine_identity() if identity is None else identity
    measure = probe if measure is None else measure
    entries, why = _read_cache(path, identity)
    key = str(threads)
    if not reprobe and key in entries:
        return Probed(entries[key], fresh=False, cache=path, identity=identity)
    if reprobe:
        why = "asked to measure again"
    elif why is None:
        why = f"no figures for {threads} thread(s) yet"
    figures = measure(threads)
    entries[key] = figures
    _write_cache(path, identity, entries)
    return Probed(figures, fresh=True, cache=path, identity=identity, why=why)


def cached_figures(
    threads: int, *, path: Path | None = None, identity: dict[str, Any] | None = None
) -> Figures | None:
    """This machine's cached figures for ``threads`` threads, or None: never measures
    (a job asks this for its own decisions, where a probe's seconds would be its cost)."""
    path = cache_path() if path is None else Path(path)
    entries, _ = _read_cache(path, machine_identity() if identity is None else identity)
    return entries.get(str(threads))


def _read_cache(path: Path, identity: dict[str, Any]) -> tuple[dict[str, Figures], str | None]:
    """The cache's figures by thread count, or none and why (missing, corrupt, another
    machine)."""
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return {}, "no cache yet"
    except (OSError, ValueError) as exc:
        return {}, f"the cache could not be read ({type(exc).__name__})"
    if not isinstance(document, dict) or not isinstance(document.get("figures"), dict):
        return {}, "the cache is not a probe's"
    if document.get("identity") != identity:
        return {}, "the cache was written under another machine identity"
    try:
        entries = {str(k): Figures.from_dict(v) for k, v in document["figures"].items()}
    except (TypeError, ValueError):
        return {}, "the cache holds figures that are not a probe's"
    return entries, None


def _write_cache(path: Path, identity: dict[str, Any], entries: dict[str, Figures]) -> None:
    """Write the cache atomically (a temporary file renamed over it); quietly give up on
    a folder that cannot be written."""
    document = {
        "identity": identity,
        "figures": {k: v.as_dict() for k, v in sorted(entries.items())},
    }
    partial = path.with_name(f"{path.name}.{uuid.uuid4().hex}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(document, indent=2) + "\n")
        os.replace(partial, path)
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink()

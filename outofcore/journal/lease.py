"""One job per output: a lease object with a heartbeat, kept in the output's journal folder.

``_outofcore/lease.json`` names the job that writes the output now: its job
id, host, process id (and that process's start time), when it took the lease
and its last heartbeat.  A background thread in the client refreshes the
heartbeat every ``timeout / 4`` seconds.  Another job may take the lease over
when the holder is dead:

* its heartbeat is older than the holder's ``timeout`` (any host; clocks are
  assumed to agree within a fraction of the timeout), or
* the holder ran on this host and its process is gone (or its pid now belongs
  to a process started later), which is known at once.

This module holds the lease document read back (:class:`LeaseInfo`), whether its
holder is alive, and the checks against it (:func:`check_not_held`,
:class:`OwnerCheck`); taking, renewing and giving back the lease is
:class:`outofcore.journal.leasing.Lease`'s.
"""

from __future__ import annotations

import logging
import math
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

import psutil

from outofcore import config
from outofcore.errors import LeaseError, LeaseLostError
from outofcore.journal.records import JOB_NAME, Journal, timestamp

LEASE_NAME = "lease.json"
#: The longest lease timeout, in seconds (a day): a lease read back with a longer one (or
#: a heartbeat further ahead of this clock than its timeout) cannot block an output for ever.
MAX_LEASE_TIMEOUT = 86400.0
#: Where outofcore says what is not the result (the command shows it on stderr).
logger = logging.getLogger("outofcore")


def lease_timeout(value: float | None = None) -> float:
    """The lease timeout: ``value`` (the keyword ``lease_timeout``), else the setting
    ``lease-timeout`` (60 s), both parsed and checked by :mod:`outofcore.config`.

    The setting is ``$OUTOFCORE_LEASE_TIMEOUT``; its range, above 0 and at most
    :data:`MAX_LEASE_TIMEOUT`, is the registry's.

    Raises
    ------
    InputError
        For a value that is not a number of seconds in range, naming it.
    """
    if value is None:
        return float(config.number("lease-timeout", positive=True))
    return float(config.checked("lease-timeout", value, "lease_timeout"))


def new_job_id() -> str:
    """A short random job id."""
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class LeaseInfo:
    """The content of a lease object."""

    job_id: str
    host: str
    pid: int
    pid_started: float
    acquired: float
    heartbeat: float
    timeout: float

    @classmethod
    def parse(cls, document: dict[str, Any] | None) -> LeaseInfo | None:
        """The lease in ``document``, or None when it is none or not one outofcore writes
        (a field missing, a time that is not a finite number, a timeout not above 0).

        A timeout above :data:`MAX_LEASE_TIMEOUT` reads as that maximum.
        """
        if document is None:
            return None
        try:
            times = [
                float(document.get("pid_started", 0.0)),
                float(document["acquired"]),
                float(document["heartbeat"]),
                float(document["timeout"]),
            ]
            if not all(map(math.isfinite, times)) or not times[3] > 0:
                return None
            return cls(
                job_id=str(document["job_id"]),
                host=str(document["host"]),
                pid=int(document["pid"]),
                pid_started=times[0],
                acquired=times[1],
                heartbeat=times[2],
                timeout=min(times[3], MAX_LEASE_TIMEOUT),
            )
        except (KeyError, TypeError, ValueError, OverflowError):
            return None

    def as_document(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "acquired_text": timestamp(self.acquired),
            "heartbeat_text": timestamp(self.heartbeat),
        }

    def dead_because(self, now: float | None = None) -> str | None:
        """Why this lease's holder is dead, or None while it is alive."""
        now = time.time() if now is None else now
        if self.host == socket.gethostname():
            gone = self._process_gone()
            if gone:
                return gone
        age = now - self.heartbeat
        if age > self.timeout:
            return f"its last heartbeat was {age:.0f} s ago (timeout {self.timeout:g} s)"
        if -age > self.timeout:  # a clock far ahead, or an edited lease: it never ages
            return (
                f"its last heartbeat is {-age:.0f} s in the future, more than its timeout "
                f"({self.timeout:g} s): a clock far ahead of this one, or an edited lease"
            )
        return None

    def _process_gone(self) -> str | None:
        """Why the holder's process (on this host) no longer runs, or None."""
        try:
            process = psutil.Process(self.pid)
            started = process.create_time()
            if process.status() == psutil.STATUS_ZOMBIE:
                return f"its process {self.pid} on this host has exited"
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return f"its process {self.pid} on this host has exited"
        except psutil.AccessDenied:  # another user's process: rely on the heartbeat
            return None
        if self.pid_started and abs(started - self.pid_started) > 1.0:
            return f"its process {self.pid} on this host has exited (the pid was reused)"
        return None

    def describe(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        age = now - self.heartbeat
        beat = f"{age:.0f} s ago" if age >= 0 else f"{-age:.0f} s in the future"
        return (
            f"job {self.job_id} (host {self.host}, pid {self.pid}, started "
            f"{timestamp(self.acquired)}, last heartbeat {beat})"
        )


def read_lease(journal: Journal) -> LeaseInfo | None:
    """The output's lease, or None when there is none."""
    return LeaseInfo.parse(journal.get_json(journal.key(LEASE_NAME)))


@dataclass(frozen=True)
class OwnerCheck:
    """Raises :class:`LeaseLostError` unless job ``job_id`` still holds the output's lease.

    A tile task calls it before each write and before recording the tile.  A
    task of a job whose client died keeps running on a shared cluster until
    it ends; if a rerun (``--overwrite`` after an input changed, say) took the
    output over meanwhile, the old task stops instead of writing old data over
    the new job's tiles.  What remains is check-then-write: a write that
    starts within a moment of the takeover can still land (docs/cluster.md).

    The lease must also be alive: a lease of this job whose heartbeat is older than its
    timeout (the client could not renew it) may be taken over by now, so the task stops.
    A read of the lease that fails (a store's bad minute) is retried with backoff for up
    to ``timeout`` seconds before the error is raised.
    """

    journal: Journal
    job_id: str
    #: Seconds to keep retrying a read of the lease that fails (the lease timeout).
    timeout: float = 60.0

    def __call__(self) -> None:
        holder = self._read()
        if holder is None:
            gone = lease_gone(self.journal)
            raise LeaseLostError(
                f"the lease of job {self.job_id} disappeared from its output ({gone}); "
                "its tasks stop without writing"
            )
        if holder.job_id != self.job_id:
            raise LeaseLostError(
                f"job {self.job_id} no longer holds the lease of its output "
                f"({holder.describe()} does); its tasks stop without writing"
            )
        age = time.time() - holder.heartbeat
        if age > holder.timeout:
            raise LeaseLostError(
                f"the lease of job {self.job_id} expired: its last heartbeat was {age:.0f} s "
                f"ago (timeout {holder.timeout:g} s), so another job may take the output "
                "over; its tasks stop without writing"
            )

    def _read(self) -> LeaseInfo | None:
        """The lease, retrying failed reads (not a missing lease) for ``timeout`` seconds."""
        give_up = time.monotonic() + self.timeout
        delay = min(0.25, self.timeout / 16)
        while True:
            try:
                return read_lease(self.journal)
            except Exception:
                if time.monotonic() + delay > give_up:
                    raise
                logger.debug("reading the lease failed; retry in %g s", delay, exc_info=True)
                time.sleep(delay)
                delay = min(2 * delay, self.timeout / 4)


def lease_gone(journal: Journal) -> str:
    """What disappeared with the lease of ``journal``'s output: the whole journal
    (``job.json`` too) or the lease only."""
    try:
        job = journal.get_bytes(journal.key(JOB_NAME))
    except Exception:  # noqa: BLE001 (only words for the message)
        return "it was deleted"
    if job is None:
        return "the output's journal is gone too: the output was deleted or its store emptied"
    return "it was deleted; the output's journal is still there"


def check_not_held(journal: Journal, where: str) -> None:
    """Raise :class:`LeaseError` when a live job holds the lease of the output ``where``."""
    holder = read_lease(journal)
    if holder is not None and holder.dead_because() is None:
        raise LeaseError(held_refusal(holder, where))


def held_refusal(holder: LeaseInfo, where: str) -> str:
    """The refusal of a job whose output ``where`` the live ``holder`` writes."""
    return (
        f"the output {where!r} is being written by another live {holder.describe()}; "
        f"wait for it to finish, or stop it (its lease expires {holder.timeout:g} s after its "
        f"last heartbeat), then rerun. `outofcore status {where}` shows its progress"
    )

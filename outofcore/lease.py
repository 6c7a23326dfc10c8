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

The lease is created only if absent (an exclusive link on local stores,
obstore's ``put(mode="create")`` on S3, GCS and Azure: :mod:`outofcore.stores`),
so two jobs starting together cannot both get it.  Taking over a dead lease
replaces it only if it is unchanged since it was read: through obstore one
compare-and-swap put (``If-Match: <ETag>``), so of two jobs taking over one
dead lease exactly one wins; elsewhere it is deleted if its bytes are
unchanged (check, then delete) and created afresh the same way.  A heartbeat
through obstore rewrites the lease only if it is still the one this job read,
so it never overwrites a takeover.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

import psutil

from outofcore import config
from outofcore.errors import JobFailedError
from outofcore.journal import Journal, timestamp

LEASE_NAME = "lease.json"
#: The longest lease timeout, in seconds (a day): a lease read back with a longer one (or
#: a heartbeat further ahead of this clock than its timeout) cannot block an output for ever.
MAX_LEASE_TIMEOUT = 86400.0
#: Where outofcore says what is not the result (the command shows it on stderr).
logger = logging.getLogger("outofcore")


class LeaseError(JobFailedError, RuntimeError):
    """Another live job holds the output's lease (wait for it, then rerun)."""


class LeaseLostError(LeaseError):
    """A task's job no longer holds the output's lease: the task must not write."""


def lease_timeout(value: float | None = None) -> float:
    """The lease timeout: ``value``, else the setting ``lease-timeout`` (60 s).

    The setting is ``$OUTOFCORE_LEASE_TIMEOUT`` (:mod:`outofcore.config`).
    """
    if value is None:
        value = config.number("lease-timeout", positive=True)
    if not 0 < value <= MAX_LEASE_TIMEOUT:
        raise LeaseError(
            f"lease timeout = {value}: need a positive number of seconds, at most "
            f"{MAX_LEASE_TIMEOUT:g} (a day)"
        )
    return float(value)


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
    """

    journal: Journal
    job_id: str

    def __call__(self) -> None:
        holder = read_lease(self.journal)
        if holder is None or holder.job_id != self.job_id:
            who = holder.describe() if holder is not None else "no job"
            raise LeaseLostError(
                f"job {self.job_id} no longer holds the lease of its output ({who} does); "
                "its tasks stop without writing"
            )


def check_not_held(journal: Journal, where: str) -> None:
    """Raise :class:`LeaseError` when a live job holds the lease of the output ``where``."""
    holder = read_lease(journal)
    if holder is not None and holder.dead_because() is None:
        raise LeaseError(_refusal(holder, where))


def _refusal(holder: LeaseInfo, where: str) -> str:
    return (
        f"the output {where!r} is being written by another live {holder.describe()}; "
        f"wait for it to finish, or stop it (its lease expires {holder.timeout:g} s after its "
        f"last heartbeat), then rerun. `outofcore status {where}` shows its progress"
    )


class Lease:
    """The lease of one job on one output; use as a context manager.

    Parameters
    ----------
    journal
        The output's journal (the lease lives in its folder).
    where
        How messages name the output.
    job_id
        This job's id.
    timeout
        Seconds without a heartbeat after which others may take the lease.
    """

    def __init__(self, journal: Journal, where: str, job_id: str, timeout: float) -> None:
        self.journal = journal
        self.where = where
        self.job_id = job_id
        self.timeout = timeout
        self.key = journal.key(LEASE_NAME)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._held = False
        self._pid_started = psutil.Process().create_time()
        self._acquired = 0.0

    def _info(self) -> LeaseInfo:
        return LeaseInfo(
            job_id=self.job_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            pid_started=self._pid_started,
            acquired=self._acquired,
            heartbeat=time.time(),
            timeout=self.timeout,
        )

    def acquire(self) -> None:
        """Take the lease, or raise :class:`LeaseError` naming the live job that holds it."""
        self._acquired = time.time()
        replaced = ""  # the dead job whose lease this one replaced
        for _ in range(3):
            self.journal.put_json(self.key, self._info().as_document(), only_if_absent=True)
            document, raw, version = self.journal.get_versioned(self.key)
            holder = LeaseInfo.parse(document)
            if holder is not None and holder.job_id == self.job_id:
                if replaced:
                    logger.warning("took over the output %r from %s", self.where, replaced)
                self._held = True
                self._start_heartbeat()
                return
            if holder is not None:
                dead = holder.dead_because()
                if dead is None:
                    raise LeaseError(_refusal(holder, self.where))
                replaced = f"{holder.describe()}, which is dead: {dead}"
            # Dead (or unreadable): replace it only if nobody replaced it meanwhile.
            if version is not None:  # compare-and-swap: one of the jobs taking over wins
                self.journal.put_json(self.key, self._info().as_document(), if_version=version)
            elif self.journal.get_bytes(self.key) == raw:
                self.journal.delete(self.key)
        raise LeaseError(
            f"could not take the lease of {self.where!r}: other jobs keep replacing it"
        )

    def _start_heartbeat(self) -> None:
        self._thread = threading.Thread(
            target=self._beat, name=f"outofcore-lease-{self.job_id}", daemon=True
        )
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.timeout / 4):
            try:
                document, _, version = self.journal.get_versioned(self.key)
                holder = LeaseInfo.parse(document)
                if holder is None or holder.job_id != self.job_id:
                    self._warn_lost(holder)
                    return
                beat = self._info().as_document()
                if self.journal.put_json(self.key, beat, if_version=version) is False:
                    self._warn_lost(read_lease(self.journal))  # replaced since it was read
                    return
            except OSError as exc:  # a transient store error: try again next beat
                logger.warning(
                    "the lease heartbeat of %r failed (next try in %g s): %s",
                    self.where,
                    self.timeout / 4,
                    exc,
                )

    def _warn_lost(self, holder: LeaseInfo | None) -> None:
        who = holder.describe() if holder else "nobody (it was deleted)"
        logger.warning("the lease of %r is now held by %s", self.where, who)

    def release(self) -> None:
        """Stop the heartbeat and delete the lease if it is still this job's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._held:
            holder = read_lease(self.journal)
            if holder is not None and holder.job_id == self.job_id:
                self.journal.delete(self.key)
            self._held = False
            self.journal.remove_empty_folders()  # a job that failed before writing leaves nothing

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

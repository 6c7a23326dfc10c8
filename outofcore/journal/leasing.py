"""Taking, keeping and giving back an output's lease (:mod:`outofcore.journal.lease`): the job's
side, with its heartbeat thread.

The lease is created only if absent (an exclusive link on local stores,
obstore's ``put(mode="create")`` on S3, GCS and Azure: :mod:`outofcore.storage.storeops`),
so two jobs starting together cannot both get it.  Taking over a dead lease
replaces it only if it is unchanged since it was read: through obstore one
compare-and-swap put (``If-Match: <ETag>``), so of two jobs taking over one
dead lease exactly one wins; elsewhere it is deleted if its bytes are
unchanged (check, then delete) and created afresh the same way.  A heartbeat
through obstore rewrites the lease only if it is still the one this job read,
so it never overwrites a takeover.

The heartbeat survives a store's bad minutes: every error of the store's client is
retried with backoff for as long as the lease cannot have expired, and a
compare-and-swap refused because of this job's own earlier write (its reply lost
after the store applied it) is recognised by the job id it stored.  When the lease is
truly lost (another job holds it, it disappeared, or it could not be renewed in
time) the loss is said at ERROR level and the job stops: its executor cancels the
tasks, the job fails naming why, and a task still running finds the lease expired or
taken at its next :class:`outofcore.journal.lease.OwnerCheck` and writes nothing.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil

from outofcore.journal.lease import (
    LEASE_NAME,
    LeaseError,
    LeaseInfo,
    LeaseLostError,
    held_refusal,
    lease_gone,
    logger,
    read_lease,
)
from outofcore.journal.records import Journal


class Lease:
    """The lease of one job on one output; use as a context manager.

    A background thread renews the heartbeat every ``timeout / 4`` seconds.  Every
    error the store's client raises (``OSError``, obstore's and botocore's own errors,
    a request past its deadline) is retried with backoff, said once per run of failures
    (a warning), for as long as the lease cannot have expired: until a margin before
    ``timeout`` seconds after the last heartbeat that landed.  A compare-and-swap that
    fails because the lease was rewritten since it was read is read again: when it
    names this job, the rewrite was this job's own (a reply lost after the store applied
    it) and the heartbeat goes on.  The lease is lost when another job holds it, when it
    disappeared, or when it could not be renewed in time: that is said at ERROR level,
    :attr:`lost` holds the error, and ``on_lost`` callbacks run (the job stops its
    tasks: :func:`outofcore.api.run_job`), so the job fails instead of writing on.

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

    #: Reads that find no lease before it counts as gone (a store may answer 404 once).
    ABSENT_READS = 3

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
        #: The heartbeat (seconds since the epoch) of the last lease write that landed.
        self._last_beat = 0.0
        self._absent = 0
        self._renewing: threading.Thread | None = None
        #: Why this job lost the lease (raise it), or None while it holds it.
        self.lost: LeaseLostError | None = None
        self._on_lost: list[Callable[[LeaseLostError], None]] = []

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
                self._last_beat = holder.heartbeat
                self._start_heartbeat()
                return
            if holder is not None:
                dead = holder.dead_because()
                if dead is None:
                    raise LeaseError(held_refusal(holder, self.where))
                replaced = f"{holder.describe()}, which is dead: {dead}"
            # Dead (or unreadable): replace it only if nobody replaced it meanwhile.
            if version is not None:  # compare-and-swap: one of the jobs taking over wins
                self.journal.put_json(self.key, self._info().as_document(), if_version=version)
            elif self.journal.get_bytes(self.key) == raw:
                self.journal.delete(self.key)
        raise LeaseError(
            f"could not take the lease of {self.where!r}: other jobs keep replacing it"
        )

    def on_lost(self, callback: Callable[[LeaseLostError], None]) -> None:
        """Call ``callback(error)`` (from the heartbeat's thread) when the lease is lost;
        at once if it is lost already."""
        self._on_lost.append(callback)
        if self.lost is not None:
            callback(self.lost)

    def check(self) -> None:
        """Raise :attr:`lost` when this job lost the lease."""
        if self.lost is not None:
            raise self.lost

    def _start_heartbeat(self) -> None:
        self._thread = threading.Thread(
            target=self._beat, name=f"outofcore-lease-{self.job_id}", daemon=True
        )
        self._thread.start()

    def _beat(self) -> None:
        """Renew the lease until released or lost; never ends without saying why."""
        interval = self.timeout / 4
        first_retry = min(0.5, interval / 8)
        #: Give up this long before the lease may expire (others may take it over then).
        margin = interval / 2
        wait, failures, last_error = interval, 0, ""
        try:
            while not self._stop.wait(wait):
                left = self._last_beat + self.timeout - margin - time.time()
                if left <= 0:
                    self._lose(self._expired(failures, last_error or "no try in time"))
                    return
                try:
                    lost = self._renew_within(left)
                except Exception as exc:  # every error of the store's client: retry
                    last_error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:500]
                    delay = min(interval, first_retry * 2**failures)
                    failures += 1
                    left = self._last_beat + self.timeout - margin - time.time()
                    if left <= 0:
                        self._lose(self._expired(failures, last_error))
                        return
                    if failures == 1:
                        logger.warning(
                            "the lease heartbeat of %r failed (next try in %g s; the lease "
                            "expires in %.0f s): %s",
                            self.where,
                            delay,
                            left + margin,
                            last_error,
                        )
                    wait = min(delay, left)
                    continue
                if lost is not None:
                    self._lose(lost)
                    return
                if failures:
                    logger.info(
                        "the lease heartbeat of %r works again after %d failure(s)",
                        self.where,
                        failures,
                    )
                wait, failures = interval, 0
        except BaseException as exc:  # never die silently: say it, and stop the job
            self._lose(
                LeaseLostError(
                    f"the lease heartbeat of {self.where!r} stopped ({type(exc).__name__}: "
                    f"{exc}); the job stops writing, rerun to resume"
                )
            )
            raise

    def _renew_within(self, seconds: float) -> LeaseLostError | None:
        """:meth:`_renew` in a thread of its own, waited on for at most ``seconds``: a
        request that hangs must not keep the job writing past the lease's expiry."""
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["lost"] = self._renew()
            except BaseException as exc:  # noqa: BLE001 (handed to the heartbeat)
                box["error"] = exc

        worker = threading.Thread(target=run, name=f"outofcore-renew-{self.job_id}", daemon=True)
        self._renewing = worker
        worker.start()
        give_up = time.monotonic() + seconds
        while worker.is_alive():
            left = give_up - time.monotonic()
            if self._stop.is_set():  # released meanwhile: the outcome no longer matters
                return None
            if left <= 0:
                raise TimeoutError(f"renewing the lease took more than {seconds:.1f} s")
            worker.join(min(left, 0.1))
        if "error" in box:
            raise box["error"]
        return box["lost"]

    def _renew(self) -> LeaseLostError | None:
        """Write a new heartbeat if the lease is still this job's; the loss, if it is not.

        Raises the store's errors (the heartbeat retries them).
        """
        document, raw, version = self.journal.get_versioned(self.key)
        holder = self._holder(document, raw)
        if holder is None or holder.job_id != self.job_id:
            return self._loss(holder)
        beat = self._info()
        written = self.journal.put_json(self.key, beat.as_document(), if_version=version)
        if written is False:  # rewritten since it was read: by another job, or by this one
            document, raw, _ = self.journal.get_versioned(self.key)
            holder = self._holder(document, raw)
            if holder is None or holder.job_id != self.job_id:
                return self._loss(holder)
            # This job's own write, whose reply was lost after the store applied it.
            logger.debug("the lease of %r was rewritten by this job itself", self.where)
            self._last_beat = max(self._last_beat, holder.heartbeat)
            return None
        self._last_beat = beat.heartbeat
        return None

    def _holder(self, document: dict[str, Any] | None, raw: bytes | None) -> LeaseInfo | None:
        """The lease read, or None once it was missing :data:`ABSENT_READS` reads in a row
        (a missing lease read fewer times raises, so the heartbeat tries again)."""
        if raw is None:
            self._absent += 1
            if self._absent < self.ABSENT_READS:
                raise FileNotFoundError(f"the lease {self.key} reads as missing")
            return None
        self._absent = 0
        return LeaseInfo.parse(document)

    def _loss(self, holder: LeaseInfo | None) -> LeaseLostError:
        if holder is not None:
            return LeaseLostError(
                f"the lease of {self.where!r} is now held by {holder.describe()}; this job "
                "stops writing"
            )
        gone = lease_gone(self.journal)
        return LeaseLostError(
            f"the lease of {self.where!r} disappeared ({gone}); this job stops writing"
        )

    def _expired(self, failures: int, last_error: str) -> LeaseLostError:
        age = time.time() - self._last_beat
        return LeaseLostError(
            f"could not renew the lease of {self.where!r} for {age:.0f} s (timeout "
            f"{self.timeout:g} s; {failures} tries, last: {last_error}): another job may "
            "take the output over, so this job stops writing; rerun to resume"
        )

    def _lose(self, error: LeaseLostError) -> None:
        """Say the lease is lost (ERROR), keep the error and tell the job."""
        if self.lost is not None:
            return
        self.lost = error
        # A job that is told raises it as its error: the command then says it once, as that.
        logger.error("%s", error, extra={"repeated_as_error": bool(self._on_lost)})
        for callback in self._on_lost:
            try:
                callback(error)
            except Exception:  # noqa: BLE001 (one failed callback must not hide the loss)
                logger.exception("stopping the job after the lease was lost failed")

    def release(self) -> None:
        """Stop the heartbeat and delete the lease if it is still this job's.

        A renewal still in flight is waited on for up to a heartbeat interval (so that it
        does not land after the delete).  A store that fails the delete leaves the lease,
        said as a warning: it expires ``timeout`` seconds after its last heartbeat.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._renewing is not None:
            self._renewing.join(self.timeout / 4)
        if not self._held:
            return
        self._held = False
        try:
            holder = read_lease(self.journal)
            if holder is not None and holder.job_id == self.job_id:
                self.journal.delete(self.key)
            self.journal.remove_empty_folders()  # a job that failed before writing leaves nothing
        except Exception as exc:  # noqa: BLE001 (the job's own outcome matters more)
            logger.warning(
                "could not delete the lease of %r (%s: %s); it expires %g s after its last "
                "heartbeat",
                self.where,
                type(exc).__name__,
                " ".join(str(exc).split())[:300],
                self.timeout,
            )

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

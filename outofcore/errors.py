"""Exceptions raised by outofcore; all derive from :class:`OutOfCoreError`.

They live at the bottom layer (:mod:`outofcore.errors` imports nothing of outofcore) so
the plan (``outofcore.planner``) and the Dask runtime (``outofcore.runtime``) can raise
them.  Each names the offending values.

Each class says what kind of failure it is by its exit status (the ``outofcore``
command exits with it; docs/cli.md): :data:`BAD_INPUT` for a command or input refused
before any work started (fix the command), :data:`JOB_FAILED` for a job that started
and failed (:class:`JobFailedError`: rerun the same command to retry or resume).
"""

from __future__ import annotations

#: Exit status of a command or input refused before any work started.
BAD_INPUT = 2
#: Exit status of a job that started and failed; rerunning it resumes.
JOB_FAILED = 3


class OutOfCoreError(Exception):
    """Base class of every error outofcore raises on purpose."""

    #: What the ``outofcore`` command exits with for this error.
    exit_status = BAD_INPUT


class JobFailedError(OutOfCoreError):
    """A job that started failed (reading, writing, its lease, an input changed, the
    cluster); what it finished is kept, and rerunning the same command resumes it."""

    exit_status = JOB_FAILED


class InputError(OutOfCoreError, ValueError):
    """An input or output array is missing, malformed or incompatible, or an option's
    value is not one the call takes: a ``ValueError``, as numpy raises for a bad value."""


class InputTypeError(InputError, TypeError):
    """An argument of a type the call does not take: an option's value of the wrong type
    (a str for ``workers``, a number for ``backend``, a str for a flag), a dtype numpy does
    not know, an array of a dtype no product takes (strings, objects, datetimes).  A
    ``TypeError`` where numpy raises one (``np.dtype("nope")``, ``np.matmul`` of strings),
    and an :class:`InputError` (exit status 2), refused before any work."""


class OptionError(InputTypeError):
    """A keyword that is no option of the call: a ``TypeError``, as Python's for an
    unexpected keyword argument (and an :class:`InputError`, refused before any work)."""


class BudgetError(OutOfCoreError, ValueError):
    """The memory budget cannot hold even the smallest tile the chunking allows."""


class BackendError(OutOfCoreError, ValueError, RuntimeError):
    """The requested compute backend is unknown or not usable here: a ``ValueError``, as
    numpy's for an option's bad value (and a ``RuntimeError``, as it was)."""


class ClusterError(OutOfCoreError, RuntimeError):
    """The Dask scheduler could not be reached or has no workers (before any work)."""


class ClusterLostError(JobFailedError, ClusterError):
    """The cluster failed while a job ran: its scheduler or workers went away."""


class OutputExistsError(InputError):
    """The output exists and ``overwrite`` was not asked for."""


class InputChangedError(JobFailedError, RuntimeError):
    """An input was rewritten while a job read it; the output is left incomplete."""


class OutputWriteError(JobFailedError, OSError):
    """Writing the output (or its journal) failed, e.g. its disk is full."""


class ResumeError(OutputExistsError):
    """The output holds the journal of a different job (other inputs or parameters)."""


class OutputChangedError(JobFailedError, RuntimeError):
    """The output's own metadata changed while the job wrote it: it is not marked complete."""


class LeaseError(JobFailedError, RuntimeError):
    """Another live job holds the output's lease (wait for it, then rerun)."""


class LeaseLostError(LeaseError):
    """A task's job no longer holds the output's lease: the task must not write."""


class ReadError(JobFailedError, OSError):
    """Reading an input region kept failing after every retry."""


class FallbackError(InputError):
    """A part of a computation outofcore would hand to dask.array (which runs it without
    the memory budget), refused because the ``fallback`` setting is ``"error"``; nothing
    is written."""


class FallbackWarning(UserWarning):
    """A part of a computation outofcore cannot run out of core is handed to dask.array,
    which computes it without the memory budget: the warning names the part and why
    (``fallback="error"``, or the ``outofcore.fallback`` setting, makes it a
    :class:`FallbackError`; ``"allow"`` keeps it silent)."""

"""Exceptions raised by outofcore; all derive from :class:`OutOfCoreError`.

They live at the bottom layer (``scheduler``, which imports nothing from
``outofcore``) so the plan and the cluster code can raise them;
:mod:`outofcore.errors` re-exports every one.  Each names the offending values.
"""

from __future__ import annotations


class OutOfCoreError(Exception):
    """Base class of every error outofcore raises on purpose."""


class InputError(OutOfCoreError, ValueError):
    """An input or output array is missing, malformed or incompatible."""


class BudgetError(OutOfCoreError, ValueError):
    """The memory budget cannot hold even the smallest tile the chunking allows."""


class BackendError(OutOfCoreError, RuntimeError):
    """The requested compute backend is unknown or not usable here."""


class ClusterError(OutOfCoreError, RuntimeError):
    """The Dask scheduler could not be reached or has no workers."""


class OutputExistsError(InputError):
    """The output exists and ``overwrite`` was not asked for."""


class InputChangedError(OutOfCoreError, RuntimeError):
    """An input was rewritten while a job read it; the output is left incomplete."""


class OutputWriteError(OutOfCoreError, OSError):
    """Writing the output (or its journal) failed, e.g. its disk is full."""

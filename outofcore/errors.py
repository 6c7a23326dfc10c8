"""The exceptions outofcore raises (defined in :mod:`scheduler.errors`, the bottom layer)."""

from scheduler.errors import (
    BackendError,
    BudgetError,
    ClusterError,
    InputChangedError,
    InputError,
    OutOfCoreError,
    OutputExistsError,
    OutputWriteError,
)

__all__ = [
    "BackendError",
    "BudgetError",
    "ClusterError",
    "InputChangedError",
    "InputError",
    "OutOfCoreError",
    "OutputExistsError",
    "OutputWriteError",
]

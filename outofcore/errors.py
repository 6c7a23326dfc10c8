"""The exceptions outofcore raises (defined in :mod:`scheduler.errors`, the bottom layer)."""

from scheduler.errors import (
    BAD_INPUT,
    JOB_FAILED,
    BackendError,
    BudgetError,
    ClusterError,
    ClusterLostError,
    InputChangedError,
    InputError,
    JobFailedError,
    OptionError,
    OutOfCoreError,
    OutputExistsError,
    OutputWriteError,
)

__all__ = [
    "BAD_INPUT",
    "JOB_FAILED",
    "BackendError",
    "BudgetError",
    "ClusterError",
    "ClusterLostError",
    "InputChangedError",
    "InputError",
    "JobFailedError",
    "OptionError",
    "OutOfCoreError",
    "OutputExistsError",
    "OutputWriteError",
]

"""Test configuration: numba's CUDA simulator, hypothesis profiles (CI runs 'ci'), fixtures.

The CUDA tests (tests/cuda) run on numba's CUDA simulator, which must be chosen
before anything imports ``numba.cuda``: this file is loaded before any test
module, so it sets ``NUMBA_ENABLE_CUDASIM=1`` here, for the whole session and
the processes it starts, unless the variable is already set.  On a GPU node,
``NUMBA_ENABLE_CUDASIM=0 python -m pytest tests/cuda`` runs them on the chip.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # before anything imports numba.cuda

import contextlib

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture
def outofcore_settings():
    """Override ``outofcore.config`` settings in this process until the test ends.

    ``outofcore_settings(read_retries=0)``; later calls override earlier ones.
    Worker processes read their own environment instead (``OUTOFCORE_*``).
    """
    from outofcore import config  # noqa: PLC0415

    with contextlib.ExitStack() as stack:

        def apply(**values: object) -> None:
            stack.enter_context(config.set({k.replace("_", "-"): v for k, v in values.items()}))

        yield apply

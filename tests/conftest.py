"""Test configuration: hypothesis profiles (CI runs the 'ci' profile)."""

from __future__ import annotations

import contextlib
import os

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

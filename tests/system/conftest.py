"""Fixtures of the whole-system tests."""

from __future__ import annotations

import pytest
import yaml

from tests.helpers import ROOT


@pytest.fixture(scope="module")
def compose() -> dict:
    """docker-compose.yml, parsed."""
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())

"""Fixtures every test package shares; the builders themselves are in tests/support.py."""

from __future__ import annotations

import pytest

from tests.support import make_case


@pytest.fixture
def build_case():
    return make_case

"""The analysis tests' shared run: five_trials, read once per module."""

from __future__ import annotations

import pytest

from specperf.schemas import RunResult
from tests.support import synthetic_five_trials


@pytest.fixture(scope="module")
def five_trials() -> RunResult:
    """A synthetic run with per-trial samples (tests.support.synthetic_five_trials)."""
    return synthetic_five_trials()

"""The pytest plugin (specperf.plugin) as this very session loads it: the options it
registers. Its collection and runs: tests/integration/test_collection.py, tests/e2e/."""

from __future__ import annotations

import pytest


def test_option_is_registered_by_the_plugin(pytestconfig: pytest.Config) -> None:
    # This very session runs with specperf's plugin (the root conftest): unset, the
    # profile decides (tests/unit/engine/test_contention.py::
    # test_option_overrides_the_profiles_limit).
    assert pytestconfig.getoption("--perf-max-outside-cores") is None

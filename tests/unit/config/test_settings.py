"""Environment variables (specperf.config.settings): a bad value is one line naming the
variable, its value and what it takes. Through pytest: tests/integration/test_bad_profiles.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specperf.config import settings as specperf_settings
from specperf.config.settings import SettingsError


@pytest.mark.parametrize("value", ["abc", "-1", "-0.5", "nan", "inf", "1e999", "5ms"])
def test_bad_proxy_delay_names_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("SPECPERF_PROXY_DELAY_MS", value)
    with pytest.raises(SettingsError) as err:
        specperf_settings.current()
    msg = str(err.value)
    assert f"SPECPERF_PROXY_DELAY_MS={value!r}" in msg and "fix:" in msg
    assert "\n" not in msg


@settings(max_examples=50, deadline=None)
@given(ms=st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_any_finite_delay_from_zero_is_taken(ms: float) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECPERF_PROXY_DELAY_MS", repr(ms))
        assert specperf_settings.current().proxy_delay_ms == ms


def test_empty_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECPERF_PROXY_DELAY_MS", "")
    assert specperf_settings.current().proxy_delay_ms is None


@pytest.mark.parametrize(("variable", "fix"), [
    ("SPECPERF_PROXY_DELAY_GROWTH_MS", "fix: set it to milliseconds per second ≥ 0"),
    ("SPECPERF_PROXY_STRETCH", "fix: set it to a fraction ≥ 0 of each stream's decode time"),
])
@pytest.mark.parametrize("value", ["abc", "-1", "-0.1", "nan", "inf", "25%"])
def test_bad_proxy_setting_names_the_variable(monkeypatch: pytest.MonkeyPatch, variable: str,
                                              fix: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as err:
        specperf_settings.current()
    msg = str(err.value)
    assert f"{variable}={value!r}" in msg and fix in msg


def test_a_delay_growth_alone_turns_the_proxy_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECPERF_PROXY_DELAY_MS", raising=False)
    monkeypatch.setenv("SPECPERF_PROXY_DELAY_GROWTH_MS", "2.5")
    env = specperf_settings.current()
    assert env.fault_injection and env.proxy_delay_growth_ms == 2.5 and env.proxy_delay_ms is None


def test_a_stretch_alone_turns_the_proxy_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECPERF_PROXY_DELAY_MS", raising=False)
    monkeypatch.delenv("SPECPERF_PROXY_DELAY_GROWTH_MS", raising=False)
    monkeypatch.setenv("SPECPERF_PROXY_STRETCH", "0.25")
    env = specperf_settings.current()
    assert env.fault_injection and env.proxy_stretch == 0.25 and env.proxy_delay_ms is None

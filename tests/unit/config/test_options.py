"""The values of specperf's pytest options (specperf.config.options): refused at parse
time, so pytest ends with a usage error naming the option. Through pytest:
tests/integration/test_bad_profiles.py::test_bad_options_are_usage_errors."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specperf.config.options import parse_cores, parse_repeats, parse_retry_cap, parse_wait


@pytest.mark.parametrize(("text", "says"), [
    ("0", "0 trials per case measures nothing"), ("-1", "-1 trials"), ("abc", "'abc'"),
    ("1.5", "'1.5'"), ("", "''"),
])
def test_repeats_below_one_or_not_a_number_are_refused(text: str, says: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="fix:") as err:
        parse_repeats(text)
    assert says in str(err.value)


def test_repeats_from_one_pass() -> None:
    assert parse_repeats("1") == 1 and parse_repeats("12") == 12


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "infinity", "x", ""])
def test_max_outside_cores_must_be_a_finite_number(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="fix: a number of cores"):
        parse_cores(text)


@pytest.mark.parametrize("text", ["0.25", "0", "-1", "3"])
def test_max_outside_cores_finite_values_pass(text: str) -> None:
    assert parse_cores(text) == float(text)


@pytest.mark.parametrize(("text", "says"), [
    ("-1", "is negative"), ("-0.5", "is negative"), ("nan", "not a finite number"),
    ("inf", "not a finite number"), ("a minute", "not a number"), ("", "not a number"),
])
def test_busy_wait_must_be_finite_seconds_from_zero(text: str, says: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="fix: the most seconds") as err:
        parse_wait(text)
    assert says in str(err.value)


@pytest.mark.parametrize("text", ["0", "60", "0.5", "3600"])
def test_busy_wait_seconds_pass(text: str) -> None:
    assert parse_wait(text) == float(text)


@settings(max_examples=100, deadline=None)
@given(x=st.floats(max_value=-1e-9) | st.sampled_from([float("nan"), float("inf")]))
def test_any_negative_or_non_finite_wait_is_refused(x: float) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_wait(repr(x))


@pytest.mark.parametrize("text", ["0", "1", "-5", "2.5", "", "perf_tests", "1e3"])
def test_retry_cap_edge_values_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_retry_cap(text)


@pytest.mark.parametrize(("text", "cap"), [("2", 2), ("12", 12), ("off", None), ("OFF", None)])
def test_retry_cap_is_a_number_of_trials_or_off(text: str, cap: int | None) -> None:
    # Retrying is on by default (#13); =off is how a run asks for the repeats alone.
    assert parse_retry_cap(text) == cap


@settings(max_examples=100, deadline=None)
@given(n=st.integers(max_value=0))
def test_any_repeats_below_one_is_refused(n: int) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_repeats(str(n))

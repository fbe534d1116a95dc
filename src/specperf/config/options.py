"""The values of specperf's pytest options (registered by specperf.plugin), parsed with
their bounds: argparse calls these as ``type=``; the plugin keeps a refused value and reports
it as bad input (exit 2) naming the option — ``--perf-repeats: … — fix: …``.

Here, in config, with the profile's own bounds, because they are the same rules: a
number that would silently turn a gate or a measurement off is refused, never read as
something else.
"""

from __future__ import annotations

import argparse
import math


def parse_repeats(text: str) -> int:
    """--perf-repeats: trials per case, at least 1."""
    # 0 used to fall back to the profile's repeats and -1 ran no trial at all: both are
    # refused rather than silently meaning something else.
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number of trials per case, got {text!r} — fix: e.g. "
            "--perf-repeats 5") from None
    if n < 1:
        raise argparse.ArgumentTypeError(
            f"{n} trials per case measures nothing — fix: at least 1 (e.g. --perf-repeats 5), "
            "or leave it out for the profile's repeats")
    return n


def _finite(text: str, fix: str, *, minimum: float | None = None) -> float:
    """``text`` as a finite number (≥ ``minimum`` when given), else an ArgumentTypeError
    that says what is wrong and ``fix``."""
    try:
        x = float(text)
    except ValueError:
        x, bad = math.nan, "not a number"
    else:
        bad = "not a finite number" if not math.isfinite(x) else "negative"
    if not math.isfinite(x) or (minimum is not None and x < minimum):
        raise argparse.ArgumentTypeError(f"{text!r} is {bad} — fix: {fix}")
    return x


def parse_cores(text: str) -> float:
    """--perf-max-outside-cores: any finite number (≤ 0 turns the contention guard off)."""
    # nan compares false with everything: the guard would never fire, silently.
    return _finite(text, "a number of cores, e.g. 0.25; 0 turns the guard off")


def parse_wait(text: str) -> float:
    """--perf-busy-wait SECONDS: a finite number ≥ 0 (0 = don't wait for a quiet machine)."""
    # inf would wait for ever on a machine that stays busy; nan would never wait, silently.
    return _finite(text, "the most seconds a trial waits for other processes' CPU load to "
                         "fall, e.g. 60; 0 does not wait", minimum=0.0)


def parse_retry_cap(text: str) -> int | None:
    """--perf-retry-inconclusive=CAP: the most trials a case may get, at least 2 (that it
    exceeds the repeats is checked against the profile, by PerfSession.check_options);
    ``off``: no extra trials (None)."""
    if text.strip().lower() == "off":
        return None
    try:
        cap = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of trials or off, got {text!r}: write "
            "--perf-retry-inconclusive=CAP (or =off), or put the bare option after the test "
            "paths") from None
    if cap < 2:
        raise argparse.ArgumentTypeError(f"the cap is the most trials per case, at least 2, "
                                         f"not {cap} (=off turns the extra trials off)")
    return cap

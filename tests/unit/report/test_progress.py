"""The run's progress display: plain lines for logs, a rich live region on a terminal, and
the live region living with pytest's capture and reporting (pytest in a real pty)."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

import specperf
from specperf.report.progress import (
    PlainProgress,
    RichProgress,
    RunProgress,
    choose_progress,
    make_progress,
)
from specperf.schemas import Case

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
C1 = Case(config_id="draft-k2", concurrency=1)
C4 = Case(config_id="draft-k2", concurrency=4)


def case_line(case: Case) -> str:
    return f"specperf: {case.id}: 8 requests, median TTFT 160.0 ms, TPOT 35.00 ms, 20.0 tok/s"


def measure_a_config(view: RunProgress, clock: list[float] | None = None) -> None:
    """The events PerfSession.measure sends for one spec config at c=1 (paired with
    no-spec trials) and c=4, two rounds, after starting its server."""
    view.server_starting("draft-k2", "specperf: starting vLLM for draft-k2 on http://x (log y)")
    if clock is not None:
        clock[0] += 41.0
    view.server_ready("draft-k2", "specperf: draft-k2 ready in 41.0 s (vLLM 0.32.0)")
    view.case_started(C1, trials=4, requests=8)
    view.case_started(C4, trials=2, requests=12)
    for _ in range(2):
        for case, paired_too in ((C1, True), (C4, False)):
            for paired in (True, False) if paired_too else (False,):
                view.trial_started(case, paired)
                for i in range(8 if case is C1 else 12):
                    view.request_done(ok=i != 0)
                view.trial_done()
    view.case_done(C1, case_line(C1))
    view.case_done(C4, case_line(C4))


def test_plain_prints_one_line_per_case_and_per_server_event() -> None:
    lines: list[str] = []
    view = PlainProgress(lines.append)
    view.set_cases_total(5)
    measure_a_config(view)
    view.server_failed("ngram-k3", [Case(config_id="ngram-k3", concurrency=1)])
    view.close()
    assert lines == [
        "specperf: starting vLLM for draft-k2 on http://x (log y)",
        "specperf: draft-k2 ready in 41.0 s (vLLM 0.32.0)",
        case_line(C1),
        case_line(C4),
    ]


def test_rich_shows_the_server_clock_trials_and_requests() -> None:
    buf = StringIO()
    now = [100.0]
    lines: list[str] = []
    prepared: list[bool] = []
    view = RichProgress(Console(file=buf, force_terminal=True, width=80), lines.append,
                        prepare=lambda: prepared.append(True), get_time=lambda: now[0])
    view.set_cases_total(3)
    assert not view.live and not buf.getvalue()  # nothing drawn before anything runs

    view.server_starting("nospec", "specperf: starting vLLM for nospec")
    assert view.live and prepared == [True]
    now[0] += 37.2
    view.refresh()
    screen = ANSI.sub("", buf.getvalue())
    assert "starting vLLM for nospec" in screen and "37 s" in screen
    assert "0/3 cases" in screen
    # The line came before the live region existed: it went the plain way.
    assert lines == ["specperf: starting vLLM for nospec"]

    view.server_ready("nospec", "specperf: nospec ready in 37.2 s")
    view.case_started(C1, trials=4, requests=8)
    view.case_started(C4, trials=2, requests=12)
    view.trial_started(C1, paired=True)
    for ok in (True, True, False):
        view.request_done(ok)
    now[0] += 5.0
    view.refresh()
    screen = ANSI.sub("", buf.getvalue())
    assert "specperf: nospec ready in 37.2 s" in screen  # printed above the live region
    assert "trial 1/4, paired no-spec" in screen
    assert "3/8 requests, 1 failed" in screen and "5 s" in screen
    assert "0/4 trials" in screen and "0/2 trials" in screen

    view.trial_done()
    view.trial_started(C1)
    view.refresh()
    screen = ANSI.sub("", buf.getvalue())
    assert "1/4 trials" in screen and "trial 2/4" in screen and "0/8 requests" in screen

    view.case_done(C1, case_line(C1))
    view.refresh()
    screen = ANSI.sub("", buf.getvalue())
    assert case_line(C1) in screen and "1/3 cases" in screen

    view.pause()
    assert not view.live
    assert buf.getvalue().endswith("\x1b[2K")  # the live region erased itself
    view.line("specperf: stopped vLLM for nospec")
    assert lines[-1] == "specperf: stopped vLLM for nospec"  # paused: the plain way again
    drawn = len(buf.getvalue())
    view.close()
    view.trial_started(C4)  # after close nothing draws any more
    assert len(buf.getvalue()) == drawn


def test_rich_counts_each_case_once_whether_measured_or_failed() -> None:
    buf = StringIO()
    view = RichProgress(Console(file=buf, force_terminal=True, width=80), print,
                        get_time=lambda: 0.0)
    view.set_cases_total(4)
    measure_a_config(view, [0.0])
    view.server_starting("ngram-k3", "specperf: starting vLLM for ngram-k3")
    assert "2/4 cases" in ANSI.sub("", buf.getvalue())
    ngram = [Case(config_id="ngram-k3", concurrency=c) for c in (1, 4)]
    view.server_failed("ngram-k3", ngram)
    view.case_failed(ngram[0])  # a later test of the same config fails it again
    view.server_failed("draft-k2", [C1, C4])  # a measured config whose server died later
    view.refresh()
    screen = ANSI.sub("", buf.getvalue())
    assert "4/4 cases" in screen and "5/4" not in screen and "6/4" not in screen
    view.close()


def test_rich_extends_a_case_that_gets_more_trials() -> None:
    """--perf-retry-inconclusive adds trials after the planned ones: the case's row grows
    instead of counting past its total."""
    buf = StringIO()
    view = RichProgress(Console(file=buf, force_terminal=True, width=80), print,
                        get_time=lambda: 0.0)
    view.set_cases_total(1)
    view.server_ready("draft-k2", "specperf: draft-k2 ready")
    view.case_started(C4, trials=1, requests=12)
    view.trial_started(C4)
    view.trial_done()
    view.case_more_trials(C4, 2)
    view.trial_started(C4)
    view.trial_done()
    view.refresh()
    screen = ANSI.sub("", buf.getvalue())
    assert "2/3 trials" in screen and "trial 2/3" in screen
    PlainProgress(print).case_more_trials(C4, 2)  # the plain view has nothing to draw
    view.close()


def test_auto_is_plain_off_a_terminal_and_rich_on_one() -> None:
    assert choose_progress("auto", StringIO(), {}) == "plain"
    assert choose_progress("auto", None, {}) == "plain"
    assert choose_progress("rich", StringIO(), {}) == "rich"
    lines: list[str] = []
    assert isinstance(make_progress("auto", StringIO(), lines.append, environ={}), PlainProgress)
    # Asked for rich on a stream with no descriptor to draw on: plain, not a crash.
    assert isinstance(make_progress("rich", StringIO(), lines.append, environ={}),
                      PlainProgress)
    with pytest.raises(ValueError, match="--perf-progress 'fancy'"):
        choose_progress("fancy", StringIO())

    master, slave = os.openpty()
    try:
        with os.fdopen(slave, "w", encoding="utf-8") as tty:
            assert choose_progress("auto", tty, {"TERM": "xterm"}) == "rich"
            assert choose_progress("auto", tty, {"TERM": "dumb"}) == "plain"
            assert choose_progress("auto", tty, {"NO_COLOR": "1"}) == "plain"
            assert choose_progress("auto", tty, {}, terminal=False) == "plain"  # -p no:terminal
            assert choose_progress("plain", tty, {}) == "plain"
            view = make_progress("auto", tty, lines.append, environ={})
            assert isinstance(view, RichProgress)
            view.close()
    finally:
        os.close(master)


# --------------------------------------------------------------------------- in pytest

DEMO_TESTS = '''
from specperf.schemas import Case

CASE = Case(config_id="demo", concurrency=1)


def run(view):
    view.server_starting("demo", "specperf: starting vLLM for demo")
    view.server_ready("demo", "specperf: demo ready in 1.0 s")
    view.case_started(CASE, 2, 3)
    view.trial_started(CASE, paired=True)
    view.request_done()


def test_measured(perf):
    print("output the test printed")
    run(perf.view)
    view = perf.view
    for _ in range(2):
        view.request_done()
    view.trial_done()
    view.trial_started(CASE)
    for _ in range(3):
        view.request_done()
    view.trial_done()
    view.case_done(CASE, "specperf: demo-c1: 3 requests, the case line")


def test_fails_mid_trial(perf):
    print("printed before failing")
    run(perf.view)
    raise AssertionError("boom mid-trial")
'''


def run_pytest_in_a_pty(tmp_path: Path, tests: str, *args: str,
                        env_extra: dict[str, str] | None = None) -> tuple[int, str]:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["specperf.plugin"]\n')
    (tmp_path / "test_demo.py").write_text(tests)
    env = {k: v for k, v in os.environ.items()
           if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "PYTEST_ADDOPTS", "CI")}
    env.update({"TERM": "xterm-256color", "SPECPERF_PROFILE": "cpu-tiny",
                "PYTHONPATH": str(Path(specperf.__file__).resolve().parents[1]),
                **(env_extra or {})})
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_demo.py", *args],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=120), b"".join(chunks).decode("utf-8", "replace")


def test_live_display_inside_pytest_on_a_terminal(tmp_path: Path) -> None:
    code, out = run_pytest_in_a_pty(tmp_path, DEMO_TESTS)
    assert code == 1, out
    text = ANSI.sub("", out)
    # The live region was drawn: the server row, the paired trial with its requests.
    assert "starting vLLM for demo" in text
    assert "trial 1/2, paired no-spec" in text and "1/3 requests" in text
    assert text.count("specperf: demo-c1: 3 requests, the case line") == 1
    # Erased before pytest reported: the last thing drawn before the summary is the
    # erase, and the cursor it hid is back.
    last_erase = out.rindex("\x1b[2K")
    assert out.index("short test summary info") > last_erase
    assert out.rindex("\x1b[?25h") > out.rindex("\x1b[?25l")
    # pytest's capture still owns the tests' output: shown only for the failing test.
    assert "output the test printed" not in text
    assert "printed before failing" in text.split("Captured stdout call", 1)[1]
    assert "1 failed, 1 passed" in text


def test_ctrl_c_mid_trial_leaves_a_clean_terminal(tmp_path: Path) -> None:
    tests = DEMO_TESTS.replace('raise AssertionError("boom mid-trial")',
                               "raise KeyboardInterrupt")
    code, out = run_pytest_in_a_pty(tmp_path, tests)
    assert code == 130, out  # interrupted (specperf.config.exits)
    assert "trial 1/2, paired no-spec" in ANSI.sub("", out)
    assert out.rindex("KeyboardInterrupt") > out.rindex("\x1b[2K")
    assert out.rindex("\x1b[?25h") > out.rindex("\x1b[?25l")


def test_plain_inside_pytest_on_a_terminal(tmp_path: Path) -> None:
    code, out = run_pytest_in_a_pty(tmp_path, DEMO_TESTS, "--perf-progress", "plain")
    assert code == 1, out
    assert "\x1b[?25l" not in out  # no live region: the cursor was never hidden
    text = ANSI.sub("", out)
    assert "paired no-spec" not in text and "requests" in text
    assert text.count("specperf: demo-c1: 3 requests, the case line") == 1
    assert text.count("specperf: starting vLLM for demo") == 2  # once per test

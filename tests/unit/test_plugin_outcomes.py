"""How the plugin shows a test's checks: FAIL fails it, undecided checks (inconclusive,
machine busy) mark it so pytest reports it in its own category, not as a plain pass."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from specperf import plugin
from specperf.config.exits import Exit
from specperf.engine import gpu_lock
from specperf.schemas import Case, GateCheck

CASE = Case(config_id="draft-k2", concurrency=1)


def _check(outcome: str, message: str = "m") -> GateCheck:
    return GateCheck(case=CASE, gate="latency", metric="TPOT", higher_is_better=False,
                     outcome=outcome, message=message)  # type: ignore[arg-type]


def _item() -> SimpleNamespace:
    return SimpleNamespace(user_properties=[])


@pytest.mark.parametrize(("outcomes", "mark"), [
    (["pass", "inconclusive"], "inconclusive"),
    (["inconclusive", "busy", "pass"], "busy"),
    (["pass", "skip"], None),
])
def test_undecided_checks_mark_the_item(outcomes: list[str], mark: str | None) -> None:
    item = _item()
    plugin.gate_outcome([_check(o) for o in outcomes], item)  # type: ignore[arg-type]
    assert dict(item.user_properties).get(plugin.OUTCOME_PROPERTY) == mark


def test_a_failed_check_fails_the_test_with_its_message() -> None:
    with pytest.raises(pytest.fail.Exception, match="TPOT rose"):
        plugin.gate_outcome([_check("busy"), _check("fail", "TPOT rose 30 %")], _item())  # type: ignore[arg-type]


def test_all_skipped_skips() -> None:
    with pytest.raises(pytest.skip.Exception, match="no baseline"):
        plugin.gate_outcome([_check("skip", "no baseline")], _item())  # type: ignore[arg-type]


@pytest.mark.parametrize(("outcome", "word"), [("inconclusive", "INCONCLUSIVE"),
                                               ("busy", "NOT MEASURED: MACHINE BUSY")])
def test_pytest_reports_the_undecided_category(outcome: str, word: str) -> None:
    report = SimpleNamespace(when="call", passed=True,
                             user_properties=[(plugin.OUTCOME_PROPERTY, outcome)])
    status = plugin.pytest_report_teststatus(report, None)  # type: ignore[arg-type]
    assert status is not None and status[2] == word
    plain = SimpleNamespace(when="call", passed=True, user_properties=[])
    assert plugin.pytest_report_teststatus(plain, None) is None  # type: ignore[arg-type]
    failed = SimpleNamespace(when="call", passed=False,
                             user_properties=[(plugin.OUTCOME_PROPERTY, outcome)])
    assert plugin.pytest_report_teststatus(failed, None) is None  # type: ignore[arg-type]


def test_an_unusable_gpu_lock_ends_the_run_as_bad_input_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "gpu.lock"
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(pytest.exit.Exception) as err, plugin.engine_errors():
        gpu_lock.acquire(path)
    assert err.value.returncode == int(Exit.BAD_INPUT)
    assert str(path) in err.value.msg and "\n" not in err.value.msg

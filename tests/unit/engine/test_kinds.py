"""The registry of test kinds (specperf.engine.kinds): one list in run order, one lookup
of a perf test's kind name, and no kind name tested anywhere else in the package."""

from __future__ import annotations

import ast

import pytest

from specperf.analysis.judge.kinds import CASE_KINDS
from specperf.engine.kinds import (
    KINDS,
    TimeScenarioKind,
    WorkloadScenarioKind,
    kind_named,
    kind_names,
)
from tests.support import REPO_ROOT

SRC = REPO_ROOT / "src" / "specperf"

#: Comparisons the scan finds that are not a test kind's dispatch: (module, comparison).
NOT_TEST_KINDS = {
    # A run file's kind (specperf-run, specperf-baseline).
    ("store/kept_runs.py", "kind in _KINDS"),
    # The sample kind of a gain (requests or trials), which shares a word with a kind.
    ("analysis/gain.py", "kind == 'requests'"),
    # The workload scenario runner's own routine per scenario (prefix caching, the
    # segmented pool): ScenarioRunner.evaluate is handed the kind's name.
    ("engine/scenarios.py", "kind == 'prefix_cache'"),
    ("engine/scenarios.py", "kind in SEGMENTED_KINDS"),
    ("engine/segmented_scenarios.py", "kind == 'context_length'"),
}


def test_every_kind_once_in_run_order() -> None:
    assert kind_names() == ("requests", "acceptance", "tpot_gain", "latency", "throughput",
                            "prefix_cache", "context_length", "categories", "soak", "ramp")
    assert KINDS[:len(CASE_KINDS)] == CASE_KINDS
    assert [k.name for k in KINDS if isinstance(k, WorkloadScenarioKind)] == [
        "prefix_cache", "context_length", "categories"]
    assert [k.name for k in KINDS if isinstance(k, TimeScenarioKind)] == ["soak", "ramp"]
    # Every kind says why a profile may have none of its cases.
    assert all(k.no_cases for k in KINDS)


def test_a_name_is_looked_up_once_and_an_unknown_one_names_the_known() -> None:
    assert all(kind_named(k.name) is k for k in KINDS)
    with pytest.raises(ValueError, match="unknown perf case kind 'latancy'") as err:
        kind_named("latancy")
    assert str(kind_names()) in str(err.value)


def kind_name_tests(source: str, shown: str) -> list[str]:
    """Comparisons in ``source`` (==, !=, in, not in) of a variable called ``kind`` or a
    ``*_KINDS`` tuple with a test kind's name or a ``*_KINDS`` tuple: dispatch on kind
    names, which the kind object answers instead."""
    names = set(kind_names())

    def kindish(node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and (node.id == "kind" or node.id.endswith("_KINDS"))

    def named(node: ast.expr) -> bool:
        strings = {n.value for n in ast.walk(node)
                   if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        return bool(strings & names) or kindish(node)

    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if any(kindish(a) and named(b) for a in sides for b in sides if a is not b):
            found.append(f"{shown}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_dispatches_on_a_kind_name() -> None:
    hits = {(path.relative_to(SRC).as_posix(), hit)
            for path in sorted(SRC.rglob("*.py"))
            for hit in kind_name_tests(path.read_text(encoding="utf-8"), "")}
    seen = {(module, hit.split(": ", 1)[1]) for module, hit in hits}
    assert NOT_TEST_KINDS <= seen, f"stale exceptions: {sorted(NOT_TEST_KINDS - seen)}"
    found = sorted(f"{module}{hit}" for module, hit in hits
                   if (module, hit.split(": ", 1)[1]) not in NOT_TEST_KINDS)
    assert not found, "ask the kind object (specperf.engine.kinds) instead:\n" + "\n".join(found)


def test_the_scan_catches_a_dispatch_on_a_kind_name() -> None:
    source = ("def f(kind, tiny):\n    if kind == 'soak':\n        pass\n"
              "    if tiny.kind == 'eagle' or kind == 'means':\n        pass\n"
              "    return kind in TIME_SCENARIO_KINDS\n")
    assert kind_name_tests(source, "probe.py") == [
        "probe.py:2: kind == 'soak'", "probe.py:6: kind in TIME_SCENARIO_KINDS"]

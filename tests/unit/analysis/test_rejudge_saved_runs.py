"""Every saved run file in the repository re-judges to the verdicts and reasons it was
given before the judgement moved into :mod:`specperf.analysis.judge` (#44).

The golden file ``tests/data/golden/rejudged.json.gz`` was written by this module's
``write_golden`` with the code of main at e632472 (compare.py's hold rules applied in call
order), before any of them moved. Each entry is one comparison ``compare_runs`` makes of a
saved run: against the kept baseline of its experiment when the folder (or an ancestor
within ``benchmarks/results/<day>/<experiment>``) holds a ``kept-baseline/`` directory (the
newest kept run is the baseline, all of them its history, as the experiments judged them),
else against every other result file of the same folder (or ``run.json`` of a sibling run
folder) with the same profile and hardware (the A/B pairs of a bisection, the nightlies of
tests/data). Files of a schema this reader has no migration for are passed over.

A deliberate change of a verdict or reason rewrites the golden file in the same commit,
with the reason in the commit message:

    python -m tests.unit.analysis.test_rejudge_saved_runs --write
"""

from __future__ import annotations

import functools
import gzip
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from specperf.analysis.judge.exit_status import run_exit_status
from specperf.analysis.judge.rules import HOLD_RULES
from specperf.analysis.judge.run import compare_runs
from specperf.schemas import Baseline, RunResult
from specperf.store.files import _AnyResult
from tests.support import REPO_ROOT

GOLDEN = REPO_ROOT / "tests" / "data" / "golden" / "rejudged.json.gz"
ROOTS = (REPO_ROOT / "benchmarks" / "results", REPO_ROOT / "tests" / "data")


@functools.cache
def _result_files() -> tuple[tuple[Path, RunResult | Baseline], ...]:
    """Every run and baseline file under ROOTS, gzipped ones too (the experiments keep their
    run files as ``*.run.json.gz``); other JSON (one_verdict summaries, bisections) is not
    a result and is passed over."""
    out = []
    for root in ROOTS:
        for path in sorted(root.rglob("*")):
            if "golden" in path.parts or not path.name.endswith((".json", ".json.gz")):
                continue
            raw = path.read_bytes()
            if path.suffix == ".gz":
                raw = gzip.decompress(raw)
            data = json.loads(raw)
            if not isinstance(data, dict) or data.get("kind") not in ("specperf-run",
                                                                   "specperf-baseline"):
                continue
            try:  # as store.files.load_result reads one (it takes no gzip)
                out.append((path, _AnyResult.model_validate(data).root))
            except ValidationError:
                # Written before a schema change this reader has no migration for; the
                # golden file names them (UNREADABLE), so a newly unreadable one fails.
                continue
    return tuple(out)


def _kept_baseline(path: Path) -> Path | None:
    """The ``kept-baseline/`` directory of the experiment ``path`` belongs to, if any."""
    results = REPO_ROOT / "benchmarks" / "results"
    for folder in path.parents:
        if folder == results or results not in folder.parents:
            return None
        kept = folder / "kept-baseline"
        if kept.is_dir() and kept not in path.parents:
            return kept
    return None


def _beside(path: Path, other: Path) -> bool:
    """Files of one experiment: in one folder, or ``run.json`` of sibling run folders (the
    A and B runs of a bisection step, each in its own run directory)."""
    return other.parent == path.parent or (
        path.name == other.name == "run.json" and other.parent.parent == path.parent.parent)


def _rel(path: Path) -> str:
    return path.relative_to(REPO_ROOT).as_posix()


def comparisons() -> Iterator[tuple[str, RunResult, RunResult | Baseline, list[Any]]]:
    """(key, run, baseline, history) for every comparison the golden file holds."""
    files = _result_files()
    loaded = dict(files)
    for path, result in files:
        if not isinstance(result, RunResult) or "kept-baseline" in path.parts:
            continue
        kept = _kept_baseline(path)
        if kept is not None:
            history = sorted((p for p in loaded if p.parent == kept), key=lambda p: p.name)
            if history:
                base = history[-1]
                yield (f"{_rel(path)} | {_rel(base)} +{len(history)} kept", result,
                       loaded[base], [loaded[p] for p in history])
            continue
        for other, against in files:
            if (other == path or not _beside(path, other)
                    or against.provenance.profile_name != result.provenance.profile_name
                    or against.provenance.hardware_id != result.provenance.hardware_id):
                continue
            yield f"{_rel(path)} | {_rel(other)}", result, against, []


def judged(run: RunResult, baseline: RunResult | Baseline, history: list[Any]) -> dict[str, Any]:
    """What the golden file keeps of one comparison: every verdict, reason, outcome and
    hold rule (held_by), the notes and refusals, and the exit status."""
    cmp = compare_runs(run, baseline, history=history)
    return {
        "exit": int(run_exit_status([], cmp)),
        "refusals": cmp.refusals,
        "notes": cmp.notes,
        "cases": {cc.case.id: {"notes": cc.notes, "busy": cc.busy, "metrics": [
            [m.metric, m.verdict.value, cc.outcome(m), m.reason, m.held_by]
            for m in cc.comparisons]}
            for cc in cmp.cases},
    }


def write_golden() -> int:
    golden = {key: judged(run, base, hist) for key, run, base, hist in comparisons()}
    GOLDEN.write_bytes(gzip.compress(json.dumps(golden, indent=0, sort_keys=True).encode(),
                                     mtime=0))
    print(f"wrote {len(golden)} comparisons to {_rel(GOLDEN)}")
    return 0


def _golden() -> dict[str, Any]:
    return json.loads(gzip.decompress(GOLDEN.read_bytes()))


def test_every_saved_run_file_is_in_the_golden_file() -> None:
    keys = [key for key, *_ in comparisons()]
    assert len(keys) == len(set(keys))
    assert set(keys) == set(_golden()), "a saved run was added or removed: --write"


@functools.cache
def _by_key() -> dict[str, tuple[RunResult, RunResult | Baseline, list[Any]]]:
    return {key: (run, base, hist) for key, run, base, hist in comparisons()}


@pytest.mark.parametrize("key", sorted(_golden()) if GOLDEN.exists() else [])
def test_saved_run_rejudges_as_before(key: str) -> None:
    assert key in _by_key(), f"{key}: no longer made — a saved run was moved or removed"
    assert judged(*_by_key()[key]) == _golden()[key]


#: The words each hold rule appends to a reason (specperf.analysis.judge.rules), as they
#: stood in the reasons before the rules were named.
HOLD_WORDS = {
    "fresh_start_disagreed": "; not confirmed on a fresh server: ",
    "sampled_acceptance": "; not decided: sampled at temperature > 0",
    "unproven_baseline": "(min_baseline_runs) a timing change needs",
    "beside_reference": "; but the machine itself ran slower",
    "bracket_drift": "no-spec block",
    "not_confirmed": "; flagged on the first server start, ",
}


def test_every_held_comparison_of_the_saved_runs_names_its_rule() -> None:
    held = 0
    for run, base, hist in _by_key().values():
        for _, m in compare_runs(run, base, history=hist).all():
            words = [name for name, text in HOLD_WORDS.items() if text in m.reason]
            assert m.held_by == (words[0] if words else None), m.reason
            held += m.held_by is not None
    assert held  # the saved runs hold some (unproven_baseline, at least)


#: What the arithmetic's own INCONCLUSIVE says (specperf.analysis.stats, budget, gain): an
#: interval across the limit, a change beyond it without significance, too few samples, a
#: budget band, an undefined ratio. Anything else INCONCLUSIVE must name its hold rule.
ARITHMETIC_WORDS = (
    "which crosses the",                       # stats "straddles", the gain's floor
    "so the call is withheld",                 # stats "beyond_not_significant"
    "but a verdict needs at least",            # stats: too few samples
    "too few samples for an interval",         # gain
    "so a relative change is undefined",       # stats, budget: a baseline of 0
    "the interval is undefined",               # stats
    "inside the budget but beyond the",        # budget
    "which could hide a change beyond it",     # budget: the kept runs' spread
)


def test_every_inconclusive_of_the_saved_runs_is_held_by_a_rule_or_the_arithmetic() -> None:
    """Over every re-judged saved run (the golden file, which the tests above keep equal to
    judging them now): each INCONCLUSIVE comparison — and so each INCONCLUSIVE check the
    pytest run makes of it (gate.from_comparison copies held_by) — either names the hold
    rule that made it (held_by) or says why its own numbers cannot decide."""
    seen = {"held": 0, "arithmetic": 0}
    for key, judged_run in _golden().items():
        for case_id, case in judged_run["cases"].items():
            for metric, verdict, outcome, reason, held_by in case["metrics"]:
                if "inconclusive" not in (verdict, outcome):
                    continue
                if held_by is not None:
                    assert held_by in {r.name for r in HOLD_RULES}, (key, case_id, metric)
                    seen["held"] += 1
                    continue
                assert any(words in reason for words in ARITHMETIC_WORDS), (
                    f"{key} {case_id} {metric}: INCONCLUSIVE with no hold rule and no "
                    f"reason of the arithmetic's: {reason}")
                seen["arithmetic"] += 1
    assert seen["held"] and seen["arithmetic"], seen


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.unit.analysis.test_rejudge_saved_runs --write")
    sys.exit(write_golden())

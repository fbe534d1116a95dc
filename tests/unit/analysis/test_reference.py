"""Which baseline and kept runs a run is judged with, and when kept runs agree enough to
be promoted (specperf.analysis.reference), on real cpu-ci nightlies (tests/data/nightlies)."""

from __future__ import annotations

import pytest

from specperf.analysis.reference import choose_reference, disagreements, matching_kept
from specperf.config.rules import CompareRules
from specperf.schemas import Baseline, RunResult
from tests.support import NIGHTLIES, load_run

RULES = CompareRules(min_baseline_runs=2)


@pytest.fixture(scope="module")
def nights() -> list[RunResult]:
    return [load_run(p) for p in NIGHTLIES]


def _labelled(nights: list[RunResult], numbers: range | list[int]) -> list[tuple[str, RunResult]]:
    return [(f"night-{n}", nights[n - 1]) for n in numbers]


def _as_baseline(run: RunResult, provisional: str | None = None) -> Baseline:
    prov = run.provenance.model_copy(update={"provisional": provisional})
    return Baseline(provenance=prov, cases=run.cases, paired_nospec=run.paired_nospec)


def test_the_newest_older_green_runs_are_pooled(nights: list[RunResult]) -> None:
    everything = _labelled(nights, range(1, 9))
    usable, left_out = matching_kept(nights[7], everything)
    # Night 7 confirmed a regression (its own checks failed): never a kept run.
    assert [lb for lb, _ in usable] == [f"night-{n}" for n in (6, 5, 4, 3, 2, 1)]
    assert len(left_out) == 1 and left_out[0].startswith("night-7")
    assert "its own checks failed" in left_out[0]
    # Only older runs: re-judging night 4 does not pool the nights after it.
    assert [lb for lb, _ in matching_kept(nights[3], everything)[0]] == [
        "night-3", "night-2", "night-1"]


def test_another_vllm_or_profile_is_not_pooled(nights: list[RunResult]) -> None:
    other = nights[5].model_copy(update={"provenance": nights[5].provenance.model_copy(
        update={"vllm_version": "0.33.0"})})
    changed = nights[4].model_copy(update={"provenance": nights[4].provenance.model_copy(
        update={"profile_hash": "0" * 16})})
    usable, _ = matching_kept(nights[7], [("v033", other), ("hash", changed),
                                          *_labelled(nights, [4])])
    assert [lb for lb, _ in usable] == ["night-4"]


def test_from_n_kept_runs_on_they_are_the_reference(nights: list[RunResult]) -> None:
    ref = choose_reference(nights[6], baseline=None, baseline_label=None, history=[],
                           kept=_labelled(nights, range(1, 9)), rules=RULES)
    assert ref.stage == "kept-runs"
    assert ref.pooled == [f"night-{n}" for n in (6, 5, 4, 3, 2)]  # N-4 … N
    assert ref.baseline is nights[5] and ref.history == [nights[n - 1] for n in (5, 4, 3, 2)]
    assert "judged against the newest 5 kept runs" in ref.notes[0]


def test_without_a_baseline_the_first_night_has_nothing(nights: list[RunResult]) -> None:
    ref = choose_reference(nights[0], baseline=None, baseline_label=None, history=[],
                           kept=_labelled(nights, range(1, 9)), rules=RULES)
    assert ref.stage == "nothing" and ref.baseline is None
    assert "nothing to compare with" in ref.notes[0]
    # The second night has one kept run: it is judged against it (min_baseline_runs then
    # keeps a timing change INCONCLUSIVE).
    ref = choose_reference(nights[1], baseline=None, baseline_label=None, history=[],
                           kept=_labelled(nights, range(1, 9)), rules=RULES)
    assert ref.stage == "kept-runs" and ref.pooled == ["night-1"]


def test_a_provisional_baseline_until_n_real_runs_exist(nights: list[RunResult]) -> None:
    published = _as_baseline(nights[0], provisional="published measurement")
    kept = _labelled(nights, range(2, 9))
    early = choose_reference(nights[3], baseline=published, baseline_label="a100.json",
                             history=[], kept=kept, rules=RULES)
    assert early.stage == "provisional" and early.baseline is published
    assert early.notes[0].startswith("comparing means against published figures")
    assert "2 of the 5 real kept runs" in early.notes[0]
    late = choose_reference(nights[6], baseline=published, baseline_label="a100.json",
                            history=[], kept=kept, rules=RULES)
    assert late.stage == "kept-runs" and late.baseline is nights[5]
    assert any("provisional baseline a100.json" in n and "no longer used" in n
               for n in late.notes)


def test_a_measured_baseline_pools_kept_runs_as_its_history(nights: list[RunResult]) -> None:
    base = _as_baseline(nights[1])
    history = [_as_baseline(nights[0])]
    ref = choose_reference(nights[4], baseline=base, baseline_label="b.json", history=history,
                           kept=_labelled(nights, [3, 4]), rules=RULES)
    assert ref.stage == "baseline" and ref.baseline is base
    assert ref.pooled == ["night-4", "night-3", "b.json history"]
    assert "4 of the 5 matching kept runs" in ref.notes[0]
    # The same night kept twice (a promoted night is in the history too) counts once.
    twice = choose_reference(nights[4], baseline=base, baseline_label="b.json",
                             history=[*history, _as_baseline(nights[2])],
                             kept=_labelled(nights, [3]), rules=RULES)
    assert len(twice.history) == 2


def test_quiet_nights_agree(nights: list[RunResult]) -> None:
    assert disagreements(_labelled(nights, [6, 5, 4, 3, 2]), RULES) == []


def test_a_regression_night_disagrees(nights: list[RunResult]) -> None:
    problems = disagreements(_labelled(nights, [7, 6, 5, 4, 3]), RULES)
    assert any("night-7" in p and "its own checks failed" in p for p in problems)
    # Without its own verdict (a night judged against published means only), the others
    # still show it: it regresses against them.
    unjudged = nights[6].model_copy(update={"checks": []})
    problems = disagreements([("night-7", unjudged), *_labelled(nights, [6, 5, 4, 3])], RULES)
    assert problems and all("draft-k2" in p for p in problems), problems
    assert any(p.startswith("night-7") and "regressed" in p for p in problems)


def test_spread_beyond_the_budget_disagrees(nights: list[RunResult]) -> None:
    tight = CompareRules(min_baseline_runs=2, budget_tolerance={"tpot": 0.01})
    problems = disagreements(_labelled(nights, [6, 5, 4, 3, 2]), tight)
    assert any("TPOT" in p and "budget_tolerance.tpot" in p for p in problems)

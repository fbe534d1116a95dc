"""The trial plan on its own: which trials it asks for, in which order, and what it makes of
real comparisons (specperf.analysis.compare on synthetic trials), with no server."""

from __future__ import annotations

from collections.abc import Generator, Iterator

import pytest

from specperf.analysis.aggregate import case_result
from specperf.analysis.judge.case import compare_cases
from specperf.analysis.judge.follow_up import follow_up_of_comparison
from specperf.config.profile import Profile
from specperf.config.profile_file import load_profile
from specperf.engine.confirmation import Flag, measure_flags_again
from specperf.engine.plan_steps import Compare, Judge, Restart, RunTrials, Say, TrialSpec
from specperf.engine.trial_plan import RETRY_BATCH, PlanOutcome, trial_plan
from specperf.report.synthetic import SynthConfig, scale_latency, synthetic_run
from specperf.schemas import Case, CaseResult, Trial
from tests.support import CPU_CI_PROFILE

DRAFT = SynthConfig("draft-k2", "draft k=2", "draft_model", "tiny:draft", 2, 0.6, 2.0)


@pytest.fixture(scope="module")
def profile() -> Profile:
    prof = load_profile(str(CPU_CI_PROFILE))
    # The plan is tested on one-run baselines: let a timing REGRESSION stand on one.
    prof.compare.min_baseline_runs = 1
    return prof


def trials_of(seed: int, n: int, factor: float = 1.0, run_cv: float = 0.05) -> list[Trial]:
    run = synthetic_run(configs=(DRAFT,), concurrencies=(1,), trials=n, requests=6, seed=seed,
                        run_cv=run_cv, profile="cpu-ci")
    return scale_latency(run, factor).cases[0].trials if factor != 1.0 else run.cases[0].trials


class Driver:
    """Carries out a plan as the case measurer does, with trials from ``sources`` and
    comparisons against ``bases`` (a concurrency without one compares as None)."""

    def __init__(self, profile: Profile, bases: dict[int, CaseResult],
                 sources: dict[int, Iterator[Trial]], restart_fails: str | None = None) -> None:
        self.profile = profile
        self.cfg = profile.config("draft-k2")
        self.bases = bases
        self.sources = sources
        self.restart_fails = restart_fails
        self.trials: dict[int, list[Trial]] = {c: [] for c in sources}
        self.steps: list[object] = []

    def compare(self, c: int):  # type: ignore[no-untyped-def]
        if c not in self.bases:
            return None
        cur = case_result(Case(config_id=self.cfg.id, concurrency=c), self.cfg, self.trials[c],
                          "0.32.0", self.profile.config_hash(self.cfg))
        return compare_cases(self.bases[c], cur, self.profile.compare)

    def run(self, plan: Generator[object, object, PlanOutcome]) -> PlanOutcome:
        feedback: object = None
        while True:
            try:
                step = plan.send(feedback)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            self.steps.append(step)
            feedback = None
            if isinstance(step, RunTrials):
                for t in step.trials:
                    self.trials[t.concurrency].append(next(self.sources[t.concurrency]))
            elif isinstance(step, Compare):
                feedback = {c: self.compare(c) for c in step.concurrencies}
            elif isinstance(step, Judge):
                feedback = {c: None if (cc := self.compare(c)) is None
                            else follow_up_of_comparison(cc) for c in step.concurrencies}
            elif isinstance(step, Restart):
                feedback = self.restart_fails

    def said(self) -> list[str]:
        return [s.line for s in self.steps if isinstance(s, Say)]

    def runs(self) -> list[tuple[TrialSpec, ...]]:
        return [s.trials for s in self.steps if isinstance(s, RunTrials)]


def base_case(profile: Profile, trials: list[Trial], c: int = 1) -> CaseResult:
    cfg = profile.config("draft-k2")
    return case_result(Case(config_id=cfg.id, concurrency=c), cfg, trials, "0.32.0",
                       profile.config_hash(cfg))


def test_base_repeats_go_round_robin_and_warm_up_once(profile: Profile) -> None:
    drive = Driver(profile, {}, {1: iter(trials_of(1, 3)), 4: iter(trials_of(2, 3))})
    out = drive.run(trial_plan("draft-k2", [1, 4], 3))
    assert drive.runs() == [(TrialSpec(1, True), TrialSpec(4, True), TrialSpec(1), TrialSpec(4),
                             TrialSpec(1), TrialSpec(4))]
    assert out == PlanOutcome() and drive.said() == []
    # Without retries or confirmation the plan never asks for a comparison.
    assert not any(isinstance(s, Compare | Judge | Restart) for s in drive.steps)


def test_an_inconclusive_case_gets_batches_until_decided_or_at_the_cap(profile: Profile) -> None:
    base = base_case(profile, trials_of(3, 6))
    # c=1 is compared (one trial: INCONCLUSIVE); c=2 has no baseline and is left alone.
    drive = Driver(profile, {1: base}, {1: iter(trials_of(11, 20)), 2: iter(trials_of(12, 20))})
    cap = 7
    out = drive.run(trial_plan("draft-k2", [1, 2], 1, retry_cap=cap))
    rec = out.retries[1]
    assert set(out.retries) == {1} and out.confirmations == {}
    assert rec.initial_trials == 1 and rec.trials == len(drive.trials[1]) <= cap
    assert rec.batch == RETRY_BATCH and rec.rounds == len(drive.runs()) - 1 >= 1
    # Each round: RETRY_BATCH more trials of the undecided case (fewer at the cap), no warm-up.
    for batch in drive.runs()[1:]:
        assert 1 <= len(batch) <= RETRY_BATCH and batch[0] == TrialSpec(1, warmup=False)
    assert len(drive.trials[2]) == 1
    said = drive.said()
    assert said[0] == f"specperf: INCONCLUSIVE against the baseline: more trials (draft-k2-c1 +{RETRY_BATCH})"
    assert said[-1] == f"specperf: draft-k2-c1: {rec.summary_line()}"
    assert said[-1].startswith("specperf: draft-k2-c1: 1 → ")


def test_the_last_batch_only_fills_up_to_the_cap(profile: Profile) -> None:
    # Very noisy trials against a very noisy baseline: still undecided at the cap.
    base = base_case(profile, trials_of(3, 6, run_cv=0.6))
    drive = Driver(profile, {1: base}, {1: iter(trials_of(11, 20, run_cv=0.6))})
    out = drive.run(trial_plan("draft-k2", [1], 2, retry_cap=5))
    rec = out.retries[1]
    assert rec.still_inconclusive
    assert [len(b) for b in drive.runs()[1:]] == [2, 1] and rec.trials == 5 == rec.cap


def test_a_round_that_adds_no_trial_ends_the_retries(profile: Profile) -> None:
    base = base_case(profile, trials_of(3, 6))
    stuck = Driver(profile, {1: base}, {1: iter(trials_of(11, 20))})
    plan = trial_plan("draft-k2", [1], 1, retry_cap=9)
    first = plan.send(None)
    stuck.trials[1].append(next(stuck.sources[1]))  # the base trial
    assert isinstance(first, RunTrials)
    step = plan.send(None)
    assert isinstance(step, Compare)
    step = plan.send({1: stuck.compare(1)})
    assert isinstance(step, Say) and "more trials" in step.line
    assert isinstance(plan.send(None), RunTrials)  # ... which the measurer did not run
    step = plan.send(None)
    assert isinstance(step, Compare)
    step = plan.send({1: stuck.compare(1)})
    assert isinstance(step, Say) and step.line.startswith("specperf: draft-k2-c1: 1 → 1 trials")
    with pytest.raises(StopIteration) as done:
        plan.send(None)
    assert done.value.value.retries[1].trials == 1


def test_a_flagged_case_is_replayed_on_a_fresh_server(profile: Profile) -> None:
    base = base_case(profile, trials_of(3, 5, run_cv=0.03))
    # 50 % slower on the first start and on the fresh one: the flag stands.
    drive = Driver(profile, {1: base}, {1: iter(trials_of(11, 5, 1.5, 0.03)
                                                 + trials_of(13, 5, 1.5, 0.03))})
    out = drive.run(trial_plan("draft-k2", [1], 5, confirm=True))
    restarts = [s for s in drive.steps if isinstance(s, Restart)]
    assert restarts == [Restart((1,))]
    # As many trials on the fresh start as on the first, the first of them warming it up.
    assert drive.runs()[1] == (TrialSpec(1, True),) + (TrialSpec(1),) * 4
    rec = out.confirmations[1]
    assert "TPOT" in rec.triggered_by and rec.first_trials == 5 and rec.trials == 10
    assert rec.outcome["TPOT"] == "regression"
    said = drive.said()
    assert said[0].startswith("specperf: flagged as a regression (draft-k2-c1 ")
    assert said[0].endswith("measuring again on a fresh vLLM server before deciding")
    assert said[-1] == f"specperf: draft-k2-c1: {rec.summary_line()}"


def test_an_unflagged_case_costs_no_restart(profile: Profile) -> None:
    base = base_case(profile, trials_of(3, 5, run_cv=0.03))
    drive = Driver(profile, {1: base}, {1: iter(trials_of(11, 5, 1.0, 0.03))})
    out = drive.run(trial_plan("draft-k2", [1], 5, confirm=True))
    assert out.confirmations == {} and drive.said() == []
    assert not any(isinstance(s, Restart) for s in drive.steps)


def test_a_fresh_server_that_does_not_start_leaves_the_first_measurement(
        profile: Profile) -> None:
    base = base_case(profile, trials_of(3, 5, run_cv=0.03))
    drive = Driver(profile, {1: base}, {1: iter(trials_of(11, 5, 1.5, 0.03))},
                   restart_fails="exited with code 1")
    out = drive.run(trial_plan("draft-k2", [1], 5, confirm=True))
    rec = out.confirmations[1]
    assert rec.note == "not confirmed: the fresh server did not start (exited with code 1)"
    assert rec.trials == rec.first_trials == 5 and not rec.outcome
    assert len(drive.runs()) == 1  # no trial without a server
    assert drive.said()[-1] == f"specperf: draft-k2: {rec.note}"


def test_confirm_later_names_the_flags_and_starts_nothing(profile: Profile) -> None:
    base = base_case(profile, trials_of(3, 5, run_cv=0.03))
    drive = Driver(profile, {1: base}, {1: iter(trials_of(11, 5, 1.5, 0.03))})
    out = drive.run(trial_plan("draft-k2", [1], 5, confirm=True, confirm_later=True))
    assert not any(isinstance(s, Restart) for s in drive.steps) and len(drive.runs()) == 1
    assert out.confirmations == {} and set(out.deferred) == {1}
    flag = out.deferred[1]
    assert "TPOT" in flag.metrics and flag.trials == 5
    assert drive.said() == [
        f"specperf: flagged as a regression (draft-k2-c1 {', '.join(flag.metrics)}): "
        "measured again on a fresh vLLM server after the other configs' cases, before deciding"]


def test_confirm_later_without_a_flag_names_none(profile: Profile) -> None:
    base = base_case(profile, trials_of(3, 5, run_cv=0.03))
    drive = Driver(profile, {1: base}, {1: iter(trials_of(11, 5, 1.0, 0.03))})
    out = drive.run(trial_plan("draft-k2", [1], 5, confirm=True, confirm_later=True))
    assert out == PlanOutcome() and drive.said() == []


def test_a_named_flag_is_measured_again_later_as_at_once(profile: Profile) -> None:
    """The later confirmation is the same measurement: a fresh start, as many trials as the
    first start had (the first warming it up), judged on both starts."""
    base = base_case(profile, trials_of(3, 5, run_cv=0.03))
    drive = Driver(profile, {1: base}, {1: iter(trials_of(13, 5, 1.5, 0.03))})
    drive.trials[1] = trials_of(11, 5, 1.5, 0.03)
    flag = Flag(("TPOT",), 5)
    out = drive.run(measure_flags_again("draft-k2", {1: flag}))
    assert [s for s in drive.steps if isinstance(s, Restart)] == [Restart((1,))]
    assert drive.runs() == [(TrialSpec(1, True),) + (TrialSpec(1),) * 4]
    rec = out[1]
    assert rec.triggered_by == ["TPOT"] and rec.first_trials == 5 and rec.trials == 10
    assert rec.outcome == {"TPOT": "regression"} and rec.later_by_s is None
    assert drive.said() == [f"specperf: draft-k2-c1: {rec.summary_line()}"]


def test_retry_needs_a_positive_batch() -> None:
    plan = trial_plan("draft-k2", [1], 1, retry_cap=3, batch=0)
    plan.send(None)
    with pytest.raises(ValueError, match="batch"):
        plan.send(None)

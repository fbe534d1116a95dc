"""PerfSession's --perf-retry-inconclusive and fresh-server wiring, without a server: the
case measurer carries out the trial plan's steps, with trials from the synthetic generator
(specperf.report.synthetic) instead of vLLM. The plan itself: test_trial_plan.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from specperf.analysis.aggregate import case_result
from specperf.analysis.judge.case import compare_cases
from specperf.analysis.judge.kinds import LATENCY
from specperf.analysis.stats import Verdict
from specperf.engine.baseline_context import BaselineContext
from specperf.engine.confirmation import confirm_on_fresh_server
from specperf.engine.datasets import load_prompts, prompts_digest
from specperf.engine.measurer import ConfigRun
from specperf.engine.server import ServerError
from specperf.engine.session import RETRY_BATCH, RETRY_CAP_FACTOR, PerfOptions, PerfSession
from specperf.engine.trial_plan import retry_batches
from specperf.report.synthetic import SynthConfig, scale_latency, synthetic_run
from specperf.schemas import Baseline, Case, CaseResult, InconclusiveRetry, Trial
from tests.support import REPO_ROOT

REPO = REPO_ROOT
CI_PROFILE = REPO / "tests" / "profiles" / "cpu-ci.toml"
DRAFT = SynthConfig("draft-k2", "draft k=2", "draft_model", "tiny:draft", 2, 0.6, 2.0)


def session(tmp_path: Path, retry: int | None, say: list[str]) -> PerfSession:
    opts = PerfOptions(
        profile=str(CI_PROFILE), rootdir=REPO, run_dir=tmp_path / "run", json_path=None,
        baselines_dir=tmp_path / "baselines", update_baselines=False, force=False,
        repeats=None, dataset=None, models_cache=tmp_path / "models",
        retry_inconclusive=retry,
    )
    ps = PerfSession(options=opts, say=say.append)
    # These tests judge one-run baselines: let a timing REGRESSION stand on one.
    ps.profile.compare.min_baseline_runs = 1
    return ps


class FakeRunner:
    """Stands in for trials on a vLLM server: hands out the next trial of ``pool``."""

    def __init__(self, pool: Iterator[Trial] | None = None) -> None:
        self.pool = pool
        self.calls: list[tuple[int, bool]] = []

    def trial(self, server: Any, concurrency: int, index: int, warmup: bool,
              case: Case | None = None, paired: bool = False) -> Trial:
        if self.pool is None:
            pytest.fail("no trial may be added")
        self.calls.append((concurrency, warmup))
        return next(self.pool)


def fake_server(config_id: str = "draft-k2") -> Any:
    return SimpleNamespace(config_id=config_id, version="0.32.0", check_alive=lambda: None)


def config_run(ps: PerfSession, cfg: Any, trials: dict[int, list[Trial]],
               pool: Iterator[Trial] | None) -> ConfigRun:
    """The measurer's state for one config, its server faked, its trials so far given."""
    ps.measurer.runner = FakeRunner(pool)  # type: ignore[assignment]
    return ConfigRun(cfg, fake_server(cfg.id), trials, {}, None, "0.32.0",
                      current=Case(config_id=cfg.id, concurrency=min(trials)))


def with_baseline(ps: PerfSession, cases: list[CaseResult], provenance: Any,
                  path: Path | None = None) -> None:
    ps.baselines = BaselineContext(ps.profile, ps.get_provenance().prompts_hash, path,
                                   Baseline(provenance=provenance, cases=cases))


def trials_of(seed: int, n: int) -> list[Trial]:
    run = synthetic_run(configs=(DRAFT,), concurrencies=(1,), trials=n, requests=6, seed=seed,
                        run_cv=0.05, profile="cpu-ci")
    return run.cases[0].trials


def test_retry_cap_defaults_to_a_multiple_of_repeats(tmp_path: Path) -> None:
    ps = session(tmp_path, None, [])
    assert ps.retry_cap is None  # off: behaviour unchanged
    assert session(tmp_path, 0, []).retry_cap == RETRY_CAP_FACTOR * ps.repeats
    assert session(tmp_path, 7, []).retry_cap == 7


def test_inconclusive_case_gets_more_trials_while_its_server_is_up(tmp_path: Path) -> None:
    said: list[str] = []
    ps = session(tmp_path, 0, said)
    p = ps.profile
    cfg = p.config("draft-k2")
    base_trials = trials_of(seed=3, n=6)
    base = case_result(Case(config_id=cfg.id, concurrency=1), cfg, base_trials, "0.32.0",
                       p.config_hash(cfg))
    # c=1 has a baseline; c=2 does not (nothing to compare, never retried).
    with_baseline(ps, [base], synthetic_run(configs=(DRAFT,), concurrencies=(1,), trials=1,
                                            profile="cpu-ci").provenance)
    pool = iter(trials_of(seed=11, n=20))
    trials: dict[int, list[Trial]] = {1: [next(pool)], 2: [next(pool)]}
    run = config_run(ps, cfg, trials, pool)

    first = compare_cases(base, case_result(Case(config_id=cfg.id, concurrency=1), cfg,
                                            trials[1], "0.32.0"), p.compare)
    assert any(m.verdict is Verdict.INCONCLUSIVE for m in first.comparisons)

    cap = ps.retry_cap
    assert cap is not None
    retries = ps.measurer.carry_out(run, retry_batches(cfg.id, [1, 2], cap, RETRY_BATCH))  # type: ignore[arg-type]
    calls = ps.measurer.runner.calls  # type: ignore[attr-defined]
    assert set(retries) == {1}
    rec = retries[1]
    assert rec.initial_trials == 1 and rec.trials == len(trials[1]) <= cap
    assert rec.batch == RETRY_BATCH and rec.rounds >= 1
    assert all(c == 1 and warmup is False for c, warmup in calls)
    assert len(trials[2]) == 1
    assert any("INCONCLUSIVE against the baseline: more trials (draft-k2-c1 +" in s
               for s in said)
    assert any(s.startswith("specperf: draft-k2-c1: 1 → ") for s in said)


def test_without_the_option_or_a_baseline_nothing_is_retried(tmp_path: Path) -> None:
    def planned(ps: PerfSession) -> dict[int, InconclusiveRetry]:
        cfg = ps.profile.config("draft-k2")
        # Only the base repeats: every trial is one of the profile's.
        pool = iter(trials_of(seed=1, n=ps.repeats))
        run = config_run(ps, cfg, {1: []}, pool)
        out = ps.measurer.carry_out(run, ps.measurer._plan(run))  # noqa: SLF001
        assert len(run.trials[1]) == ps.repeats
        return out.retries

    assert planned(session(tmp_path, None, [])) == {}
    assert planned(session(tmp_path, 0, [])) == {}


def test_retry_record_is_in_the_run_file_only_when_retries_happened() -> None:
    case = synthetic_run(configs=(DRAFT,), concurrencies=(1,), trials=1, profile="cpu-ci")
    plain = case.cases[0]
    assert "retry" not in plain.model_dump_json()  # files without retries: as before
    assert "compare_rules" not in case.model_dump_json()
    rec = InconclusiveRetry(initial_trials=1, trials=3, cap=3, batch=2, rounds=1,
                            triggered_by=["TPOT"], outcome={"TPOT": "unchanged"})
    retried = plain.model_copy(update={"retry": rec})
    assert CaseResult.model_validate_json(retried.model_dump_json()).retry == rec


def test_baseline_of_other_prompts_compares_no_case_and_is_not_merged_into(
        tmp_path: Path) -> None:
    ps = session(tmp_path, None, [])
    p = ps.profile
    prov = ps.get_provenance()
    assert prov.prompts_hash == prompts_digest(load_prompts(p))
    cfg = p.config("draft-k2")
    case = Case(config_id=cfg.id, concurrency=1)
    stored = case_result(case, cfg, trials_of(seed=3, n=2), "0.32.0", p.config_hash(cfg))
    path = tmp_path / "baseline.json"
    run = synthetic_run(configs=(DRAFT,), concurrencies=(2,), trials=1, profile="cpu-ci")
    run = run.model_copy(update={"provenance": prov})

    with_baseline(ps, [stored], prov, path)
    assert ps.baselines.mismatch(case) is None and ps.baselines.case(case) == stored
    assert {c.case for c in ps.baselines.updated_baseline(run).cases} == {case, run.cases[0].case}

    # The dataset changed since the baseline was recorded: no case compares, and an
    # update does not keep the old cases beside the new ones.
    with_baseline(ps, [stored], prov.model_copy(update={"prompts_hash": "0" * 16}), path)
    why = ps.baselines.mismatch(case)
    assert why is not None and "0" * 16 in why and prov.prompts_hash in why
    assert "--perf-update-baselines" in why and ps.baselines.case(case) is None
    assert [c.case for c in ps.baselines.updated_baseline(run).cases] == [run.cases[0].case]

    # A baseline from before prompts were hashed compares as before.
    with_baseline(ps, [stored], prov.model_copy(update={"prompts_hash": None}), path)
    assert ps.baselines.mismatch(case) is None


def test_a_runs_twin_is_kept_in_the_baseline_until_its_case_is_measured_again(
        tmp_path: Path) -> None:
    """The pinned-acceptance twin's trials go into the baseline with their rates (a later
    twin at the same rates is measured against them); a case measured again keeps its own
    twin or none, never the old one's."""
    ps = session(tmp_path, None, [])
    p, prov = ps.profile, ps.get_provenance()
    cfg = p.config("draft-k2")
    c1, c2 = (Case(config_id=cfg.id, concurrency=c) for c in (1, 2))

    def result(case: Case, seed: int) -> CaseResult:
        return case_result(case, cfg, trials_of(seed=seed, n=2), "0.32.0", p.config_hash(cfg))

    run = synthetic_run(configs=(DRAFT,), concurrencies=(1,), trials=1, profile="cpu-ci")
    run = run.model_copy(update={"provenance": prov, "cases": [result(c1, 1), result(c2, 2)],
                                 "pinned_acceptance": {c1.id: result(c1, 5)},
                                 "pinned_rates": {cfg.id: [0.5, 0.25]}})
    base = ps.baselines.updated_baseline(run)
    assert base.pinned_acceptance == {c1.id: run.pinned_acceptance[c1.id]}
    assert base.pinned_rates == {cfg.id: [0.5, 0.25]}
    assert Baseline.model_validate_json(base.model_dump_json()) == base
    assert "pinned_acceptance" not in Baseline(provenance=prov, cases=[]).model_dump()

    # c2 measured again with no twin: c1's twin stays; c1 measured again: its twin goes.
    ps.baselines = BaselineContext(p, prov.prompts_hash, None, base)
    again = run.model_copy(update={"cases": [result(c2, 3)], "pinned_acceptance": {},
                                   "pinned_rates": {}})
    assert ps.baselines.updated_baseline(again).pinned_acceptance == base.pinned_acceptance
    again = again.model_copy(update={"cases": [result(c1, 4)]})
    kept = ps.baselines.updated_baseline(again)
    assert kept.pinned_acceptance == {} and kept.pinned_rates == {}

def _slow_trials(seed: int, n: int, factor: float) -> list[Trial]:
    run = synthetic_run(configs=(DRAFT,), concurrencies=(1,), trials=n, requests=6, seed=seed,
                        run_cv=0.03, profile="cpu-ci")
    return scale_latency(run, factor).cases[0].trials


def _flagged_setup(tmp_path: Path, said: list[str]) -> tuple[PerfSession, Any]:
    ps = session(tmp_path, None, said)
    p = ps.profile
    cfg = p.config("draft-k2")
    base = case_result(Case(config_id=cfg.id, concurrency=1), cfg,
                       _slow_trials(3, 5, 1.0), "0.32.0", p.config_hash(cfg))
    with_baseline(ps, [base], synthetic_run(configs=(DRAFT,), concurrencies=(1,), trials=1,
                                            profile="cpu-ci").provenance)
    return ps, cfg


def fresh_starts(ps: PerfSession, fail: str | None = None) -> list[str]:
    """Server starts the pool is asked for: a fake server, or (``fail``) a ServerError as
    the pool records it. Returns the config ids started, in order."""
    started: list[str] = []

    def start(config_id: str) -> Any:
        started.append(config_id)
        if fail is not None:
            exc = ServerError(config_id, fail, Path("x.log"), "")
            ps.pool.record_error(config_id, exc)
            raise exc
        return fake_server(config_id)

    ps.pool._start = start  # type: ignore[method-assign]  # noqa: SLF001
    return started


@pytest.mark.parametrize(("fresh", "confirmed"), [(1.0, False), (1.5, True)])
def test_a_flagged_case_is_measured_again_on_a_fresh_server(
        tmp_path: Path, fresh: float, confirmed: bool) -> None:
    said: list[str] = []
    ps, cfg = _flagged_setup(tmp_path, said)
    # c=1 is 50 % slower on the first start; c=2 has no baseline and is left alone.
    trials: dict[int, list[Trial]] = {1: _slow_trials(11, 5, 1.5), 2: _slow_trials(12, 5, 1.5)}
    run = config_run(ps, cfg, trials, iter(_slow_trials(13, 5, fresh)))
    started = fresh_starts(ps)
    out = ps.measurer.carry_out(run, confirm_on_fresh_server(cfg.id, [1, 2]))  # type: ignore[arg-type]
    calls = ps.measurer.runner.calls  # type: ignore[attr-defined]
    trials = run.trials
    restarts = [[c for c, ts in trials.items() if ts[0].server_start == 0]]
    assert started == [cfg.id] and restarts == [[1]] and set(out) == {1}
    assert [t.server_start for t in trials[1]] == [0] * 5 + [1] * 5
    assert calls == [(1, True)] + [(1, False)] * 4  # warm the fresh server once
    rec = out[1]
    assert "TPOT" in rec.triggered_by and rec.first_trials == 5 and rec.trials == 10
    assert (rec.outcome["TPOT"] == "regression") is confirmed
    assert len(trials[2]) == 5 and all(t.server_start is None for t in trials[2])
    assert any("measuring again on a fresh vLLM server" in s for s in said)
    assert any(s.startswith("specperf: draft-k2-c1: ") and "fresh server" in s for s in said)


def test_a_case_slowed_with_the_machine_is_not_flagged(tmp_path: Path) -> None:
    """The case and the no-spec trials paired with it both 1.5x slower than in the
    baseline (the machine's hour, not the config: compare._beside_reference): the run
    judging as it goes does not flag it, so no fresh server is started for it; with the
    reference unmoved the same slowdown is flagged."""
    ps, cfg = _flagged_setup(tmp_path, [])
    nospec = ps.profile.nospec
    assert nospec is not None
    base_case = ps.baselines.case(Case(config_id=cfg.id, concurrency=1))
    assert base_case is not None
    then = case_result(Case(config_id=nospec.id, concurrency=1), nospec,
                       _slow_trials(4, 5, 1.0), "0.32.0", ps.profile.config_hash(nospec))
    prov = synthetic_run(configs=(DRAFT,), concurrencies=(1,), trials=1,
                         profile="cpu-ci").provenance
    ps.baselines = BaselineContext(ps.profile, ps.get_provenance().prompts_hash, None, Baseline(
        provenance=prov, cases=[base_case], paired_nospec={"draft-k2-c1": then}))
    started = fresh_starts(ps)

    def confirmations(reference: float) -> dict[int, Any]:
        # A fresh start would take 5 trials and their 5 paired ones.
        run = config_run(ps, cfg, {1: _slow_trials(11, 5, 1.5)}, iter(_slow_trials(13, 10, 1.5)))
        run.paired = {1: _slow_trials(12, 5, reference)}
        run.nospec = fake_server(nospec.id)
        return ps.measurer.carry_out(run, confirm_on_fresh_server(cfg.id, [1]))  # type: ignore[arg-type]

    assert confirmations(1.5) == {} and started == []
    assert set(confirmations(1.0)) == {1} and started == [cfg.id]


def test_no_confirmation_without_a_baseline_a_flag_or_the_rule(tmp_path: Path) -> None:
    ps, cfg = _flagged_setup(tmp_path, [])
    started = fresh_starts(ps)
    same = config_run(ps, cfg, {1: _slow_trials(11, 5, 1.0)}, None)
    assert ps.measurer.carry_out(same, confirm_on_fresh_server(cfg.id, [1])) == {}  # type: ignore[arg-type]

    def planned(ps: PerfSession) -> dict[int, Any]:
        # The base repeats, slow against the baseline: flagged, but not sent on.
        run = config_run(ps, cfg, {1: []}, iter(_slow_trials(11, ps.repeats, 1.5)))
        return ps.measurer.carry_out(run, ps.measurer._plan(run)).confirmations  # noqa: SLF001

    ps.profile.compare.confirm_on_fresh_server = False
    assert planned(ps) == {}
    ps.profile.compare.confirm_on_fresh_server = True
    ps.baselines = BaselineContext(ps.profile)
    assert planned(ps) == {}
    assert started == []


def test_a_fresh_server_that_does_not_start_leaves_the_first_measurement(
        tmp_path: Path) -> None:
    said: list[str] = []
    ps, cfg = _flagged_setup(tmp_path, said)
    run = config_run(ps, cfg, {1: _slow_trials(11, 5, 1.5)}, None)  # no trial without a server
    started = fresh_starts(ps, fail="exited with code 1")
    out = ps.measurer.carry_out(run, confirm_on_fresh_server(cfg.id, [1]))  # type: ignore[arg-type]
    assert started == [cfg.id]
    assert out[1].note is not None and "did not start (exited with code 1)" in out[1].note
    assert out[1].trials == out[1].first_trials == 5 and not out[1].outcome
    assert cfg.id not in ps.server_errors


# --- [compare] confirm_after_matrix ---------------------------------------------------


def _later_setup(tmp_path: Path, said: list[str], fresh: float = 1.5,
                 fail: str | None = None) -> tuple[PerfSession, Any, list[str], Case]:
    """draft-k2-c1 1.5x slower than its baseline on its first start (flagged), ``fresh``
    on the fresh one; self-k3-c1 selected too, with no baseline (never flagged)."""
    ps, cfg = _flagged_setup(tmp_path, said)
    ps.profile.compare.confirm_after_matrix = True
    n = ps.repeats
    ps.plan.wanted.update({cfg.id: {1}, "self-k3": {1}})  # the measurer's too
    ps.measurer.runner = FakeRunner(iter(  # type: ignore[assignment]
        _slow_trials(11, n, 1.5) + _slow_trials(12, n, 1.0) + _slow_trials(13, n, fresh)))
    started = fresh_starts(ps)
    if fail is not None:
        def start(config_id: str) -> Any:
            started.append(config_id)
            if started.count(config_id) > 1:
                exc = ServerError(config_id, fail, Path("x.log"), "")
                ps.pool.record_error(config_id, exc)
                raise exc
            return fake_server(config_id)
        ps.pool._start = start  # type: ignore[method-assign]  # noqa: SLF001
    return ps, cfg, started, Case(config_id=cfg.id, concurrency=1)


def test_a_flag_waits_for_the_other_configs_then_is_measured_on_a_fresh_server(
        tmp_path: Path) -> None:
    said: list[str] = []
    ps, cfg, started, case = _later_setup(tmp_path, said)
    n = ps.repeats
    first = ps.measure(case)
    # Flagged and left waiting: one start, the first start's trials, no confirmation yet.
    assert started == [cfg.id] and list(ps.after_matrix.pending) == [cfg.id]
    assert first.confirmation is None and all(t.server_start is None for t in first.trials)
    assert any("fresh vLLM server after the other configs' cases" in s for s in said)
    # The first judged item: the unmeasured config is measured (and its server stopped),
    # then the flag is measured again on a fresh start of draft-k2's server.
    ps.after_matrix.run(ps.measurer, ps.plan)
    assert started == [cfg.id, "self-k3", cfg.id] and not ps.after_matrix.pending
    again = ps.measurer.results[case]
    assert [t.server_start for t in again.trials] == [0] * n + [1] * n
    rec = again.confirmation
    assert rec is not None and rec.later_by_s is not None and rec.later_by_s >= 0
    assert rec.outcome["TPOT"] == "regression" and rec.first_trials == n and rec.trials == 2 * n
    assert "min later, after the other configs" in rec.summary_line()
    cc = ps.measurer.comparisons[case]
    assert cc is not None
    tpot = next(m for m in cc.comparisons if m.metric == "TPOT")
    assert tpot.verdict is Verdict.REGRESSION and "confirmed on 2 server starts" in tpot.reason
    # Nothing waits any more: a later judged item measures nothing again.
    ps.after_matrix.run(ps.measurer, ps.plan)
    assert started == [cfg.id, "self-k3", cfg.id]


def test_a_judged_item_that_measures_its_own_config_still_waits_for_the_others(
        tmp_path: Path) -> None:
    """Only judged items selected (e.g. -k latency): the first one measures its config,
    then the configs not measured yet, then the flag on a fresh start; its check reads
    both starts."""
    ps, cfg, started, case = _later_setup(tmp_path, [])
    checks = ps.evaluate(LATENCY, case)
    assert started == [cfg.id, "self-k3", cfg.id]
    tpot = next(c for c in checks if c.metric == "TPOT")
    assert tpot.outcome == "fail" and "confirmed on 2 server starts" in tpot.message


def test_a_flag_the_fresh_start_does_not_show_is_inconclusive(tmp_path: Path) -> None:
    ps, _, _, case = _later_setup(tmp_path, [], fresh=1.0)
    ps.measure(case)
    ps.after_matrix.run(ps.measurer, ps.plan)
    rec = ps.measurer.results[case].confirmation
    assert rec is not None and rec.outcome["TPOT"] != "regression"
    cc = ps.measurer.comparisons[case]
    assert cc is not None
    tpot = next(m for m in cc.comparisons if m.metric == "TPOT")
    assert tpot.verdict is Verdict.INCONCLUSIVE and "not confirmed on a fresh server" in tpot.reason


def test_a_later_fresh_start_that_fails_leaves_the_first_measurement(tmp_path: Path) -> None:
    said: list[str] = []
    ps, cfg, started, case = _later_setup(tmp_path, said, fail="exited with code 1")
    first = ps.measure(case)
    ps.after_matrix.run(ps.measurer, ps.plan)
    assert started == [cfg.id, "self-k3", cfg.id]
    result = ps.measurer.results[case]
    rec = result.confirmation
    assert rec is not None and rec.note is not None and "did not start" in rec.note
    assert rec.trials == rec.first_trials == ps.repeats and rec.later_by_s is not None
    assert len(result.trials) == len(first.trials)
    assert cfg.id not in ps.server_errors and not ps.after_matrix.pending


def test_flags_left_waiting_at_the_end_say_why(tmp_path: Path) -> None:
    ps, _, _, case = _later_setup(tmp_path, [])
    ps.measure(case)
    ps.abandon_pending(interrupted=True)
    rec = ps.measurer.results[case].confirmation
    assert rec is not None and not ps.after_matrix.pending
    assert rec.note == "not confirmed: the run was interrupted before the fresh start"
    assert rec.trials == rec.first_trials == ps.repeats and not rec.outcome


# --- the pinned-acceptance twin (docs/attribution.md) ----------------------------------


class TwinRunner(FakeRunner):
    """Hands out trials and records which server each went to."""

    def __init__(self, pool: Iterator[Trial]) -> None:
        super().__init__(pool)
        self.servers: list[str] = []

    def trial(self, server: Any, concurrency: int, index: int, warmup: bool,
              case: Case | None = None, paired: bool = False) -> Trial:
        self.servers.append(server.config_id)
        return super().trial(server, concurrency, index, warmup, case, paired)


def twin_session(tmp_path: Path, said: list[str], *, baseline: bool,
                 twin_fails: bool = False) -> tuple[PerfSession, TwinRunner, list[str]]:
    opts = PerfOptions(
        profile=str(CI_PROFILE), rootdir=REPO, run_dir=tmp_path / "run", json_path=None,
        baselines_dir=tmp_path / "baselines", update_baselines=False, force=False,
        repeats=3, dataset=None, models_cache=tmp_path / "models", retry_inconclusive=None,
        attribute=True)
    ps = PerfSession(options=opts, say=said.append)
    ps.profile.compare.confirm_on_fresh_server = False
    ps.plan.wanted.update({"draft-k2": {1}})
    if baseline:
        cfg = ps.profile.config("draft-k2")
        base = case_result(Case(config_id="draft-k2", concurrency=1), cfg, trials_of(3, 3),
                           "0.32.0", ps.profile.config_hash(cfg))
        with_baseline(ps, [base], synthetic_run(configs=(DRAFT,), concurrencies=(1,),
                                                trials=1, profile="cpu-ci").provenance)
    started: list[str] = []

    def server_for(config_id: str) -> Any:
        started.append(config_id)
        if twin_fails and config_id.endswith("@pinned"):
            raise ServerError(config_id, "boom", tmp_path / "x.log", "")
        return fake_server(config_id)

    ps.pool.server_for = server_for  # type: ignore[method-assign]
    runner = TwinRunner(iter(trials_of(seed=11, n=20)))
    ps.measurer.runner = runner  # type: ignore[assignment]
    return ps, runner, started


def test_the_twin_runs_a_trial_after_each_of_the_configs_own(tmp_path: Path) -> None:
    said: list[str] = []
    ps, runner, started = twin_session(tmp_path, said, baseline=True)
    case = Case(config_id="draft-k2", concurrency=1)
    ps.measure(case)
    assert started == ["draft-k2", "draft-k2@pinned"]
    assert runner.servers == ["draft-k2", "draft-k2@pinned"] * 3
    # the twin's first trial warms it up, as the config's first trial does
    assert [w for _, w in runner.calls] == [True, True, False, False, False, False]
    base = ps.baselines.case(case)
    assert base is not None and base.acceptance is not None
    rates = ps.measurer.pinned_rates["draft-k2"]
    assert rates == pytest.approx(base.acceptance.per_position_rate, abs=1e-6)
    assert ps.pool.config("draft-k2@pinned").speculative_config == {
        **ps.profile.config("draft-k2").speculative_config,  # type: ignore[dict-item]
        "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": rates}
    run = ps.run_result()
    assert list(run.pinned_acceptance) == ["draft-k2-c1"]
    assert len(run.pinned_acceptance["draft-k2-c1"].trials) == 3
    assert run.pinned_rates == {"draft-k2": rates}
    assert any("pinned-acceptance twin draft-k2@pinned" in s for s in said)


def test_no_baseline_or_a_twin_that_fails_costs_the_attribution_only(tmp_path: Path) -> None:
    for baseline, fails, why in ((False, False, "no comparable baseline case"),
                                 (True, True, "its server did not start: boom")):
        said: list[str] = []
        ps, runner, _ = twin_session(tmp_path, said, baseline=baseline, twin_fails=fails)
        result = ps.measure(Case(config_id="draft-k2", concurrency=1))
        assert len(result.trials) == 3
        assert runner.servers == ["draft-k2"] * 3
        assert why in ps.measurer.pinned_errors["draft-k2"]
        assert any("no acceptance/step-cost attribution" in s and why in s for s in said)
        assert ps.run_result().pinned_acceptance == {}


def test_a_mig_run_takes_the_gpu_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #54: a run on a MIG device (CUDA_VISIBLE_DEVICES=MIG-…) is a GPU run and takes
    the machine's GPU lock. No GPU here: an nvidia-smi that prints what a MIG machine's
    does stands in (tests/unit/store/test_provenance.py)."""
    import os

    from tests.unit.store.test_provenance import _SMI_MIG

    smi = tmp_path / "nvidia-smi"
    smi.write_text(_SMI_MIG)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-cdde1c9d")
    lock = tmp_path / "gpu.lock"
    monkeypatch.setenv("SPECPERF_GPU_LOCK", str(lock))
    ps = session(tmp_path, 0, [])
    ps.lock_machine()
    try:
        assert ps.get_provenance().hardware_id == "gpu-nvidia-a100-sxm4-80gb-mig-2g-20gb-x1"
        assert f"pid {os.getpid()}" in lock.read_text()
    finally:
        ps.stop_all()
    assert lock.read_text() == ""


def test_the_model_revisions_are_said_at_the_start_and_read_again_for_the_run_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that is not offline lets vLLM fetch an unpinned model at its first start:
    unknown when the run begins, the commit refs/main names when the run file is written."""
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    profile = tmp_path / "hub.toml"
    profile.write_text('name = "hub"\ntarget = "org/target"\nconcurrencies = [1]\n'
                       '[[server_configs]]\nid = "nospec"\n')
    said: list[str] = []
    ps = PerfSession(options=PerfOptions(
        profile=str(profile), rootdir=REPO, run_dir=tmp_path / "run", json_path=None,
        baselines_dir=tmp_path / "baselines", update_baselines=False, force=False,
        repeats=None, dataset=None, models_cache=tmp_path / "models"), say=said.append)
    ps.begin()
    assert ps.get_provenance().model_revisions == {"org/target": "unknown"}
    assert "specperf: hub models: org/target at unknown (the profile's pin, else the local " \
           "hub cache's refs/main; docs/profiles.md)" in said
    # What huggingface_hub leaves after a server's start downloaded main.
    root = cache / "models--org--target"
    (root / "snapshots" / ("a" * 40)).mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text("a" * 40)
    assert ps.run_result().provenance.model_revisions == {"org/target": "a" * 40}

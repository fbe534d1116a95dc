"""The paired TPOT gain, judged by intervals: against a portable floor, and against this
hardware's baseline gain."""

from __future__ import annotations

from specperf.analysis.aggregate import case_result
from specperf.analysis.gain import GAIN_METRIC, RELATIVE_METRIC, gain_vs_baseline, gain_vs_floor
from specperf.analysis.judge.case import compare_cases
from specperf.analysis.stats import Verdict
from specperf.config.rules import CompareRules
from specperf.config.server_configs import ServerConfig
from specperf.schemas import Case, CaseResult
from tests.support import make_requests, make_trial_of


def _case(config_id: str, tpots_ms: list[float], *, start: int | None = None,
          trials: int = 1) -> CaseResult:
    """A case whose trials' requests have these TPOTs (a spread, so intervals exist)."""
    cfg = ServerConfig(id=config_id, speculative_config=None if config_id == "nospec" else
                       {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})
    out = []
    for i in range(trials):
        samples = [s for t in tpots_ms for s in make_requests(1, tpot_s=t / 1000)]
        trial = make_trial_of(samples, index=i)
        out.append(trial if start is None else trial.model_copy(update={"server_start": start}))
    return case_result(Case(config_id=config_id, concurrency=1), cfg, out, "0.32.0", "h")


SPREAD = [0.97, 0.99, 1.0, 1.01, 1.03, 0.98, 1.02, 1.0]


def _tpots(centre: float) -> list[float]:
    return [centre * f for f in SPREAD]


def test_a_clear_gain_passes_a_clear_loss_fails_a_close_call_is_inconclusive() -> None:
    rules = CompareRules()
    nospec = _case("nospec", _tpots(30.0))
    passed, kind = gain_vs_floor(_case("ngram-k3", _tpots(20.0)), nospec, 1.0, rules)
    assert kind == "requests" and passed.verdict is Verdict.UNCHANGED
    assert passed.metric == GAIN_METRIC and round(passed.current, 2) == 1.5
    assert passed.ci_low > 1.0 and "wholly above the floor 1×" in passed.reason
    failed, _ = gain_vs_floor(_case("ngram-k3", _tpots(40.0)), nospec, 1.0, rules)
    assert failed.verdict is Verdict.REGRESSION and failed.ci_high < 1.0
    close, _ = gain_vs_floor(_case("ngram-k3", _tpots(29.8)), nospec, 1.0, rules)
    assert close.verdict is Verdict.INCONCLUSIVE and "crosses the floor" in close.reason


def test_too_few_requests_is_inconclusive_not_a_verdict() -> None:
    rules = CompareRules()
    few, _ = gain_vs_floor(_case("ngram-k3", [20.0, 21.0]), _case("nospec", [30.0, 31.0]), 1.0,
                           rules)
    assert few.verdict is Verdict.INCONCLUSIVE and "too few samples" in few.reason


def test_a_loss_must_show_on_every_server_start() -> None:
    """A fresh-server confirmation: the spec trials span two starts; a loss only the first
    start shows is not a FAIL."""
    rules = CompareRules()
    first = _case("ngram-k3", _tpots(40.0), start=0)
    second = _case("ngram-k3", _tpots(20.0), start=1)
    spec = first.model_copy(update={"trials": [*first.trials, *second.trials]})
    nospec_one = _case("nospec", _tpots(30.0))
    nospec = nospec_one.model_copy(update={"trials": nospec_one.trials * 2})
    judged, _ = gain_vs_floor(spec, nospec, 1.0, rules)
    assert judged.verdict is Verdict.INCONCLUSIVE
    assert "not confirmed on a fresh server" in judged.reason


def test_the_gain_may_not_drop_beyond_the_tpot_minimum_effect_against_the_baseline() -> None:
    rules = CompareRules()  # TPOT min_effect 5 %
    base = _case("ngram-k3", _tpots(20.0)), _case("nospec", _tpots(30.0))
    same, _ = gain_vs_baseline(_case("ngram-k3", _tpots(20.0)), _case("nospec", _tpots(30.0)),
                               *base, rules)
    assert same.metric == RELATIVE_METRIC and same.verdict is Verdict.UNCHANGED
    # The machine got 10 % slower on both sides: the gain did not move.
    drift, _ = gain_vs_baseline(_case("ngram-k3", _tpots(22.0)), _case("nospec", _tpots(33.0)),
                                *base, rules)
    assert drift.verdict is Verdict.UNCHANGED
    dropped, _ = gain_vs_baseline(_case("ngram-k3", _tpots(26.0)), _case("nospec", _tpots(30.0)),
                                  *base, rules)
    assert dropped.verdict is Verdict.REGRESSION
    assert "gain 1.50× in the baseline → 1.15×" in dropped.reason


def test_the_drop_against_the_baseline_has_its_own_rule_which_follows_tpot_unset() -> None:
    """[compare.metrics.tpot_vs_nospec] decides the gain against the baseline; unset it
    takes the TPOT rule's minimum effect, so a profile written before it judges the same."""
    base = _case("ngram-k3", _tpots(20.0)), _case("nospec", _tpots(30.0))
    cur = _case("ngram-k3", _tpots(23.0)), _case("nospec", _tpots(30.0))  # +15 %

    def judged(metrics: dict) -> Verdict:
        rules = CompareRules.model_validate({"metrics": metrics})
        return gain_vs_baseline(*cur, *base, rules)[0].verdict

    assert judged({}) is Verdict.REGRESSION  # TPOT's 5 %
    assert judged({"tpot": {"min_effect": 0.3}}) is Verdict.UNCHANGED  # followed
    assert judged({"tpot": {"min_effect": 0.3},
                   "tpot_vs_nospec": {"min_effect": 0.05}}) is Verdict.REGRESSION
    assert judged({"tpot_vs_nospec": {"min_effect": 0.3}}) is Verdict.UNCHANGED
    # The TPOT rule's own verdicts do not read it.
    rules = CompareRules.model_validate({"metrics": {"tpot_vs_nospec": {"min_effect": 0.3}}})
    assert rules.rule("tpot").min_effect == 0.05


def test_switching_tpot_vs_nospec_off_keeps_the_gain_against_its_floor() -> None:
    base, base_nospec = _case("ngram-k3", _tpots(20.0)), _case("nospec", _tpots(30.0))
    cur, nospec = _case("ngram-k3", _tpots(23.0)), _case("nospec", _tpots(30.0))

    def metrics(rules: CompareRules) -> list[str]:
        out = compare_cases(base, cur, rules, paired=nospec, base_paired=base_nospec,
                            gain_floor=1.0)
        return [c.metric for c in out.comparisons if "no-spec" in c.metric or "gain" in c.metric]

    assert metrics(CompareRules()) == [GAIN_METRIC, RELATIVE_METRIC]
    off = CompareRules.model_validate({"metrics": {"tpot_vs_nospec": {"enabled": False}}})
    assert metrics(off) == [GAIN_METRIC]
    assert off.changes() == ["TPOT vs no-spec not compared (default: as TPOT)"]


def test_kept_runs_join_the_baseline_gain_and_their_spread_widens_it() -> None:
    """Each run's spec server start has its own offset: against one run a 12 % drop of the
    gain is a REGRESSION; against three kept runs whose own gains spread as widely, it is
    not called."""
    rules = CompareRules()
    nospec = _case("nospec", _tpots(30.0))
    base = _case("ngram-k3", _tpots(20.0)), nospec
    cur = _case("ngram-k3", _tpots(22.4)), _case("nospec", _tpots(30.0))
    alone, _ = gain_vs_baseline(*cur, *base, rules)
    assert alone.verdict is Verdict.REGRESSION
    earlier = [(_case("ngram-k3", _tpots(22.0)), nospec), (_case("ngram-k3", _tpots(18.5)), nospec)]
    pooled, _ = gain_vs_baseline(*cur, *base, rules, earlier)
    assert pooled.verdict is Verdict.INCONCLUSIVE
    assert pooled.n_baseline == 3 * len(SPREAD)
    assert "between-run spread" in pooled.reason


#: The machine's speed over one trial, request by request: a shared VM's host bursts move a
#: request's TPOT by up to ±20 % (docs/validation.md, "Where the noise comes from").
HOST = [1.0, 1.2, 0.82, 1.15, 0.9, 1.18, 0.85, 1.08]


def _interleaved(spec_ms: float, nospec_ms: float, flag: bool = True
                 ) -> tuple[CaseResult, CaseResult]:
    """A spec case and its paired no-spec trial whose i-th requests ran moments apart, so
    both saw the host at HOST[i]; ``flag``: marked interleaved, as the engine marks them."""
    spec = _case("ngram-k3", [spec_ms * h * f for h, f in zip(HOST, SPREAD, strict=True)])
    nospec = _case("nospec", [nospec_ms * h for h in HOST])
    if flag:
        spec, nospec = (c.model_copy(update={"trials": [t.model_copy(update={"interleaved": True})
                                                         for t in c.trials]})
                        for c in (spec, nospec))
    return spec, nospec


def test_interleaved_requests_are_compared_pair_by_pair_so_the_hosts_speed_cancels() -> None:
    """A +25 % TPOT on the spec side, under host bursts of ±20 % per request: paired request
    by request (load.pairing = "requests") the bursts cancel and the drop of the gain is a
    REGRESSION; the same requests against the no-spec median cannot tell it."""
    rules = CompareRules()
    base = _interleaved(20.0, 30.0)
    paired, _ = gain_vs_baseline(*_interleaved(25.0, 30.0), *base, rules)
    assert paired.verdict is Verdict.REGRESSION
    assert 1.2 < paired.current / paired.baseline < 1.3
    same, _ = gain_vs_baseline(*_interleaved(20.0, 30.0), *base, rules)
    assert same.verdict is Verdict.UNCHANGED
    unpaired, _ = gain_vs_baseline(*_interleaved(25.0, 30.0, flag=False),
                                   *_interleaved(20.0, 30.0, flag=False), rules)
    assert unpaired.verdict is Verdict.INCONCLUSIVE


def test_the_gain_of_interleaved_requests_is_resampled_pair_by_pair() -> None:
    """The spec side 1.2× faster under ±20 % host bursts per request: resampled pair by
    pair the gain's interval clears the floor; the same requests resampled side by side
    cannot tell. A failed request drops its pair, never shifts the others."""
    rules = CompareRules()
    paired, kind = gain_vs_floor(*_interleaved(25.0, 30.0), 1.0, rules)
    assert kind == "requests" and paired.verdict is Verdict.UNCHANGED
    assert "resampled pair by pair" in paired.reason
    apart, _ = gain_vs_floor(*_interleaved(25.0, 30.0, flag=False), 1.0, rules)
    assert apart.verdict is Verdict.INCONCLUSIVE and "pair by pair" not in apart.reason
    assert apart.current == paired.current  # the same gain; only its interval differs
    spec, nospec = _interleaved(25.0, 30.0)
    trial = spec.trials[0]
    failed = trial.samples[2].model_copy(update={"ok": False, "error": "HTTP 500"})
    spec = spec.model_copy(update={"trials": [trial.model_copy(update={
        "samples": [*trial.samples[:2], failed, *trial.samples[3:]]})]})
    dropped, _ = gain_vs_floor(spec, nospec, 1.0, rules)
    assert dropped.verdict is Verdict.UNCHANGED
    assert (dropped.n_baseline, dropped.n_current) == (7, 8)

"""The bracketed TPOT gain (specperf.analysis.bracket, gain.py under reference = "bracket"):
the drift between the no-spec blocks, the gain's interval widened by half of it, each
server start against its own blocks, TPOT vs no-spec carrying the drift, and the run file
judged offline as the run judged it."""

from __future__ import annotations

import math

import pytest

from specperf.analysis.aggregate import case_result
from specperf.analysis.bracket import block_drift, blocks_of, bracketed, widen
from specperf.analysis.gain import gain_vs_baseline, gain_vs_floor
from specperf.analysis.judge.case import compare_cases
from specperf.analysis.stats import Verdict
from specperf.config.rules import CompareRules
from specperf.config.server_configs import ServerConfig
from specperf.schemas import Case, CaseResult
from tests.support import make_requests, make_trial_of

SPREAD = [0.97, 0.99, 1.0, 1.01, 1.03, 0.98, 1.02, 1.0]


def _case(config_id: str, centres: list[float], *, blocks: list[int] | None = None,
          starts: list[int] | None = None) -> CaseResult:
    """One trial per centre (its requests spread ±3 % around it), marked with its block
    and the spec server start it belongs to, when given."""
    cfg = ServerConfig(id=config_id, speculative_config=None if config_id == "nospec" else
                       {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})
    out = []
    for i, centre in enumerate(centres):
        samples = [s for f in SPREAD for s in make_requests(1, tpot_s=centre * f / 1000)]
        update: dict[str, int] = {}
        if blocks is not None:
            update["reference_block"] = blocks[i]
        if starts is not None:
            update["server_start"] = starts[i]
        out.append(make_trial_of(samples, index=i).model_copy(update=update))
    return case_result(Case(config_id=config_id, concurrency=1), cfg, out, "0.32.0", "h")


def _blocks(before: float, after: float, n: int = 1, first: int = 0) -> CaseResult:
    return _case("nospec", [before] * n + [after] * n,
                 blocks=[first] * n + [first + 1] * n)


def test_the_drift_is_the_blocks_disagreement_and_unknown_with_one() -> None:
    two = _blocks(30.0, 33.0)
    assert bracketed(two) and [len(b.trials) for b in blocks_of(two)] == [1, 1]
    d = block_drift(two, by_trial=False)
    assert d.blocks == (0, 1) and d.drift == pytest.approx(0.10, abs=1e-9)
    assert "drift 10.0 %" in d.describe()
    one = block_drift(_case("nospec", [30.0], blocks=[0]), by_trial=False)
    assert one.drift is None and one.half_log == 0.0 and "unknown" in one.describe()
    assert not bracketed(_case("nospec", [30.0]))  # paired trials, not blocks


def test_widening_covers_any_level_between_the_blocks() -> None:
    d = block_drift(_blocks(30.0, 36.0), by_trial=False)  # 20 % apart
    lo, hi = widen((1.4, 1.6), d)
    assert lo == pytest.approx(1.4 / math.sqrt(1.2)) and hi == pytest.approx(1.6 * math.sqrt(1.2))


def test_the_bracketed_gain_is_wider_than_the_same_samples_paired() -> None:
    rules = CompareRules()
    spec = _case("ngram-k3", [20.0])
    nospec = _blocks(28.0, 32.0)  # the machine slowed ~14 % between the blocks
    gain, kind = gain_vs_floor(spec, nospec, 1.0, rules)
    assert kind == "requests" and gain.verdict is Verdict.UNCHANGED
    assert round(gain.current, 2) == 1.5
    assert "no-spec from the blocks bracketing the config" in gain.reason
    assert "blocks 0 and 1" in gain.reason and "drift 14.3 %" in gain.reason
    # The same no-spec samples unmarked (as if beside): the interval is narrower.
    plain = nospec.model_copy(update={"trials": [t.model_copy(update={"reference_block": None})
                                                 for t in nospec.trials]})
    unwidened, _ = gain_vs_floor(spec, _case("nospec", [28.0, 32.0]), 1.0, rules)
    assert not bracketed(plain)
    assert gain.ci_high - gain.ci_low > unwidened.ci_high - unwidened.ci_low


def test_a_close_gain_between_drifting_blocks_is_inconclusive() -> None:
    """1.1x over the floor with blocks 30 % apart: the widened interval crosses 1.0 and
    the hold rule would hold it if it did not."""
    rules = CompareRules()
    cc = compare_cases(None, _case("ngram-k3", [27.0]), rules, paired=_blocks(26.0, 34.0),
                       gain_floor=1.0)
    gain = next(m for m in cc.comparisons if m.metric == "TPOT gain")
    assert gain.verdict is Verdict.INCONCLUSIVE


@pytest.mark.parametrize(("before", "after", "held"), [(30.0, 30.0, False), (28.0, 32.0, True)])
def test_an_unchanged_gain_against_the_baseline_is_held_when_the_blocks_moved_more(
        before: float, after: float, held: bool) -> None:
    """TPOT vs no-spec "unchanged" rules out a change of its min_effect (5 %); blocks 14 %
    apart cannot carry that, so bracket_drift holds it. The gain against its 1.0 floor
    (1.5x, a 50 % margin) stands either way."""
    rules = CompareRules(min_baseline_runs=1)
    spec, base = _case("ngram-k3", [20.0] * 6), _case("ngram-k3", [20.0] * 6)
    nospec = _case("nospec", [before] * 6 + [after] * 6, blocks=[0] * 6 + [1] * 6)
    base_nospec = _case("nospec", [30.0] * 12, blocks=[0] * 6 + [1] * 6)
    cc = compare_cases(base, spec, rules, paired=nospec, base_paired=base_nospec,
                       gain_floor=1.0)
    by = {m.metric: m for m in cc.comparisons}
    assert by["TPOT gain"].verdict is Verdict.UNCHANGED and by["TPOT gain"].held_by is None
    relative = by["TPOT vs no-spec"]
    assert (relative.held_by == "bracket_drift") is held
    assert relative.verdict is (Verdict.INCONCLUSIVE if held else Verdict.UNCHANGED)


def test_each_server_start_is_judged_against_its_own_blocks() -> None:
    """A loss on the first start (spec 40 ms, no-spec 30) that the fresh start, between
    blocks of its own, does not show (spec 20 ms): not a FAIL."""
    rules = CompareRules()
    spec = _case("ngram-k3", [40.0, 20.0], starts=[0, 1])
    nospec = _case("nospec", [30.0, 30.0, 30.0, 30.0], blocks=[0, 1, 2, 3],
                   starts=[0, 0, 1, 1])
    gain, _ = gain_vs_floor(spec, nospec, 1.0, rules)
    assert gain.verdict is not Verdict.REGRESSION
    both_slow = _case("ngram-k3", [40.0, 40.0], starts=[0, 1])
    lost, _ = gain_vs_floor(both_slow, nospec, 1.0, rules)
    assert lost.verdict is Verdict.REGRESSION and "confirmed on 2 server starts" in lost.reason


def test_tpot_vs_nospec_carries_the_drift_as_an_offset_of_the_run() -> None:
    """The same spec and blocks against a baseline whose gain was the same: with blocks
    agreeing the change is UNCHANGED; with blocks 40 % apart its interval is wider."""
    rules = CompareRules()
    base_spec, base_nospec = _case("ngram-k3", [20.0]), _blocks(30.0, 30.0)
    spec = _case("ngram-k3", [20.0])
    agree, kind = gain_vs_baseline(spec, _blocks(30.0, 30.0), base_spec, base_nospec, rules)
    apart, _ = gain_vs_baseline(spec, _blocks(25.0, 35.0), base_spec, base_nospec, rules)
    assert kind == "requests"
    assert agree.verdict is Verdict.UNCHANGED
    assert apart.ci_high - apart.ci_low > agree.ci_high - agree.ci_low

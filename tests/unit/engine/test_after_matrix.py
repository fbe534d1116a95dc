"""What waits for every config's cases (specperf.engine.after_matrix), asked of the real
object on the CI profile: whether it applies, which items wait, which configs the matrix's
own items measure, and abandoning flags the run never came to measure again. Running it
(a flag measured again on a fresh start, bracketed gains judged after the closing block)
goes through the session: tests/unit/engine/test_session.py (confirm_after_matrix) and
tests/unit/engine/test_bracket.py."""

from __future__ import annotations

from specperf.analysis.judge.kinds import CaseKind
from specperf.config.profile import Profile
from specperf.config.profile_file import load_profile
from specperf.engine.after_matrix import AfterMatrix
from specperf.engine.confirmation import Flag
from specperf.engine.kinds import KINDS, kind_named
from specperf.engine.measurer import ConfigRun
from specperf.engine.trial_plan import PlanOutcome
from specperf.report.synthetic import SynthConfig, synthetic_run
from specperf.schemas import Case
from tests.support import CPU_CI_PROFILE, REPO_ROOT

DRAFT = SynthConfig("draft-k2", "draft k=2", "draft_model", "tiny:draft", 2, 0.6, 2.0)


def ci_profile() -> Profile:
    return load_profile(str(CPU_CI_PROFILE), REPO_ROOT)


def test_it_applies_with_confirm_after_matrix_or_the_bracket_only() -> None:
    profile = ci_profile()
    after = AfterMatrix(lambda: profile)
    assert not profile.compare.confirm_after_matrix and profile.load.reference == "beside"
    assert not after.applies and not any(after.waits(k) for k in KINDS)
    # Read when asked: a setting changed after the object was built counts.
    profile.compare.confirm_after_matrix = True
    assert after.applies
    assert [k for k in KINDS if after.waits(k)] == [k for k in KINDS if isinstance(k, CaseKind) and k.judged]
    profile.compare.confirm_after_matrix = False
    # Load is frozen: the profile's own copy, as a profile with the key would load it.
    object.__setattr__(profile, "load", profile.load.model_copy(update={"reference": "bracket"}))
    assert after.applies and after.waits(kind_named("tpot_gain")) and not after.waits(kind_named("requests"))


def test_a_judged_item_finds_its_config_measured_only_if_a_matrix_item_measures_it() -> None:
    profile = ci_profile()
    profile.compare.confirm_after_matrix = True
    after = AfterMatrix(lambda: profile)
    draft, self3 = Case(config_id="draft-k2", concurrency=1), Case(config_id="self-k3",
                                                                   concurrency=1)
    for kind, case in [(kind_named("requests"), draft), (kind_named("latency"), draft),
                       (kind_named("latency"), self3)]:
        after.selected(kind, case)
    assert after.matrix_configs == {"draft-k2"}
    assert after.measured_before(kind_named("latency"), draft)
    # self-k3 has only judged items: the first of them measures it.
    assert not after.measured_before(kind_named("latency"), self3)
    # The matrix's own item never waits.
    assert not after.measured_before(kind_named("requests"), draft)
    profile.compare.confirm_after_matrix = False
    assert not after.measured_before(kind_named("latency"), draft)


def test_abandoned_flags_keep_the_first_start_and_say_why() -> None:
    profile = ci_profile()
    said: list[str] = []
    after = AfterMatrix(lambda: profile, say=said.append)
    run = synthetic_run(configs=(DRAFT,), concurrencies=(1, 2), trials=3, profile="cpu-ci")
    results = {c.case: c for c in run.cases}
    # The measurer's state of the config (no server: abandoning starts none).
    state = ConfigRun(profile.config("draft-k2"), None, {1: [], 2: []}, {}, None,  # type: ignore[arg-type]
                      "0.32.0")
    after.wait(state, PlanOutcome(deferred={1: Flag(("TPOT",), 3)}))
    assert list(after.pending) == ["draft-k2"]
    after.abandon(results, interrupted=False)
    flagged, other = (results[Case(config_id="draft-k2", concurrency=c)] for c in (1, 2))
    rec = flagged.confirmation
    assert rec is not None and not after.pending and other.confirmation is None
    assert rec.note == ("not confirmed: no selected check of the case ran after the matrix "
                        "to measure it again")
    assert rec.triggered_by == ["TPOT"] and rec.trials == rec.first_trials == 3
    assert not rec.outcome and not said
    # Nothing waits any more: a second end changes nothing.
    after.abandon(results, interrupted=True)
    assert results[flagged.case].confirmation == rec

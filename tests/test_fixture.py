"""PerfSession's --perf-retry-inconclusive wiring, without a server: the trials come from
the synthetic generator (specperf.report.synthetic) instead of vLLM."""

from __future__ import annotations

from pathlib import Path

import pytest

from specperf.compare import compare_cases
from specperf.fixture import RETRY_BATCH, RETRY_CAP_FACTOR, PerfOptions, PerfSession
from specperf.measure import case_result
from specperf.report.synthetic import SynthConfig, synthetic_run
from specperf.schemas import Baseline, Case, CaseResult, InconclusiveRetry, Trial
from specperf.stats import Verdict

REPO = Path(__file__).resolve().parents[1]
CI_PROFILE = REPO / "tests" / "profiles" / "cpu-ci.toml"
DRAFT = SynthConfig("draft-k2", "draft k=2", "draft_model", "tiny:draft", 2, 0.6, 2.0)


def session(tmp_path: Path, retry: int | None, say: list[str]) -> PerfSession:
    opts = PerfOptions(
        profile=str(CI_PROFILE), rootdir=REPO, run_dir=tmp_path / "run", json_path=None,
        baselines_dir=tmp_path / "baselines", update_baselines=False, force=False,
        repeats=None, dataset=None, models_cache=tmp_path / "models",
        retry_inconclusive=retry,
    )
    return PerfSession(options=opts, say=say.append)


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
    ps.baseline = Baseline(provenance=synthetic_run(configs=(DRAFT,), concurrencies=(1,),
                                                    trials=1, profile="cpu-ci").provenance,
                           cases=[base])
    pool = iter(trials_of(seed=11, n=20))
    trials: dict[int, list[Trial]] = {1: [next(pool)], 2: [next(pool)]}
    calls: list[tuple[int, bool]] = []

    def one_trial(c: int, warmup: bool) -> None:  # stands in for a trial on the server
        calls.append((c, warmup))
        trials[c].append(next(pool))

    first = compare_cases(base, case_result(Case(config_id=cfg.id, concurrency=1), cfg,
                                            trials[1], "0.32.0"), p.compare)
    assert any(m.verdict is Verdict.INCONCLUSIVE for m in first.comparisons)

    retries = ps._retry_inconclusive(cfg, [1, 2], trials, "0.32.0", one_trial)  # noqa: SLF001
    cap = ps.retry_cap
    assert cap is not None
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
    trials: dict[int, list[Trial]] = {1: trials_of(seed=1, n=1)}

    def one_trial(c: int, warmup: bool) -> None:
        pytest.fail("no trial may be added")

    off = session(tmp_path, None, [])
    cfg = off.profile.config("draft-k2")
    assert off._retry_inconclusive(cfg, [1], trials, None, one_trial) == {}  # noqa: SLF001
    no_base = session(tmp_path, 0, [])
    assert no_base._retry_inconclusive(cfg, [1], trials, None, one_trial) == {}  # noqa: SLF001


def test_retry_record_is_in_the_run_file_only_when_retries_happened() -> None:
    case = synthetic_run(configs=(DRAFT,), concurrencies=(1,), trials=1, profile="cpu-ci")
    plain = case.cases[0]
    assert "retry" not in plain.model_dump_json()  # files without retries: as before
    assert "compare_rules" not in case.model_dump_json()
    rec = InconclusiveRetry(initial_trials=1, trials=3, cap=3, batch=2, rounds=1,
                            triggered_by=["TPOT"], outcome={"TPOT": "unchanged"})
    retried = plain.model_copy(update={"retry": rec})
    assert CaseResult.model_validate_json(retried.model_dump_json()).retry == rec

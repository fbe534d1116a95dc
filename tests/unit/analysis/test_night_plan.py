"""The night's estimate: from a baseline's measured trials, from a provisional baseline's
published means, from the stated default; split as the suite shards it."""

from __future__ import annotations

import math

import pytest

from specperf.analysis.night_plan import (
    DEFAULTS,
    RESERVE_FRACTION,
    night_plan,
)
from specperf.config.profile import Profile
from specperf.config.profile_file import load_profile
from specperf.config.shards import shard_config_ids
from specperf.schemas import Baseline
from specperf.store.baselines import load_baseline
from specperf.store.files import load_result
from tests.support import DATA_DIR, REPO_ROOT

A100_BASELINE = REPO_ROOT / "baselines" / "a100-qwen3-32b" / "gpu-nvidia-a100-sxm4-80gb-x1.json"


def _measured() -> Baseline:
    run = load_result(DATA_DIR / "run-cpu-tiny-k123.json")
    return Baseline(provenance=run.provenance, cases=run.cases)


def _only(profile: Profile, *ids: str) -> Profile:
    return profile.model_copy(update={"server_configs": [profile.config(i) for i in ids]})


def test_from_a_baseline_s_measured_trials() -> None:
    profile = load_profile("cpu-tiny", REPO_ROOT)
    base = _measured()
    plan = night_plan(profile, 1, baseline=base, accelerator="cpu")
    (shard,) = plan.shards
    assert "measured trials" in plan.durations_from
    # The profile asks for as many requests a trial as the baseline's trials had: a trial
    # is planned as long as the baseline's was.
    own = sum(t.duration_s for c in base.cases for t in c.trials) * profile.repeats
    assert shard.trials_min * 60 == pytest.approx(own)
    assert shard.trials == len(base.cases) * profile.repeats
    rest = shard.starts_min + shard.trials_min + shard.warmups_min + shard.reference_min
    assert shard.reserve_min == pytest.approx(RESERVE_FRACTION * rest)
    assert shard.total_min == pytest.approx(rest + shard.reserve_min)


def test_fewer_requests_a_trial_scale_the_measured_trial() -> None:
    profile = _only(load_profile("cpu-tiny", REPO_ROOT), "nospec")
    base = _measured()
    halved = profile.model_copy(update={"load": profile.load.model_copy(
        update={"requests_by_concurrency": {1: 4}})})
    full = night_plan(profile, baseline=base).shards[0].trials_min
    less = night_plan(halved, baseline=base).shards[0].trials_min
    c1 = next(c for c in base.cases if c.case.id == "nospec-c1").trials[0].duration_s
    assert (full - less) * 60 == pytest.approx(c1 / 2)


def test_from_a_provisional_baseline_s_published_means() -> None:
    profile = _only(load_profile("a100-qwen3-32b", REPO_ROOT), "nospec")
    base = load_baseline(A100_BASELINE)
    assert base is not None and base.provenance.provisional
    plan = night_plan(profile, baseline=base, accelerator="gpu")
    assert "summary figures" in plan.durations_from and "estimate" in plan.durations_from
    want = 0.0
    for case in base.cases:
        if case.case.config_id != "nospec":
            continue
        c = case.case.concurrency
        assert case.ttft_ms.mean is not None and case.tpot_ms.mean is not None
        request_s = (case.ttft_ms.mean + 255 * case.tpot_ms.mean) / 1000
        want += profile.repeats * math.ceil(profile.load.requests_at(c) / c) * request_s
    assert plan.shards[0].trials_min * 60 == pytest.approx(want)


def test_a_case_the_baseline_lacks_takes_the_slowest_at_its_concurrency() -> None:
    profile = load_profile("a100-qwen3-32b", REPO_ROOT)
    base = load_baseline(A100_BASELINE)
    k1 = night_plan(_only(profile, "qwen3-0.6b-k1"), baseline=base, accelerator="gpu")
    nospec = night_plan(_only(profile, "nospec"), baseline=base, accelerator="gpu")
    # Not published: as slow as the slowest published case (no-spec, at c ≤ 32).
    assert k1.shards[0].trials_min >= nospec.shards[0].trials_min * 0.99


def test_from_the_stated_default() -> None:
    profile = _only(load_profile("cpu-tiny", REPO_ROOT), "nospec")
    plan = night_plan(profile, accelerator="cpu")
    d = DEFAULTS["cpu"]
    assert "stated default" in plan.durations_from and "estimate" in plan.durations_from
    request_s = (d.ttft_ms + (profile.sampling.max_tokens - 1) * d.tpot_ms) / 1000
    want = sum(math.ceil(profile.load.requests_at(c) / c) * request_s
               for c in profile.concurrencies) * profile.repeats
    assert plan.shards[0].trials_min * 60 == pytest.approx(want)
    assert plan.shards[0].starts_min * 60 == pytest.approx(d.start_s or 0)
    gpu = night_plan(load_profile("a100-qwen3-32b", REPO_ROOT), accelerator="gpu")
    assert "¼ of startup_timeout_s" in gpu.starts_from


def test_measured_starts_replace_the_default() -> None:
    profile = _only(load_profile("cpu-tiny", REPO_ROOT), "nospec")
    plan = night_plan(profile, starts_s={"nospec": 61.0})
    assert plan.shards[0].starts_min * 60 == pytest.approx(61.0)
    assert "measured starts of nospec" in plan.starts_from


def test_shards_are_the_suite_s_split() -> None:
    profile = load_profile("a100-qwen3-32b", REPO_ROOT)
    plan = night_plan(profile, 2, baseline=load_baseline(A100_BASELINE), accelerator="gpu")
    assert [s.configs for s in plan.shards] == [shard_config_ids(profile, i, 2) for i in (1, 2)]
    everyone = [c for s in plan.shards for c in s.configs]
    assert sorted(everyone) == sorted(c.id for c in profile.server_configs)


def _blocks_the_measurer_runs(spec_configs: int, every: int) -> int:
    """How many no-spec blocks specperf.engine.bracket's schedule runs around this many
    spec configs: the plan must count what the measurer does."""
    from specperf.engine.bracket import Block, BracketSchedule

    schedule = BracketSchedule(every)
    for i in range(spec_configs):
        if schedule.due():
            schedule.add_block(Block(len(schedule.blocks)))
        schedule.spec_started(f"spec{i}", 0)
        schedule.spec_done()
    if schedule.open:
        schedule.add_block(Block(len(schedule.blocks)))
    return len(schedule.blocks)


def test_bracket_blocks_first_every_few_and_last() -> None:
    profile = load_profile("a100-qwen3-32b", REPO_ROOT)
    plan = night_plan(profile, 2, baseline=load_baseline(A100_BASELINE), accelerator="gpu")
    for s in plan.shards:
        specs = [c for c in s.configs if c != "nospec"]
        every = profile.load.bracket_every
        assert s.reference_blocks == 1 + math.ceil(len(specs) / every)
        assert s.reference_blocks == _blocks_the_measurer_runs(len(specs), every)
    # Shard 1's first block is no-spec's own cases; shard 2 starts every block itself.
    one, two = plan.shards
    assert one.server_starts == len(one.configs) + one.reference_blocks - 1
    assert two.server_starts == len(two.configs) + two.reference_blocks


def test_beside_pairs_a_no_spec_trial_with_every_gated_spec_trial() -> None:
    profile = load_profile("cpu-tiny", REPO_ROOT)
    plan = night_plan(profile, 1, baseline=_measured())
    gated = [c for c in profile.server_configs
             if c.is_spec and profile.gates_for(c).tpot_gain is not None]
    paired = sum(len([x for x in profile.concurrencies
                      if x <= (profile.gates_for(c).tpot_gain.max_concurrency)])  # type: ignore[union-attr]
                 for c in gated)
    assert plan.shards[0].reference_trials == paired * profile.repeats
    assert plan.shards[0].reference_blocks == 0


def test_shards_must_be_positive() -> None:
    with pytest.raises(ValueError, match="shards"):
        night_plan(load_profile("cpu-tiny", REPO_ROOT), 0)

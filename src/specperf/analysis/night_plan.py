"""How long a night of a profile takes, per shard, before any server starts: pure
arithmetic over the profile, its shard split (specperf.config.shards) and the durations
it has to go on. ``specperf plan`` prints it; the nightly runs it first.

Per shard: the server starts, the trials (``repeats`` rounds over each config's
concurrencies, the trial plan's first step: specperf.engine.trial_plan), the warm-ups
(before each server's first trial at each concurrency, ``warmup_requests`` one after
another: specperf.engine.load), the no-spec reference trials (``[load] reference``:
"beside", a paired no-spec trial next to each spec trial at the TPOT-gain gate's
concurrencies; "bracket", no-spec on its own server in blocks of ``repeats`` trials at
those concurrencies, first, after every ``[load] bracket_every`` spec configs and last,
as specperf.engine.bracket schedules them), and
a reserve for what is not known in advance (retries of inconclusive cases, fresh-server
confirmations).

Durations, in order of trust: the baseline's measured trials (each case's mean trial
duration, scaled to the requests a trial now has); the baseline's summary figures (a
provisional baseline: published mean TTFT and TPOT, so a trial is ⌈n / c⌉ requests of
TTFT + (max_tokens − 1) × TPOT); else a stated default. A case the baseline lacks takes
the slowest case it has at that concurrency (conservative).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from specperf.config.profile import Profile
from specperf.config.server_configs import ServerConfig
from specperf.config.shards import shard_config_ids
from specperf.schemas import Baseline, Case, CaseResult

__all__ = [
    "DEFAULTS",
    "RESERVE_FRACTION",
    "Defaults",
    "NightPlan",
    "ShardPlan",
    "night_plan",
]

#: Room for what the plan cannot know in advance: --perf-retry-inconclusive's +2 trials a
#: round on an inconclusive case (up to 3 × repeats) and fresh-server confirmations (a
#: start and the case's trials again). 15 % pays for about one case in seven getting one
#: more round of its trials, or a confirmation every few configs.
RESERVE_FRACTION = 0.15


class Defaults(BaseModel):
    """What a plan assumes without a baseline: stated in its output."""

    model_config = ConfigDict(frozen=True)

    tpot_ms: float
    ttft_ms: float
    #: A server start, seconds; None: a quarter of the profile's startup_timeout_s.
    start_s: float | None
    why: str


#: Per accelerator. CPU: the cpu-tiny figures measured on the 2-core CI VM (TPOT ~57 ms at
#: c = 1, starts 34–35 s: docs/validation.md). GPU: a mid-size model on one datacenter GPU
#: (~40 ms TPOT); a start a quarter of startup_timeout_s (weights from local disk, compile
#: and CUDA graphs; a profile's timeout is sized to its model).
DEFAULTS: dict[str, Defaults] = {
    "cpu": Defaults(tpot_ms=60.0, ttft_ms=200.0, start_s=35.0,
                    why="the cpu-tiny figures of the 2-core CI VM (docs/validation.md)"),
    "gpu": Defaults(tpot_ms=40.0, ttft_ms=150.0, start_s=None,
                    why="a mid-size model on one datacenter GPU; a start = ¼ of "
                        "startup_timeout_s"),
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ShardPlan(_Model):
    shard: int
    configs: list[str]
    server_starts: int
    starts_min: float
    trials: int
    trials_min: float
    warmups: int
    warmups_min: float
    reference_trials: int = Field(description="no-spec trials measured as the reference "
                                              "(paired beside, or bracket blocks)")
    reference_min: float
    reference_blocks: int = Field(0, description="bracket: no-spec blocks (each a start)")
    reserve_min: float
    total_min: float


class NightPlan(_Model):
    profile: str
    hardware_id: str | None
    reference: Literal["beside", "bracket"]
    shards: list[ShardPlan]
    durations_from: str = Field(description="where the trial durations come from")
    starts_from: str
    assumptions: list[str]

    @property
    def longest_min(self) -> float:
        return max(s.total_min for s in self.shards)


def _request_s(case: CaseResult, max_tokens: int) -> float | None:
    """One request's wall time from a case's mean TTFT and TPOT (ms), or None."""
    ttft, tpot = case.ttft_ms.mean or case.ttft_ms.median, case.tpot_ms.mean or case.tpot_ms.median
    if ttft is None or tpot is None:
        return None
    return (ttft + (max_tokens - 1) * tpot) / 1000


class _Durations:
    """Seconds of one trial of a (config, concurrency), and of one warm-up request."""

    def __init__(self, profile: Profile, baseline: Baseline | None, defaults: Defaults):
        self.p = profile
        self.defaults = defaults
        self.cases: dict[Case, CaseResult] = {c.case: c for c in baseline.cases} if baseline else {}
        self.measured = any(c.trials for c in self.cases.values())

    def _request_at(self, case: CaseResult, c: int) -> float | None:
        """A request's wall time at concurrency c, from trials or summary figures."""
        trials = [t for t in case.trials if t.samples]
        if trials:
            per = [t.duration_s / math.ceil(len(t.samples) / c) for t in trials]
            return sum(per) / len(per)
        return _request_s(case, self.p.sampling.max_tokens)

    def request_s(self, cfg: ServerConfig, c: int) -> float:
        """One request's wall time at concurrency c (a trial of n takes ⌈n / c⌉ of them)."""
        own = self.cases.get(Case(config_id=cfg.id, concurrency=c))
        got = self._request_at(own, c) if own is not None else None
        if got is not None:
            return got
        known = [r for case in self.cases.values() if case.case.concurrency == c
                 if (r := self._request_at(case, c)) is not None]
        if known:
            return max(known)  # the slowest case at that concurrency: conservative
        d = self.defaults
        return (d.ttft_ms + (self.p.sampling.max_tokens - 1) * d.tpot_ms) / 1000

    def trial_s(self, cfg: ServerConfig, c: int) -> float:
        return math.ceil(self.p.load.requests_at(c) / c) * self.request_s(cfg, c)

    def warmup_s(self, cfg: ServerConfig) -> float:
        """Warm-up requests go one after another: each as long as one at concurrency 1."""
        return self.p.load.warmup_requests * self.request_s(cfg, min(self.p.concurrencies))


def _paired(profile: Profile, cfg: ServerConfig) -> list[int]:
    """Concurrencies at which the spec config's TPOT gain needs a no-spec reference."""
    g = profile.gates_for(cfg).tpot_gain
    if not cfg.is_spec or g is None or profile.nospec is None:
        return []
    return [c for c in profile.concurrencies if c <= g.max_concurrency]


def night_plan(profile: Profile, shards: int = 1, *, baseline: Baseline | None = None,
               accelerator: Literal["cpu", "gpu"] = "cpu", hardware_id: str | None = None,
               starts_s: Mapping[str, float] | None = None,
               defaults: Defaults | None = None) -> NightPlan:
    """The plan of a night of ``profile`` in ``shards`` shards (module docstring).
    ``starts_s``: measured server start seconds per config id (a run file's)."""
    if shards < 1:
        raise ValueError(f"shards must be ≥ 1, not {shards}")
    d = defaults or DEFAULTS[accelerator]
    dur = _Durations(profile, baseline, d)
    start_default = d.start_s if d.start_s is not None else profile.startup_timeout_s / 4
    measured_starts = dict(starts_s or {})

    def start_s(cid: str) -> float:
        return measured_starts.get(cid, start_default)

    reps = profile.repeats
    nospec = profile.nospec
    twins = {c.id for c in profile.server_configs if c.pinned_acceptance}
    out: list[ShardPlan] = []
    for i in range(1, shards + 1):
        ids = shard_config_ids(profile, i, shards)
        configs = [profile.config(cid) for cid in ids]
        specs = [c for c in configs if c.is_spec]
        starts = trials = warmups = ref_trials = blocks = 0
        s_start = s_trials = s_warm = s_ref = 0.0
        for cfg in configs:
            n_servers = 2 if cfg.id in twins else 1
            starts += n_servers
            s_start += n_servers * start_s(cfg.id)
            for c in profile.concurrencies:
                trials += reps * n_servers
                s_trials += reps * n_servers * dur.trial_s(cfg, c)
            warmups += len(profile.concurrencies) * n_servers
            s_warm += len(profile.concurrencies) * n_servers * dur.warmup_s(cfg)
        paired = sorted({c for cfg in specs for c in _paired(profile, cfg)})
        if nospec is not None and paired:
            if profile.load.reference == "beside":
                if nospec.id not in ids:  # another shard's config, up as the reference
                    starts += 1
                    s_start += start_s(nospec.id)
                for cfg in specs:
                    for c in _paired(profile, cfg):
                        ref_trials += reps
                        s_ref += reps * dur.trial_s(nospec, c)
                        warmups += 1
                        s_warm += dur.warmup_s(nospec)
            else:
                blocks = 1 + math.ceil(len(specs) / profile.load.bracket_every)
                # Shard 1's first block is no-spec's own cases, counted above.
                extra = blocks - (1 if nospec.id in ids else 0)
                starts += extra
                s_start += extra * start_s(nospec.id)
                ref_trials += extra * reps * len(paired)
                s_ref += extra * reps * sum(dur.trial_s(nospec, c) for c in paired)
                warmups += extra * len(paired)
                s_warm += extra * len(paired) * dur.warmup_s(nospec)
        reserve = RESERVE_FRACTION * (s_start + s_trials + s_warm + s_ref)
        total = s_start + s_trials + s_warm + s_ref + reserve
        out.append(ShardPlan(
            shard=i, configs=ids, server_starts=starts, starts_min=s_start / 60,
            trials=trials, trials_min=s_trials / 60, warmups=warmups, warmups_min=s_warm / 60,
            reference_trials=ref_trials, reference_min=s_ref / 60, reference_blocks=blocks,
            reserve_min=reserve / 60, total_min=total / 60))
    if baseline is None:
        durations = f"a stated default (no baseline): TPOT {d.tpot_ms:g} ms, TTFT " \
                    f"{d.ttft_ms:g} ms, {d.why} — an estimate"
    elif dur.measured:
        durations = (f"the baseline's measured trials ({baseline.provenance.hardware_id}, "
                     f"{baseline.provenance.date:%Y-%m-%d})")
    else:
        kind = baseline.provenance.provisional or "no trials"
        durations = (f"the baseline's summary figures ({kind}: mean TTFT and TPOT, "
                     f"{baseline.provenance.hardware_id}) — an estimate")
    starts_from = (f"measured starts of {', '.join(sorted(measured_starts))}; others "
                   if measured_starts else "")
    starts_from += (f"{start_default:.0f} s a start (stated default: "
                    + ("¼ of startup_timeout_s" if d.start_s is None else d.why) + ")")
    assumptions = [
        f"reserve: {RESERVE_FRACTION:.0%} of the rest for retries of inconclusive cases and "
        "fresh-server confirmations",
        "warm-ups: before each server's first trial at each concurrency, "
        f"{profile.load.warmup_requests} requests one after another",
    ]
    if profile.load.reference == "bracket":
        assumptions.append(
            f"bracket: a no-spec block (own server start, {reps} trials at each TPOT-gain "
            f"concurrency) first, after every {profile.load.bracket_every} spec configs and last")
    if profile.scenarios.configs():
        assumptions.append("[scenarios] are not in the plan (run apart: -k <scenario>)")
    return NightPlan(profile=profile.name, hardware_id=hardware_id,
                     reference=profile.load.reference, shards=out, durations_from=durations,
                     starts_from=starts_from, assumptions=assumptions)

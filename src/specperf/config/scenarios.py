"""Scenarios: workloads of a particular shape, run beside a profile's main matrix (issue #16).

A profile's optional ``[scenarios]`` table holds one sub-table per scenario kind, each run
on its own servers and asserted by its own test in ``perf_tests/`` (``test_<kind>.py``,
docs/scenarios.md). The main matrix does not depend on them: they are left out of the
profile hash, so adding a scenario keeps a baseline comparable.

* ``[scenarios.prefix_cache]`` — prompts sharing a long prefix, prefix caching on: each
  spec config's hit rate against no-spec's, and its paired TPOT gain
  (specperf.engine.scenarios, specperf.analysis.scenarios);
* ``[scenarios.soak]`` — a steady load on one server for ``duration_s``, acceptance and
  TPOT per window of ``window_s``, the trend of each gated by its slope's interval
  (specperf.engine.soak, specperf.analysis.trend);
* ``[scenarios.ramp]`` — c = 1, a burst at the profile's highest concurrency, c = 1
  again, on one server: the second c = 1 phase must match the first
  (specperf.engine.soak, specperf.analysis.trend).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["PREFIX_CACHE_ON", "PrefixCacheScenario", "RampScenario", "Scenarios", "SoakScenario"]

#: The serve_args a prefix-cache scenario's servers get instead of the profile's
#: ``--no-enable-prefix-caching`` (a server config's own serve_args still come after them).
PREFIX_CACHE_ON = "--enable-prefix-caching"
PREFIX_CACHE_OFF = "--no-enable-prefix-caching"


class _Strict(BaseModel):
    # As config.profile's: unknown keys, nan and inf are errors (a nan tolerance or limit
    # turns a gate off).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class PrefixCacheScenario(_Strict):
    """Prompts that share a long prefix (a system prompt and a few-shot block), served
    with vLLM's prefix caching on. Each spec config's prefix-cache hit rate must stay
    within ``hit_rate_tolerance`` of the no-spec config's on the same prompts, and its
    paired TPOT gain must hold (the config's ``gates.tpot_gain`` floor)."""

    seed: int = 0
    system_words: int = Field(160, ge=1, description="words of the shared system prompt "
                                                     "(roughly tokens)")
    few_shot_words: int = Field(96, ge=0, description="words of the shared few-shot block "
                                                      "after it")
    question_words: int = Field(16, ge=1, description="words of each prompt's own question "
                                                      "after the shared prefix")
    concurrency: int = Field(1, ge=1, description="the scenario's one concurrency")
    requests: int = Field(8, ge=1, le=10_000, description="measured requests per trial (each trial "
                                               "sends new questions after the same prefix)")
    repeats: int | None = Field(None, ge=1, description="trials per config (default: the "
                                                        "profile's repeats)")
    hit_rate_tolerance: float = Field(
        0.05, ge=0.0, le=1.0, description="a spec config's hit rate may differ from the "
                                          "no-spec config's by at most this (absolute)")

    @property
    def prefix_words(self) -> int:
        return self.system_words + self.few_shot_words


class SoakScenario(_Strict):
    """A long run: acceptance and TPOT per time window, their trend gated.

    Each window sends whole cycles of the same prompts (``cycle_requests`` at
    ``concurrency``) until ``window_s`` has passed, so at temperature 0 a window's
    acceptance is exactly the cycle's and a flat acceptance is flat to the token. The
    slope of each series over the run's hours is estimated with its interval
    (Theil-Sen, scipy.stats.theilslopes): wholly beyond the allowed change FAILs, wholly
    within PASSes, in between — or fewer than ``min_windows`` windows — INCONCLUSIVE."""

    config: str = Field(description="the server config id the soak runs on")
    duration_s: float = Field(gt=0, description="seconds of steady load (windows are added "
                                                "until this has passed)")
    window_s: float = Field(gt=0, description="seconds per window (at least; a window ends "
                                              "at the end of a prompt cycle)")
    concurrency: int = Field(1, ge=1, description="requests in flight during the soak")
    cycle_requests: int | None = Field(
        None, ge=1, description="requests per prompt cycle (default: the profile's "
                                "load.requests at this concurrency)")
    min_windows: int = Field(5, ge=3, description="fewer windows than this: INCONCLUSIVE")
    confidence: float = Field(0.95, gt=0.5, lt=1.0,
                              description="of the slope's interval")
    max_acceptance_decay_per_hour: float = Field(
        0.02, ge=0.0, description="allowed fall of the acceptance rate (absolute, e.g. 0.02 "
                                  "= 2 points) per hour of load")
    max_tpot_growth_per_hour: float = Field(
        0.10, ge=0.0, description="allowed rise of the median TPOT per hour of load, relative "
                                  "to the run's median TPOT (0.10 = 10 %)")

    @model_validator(mode="after")
    def _windows_fit(self) -> SoakScenario:
        if self.duration_s < self.min_windows * self.window_s:
            raise ValueError(
                f"duration_s = {self.duration_s:g} holds fewer than min_windows = "
                f"{self.min_windows} windows of window_s = {self.window_s:g} s, so the trend "
                f"could never be judged — fix: raise duration_s to at least "
                f"{self.min_windows * self.window_s:g} or shorten window_s")
        return self


class RampScenario(_Strict):
    """c = 1, a burst, c = 1 again, on one server (three phases, one after the other).

    The second c = 1 phase is held to the first with the profile's comparison rules:
    acceptance with ``[compare.metrics.acceptance_rate] min_effect`` (exact counters),
    TPOT with ``[compare.metrics.tpot]`` (the requests' TPOTs, Mann-Whitney and the
    bootstrap interval). Speculation must be on in every phase of a speculative config."""

    config: str = Field(description="the server config id the ramp runs on")
    requests: int | None = Field(
        None, ge=1, description="requests per c = 1 phase (default: the profile's load.requests)")
    burst_concurrency: int | None = Field(
        None, ge=2, description="the burst's concurrency (default: the profile's highest)")
    burst_requests: int | None = Field(
        None, ge=1, description="requests in the burst (default: load.requests at the burst's "
                                "concurrency)")


class Scenarios(_Strict):
    """The profile's ``[scenarios]`` table: each sub-table one scenario, absent = not run.

    ``soak`` and ``ramp`` take one table (``[scenarios.soak]``) or several
    (``[[scenarios.soak]]``, each on its own server config or concurrency)."""

    prefix_cache: PrefixCacheScenario | None = None
    soak: list[SoakScenario] = Field(default_factory=list)
    ramp: list[RampScenario] = Field(default_factory=list)

    @field_validator("soak", "ramp", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, dict) else v

    @model_validator(mode="after")
    def _each_case_once(self) -> Scenarios:
        for name, cases in (("soak", [(s.config, s.concurrency) for s in self.soak]),
                            ("ramp", [(r.config, 1) for r in self.ramp])):
            twice = sorted({c for c in cases if cases.count(c) > 1})
            if twice:
                cid, conc = twice[0]
                raise ValueError(
                    f"two {name} scenarios on server config {cid!r} at concurrency {conc}: "
                    "they would be one case — fix: keep one, or give the other another "
                    "config or concurrency")
        return self

    @property
    def kinds(self) -> list[str]:
        """The scenario test kinds this table turns on, in run order."""
        return [name for name in type(self).model_fields if getattr(self, name)]

    def configs(self) -> list[tuple[str, str]]:
        """(where, server config id) of every scenario, e.g. ("soak[0]", "draft-k3")."""
        return [(f"{name}[{i}]", s.config) for name in ("soak", "ramp")
                for i, s in enumerate(getattr(self, name))]

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
  (specperf.engine.soak, specperf.analysis.trend);
* ``[scenarios.context_length]`` — prompts in length buckets, each bucket its own trials:
  acceptance per bucket against its floor and against the shortest bucket's, the paired
  TPOT gain per bucket (specperf.engine.scenarios, specperf.analysis.scenarios);
* ``[scenarios.categories]`` — a category-tagged dataset (Spec-Bench's question.jsonl
  shape), each category its own trials: acceptance and the paired TPOT gain per category.

The last two are *segmented* workloads: segments (buckets, categories) of prompts, each
measured in its own trials so that a trial's spec-decode counter deltas belong to one
segment.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from specperf.config.boundaries import check_serve_args
from specperf.config.strict import ProfileTable

__all__ = ["PREFIX_CACHE_ON", "CategoriesScenario", "ContextBucket", "ContextLengthScenario",
           "PrefixCacheScenario", "RampScenario", "Scenarios", "SegmentedScenario",
           "SoakScenario"]

#: The serve_args a prefix-cache scenario's servers get instead of the profile's
#: ``--no-enable-prefix-caching`` (a server config's own serve_args still come after them).
PREFIX_CACHE_ON = "--enable-prefix-caching"
PREFIX_CACHE_OFF = "--no-enable-prefix-caching"


class PrefixCacheScenario(ProfileTable):
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


class SoakScenario(ProfileTable):
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


class RampScenario(ProfileTable):
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


#: A segment's name: it becomes part of a check's metric and of messages.
_SEGMENT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class SegmentedScenario(ProfileTable):
    """What the segmented scenarios (context length, categories) share: per segment a
    list of prompts, measured in rounds — per segment the no-spec server's trial and then
    each spec server's on the same prompts — so each trial's counter deltas belong to one
    segment, and each spec trial has its paired no-spec trial."""

    concurrency: int = Field(1, ge=1, description="the scenario's one concurrency")
    requests: int = Field(4, ge=1, le=10_000, description="measured requests per segment per "
                                                          "trial")
    repeats: int | None = Field(None, ge=1, description="trials per segment per config "
                                                        "(default: the profile's repeats)")
    max_tokens: int | None = Field(
        None, ge=1, description="output tokens per request (default: the profile's "
                                "sampling.max_tokens); a long prompt plus this must fit the "
                                "target's --max-model-len")
    serve_args: list[str] = Field(
        default_factory=list, description="added after the profile's serve_args for this "
                                          "scenario's servers, e.g. a longer --max-model-len "
                                          "for long buckets (a server config's own still come "
                                          "last); the segmented scenarios share their servers "
                                          "when neither sets any")

    @field_validator("serve_args")
    @classmethod
    def _serve_args(cls, v: list[str]) -> list[str]:
        # They come after the suite's --host 127.0.0.1 on the server's command line, where
        # the last one wins: the same options are refused here as in the profile's own.
        return check_serve_args(v)

    def min_acceptance_of(self, segment: str) -> float | None:
        """The segment's acceptance-rate floor, or None (each kind says)."""
        return None

    @property
    def reference_segment(self) -> str | None:
        """The segment others' acceptance is held to (``max_relative_drop``), or None."""
        return None

    @property
    def max_relative_drop_of_acceptance(self) -> float | None:
        return None


class ContextBucket(ProfileTable):
    """One prompt-length bucket: ``requests`` prompts of ``prompt_words`` words each."""

    name: str = Field(pattern=_SEGMENT_NAME, description="the bucket's name in checks and "
                                                         "reports, e.g. 'short', 'beyond-draft'")
    prompt_words: int = Field(ge=1, description="words of each prompt: about 1.5 tokens a "
                                                "synthetic word with the tiny tokenizer, 1.3 a "
                                                "word of English text with a real one (reports "
                                                "show the measured prompt tokens)")
    min_acceptance: float | None = Field(
        None, ge=0.0, le=1.0, description="the bucket's acceptance-rate floor (exact counters)")


class ContextLengthScenario(SegmentedScenario):
    """Acceptance and the paired TPOT gain per prompt-length bucket.

    A draft trained (or configured) for shorter contexts than the target serves loses
    acceptance past its length — silently: vLLM keeps drafting. Each bucket is measured
    in its own trials; its acceptance must reach its ``min_acceptance`` and, with
    ``max_relative_drop``, stay within that fraction of the shortest bucket's."""

    seed: int = 0
    text: Literal["synthetic", "workload"] = Field(
        "synthetic", description="synthetic: the tiny tokenizer's made-up words (from seed); "
                                 "workload: the profile's workload prompts (e.g. ShareGPT) run "
                                 "together and cut to each bucket's length — real text for "
                                 "real models")
    buckets: list[ContextBucket] = Field(min_length=2, description="the length buckets (at "
                                                                   "least two)")
    max_relative_drop: float | None = Field(
        None, ge=0.0, lt=1.0, description="a bucket's acceptance may be at most this fraction "
                                          "below the shortest bucket's (0.3: at least 70 % of "
                                          "it)")

    @model_validator(mode="after")
    def _buckets_judged(self) -> ContextLengthScenario:
        names = [b.name for b in self.buckets]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"bucket name {twice[0]!r} is used twice — fix: give each bucket "
                             "its own name")
        if self.max_relative_drop is None and all(b.min_acceptance is None
                                                  for b in self.buckets):
            raise ValueError("no bucket's acceptance would be judged — fix: set "
                             "max_relative_drop, or min_acceptance on the buckets")
        return self

    def bucket(self, name: str) -> ContextBucket:
        return next(b for b in self.buckets if b.name == name)

    def min_acceptance_of(self, segment: str) -> float | None:
        return self.bucket(segment).min_acceptance

    @property
    def reference_segment(self) -> str:
        """The shortest bucket (the first of the shortest)."""
        return min(self.buckets, key=lambda b: b.prompt_words).name

    @property
    def max_relative_drop_of_acceptance(self) -> float | None:
        return self.max_relative_drop


class CategoriesScenario(SegmentedScenario):
    """Acceptance and the paired TPOT gain per task category of a category-tagged dataset.

    The dataset is JSON Lines, one prompt a line with its category: Spec-Bench's
    ``question.jsonl`` shape ``{"question_id": …, "category": "…", "turns": ["…", …]}``
    (the first turn is the prompt) or ``{"category": "…", "prompt": "…"}``. Each category
    is measured in its own trials on its first ``requests`` prompts."""

    dataset: str = Field(description="the JSONL file: relative to the profile's directory, "
                                     "or absolute")
    categories: list[str] | None = Field(
        None, min_length=1, description="the categories to measure, in this order (default: "
                                        "every category of the file, in order of appearance)")
    min_acceptance: dict[str, float] = Field(
        default_factory=dict, description="per category: its acceptance-rate floor")
    default_min_acceptance: float | None = Field(
        None, ge=0.0, le=1.0, description="the floor of a category without one of its own")

    @field_validator("min_acceptance")
    @classmethod
    def _rates(cls, v: dict[str, float]) -> dict[str, float]:
        bad = {k: x for k, x in v.items() if not 0.0 <= x <= 1.0}
        if bad:
            k, x = next(iter(bad.items()))
            raise ValueError(f"min_acceptance.{k} = {x:g} is not an acceptance rate — fix: a "
                             "number from 0 to 1")
        return v

    @model_validator(mode="after")
    def _floors_named(self) -> CategoriesScenario:
        if self.categories is not None:
            twice = sorted({c for c in self.categories if self.categories.count(c) > 1})
            if twice:
                raise ValueError(f"category {twice[0]!r} is listed twice in categories — fix: "
                                 "list each once")
            unknown = sorted(set(self.min_acceptance) - set(self.categories))
            if unknown:
                raise ValueError(
                    f"min_acceptance names category {unknown[0]!r}, which categories does not "
                    f"list ({', '.join(self.categories)}) — fix: add it there or remove its "
                    "floor")
        if not self.min_acceptance and self.default_min_acceptance is None:
            raise ValueError("no category's acceptance would be judged — fix: set "
                             "default_min_acceptance, or min_acceptance per category")
        return self

    def min_acceptance_of(self, segment: str) -> float | None:
        return self.min_acceptance.get(segment, self.default_min_acceptance)


class Scenarios(ProfileTable):
    """The profile's ``[scenarios]`` table: each sub-table one scenario, absent = not run.

    ``soak`` and ``ramp`` take one table (``[scenarios.soak]``) or several
    (``[[scenarios.soak]]``, each on its own server config or concurrency)."""

    prefix_cache: PrefixCacheScenario | None = None
    context_length: ContextLengthScenario | None = None
    categories: CategoriesScenario | None = None
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

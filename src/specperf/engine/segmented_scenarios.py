"""The segmented workload scenarios (``[scenarios.context_length]``,
``[scenarios.categories]``), measured on servers of their own.

The prompts come in segments — prompt-length buckets, task categories — and each trial
sends one segment's prompts only, so its spec-decode counter deltas are that segment's. A
round is, per segment, the no-spec server's trial and then each spec server's on the same
prompts (the paired gain, as the prefix-cache scenario's rounds). The two scenarios share
their servers (the profile's own serve_args, started once for both, logs in
``<run dir>/scenarios/segmented/``; a scenario with serve_args of its own has a pool of its
own, :func:`segmented_pool_name`); :class:`~specperf.engine.scenarios.ScenarioRunner`
holds the pools and stops one when the last of its scenarios selected is done. A spec
case's gain wholly below its floor is measured again on a fresh server before it may FAIL
(:meth:`ScenarioSetting.confirm <specperf.engine.scenario_setting.ScenarioSetting.confirm>`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specperf.analysis.aggregate import case_result
from specperf.analysis.scenarios import segmented_checks
from specperf.config.profile import Profile
from specperf.config.scenarios import CategoriesScenario, ContextLengthScenario, SegmentedScenario
from specperf.config.server_configs import ServerConfig
from specperf.engine.datasets import DatasetError, category_prompts, load_prompts
from specperf.engine.scenario_setting import (
    ScenarioMeasured,
    ScenarioSetting,
    gain_floors,
    started_spec_configs,
)
from specperf.engine.server import ServerError, VllmServer
from specperf.engine.servers import ServerPool
from specperf.engine.tiny import synthetic_text
from specperf.schemas import (
    Case,
    CaseResult,
    FreshServerConfirmation,
    GateCheck,
    ScenarioResult,
    ScenarioSegment,
    Trial,
)

__all__ = ["SEGMENTED_KINDS", "SEGMENTED_POOL", "Segment", "SegmentedMeasurer",
           "category_segments", "context_length_segments", "scenario_segments",
           "segmented_pool", "segmented_pool_name", "segmented_profile"]

#: The segmented scenarios: one shared server pool, per-segment trials.
SEGMENTED_KINDS = ("context_length", "categories")
#: The shared pool of the segmented scenarios (its logs: scenarios/segmented/servers/).
SEGMENTED_POOL = "segmented"


@dataclass(frozen=True)
class Segment:
    """One segment's name and the prompts each of its trials sends."""

    name: str
    prompts: list[str]


def segmented_profile(profile: Profile, spec: SegmentedScenario) -> Profile:
    """The profile a segmented scenario's trials run with: ``requests`` measured requests
    per trial, and its ``max_tokens`` if set. Its servers start from the profile itself."""
    load = profile.load.model_copy(update={"requests": spec.requests,
                                           "min_requests_per_stream": 0})
    sampling = (profile.sampling if spec.max_tokens is None
                else profile.sampling.model_copy(update={"max_tokens": spec.max_tokens}))
    return profile.model_copy(update={"load": load, "sampling": sampling})


def context_length_segments(spec: ContextLengthScenario,
                            workload: list[str] | None = None) -> list[Segment]:
    """Per bucket, ``requests`` prompts of its ``prompt_words`` words; the same every round
    (the profile's prefix caching is off, as in the main matrix), none shared between
    buckets. ``text = "workload"``: cut from ``workload`` (the profile's prompts run
    together, each prompt starting elsewhere in them), else synthetic words."""
    if spec.text == "synthetic":
        base = spec.seed * 1_000_003
        return [Segment(b.name, [synthetic_text(base + 7_919 * (k + 1) + i, b.prompt_words)
                                 for i in range(spec.requests)])
                for k, b in enumerate(spec.buckets)]
    words = " ".join(workload or []).split()
    if not words:
        raise DatasetError("scenarios.context_length.text = 'workload', and the profile's "
                           "workload gave no prompts — fix: check [workload], or use "
                           "text = 'synthetic'")
    longest = max(spec.buckets, key=lambda b: b.prompt_words)
    if longest.prompt_words > len(words):
        # Cut round and round, a prompt would repeat its own text, which any drafter
        # predicts well: the long bucket's acceptance would be inflated, not measured.
        raise DatasetError(
            f"scenarios.context_length: bucket {longest.name!r} wants {longest.prompt_words} "
            f"words and the profile's workload prompts hold {len(words)} — a prompt would "
            "repeat its own text — fix: raise [workload] num_prompts or shorten the bucket")
    out = []
    for k, b in enumerate(spec.buckets):
        prompts = []
        for i in range(spec.requests):
            # A prime stride apart, so no two prompts of a run start at the same word.
            start = (spec.seed + 7_919 * (k * spec.requests + i)) % len(words)
            prompts.append(" ".join(words[(start + j) % len(words)]
                                    for j in range(b.prompt_words)))
        out.append(Segment(b.name, prompts))
    return out


def category_segments(spec: CategoriesScenario, path: Path) -> list[Segment]:
    """Per category (``spec.categories``, else the file's in order), its first
    ``requests`` prompts (fewer in the file: they are sent again in turn); raises
    DatasetError naming a category the file does not have."""
    by_category = category_prompts(path)
    names = spec.categories or list(by_category)
    for field_name, wanted in (("categories", spec.categories or []),
                               ("min_acceptance", list(spec.min_acceptance))):
        missing = [c for c in wanted if c not in by_category]
        if missing:
            raise DatasetError(
                f"scenarios.categories.{field_name} names category {missing[0]!r}, which "
                f"{path} does not have (it has {', '.join(by_category)}) — fix: use one of "
                "those")
    return [Segment(c, by_category[c][:spec.requests]) for c in names]


def scenario_segments(profile: Profile, dataset: str | None,
                      spec: SegmentedScenario) -> list[Segment]:
    """The scenario's segments: context length's buckets (cut from the workload —
    ``dataset``, else the profile's — for ``text = "workload"``), or the categories of its
    dataset (relative to the profile's file); raises DatasetError."""
    if isinstance(spec, ContextLengthScenario):
        workload = load_prompts(profile, dataset) if spec.text == "workload" else None
        return context_length_segments(spec, workload)
    assert isinstance(spec, CategoriesScenario)
    path = Path(spec.dataset).expanduser()
    if not path.is_absolute() and profile.source is not None:
        path = profile.source.parent / path
    return category_segments(spec, path)


def segmented_pool_name(profile: Profile, kind: str) -> str:
    """The segmented scenarios share one pool; one with serve_args of its own has its
    own (its servers are other servers)."""
    spec = getattr(profile.scenarios, kind)
    return kind if spec.serve_args else SEGMENTED_POOL


def segmented_pool(setting: ScenarioSetting, kind: str) -> ServerPool:
    """A new pool for the scenario's servers: the profile's serve_args, then the
    scenario's own."""
    spec = getattr(setting.profile.scenarios, kind)
    prof = setting.profile.model_copy(
        update={"serve_args": [*setting.profile.serve_args, *spec.serve_args]})
    return setting.pool(prof, segmented_pool_name(setting.profile, kind), setting.view())


@dataclass
class _SegmentedConfig:
    """One server config in a segmented scenario: per segment its trials, and (a spec
    config) the no-spec trials paired with them."""

    cfg: ServerConfig
    server: VllmServer | None = None
    trials: dict[str, list[Trial]] = field(default_factory=dict)
    paired: dict[str, list[Trial]] = field(default_factory=dict)
    start: int | None = None
    warm: bool = False
    confirmation: FreshServerConfirmation | None = None


class SegmentedMeasurer:
    """Measures one segmented scenario (``kind``) once, on ``pool``'s servers (which it
    leaves running: the runner stops a shared pool); ``wanted``: the spec configs whose
    items were selected (None: all of them)."""

    def __init__(self, setting: ScenarioSetting, kind: str, segments: list[Segment],
                 pool: ServerPool, wanted: set[str] | None) -> None:
        spec = getattr(setting.profile.scenarios, kind)
        assert isinstance(spec, SegmentedScenario)
        self.setting, self.kind, self.spec = setting, kind, spec
        self.segments, self.pool, self.wanted = segments, pool, wanted
        self.prof = segmented_profile(setting.profile, spec)
        self.c = spec.concurrency
        #: The segment whose prompts the next trial sends.
        self.current: list[str] = segments[0].prompts
        self.runner = setting.trials(self.prof, pool, setting.view(), lambda: self.current)

    def measure(self, errors: dict[str, str]) -> ScenarioMeasured | None:
        """The scenario's result and checks; None when it could not be measured, with why
        in ``errors`` (per case id, or ``"*"`` for the whole scenario)."""
        kind, spec, prof, pool, segments, c = (self.kind, self.spec, self.prof, self.pool,
                                               self.segments, self.c)
        repeats = spec.repeats or self.setting.repeats
        nospec_cfg = prof.nospec
        assert nospec_cfg is not None  # the profile refuses the scenario without one
        word = "bucket" if kind == "context_length" else "category"
        self.setting.say(
            f"specperf: scenario {kind}: {len(segments)} {word} segment(s) "
            f"({', '.join(g.name for g in segments)}), {spec.requests} requests a trial, "
            f"{repeats} trial(s) per {word} per config at concurrency {c} (server logs: "
            f"{pool.log_dir})")
        try:
            nospec = _SegmentedConfig(nospec_cfg, pool.server_for(nospec_cfg.id))
        except (ServerError, RuntimeError) as exc:
            errors["*"] = f"the no-spec reference {nospec_cfg.id!r} could not be measured: {exc}"
            return None
        specs = started_spec_configs(prof, self.wanted, c, _SegmentedConfig, pool.server_for,
                                     errors)

        def rounds(configs: list[_SegmentedConfig], first: int, n: int = repeats) -> None:
            for r in range(first, first + n):
                for k, segment in enumerate(segments):
                    self.current = segment.prompts
                    self._segment_round(segment, r * len(segments) + k, nospec, configs)

        try:
            rounds(specs, 0)
            for s in specs if prof.compare.confirm_on_fresh_server else []:
                self._confirm(nospec, s, rounds)
            result = self._result(nospec, specs)
            checks = self._judge(result)
        except (ServerError, RuntimeError) as exc:
            errors["*"] = f"measuring failed: {exc}"
            return None
        return result, checks

    def _confirm(self, nospec: _SegmentedConfig, s: _SegmentedConfig,
                 rounds: Callable[[list[_SegmentedConfig], int, int], None]) -> None:
        """The setting's confirmation for one spec config: a round is every segment's
        trial once (each with its new paired no-spec trial)."""
        case_id = Case(config_id=s.cfg.id, concurrency=self.c).id

        def restart() -> None:
            s.server = self.pool.restart(s.cfg.id)
            s.trials = {g: [t.model_copy(update={"server_start": 0}) for t in ts]
                        for g, ts in s.trials.items()}
            s.start, s.warm = 1, False

        def judge() -> list[GateCheck]:
            # This config's case alone: the others' checks do not depend on its trials.
            return self._judge(self._result(nospec, [s])).get(case_id, [])

        # The fresh start's rounds follow the first start's (each segment's trial count).
        s.confirmation = self.setting.confirm(
            self.kind, s.cfg.id, self.c, len(self.segments), restart=restart,
            run_rounds=lambda n: rounds([s], max(map(len, s.trials.values())), n),
            judge=judge, trials=lambda: sum(len(ts) for ts in s.trials.values()))

    def _segment_round(self, segment: Segment, index: int, nospec: _SegmentedConfig,
                       specs: list[_SegmentedConfig]) -> None:
        """The no-spec server's trial on the segment's prompts, then every spec server's;
        a server's first trial warms it up first (before its counters are read)."""
        assert nospec.server is not None
        c = self.c
        trial = self.runner.trial(nospec.server, c, index, warmup=not nospec.warm)
        nospec.warm = True
        nospec.trials.setdefault(segment.name, []).append(trial)
        for s in specs:
            assert s.server is not None
            s.paired.setdefault(segment.name, []).append(trial)
            t = self.runner.trial(s.server, c, index, warmup=not s.warm)
            s.warm = True
            s.trials.setdefault(segment.name, []).append(
                t if s.start is None else t.model_copy(update={"server_start": s.start}))

    def _result(self, nospec: _SegmentedConfig,
                specs: list[_SegmentedConfig]) -> ScenarioResult:
        """Per segment each config's case; and each config's case over all segments."""
        assert nospec.server is not None
        prof, c, segments = self.prof, self.c, self.segments
        n_case = Case(config_id=nospec.cfg.id, concurrency=c)

        def result_of(run: _SegmentedConfig, trials: list[Trial]) -> CaseResult:
            assert run.server is not None
            return case_result(Case(config_id=run.cfg.id, concurrency=c), run.cfg, trials,
                               run.server.version, prof.config_hash(run.cfg))

        def nospec_of(trials: list[Trial]) -> CaseResult:
            return case_result(n_case, nospec.cfg, trials, nospec.server.version,  # type: ignore[union-attr]
                               prof.config_hash(nospec.cfg))

        measured = [s for s in specs if s.trials and s.server is not None]
        out: list[ScenarioSegment] = []
        for g in segments:
            cases, paired = [], {}
            if nospec.trials.get(g.name):
                cases.append(nospec_of(nospec.trials[g.name]))
            for s in measured:
                if s.trials.get(g.name):
                    cr = result_of(s, s.trials[g.name])
                    cases.append(cr)
                    paired[cr.case.id] = nospec_of(s.paired[g.name])
            out.append(ScenarioSegment(name=g.name, cases=cases, paired_nospec=paired))

        def pooled(by_segment: dict[str, list[Trial]]) -> list[Trial]:
            return [t for g in segments for t in by_segment.get(g.name, [])]

        cases = [nospec_of(pooled(nospec.trials))] if nospec.trials else []
        paired_all: dict[str, CaseResult] = {}
        for s in measured:
            cr = result_of(s, pooled(s.trials)).model_copy(update={"confirmation": s.confirmation})
            cases.append(cr)
            paired_all[cr.case.id] = nospec_of(pooled(s.paired))
        return ScenarioResult(kind=self.kind, cases=cases, paired_nospec=paired_all,  # type: ignore[arg-type]
                              segments=out)

    def _judge(self, result: ScenarioResult) -> dict[str, list[GateCheck]]:
        return segmented_checks(result, self.spec, gain_floors(self.prof, result),
                                self.prof.compare)

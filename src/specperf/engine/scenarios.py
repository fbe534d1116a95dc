"""A run's scenarios (config.scenarios): each on its own servers, with its own prompts.

A scenario is measured whole when its first test asks for it, after the main matrix (the
plugin orders its items last), and its servers are stopped when it is done. Its
server configs are the profile's, started from a copy of the profile that the scenario
changes (:func:`prefix_cache_profile`); server logs go to ``<run dir>/scenarios/<kind>/``.

Prefix caching (``prefix_cache``): every prompt is one shared prefix — a system prompt and
a few-shot block — and a question of its own. Every server first gets a warm-up round
(its own questions) that puts the prefix in its cache, then trials in rounds: each round
sends new questions to the no-spec server and then to each spec server, so both sides of
the paired gain see the same prompts and the same drift, and no server sees a prompt
twice (a repeated prompt would hit the cache whole). Each trial keeps the deltas of
vLLM's prefix-cache counters. A spec case whose gain is wholly below its floor is measured
again on a fresh server before it may FAIL ([compare] confirm_on_fresh_server), as in the
main matrix.

Segmented workloads (``context_length``, ``categories``): the prompts come in segments —
prompt-length buckets, task categories — and each trial sends one segment's prompts
only, so its spec-decode counter deltas are that segment's. A round is, per segment, the
no-spec server's trial and then each spec server's on the same prompts (the paired gain,
as prefix caching's rounds). The two scenarios share their servers (the profile's own
serve_args, started once for both, logs in ``<run dir>/scenarios/segmented/``), stopped
when the last of them selected is done.

Fresh-server confirmation is the matrix's (specperf.engine.confirmation, carried out by
:meth:`ScenarioRunner._confirm`): a spec case's FAIL that a fresh start can change (its
TPOT gain, measured from trials; never its hit rate or acceptance, which are counters) is
measured again on a fresh start of its server, with new paired no-spec trials, and the case
records what it did (``CaseResult.confirmation``).

Why one module past 600 lines: the three workload scenarios share one round structure
(no-spec trial, then each spec server's on the same prompts), written once here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from specperf.analysis.aggregate import case_result
from specperf.analysis.judge.follow_up import FollowUp, follow_up_of_checks
from specperf.analysis.scenarios import prefix_cache_checks, segmented_checks
from specperf.config.profile import Profile
from specperf.config.scenarios import (
    PREFIX_CACHE_OFF,
    PREFIX_CACHE_ON,
    CategoriesScenario,
    ContextLengthScenario,
    PrefixCacheScenario,
    SegmentedScenario,
)
from specperf.config.server_configs import ServerConfig
from specperf.engine.clock import RESTARTS, WARMUPS, RunClock
from specperf.engine.confirmation import confirm_on_fresh_server
from specperf.engine.datasets import DatasetError, category_prompts, load_prompts
from specperf.engine.load import run_load
from specperf.engine.observer import LineObserver, RunObserver
from specperf.engine.plan_steps import TrialSpec, carry_out
from specperf.engine.server import ServerError, VllmServer, stop_each
from specperf.engine.servers import ServerPool
from specperf.engine.tiny import synthetic_text
from specperf.engine.trials import TrialRunner
from specperf.schemas import (
    Case,
    CaseResult,
    FreshServerConfirmation,
    GateCheck,
    ScenarioResult,
    ScenarioSegment,
    Trial,
)

__all__ = ["SEGMENTED_KINDS", "WORKLOAD_SCENARIO_KINDS", "ScenarioError", "ScenarioRunner",
           "Segment", "category_segments", "context_length_segments", "prefix_cache_profile",
           "prefix_cache_prompts", "segmented_profile"]

#: The segmented scenarios: one shared server pool, per-segment trials.
SEGMENTED_KINDS = ("context_length", "categories")
#: The scenario test kinds, in run order (after the main matrix's).
WORKLOAD_SCENARIO_KINDS = ("prefix_cache", *SEGMENTED_KINDS)
#: The shared pool of the segmented scenarios (its logs: scenarios/segmented/servers/).
SEGMENTED_POOL = "segmented"


class ScenarioError(RuntimeError):
    """A scenario (or one of its cases) could not be measured; the message says why."""


def prefix_cache_profile(profile: Profile) -> Profile:
    """The profile the scenario's servers start from: prefix caching on (the profile's
    ``--no-enable-prefix-caching`` replaced by ``--enable-prefix-caching``), ``requests``
    measured requests per trial. A server config's own serve_args still come after the
    profile's, so a config that turns caching off stays off — which the hit-rate check
    then names."""
    spec = profile.scenarios.prefix_cache
    assert spec is not None
    args = [a for a in profile.serve_args if a not in (PREFIX_CACHE_OFF, PREFIX_CACHE_ON)]
    load = profile.load.model_copy(update={"requests": spec.requests,
                                           "min_requests_per_stream": 0})
    return profile.model_copy(update={"serve_args": [*args, PREFIX_CACHE_ON], "load": load})


def prefix_cache_prompts(spec: PrefixCacheScenario, round_: int, n: int) -> list[str]:
    """Round ``round_``'s ``n`` prompts: the shared prefix and a question each. Round -1 is
    the warm-up; no two (round, index) pairs share a question."""
    base = spec.seed * 1_000_003
    prefix = synthetic_text(base + 1, spec.system_words)
    if spec.few_shot_words:
        prefix += "\n\n" + synthetic_text(base + 2, spec.few_shot_words)
    return [f"{prefix}\n\n{synthetic_text(base + 10_007 * (round_ + 2) + i, spec.question_words)}"
            for i in range(n)]


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


#: Rounds apart of a re-measured attempt's prompts (repeats stay far below it).
_RETRY_ROUNDS = 1000


@dataclass
class _RoundPrompts:
    """The prompts of a trial: the round's on its first attempt; new questions on an
    attempt the contention guard measures again (the server has the round's prompts in
    its cache by then, and would find them there whole)."""

    spec: PrefixCacheScenario
    round_: int = 0
    calls: int = 0

    def start(self, round_: int) -> None:
        self.round_, self.calls = round_, 0

    def __call__(self) -> list[str]:
        n = self.calls
        self.calls += 1
        return prefix_cache_prompts(self.spec, self.round_ + _RETRY_ROUNDS * n,
                                    self.spec.requests)


@dataclass
class _Config:
    cfg: ServerConfig
    server: VllmServer | None = None
    trials: list[Trial] = field(default_factory=list)
    paired: list[Trial] = field(default_factory=list)
    error: str | None = None
    start: int | None = None
    confirmation: FreshServerConfirmation | None = None


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


@dataclass
class ScenarioRunner:
    profile: Profile
    run_dir: Path
    models_cache: Path
    repeats: int
    max_outside_cores: float
    busy_wait_s: float = 0.0
    say: Callable[[str], None] = print
    clock: RunClock = field(default_factory=RunClock)
    observer: RunObserver | None = None
    results: dict[str, ScenarioResult] = field(default_factory=dict)
    #: Per scenario kind, per spec case id: its checks (measured and judged).
    checks: dict[str, dict[str, list[GateCheck]]] = field(default_factory=dict)
    #: Per scenario kind, per case id: why it could not be measured.
    errors: dict[str, dict[str, str]] = field(default_factory=dict)
    #: The scenario's servers' records, for the run file.
    pools: dict[str, ServerPool] = field(default_factory=dict)
    #: Per scenario kind, the spec configs whose items were selected (a shard's, `-k`);
    #: absent: all of them.
    wanted: dict[str, set[str]] = field(default_factory=dict)
    #: --perf-dataset: the workload's file instead of the profile's (text = "workload").
    dataset: str | None = None

    def cases(self, kind: str) -> list[Case]:
        """The scenario's test cases: its spec configs at its concurrency."""
        spec = getattr(self.profile.scenarios, kind, None)
        if spec is None:
            return []
        return [Case(config_id=c.id, concurrency=spec.concurrency)
                for c in self.profile.server_configs if c.is_spec]

    def evaluate(self, kind: str, case: Case) -> list[GateCheck]:
        """The case's checks, measuring the whole scenario first if need be; raises
        ScenarioError or ServerError when the case could not be measured."""
        if kind not in self.results and kind not in self.errors:
            if kind == "prefix_cache":
                self._prefix_cache()
            elif kind in SEGMENTED_KINDS:
                self._segmented(kind)
            else:
                raise ValueError(f"unknown scenario {kind!r}; known: {WORKLOAD_SCENARIO_KINDS}")
        why = self.errors.get(kind, {}).get(case.id) or self.errors.get(kind, {}).get("*")
        if why is not None:
            raise ScenarioError(f"case {case.id}: {kind} scenario: {why}")
        checks = self.checks.get(kind, {}).get(case.id)
        if not checks:
            raise ScenarioError(f"case {case.id}: {kind} scenario: it was not measured")
        return checks

    def stop_all(self) -> None:
        stop_each([(name, pool.stop_all) for name, pool in self.pools.items()])

    # -- prefix caching ------------------------------------------------------------

    def _prefix_cache(self) -> None:
        kind = "prefix_cache"
        spec = self.profile.scenarios.prefix_cache
        assert spec is not None
        prof = prefix_cache_profile(self.profile)
        view = self.observer or LineObserver(self.say)
        # Logs in the scenario's own directory; caches and temp files in the run's, as the
        # main servers' (specperf.engine.server.server_tmpdir keeps TMPDIR short enough).
        logs = self.run_dir / "scenarios" / kind / "servers"
        pool = ServerPool(prof, self.run_dir, self.models_cache, say=self.say, observer=view,
                          clock=self.clock, log_dir=logs)
        self.pools[kind] = pool
        prompts = _RoundPrompts(spec)
        runner = TrialRunner(prof, pool, view, prompts, self.max_outside_cores,
                             busy_wait_s=self.busy_wait_s, say=self.say, clock=self.clock,
                             record_prefix_cache=True)
        errors = self.errors.setdefault(kind, {})
        c = spec.concurrency
        repeats = spec.repeats or self.repeats
        nospec_cfg = prof.nospec
        assert nospec_cfg is not None  # the profile refuses the scenario without one
        self.say(f"specperf: scenario prefix_cache: a {spec.prefix_words}-word shared prefix "
                 f"+ {spec.question_words}-word questions, {spec.requests} requests a trial, "
                 f"{repeats} trial(s) per config at concurrency {c}, prefix caching on "
                 f"(server logs: {logs})")
        try:
            nospec = _Config(nospec_cfg, self._started(pool, nospec_cfg.id, spec, c))
        except (ServerError, RuntimeError) as exc:
            errors["*"] = f"the no-spec reference {nospec_cfg.id!r} could not be measured: {exc}"
            pool.stop_all()
            return
        specs = []
        wanted = self.wanted.get(kind)
        for cfg in prof.server_configs:
            if not cfg.is_spec or (wanted is not None and cfg.id not in wanted):
                continue
            run = _Config(cfg)
            try:
                run.server = self._started(pool, cfg.id, spec, c)
            except (ServerError, RuntimeError) as exc:
                errors[Case(config_id=cfg.id, concurrency=c).id] = str(exc)
                continue
            specs.append(run)
        try:
            for r in range(repeats):
                self._round(runner, prompts, spec, r, nospec, specs, c)
            for s in specs if prof.compare.confirm_on_fresh_server else []:
                self._confirm_prefix_cache(prof, pool, runner, prompts, spec, nospec, s, c)
            result = self._result(prof, spec, nospec, specs, c)
            checks = self._judge(prof, spec, result)
        except (ServerError, RuntimeError) as exc:
            errors["*"] = f"measuring failed: {exc}"
            return
        finally:
            pool.stop_all()
        self.results[kind] = result
        self.checks[kind] = checks

    def _started(self, pool: ServerPool, config_id: str, spec: PrefixCacheScenario,
                 c: int) -> VllmServer:
        """The config's server, started and warmed: a round of its own questions puts the
        shared prefix in its cache before any trial reads the counters."""
        server = pool.server_for(config_id)
        model = server.model
        p = pool.profile
        n = max(p.load.warmup_requests, 1)
        with self.clock.phase(WARMUPS):
            run_load(pool.load_url(server), model, prefix_cache_prompts(spec, -1, n),
                     p.sampling, c, 0, warmup_requests=n,
                     request_timeout_s=p.load.request_timeout_s)
        return server

    def _round(self, runner: TrialRunner, prompts: _RoundPrompts, spec: PrefixCacheScenario,
               index: int, nospec: _Config, specs: list[_Config], c: int) -> None:
        """One trial of the no-spec server and of every spec server, on round ``index``'s
        prompts."""
        assert nospec.server is not None
        prompts.start(index)
        trial = runner.trial(nospec.server, c, index, warmup=False)
        nospec.trials.append(trial)
        for s in specs:
            assert s.server is not None
            s.paired.append(trial)
            prompts.start(index)
            t = runner.trial(s.server, c, index, warmup=False)
            s.trials.append(t if s.start is None else t.model_copy(update={"server_start": s.start}))

    def _confirm(self, kind: str, run: _Config | _SegmentedConfig, c: int, per_round: int, *,
                 restart: Callable[[], None], run_rounds: Callable[[int], None],
                 judge: Callable[[], list[GateCheck]], trials: Callable[[], int]) -> None:
        """The matrix's fresh-server confirmation (specperf.engine.confirmation) for one
        spec config of a scenario: judged now, and when a FAIL a fresh start can change
        stands, its server started again (``restart``), measured again for as many
        rounds (``run_rounds``; a round is ``per_round`` trials) and judged on both
        starts. The record lands on the config's case (``run.confirmation``)."""

        def judged(concs: tuple[int, ...]) -> Mapping[int, FollowUp | None]:
            return {c: follow_up_of_checks(judge(), trials())}

        def restarted(concs: tuple[int, ...]) -> str | None:
            try:
                with self.clock.phase(RESTARTS, whole=True):
                    restart()
            except (ServerError, RuntimeError) as exc:
                return exc.cause if isinstance(exc, ServerError) else str(exc)
            return None

        def measured(specs: tuple[TrialSpec, ...]) -> None:
            # The plan asks for as many trials as the first start had; a round is
            # ``per_round`` of them (one a segment).
            run_rounds(max(len(specs) // per_round, 1))

        done = carry_out(
            confirm_on_fresh_server(run.cfg.id, (c,)), run_trials=measured, judge=judged,
            restart=restarted,
            say=lambda line: self.say(line.replace("specperf: ", f"specperf: scenario {kind}: ",
                                                   1)))
        run.confirmation = done.get(c)

    def _confirm_prefix_cache(self, prof: Profile, pool: ServerPool, runner: TrialRunner,
                              prompts: _RoundPrompts, spec: PrefixCacheScenario,
                              nospec: _Config, s: _Config, c: int) -> None:
        """:meth:`_confirm` for one spec config of the prefix-cache scenario: its fresh
        server is warmed (the shared prefix in its cache) before its rounds, which get new
        paired no-spec trials and new questions."""
        case_id = Case(config_id=s.cfg.id, concurrency=c).id

        def restart() -> None:
            pool.restart(s.cfg.id)
            s.server = self._started(pool, s.cfg.id, spec, c)
            s.trials = [t.model_copy(update={"server_start": 0}) for t in s.trials]
            s.start = 1

        def run_rounds(n: int) -> None:
            first = len(s.trials)
            for r in range(n):
                self._round(runner, prompts, spec, first + r, nospec, [s], c)

        def judge() -> list[GateCheck]:
            # This config's case alone: the others' checks do not depend on its trials.
            result = self._result(prof, spec, nospec, [s], c)
            return self._judge(prof, spec, result).get(case_id, [])

        self._confirm("prefix_cache", s, c, 1, restart=restart, run_rounds=run_rounds,
                      judge=judge, trials=lambda: len(s.trials))

    def _result(self, prof: Profile, spec: PrefixCacheScenario, nospec: _Config,
                specs: list[_Config], c: int) -> ScenarioResult:
        assert nospec.server is not None
        n_case = Case(config_id=nospec.cfg.id, concurrency=c)
        cases: list[CaseResult] = []
        if nospec.trials:
            cases.append(case_result(n_case, nospec.cfg, nospec.trials, nospec.server.version,
                                     prof.config_hash(nospec.cfg)))
        paired: dict[str, CaseResult] = {}
        for s in specs:
            if not s.trials or s.server is None:
                continue
            case = Case(config_id=s.cfg.id, concurrency=c)
            cases.append(case_result(case, s.cfg, s.trials, s.server.version,
                                     prof.config_hash(s.cfg)).model_copy(
                update={"confirmation": s.confirmation}))
            paired[case.id] = case_result(n_case, nospec.cfg, s.paired, nospec.server.version,
                                          prof.config_hash(nospec.cfg))
        return ScenarioResult(kind="prefix_cache", cases=cases, paired_nospec=paired)

    def _judge(self, prof: Profile, spec: PrefixCacheScenario,
               result: ScenarioResult) -> dict[str, list[GateCheck]]:
        return prefix_cache_checks(result, spec, self._gain_floors(prof, result), prof.compare)

    # -- segmented workloads: context length, categories -----------------------------

    def _segments(self, kind: str, spec: SegmentedScenario) -> list[Segment]:
        if isinstance(spec, ContextLengthScenario):
            workload = (load_prompts(self.profile, self.dataset)
                        if spec.text == "workload" else None)
            return context_length_segments(spec, workload)
        assert isinstance(spec, CategoriesScenario)
        path = Path(spec.dataset).expanduser()
        if not path.is_absolute() and self.profile.source is not None:
            path = self.profile.source.parent / path
        return category_segments(spec, path)

    def _pool_name(self, kind: str) -> str:
        """The segmented scenarios share one pool; one with serve_args of its own has its
        own (its servers are other servers)."""
        spec = getattr(self.profile.scenarios, kind)
        return kind if spec.serve_args else SEGMENTED_POOL

    def _segmented_pool(self, kind: str) -> ServerPool:
        name = self._pool_name(kind)
        pool = self.pools.get(name)
        if pool is None:
            spec = getattr(self.profile.scenarios, kind)
            prof = self.profile.model_copy(
                update={"serve_args": [*self.profile.serve_args, *spec.serve_args]})
            view = self.observer or LineObserver(self.say)
            logs = self.run_dir / "scenarios" / name / "servers"
            pool = ServerPool(prof, self.run_dir, self.models_cache, say=self.say,
                              observer=view, clock=self.clock, log_dir=logs)
            self.pools[name] = pool
        return pool

    def _pool_done(self, name: str) -> bool:
        """Whether every selected segmented scenario of the pool has been measured (its
        servers may stop)."""
        kinds = [k for k in SEGMENTED_KINDS if getattr(self.profile.scenarios, k) is not None
                 and (not self.wanted or k in self.wanted) and self._pool_name(k) == name]
        return all(k in self.results or k in self.errors for k in kinds)

    def _segmented(self, kind: str) -> None:
        spec = getattr(self.profile.scenarios, kind)
        assert isinstance(spec, SegmentedScenario)
        errors = self.errors.setdefault(kind, {})
        try:
            segments = self._segments(kind, spec)
        except DatasetError as exc:  # the dataset or the workload's file
            errors["*"] = str(exc)
            return
        pool = self._segmented_pool(kind)
        try:
            self._measure_segmented(kind, spec, segments, pool, errors)
        finally:
            if self._pool_done(self._pool_name(kind)):
                pool.stop_all()

    def _measure_segmented(self, kind: str, spec: SegmentedScenario, segments: list[Segment],
                           pool: ServerPool, errors: dict[str, str]) -> None:
        prof = segmented_profile(self.profile, spec)
        view = self.observer or LineObserver(self.say)
        current: list[list[str]] = [segments[0].prompts]
        runner = TrialRunner(prof, pool, view, lambda: current[0], self.max_outside_cores,
                             busy_wait_s=self.busy_wait_s, say=self.say, clock=self.clock)
        c = spec.concurrency
        repeats = spec.repeats or self.repeats
        nospec_cfg = prof.nospec
        assert nospec_cfg is not None  # the profile refuses the scenario without one
        word = "bucket" if kind == "context_length" else "category"
        self.say(f"specperf: scenario {kind}: {len(segments)} {word} segment(s) "
                 f"({', '.join(g.name for g in segments)}), {spec.requests} requests a trial, "
                 f"{repeats} trial(s) per {word} per config at concurrency {c} (server logs: "
                 f"{pool.log_dir})")
        try:
            nospec = _SegmentedConfig(nospec_cfg, pool.server_for(nospec_cfg.id))
        except (ServerError, RuntimeError) as exc:
            errors["*"] = f"the no-spec reference {nospec_cfg.id!r} could not be measured: {exc}"
            return
        specs: list[_SegmentedConfig] = []
        wanted = self.wanted.get(kind)
        for cfg in prof.server_configs:
            if not cfg.is_spec or (wanted is not None and cfg.id not in wanted):
                continue
            run = _SegmentedConfig(cfg)
            try:
                run.server = pool.server_for(cfg.id)
            except (ServerError, RuntimeError) as exc:
                errors[Case(config_id=cfg.id, concurrency=c).id] = str(exc)
                continue
            specs.append(run)

        def rounds(configs: list[_SegmentedConfig], first: int, n: int = repeats) -> None:
            for r in range(first, first + n):
                for k, segment in enumerate(segments):
                    current[0] = segment.prompts
                    self._segment_round(runner, segment, r * len(segments) + k, nospec,
                                        configs, c)

        try:
            rounds(specs, 0)
            for s in specs if prof.compare.confirm_on_fresh_server else []:
                self._confirm_segmented(kind, prof, spec, pool, segments, nospec, s, c,
                                        rounds)
            result = self._segmented_result(kind, prof, segments, nospec, specs, c)
            checks = self._judge_segmented(prof, spec, result)
        except (ServerError, RuntimeError) as exc:
            errors["*"] = f"measuring failed: {exc}"
            return
        self.results[kind] = result
        self.checks[kind] = checks

    def _confirm_segmented(self, kind: str, prof: Profile, spec: SegmentedScenario,
                           pool: ServerPool,
                           segments: list[Segment], nospec: _SegmentedConfig,
                           s: _SegmentedConfig, c: int,
                           rounds: Callable[[list[_SegmentedConfig], int, int], None]) -> None:
        """:meth:`_confirm` for one spec config of a segmented scenario: a round is every
        segment's trial once (each with its new paired no-spec trial)."""
        case_id = Case(config_id=s.cfg.id, concurrency=c).id

        def restart() -> None:
            s.server = pool.restart(s.cfg.id)
            s.trials = {g: [t.model_copy(update={"server_start": 0}) for t in ts]
                        for g, ts in s.trials.items()}
            s.start, s.warm = 1, False

        def judge() -> list[GateCheck]:
            # This config's case alone: the others' checks do not depend on its trials.
            result = self._segmented_result(kind, prof, segments, nospec, [s], c)
            return self._judge_segmented(prof, spec, result).get(case_id, [])

        # The fresh start's rounds follow the first start's (each segment's trial count).
        self._confirm(kind, s, c, len(segments), restart=restart,
                      run_rounds=lambda n: rounds([s], max(map(len, s.trials.values())), n),
                      judge=judge, trials=lambda: sum(len(ts) for ts in s.trials.values()))

    def _segment_round(self, runner: TrialRunner, segment: Segment, index: int,
                       nospec: _SegmentedConfig, specs: list[_SegmentedConfig], c: int) -> None:
        """The no-spec server's trial on the segment's prompts, then every spec server's;
        a server's first trial warms it up first (before its counters are read)."""
        assert nospec.server is not None
        trial = runner.trial(nospec.server, c, index, warmup=not nospec.warm)
        nospec.warm = True
        nospec.trials.setdefault(segment.name, []).append(trial)
        for s in specs:
            assert s.server is not None
            s.paired.setdefault(segment.name, []).append(trial)
            t = runner.trial(s.server, c, index, warmup=not s.warm)
            s.warm = True
            s.trials.setdefault(segment.name, []).append(
                t if s.start is None else t.model_copy(update={"server_start": s.start}))

    def _segmented_result(self, kind: str, prof: Profile, segments: list[Segment],
                          nospec: _SegmentedConfig, specs: list[_SegmentedConfig],
                          c: int) -> ScenarioResult:
        """Per segment each config's case; and each config's case over all segments."""
        assert nospec.server is not None
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
        return ScenarioResult(kind=kind, cases=cases, paired_nospec=paired_all,  # type: ignore[arg-type]
                              segments=out)

    def _gain_floors(self, prof: Profile, result: ScenarioResult) -> dict[str, float | None]:
        floors: dict[str, float | None] = {}
        for cr in result.cases:
            cfg = prof.config(cr.case.config_id)
            g = prof.gates_for(cfg).tpot_gain
            floors[cr.case.id] = (g.ratio_at(cr.case.concurrency)
                                  if cfg.is_spec and g is not None
                                  and cr.case.concurrency <= g.max_concurrency else None)
        return floors

    def _judge_segmented(self, prof: Profile, spec: SegmentedScenario,
                         result: ScenarioResult) -> dict[str, list[GateCheck]]:
        return segmented_checks(result, spec, self._gain_floors(prof, result), prof.compare)

"""The prefix-caching scenario (``[scenarios.prefix_cache]``), measured on its own servers.

Every prompt is one shared prefix — a system prompt and a few-shot block — and a question
of its own. The servers start from a copy of the profile with prefix caching on
(:func:`prefix_cache_profile`); their logs go to ``<run dir>/scenarios/prefix_cache/``.
Every server first gets a warm-up round (its own questions) that puts the prefix in its
cache, then trials in rounds: each round sends new questions to the no-spec server and
then to each spec server, so both sides of the paired gain see the same prompts and the
same drift, and no server sees a prompt twice (a repeated prompt would hit the cache
whole). Each trial keeps the deltas of vLLM's prefix-cache counters. A spec case whose
gain is wholly below its floor is measured again on a fresh server before it may FAIL
([compare] confirm_on_fresh_server, :meth:`ScenarioSetting.confirm
<specperf.engine.scenario_setting.ScenarioSetting.confirm>`), as in the main matrix. The
servers are stopped when the scenario is done.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specperf.analysis.aggregate import case_result
from specperf.analysis.scenarios import prefix_cache_checks
from specperf.config.profile import Profile
from specperf.config.scenarios import PREFIX_CACHE_OFF, PREFIX_CACHE_ON, PrefixCacheScenario
from specperf.config.server_configs import ServerConfig
from specperf.engine.clock import WARMUPS
from specperf.engine.load import run_load
from specperf.engine.observer import RunObserver
from specperf.engine.scenario_setting import (
    ScenarioMeasured,
    ScenarioSetting,
    gain_floors,
    started_spec_configs,
)
from specperf.engine.server import ServerError, VllmServer
from specperf.engine.servers import ServerPool
from specperf.engine.tiny import synthetic_text
from specperf.engine.trials import TrialRunner
from specperf.schemas import (
    Case,
    CaseResult,
    FreshServerConfirmation,
    GateCheck,
    ScenarioResult,
    Trial,
)

__all__ = ["PrefixCacheMeasurer", "prefix_cache_profile", "prefix_cache_prompts"]

KIND = "prefix_cache"


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
    """One server config in the scenario: its trials, and (a spec config) the no-spec
    trials paired with them."""

    cfg: ServerConfig
    server: VllmServer | None = None
    trials: list[Trial] = field(default_factory=list)
    paired: list[Trial] = field(default_factory=list)
    error: str | None = None
    start: int | None = None
    confirmation: FreshServerConfirmation | None = None


class PrefixCacheMeasurer:
    """Measures the scenario once, on a pool of its own (:attr:`pool`, which the runner
    records for the run file); ``wanted``: the spec configs whose items were selected
    (None: all of them)."""

    def __init__(self, setting: ScenarioSetting, wanted: set[str] | None) -> None:
        self.setting, self.wanted = setting, wanted
        spec = setting.profile.scenarios.prefix_cache
        assert spec is not None
        self.spec = spec
        self.prof = prefix_cache_profile(setting.profile)
        view: RunObserver = setting.view()
        self.pool: ServerPool = setting.pool(self.prof, KIND, view)
        self.prompts = _RoundPrompts(spec)
        self.runner: TrialRunner = setting.trials(self.prof, self.pool, view, self.prompts,
                                                  record_prefix_cache=True)
        self.c = spec.concurrency

    def measure(self, errors: dict[str, str]) -> ScenarioMeasured | None:
        """The scenario's result and checks; None when it could not be measured, with why
        in ``errors`` (per case id, or ``"*"`` for the whole scenario). Its servers are
        stopped when it returns."""
        spec, prof, pool, c = self.spec, self.prof, self.pool, self.c
        repeats = spec.repeats or self.setting.repeats
        nospec_cfg = prof.nospec
        assert nospec_cfg is not None  # the profile refuses the scenario without one
        self.setting.say(
            f"specperf: scenario prefix_cache: a {spec.prefix_words}-word shared prefix "
            f"+ {spec.question_words}-word questions, {spec.requests} requests a trial, "
            f"{repeats} trial(s) per config at concurrency {c}, prefix caching on "
            f"(server logs: {pool.log_dir})")
        try:
            nospec = _Config(nospec_cfg, self._started(nospec_cfg.id))
        except (ServerError, RuntimeError) as exc:
            errors["*"] = f"the no-spec reference {nospec_cfg.id!r} could not be measured: {exc}"
            pool.stop_all()
            return None
        specs = started_spec_configs(prof, self.wanted, c, _Config, self._started, errors)
        try:
            for r in range(repeats):
                self._round(r, nospec, specs)
            for s in specs if prof.compare.confirm_on_fresh_server else []:
                self._confirm(nospec, s)
            result = self._result(nospec, specs)
            checks = self._judge(result)
        except (ServerError, RuntimeError) as exc:
            errors["*"] = f"measuring failed: {exc}"
            return None
        finally:
            pool.stop_all()
        return result, checks

    def _started(self, config_id: str) -> VllmServer:
        """The config's server, started and warmed: a round of its own questions puts the
        shared prefix in its cache before any trial reads the counters."""
        pool = self.pool
        server = pool.server_for(config_id)
        model = server.model
        p = pool.profile
        n = max(p.load.warmup_requests, 1)
        with self.setting.clock.phase(WARMUPS):
            run_load(pool.load_url(server), model, prefix_cache_prompts(self.spec, -1, n),
                     p.sampling, self.c, 0, warmup_requests=n,
                     request_timeout_s=p.load.request_timeout_s)
        return server

    def _round(self, index: int, nospec: _Config, specs: list[_Config]) -> None:
        """One trial of the no-spec server and of every spec server, on round ``index``'s
        prompts."""
        assert nospec.server is not None
        c = self.c
        self.prompts.start(index)
        trial = self.runner.trial(nospec.server, c, index, warmup=False)
        nospec.trials.append(trial)
        for s in specs:
            assert s.server is not None
            s.paired.append(trial)
            self.prompts.start(index)
            t = self.runner.trial(s.server, c, index, warmup=False)
            s.trials.append(t if s.start is None else t.model_copy(update={"server_start": s.start}))

    def _confirm(self, nospec: _Config, s: _Config) -> None:
        """The setting's confirmation for one spec config: its fresh server is warmed (the
        shared prefix in its cache) before its rounds, which get new paired no-spec trials
        and new questions."""
        case_id = Case(config_id=s.cfg.id, concurrency=self.c).id

        def restart() -> None:
            self.pool.restart(s.cfg.id)
            s.server = self._started(s.cfg.id)
            s.trials = [t.model_copy(update={"server_start": 0}) for t in s.trials]
            s.start = 1

        def run_rounds(n: int) -> None:
            first = len(s.trials)
            for r in range(n):
                self._round(first + r, nospec, [s])

        def judge() -> list[GateCheck]:
            # This config's case alone: the others' checks do not depend on its trials.
            return self._judge(self._result(nospec, [s])).get(case_id, [])

        s.confirmation = self.setting.confirm(KIND, s.cfg.id, self.c, 1, restart=restart,
                                              run_rounds=run_rounds, judge=judge,
                                              trials=lambda: len(s.trials))

    def _result(self, nospec: _Config, specs: list[_Config]) -> ScenarioResult:
        assert nospec.server is not None
        prof, c = self.prof, self.c
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
        return ScenarioResult(kind=KIND, cases=cases, paired_nospec=paired)

    def _judge(self, result: ScenarioResult) -> dict[str, list[GateCheck]]:
        return prefix_cache_checks(result, self.spec, gain_floors(self.prof, result),
                                   self.prof.compare)

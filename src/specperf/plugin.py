"""The pytest plugin: options, the case matrix, item order, server lifetimes, reporting.

Perf tests ask for the `perf_case` fixture and say which cases they apply to with
`@pytest.mark.perf_cases("<kind>")`; the plugin parametrises them from the profile, so
test code holds no numbers. Items are ordered server config by server config (no-spec
first), and each server is stopped right after the last item that needs it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specperf.config.profile import ProfileError
from specperf.engine.server import stop_all as stop_all_servers
from specperf.engine.session import (
    KINDS,
    RETRY_BATCH,
    RETRY_CAP_FACTOR,
    PerfOptions,
    PerfSession,
    default_run_dir,
)
from specperf.report.progress import MODES as PROGRESS_MODES
from specperf.report.progress import RunProgress, make_progress
from specperf.schemas import Case
from specperf.store.baselines import write_baseline
from specperf.store.files import BaselineError
from specperf.store.provenance import gpu_present

_KEY = pytest.StashKey[PerfSession]()
_ITEM_KIND = pytest.StashKey[str]()
_LAST_USE = pytest.StashKey[dict[str, int]]()

DEFAULT_CPU_PROFILE = "cpu-tiny"
DEFAULT_GPU_PROFILE = "a100-qwen3-32b"


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("specperf", "speculative-decoding performance suite")
    g.addoption("--perf-profile", default=None,
                help="profile name (perf_tests/profiles/NAME.toml) or path; default: "
                     f"{DEFAULT_CPU_PROFILE} without a GPU, {DEFAULT_GPU_PROFILE} with one")
    g.addoption("--perf-run-dir", default=None,
                help="where server logs, caches and the run file go (default .specperf/runs/…)")
    g.addoption("--perf-json", default=None, help="also write the run file to this path")
    g.addoption("--perf-baselines", default=None,
                help="baselines directory (default: <rootdir>/baselines)")
    g.addoption("--perf-update-baselines", action="store_true",
                help="write this run as the baseline for this profile and hardware")
    g.addoption("--perf-force", action="store_true",
                help="with --perf-update-baselines: accept a run that has failures")
    g.addoption("--perf-repeats", type=int, default=None, help="trials per case (profile: repeats)")
    g.addoption("--perf-dataset", default=None, help="ShareGPT JSON path (overrides the profile)")
    g.addoption("--perf-max-outside-cores", type=float, default=None, metavar="X",
                help="contention guard: measure a trial again when other processes used more "
                     "than X cores meanwhile (profile: load.max_outside_cores, default 0.25; "
                     "0 or negative turns the guard off)")
    g.addoption("--perf-shard", default=None, metavar="I/N",
                help="run shard I of N (1-based): server configs are split round-robin, never "
                     "a config's cases; the no-spec config's own tests run in shard 1, and every "
                     "shard measures it as the paired reference for TPOT gain")
    g.addoption("--perf-models-cache", default=None,
                help="where generated tiny models are cached (default .specperf/models)")
    g.addoption("--perf-progress", default="auto", choices=PROGRESS_MODES,
                help="while a run goes: `rich` shows a live display (server start clock, "
                     "trials, requests, cases), `plain` one line per server start and per "
                     "case; `auto` (default): rich on an interactive terminal, plain in CI "
                     "logs, pipes, with NO_COLOR or TERM=dumb")
    g.addoption("--perf-retry-inconclusive", nargs="?", const=0, default=None,
                type=_retry_cap, metavar="CAP",
                help="compare each case with the baseline while its server is up, and give a "
                     f"case with an INCONCLUSIVE metric {RETRY_BATCH} more trials at a time "
                     "until decided or at CAP trials (default "
                     f"{RETRY_CAP_FACTOR} × repeats); write --perf-retry-inconclusive=CAP")


def _retry_cap(text: str) -> int:
    try:
        cap = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of trials, got {text!r}: write --perf-retry-inconclusive=CAP, "
            "or put the bare option after the test paths") from None
    if cap < 2:
        raise argparse.ArgumentTypeError(f"the cap is the most trials per case, at least 2, "
                                         f"not {cap}")
    return cap


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "perf_cases(kind): parametrise `perf_case` with the profile's cases of this "
        f"kind ({', '.join(KINDS)})"
    )
    rootdir = Path(str(config.rootpath))
    profile = config.getoption("--perf-profile") or os.environ.get("SPECPERF_PROFILE") or (
        DEFAULT_GPU_PROFILE if gpu_present() else DEFAULT_CPU_PROFILE
    )
    run_dir_opt = config.getoption("--perf-run-dir")
    run_dir = Path(run_dir_opt).resolve() if run_dir_opt else default_run_dir(rootdir, profile)
    json_opt = config.getoption("--perf-json")
    base_opt = config.getoption("--perf-baselines")
    models_opt = config.getoption("--perf-models-cache") or os.environ.get("SPECPERF_MODELS_CACHE")
    opts = PerfOptions(
        profile=profile,
        rootdir=rootdir,
        run_dir=run_dir,
        json_path=Path(json_opt).resolve() if json_opt else None,
        baselines_dir=Path(base_opt).resolve() if base_opt else rootdir / "baselines",
        update_baselines=bool(config.getoption("--perf-update-baselines")),
        force=bool(config.getoption("--perf-force")),
        repeats=config.getoption("--perf-repeats"),
        dataset=config.getoption("--perf-dataset") or os.environ.get("SPECPERF_SHAREGPT"),
        models_cache=Path(models_opt).resolve() if models_opt else rootdir / ".specperf" / "models",
        max_outside_cores=config.getoption("--perf-max-outside-cores"),
        retry_inconclusive=config.getoption("--perf-retry-inconclusive"),
    )

    def at_terminal(write: Callable[[Any], None]) -> bool:
        # Progress goes to the terminal as it happens, not into a test's captured
        # output: a server start can take a minute and a user wants to see it. Looked
        # up per call: the terminal reporter registers after this hook runs.
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        capman = config.pluginmanager.get_plugin("capturemanager")
        if reporter is None:  # pragma: no cover - e.g. -p no:terminal
            return False
        if capman is not None:
            with capman.global_and_fixture_disabled():
                write(reporter)
                reporter._tw.flush()  # noqa: SLF001
        else:
            write(reporter)
            reporter._tw.flush()  # noqa: SLF001
        return True

    def say(msg: str) -> None:
        if not at_terminal(lambda reporter: reporter.write_line(msg)):
            print(msg, flush=True)

    def end_pytest_line() -> None:
        # Before the live display takes the terminal: pytest may have written half a line
        # (a test's name, progress dots); end it and flush, so neither overwrites the other.
        at_terminal(lambda reporter: reporter.ensure_newline())

    # Chosen now, while sys.stdout is still the terminal (during tests pytest's capture
    # owns it); the live display keeps its own handle on it.
    progress = make_progress(config.getoption("--perf-progress"), sys.stdout, say,
                             prepare=end_pytest_line,
                             terminal=not config.pluginmanager.is_blocked("terminal"))
    config.stash[_KEY] = PerfSession(options=opts, say=progress.line, progress=progress)
    config.pluginmanager.register(_ProgressOff(progress), "specperf-progress")
    # SIGTERM (CI cancelling a job) takes the same path as Ctrl-C, so servers stop. Ctrl-C
    # itself gets the same handler, so it raises KeyboardInterrupt where the run is rather
    # than going through asyncio.run's (3.11+) cancel-the-main-task path, which depends on
    # every await in the load client letting the cancellation through. A SIGINT the
    # parent set to ignored (a background job of a shell) stays ignored.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _signal_to_interrupt)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _signal_to_interrupt)


class _ProgressOff:
    """Takes the live display off the terminal whenever pytest is about to write: a test's
    outcome, Ctrl-C, the session's end (the next measurement brings it back)."""

    def __init__(self, progress: RunProgress) -> None:
        self.progress = progress

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.progress.pause()

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        self.progress.pause()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.progress.pause()

    @pytest.hookimpl(tryfirst=True)
    def pytest_internalerror(self, excrepr: Any, excinfo: Any) -> None:
        self.progress.pause()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.progress.close()


def _signal_to_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def perf_session(config: pytest.Config) -> PerfSession:
    return config.stash[_KEY]


def pytest_collection(session: pytest.Session) -> None:
    """Validate the profile once, before collecting, when the perf suite is selected, so a
    bad profile is one clear usage error instead of a collection error per module."""
    perf_dir = Path(str(session.config.rootpath)) / "perf_tests"
    args = [Path(a.split("::", 1)[0]).resolve() for a in session.config.args]
    if any(a == perf_dir or perf_dir in a.parents for a in args):
        try:
            _ = perf_session(session.config).profile
        except ProfileError as exc:
            raise pytest.UsageError(str(exc)) from None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "perf_case" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("perf_cases")
    if marker is None or not marker.args:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: a test using `perf_case` needs "
            f"@pytest.mark.perf_cases(KIND), KIND one of {KINDS}"
        )
    kind = marker.args[0]
    session = perf_session(metafunc.config)
    try:
        cases = session.cases_for(kind)
    except ProfileError as exc:
        # Once for the session, not once per test module as a collection error.
        pytest.exit(str(exc), returncode=pytest.ExitCode.USAGE_ERROR)
    metafunc.parametrize("perf_case", cases, ids=[c.id for c in cases])


@pytest.fixture(scope="session")
def perf(request: pytest.FixtureRequest) -> PerfSession:
    return perf_session(request.config)


def _item_case(item: pytest.Item) -> tuple[str, Case] | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None or "perf_case" not in callspec.params:
        return None
    marker = item.get_closest_marker("perf_cases")
    if marker is None:
        return None
    return marker.args[0], callspec.params["perf_case"]


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    perf_items = [(i, _item_case(i)) for i in items]
    if not any(kc for _, kc in perf_items):
        return
    ps = perf_session(config)
    order = {c.id: n for n, c in enumerate(ps.ordered_configs())}

    def key(pair: tuple[pytest.Item, tuple[str, Case] | None]) -> tuple[int, int, int, int]:
        _, kc = pair
        if kc is None:
            return (0, 0, 0, 0)
        kind, case = kc
        return (1, order[case.config_id], case.concurrency, KINDS.index(kind))

    perf_items.sort(key=key)  # stable: non-perf items keep their order, first
    shard = config.getoption("--perf-shard")
    if shard:
        mine = shard_configs(ps, shard)
        keep = [(i, kc) for i, kc in perf_items if kc is None or kc[1].config_id in mine]
        dropped = [i for i, kc in perf_items if kc is not None and kc[1].config_id not in mine]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        perf_items = keep
    items[:] = [i for i, _ in perf_items]


def shard_configs(ps: PerfSession, shard: str) -> set[str]:
    """The server configs of shard "I/N": round-robin over the spec configs in profile
    order; the no-spec config belongs to shard 1."""
    try:
        i_txt, n_txt = shard.split("/")
        i, n = int(i_txt), int(n_txt)
        if not 1 <= i <= n:
            raise ValueError
    except ValueError:
        raise pytest.UsageError(
            f"--perf-shard {shard!r}: expected I/N with 1 ≤ I ≤ N, e.g. --perf-shard 2/4"
        ) from None
    spec = [c.id for c in ps.profile.server_configs if c.is_spec]
    mine = {cid for k, cid in enumerate(spec) if k % n == i - 1}
    if i == 1 and ps.profile.nospec is not None:
        mine.add(ps.profile.nospec.id)
    return mine


def pytest_collection_finish(session: pytest.Session) -> None:
    ps = perf_session(session.config)
    last_use: dict[str, int] = {}
    any_perf = False
    for item in session.items:
        kc = _item_case(item)
        if kc is not None:
            ps.wanted.setdefault(kc[1].config_id, set()).add(kc[1].concurrency)
            if kc[0] == "tpot_gain":
                ps.tpot_gain_wanted.add(kc[1])
    for n, item in enumerate(session.items):
        kc = _item_case(item)
        if kc is None:
            continue
        any_perf = True
        item.stash[_ITEM_KIND] = kc[0]
        for cid in ps.needed_configs(*kc):
            last_use[cid] = n
    session.stash[_LAST_USE] = last_use
    if any_perf and not session.config.getoption("collectonly"):
        try:
            ps.load_baseline()
        except (BaselineError, ProfileError) as exc:
            raise pytest.UsageError(str(exc)) from None
        ps.options.run_dir.mkdir(parents=True, exist_ok=True)
        ps.say(f"specperf: profile {ps.profile.name} ({ps.profile.source}), run dir "
               f"{ps.options.run_dir}")
        ps.say(f"specperf: {ps.baseline_note}")
        ps.view.set_cases_total(sum(len(cs) for cs in ps.wanted.values()))
        cap = ps.retry_cap
        if cap is not None:
            if cap <= ps.repeats:
                raise pytest.UsageError(
                    f"--perf-retry-inconclusive={cap}: the cap is the most trials a case may "
                    f"get, and every case already gets {ps.repeats} (repeats) — give a larger "
                    "cap, or none for the default "
                    f"({RETRY_CAP_FACTOR} × repeats = {RETRY_CAP_FACTOR * ps.repeats})")
            if ps.baseline is None:
                ps.say("specperf: --perf-retry-inconclusive: no baseline, so nothing is "
                       "compared and no case is retried")
            else:
                ps.say(f"specperf: INCONCLUSIVE cases get +{RETRY_BATCH} trials at a time, up "
                       f"to {cap} per case (--perf-retry-inconclusive)")


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    last_use = item.session.stash.get(_LAST_USE, {})
    if not last_use:
        return
    ps = perf_session(item.config)
    idx = item.session.items.index(item)
    for cid, last in last_use.items():
        if last == idx:
            ps.stop_server(cid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    ps = perf_session(session.config)
    ps.stop_all()
    stop_all_servers()  # also any server interrupted while it was still starting
    if not ps.results and not ps.server_errors:
        return
    from specperf.analysis.compare import compare_runs
    from specperf.report import write_all
    from specperf.store.files import atomic_write_text

    run = ps.run_result()
    atomic_write_text(ps.options.run_dir / "run.json", run.model_dump_json(indent=1))
    comparison = None
    if ps.baseline is not None:
        comparison = compare_runs(run, ps.baseline, ps.profile.compare,
                                  baseline_label=str(ps.baseline_path), force=True,
                                  history=ps.baseline_history)
    # Every view of the one result: run.json, report.md/html/txt, plots/*.png, and the
    # GitHub job summary when $GITHUB_STEP_SUMMARY is set. A renderer that fails is a
    # warning; the run's verdict does not depend on it.
    write_all(run, ps.options.run_dir, ps.baseline, comparison=comparison, strict=False)
    if ps.options.json_path is not None:
        atomic_write_text(ps.options.json_path, run.model_dump_json(indent=1))
    session.config.stash[_RUN] = (run, comparison)
    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    if ps.options.update_baselines and os.environ.get("SPECPERF_PROXY_DELAY_MS"):
        ps.say("specperf: fault injection (SPECPERF_PROXY_DELAY_MS) is on — baseline NOT updated")
    elif ps.options.update_baselines and ps.baseline_path is not None:
        regressions = comparison.regressions if comparison is not None else []
        if interrupted:
            ps.say("specperf: run interrupted — baseline NOT updated")
        elif (run.failed or regressions) and not ps.options.force:
            ps.say(f"specperf: {len(run.failed)} failed check(s), {len(regressions)} "
                   "regression(s) against the baseline — baseline NOT updated (use --perf-force "
                   "to accept this run anyway)")
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        elif not run.cases:
            ps.say("specperf: nothing was measured — baseline NOT updated")
        else:
            new = ps.updated_baseline(run)
            write_baseline(ps.baseline_path, new)
            ps.say(f"specperf: baseline written: {ps.baseline_path} ({len(new.cases)} cases; "
                   f"previous kept in {ps.baseline_path.parent / 'history'})")


_RUN = pytest.StashKey[Any]()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    stashed = config.stash.get(_RUN, None)
    if stashed is None:
        return
    run, comparison = stashed
    from specperf.report.console import render_comparison, render_run

    terminalreporter.section("specperf")
    tw = terminalreporter._tw  # noqa: SLF001 - pytest's own writer knows width and colour
    width = max(80, min(tw.fullwidth, 160))
    verbose = config.getoption("verbose") > 0
    terminalreporter.write(render_run(run, width=width, color=tw.hasmarkup))
    if comparison is not None:
        terminalreporter.write(render_comparison(comparison, width=width, color=tw.hasmarkup,
                                                 verbose=verbose))
    if any(c.method for c in run.cases):
        from specperf.analysis.advice import advise
        from specperf.report import render_advice

        try:
            advice = advise(run, perf_session(config).baseline)
            terminalreporter.write(render_advice(advice, width=width, color=tw.hasmarkup))
        except Exception as exc:  # noqa: BLE001 - advice explains; it never decides a run
            terminalreporter.write_line(f"specperf: no advice: {type(exc).__name__}: {exc}")
    terminalreporter.write_line(f"run directory: {run.run_dir} (run.json, report.html, "
                                "report.md, plots/)")

"""The pytest plugin: options, the case matrix, item order, server lifetimes, reporting.

Perf tests ask for the `perf_case` fixture and say which cases they apply to with
`@pytest.mark.perf_cases("<kind>")`; the plugin parametrises them from the profile, so
test code holds no numbers. Items are ordered server config by server config (no-spec
first), and each server is stopped right after the last item that needs it.

Each hook hands off in one line to a method of :class:`PerfRun` (one per phase of the
session), which drives the engine's :class:`~specperf.engine.session.PerfSession`. Engine
errors become pytest outcomes in one place, :func:`engine_errors`; the `perf` fixture is
the PerfRun itself (``perf.assert_gate(kind, case)``).

Why one module past 600 lines: pytest's hooks, their PerfRun phases and the option
registration (with its deferred parsing, so a bad value is bad input, exit 2); the
options are the first part to move into a module of their own.
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from specperf.analysis.judge.outcome import worst
from specperf.analysis.outside_load import run_busy_summary
from specperf.analysis.run_report import RunReport, build_run_report
from specperf.config import settings
from specperf.config.exits import Exit
from specperf.config.load import Load
from specperf.config.options import parse_cores, parse_repeats, parse_retry_cap, parse_wait
from specperf.config.profile import ProfileError
from specperf.config.settings import DEFAULT_CPU_PROFILE, DEFAULT_GPU_PROFILE, SettingsError
from specperf.config.shards import parse_shard, shard_config_ids
from specperf.engine.clock import REPORTS, SHUTDOWN
from specperf.engine.engine_release import installed_engine, release_mismatch
from specperf.engine.gpu_lock import GpuLocked, GpuLockUnusable
from specperf.engine.kinds import (
    KINDS,
    TestKind,
    TimeScenarioKind,
    WorkloadScenarioKind,
    kind_named,
    kind_names,
)
from specperf.engine.server import ServerError
from specperf.engine.server import stop_all as stop_all_servers
from specperf.engine.servers import FaultInjection
from specperf.engine.session import (
    RETRY_BATCH,
    RETRY_CAP_FACTOR,
    PerfOptions,
    PerfSession,
    SessionError,
    default_run_dir,
)
from specperf.report import render_advice, write_all
from specperf.report.progress import MODES as PROGRESS_MODES
from specperf.report.progress import RunProgress, make_progress
from specperf.schemas import Case, CaseResult, GateCheck, RunResult
from specperf.store.baselines import update_baseline
from specperf.store.files import BaselineError, atomic_write_text, one_line
from specperf.store.provenance import gpu_present

__all__ = ["PerfRun", "benchmark_extra_info", "engine_errors", "no_cases_reason",
           "shard_configs"]

_KEY = pytest.StashKey["PerfRun"]()
_LAST_USE = pytest.StashKey[dict[str, int]]()


class _BadOption(str):
    """A specperf option value its parser refused, kept until :func:`perf_options` reports
    it as bad input (exit 2, as every ``specperf`` command): refused by argparse itself,
    pytest would exit 4, the number the product keeps for pytest's own options."""


def _checked(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def read(text: str) -> Any:
        try:
            return parse(text)
        except argparse.ArgumentTypeError as exc:
            return _BadOption(str(exc))
    read.__name__ = parse.__name__  # argparse names the type in its own messages
    return read


def _option(config: pytest.Config, name: str) -> Any:
    value = config.getoption(name)
    if isinstance(value, _BadOption):
        raise SessionError(f"{name}: {value}")
    return value


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
    g.addoption("--perf-repeats", type=_checked(parse_repeats), default=None, metavar="N",
                help="trials per case (profile: repeats)")
    g.addoption("--perf-dataset", default=None, help="ShareGPT JSON path (overrides the profile)")
    g.addoption("--perf-max-outside-cores", type=_checked(parse_cores), default=None, metavar="X",
                help="contention guard: measure a trial again when other processes used more "
                     "than X cores meanwhile (profile: load.max_outside_cores, default "
                     f"{Load.model_fields['max_outside_cores'].default:g}; "
                     "0 or negative turns the guard off)")
    g.addoption("--perf-busy-wait", type=_checked(parse_wait), default=None, metavar="SECONDS",
                help="before a trial, wait at most SECONDS for other processes' CPU load to "
                     "fall below the guard's limit (profile: load.busy_wait_s, default "
                     f"{Load.model_fields['busy_wait_s'].default:g}; 0 does not wait)")
    g.addoption("--perf-shard", default=None, metavar="I/N",
                help="run shard I of N (1-based): server configs are split round-robin, never "
                     "a config's cases; the no-spec config's own tests run in shard 1, and every "
                     "shard measures it as the paired reference for TPOT gain")
    g.addoption("--perf-vllm", default=None, metavar="VERSION",
                help="the vLLM release this run must measure: refused before any server "
                     "starts when this Python holds another (`nox -s perf` passes its --vllm, "
                     "else the version pyproject's extra pins)")
    g.addoption("--perf-models-cache", default=None,
                help="where generated tiny models are cached (default .specperf/models)")
    g.addoption("--perf-progress", default="auto", choices=PROGRESS_MODES,
                help="while a run goes: `rich` shows a live display (server start clock, "
                     "trials, requests, cases), `plain` one line per server start and per "
                     "case; `auto` (default): rich on an interactive terminal, plain in CI "
                     "logs, pipes, with NO_COLOR or TERM=dumb")
    g.addoption("--perf-attribute", action="store_true",
                help="measure every spec config with a fixed k also on a pinned-acceptance "
                     "twin (vLLM's synthetic rejection sampler at the baseline's per-position "
                     "rates), so a TPOT change is split into acceptance and step cost "
                     "(docs/attribution.md); a profile sets it per config with "
                     "pinned_acceptance = true")
    g.addoption("--perf-retry-inconclusive", nargs="?", const=0, default=0,
                type=_checked(parse_retry_cap), metavar="CAP",
                help="the most trials a case may get: each case is judged while its server "
                     f"is up, and one with an INCONCLUSIVE check gets {RETRY_BATCH} more "
                     "trials at a time until decided or at CAP (default "
                     f"{RETRY_CAP_FACTOR} × repeats); =off: never more than the repeats")


def perf_run(config: pytest.Config) -> PerfRun:
    return config.stash[_KEY]


class _ExitWatch:
    """What ended the session, for :func:`pytest_cmdline_main`: pytest says 2 both for
    Ctrl-C and for ``pytest.exit(returncode=2)`` (specperf's bad input, found while
    collecting) and for collection errors (bad input too: a test file that does not
    import); only the exception tells them apart."""

    def __init__(self) -> None:
        self.interrupted = False
        self.bad_input = False

    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        if isinstance(excinfo.value, pytest.exit.Exception):
            self.bad_input = excinfo.value.returncode == Exit.BAD_INPUT
        elif not isinstance(excinfo.value, pytest.Session.Interrupted):  # collection errors
            self.interrupted = True


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config) -> Any:
    """The session's exit status in the product's one table (specperf.config.exits):
    bad input that specperf finds after pytest parsed the command line (a profile, a
    baseline, a setting) is 2, as in every ``specperf`` command, not pytest's 4 (left to
    pytest's own parser refusing an option); Ctrl-C and SIGTERM are 130, not 2. With
    SPECPERF_LEGACY_EXIT_CODES=1 the old numbers come back (4 and 2), for one release."""
    watch = _ExitWatch()
    config.pluginmanager.register(watch, "specperf-exit-watch")
    old = settings.legacy_exit_codes()
    try:
        code = yield
    except pytest.UsageError as exc:
        for msg in exc.args:
            print(f"ERROR: {msg}\n", file=sys.stderr)
        return pytest.ExitCode.USAGE_ERROR if old else int(Exit.BAD_INPUT)
    if code == pytest.ExitCode.INTERRUPTED and watch.interrupted:
        code = Exit.INTERRUPTED
    if old:
        if code == Exit.INTERRUPTED:
            return pytest.ExitCode.INTERRUPTED
        if code == Exit.BAD_INPUT and watch.bad_input:
            return pytest.ExitCode.USAGE_ERROR
    return code


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "perf_cases(kind): parametrise `perf_case` with the profile's cases of this "
        f"kind ({', '.join(kind_names())})"
    )
    # pytest-benchmark's table would time each test's call of PerfSession.measure: the
    # first case of a server measures them all (84 s for nospec-c1 on cpu-tiny), the others
    # read the result (7 µs) — figures that look like latencies and mean nothing. The
    # case's real figures go to --benchmark-json in extra_info either way; the table is
    # shown only when --benchmark-verbose asks. (pytest-benchmark reads the option in its
    # own pytest_configure, which runs last.)
    if (config.getoption("benchmark_quiet", None) is False
            and not config.getoption("benchmark_verbose", False)):
        config.option.benchmark_quiet = True
    with engine_errors():
        opts = perf_options(config)
    progress = terminal_progress(config)
    config.stash[_KEY] = PerfRun(PerfSession(options=opts, say=progress.line, progress=progress),
                                 progress)
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


def _signal_to_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_collection(session: pytest.Session) -> None:
    perf_run(session.config).check_profile(session)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    perf_run(metafunc.config).parametrize(metafunc)


@pytest.fixture(scope="session")
def perf(request: pytest.FixtureRequest) -> PerfRun:
    return perf_run(request.config)


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    perf_run(config).order_items(config, items)


def pytest_collection_finish(session: pytest.Session) -> None:
    perf_run(session.config).prepare(session)


def pytest_runtest_setup(item: pytest.Item) -> None:
    perf_run(item.config).current_item = item


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    perf_run(item.config).after_item(item)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    perf_run(session.config).finish(session, exitstatus)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    perf_run(config).summary(terminalreporter, config)


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


@contextmanager
def engine_errors(case: Case | None = None, *, exit_on_usage: bool = False) -> Iterator[None]:
    """The one place where engine errors become pytest outcomes.

    A bad profile, baseline file, setting or option is a usage error (``exit_on_usage``:
    exit the session now, once, instead of an error per collected module). Within a test
    (``case``), a server that did not start or a case that could not be measured fails
    it in plain words, without a traceback."""
    try:
        yield
    except GpuLocked as exc:
        pytest.exit(str(exc), returncode=int(Exit.GPU_LOCKED))
    except GpuLockUnusable as exc:  # a lock path that is no lock file: a bad setting
        pytest.exit(str(exc), returncode=int(Exit.BAD_INPUT))
    except (ProfileError, BaselineError, SessionError) as exc:
        if exit_on_usage:
            pytest.exit(str(exc), returncode=int(Exit.BAD_INPUT))
        raise pytest.UsageError(str(exc)) from None
    except ServerError as exc:
        if case is None:
            raise
        pytest.fail(f"case {case.id}: {exc}", pytrace=False)
    except RuntimeError as exc:  # MeasureError, and any other failure to measure
        if case is None:
            raise
        pytest.fail(str(exc), pytrace=False)


#: Where an item's undecided outcome travels from the test to its report (user_properties).
OUTCOME_PROPERTY = "specperf_outcome"

#: How pytest shows a test whose checks are undecided: (category, letter, word). The test
#: itself passed — nothing failed — and the category keeps it out of "passed".
UNDECIDED_STATUS = {
    "inconclusive": ("inconclusive", "I", "INCONCLUSIVE"),
    "busy": ("not measured (machine busy)", "B", "NOT MEASURED: MACHINE BUSY"),
}


def gate_outcome(checks: list[GateCheck], item: pytest.Item | None = None) -> None:
    """A test's checks as its outcome: any FAIL fails it; else a check not measured on a
    busy machine or INCONCLUSIVE marks it undecided (shown as such, not a failure); all
    skipped skips it."""
    failed = [c for c in checks if c.outcome == "fail"]
    if failed:
        pytest.fail("\n".join(c.message for c in failed), pytrace=False)
    if checks and all(c.outcome == "skip" for c in checks):
        pytest.skip(checks[0].message)
    outcome = worst(c.outcome for c in checks)
    if outcome in UNDECIDED_STATUS and item is not None:
        item.user_properties.append((OUTCOME_PROPERTY, outcome))


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config
                             ) -> tuple[str, str, str] | None:
    if report.when != "call" or not report.passed:
        return None
    outcome = dict(report.user_properties).get(OUTCOME_PROPERTY)
    return UNDECIDED_STATUS.get(outcome) if isinstance(outcome, str) else None


def perf_options(config: pytest.Config) -> PerfOptions:
    """The run's options: command line first, then the environment (settings), then
    the defaults."""
    try:
        env = settings.current()
    except SettingsError as exc:  # a malformed variable: the message names it
        raise SessionError(str(exc)) from None
    rootdir = Path(str(config.rootpath))
    profile = config.getoption("--perf-profile") or env.profile or (
        DEFAULT_GPU_PROFILE if gpu_present() else DEFAULT_CPU_PROFILE
    )
    run_dir_opt = config.getoption("--perf-run-dir")
    json_opt = config.getoption("--perf-json")
    base_opt = config.getoption("--perf-baselines")
    models_opt = config.getoption("--perf-models-cache") or env.models_cache
    fault = (FaultInjection(env.proxy_delay_ms or 0.0, tuple(env.proxy_config_ids()),
                            growth_ms_per_s=env.proxy_delay_growth_ms or 0.0,
                            stretch=env.proxy_stretch or 0.0)
             if env.fault_injection else None)
    return PerfOptions(
        profile=profile,
        rootdir=rootdir,
        run_dir=Path(run_dir_opt).resolve() if run_dir_opt else default_run_dir(rootdir, profile),
        json_path=Path(json_opt).resolve() if json_opt else None,
        baselines_dir=Path(base_opt).resolve() if base_opt else rootdir / "baselines",
        update_baselines=bool(config.getoption("--perf-update-baselines")),
        force=bool(config.getoption("--perf-force")),
        repeats=_option(config, "--perf-repeats"),
        dataset=config.getoption("--perf-dataset") or env.sharegpt,
        models_cache=Path(models_opt).resolve() if models_opt else rootdir / ".specperf" / "models",
        max_outside_cores=_option(config, "--perf-max-outside-cores"),
        busy_wait_s=_option(config, "--perf-busy-wait"),
        retry_inconclusive=_option(config, "--perf-retry-inconclusive"),
        fault=fault,
        attribute=bool(config.getoption("--perf-attribute")),
    )


def terminal_progress(config: pytest.Config) -> RunProgress:
    """The run's progress display, writing to the terminal past pytest's capture."""

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
    return make_progress(config.getoption("--perf-progress"), sys.stdout, say,
                         prepare=end_pytest_line,
                         terminal=not config.pluginmanager.is_blocked("terminal"))


class PerfRun:
    """The plugin's side of a perf session: one method per phase, and what a perf test
    gets as the `perf` fixture."""

    def __init__(self, session: PerfSession, progress: RunProgress) -> None:
        self.session = session
        self.progress = progress
        self.report: RunReport | None = None  # once the run's reports are written
        #: The test running now: where an undecided outcome is marked for its report.
        self.current_item: pytest.Item | None = None

    @property
    def view(self) -> RunProgress:
        return self.progress

    # -- collection -------------------------------------------------------------------

    def check_profile(self, session: pytest.Session) -> None:
        """Validate the profile once, before collecting, when the perf suite is selected,
        so a bad profile is one clear usage error instead of a collection error per module."""
        perf_dir = Path(str(session.config.rootpath)) / "perf_tests"
        args = [Path(a.split("::", 1)[0]).resolve() for a in session.config.args]
        if any(a == perf_dir or perf_dir in a.parents for a in args):
            with engine_errors():
                self.validate(session.config)

    def validate(self, config: pytest.Config) -> None:
        """The profile, the options against it and — where vLLM is installed and the run
        will measure — its speculative configs against vLLM's own; raises ProfileError or
        SessionError naming the file or option."""
        ps = self.session
        from_env = (config.getoption("--perf-profile") is None
                    and ps.options.profile == settings.current().profile)
        try:
            profile = ps.profile
        except ProfileError as exc:
            if from_env:
                raise ProfileError(f"environment variable SPECPERF_PROFILE={ps.options.profile!r}:"
                                   f" {exc} — or unset it for the default profile") from None
            raise
        ps.check_options()
        wanted = config.getoption("--perf-vllm")
        if wanted:  # before any server, and before vLLM's own config is imported
            problem = release_mismatch(wanted, installed_engine(), sys.executable)
            if problem:
                raise SessionError(problem)
        # Importing vLLM's config takes seconds (torch); `--co`, which lists the matrix
        # (golden files, CI's shard planning), keeps the pure checks only.
        if config.getoption("collectonly") or importlib.util.find_spec("vllm") is None:
            return
        from specperf.engine.spec_validation import check_profile_specs

        check_profile_specs(profile)

    def parametrize(self, metafunc: pytest.Metafunc) -> None:
        if "perf_case" not in metafunc.fixturenames:
            return
        marker = metafunc.definition.get_closest_marker("perf_cases")
        if marker is None or not marker.args:
            raise pytest.UsageError(
                f"{metafunc.definition.nodeid}: a test using `perf_case` needs "
                f"@pytest.mark.perf_cases(KIND), KIND one of {kind_names()}"
            )
        kind = kind_named(marker.args[0])
        with engine_errors(exit_on_usage=True):
            cases = self.session.plan.cases_for(kind)
        if not cases:
            # A valid profile with no case of this kind (no [gates.budgets], concurrencies
            # below its min_concurrency, ...): one item, skipped with the reason — as pytest
            # does for an empty parameter set, but saying why, and with no case to measure.
            reason = no_cases_reason(self.session.profile.name, kind)
            metafunc.parametrize("perf_case", [pytest.param(None, id="no-cases",
                                                            marks=pytest.mark.skip(reason=reason))])
            return
        metafunc.parametrize("perf_case", cases, ids=[c.id for c in cases])

    def order_items(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        perf_items = [(i, _item_case(i)) for i in items]
        if not any(kc for _, kc in perf_items):
            return
        ps = self.session
        order = {c.id: n for n, c in enumerate(ps.plan.ordered_configs())}

        def key(pair: tuple[pytest.Item, tuple[TestKind, Case] | None]
                ) -> tuple[int, int, int, int]:
            _, kc = pair
            if kc is None:
                return (0, 0, 0, 0)
            kind, case = kc
            rank = KINDS.index(kind)  # the registry's run order
            if isinstance(kind, TimeScenarioKind):  # on the config's own server, after its cases
                return (1, order[case.config_id], case.concurrency, rank)
            if isinstance(kind, WorkloadScenarioKind):  # after the matrix, on their own servers
                return (3, rank, order[case.config_id], case.concurrency)
            # After the matrix (engine.after_matrix): the judged items after every config's
            # cases, so a flag is measured again on a fresh server minutes after it was raised.
            group = 2 if ps.after_matrix.waits(kind) else 1
            return (group, order[case.config_id], case.concurrency, rank)

        perf_items.sort(key=key)  # stable: non-perf items keep their order, first
        shard = config.getoption("--perf-shard")
        if shard:
            mine = shard_configs(ps, shard)
            first = int(shard.split("/")[0]) == 1

            def in_shard(item: pytest.Item, kc: tuple[TestKind, Case] | None) -> bool:
                # A skipped no-cases item measures nothing: shard 1 has it, so the shards
                # still partition the collected items.
                if kc is None:
                    return first or not _no_cases_item(item)
                return kc[1].config_id in mine

            keep = [(i, kc) for i, kc in perf_items if in_shard(i, kc)]
            dropped = [i for i, kc in perf_items if not in_shard(i, kc)]
            if dropped:
                config.hook.pytest_deselected(items=dropped)
            perf_items = keep
        items[:] = [i for i, _ in perf_items]

    def prepare(self, session: pytest.Session) -> None:
        """After collection: what will be measured, when each server may stop, and —
        unless only collecting — the baseline and the run's header lines."""
        ps = self.session
        selected = [(n, kc) for n, item in enumerate(session.items)
                    if (kc := _item_case(item)) is not None]
        ps.plan.select(kc for _, kc in selected)
        last_use: dict[str, int] = {}
        for n, kc in selected:
            for cid in ps.plan.needed_configs(*kc):
                last_use[cid] = n
        session.stash[_LAST_USE] = last_use
        if selected and not session.config.getoption("collectonly"):
            with engine_errors():
                ps.begin()

    # -- running ------------------------------------------------------------------------

    def assert_gate(self, kind: str, case: Case, benchmark: Any = None) -> None:
        """What every perf test calls: measure, check, and fail/skip/mark undecided in
        plain words."""
        ps = self.session
        with engine_errors(case):
            if benchmark is not None:
                result = benchmark.pedantic(ps.measure, args=(case,), rounds=1, iterations=1)
                benchmark.extra_info.update(benchmark_extra_info(result))
            checks = ps.evaluate(kind_named(kind), case)
        gate_outcome(checks, self.current_item)

    def after_item(self, item: pytest.Item) -> None:
        """Stop each server right after the last item that needs it."""
        last_use = item.session.stash.get(_LAST_USE, {})
        if not last_use:
            return
        idx = item.session.items.index(item)
        for cid, last in last_use.items():
            if last == idx:
                self.session.stop_server(cid)

    # -- the end ------------------------------------------------------------------------

    def finish(self, session: pytest.Session, exitstatus: int) -> None:
        """Stop the servers; write the run file and every report once; update the baseline
        when asked and the run allows it."""
        ps = self.session
        ps.abandon_pending(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
        with ps.clock.phase(SHUTDOWN):
            try:
                ps.stop_all()
            finally:
                stop_all_servers()  # also any server interrupted while it was still starting
        if (not ps.results and not ps.server_errors and not ps.scenario_results
                and not ps.time_scenarios_ran):
            return
        with ps.clock.phase(REPORTS):
            run = ps.run_result()
            ctx = ps.baselines
            # The run's report, built once: its comparison with the baseline, its advice
            # (advice that fails is said, never fatal: it explains, the checks decide) and
            # its exit status, which every view below shows.
            report = build_run_report(run, ctx.baseline, rules=ps.profile.compare,
                                      history=ctx.history,
                                      baseline_label=None if ctx.path is None else str(ctx.path),
                                      force=True, strict=False)
            # Every view of the one result: run.json, report.md/html/txt, plots/*.png, and
            # the GitHub job summary when $GITHUB_STEP_SUMMARY is set. A renderer that fails
            # is a warning; the run's verdict does not depend on it. The run file gets the
            # time breakdown once the other views are rendered (their time included).
            stamped: list[RunResult] = []

            def stamp(result: RunResult) -> RunResult:
                stamped.append(ps.with_time_breakdown(result))
                return stamped[-1]

            write_all(report, ps.options.run_dir, strict=False, stamp=stamp)
            run = stamped[-1] if stamped else ps.with_time_breakdown(run)
        comparison = report.comparison
        if ps.options.json_path is not None:
            try:
                atomic_write_text(ps.options.json_path, run.model_dump_json(indent=1))
            except OSError as exc:  # disk full, read-only: one line, not an INTERNALERROR
                ps.say("specperf: could not write the run file: "
                       f"{_os_error(exc, ps.options.json_path)}")
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        self.report = replace(report, run=run)
        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        if session.exitstatus == pytest.ExitCode.OK:
            # Nothing failed: undecided checks still get their own status (6 inconclusive,
            # 7 machine busy; docs/how-a-run-works.md), from the one function that
            # `specperf compare`, merge and the upgrade A/B exit by (the report's).
            session.exitstatus = report.exit_status
        fault = ps.options.fault
        if ps.options.update_baselines and fault is not None and not fault.is_reference:
            ps.say("specperf: fault injection (SPECPERF_PROXY_*) is on — baseline NOT updated")
        elif ps.options.update_baselines and ctx.path is not None:
            regressions = comparison.regressions if comparison is not None else []
            if interrupted:
                ps.say("specperf: run interrupted — baseline NOT updated")
            elif (run.failed or regressions) and not ps.options.force:
                ps.say(f"specperf: {len(run.failed)} failed check(s), {len(regressions)} "
                       "regression(s) against the baseline — baseline NOT updated (use --perf-force "
                       "to accept this run anyway)")
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            elif _measured_busy(run) and not ps.options.force:
                ps.say("specperf: the machine was busy during some trials — baseline NOT updated "
                       "(their timings are another load's; run again on a quiet machine, or use "
                       "--perf-force to accept this run anyway)")
            elif not run.cases:
                ps.say("specperf: nothing was measured — baseline NOT updated")
            else:
                try:
                    # Re-read and merged under the baseline's lock: another update since
                    # this run loaded it is kept, not overwritten.
                    new = update_baseline(ctx.path, run, say=ps.say)
                except BaselineError as exc:  # refused, or the file went bad: nothing written
                    ps.say(f"specperf: baseline NOT updated: {one_line(str(exc))}")
                    # Bad input (2); its legacy number 4 with SPECPERF_LEGACY_EXIT_CODES=1.
                    session.exitstatus = (pytest.ExitCode.USAGE_ERROR
                                          if settings.legacy_exit_codes() else int(Exit.BAD_INPUT))
                    return
                except OSError as exc:  # every write is atomic: the old baseline is whole
                    ps.say(f"specperf: baseline NOT updated: {_os_error(exc, ctx.path)} ({ctx.path} is "
                           "unchanged)")
                    session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
                    return
                except KeyboardInterrupt:
                    ps.say(f"specperf: interrupted while writing the baseline — {ctx.path} is "
                           "unchanged or wholly the new one, never half-written; this run is "
                           f"kept in {ctx.path.parent / 'history'}")
                    session.exitstatus = Exit.INTERRUPTED
                    return
                ps.say(f"specperf: baseline written: {ctx.path} ({len(new.cases)} cases; "
                       f"previous kept in {ctx.path.parent / 'history'})")

    def summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        if self.report is None:
            return
        report = self.report
        run = report.run
        assert isinstance(run, RunResult)  # the plugin's report is of its own run
        # Here: the console renderers load scipy (through compare), needed only to show a run.
        from specperf.report.console import render_comparison, render_run, time_lines

        terminalreporter.section("specperf")
        tw = terminalreporter._tw  # noqa: SLF001 - pytest's own writer knows width and colour
        width = max(80, min(tw.fullwidth, 160))
        verbose = config.getoption("verbose") > 0
        terminalreporter.write(render_run(run, width=width, color=tw.hasmarkup,
                                          brief=not verbose))
        # Undecided checks are not failures, so pytest's short summary leaves them out: say
        # each one here, with what would decide it.
        for c in run.checks:
            if c.outcome in UNDECIDED_STATUS:
                terminalreporter.write_line(f"{UNDECIDED_STATUS[c.outcome][2]} {c.message}",
                                            yellow=True)
        if report.comparison is not None:
            terminalreporter.write(render_comparison(report.comparison, width=width,
                                                     color=tw.hasmarkup, verbose=verbose))
        if report.advice_error is not None:
            terminalreporter.write_line(f"specperf: no advice: {report.advice_error}")
        elif report.advice is not None:
            try:
                terminalreporter.write(render_advice(report.advice, width=width,
                                                    color=tw.hasmarkup, brief=not verbose))
            except Exception as exc:  # noqa: BLE001 - advice explains; it never decides a run
                terminalreporter.write_line(f"specperf: no advice: {type(exc).__name__}: {exc}")
        if run.time_breakdown is not None:
            for line in time_lines(run.time_breakdown, width):
                terminalreporter.write_line(line)
        terminalreporter.write_line(f"run directory: {run.run_dir} (run.json, report.html, "
                                    "report.md, plots/)")


def _measured_busy(run: RunResult) -> bool:
    """Whether a kept trial of the run (or a paired no-spec trial) was contended: its
    timings are another load's, and a baseline must not keep them."""
    return (any(c.outcome == "busy" for c in run.checks)
            or run_busy_summary(run.cases, run.paired_nospec) is not None)


def _os_error(exc: OSError, path: Path) -> str:
    """A failed write of ``path`` as one line: the file and the system's reason."""
    return f"{exc.filename or path}: {exc.strerror or exc}"


def no_cases_reason(profile: str, kind: TestKind) -> str:
    return f"profile {profile!r} has no {kind.name} cases: {kind.no_cases}"


def _no_cases_item(item: pytest.Item) -> bool:
    """The one skipped item of a perf test whose kind has no case in the profile."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "perf_case" in callspec.params \
        and callspec.params["perf_case"] is None


def _item_case(item: pytest.Item) -> tuple[TestKind, Case] | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None or not isinstance(callspec.params.get("perf_case"), Case):
        return None
    marker = item.get_closest_marker("perf_cases")
    if marker is None:
        return None
    return kind_named(marker.args[0]), callspec.params["perf_case"]


def shard_configs(ps: PerfSession, shard: str) -> set[str]:
    """The server configs of shard "I/N" (the rule: specperf.config.shards)."""
    try:
        i, n = parse_shard(shard)
    except ValueError:
        raise pytest.UsageError(
            f"--perf-shard {shard!r}: expected I/N with 1 ≤ I ≤ N, e.g. --perf-shard 2/4"
        ) from None
    return set(shard_config_ids(ps.profile, i, n))


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

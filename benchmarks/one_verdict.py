"""Issue #13, "Done means" 1, measured: real perf runs, quiet, beside a CPU burner and with
an injected TPOT slowdown on one config, each check's outcome counted.

Each run is ``python -m pytest perf_tests ... --perf-profile P --perf-run-dir D
--perf-baselines B`` in a subprocess (this checkout's ``src`` first on PYTHONPATH); its exit
status, wall time, the outcome of every (gate, case, metric) check in D/run.json and the run's
``time_breakdown`` (when the file has one) are recorded.

* ``quiet``: ``--runs`` runs against an empty scratch baselines directory (a fresh machine)
  or ``--baselines-dir`` (read, never updated).
* ``busy``: the same beside a burner taking one core, started before and killed after each
  run (also on Ctrl-C and SIGTERM; it stops by itself if this script dies).
* ``baseline``: ``--runs`` runs with ``--perf-update-baselines --perf-force`` into
  ``--baselines-dir``: each one kept in the baseline's history, even one with a flag.
* ``inject``: first a baseline of ``--baseline-runs`` kept runs (those missing), recorded with
  ``--config`` behind the proxy at zero delay (its own cost must not count as the effect;
  a zero-delay proxy run may be kept in a baseline); then ``--runs`` runs with that
  config's decode stretched by ``--effect`` (SPECPERF_PROXY_STRETCH: every decode step that
  fraction slower at whatever speed the machine runs). ``--inject delay`` uses a fixed
  per-chunk delay instead, the one that raises the config's TPOT at its lowest concurrency
  by ``--effect`` (specperf.engine.proxy.delay_for_tpot on the kept trials, or with
  ``--size-on`` on the given run files) — a fixed number of milliseconds, so a larger
  slowdown when the machine runs faster than when it was sized (the EPYC VM's speed moved by
  a third between hours: docs/validation.md). Per run: did the config FAIL a check; which
  checks of other configs FAILed. A stretched run counts only if the proxy's own records
  (run.json, ``servers[].injection``) show each of the config's decodes forwarded at
  1 + ``--effect`` times its arrival, within ``DELIVERY_TOLERANCE``.

A warning is printed when the machine used more than ``--max-busy`` cores in the 2 s before a
run. Output: a table, and benchmarks/results/DATE/one-verdict-MODE-PROFILE-TIME.json
(``--out``) rewritten after every run. ``--dry-run`` prints the commands. After ``--``: pytest.

    python benchmarks/one_verdict.py quiet --profile perf_tests/profiles/cpu-tiny.toml --runs 10
    python benchmarks/one_verdict.py busy --profile tests/profiles/cpu-ci.toml --runs 3
    python benchmarks/one_verdict.py inject --profile tests/profiles/cpu-ci.toml --config draft-k2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUTCOMES = ("pass", "fail", "inconclusive", "busy", "skip")
#: What the quiet-run ratio divides by (issue #13: wall ≤ 1.15 × these).
EXIT_MEANING = {0: "pass", 1: "FAIL", 2: "interrupted", 3: "write error", 4: "usage error",
                5: "no tests", 6: "inconclusive", 7: "busy"}
PROXY_ENV = ("SPECPERF_PROXY_DELAY_MS", "SPECPERF_PROXY_DELAY_GROWTH_MS", "SPECPERF_PROXY_STRETCH",
             "SPECPERF_PROXY_CONFIGS")
# The burner's loop checks its parent now and then: killed with this script, it stops too.
BURNER = ("import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n"
          "    for _ in range(100000):\n        pass\n")


# ----------------------------------------------------------------------------- pure parts


def check_id(check: dict[str, Any]) -> str:
    case = check.get("case") or {}
    return f"{check.get('gate')}[{case.get('config_id')}-c{case.get('concurrency')}] {check.get('metric')}"


def read_checks(run: dict[str, Any]) -> dict[str, Any]:
    """A run file's checks: the outcome of each, the counts per outcome (any outcome this
    script does not know is counted too), and the words of every check that did not pass."""
    checks = run.get("checks") or []
    counts = Counter(str(c.get("outcome")) for c in checks)
    return {"counts": {**{o: 0 for o in OUTCOMES}, **counts},
            "outcomes": {check_id(c): c.get("outcome") for c in checks},
            "failed": {check_id(c): (c.get("case") or {}).get("config_id")
                       for c in checks if c.get("outcome") == "fail"},
            "not_passed": [f"{c.get('outcome', '?').upper()} {check_id(c)}: {c.get('message', '')}"
                           for c in checks if c.get("outcome") not in ("pass", "skip")]}


def quiet_ratio(breakdown: dict[str, Any] | None) -> float | None:
    """Wall time over server starts + measured trials + warm-ups: the run file's
    time_breakdown read by its own schema (TimeBreakdown.quiet_ratio, the one definition);
    None for a run file without one."""
    if not isinstance(breakdown, dict):
        return None
    from specperf.schemas import TimeBreakdown  # the harness imports specperf lazily: --help without it

    return TimeBreakdown.model_validate(breakdown).quiet_ratio


def failures_by_config(failed: dict[str, str], config: str) -> tuple[bool, list[str]]:
    """(the config FAILed a check, the FAILed checks of every other config), from
    read_checks' ``failed`` (check id → its config)."""
    return config in failed.values(), [cid for cid, c in failed.items() if c != config]


def config_shape(baselines: list[Any], config: str) -> dict[str, float]:
    """Median TPOT (s), mean chunks and tokens of ``config``'s lowest concurrency, pooled
    over the given runs (specperf Baseline or RunResult models: the baseline's kept runs,
    or the files of --size-on)."""
    cases = [c for b in baselines for c in b.cases if c.case.config_id == config]
    if not cases:
        raise SystemExit(f"the baseline has no case of config {config!r}")
    low = min(c.case.concurrency for c in cases)
    ok = [s for c in cases if c.case.concurrency == low for t in c.trials for s in t.samples
          if s.tpot_s is not None]
    if not ok:
        raise SystemExit(f"the baseline has no TPOT samples of {config}-c{low}")
    return {"concurrency": low, "tpot_s": statistics.median(s.tpot_s for s in ok),
            "chunks": statistics.fmean(s.chunks for s in ok),
            "tokens": statistics.fmean(s.output_tokens for s in ok)}


#: How far the proxy's median decode ratio (forwarded over received) may sit from the
#: stretch it was asked for before the run is not counted as that injection.
DELIVERY_TOLERANCE = 0.02


def injections(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each proxied server start's injection record in a run file (``draft-k2``,
    ``draft-k2@start1`` for the first of two starts)."""
    return {str(s.get("config_id")): s["injection"] for s in run.get("servers") or []
            if isinstance(s, dict) and s.get("injection")}


def delivered(records: dict[str, dict[str, Any]], config: str, stretch: float) -> dict[str, Any]:
    """Whether every start of ``config`` had its decode stretched by ``stretch``, read off
    the proxy's own records (ServerRecord.injection): the run counts as that injection only
    then. A start with no stream re-timed, or no record at all, did not deliver it."""
    mine = {k: v for k, v in records.items() if k == config or k.startswith(f"{config}@")}
    ratios = {k: v.get("decode_ratio") for k, v in mine.items()}
    ok = bool(ratios) and all(r is not None and abs(r - (1 + stretch)) <= DELIVERY_TOLERANCE
                              for r in ratios.values())
    return {"asked": 1 + stretch, "decode_ratio": ratios, "ok": ok}


def counted_as_injected(rec: dict[str, Any]) -> bool:
    """Whether a run record counts as the injection: yes unless delivered() said no (a
    fixed-delay run, or one from before the proxy kept records, has no verdict on it)."""
    return bool((rec.get("delivered") or {}).get("ok", True))


def injection_delay_ms(effect: float, shape: dict[str, float]) -> float:
    from specperf.engine.proxy import delay_for_tpot

    return 1000.0 * delay_for_tpot(effect, shape["tpot_s"], shape["chunks"], shape["tokens"])


def summarise(runs: list[dict[str, Any]], mode: str, config: str | None = None) -> dict[str, Any]:
    measured = [r for r in runs if r["phase"] == ("baseline" if mode == "baseline" else "run")]
    totals: Counter[str] = Counter()
    for r in measured:
        totals.update(r["counts"])
    ratios = [r["quiet_ratio"] for r in measured if r.get("quiet_ratio") is not None]
    walls = [r["wall_s"] for r in measured]
    out: dict[str, Any] = {
        "runs": len(measured), "exits": dict(Counter(str(r["exit"]) for r in measured)),
        "missing_run_json": sum(r["run_json"] is None for r in measured),
        "checks": {**{o: 0 for o in OUTCOMES}, **totals},
        "runs_with": {o: sum(r["counts"].get(o, 0) > 0 for r in measured) for o in OUTCOMES[1:4]},
        "wall_s": {"median": statistics.median(walls), "max": max(walls)} if walls else None,
        "quiet_ratio": {"median": statistics.median(ratios), "max": max(ratios)} if ratios else None,
        "warned_not_quiet": sum(bool(r.get("not_quiet")) for r in measured),
    }
    if mode == "inject":
        # A run whose proxy did not deliver the stretch is not that injection: not counted.
        counted = [r for r in measured if counted_as_injected(r)]
        caught = sum(r["fail_on_config"] for r in counted)
        elsewhere = sum(bool(r["fail_elsewhere"]) for r in measured)
        out.update(config=config, counted=len(counted), not_delivered=len(measured) - len(counted),
                   caught=caught, fail_elsewhere_runs=elsewhere,
                   met=bool(counted) and caught >= math.ceil(0.9 * len(counted))
                   and elsewhere == 0)
    elif mode in ("quiet", "busy"):
        out["met"] = (bool(measured) and totals["fail"] == 0 and out["missing_run_json"] == 0
                      and all(r["exit"] != 1 for r in measured))
    return out


# ----------------------------------------------------------------------------- running


def busy_cores(seconds: float = 2.0) -> float | None:
    """Cores' worth of CPU the whole machine used over ``seconds`` (this script sleeps)."""
    from specperf.engine.contention import parse_system_busy

    try:
        before = parse_system_busy(Path("/proc/stat").read_text())
        time.sleep(seconds)
        after = parse_system_busy(Path("/proc/stat").read_text())
    except (OSError, ValueError):
        return None
    return (after - before) / (os.sysconf("SC_CLK_TCK") * seconds)


@contextmanager
def burner(on: bool) -> Iterator[dict[str, float]]:
    """One core kept busy for the block; yields a dict that gets the cores it used."""
    used: dict[str, float] = {}
    if not on:
        yield used
        return
    proc = subprocess.Popen([sys.executable, "-c", BURNER])
    used["burner_pid"], t0 = proc.pid, time.monotonic()
    try:
        yield used
    finally:
        proc.kill()
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = status  # reaped here: Popen must not wait for it again
        used["burner_cores"] = (ru.ru_utime + ru.ru_stime) / max(time.monotonic() - t0, 1e-9)


def pytest_cmd(args: argparse.Namespace, run_dir: Path, baselines: Path, update: bool) -> list[str]:
    return [sys.executable, "-m", "pytest", "perf_tests", "-p", "no:cacheprovider", "-q",
            "--perf-profile", str(args.profile), "--perf-run-dir", str(run_dir),
            "--perf-baselines", str(baselines), "--perf-progress", "plain",
            *(["--perf-update-baselines", "--perf-force"] if update else []), *args.pytest_args]


def names(todo: list[tuple[str, bool]]) -> Iterator[tuple[str, str, bool]]:
    """(run name, phase, burner) per planned run: baseline-01…, run-01…"""
    seen: Counter[str] = Counter()
    for phase, burn in todo:
        seen[phase] += 1
        yield f"{phase}-{seen[phase]:02d}", phase, burn


def show(cmd: list[str], env: dict[str, str]) -> str:
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), shlex.join(cmd)])


def run_once(args: argparse.Namespace, name: str, phase: str, baselines: Path,
             env_extra: dict[str, str], update: bool = False, burn: bool = False) -> dict[str, Any]:
    run_dir = args.work / name
    cmd = pytest_cmd(args, run_dir, baselines, update)
    load = busy_cores()
    rec: dict[str, Any] = {"name": name, "phase": phase, "cmd": show(cmd, env_extra),
                           "busy_cores_before": load,
                           "not_quiet": load is not None and load > args.max_busy}
    print(f"[{datetime.now():%H:%M:%S}] {name}: {rec['cmd']}", flush=True)
    if rec["not_quiet"]:
        print(f"    WARNING: the machine is not quiet: {load:.2f} cores busy over 2 s before "
              f"the run (limit {args.max_busy:g})", flush=True)
    env = {k: v for k, v in os.environ.items() if k not in (*PROXY_ENV, "PYTEST_ADDOPTS")}
    env.update(env_extra, PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p))
    log = args.work / f"{name}.out"
    with burner(burn) as used, log.open("w") as out:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            proc.wait()
        finally:
            if proc.poll() is None:  # interrupted: let the plugin stop its servers first
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
        rec["wall_s"] = time.monotonic() - t0
    run_json = run_dir / "run.json"
    try:
        run = json.loads(run_json.read_text()) if run_json.exists() else {}
    except ValueError as exc:  # recorded, not fatal: the next runs still go
        run, rec["run_json_error"] = {}, str(exc)
    rec.update(used, exit=proc.returncode, log=str(log),
               run_json=str(run_json) if run_json.exists() else None, **read_checks(run),
               time_breakdown=run.get("time_breakdown"), injection=injections(run))
    rec["quiet_ratio"] = quiet_ratio(rec["time_breakdown"])
    print(f"    exit {rec['exit']} ({EXIT_MEANING.get(rec['exit'], '?')}), {rec['wall_s']:.0f} s, "
          + ", ".join(f"{o} {rec['counts'][o]}" for o in OUTCOMES), flush=True)
    return rec


# ----------------------------------------------------------------------------- output


def table(runs: list[dict[str, Any]], summary: dict[str, Any], mode: str) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"one verdict: {mode}", caption="load: cores busy over 2 s before the "
              "run; burner: cores it used; ratio: wall / (starts + trials + warmups)")
    cols = ["run", "exit", *OUTCOMES, "wall s", "load", "burner", "ratio"]
    cols += [f"FAIL {summary.get('config')}", "FAIL other"] if mode == "inject" else []
    for c in cols:
        t.add_column(c, justify="left" if c in ("run", "exit") else "right", no_wrap=True)

    def num(x: float | None, fmt: str) -> str:
        return "—" if x is None else format(x, fmt)

    for r in runs:
        row = [r["name"], f"{r['exit']} {EXIT_MEANING.get(r['exit'], '?')}",
               *(str(r["counts"].get(o, 0)) for o in OUTCOMES), num(r["wall_s"], ".0f"),
               num(r["busy_cores_before"], ".2f"), num(r.get("burner_cores"), ".2f"),
               num(r["quiet_ratio"], ".2f")]
        if mode == "inject":
            row += (["—", "—"] if r["phase"] != "run" else
                    ["yes" if r["fail_on_config"] else
                     "no" if counted_as_injected(r) else "not counted",
                     str(len(r["fail_elsewhere"]))])
        t.add_row(*row)
    console = Console()
    console.width = max(console.width, 160)  # a log file or pipe: 80 columns crush the table
    console.print(t)
    for r in runs:
        for line in r["not_passed"]:
            console.print(f"  {r['name']}: {line}", markup=False, highlight=False)
    console.print_json(json.dumps({k: v for k, v in summary.items() if k != "delay"}))


def write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")


# ----------------------------------------------------------------------------- main


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Arguments after -- go to pytest.")
    p.add_argument("mode", choices=("quiet", "busy", "baseline", "inject"))
    p.add_argument("--profile", required=True)
    p.add_argument("--runs", type=int, default=None,
                   help="measured runs (default: busy 3, baseline 3, else 10)")
    p.add_argument("--baselines-dir", type=Path, default=None,
                   help="judge against (baseline, inject: record into) this directory "
                        "(default: a scratch one under --work, empty)")
    p.add_argument("--config", help="inject: the server config to slow down; quiet, busy, "
                                     "baseline: the config behind the reference proxy")
    p.add_argument("--effect", type=float, default=0.25, help="inject: relative TPOT rise")
    p.add_argument("--baseline-runs", type=int, default=3, help="inject: kept baseline runs")
    p.add_argument("--inject", choices=("stretch", "delay"), default="stretch",
                   help="inject: stretch the decode by --effect at any machine speed "
                        "(default), or a fixed per-chunk delay sized as --effect")
    p.add_argument("--size-on", type=Path, action="append", default=None, metavar="RUN_JSON",
                   help="inject delay: size the delay on these run files' TPOT (e.g. this "
                        "hour's quiet runs' run.json) instead of the kept baseline's "
                        "(repeatable)")
    p.add_argument("--reference-delay-ms", type=float, default=0.0,
                   help="inject: the proxy's delay while the baseline is recorded")
    p.add_argument("--max-busy", type=float, default=0.3,
                   help="warn when the machine used more cores before a run")
    p.add_argument("--work", type=Path, default=None, help="run dirs and logs")
    p.add_argument("--out", type=Path, default=None, help="the result JSON")
    p.add_argument("--dry-run", action="store_true", help="only print the commands")
    extra: list[str] = []
    if "--" in argv:
        argv, extra = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    args = p.parse_args(argv)
    args.pytest_args = extra
    args.runs = args.runs or {"busy": 3, "baseline": 3}.get(args.mode, 10)
    if args.mode == "inject" and not args.config:
        p.error("inject needs --config (a server config id of the profile)")
    return args


def main(argv: list[str] | None = None) -> int:
    from specperf.config.profile import ProfileError
    from specperf.config.profile_file import load_profile
    from specperf.store.baselines import baseline_path, load_baseline, load_history
    from specperf.store.files import BaselineError, load_result
    from specperf.store.provenance import detect_hardware

    args = parse(list(sys.argv[1:] if argv is None else argv))
    try:
        profile = load_profile(args.profile, REPO)
    except ProfileError as exc:
        raise SystemExit(str(exc)) from None
    stamp = datetime.now()
    args.work = (args.work or REPO / ".specperf" / "one-verdict"
                 / f"{args.mode}-{profile.name}-{stamp:%Y%m%dT%H%M%S}").resolve()
    out = args.out or (REPO / "benchmarks" / "results" / f"{stamp:%Y-%m-%d}"
                       / f"one-verdict-{args.mode}-{profile.name}-{stamp:%H%M%S}.json")
    baselines = (args.baselines_dir or args.work / "baselines").resolve()
    base_file = baseline_path(baselines, profile.name, detect_hardware()[0])
    if args.config and args.config not in {c.id for c in profile.server_configs}:
        raise SystemExit(f"--config {args.config!r}: profile {profile.name!r} has "
                         f"{', '.join(c.id for c in profile.server_configs)}")
    cfg = args.config if args.mode == "inject" else None
    kept = len(load_history(base_file)) if base_file.exists() else 0
    args.profile = str(profile.source)  # the runs start in the repository
    todo = {"quiet": [("run", False)] * args.runs, "busy": [("run", True)] * args.runs,
            "baseline": [("baseline", False)] * args.runs,
            "inject": [("baseline", False)] * max(0, args.baseline_runs - kept)
            + [("run", False)] * args.runs}[args.mode]
    # With --config, every run but the injected ones sends that config's load through the
    # proxy at the reference delay: quiet and busy runs then match an inject baseline.
    ref_env = {"SPECPERF_PROXY_DELAY_MS": f"{args.reference_delay_ms:g}",
               "SPECPERF_PROXY_CONFIGS": args.config} if args.config else {}

    def injection_env() -> tuple[dict[str, Any], dict[str, str]]:
        if args.inject == "stretch":
            print(f"stretch {args.effect:g} on {cfg}: its decode +{args.effect:.0%} at any "
                  "machine speed", flush=True)
            return ({"stretch": args.effect, "effect": args.effect},
                    {"SPECPERF_PROXY_STRETCH": f"{args.effect:g}", "SPECPERF_PROXY_CONFIGS": cfg})
        if args.size_on:
            try:
                runs = [load_result(path) for path in args.size_on]
            except BaselineError as exc:
                raise SystemExit(f"--size-on: {exc}") from None
            sized_on: Any = [str(path) for path in args.size_on]
            where = f"{len(runs)} run file(s) of --size-on"
        else:
            if not base_file.exists():
                raise SystemExit(f"no baseline at {base_file}: see the baseline runs' logs")
            runs, sized_on, where = (load_history(base_file) or [load_baseline(base_file)],
                                     "baseline", "the kept baseline")
        shape = config_shape(runs, cfg)
        ms = injection_delay_ms(args.effect, shape)
        print(f"delay {ms:.3f} ms per chunk on {cfg}: +{args.effect:.0%} TPOT of "
              f"{cfg}-c{shape['concurrency']} ({shape['tpot_s'] * 1000:.2f} ms, "
              f"{shape['chunks']:.1f} chunks / {shape['tokens']:.1f} tokens, {where})",
              flush=True)
        return ({"delay_ms": ms, "effect": args.effect, "sized_on": sized_on, **shape},
                {"SPECPERF_PROXY_DELAY_MS": f"{ms:.3f}", "SPECPERF_PROXY_CONFIGS": cfg})

    env: dict[str, str] = {} if cfg else ref_env
    if args.dry_run:
        for name, phase, burn in names(todo):
            if cfg and not env:  # sized now if a baseline is already kept, else after it
                sized = (args.inject == "stretch" or args.size_on
                         or (base_file.exists() and todo[0][0] == "run"))
                env = injection_env()[1] if sized else {
                    "SPECPERF_PROXY_DELAY_MS": "<sized from the baseline>",
                    "SPECPERF_PROXY_CONFIGS": cfg}
            print(("[burner: one core] " if burn else "") + show(pytest_cmd(
                args, args.work / name, baselines, phase == "baseline"),
                ref_env if phase == "baseline" else env))
        print(f"# {len(todo)} runs; baselines {baselines}; results would go to {out}")
        return 0

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so every finally runs
    args.work.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"kind": "specperf-one-verdict", "mode": args.mode,
                           "profile": str(args.profile), "profile_name": profile.name,
                           "baselines": str(baselines), "work": str(args.work),
                           "started": stamp.isoformat(timespec="seconds"), "runs": []}
    try:
        for name, phase, burn in names(todo):
            if cfg and phase == "run" and not env:
                doc["delay"], env = injection_env()
            rec = run_once(args, name, phase, baselines, ref_env if phase == "baseline" else env,
                           update=phase == "baseline", burn=burn)
            if cfg and phase == "run":
                rec["fail_on_config"], rec["fail_elsewhere"] = failures_by_config(
                    rec["failed"], cfg)
                if args.inject == "stretch":
                    rec["delivered"] = delivered(rec["injection"], cfg, args.effect)
                    if not rec["delivered"]["ok"]:
                        print(f"    NOT COUNTED: {cfg}'s decode was forwarded at "
                              f"{rec['delivered']['decode_ratio']} of its arrival, not "
                              f"{1 + args.effect:g}", flush=True)
            doc["runs"].append(rec)
            doc["summary"] = summarise(doc["runs"], args.mode, cfg)
            write(out, doc)
    except KeyboardInterrupt:
        print(f"interrupted: the {len(doc['runs'])} finished run(s) are in {out}")
        return 130
    doc["finished"] = datetime.now().isoformat(timespec="seconds")
    write(out, doc)
    table(doc["runs"], doc["summary"], args.mode)
    print(f"wrote {out}")
    return 0 if doc["summary"].get("met", True) else 1


if __name__ == "__main__":
    raise SystemExit(main())

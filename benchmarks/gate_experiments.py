"""How the gate decides, measured: false alarms (A/A) and power (injected regressions).

(a) A/A: ``--runs`` back-to-back runs of a profile with nothing changed, each a real
    ``python -m pytest perf_tests --perf-profile P --perf-run-dir D --perf-repeats R`` in a
    subprocess (as tests/e2e/test_perf_runs.py drives them). Every run is compared with
    specperf.analysis.judge.run.compare_runs against the first run ("vs first") and against the run
    before it ("consecutive"); every metric x case comparison called REGRESSION or
    IMPROVEMENT is a false alarm.
(b) Injected regression: the same runs, but with the delaying proxy (specperf.engine.proxy, a
    fault injector) in front of ONE speculative server config (``--inject-config``), sized
    to raise its TPOT by each of ``--sizes`` (relative), ``--tries`` runs each, compared
    against the first A/A run (the reference). Power = fraction of tries whose comparison
    calls TPOT a REGRESSION on the injected cases; the summary also lists which metrics
    were flagged (the right one is TPOT; TTFT/E2E/throughput may follow), and false alarms
    on the configs that were not touched.

The injection needs a hook in specperf.engine.session (see the report): the environment
variables ``SPECPERF_PROXY_DELAY_MS`` (per-chunk delay) and ``SPECPERF_PROXY_CONFIGS``
(comma list of config ids) make the plugin put a DelayProxy in front of those servers'
load. The per-chunk delay for a relative TPOT effect s is derived from the reference run:
``delay = s * TPOT * (N - 1) / (C - 1)`` (N tokens and C text chunks per request,
specperf.engine.proxy.delay_for_tpot), or from ``--tpot-ms`` and ``--chunk-tokens`` if given.

Output: ``OUT/summary.json`` and ``OUT/summary.md``; every run's directory and pytest
output under OUT. ``--dry-run`` only prints the commands.

    python benchmarks/gate_experiments.py --profile tests/profiles/cpu-ci.toml \\
        --runs 6 --repeats 5 --sizes 0.05,0.10,0.25 --tries 4 --out .specperf/gate-exp
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import tomllib

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PROFILE = REPO / "tests" / "profiles" / "cpu-ci.toml"
FLAGGED = ("regression", "improvement")


# ----------------------------------------------------------------------------- plan


def _profile_toml(profile: str) -> dict[str, Any]:
    path = Path(profile)
    if not path.exists():
        path = REPO / "perf_tests" / "profiles" / f"{profile}.toml"
    return tomllib.loads(path.read_text())


def default_inject_config(toml: dict[str, Any]) -> str:
    for cfg in toml.get("server_configs", []):
        if cfg.get("speculative_config"):
            return str(cfg["id"])
    raise SystemExit("the profile has no speculative server config to inject into")


def pytest_cmd(args: argparse.Namespace, run_dir: Path, repeats: int | None = None,
               nightly: bool = False) -> list[str]:
    # --nightly: the A/A runs as a nightly job would, each against the baseline the run
    # before it recorded (and its kept runs), confirming flags on a fresh server as it
    # goes, then recorded itself (--perf-force: an A/A flag must not stop the chain).
    baselines = (["--perf-baselines", str(args.out / "baselines"), "--perf-update-baselines",
                  "--perf-force"] if nightly
                 else ["--perf-baselines", str(args.out / "no-baselines")])
    return [
        sys.executable, "-m", "pytest", "perf_tests", "-p", "no:cacheprovider", "-q",
        "--perf-profile", str(args.profile), "--perf-run-dir", str(run_dir),
        "--perf-repeats", str(repeats or args.repeats),
        *baselines,
        *(["--perf-models-cache", str(args.models_cache)] if args.models_cache else []),
        *args.pytest_args,
    ]


def show(cmd: list[str], env: dict[str, str]) -> str:
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (prefix + " " if prefix else "") + shlex.join(cmd)


# ----------------------------------------------------------------------------- runs


def run_once(args: argparse.Namespace, name: str, env_extra: dict[str, str],
             repeats: int | None = None, nightly: bool = False) -> dict[str, Any]:
    run_dir = args.out / name
    cmd = pytest_cmd(args, run_dir, repeats, nightly)
    print(f"[{datetime.now():%H:%M:%S}] {name}: {show(cmd, env_extra)}", flush=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_ADDOPTS", "SPECPERF_PROXY_DELAY_MS", "SPECPERF_PROXY_CONFIGS")}
    env.update(env_extra)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env,
                          timeout=args.run_timeout)
    elapsed = time.monotonic() - t0
    (args.out / f"{name}.out").write_text(proc.stdout + proc.stderr)
    run_json = run_dir / "run.json"
    ok = run_json.exists()
    print(f"    exit {proc.returncode}, {elapsed:.0f} s, run.json {'written' if ok else 'MISSING'}",
          flush=True)
    return {"name": name, "run_json": str(run_json) if ok else None, "exit": proc.returncode,
            "elapsed_s": elapsed, "env": env_extra}


def _load(path: str) -> Any:
    from specperf.store.files import load_result

    return load_result(path)


def compare(run_path: str, ref_path: str, history: list[str] = ()) -> list[dict[str, Any]]:  # type: ignore[assignment]
    """Every metric x case comparison of run against ref (with ref's kept runs
    ``history``, as a baseline's history directory would hold them), flattened."""
    from specperf.analysis.judge.run import compare_runs

    cmp = compare_runs(_load(run_path), _load(ref_path), force=True,
                       history=[_load(h) for h in history])
    return [{"case": c.case.id, "config": c.case.config_id, "metric": m.metric,
             "verdict": m.verdict.value, "ratio": m.ratio, "ci": [m.ci_low, m.ci_high],
             "reason": m.reason,
             "baseline_runs": (c.details[m.metric].baseline_runs
                               if m.metric in c.details else None),
             "detectable": (c.details[m.metric].detectable if m.metric in c.details else None)}
            for c, m in cmp.all()]


def acceptance_probe(run_path: str, ref_path: str) -> dict[str, int]:
    """One accepted token in a thousand, on real counters: the run's accepted count (and
    each position's) lowered by ceil(drafted / 1000), compared with the reference by the
    gate's acceptance rule. Counts how many such changes were caught."""
    import math

    from specperf.analysis.judge.run import compare_runs

    run, ref = _load(run_path), _load(ref_path)
    cases = []
    for case in run.cases:
        acc = case.acceptance
        if acc is None or not acc.drafts:
            cases.append(case)
            continue
        less = max(1, math.ceil(acc.draft_tokens / 1000))
        per_pos = list(acc.accepted_per_position)
        if per_pos:
            per_pos[-1] = max(0, per_pos[-1] - less)  # the last position's count drops
        acc = acc.model_copy(update={"accepted_tokens": acc.accepted_tokens - less,
                                     "accepted_per_position": per_pos})
        cases.append(case.model_copy(update={"acceptance": acc}))
    cmp = compare_runs(run.model_copy(update={"cases": cases}), ref, force=True)
    rows = [m for _, m in cmp.all() if m.metric == "acceptance_rate"]
    last = [m for c, m in cmp.all() if c.num_speculative_tokens
            and m.metric == f"acceptance_rate[pos {c.num_speculative_tokens - 1}]"]
    return {"changes": len(rows), "caught": sum(m.verdict.value == "regression" for m in rows),
            "position_changes": len(last),
            "position_caught": sum(m.verdict.value == "regression" for m in last)}


def measured_shape(ref_path: str, config: str) -> dict[str, dict[str, float]]:
    """Per case of `config` in the reference: median TPOT (s), mean chunks and tokens."""
    ref = _load(ref_path)
    out = {}
    for case in ref.cases:
        if case.case.config_id != config:
            continue
        ok = [s for t in case.trials for s in t.samples if s.ok and s.tpot_s is not None]
        if not ok:
            continue
        out[case.case.id] = {
            "tpot_s": statistics.median(s.tpot_s for s in ok),  # type: ignore[misc]
            "chunks": statistics.fmean(s.chunks for s in ok),
            "tokens": statistics.fmean(s.output_tokens for s in ok),
        }
    return out


def delay_ms_for(size: float, shape: dict[str, dict[str, float]]) -> float:
    """The per-chunk delay that raises the lowest-concurrency case's TPOT by `size`."""
    from specperf.engine.proxy import delay_for_tpot

    first = min(shape, key=lambda cid: int(cid.rsplit("-c", 1)[1]))
    s = shape[first]
    return 1000.0 * delay_for_tpot(size, s["tpot_s"], s["chunks"], s["tokens"])


def expected_effects(delay_ms: float, shape: dict[str, dict[str, float]]) -> dict[str, float]:
    from specperf.engine.proxy import expected_tpot_rise

    return {cid: expected_tpot_rise(delay_ms / 1000.0, s["chunks"], s["tokens"]) / s["tpot_s"]
            for cid, s in shape.items()}


# ----------------------------------------------------------------------------- summary


def aa_pairings(paths: list[str], kept: list[str], keep: int) -> dict[str, list[tuple[str, str, list[str]]]]:
    """(run, baseline, baseline's kept runs) per A/A pairing:

    * ``nightly``: each run against the run before it, whose kept history is the runs
      before that (up to ``keep`` in all) -- ``--perf-update-baselines`` after every run;
    * ``vs_kept``: each run against a baseline recorded earlier from the ``kept`` runs
      (the newest is the baseline file, the others its history), when given;
    * ``one_run``: each run against the run before it alone (no history): what a
      single-run baseline would say.
    """
    out = {
        "nightly": [(paths[i], paths[i - 1], paths[max(0, i - keep):i - 1])
                    for i in range(1, len(paths))],
        "one_run": [(paths[i], paths[i - 1], []) for i in range(1, len(paths))],
    }
    if kept:
        out["vs_kept"] = [(p, kept[-1], kept[:-1]) for p in paths]
    return out


def summarise_aa(runs: list[dict[str, Any]], kept: list[str] = (), keep: int = 5) -> dict[str, Any]:  # type: ignore[assignment]
    paths = [r["run_json"] for r in runs if r["run_json"]]
    out: dict[str, Any] = {"runs": len(paths), "kept": list(kept)}
    for mode, pairs in aa_pairings(paths, list(kept), keep).items():
        per_pair_rows = [compare(run, ref, hist) for run, ref, hist in pairs]
        rows = [row for pair_rows in per_pair_rows for row in pair_rows]
        flagged = [r for r in rows if r["verdict"] in FLAGGED]
        by_metric: dict[str, dict[str, int]] = {}
        for r in rows:
            m = by_metric.setdefault(r["metric"], {"comparisons": 0, "false_alarms": 0,
                                                   "inconclusive": 0})
            m["comparisons"] += 1
            m["false_alarms"] += r["verdict"] in FLAGGED
            m["inconclusive"] += r["verdict"] == "inconclusive"
        out[mode] = {"pairs": len(pairs), "comparisons": len(rows),
                     "false_alarms": len(flagged),
                     "rate": len(flagged) / len(rows) if rows else None,
                     "per_pair": [sum(row["verdict"] in FLAGGED for row in pair_rows)
                                  for pair_rows in per_pair_rows],
                     "by_metric": by_metric, "flagged": flagged}
    probes = [acceptance_probe(run, ref) for run, ref in zip(paths[1:], paths[:-1], strict=False)]
    out["acceptance_probe"] = {k: sum(p[k] for p in probes) for k in
                               ("changes", "caught", "position_changes", "position_caught")}
    return out


def summarise_injection(tries: list[dict[str, Any]], ref: str, config: str,
                        kept: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    """Each try against the reference ``ref`` with the other reference runs ``kept`` as
    its history (the gate pools them)."""
    rows_out = []
    for t in tries:
        if not t["run_json"]:
            rows_out.append({**t, "missing": True})
            continue
        rows = compare(t["run_json"], ref, list(kept))
        injected = [r for r in rows if r["config"] == config]
        tpot = [r for r in injected if r["metric"] == "TPOT"]
        rows_out.append({
            "name": t["name"], "size": t["size"], "delay_ms": t["delay_ms"],
            "tpot_caught": bool(tpot) and all(r["verdict"] == "regression" for r in tpot),
            "tpot_caught_any_case": any(r["verdict"] == "regression" for r in tpot),
            "tpot": [{k: r[k] for k in ("case", "verdict", "ratio")} for r in tpot],
            "flagged_metrics": sorted({r["metric"] for r in injected if r["verdict"] in FLAGGED}),
            "untouched_false_alarms": [r for r in rows
                                       if r["config"] != config and r["verdict"] in FLAGGED],
        })
    by_size: dict[str, Any] = {}
    for size in sorted({t["size"] for t in tries}):
        done = [r for r in rows_out if r.get("size") == size and not r.get("missing")]
        by_size[f"{size:g}"] = {
            "tries": len(done),
            "power_all_cases": (sum(r["tpot_caught"] for r in done) / len(done)
                                if done else None),
            "power_any_case": (sum(r["tpot_caught_any_case"] for r in done) / len(done)
                               if done else None),
            "observed_tpot_ratio": [x["ratio"] for r in done for x in r["tpot"]],
        }
    return {"config": config, "reference": ref, "kept": list(kept), "by_size": by_size,
            "tries": rows_out}


def markdown(summary: dict[str, Any]) -> str:
    lines = ["# How the gate decides: measured", "",
             f"Profile `{summary['profile']}`, {summary['repeats']} trials per case per run.", ""]
    aa = summary.get("aa")
    if aa:
        modes = [m for m in ("vs_kept", "nightly", "one_run") if m in aa]
        lines += ["## A/A (nothing changed)", "",
                  "| pairing | pairs | comparisons | false alarms | rate | per pair |",
                  "|---|---:|---:|---:|---:|---|"]
        for mode in modes:
            m = aa[mode]
            rate = "—" if m["rate"] is None else f"{m['rate'] * 100:.1f} %"
            lines.append(f"| {mode} | {m['pairs']} | {m['comparisons']} | "
                         f"{m['false_alarms']} | {rate} | "
                         f"{' '.join(str(x) for x in m.get('per_pair', []))} |")
        lines += ["", "| metric | " + " | ".join(f"{m}: alarms / inconclusive" for m in modes)
                  + " |", "|---|" + "---:|" * len(modes)]
        for metric in aa[modes[0]]["by_metric"]:
            cells = []
            for mode in modes:
                bm = aa[mode]["by_metric"].get(metric, {})
                cells.append(f"{bm.get('false_alarms', 0)} / {bm.get('inconclusive', 0)} of "
                             f"{bm.get('comparisons', 0)}")
            lines.append(f"| {metric} | " + " | ".join(cells) + " |")
        lines.append("")
        for mode in modes:
            for r in aa[mode]["flagged"]:
                lines.append(f"- {mode}: {r['case']} {r['metric']} {r['verdict']} "
                             f"(ratio {r['ratio']:.3f}, CI {r['ci'][0]:.3f}–{r['ci'][1]:.3f}, "
                             f"{r['baseline_runs']} baseline run(s))")
        probe = aa.get("acceptance_probe")
        if probe:
            lines += ["", f"Acceptance lowered by one accepted token per thousand drafted, on "
                      f"the real counters of each consecutive pair: caught "
                      f"{probe['caught']} of {probe['changes']} (overall rate), "
                      f"{probe['position_caught']} of {probe['position_changes']} (last "
                      "position)."]
        lines.append("")
    inj = summary.get("injection")
    if inj:
        lines += [f"## Injected TPOT regression (config `{inj['config']}`)", "",
                  "| size | delay/chunk | tries | power (all cases) | power (any case) | "
                  "observed TPOT ratios |", "|---:|---:|---:|---:|---:|---|"]
        delays = summary.get("delays_ms", {})
        for size, m in inj["by_size"].items():
            pw = "—" if m["power_all_cases"] is None else f"{m['power_all_cases']:.2f}"
            pa = "—" if m["power_any_case"] is None else f"{m['power_any_case']:.2f}"
            ratios = ", ".join(f"{r:.3f}" for r in m["observed_tpot_ratio"][:8])
            lines.append(f"| {float(size) * 100:g} % | {delays.get(size, float('nan')):.2f} ms | "
                         f"{m['tries']} | {pw} | {pa} | {ratios} |")
        lines += ["", "Flagged metrics per try (the right one is TPOT):", ""]
        for t in inj["tries"]:
            if t.get("missing"):
                lines.append(f"- {t['name']}: run.json missing")
                continue
            fa = len(t["untouched_false_alarms"])
            lines.append(f"- {t['name']}: {', '.join(t['flagged_metrics']) or 'none'}"
                         f"{f'; {fa} false alarm(s) on untouched configs' if fa else ''}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- main


def _keep() -> int:
    from specperf.config.rules import CompareRules

    return CompareRules().baseline_runs


def _finish(args: argparse.Namespace, summary: dict[str, Any]) -> int:
    summary["finished"] = datetime.now().isoformat(timespec="seconds")
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    md = markdown(summary)
    (args.out / "summary.md").write_text(md)
    print(md)
    print(f"wrote {args.out}/summary.json and summary.md")
    return 0


def analyse_only(args: argparse.Namespace, config: str, summary: dict[str, Any]) -> int:
    """Judge the runs already in args.out (names as this script gives them)."""
    import re

    def runs(pattern: str) -> list[Path]:
        return sorted(d for d in args.out.glob(pattern) if (d / "run.json").exists())

    aa = [{"name": d.name, "run_json": str(d / "run.json")} for d in runs("aa[0-9]*")]
    if aa:
        summary["aa"] = summarise_aa(aa, args.kept, _keep())
    refs = [str(d / "run.json") for d in runs("reference-*")] or list(args.reference or [])
    tries = []
    for d in runs("inj*pct-*"):
        m = re.match(r"inj([\d.]+)pct-(\d+)$", d.name)
        if m:
            tries.append({"name": d.name, "run_json": str(d / "run.json"),
                          "size": float(m.group(1)) / 100.0, "delay_ms": None})
    if tries and refs:
        shape = measured_shape(refs[0], config)
        summary["delays_ms"] = {f"{t['size']:g}": delay_ms_for(t["size"], shape) for t in tries}
        for t in tries:
            t["delay_ms"] = delay_ms_for(t["size"], shape)
        summary["injection"] = summarise_injection(tries, refs[-1], config, refs[:-1])
    return _finish(args, summary)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Arguments after -- go to pytest (e.g. -k c1).")
    p.add_argument("--profile", default=str(DEFAULT_PROFILE))
    p.add_argument("--runs", type=int, default=6, help="A/A runs (default 6)")
    p.add_argument("--repeats", type=int, default=5,
                   help="trials per case per run (default 5: the gate's min_trials)")
    p.add_argument("--sizes", default="0.05,0.10,0.25", help="relative TPOT effects")
    p.add_argument("--tries", type=int, default=4, help="injected runs per size (default 4)")
    p.add_argument("--inject-config", default=None,
                   help="server config to slow down (default: the first speculative one)")
    p.add_argument("--phase", choices=("all", "aa", "inject"), default="all")
    p.add_argument("--reference", default=None, nargs="+",
                   help="run.json file(s) to compare injected runs against: the first sizes "
                        "the delay, the last is the baseline, the others its kept runs "
                        "(default: fresh reference runs)")
    p.add_argument("--kept", default=[], nargs="+", metavar="RUN_JSON",
                   help="A/A: earlier runs recorded as a baseline (the last is the baseline "
                        "file, the others its history); adds the vs_kept pairing")
    p.add_argument("--analyse-only", action="store_true",
                   help="run nothing: judge the runs already in --out (aa*/, reference-*/, "
                        "inj*/) with the current code")
    p.add_argument("--reference-runs", type=int, default=1,
                   help="reference runs through the zero-delay proxy (default 1)")
    p.add_argument("--reference-repeats", type=int, default=None,
                   help="trials per case of the reference runs (default --repeats)")
    p.add_argument("--tpot-ms", type=float, default=None,
                   help="TPOT to size delays from (default: measured in the reference)")
    p.add_argument("--chunk-tokens", type=float, default=None,
                   help="tokens per streamed chunk (with --tpot-ms)")
    p.add_argument("--models-cache", default=None)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--run-timeout", type=float, default=3600.0)
    p.add_argument("--dry-run", action="store_true", help="only print the commands")
    p.add_argument("--nightly", action="store_true",
                   help="A/A runs gate live: each against the baseline the previous run "
                        "recorded (with its kept runs), confirming flags on a fresh server, "
                        "then recorded with --perf-update-baselines --perf-force")
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    args = p.parse_args(argv)
    args.pytest_args = extra
    args.out = (args.out or REPO / ".specperf" / "gate-experiments"
                / datetime.now().strftime("%Y%m%dT%H%M%S")).resolve()
    toml = _profile_toml(args.profile)
    config = args.inject_config or default_inject_config(toml)
    sizes = [float(s) for s in args.sizes.split(",") if s]
    max_tokens = int(toml.get("sampling", {}).get("max_tokens", 32))

    def fixed_shape() -> dict[str, dict[str, float]] | None:
        if args.tpot_ms is None or args.chunk_tokens is None:
            return None
        return {f"{config}-c1": {"tpot_s": args.tpot_ms / 1000.0, "tokens": float(max_tokens),
                                 "chunks": max_tokens / args.chunk_tokens}}

    aa_names = [f"aa{i + 1:02d}" for i in range(args.runs)] if args.phase != "inject" else []
    inj_names = [(size, f"inj{size * 100:g}pct-{t + 1}") for size in sizes
                 for t in range(args.tries)] if args.phase != "aa" else []

    if args.dry_run:
        shape = fixed_shape()
        for name in aa_names:
            print(show(pytest_cmd(args, args.out / name, nightly=args.nightly), {}))
        for size, name in inj_names:
            delay = f"{delay_ms_for(size, shape):.3f}" if shape else "<from reference>"
            print(show(pytest_cmd(args, args.out / name),
                       {"SPECPERF_PROXY_DELAY_MS": delay, "SPECPERF_PROXY_CONFIGS": config}))
        print(f"# {len(aa_names) + len(inj_names)} runs; summary would go to "
              f"{args.out}/summary.json and summary.md")
        return 0

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "no-baselines").mkdir(exist_ok=True)
    summary: dict[str, Any] = {"kind": "specperf-gate-experiments", "profile": str(args.profile),
                               "repeats": args.repeats, "inject_config": config,
                               "started": datetime.now().isoformat(timespec="seconds")}
    if args.analyse_only:
        return analyse_only(args, config, summary)
    aa_runs = [run_once(args, name, {}, nightly=args.nightly) for name in aa_names]
    if aa_runs:
        summary["aa_runs"] = aa_runs
        summary["aa"] = summarise_aa(aa_runs, args.kept, _keep())
    if inj_names:
        refs_json = list(args.reference or [])
        ref = refs_json[0] if refs_json else None
        if ref is None:
            # The reference goes through the same proxy with no delay: the proxy's own
            # cost (measured 1.13-1.25x TPOT on 2 cores) must not count as the effect.
            refs = [run_once(args, f"reference-{i + 1}", {"SPECPERF_PROXY_DELAY_MS": "0",
                                                          "SPECPERF_PROXY_CONFIGS": config},
                             repeats=args.reference_repeats)
                    for i in range(args.reference_runs)]
            summary["reference_runs"] = refs
            refs_json = [r["run_json"] for r in refs if r["run_json"]]
            ref = refs_json[0] if refs_json else None
        if ref is None:
            raise SystemExit("no reference run.json: cannot size or judge the injection")
        shape = fixed_shape() or measured_shape(ref, config)
        if not shape:
            raise SystemExit(f"the reference has no TPOT samples for config {config!r}")
        summary["shape"] = shape
        summary["delays_ms"] = {f"{s:g}": delay_ms_for(s, shape) for s in sizes}
        summary["expected_effects"] = {f"{s:g}": expected_effects(delay_ms_for(s, shape), shape)
                                       for s in sizes}
        tries = []
        for size, name in inj_names:
            d = delay_ms_for(size, shape)
            r = run_once(args, name, {"SPECPERF_PROXY_DELAY_MS": f"{d:.3f}",
                                      "SPECPERF_PROXY_CONFIGS": config})
            tries.append({**r, "size": size, "delay_ms": d})
        summary["injection"] = summarise_injection(tries, refs_json[-1], config,
                                                   refs_json[:-1])
    return _finish(args, summary)


if __name__ == "__main__":
    raise SystemExit(main())

"""Saved cpu-tiny runs re-judged with [compare.metrics.tpot_vs_nospec] min_effect = argv[1]
against the kept 2-run baseline: each TPOT-vs-no-spec verdict and interval, every
REGRESSION. No retry or fresh-server confirmation is re-run: what the run measured is
judged again (a run's trials from two server starts are judged on each start)."""
import sys
from collections import Counter
from pathlib import Path

from specperf.analysis.judge.run import compare_runs
from specperf.config.profile_file import load_profile
from specperf.store.baselines import load_baseline, load_history
from specperf.store.files import load_result

effect = float(sys.argv[1])
rules = load_profile("perf_tests/profiles/cpu-tiny.toml").compare
relative = rules.rule("tpot_vs_nospec").model_copy(update={"min_effect": effect})
rules = rules.model_copy(update={"metrics": {**rules.metrics, "tpot_vs_nospec": relative}})
bf = Path("/work/ov31/base/cpu-tiny/cpu-amd-epyc-2c.json")
base, hist = load_baseline(bf), load_history(bf)


def pct(x: float) -> str:
    return f"{(x - 1) * 100:+.1f}"


for path in sys.argv[2:]:
    cmp = compare_runs(load_result(path), base, rules, history=hist)
    verdicts, regressions, lines = Counter(), [], []
    for cc in cmp.cases:
        for c in cc.comparisons:
            busy = cc.busy and not c.metric.startswith("acceptance")
            verdicts["busy" if busy else c.verdict.value] += 1
            if c.verdict.value == "regression" and not busy:
                regressions.append(f"{cc.case.id}: {c.metric}")
            if c.metric == "TPOT vs no-spec":
                lines.append(f"{cc.case.id} {c.verdict.value} {pct(c.ratio)} % "
                             f"({pct(c.ci_low)} … {pct(c.ci_high)} %)")
    print(path.split("/")[-3], dict(verdicts), "REGRESSION:", regressions or "none")
    for line in lines:
        print("    ", line)

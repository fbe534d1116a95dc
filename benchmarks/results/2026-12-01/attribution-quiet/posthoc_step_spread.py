"""Post-hoc (2026-12-01): the quiet attribution runs' step-cost side re-judged with the
between-run spread of the 3 real baseline runs instead of the 2 kept twin runs."""
import sys

sys.path.insert(0, "src")  # from the repository root
from specperf.analysis.samples import per_trial
from specperf.analysis.stats import between_run_spread, compare_samples
from specperf.config.rules import CompareRules
from specperf.schemas import RunResult

W = sys.argv[1]  # the benchmark's WORK/runs
def load(n: str) -> RunResult:
    with open(f"{W}/{n}/run.json") as f:
        return RunResult.model_validate_json(f.read())


base = [load(f"baseline-{i}") for i in (1, 2, 3)]
rules = load("neither").compare_rules or CompareRules()
rule = rules.rule("tpot")
real_runs = [per_trial(b.cases[0], "tpot") for b in base]
twin_runs = [per_trial(list(b.pinned_acceptance.values())[0], "tpot") for b in base if b.pinned_acceptance]
sd_real = between_run_spread(real_runs, statistic="median")
sd_twin = between_run_spread(twin_runs, statistic="median")
print("between-run sd (log): real 3 runs", round(sd_real, 4), "twin 2 runs", round(sd_twin, 4))
for step in ("neither", "step", "acceptance"):
    try:
        r = load(step)
    except FileNotFoundError:
        continue
    twin = per_trial(list(r.pinned_acceptance.values())[0], "tpot")
    c = compare_samples("step", [v for vs in twin_runs for v in vs], twin, direction=rule.direction,
                        min_effect=rule.min_effect, alpha=rules.alpha, statistic="median",
                        confidence=rules.confidence, n_resamples=rules.n_resamples, seed=rules.seed,
                        between_run_sd=sd_real, baseline_runs=3)
    print(step, "step cost with the real runs' spread (3 runs):", c.verdict.value,
          round(c.ratio, 3), round(c.ci_low, 3), round(c.ci_high, 3))

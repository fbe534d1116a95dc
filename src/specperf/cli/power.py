"""``specperf power``: how many trials a baseline needs to catch a given effect.

    specperf power --baseline FILE --effect 0.05 [--alpha A] [--power 0.9] [--json]
                   [--repeats N] [--profile P] [--history FILE ... | --no-history]

Per case and metric (TTFT median, TPOT median, output throughput) of a baseline (or a run
file): the observed CV, the trials per side that catch ``--effect`` with ``--power`` at
the false-alarm rate ``--alpha``, the smallest effect the baseline's current repeats
catch, and the simulated power of the real verdict rule at that many trials
(specperf.analysis.power). The baseline's kept runs (its history) are pooled as the gate pools
them, and the spread between them -- the noise of a server restart, which no number of
trials in one run removes -- is part of every figure. The minimum effects, confidence and
trials the figures plan by are ``--profile``'s ``[compare]`` table (a baseline file records
none; a run file records its own), else the defaults; so is ``--alpha`` unless given, and
``--json`` records the rules and where they came from. Exit codes: 0 printed; 2 bad
input (one line naming the file).
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.table import Table

from specperf.analysis.power import power_report
from specperf.cli import options
from specperf.config.exits import Exit
from specperf.config.rules import CompareRules

__all__ = ["add_parser", "run"]

PROG = "specperf power"

#: What ``run`` returns, besides every command's {2, 130} (:data:`specperf.cli.EVERY_COMMAND`);
#: its ``--help`` epilogue lists them from specperf.config.exits.
EXITS: tuple[Exit, ...] = (Exit.OK,)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "power", help="trials needed to catch an effect, from a baseline's own noise",
        description=__doc__.split("\n\n", 2)[2] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--baseline", required=True, metavar="FILE",
                   help="a baseline (or run) JSON file with per-request samples")
    p.add_argument("--effect", type=float, required=True,
                   help="relative shift to catch, e.g. 0.05 for 5 %%")
    p.add_argument("--alpha", type=float, default=None,
                   help="false-alarm rate (default: the rules' α -- --profile's [compare] "
                        "alpha, else the run's, else 0.01)")
    p.add_argument("--power", type=float, default=0.9, help="wanted power (default 0.9)")
    p.add_argument("--sim-trials", type=int, default=200,
                   help="simulated experiments per figure (default 200; 0 = no simulation)")
    p.add_argument("--repeats", type=int, default=None, metavar="N",
                   help="trials the next run will have (default: the baseline's own): "
                        "'catches ≥' and the simulated power are for N")
    options.add_rules_profile(p)
    options.add_history(p)
    options.add_json(p, "the PowerReport")
    return p


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v * 100:.1f} %"


def _min_effects(rules: CompareRules) -> str:
    shown = (("ttft", "TTFT"), ("tpot", "TPOT"), ("output_throughput", "throughput"))
    return ", ".join(f"{label} {(rules.rule(key).min_effect or 0) * 100:g} %"  # type: ignore[arg-type]
                     for key, label in shown)


@options.exits_2_on_bad_input(PROG)
def run(args: argparse.Namespace) -> int:
    result = options.load(args.baseline)
    history = options.history(args, args.baseline)
    rules, rules_source = options.rules(args, result)
    try:
        # --alpha unset: the rules' own (the false-alarm rate the checks are judged at).
        report = power_report(result, args.effect, alpha=args.alpha, power=args.power,
                              rules=rules,
                              simulate=args.sim_trials > 0, sim_trials=max(args.sim_trials, 1),
                              source=str(args.baseline), history=history,
                              repeats=args.repeats)
    except ValueError as exc:
        raise options.BadInput(str(exc)) from None
    report = report.model_copy(update={"rules_source": rules_source})
    if args.json:
        print(report.model_dump_json(indent=1))
        return Exit.OK

    table = Table(title=f"Power for a {_pct(args.effect)} shift: α = {report.alpha:g}, "
                        f"power {args.power:g} ({args.baseline})")
    for col in ("case", "metric", "CV", "over", "n now", "runs", "between runs", "catches ≥",
                "needed / run", "simulated power"):
        table.add_column(col, justify="left" if col in ("case", "metric", "over") else "right")
    notes: list[str] = []
    for case in report.cases:
        for i, m in enumerate(case.metrics):
            sim = "—"
            if m.simulated_power is not None:
                sim = f"{m.simulated_power:.2f} @ n={m.simulated_n}"
            table.add_row(
                case.case if i == 0 else "", m.metric, _pct(m.cv), m.source or "—",
                str(m.n) if m.source else "—", str(m.baseline_runs),
                _pct(m.between_run_spread), _pct(m.detectable),
                "—" if m.needed is None else str(m.needed), sim,
            )
            if m.note:
                notes.append(f"{case.case} {m.metric}: {m.note}")
    console = Console()
    console.print(table)
    console.print(
        "needed: required_trials (normal approximation / Mann-Whitney efficiency); simulated "
        f"power: the real verdict rule at max(needed, {report.min_trials}) per side against "
        f"the metric's minimum effect ({_min_effects(rules)}: {rules_source}).",
        highlight=False,
    )
    for note in dict.fromkeys(notes):
        console.print(f"• {note}", highlight=False)
    return Exit.OK

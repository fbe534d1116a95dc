"""``specperf promote DIR --profile P --hardware H``: the last N green nightlies of a profile
and hardware become its baseline and history, when they agree
(specperf.analysis.reference.disagreements); what the promote-baseline workflow runs
before it opens a pull request (docs/baselines.md, "The nightly lifecycle")."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from specperf.analysis.reference import Labelled, disagreements
from specperf.analysis.samples import kept_runs
from specperf.cli import options
from specperf.config.exits import Exit
from specperf.report.console import plain
from specperf.report.escape import md_escape, neutralise_commands
from specperf.schemas import Baseline, RunResult, recorded_rules
from specperf.store import baselines as baseline_store
from specperf.store.files import BaselineError
from specperf.store.kept_runs import read_kept_runs

PROG = "specperf promote"

#: What ``run`` returns, besides every command's {2, 130} (:data:`specperf.cli.EVERY_COMMAND`);
#: its ``--help`` epilogue lists them from specperf.config.exits.
EXITS: tuple[Exit, ...] = (Exit.OK, Exit.PROMOTE_REFUSED)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "promote",
        help="make the last N agreeing nightlies a profile's baseline and history",
        description="Take the newest N run files of a profile and hardware in DIR (the same "
                    "vLLM, profile hash and prompts as the newest), check they agree — none "
                    "failed its own checks, none regresses against the others pooled, each "
                    "timing's run-to-run spread within the profile's budget — and write the "
                    "newest as BASELINES/<profile>/<hardware>.json and all N into its history, "
                    "each with its own provenance, atomically. Refused (too few runs, or they "
                    "disagree): each reason printed, nothing written.")
    p.add_argument("kept", metavar="DIR", help="directory of run files (e.g. fetch-nightlies')")
    p.add_argument("--profile", required=True, help="profile name, as in the run files")
    p.add_argument("--hardware", required=True, help="hardware id, e.g. gpu-nvidia-a100-sxm4-80gb-x1")
    p.add_argument("--runs", type=int, default=None, metavar="N",
                   help="how many runs (default: the profile's [compare] baseline_runs)")
    p.add_argument("--baselines", default="baselines", metavar="DIR",
                   help="the baselines directory to write into (default: baselines)")
    p.add_argument("--markdown", metavar="PATH",
                   help="also write what was promoted (or why not) as markdown, e.g. a pull "
                        "request's body")
    return p


def _source(label: str) -> str:
    """The nightly a run file came from (fetch-nightlies' nightly.json beside it), else its
    path."""
    meta = Path(label).parent / "nightly.json"
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
        url = data.get("html_url") if isinstance(data, dict) else None
    except (OSError, ValueError):
        url = None
    return f"{url} ({label})" if url else label


def _line(label: str, r: RunResult | Baseline) -> str:
    p = r.provenance
    return (f"{p.date:%Y-%m-%d %H:%M} vLLM {p.vllm_version or '?'} commit "
            f"{(p.git_commit or '?')[:10]}: {_source(label)}")


def _write_markdown(args: argparse.Namespace, text: str) -> None:
    """The pull request's body and its commit message (scripts/promote-baseline.sh): every
    piece from a run file escaped where it is put in, no line a workflow command."""
    if args.markdown:
        options.write_output("--markdown", Path(args.markdown), neutralise_commands(text))


@options.exits_2_on_bad_input(PROG)
def run(args: argparse.Namespace) -> int:
    path = baseline_store.baseline_path(Path(args.baselines), args.profile, args.hardware)
    try:
        found = read_kept_runs(Path(args.kept), on_bad=lambda line: print(plain(line), file=sys.stderr))
    except BaselineError as exc:
        raise options.BadInput(options.one_line(str(exc))) from None
    mine = [(k.label, k.result) for k in found
            if k.result.provenance.profile_name == args.profile
            and k.result.provenance.hardware_id == args.hardware
            and not k.result.provenance.provisional]
    if not mine:
        raise options.BadInput(f"{args.kept}: no run of profile {args.profile!r} on hardware "
                               f"{args.hardware!r} — check --profile and --hardware against "
                               "the run files' provenance (`specperf show FILE`)")
    newest_label, newest = max(mine, key=lambda lr: lr[1].provenance.date)
    rules = recorded_rules(newest)
    want = args.runs if args.runs is not None else rules.baseline_runs
    if want < 2:
        raise options.BadInput(f"--runs {want}: give 2 or more (agreement needs two runs)")
    labels = {id(r): lb for lb, r in mine}
    # Same vLLM, profile hash and prompts as the newest: the rule history is pooled by.
    chosen: list[Labelled] = [(newest_label, newest)]
    chosen += [(labels[id(r)], r) for r in kept_runs(newest, [r for _, r in mine])]
    chosen = chosen[:want]
    listed = "\n".join(f"- {md_escape(_line(lb, r))}" for lb, r in chosen)
    head = f"{args.profile} on {args.hardware}: {len(chosen)} run(s)"
    if len(chosen) < want:
        why = (f"refused: {head} of vLLM {newest.provenance.vllm_version or '?'} with this "
               f"profile hash and prompts, {want} needed — promote after more green nightlies "
               "(or pass --runs)")
        print(plain(f"{PROG}: {why}"), file=sys.stderr)
        _write_markdown(args, f"### specperf: baseline not promoted\n\n{md_escape(why)}\n\n"
                              f"{listed}\n")
        return Exit.PROMOTE_REFUSED
    problems = disagreements(chosen, rules)
    if problems:
        for problem in problems:
            print(plain(f"{PROG}: {problem}"), file=sys.stderr)
        print(f"{PROG}: refused: the {len(chosen)} runs do not agree ({len(problems)} "
              f"problem{'s' if len(problems) != 1 else ''}); nothing written", file=sys.stderr)
        _write_markdown(args, "### specperf: baseline not promoted: the runs disagree\n\n"
                        + "".join(f"- {md_escape(p)}\n" for p in problems)
                        + f"\nRuns:\n\n{listed}\n")
        return Exit.PROMOTE_REFUSED
    runs = [Baseline(provenance=r.provenance, cases=r.cases, paired_nospec=r.paired_nospec)
            for _, r in chosen]
    try:
        # Whether it already is the baseline is decided there, under the baseline's lock:
        # a check before it would let two promotes of the same runs both write.
        written, current, filed = baseline_store.promote_runs(path, runs)
    except OSError as exc:
        raise options.BadInput(f"{path}: cannot write the baseline: {exc.strerror or exc} — "
                               "give a writable --baselines directory") from None
    if not written:
        print(plain(f"{path}: already the baseline ({_line(newest_label, newest)}); nothing written"))
        return Exit.OK
    was = ("the provisional baseline (published figures)" if current is not None
           and current.provenance.provisional else "no baseline" if current is None
           else f"the baseline of {current.provenance.date:%Y-%m-%d}")
    summary = (f"{head} agree (none failed its own checks, none regresses against the "
               f"others, every timing's run-to-run spread within the profile's budget); "
               f"{path} replaces {was}, "
               + (f"all {len(chosen)} filed in its history" if filed == len(chosen) else
                  f"{filed} filed in its history ({len(chosen) - filed} there already, "
                  "from an earlier promote)"))
    print(plain(f"{summary}\n" + "\n".join(f"- {_line(lb, r)}" for lb, r in chosen)))
    _write_markdown(args, f"### specperf: baseline promoted\n\n{md_escape(summary)}.\n\n"
                          f"Runs (newest "
                          f"first; each history entry keeps its own provenance):\n\n{listed}\n")
    return Exit.OK

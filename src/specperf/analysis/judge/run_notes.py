"""The notes of a run's judgement that are no case's verdict: why a whole comparison is
refused (provenance) or what differs between the sides, and what the run as a whole should
be told — a note many cases share said once, how many kept runs were pooled, what these
trials cannot see, a machine that moved with the software unchanged, per-request
fallbacks, cases on one side only. The verdicts stay what the numbers and the hold rules
say; these are said, never acted on."""

from __future__ import annotations

from collections import Counter

from specperf.analysis.judge.models import RunComparison
from specperf.analysis.stats import Verdict
from specperf.config.rules import CompareRules
from specperf.schemas import Case, Provenance
from specperf.schemas.records import UNKNOWN_REVISION

__all__ = ["RECORD_HINT", "add_run_notes", "model_revision_note", "provenance_notes",
           "provenance_refusals"]

RECORD_HINT = (
    "record a new baseline on this machine with `nox -s perf -- --perf-profile {profile} "
    "--perf-update-baselines` (it writes baselines/{profile}/{hardware_id}.json), or compare "
    "against a baseline recorded with the same profile on the same hardware"
)

def provenance_refusals(run: Provenance, base: Provenance) -> list[str]:
    hint = RECORD_HINT.format(profile=run.profile_name, hardware_id=run.hardware_id)
    out = []
    if run.hardware_id != base.hardware_id:
        out.append(
            f"hardware differs: the baseline was measured on {base.hardware} (hardware_id "
            f"{base.hardware_id!r}), the run on {run.hardware} ({run.hardware_id!r}); latency "
            f"and throughput only compare on the same hardware — {hint}"
        )
    if run.profile_hash != base.profile_hash:
        names = (f"profile {run.profile_name!r}" if run.profile_name == base.profile_name
                 else f"profiles {base.profile_name!r} (baseline) and {run.profile_name!r} (run)")
        out.append(
            f"the profile differs: {names} hash to {base.profile_hash} (baseline) and "
            f"{run.profile_hash} (run), so the two measured different things (matrix, workload, "
            f"sampling or server arguments) — {hint}"
        )
    if run.prompts_hash and base.prompts_hash and run.prompts_hash != base.prompts_hash:
        out.append(
            f"the prompts differ: the baseline sent prompts hashing to {base.prompts_hash}, "
            f"the run {run.prompts_hash} (a changed dataset file, another --perf-dataset, or "
            f"synthetic prompts made differently) — {hint}"
        )
    return out


def provenance_notes(run: Provenance, base: Provenance) -> list[str]:
    notes = []
    if run.vllm_version != base.vllm_version:
        notes.append(f"vLLM {base.vllm_version or '?'} (baseline) → "
                     f"{run.vllm_version or '?'} (run)")
    if run.torch_version != base.torch_version and run.torch_version and base.torch_version:
        notes.append(f"torch {base.torch_version} (baseline) → {run.torch_version} (run)")
    if run.driver_version != base.driver_version and run.driver_version and base.driver_version:
        notes.append(f"driver {base.driver_version} (baseline) → {run.driver_version} (run)")
    models = model_revision_note(run, base)
    if models:
        notes.append(models)
    if base.provisional:
        notes.append(f"the baseline is provisional: {base.provisional}")
    if run.provisional:
        notes.append(f"the run is provisional: {run.provisional}")
    return notes


def _short(rev: str) -> str:
    return rev[:12] if len(rev) == 40 else rev


def model_revision_note(run: Provenance, base: Provenance) -> str | None:
    """What differs in the model revisions of the two sides. A note, as a vLLM version
    change is, never a refusal: a changed pin already changes the profile hash, so what
    is left is an unpinned model the hub moved, which may move acceptance and speed or
    nothing. An "unknown" revision, or a side that records none (a file from before they
    were recorded), cannot say whether the weights are the same, and says so."""
    was, now = base.model_revisions, run.model_revisions
    if was == now and UNKNOWN_REVISION not in was.values():
        return None
    if not was or not now:
        side, other, revs = ("baseline", "run", now) if not was else ("run", "baseline", was)
        shown = ", ".join(f"{m} at {_short(r)}" for m, r in sorted(revs.items()))
        return (f"model revisions: the {side} records none (recorded before specperf kept "
                f"them, or it served no hub model), the {other} served {shown}; whether "
                "the weights are the same is not known")
    differ, unknown = [], []
    for model in sorted(set(was) | set(now)):
        a, b = was.get(model), now.get(model)
        pair = (f"{model} {_short(a) if a else 'not loaded'} (baseline) → "
                f"{_short(b) if b else 'not loaded'} (run)")
        if UNKNOWN_REVISION in (a, b):
            unknown.append(pair)
        elif a != b:
            differ.append(pair)
    parts = []
    if differ:
        parts.append("model revisions differ: " + "; ".join(differ) + " — a model the "
                     "profile does not pin moved on the hub (pin it with `revision`: "
                     "docs/profiles.md); other weights may move acceptance and speed")
    if unknown:
        parts.append("model revision not known: " + "; ".join(unknown) + " — whether the "
                     "weights are the same cannot be told (scripts/download_models.py "
                     "records the commit in the hub cache)")
    return "; ".join(parts) or None


def add_run_notes(result: RunComparison, rules: CompareRules, *, per_request: bool) -> None:
    """The run-level notes, appended to ``result.notes`` in place (a note shared by cases
    is taken off them). ``per_request``: some case fell back to per-request samples."""
    rp, bp = result.run_provenance, result.baseline_provenance
    # A note that many cases share (e.g. "E2E not compared: the baseline has no E2E ...")
    # is said once for the run.
    shared = Counter(n for cc in result.cases for n in set(cc.notes))
    for note, count in shared.items():
        if count > 1:
            result.notes.append(f"{note} ({count} cases)")
    for cc in result.cases:
        cc.notes = [n for n in cc.notes if shared[n] <= 1]
    runs_used = Counter(d.baseline_runs for cc in result.cases for d in cc.details.values()
                        if d.samples == "trials")
    if runs_used:
        most = max(runs_used)
        if most > 1:
            result.notes.append(
                f"baseline: trials of up to {most} kept runs pooled (rule baseline_runs = "
                f"{rules.baseline_runs}); the intervals include the spread between them")
        elif rules.baseline_runs > 1:
            result.notes.append(
                "baseline: one run, so the intervals show trial-to-trial noise only, not the "
                "noise of a server restart — keep accepting runs into the baseline "
                "(--perf-update-baselines) until its history holds "
                f"{rules.baseline_runs} runs")
    blind = [(cc, d) for cc in result.cases for d in cc.details.values()
             if d.detectable is not None and d.detectable > rules.rule(d.key).min_effect]
    if blind:
        worst = max(blind, key=lambda x: x[1].detectable / rules.rule(x[1].key).min_effect)  # type: ignore[operator]
        cc, d = worst
        rule = rules.rule(d.key)
        need = (f"{d.trials_needed} trials per run would" if d.trials_needed
                else "no number of trials in one run would (the baseline's noise and the "
                     "between-run spread alone exceed it: keep more runs, or quieten the "
                     "machine)")
        result.notes.append(
            f"these repeats cannot see every minimum effect: {len(blind)} of "
            f"{sum(1 for _ in result.all())} metric×case comparisons catch (90 % power) only "
            f"shifts larger than their minimum effect — worst {cc.case.id} {rule.name}: "
            f"≥ {d.detectable * 100:.0f} % against a {rule.min_effect * 100:g} % minimum; "  # type: ignore[operator]
            f"{need}")
    moved = _machine_moved(result, rp, bp, rules)
    if moved:
        result.notes.append(moved)
    if per_request:
        result.notes.append(
            f"some cases have fewer than {rules.min_trials} trials per side: their latencies "
            "were compared per request, which understates run-to-run drift, and their "
            f"throughput against the ±{rules.budget('output_throughput') * 100:g} % budget; "
            f"record ≥ {rules.min_trials} trials (--perf-repeats) for a real interval"
        )
    if result.only_in_run:
        result.notes.append(f"{len(result.only_in_run)} case(s) only in the run, not compared: "
                            + _case_list(result.only_in_run))
    if result.only_in_baseline:
        result.notes.append(f"{len(result.only_in_baseline)} case(s) only in the baseline, not "
                            "compared: " + _case_list(result.only_in_baseline))


def _machine_moved(result: RunComparison, run: Provenance, base: Provenance,
                   rules: CompareRules) -> str | None:
    """A note when the no-spec cases' TPOT moved, decidedly, with nothing of the software
    changed (same vLLM and torch): no-spec runs no draft, so what moved it is the machine —
    a VM's host can run it tens of percent faster or slower from one day to the next (the
    EPYC VM of docs/validation.md ran cpu-tiny's no-spec at a 34 % lower TPOT on 2026-12-03
    than when its baseline was kept, hours before). The verdicts stay what the numbers say;
    the note tells the reader that this run's other absolute timing changes may be the
    machine's too, and which figures are not."""
    if (run.vllm_version != base.vllm_version or run.torch_version != base.torch_version
            or model_revision_note(run, base) is not None):
        return None  # an upgrade (or other weights) may move no-spec itself
    tpot = rules.rule("tpot").name
    moves = [(cc.case, c) for cc in result.cases if cc.method is None and not cc.busy
             for c in cc.comparisons if c.metric == tpot
             and c.verdict in (Verdict.IMPROVEMENT, Verdict.REGRESSION)]
    if not moves:
        return None
    moves.sort(key=lambda m: m[0].concurrency)
    shown = ", ".join(f"{(c.ratio - 1) * 100:+.0f} % at c{case.concurrency}" for case, c in moves)
    return (f"no-spec's {tpot} moved with the same vLLM {run.vllm_version or '?'} ({shown}, "
            "decided): no draft runs there, so this machine ran faster or slower than when "
            "the baseline was recorded, and the other absolute timing changes of this run "
            "may be the machine's too; TPOT vs no-spec and the TPOT gain, taken within the "
            "run, are not")


def _case_list(cases: list[Case], limit: int = 8) -> str:
    ids = [c.id for c in cases[:limit]]
    more = f" and {len(cases) - limit} more" if len(cases) > limit else ""
    return ", ".join(ids) + more

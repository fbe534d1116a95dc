"""A run judged against a baseline: the refusals (another hardware id, profile hash or
prompts hash refuses the whole run, a changed server config its cases; ``force=True``
turns them into notes: :mod:`specperf.analysis.judge.run_notes`), each case's evidence
(:class:`~specperf.analysis.judge.Against`), :func:`~specperf.analysis.judge.case.judge_case`
of every case, the run's notes and the pinned-acceptance attributions.

``compare_runs(run, baseline)`` returns a :class:`~specperf.analysis.judge.models.RunComparison`;
every renderer (console, markdown, HTML) views that object, and what ``specperf compare``
exits with is :func:`specperf.analysis.judge.exit_status.run_exit_status` of the run's
checks and it (the one exit table: :mod:`specperf.config.exits`). Either side may be a
:class:`~specperf.schemas.RunResult` or a :class:`~specperf.schemas.Baseline` (a baseline is
a run that was kept; :func:`as_run` shows one as a run).

The rules are :class:`~specperf.config.rules.CompareRules`; the run records the rules it
was judged with (``RunResult.compare_rules``), which ``compare_runs`` uses when it is given
none.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from specperf.analysis.attribution import Attribution, attribute, same_pin
from specperf.analysis.judge.case import judge_case
from specperf.analysis.judge.evidence import Against, side_labels
from specperf.analysis.judge.models import RunComparison
from specperf.analysis.judge.run_notes import (
    RECORD_HINT,
    add_run_notes,
    provenance_notes,
    provenance_refusals,
)
from specperf.analysis.samples import earlier_runs, kept_runs
from specperf.config.rules import CompareRules
from specperf.schemas import Baseline, Case, CaseResult, RunResult, recorded_rules

__all__ = ["as_run", "compare_runs"]


def as_run(result: RunResult | Baseline, source: Path | str | None = None) -> RunResult:
    """A baseline viewed as a run (for renderers that take a RunResult)."""
    if isinstance(result, RunResult):
        return result
    where = Path(source).parent if source is not None else Path(".")
    return RunResult(
        provenance=result.provenance,
        run_dir=str(where),
        started_at=result.provenance.date,
        cases=result.cases,
        baseline_note=f"a baseline shown as a run{f' ({source})' if source else ''}",
    )


def compare_runs(
    run: RunResult | Baseline,
    baseline: RunResult | Baseline,
    rules: CompareRules | None = None,
    *,
    run_label: str | None = None,
    baseline_label: str | None = None,
    force: bool = False,
    history: Sequence[RunResult | Baseline] = (),
) -> RunComparison:
    """Compare every case present in both, after checking the provenance is comparable.

    ``history``: the baseline's kept earlier runs (:func:`specperf.store.baselines.load_history`,
    any order; a copy of the baseline itself is skipped). The newest ones of the same
    hardware id, profile hash, vLLM version, prompts and model revisions
    (:func:`specperf.analysis.samples.kept_runs`), whose case has the same server config,
    join the baseline up to ``rules.baseline_runs`` runs per case
    (:func:`specperf.analysis.compare.against_baseline`).

    ``rules`` default to the ones the run recorded (``RunResult.compare_rules``: its
    profile's ``[compare]`` table), so an offline ``specperf compare`` judges a run as
    the run itself did; a file without them (a baseline, an older run) gets the defaults.
    """
    if rules is None:
        rules = recorded_rules(run)
    rp, bp = run.provenance, baseline.provenance
    refusals = provenance_refusals(rp, bp)
    notes = provenance_notes(rp, bp)
    changed_rules = rules.changes()
    if changed_rules:
        notes.append("rules differ from the defaults: " + "; ".join(changed_rules))
    result = RunComparison(
        run_label=run_label, baseline_label=baseline_label, run_provenance=rp,
        baseline_provenance=bp, rules=rules, notes=notes,
    )
    base_cases = {c.case: c for c in baseline.cases}
    run_cases = {c.case: c for c in run.cases}
    result.only_in_run = [c for c in run_cases if c not in base_cases]
    result.only_in_baseline = [c for c in base_cases if c not in run_cases]
    if refusals and not force:
        result.refusals = refusals
        return result
    if refusals:
        result.notes[:0] = [f"compared despite: {r.split(' — ')[0]}" for r in refusals]

    against = Against(baseline, history, rules,
                      labels=side_labels(bp.vllm_version, rp.vllm_version))
    per_request = False
    paired = run.paired_nospec if isinstance(run, RunResult) else {}
    floors = run.tpot_gain_floors if isinstance(run, RunResult) else {}
    # One per server config: its cases share the no-spec trials measured beside them.
    references = {cid: against.reference(cid, paired)
                  for cid in {case.config_id for case in run_cases}}
    for case, cur in run_cases.items():
        base = base_cases.get(case)
        gain = dict(paired=paired.get(case.id), gain_floor=floors.get(case.id))
        if base is None:
            if gain["paired"] is not None and gain["gain_floor"] is not None:
                # No baseline case, but the run's own paired gain is still judged.
                result.cases.append(judge_case(against.evidence(cur, base=None, **gain), rules))  # type: ignore[arg-type]
            continue
        changed = []
        if base.config_hash and cur.config_hash and base.config_hash != cur.config_hash:
            changed.append(f"config hash {base.config_hash} → {cur.config_hash}")
        if base.method != cur.method:
            changed.append(f"speculative method {base.method} → {cur.method}")
        if base.num_speculative_tokens != cur.num_speculative_tokens:
            changed.append(f"k {base.num_speculative_tokens} → {cur.num_speculative_tokens}")
        if changed:
            msg = (f"case {case.id}: the server config changed between the baseline and the run "
                   f"({', '.join(changed)}), so its numbers do not compare — "
                   + RECORD_HINT.format(profile=rp.profile_name, hardware_id=rp.hardware_id))
            if not force:
                result.refusals.append(msg)
                continue
            result.notes.append(f"compared despite: {msg.split(' — ')[0]}")
        cc = judge_case(against.evidence(cur, base=base, reference=references[case.config_id],
                                         **gain), rules)  # type: ignore[arg-type]
        if base.draft_model != cur.draft_model:
            cc.notes.append(f"draft model {base.draft_model} (baseline) → {cur.draft_model} (run)")
        per_request |= any(d.samples == "requests" for d in cc.details.values())
        result.cases.append(cc)
    if result.refusals:
        result.cases = []
        return result
    if isinstance(run, RunResult):
        result.attributions = _attributions(run, baseline, base_cases, rules, history)
    add_run_notes(result, rules, per_request=per_request)
    if not any(cc.case in base_cases for cc in result.cases):
        # A gate that compared nothing must not pass quietly.
        result.refusals.append(
            "nothing to compare: no case is present in both the run "
            f"({len(run.cases)} cases) and the baseline ({len(baseline.cases)} cases) — "
            "check that the files are the ones you meant, or "
            + RECORD_HINT.format(profile=rp.profile_name, hardware_id=rp.hardware_id))
    return result


def _attributions(run: RunResult, baseline: RunResult | Baseline,
                  base_cases: dict[Case, CaseResult], rules: CompareRules,
                  history: Sequence[RunResult | Baseline]) -> list[Attribution]:
    """Each compared spec case with a pinned-acceptance twin, its TPOT change split."""
    out = []
    for cur in run.cases:
        pinned = run.pinned_acceptance.get(cur.case.id)
        base = base_cases.get(cur.case)
        if pinned is None or base is None:
            continue
        rates = run.pinned_rates.get(cur.case.config_id, [])
        out.append(attribute(base, cur, pinned, rules, rates,
                             earlier=earlier_runs(base, baseline, history),
                             base_twins=_kept_twins(base, rates, baseline, history)))
    return out


def _kept_twins(base: CaseResult, rates: Sequence[float], baseline: RunResult | Baseline,
                history: Sequence[RunResult | Baseline]) -> list[tuple[CaseResult, CaseResult]]:
    """(real, twin) of the baseline and its kept runs whose twin of this case was pinned to
    ``rates`` (same server config as the baseline case); newest first."""
    out = []
    for kept in [baseline, *kept_runs(baseline, history)]:
        case = kept.case(base.case)
        twin = kept.pinned_acceptance.get(base.case.id)
        kept_rates = kept.pinned_rates.get(base.case.config_id)
        if (case is None or twin is None or kept_rates is None or (case, twin) in out
                or case.config_hash != base.config_hash or not same_pin(kept_rates, rates)):
            continue
        out.append((case, twin))
    return out



"""The model-revision note of a comparison: a baseline judged against a run that served
other model revisions says so (a note, as a vLLM change is, never a refusal or a hold),
in the comparison and in both renderings of it."""

from __future__ import annotations

from specperf.analysis.judge.exit_status import run_exit_status
from specperf.analysis.judge.run import compare_runs
from specperf.analysis.judge.run_notes import model_revision_note
from specperf.config.rules import CompareRules
from specperf.report.console import render_comparison
from specperf.report.markdown import comparison_markdown
from specperf.report.synthetic import scale_latency
from specperf.schemas import RunResult
from specperf.schemas.records import UNKNOWN_REVISION
from tests.support import make_provenance

A, B, C = "a" * 40, "b" * 40, "c" * 40


def _with(run: RunResult, revisions: dict[str, str]) -> RunResult:
    return run.model_copy(update={"provenance": run.provenance.model_copy(
        update={"model_revisions": revisions})})


def test_the_same_revisions_say_nothing_and_other_ones_name_the_models() -> None:
    same = make_provenance(model_revisions={"org/target": A, "org/draft": B})
    assert model_revision_note(same, same) is None
    assert model_revision_note(make_provenance(), make_provenance()) is None  # tiny models
    moved = make_provenance(model_revisions={"org/target": A, "org/draft": C})
    note = model_revision_note(moved, same)
    assert note is not None and note.startswith(
        f"model revisions differ: org/draft {B[:12]} (baseline) → {C[:12]} (run) — ")
    assert "org/target" not in note and "pin it with `revision`" in note
    dropped = make_provenance(model_revisions={"org/target": A})
    assert "org/draft " + B[:12] + " (baseline) → not loaded (run)" in (
        model_revision_note(dropped, same) or "")


def test_an_unknown_revision_or_an_older_file_cannot_tell_and_says_so() -> None:
    unknown = make_provenance(model_revisions={"org/target": UNKNOWN_REVISION})
    # Unknown on both sides is not "the same".
    note = model_revision_note(unknown, unknown)
    assert note is not None and note.startswith(
        "model revision not known: org/target unknown (baseline) → unknown (run) — whether "
        "the weights are the same cannot be told")
    known = make_provenance(model_revisions={"org/target": A})
    assert "org/target unknown (baseline) → " + A[:12] in (model_revision_note(known, unknown)
                                                            or "")
    older = make_provenance()  # a baseline kept before revisions were recorded
    assert model_revision_note(known, older) == (
        "model revisions: the baseline records none (recorded before specperf kept them, or it "
        f"served no hub model), the run served org/target at {A[:12]}; whether the weights are "
        "the same is not known")


def test_a_comparison_across_revisions_notes_it_and_judges_as_before(real: RunResult) -> None:
    base = _with(real, {"org/target": A})
    run = _with(real, {"org/target": B})
    cmp = compare_runs(run, base)
    plain = compare_runs(real, real)
    assert not cmp.refusals
    [note] = [n for n in cmp.notes if n.startswith("model revisions differ")]
    assert f"org/target {A[:12]} (baseline) → {B[:12]} (run)" in note
    # A note only: every verdict is the one the same numbers get without it.
    assert ([(cc.case.id, [m.verdict for m in cc.comparisons]) for cc in cmp.cases]
            == [(cc.case.id, [m.verdict for m in cc.comparisons]) for cc in plain.cases])
    assert run_exit_status([], cmp) == run_exit_status([], plain)
    assert "model revisions differ" in render_comparison(cmp, width=200, color=False)
    assert "**Note:** model revisions differ" in comparison_markdown(cmp)


def test_other_weights_are_not_called_the_machine_moving(real: RunResult) -> None:
    rules = CompareRules(min_trials=2)
    faster = scale_latency(real, 0.6)
    same = compare_runs(_with(faster, {"org/target": A}), _with(real, {"org/target": A}), rules)
    assert any(n.startswith("no-spec's TPOT moved with the same vLLM") for n in same.notes)
    other = compare_runs(_with(faster, {"org/target": B}), _with(real, {"org/target": A}), rules)
    assert not any("moved with the same vLLM" in n for n in other.notes)

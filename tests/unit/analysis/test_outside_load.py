"""The outside-load wording (specperf.analysis.outside_load) where it shows: old run files
that predate the contention guard, the guard's fields in run files, the reports, and
compare's note on a contended side. The guard itself: tests/unit/engine/test_contention.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specperf.analysis import outside_load
from specperf.analysis.compare import compare_runs
from specperf.report.console import render_baseline, render_run
from specperf.report.html import render_html
from specperf.report.markdown import render_markdown
from specperf.schemas import Baseline, RunResult
from specperf.store.files import load_result
from tests.support import CPU_CI_PAIRED_RUN, DATA_DIR, load_run

OLD_RUNS = sorted(p for p in DATA_DIR.glob("run-*.json"))


# --------------------------------------------------------------------------- run files


@pytest.mark.parametrize("path", OLD_RUNS, ids=lambda p: p.name)
def test_old_run_files_load_with_the_load_unknown(path: Path) -> None:
    run = load_result(path)
    assert isinstance(run, RunResult)
    trials = [t for c in [*run.cases, *run.paired_nospec.values()] for t in c.trials]
    assert trials
    assert all(t.outside_cores is None and not t.contended and t.remeasured_outside_cores == []
               for t in trials)
    assert not outside_load.known(run.cases, run.paired_nospec)
    # Written back and read again: the new fields round-trip with their defaults.
    again = RunResult.model_validate_json(run.model_dump_json())
    assert again == run


def _guarded(run: RunResult, case_id: str, *, contended: float | None = None,
             remeasured: tuple[float, ...] = (), quiet: float = 0.03) -> RunResult:
    """The run with every trial's outside load known, and one case's first trial
    re-measured and/or kept contended (as the fixture's guard would record it)."""
    def mark(c):  # type: ignore[no-untyped-def]
        trials = [t.model_copy(update={"outside_cores": quiet}) for t in c.trials]
        if c.case.id == case_id:
            trials[0] = trials[0].model_copy(update={
                "outside_cores": contended if contended is not None else quiet,
                "contended": contended is not None,
                "remeasured_outside_cores": list(remeasured)})
        return c.model_copy(update={"trials": trials})
    return run.model_copy(update={
        "cases": [mark(c) for c in run.cases],
        "paired_nospec": {k: mark(v) for k, v in run.paired_nospec.items()}})


@pytest.fixture(scope="module")
def paired_run() -> RunResult:
    return load_run(CPU_CI_PAIRED_RUN)


def test_new_fields_round_trip_in_runs_and_baselines(paired_run: RunResult) -> None:
    run = _guarded(paired_run, "draft-k2-c1", contended=0.8, remeasured=(0.9, 0.6))
    again = RunResult.model_validate_json(run.model_dump_json())
    assert again == run
    t = again.case(again.cases[2].case).trials[0]  # type: ignore[union-attr]
    assert (t.outside_cores, t.contended, t.remeasured_outside_cores) == (0.8, True, [0.9, 0.6])
    base = Baseline(provenance=run.provenance, cases=run.cases)
    assert Baseline.model_validate_json(base.model_dump_json()) == base
    raw = json.loads(run.model_dump_json())
    assert raw["cases"][2]["trials"][0]["remeasured_outside_cores"] == [0.9, 0.6]


# --------------------------------------------------------------------------- reports


def test_reports_show_max_load_and_what_was_remeasured(paired_run: RunResult) -> None:
    run = _guarded(paired_run, "draft-k2-c1", contended=0.8, remeasured=(0.9, 0.6))
    text = render_run(run, width=140, color=False)
    assert "outside cores" in text
    assert "0.80 (2 re-measured, 1 contended)" in text
    assert ("outside load: draft-k2-c1: 2 trials re-measured under outside load 0.90, 0.60 "
            "cores; 1 trial still measured under outside load 0.80 cores after the retries "
            "(contended)") in " ".join(text.split())
    assert "0.03" in text  # a quiet case's max
    md = render_markdown(run)
    assert "**Outside CPU load:** draft-k2-c1: 2 trials re-measured" in md
    assert "| outside cores |" in md and "0.80 (2 re-measured, 1 contended)" in md
    html = render_html(run, make_plots=False)
    assert "<b>Outside CPU load:</b>" in html and "0.80 (2 re-measured, 1 contended)" in html


def test_paired_nospec_trials_are_reported_with_their_spec_case(paired_run: RunResult) -> None:
    run = _guarded(paired_run, "nospec-c1", remeasured=(1.1,))
    # draft-k2-c1's paired no-spec trials feed its TPOT gain: said under its name.
    pairing = run.paired_nospec["draft-k2-c1"]
    trials = [pairing.trials[0].model_copy(update={"remeasured_outside_cores": [0.7]}),
              *pairing.trials[1:]]
    run = run.model_copy(update={"paired_nospec": {
        **run.paired_nospec, "draft-k2-c1": pairing.model_copy(update={"trials": trials})}})
    lines = " ".join(render_run(run, width=140, color=False).split())
    assert "outside load: nospec-c1: 1 trial re-measured under outside load 1.10 cores" in lines
    assert ("outside load: draft-k2-c1: 1 trial (paired no-spec) re-measured under outside "
            "load 0.70 cores") in lines


def test_reports_of_old_runs_have_no_outside_column(paired_run: RunResult) -> None:
    assert "outside" not in render_run(paired_run, width=140, color=False)
    assert "outside" not in render_markdown(paired_run).lower()
    assert "outside" not in render_html(paired_run, make_plots=False).lower()
    base = Baseline(provenance=paired_run.provenance, cases=paired_run.cases)
    assert "outside" not in render_baseline(base, width=140, color=False)


# --------------------------------------------------------------------------- compare


def test_compare_notes_a_contended_side_and_keeps_its_verdicts(paired_run: RunResult) -> None:
    plain = compare_runs(paired_run, paired_run)
    busy = _guarded(paired_run, "draft-k2-c1", contended=0.91)
    cmp = compare_runs(busy, paired_run)
    for a, b in zip(plain.cases, cmp.cases, strict=True):
        assert [m.verdict for m in a.comparisons] == [m.verdict for m in b.comparisons]
    noted = {cc.case.id: cc.notes for cc in cmp.cases}
    assert noted["draft-k2-c1"] == [
        "current measured under outside load 0.91 cores (1 trial contended): other processes "
        "used the CPU during these trials, so a REGRESSION here may be the machine, not vLLM"]
    assert all(not n for cid, n in noted.items() if cid != "draft-k2-c1")
    # Re-measured but finally clean trials are no reason for doubt.
    clean = compare_runs(_guarded(paired_run, "draft-k2-c1", remeasured=(0.9,)), paired_run)
    assert all(not cc.notes for cc in clean.cases)
    # The baseline's side is named as such.
    back = compare_runs(paired_run, busy)
    assert any(n.startswith("baseline measured under outside load 0.91 cores")
               for cc in back.cases for n in cc.notes)

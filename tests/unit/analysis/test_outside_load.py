"""The outside-load wording (specperf.analysis.outside_load) where it shows: old run files
that predate the contention guard, the guard's fields in run files, the reports, and
compare's note on a contended side, and the "machine busy" reasons a busy case's checks and
the run summary give. The guard itself: tests/unit/engine/test_contention.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specperf.analysis import outside_load
from specperf.analysis.judge.run import compare_runs
from specperf.report.console import render_baseline, render_run
from specperf.report.html import render_html
from specperf.report.markdown import render_markdown
from specperf.schemas import Baseline, RunResult
from specperf.store.files import load_result
from tests.support import (
    CPU_CI_PAIRED_RUN,
    DATA_DIR,
    load_run,
    make_requests,
    make_trial_of,
)

OLD_RUNS = sorted(p for p in DATA_DIR.glob("run-*.json"))


# --------------------------------------------------------------------------- run files


@pytest.mark.parametrize("path", OLD_RUNS, ids=lambda p: p.name)
def test_old_run_files_load_with_the_load_unknown(path: Path) -> None:
    run = load_result(path)
    assert isinstance(run, RunResult)
    trials = [t for c in [*run.cases, *run.paired_nospec.values()] for t in c.trials]
    assert trials
    assert all(t.outside_cores is None and not t.contended and t.remeasured_outside_cores == []
               and t.busy_wait_s is None for t in trials)
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
    # The wait's seconds: written only where the wait ran, read back the same.
    assert all("busy_wait_s" not in t for c in raw["cases"] for t in c["trials"])
    waited = run.model_copy(update={"cases": [
        c.model_copy(update={"trials": [t.model_copy(update={"busy_wait_s": 12.5})
                                        for t in c.trials]}) for c in run.cases]})
    again = RunResult.model_validate_json(waited.model_dump_json())
    assert again == waited and again.cases[0].trials[0].busy_wait_s == 12.5


# --------------------------------------------------------------------------- reports


def test_reports_show_max_load_and_what_was_remeasured(paired_run: RunResult) -> None:
    run = _guarded(paired_run, "draft-k2-c1", contended=0.8, remeasured=(0.9, 0.6))
    text = render_run(run, width=140, color=False)
    assert "outside cores" in text
    assert "0.80 (2 re-measured, 1 contended)" in text
    assert ("outside load: draft-k2-c1: 2 trials re-measured under outside load 0.90, 0.60 "
            "cores; 1 trial kept as measured under outside load 0.80 cores (contended)"
            ) in " ".join(text.split())
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


# --------------------------------------------------------------------------- busy: not measured


def _t(outside: float | None, contended: bool = False):  # type: ignore[no-untyped-def]
    trial = make_trial_of(make_requests(1), outside_cores=outside)
    return trial.model_copy(update={"contended": contended})


def test_busy_reason_is_none_without_a_contended_kept_trial() -> None:
    assert outside_load.busy_reason([]) is None
    assert outside_load.busy_reason([_t(None), _t(0.1)], [_t(0.2)]) is None
    # Re-measured but finally clean: measured, so judged.
    clean = _t(0.1).model_copy(update={"remeasured_outside_cores": [0.9, 0.8]})
    assert outside_load.busy_reason([clean]) is None


def test_busy_reason_names_the_max_load_of_the_contended_trials() -> None:
    # Only contended trials count, not one kept under the limit (0.7 under a limit of 1):
    # 0.64 is their max.
    trials = [_t(0.7), _t(0.64, contended=True), _t(0.41, contended=True)]
    assert (outside_load.busy_reason(trials)
            == "machine busy (0.6 cores from other processes)")
    # The paired no-spec reference's contended trials make the case busy too.
    assert (outside_load.busy_reason([_t(0.1)], [_t(0.93, contended=True)])
            == "machine busy (0.9 cores from other processes)")
    assert (outside_load.busy_reason([_t(0.3, contended=True)], [_t(1.26, contended=True)])
            == "machine busy (1.3 cores from other processes)")
    # A tiny limit: the figure does not round to nothing.
    assert (outside_load.busy_reason([_t(0.031, contended=True)])
            == "machine busy (0.031 cores from other processes)")
    # Contended with the load missing (a hand-edited file): still busy.
    assert outside_load.busy_reason([_t(None, contended=True)]) == "machine busy"


def _contend(run: RunResult, case_id: str, load: float) -> RunResult:
    """The run with case ``case_id``'s trials (wherever it appears, paired too) kept
    contended under ``load``; every other trial as it was."""
    def mark(c):  # type: ignore[no-untyped-def]
        if c.case.id != case_id:
            return c
        return c.model_copy(update={"trials": [
            t.model_copy(update={"outside_cores": load, "contended": True}) for t in c.trials]})
    return run.model_copy(update={
        "cases": [mark(c) for c in run.cases],
        "paired_nospec": {k: mark(v) for k, v in run.paired_nospec.items()}})


def test_run_busy_summary_counts_busy_cases_with_their_paired_trials(
        paired_run: RunResult) -> None:
    assert outside_load.run_busy_summary(paired_run.cases, paired_run.paired_nospec) is None
    assert outside_load.run_busy_summary([]) is None
    busy = _guarded(paired_run, "nospec-c2", contended=0.87)
    assert (outside_load.run_busy_summary(busy.cases, busy.paired_nospec)
            == "machine busy: 1 of 4 cases not measured (up to 0.9 cores from other processes)")
    # nospec-c1 contended: itself busy, and so is draft-k2-c1, whose paired no-spec
    # trials are contended too (the fixture's pairing is nospec at c = 1).
    both = _contend(_contend(paired_run, "nospec-c1", 0.55), "draft-k2-c2", 0.7)
    assert (outside_load.run_busy_summary(both.cases, both.paired_nospec)
            == "machine busy: 3 of 4 cases not measured (up to 0.7 cores from other processes)")
    one = [busy.cases[1]]
    assert (outside_load.run_busy_summary(one)
            == "machine busy: 1 of 1 case not measured (up to 0.9 cores from other processes)")

"""Baseline storage (specperf.store.baselines): where a baseline lives, round trips,
the bounded history, clear errors for bad files."""

from __future__ import annotations

import json
import multiprocessing
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from specperf.analysis.samples import earlier_runs
from specperf.schemas import Baseline, Provenance, RunResult
from specperf.schemas.base import utcnow
from specperf.store import baselines as store
from specperf.store import files
from tests.support import make_baseline, make_case, make_run


def test_round_trip(tmp_path: Path) -> None:
    b = make_baseline()
    path = store.baseline_path(tmp_path, "cpu-ci", b.provenance.hardware_id)
    store.write_baseline(path, b)
    assert store.load_baseline(path) == b
    assert not list(path.parent.glob(".*.tmp"))


def test_missing_is_none_and_corrupt_names_file_and_field(tmp_path: Path) -> None:
    assert store.load_baseline(tmp_path / "nope.json") is None
    path = tmp_path / "b.json"
    data = json.loads(make_baseline().model_dump_json())
    data["cases"][1]["acceptance"] = {"drafts": "many"}
    path.write_text(json.dumps(data))
    with pytest.raises(files.BaselineError) as err:
        store.load_baseline(path)
    assert str(path) in str(err.value) and "cases.1.acceptance.drafts" in str(err.value)
    path.write_text(path.read_text()[:100])
    with pytest.raises(files.BaselineError, match="not valid JSON .line 1"):
        store.load_baseline(path)


def test_history_is_bounded(tmp_path: Path) -> None:
    b = make_baseline()
    path = tmp_path / "cpu-ci" / "hw.json"
    for i in range(5):
        prov = b.provenance.model_copy(update={"date": b.provenance.date + timedelta(days=i)})
        store.write_baseline(path, b.model_copy(update={"provenance": prov}), keep=3)
    hist = store.load_history(path)
    assert len(hist) == 3
    assert [h.provenance.date for h in hist] == sorted(h.provenance.date for h in hist)
    assert store.load_baseline(path).provenance.date == hist[-1].provenance.date  # type: ignore[union-attr]


# --------------------------------------------------------------------------- nothing lost


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_a_failed_baseline_write_leaves_a_consistent_pair(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second of the two writes (the baseline itself) fails, as a full disk or a kill
    would make it: the previous baseline is whole and unchanged, the new run is one
    complete kept run in the history, and loading the pair works."""
    old = make_baseline()
    path = tmp_path / "cpu-ci" / "hw.json"
    store.write_baseline(path, old)
    before = path.read_bytes()
    prov = old.provenance.model_copy(update={"date": old.provenance.date + timedelta(days=1),
                                             "git_commit": "newcommit1"})
    new = old.model_copy(update={"provenance": prov})
    real_write = store.atomic_write_text

    def failing(target: Path, text: str) -> None:
        if target == path:
            raise OSError(28, "No space left on device")
        real_write(target, text)

    monkeypatch.setattr(store, "atomic_write_text", failing)
    with pytest.raises(OSError):
        store.write_baseline(path, new)
    assert path.read_bytes() == before
    assert not list(path.parent.rglob(".*.tmp"))
    hist = store.load_history(path)
    assert [h.provenance.date for h in hist] == [old.provenance.date, prov.date]
    assert store.load_baseline(path) == old


def test_a_failed_history_write_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first write (the history entry) fails: neither file changes."""
    old = make_baseline()
    path = tmp_path / "cpu-ci" / "hw.json"
    store.write_baseline(path, old)
    snapshot = _files(tmp_path)

    def failing(target: Path, text: str) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(store, "atomic_write_text", failing)
    prov = old.provenance.model_copy(update={"date": old.provenance.date + timedelta(days=1)})
    with pytest.raises(OSError):
        store.write_baseline(path, old.model_copy(update={"provenance": prov}))
    assert _files(tmp_path) == snapshot


def test_a_bad_history_entry_is_named_or_skipped_with_a_note(tmp_path: Path) -> None:
    """Strict (the `specperf` commands): BaselineError naming the entry. With on_bad (a
    perf run): skipped, one line naming it, the good entries still loaded."""
    b = make_baseline()
    path = tmp_path / "cpu-ci" / "hw.json"
    store.write_baseline(path, b)
    bad = store.history_dir(path) / "20990101T000000-broken.json"
    bad.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(files.BaselineError, match=r"20990101T000000-broken\.json: not UTF-8"):
        store.load_history(path)
    notes: list[str] = []
    assert store.load_history(path, on_bad=notes.append) == [b]
    assert len(notes) == 1 and "\n" not in notes[0]
    assert str(bad) in notes[0] and "not UTF-8" in notes[0]


def test_a_perf_run_skips_a_bad_kept_run_and_refuses_a_bad_baseline(tmp_path: Path) -> None:
    """BaselineContext.load, as the plugin calls it: a bad history entry is a note naming
    it and the run goes on with its baseline; a bad baseline is BaselineError naming it
    (the plugin makes that a usage error)."""
    from specperf.config.profile_file import load_profile
    from specperf.engine.baseline_context import BaselineContext
    from tests.support import CPU_CI_PROFILE

    profile = load_profile(CPU_CI_PROFILE)
    b = make_baseline()
    path = store.baseline_path(tmp_path, profile.name, b.provenance.hardware_id)
    store.write_baseline(path, b)
    deep = store.history_dir(path) / "20990101T000000-deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    notes: list[str] = []
    ctx = BaselineContext.load(profile, tmp_path, b.provenance, notes.append)
    assert ctx.baseline == b and ctx.history == [b]
    assert [n for n in notes if str(deep) in n and "nested deeper" in n]
    path.write_bytes(b"\x00\x01\x02\xff")
    with pytest.raises(files.BaselineError, match=f"{path.name}: not UTF-8"):
        BaselineContext.load(profile, tmp_path, b.provenance, notes.append)


# --------------------------------------------------------------------------- updates


def _later(b: Baseline | RunResult, days: int, **fields: object) -> Provenance:
    return b.provenance.model_copy(update={"date": b.provenance.date + timedelta(days=days),
                                           **fields})


def _snapshot(root: Path) -> dict[str, bytes]:
    return {k: v for k, v in _files(root).items() if not k.endswith(".lock")}


def test_an_update_merges_into_the_baseline_as_it_is_now(tmp_path: Path) -> None:
    """A run loaded the baseline at its start; another update wrote a case since. The
    update re-reads the file: the other update's case stays, nothing is lost."""
    old = make_baseline()
    path = tmp_path / "cpu-ci" / "hw.json"
    store.write_baseline(path, old)
    loaded_at_start = store.load_baseline(path)
    other = make_case("draft-k2", concurrency=4)
    store.update_baseline(path, make_run([other], provenance=_later(old, 1)))
    mine = make_case("nospec", concurrency=1, spec=False, tpot_s=0.021)
    written = store.update_baseline(path, make_run([mine], provenance=_later(old, 2)))
    assert loaded_at_start is not None and loaded_at_start.case(other.case) is None
    on_disk = store.load_baseline(path)
    assert on_disk == written
    assert {c.case.id: c for c in on_disk.cases} == {  # type: ignore[union-attr]
        "nospec-c1": mine, "draft-k2-c1": old.cases[1], "draft-k2-c4": other}
    assert store.lock_path(path).exists()


def test_a_partial_update_keeps_the_other_cases_and_files_only_what_it_measured(
        tmp_path: Path) -> None:
    """`-k nospec`: the draft case stays as it was (its own vLLM version, its trials); the
    history gets the run as measured (one case), so the draft case's one measurement is
    never pooled as two runs that agree exactly."""
    old = make_baseline()
    nospec, draft = old.cases
    path = tmp_path / "cpu-ci" / "hw.json"
    store.write_baseline(path, old)
    again = make_case("nospec", spec=False, tpot_s=0.021).model_copy(
        update={"vllm_version": "0.32.0+rebuild"})
    run = make_run([again], provenance=_later(old, 1, git_commit="feedbeef00"))
    new = store.update_baseline(path, run)

    assert store.load_baseline(path) == new
    assert new.case(draft.case) == draft  # as it was, its vllm_version included
    assert new.case(nospec.case) == again
    hist = store.load_history(path)
    assert [[c.case.id for c in h.cases] for h in hist] == [
        ["nospec-c1", "draft-k2-c1"], ["nospec-c1"]]
    assert hist[-1].provenance == run.provenance
    assert earlier_runs(draft, new, hist) == []  # not its own earlier run
    assert earlier_runs(again, new, hist) == [nospec]

    # A second `-k nospec`: still one copy of the draft case anywhere in the history.
    third = make_case("nospec", spec=False, tpot_s=0.022)
    new = store.update_baseline(path, make_run([third], provenance=_later(old, 2)))
    hist = store.load_history(path)
    assert sum(h.case(draft.case) is not None for h in hist) == 1
    assert earlier_runs(draft, new, hist) == []
    assert earlier_runs(third, new, hist) == [again, nospec]


def test_histories_that_filed_a_carried_case_again_pool_it_once(tmp_path: Path) -> None:
    """Histories written before updates filed only what they measured hold a carried-over
    case in several entries: it is still one measurement, pooled once (and never with
    itself)."""
    old = make_baseline()
    nospec, draft = old.cases
    path = tmp_path / "cpu-ci" / "hw.json"
    store.write_baseline(path, old)
    n2 = make_case("nospec", spec=False, tpot_s=0.021)
    n3 = make_case("nospec", spec=False, tpot_s=0.022)
    # What the old write_baseline filed for two `-k nospec` updates: every case, again.
    store.file_in_history(path, Baseline(provenance=_later(old, 1), cases=[n2, draft]))
    newest = Baseline(provenance=_later(old, 2), cases=[n3, draft])
    store.file_in_history(path, newest)
    hist = store.load_history(path)
    assert len(hist) == 3
    assert earlier_runs(draft, newest, hist) == []
    assert earlier_runs(n3, newest, hist) == [n2, nospec]
    d2 = make_case("draft-k2", tpot_s=0.021)
    rerun = Baseline(provenance=_later(old, 3), cases=[n3, d2])
    assert earlier_runs(d2, rerun, hist) == [draft]


def test_a_partial_update_of_another_vllm_version_is_refused_and_changes_nothing(
        tmp_path: Path) -> None:
    """The cases a `-k` run did not measure ran on the old vLLM: filing them under the new
    version would compare them as if they had run on it. Refused, naming the file, both
    versions and the fix; a run of every case of the new version is accepted."""
    old = make_baseline()
    path = tmp_path / "cpu-ci" / "hw.json"
    store.write_baseline(path, old)
    before = _snapshot(tmp_path)
    upgraded = _later(old, 1, vllm_version="0.33.0")
    partial = make_run([make_case("nospec", spec=False)], provenance=upgraded)
    with pytest.raises(files.BaselineError) as err:
        store.update_baseline(path, partial)
    msg = str(err.value)
    assert str(path) in msg and "provenance.vllm_version" in msg
    assert "'0.32.0'" in msg and "'0.33.0'" in msg and "draft-k2-c1" in msg and "no -k" in msg
    assert _snapshot(tmp_path) == before
    everything = make_run([make_case("nospec", spec=False, tpot_s=0.03),
                           make_case(tpot_s=0.03)], provenance=upgraded)
    assert store.update_baseline(path, everything).provenance.vllm_version == "0.33.0"


def test_history_names_are_unique_within_one_second_of_one_commit(tmp_path: Path) -> None:
    b = make_baseline()
    path = tmp_path / "cpu-ci" / "hw.json"
    first = store.file_in_history(path, b)
    second = store.file_in_history(path, b.model_copy(update={"cases": b.cases[:1]}))
    assert first != second and first.parent == second.parent
    assert second.name == first.name.replace(".json", "-2.json")
    run = make_run([make_case(concurrency=2)], provenance=b.provenance)
    store.update_baseline(path, run)
    names = sorted(p.name for p in store.history_dir(path).glob("*.json"))
    assert len(names) == 3 and len(store.load_history(path)) == 3
    assert not list(store.history_dir(path).glob(".*"))  # no temp file left


def test_a_commit_that_is_a_path_never_names_a_history_entry(tmp_path: Path) -> None:
    """Built in memory (never read back through read_model), a baseline whose commit is
    '/../../../' is refused where it would become a file name; nothing is written."""
    b = make_baseline()
    forged = b.model_copy(update={"provenance": b.provenance.model_copy(
        update={"git_commit": "/../../../"})})
    path = tmp_path / "cpu-ci" / "hw.json"
    with pytest.raises(files.BaselineError, match=r"provenance\.git_commit"):
        store.file_in_history(path, forged)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def _update_concurrently(path: str, first: int, n: int, barrier: Any) -> None:
    """One `--perf-update-baselines` process: it read the baseline at its start, waits for
    the other, then files ``n`` runs of one case each as fast as it can."""
    start = store.load_baseline(Path(path))
    assert start is not None
    barrier.wait(timeout=120)
    for i in range(n):
        run = make_run([make_case(concurrency=first + i)],
                       provenance=start.provenance.model_copy(update={"date": utcnow()}))
        store.update_baseline(Path(path), run, keep=1000)


def test_two_concurrent_update_processes_lose_nothing(tmp_path: Path) -> None:
    """Two OS processes (spawned, not threads), started together past a barrier, each
    updating one baseline 15 times with a case of its own, dated now and of one commit (so
    history names collide within a second): every case of both is in the baseline and
    every run in the history afterwards."""
    base = make_baseline()
    path = tmp_path / "cpu-ci" / "hw.json"
    store.write_baseline(path, base)
    n = 15
    mp = multiprocessing.get_context("spawn")
    barrier = mp.Barrier(2)
    procs = [mp.Process(target=_update_concurrently, args=(str(path), first, n, barrier))
             for first in (100, 200)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0, 0]
    final = store.load_baseline(path)
    assert final is not None
    want = {c.case.id for c in base.cases} | {
        f"draft-k2-c{first + i}" for first in (100, 200) for i in range(n)}
    assert {c.case.id for c in final.cases} == want
    hist = store.load_history(path)
    assert len(hist) == 1 + 2 * n  # the first baseline and every run, each once
    assert sorted(c.case.id for h in hist for c in h.cases) == sorted(want)


def test_pruning_keeps_the_entry_of_a_case_the_baseline_still_carries(tmp_path: Path) -> None:
    """keep=2 and three `-k nospec` updates: the first run's entry is past the bound but
    holds the draft case the baseline still carries — its one kept copy stays."""
    old = make_baseline()
    path = tmp_path / "cpu-ci" / "hw.json"
    store.write_baseline(path, old, keep=2)
    for day in (1, 2, 3):
        again = make_case("nospec", spec=False, tpot_s=0.02 + day / 1000)
        store.update_baseline(path, make_run([again], provenance=_later(old, day)), keep=2)
    hist = store.load_history(path)
    assert [h.provenance.date for h in hist] == [old.provenance.date, *(
        _later(old, d).date for d in (2, 3))]
    assert hist[0].case(old.cases[1].case) == old.cases[1]


def _nights(n: int) -> list[Baseline]:
    """``n`` kept nightlies, a day apart (each its own run: its own provenance)."""
    b = make_baseline()
    return [b.model_copy(update={"provenance": b.provenance.model_copy(
        update={"date": b.provenance.date + timedelta(days=i)})}) for i in range(n)]


def _history(path: Path) -> list[Provenance]:
    entries = sorted(store.history_dir(path).glob("*.json"))
    return [store.load_baseline(e).provenance for e in entries]  # type: ignore[union-attr]


def test_overlapping_promotes_file_each_run_once(tmp_path: Path) -> None:
    """Runs 0-2 promoted, then 1-3: runs 1 and 2 are in the history already (by their
    provenance, a run's identity) and are not filed again — twice filed, each would be
    pooled as two runs and shrink the between-run spread."""
    nights = _nights(4)
    path = store.baseline_path(tmp_path, "cpu-ci", nights[0].provenance.hardware_id)
    first = store.promote_runs(path, nights[0:3])
    assert first.written and first.filed == 3
    second = store.promote_runs(path, nights[1:4])
    assert second.written and second.filed == 1
    assert _history(path) == [n.provenance for n in nights]
    assert store.load_baseline(path) == nights[3]
    # The same run twice in one promote is filed once, too.
    again = _nights(6)[4:]
    third = store.promote_runs(path, [again[0], again[0], again[1]])
    assert third.filed == 2 and len(_history(path)) == 6

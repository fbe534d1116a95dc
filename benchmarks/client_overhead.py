"""Client overhead: CPU per streamed chunk of specperf's load client vs vLLM's benchmark
client, against the loopback calibration server (a measuring stick, not a vLLM stand-in).

A benchmark, not a test: it prints numbers and asserts nothing about them.

The calibration server streams ``--chunks`` chunks per request as fast as it can (one
token per chunk, no delay), in a thread of this process. Each client runs in its OWN
subprocess, so the CPU time it reports (``time.process_time`` around the load alone,
imports and start-up excluded) is the client's and nobody else's. Per client and
concurrency it reports:

* CPU µs per streamed chunk (client process CPU / chunks received) -- what the client
  steals from a server on the same cores, and where its timing starts to lag;
* the max chunk rate (chunks / wall second) it sustained with the server streaming flat
  out. Server and client share the machine's cores, so this is a rate for this machine,
  comparable between the clients, not an absolute client ceiling.

Clients:
  ours      specperf.engine.load.run_load_async (aiohttp, ``async for line in resp.content``,
            json.loads per line)
  vllm      vllm.benchmarks.lib.endpoint_request_func.async_request_openai_completions
            (aiohttp ``iter_any``, an SSE buffer, json.loads per message, a perf_counter
            per chunk for ITL), with the connector `vllm bench serve` builds
  proto-*   prototypes of changes to load.py (see PROTOTYPES below)

    python benchmarks/client_overhead.py [--concurrency 1,16,64] [--chunks 256]
        [--requests-per-stream 4] [--clients ours,vllm] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CLIENTS = ["ours", "vllm", "proto-iter-any-json", "proto-iter-any"]


# ----------------------------------------------------------------------------- clients


async def _ours(url: str, concurrency: int, n: int, chunks: int) -> tuple[int, int]:
    from specperf.config.workload import Sampling
    from specperf.engine.load import run_load_async

    res = await run_load_async(url, "m", ["p"], Sampling(max_tokens=chunks), concurrency, n)
    return sum(s.chunks for s in res.samples), sum(s.ok for s in res.samples)


async def _vllm(url: str, concurrency: int, n: int, chunks: int) -> tuple[int, int]:
    import aiohttp
    from vllm.benchmarks.lib.endpoint_request_func import (
        RequestFuncInput,
        async_request_openai_completions,
    )

    # The connector `vllm bench serve` builds (vllm/benchmarks/serve.py).
    connector = aiohttp.TCPConnector(
        limit=concurrency, limit_per_host=concurrency, ttl_dns_cache=300, use_dns_cache=True,
        keepalive_timeout=60, enable_cleanup_closed=True, force_close=False,
    )
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(
        connector=connector, trust_env=True,
        timeout=aiohttp.ClientTimeout(total=6 * 60 * 60),
    ) as session:
        async def one() -> Any:
            async with sem:
                return await async_request_openai_completions(
                    RequestFuncInput(prompt="p", api_url=f"{url}/v1/completions",
                                     prompt_len=1, output_len=chunks, model="m"),
                    session,
                )

        outs = await asyncio.gather(*(one() for _ in range(n)))
    return sum(len(o.itl) + 1 for o in outs if o.success), sum(o.success for o in outs)


async def _proto_iter_any(url: str, concurrency: int, n: int, chunks: int,
                          parse_all: bool = False) -> tuple[int, int]:
    """PROTOTYPE for load.py: read with iter_any() and split events ourselves (one pass per
    TCP read instead of two readline() calls per event). ``parse_all``: json.loads every
    event like load.py does now; else a byte test finds text chunks and only the usage
    chunk is parsed (fragile: relies on how the server spells JSON)."""
    import aiohttp

    body = {"model": "m", "prompt": "p", "max_tokens": chunks, "stream": True,
            "stream_options": {"include_usage": True}}

    async def one(session: aiohttp.ClientSession) -> tuple[int, bool]:
        n_chunks = 0
        usage = None
        async with session.post(f"{url}/v1/completions", json=body) as resp:
            buf = b""
            async for data in resp.content.iter_any():
                buf += data
                *events, buf = buf.split(b"\n\n")
                for ev in events:
                    if not ev.startswith(b"data: "):
                        continue
                    payload = ev[6:]
                    if payload == b"[DONE]":
                        break
                    if parse_all:
                        event = json.loads(payload)
                        choices = event.get("choices") or []
                        if choices and choices[0].get("text"):
                            n_chunks += 1
                        if event.get("usage"):
                            usage = event["usage"]
                        continue
                    if b'"usage"' in payload and b'"choices": []' in payload \
                            or b'"choices":[]' in payload:
                        usage = json.loads(payload).get("usage")
                        continue
                    if b'"text": ""' not in payload and b'"text":""' not in payload:
                        _ = time.perf_counter()
                        n_chunks += 1
        return n_chunks, usage is not None

    sem = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency + 1)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def bounded() -> tuple[int, bool]:
            async with sem:
                return await one(session)

        outs = await asyncio.gather(*(bounded() for _ in range(n)))
    return sum(c for c, _ in outs), sum(ok for _, ok in outs)


async def _proto_iter_any_json(url: str, concurrency: int, n: int,
                               chunks: int) -> tuple[int, int]:
    return await _proto_iter_any(url, concurrency, n, chunks, parse_all=True)


CLIENTS = {"ours": _ours, "vllm": _vllm, "proto-iter-any-json": _proto_iter_any_json,
           "proto-iter-any": _proto_iter_any}


def child(client: str, url: str, concurrency: int, n: int, chunks: int) -> dict[str, Any]:
    """Run one client once in this process; CPU is this process's, load only."""
    func = CLIENTS[client]
    # Import everything the client needs before the clock starts.
    if client == "vllm":
        import vllm.benchmarks.lib.endpoint_request_func  # noqa: F401
    else:
        import specperf.engine.load  # noqa: F401
    # One warm-up request: connection set-up and first-call costs are not per chunk.
    asyncio.run(func(url, 1, 1, chunks))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    got, ok = asyncio.run(func(url, concurrency, n, chunks))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return {"client": client, "concurrency": concurrency, "requests": n, "ok": ok,
            "chunks": got, "cpu_s": cpu, "wall_s": wall,
            "cpu_us_per_chunk": cpu / got * 1e6 if got else None,
            "chunks_per_s": got / wall if wall > 0 else None}


# ----------------------------------------------------------------------------- driver


def run_benchmark(clients: list[str], concurrencies: list[int], chunks: int,
                  requests_per_stream: int, python: str = sys.executable,
                  timeout_s: float = 600.0) -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "src"))
    from specperf.lab.calibration import CalibrationConfig, CalibrationServer

    rows = []
    cfg = CalibrationConfig(chunks=chunks, tokens_per_chunk=1)
    with CalibrationServer(cfg) as srv:
        for c in concurrencies:
            n = max(requests_per_stream * c, 2)
            for client in clients:
                cmd = [python, str(Path(__file__).resolve()), "--child", client, "--url",
                       srv.base_url, "--concurrency", str(c), "--requests", str(n),
                       "--chunks", str(chunks)]
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                                      env={**os.environ, "PYTHONWARNINGS": "ignore"})
                if proc.returncode != 0:
                    rows.append({"client": client, "concurrency": c, "requests": n,
                                 "error": (proc.stderr.strip().splitlines() or ["?"])[-1]})
                    continue
                rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return {"kind": "specperf-client-overhead", "chunks_per_request": chunks,
            "requests_per_stream": requests_per_stream, "cpu_count": os.cpu_count(),
            "python": sys.version.split()[0], "rows": rows}


def render(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    clients = list(dict.fromkeys(r["client"] for r in result["rows"]))
    table = Table(title=f"Client overhead: {result['chunks_per_request']} chunks/request, "
                        f"loopback calibration server, {result['cpu_count']} CPUs")
    table.add_column("streams", justify="right")
    for cl in clients:
        table.add_column(f"{cl}\nCPU µs/chunk", justify="right")
        table.add_column(f"{cl}\nchunks/s", justify="right")
    for c in dict.fromkeys(r["concurrency"] for r in result["rows"]):
        cells = [str(c)]
        for cl in clients:
            r = next((x for x in result["rows"] if x["client"] == cl and x["concurrency"] == c),
                     None)
            if r is None or r.get("error") or not r.get("chunks"):
                cells += ["error" if r else "—", (r or {}).get("error", "")[:30]]
            else:
                cells += [f"{r['cpu_us_per_chunk']:.1f}", f"{r['chunks_per_s']:,.0f}"]
        table.add_row(*cells)
    Console().print(table)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", default="1,16,64", help="comma list of concurrent streams")
    p.add_argument("--chunks", type=int, default=256, help="streamed chunks per request")
    p.add_argument("--requests-per-stream", type=int, default=4,
                   help="requests = this × concurrency")
    p.add_argument("--clients", default=",".join(DEFAULT_CLIENTS),
                   help=f"comma list of {', '.join(CLIENTS)}")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    # internal: one client run in this (child) process
    p.add_argument("--child", choices=list(CLIENTS), help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--requests", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.url, int(args.concurrency), args.requests,
                               args.chunks)))
        return 0
    clients = [c for c in args.clients.split(",") if c]
    unknown = set(clients) - set(CLIENTS)
    if unknown:
        p.error(f"unknown client(s): {', '.join(sorted(unknown))}")
    concs = [int(x) for x in args.concurrency.split(",") if x]
    result = run_benchmark(clients, concs, args.chunks, args.requests_per_stream)
    render(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    repro = [Path(sys.executable).name, "benchmarks/client_overhead.py", "--concurrency",
             args.concurrency, "--chunks", str(args.chunks), "--requests-per-stream",
             str(args.requests_per_stream), "--clients", ",".join(clients)]
    print("reproduce: " + shlex.join(repro))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

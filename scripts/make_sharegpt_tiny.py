#!/usr/bin/env python3
"""Write datasets/sharegpt-tiny.json: a small ShareGPT-format file of pseudo-text.

The file lets CI exercise the real ShareGPT loader (specperf.engine.datasets.sharegpt_prompts)
without the 670 MB third-party dataset. Its text is made-up words from
specperf.engine.tiny.synthetic_text (language 0, the one the cpu-tiny tokenizer is trained
on), so it holds no third-party text and tokenizes well with the generated models.

Deterministic: the same specperf.engine.tiny gives the same bytes. tests/unit/engine/test_datasets.py checks
that the committed file equals this script's output; after changing either, run

    python scripts/make_sharegpt_tiny.py
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "datasets" / "sharegpt-tiny.json"

#: Usable conversations (a first turn the loader takes as the prompt).
N_CONVERSATIONS = 64
#: Seeds are offset so this text differs from the synthetic workload's prompts.
SEED_BASE = 7_000_000


def build() -> list[dict[str, object]]:
    from specperf.engine.tiny import synthetic_text

    rng = random.Random("specperf-sharegpt-tiny")
    items: list[dict[str, object]] = []
    for i in range(N_CONVERSATIONS):
        turns = rng.choice((2, 2, 2, 4, 6))  # most real conversations are one exchange
        conv = []
        for t in range(turns):
            human = t % 2 == 0
            n_words = rng.randint(6, 120) if human else rng.randint(20, 200)
            conv.append({
                "from": "human" if human else "gpt",
                "value": synthetic_text(SEED_BASE + i * 16 + t, n_words),
            })
        items.append({"id": f"tiny-{i:03d}", "conversations": conv})
    # Shapes the real file has and the loader must skip, not choke on:
    items.insert(17, {"id": "tiny-empty", "conversations": []})
    items.insert(41, {"id": "tiny-blank", "conversations": [
        {"from": "human", "value": "   "},
        {"from": "gpt", "value": synthetic_text(SEED_BASE - 1, 12)},
    ]})
    return items


def render(items: list[dict[str, object]]) -> str:
    return json.dumps(items, indent=1, ensure_ascii=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path, default=OUT, help=f"default: {OUT.relative_to(ROOT)}")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if the file differs from what would be written")
    args = ap.parse_args(argv)
    text = render(build())
    if args.check:
        ok = args.out.exists() and args.out.read_text(encoding="utf-8") == text
        state = "up to date" if ok else "stale — run scripts/make_sharegpt_tiny.py"
        print(f"{args.out}: {state}")
        return 0 if ok else 1
    from specperf.store.files import atomic_write_text

    atomic_write_text(args.out, text)
    print(f"wrote {args.out} ({N_CONVERSATIONS} conversations, {len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

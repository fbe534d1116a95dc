#!/usr/bin/env python3
"""Write datasets/cpu-categories.jsonl: a small category-tagged prompt set for the CPU
profiles' categories scenario ([scenarios.categories], docs/scenarios.md).

The lines have Spec-Bench's question.jsonl shape, ``{"question_id", "category",
"turns": [prompt]}``, so the loader that reads the public file reads this one. The text is
made-up words from specperf.engine.tiny.synthetic_text — no third-party text, nothing
downloaded — and a category is a *shape* of prompt named after Spec-Bench's tasks, not
their meaning (a tiny random-weight model understands no task):

* ``qa``: a short question (language 0, the tiny tokenizer's);
* ``translation``: a sentence or two of another made-up language (language 1), which the
  tokenizer splits into many short tokens;
* ``summarization``: a long passage and a short instruction;
* ``rag``: three retrieved passages and a question — the longest prompts.

Deterministic: the same specperf.engine.tiny gives the same bytes.
tests/unit/engine/test_datasets.py checks that the committed file equals this script's
output; after changing either, run

    python scripts/make_cpu_categories.py
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "datasets" / "cpu-categories.jsonl"

#: Prompts per category.
PER_CATEGORY = 8
#: Seeds are offset so this text differs from the other synthetic prompts.
SEED_BASE = 9_000_000
CATEGORIES = ("qa", "translation", "summarization", "rag")


def _prompt(category: str, rng: random.Random, seed: int) -> str:
    from specperf.engine.tiny import synthetic_text

    if category == "qa":
        return synthetic_text(seed, rng.randint(12, 30))
    if category == "translation":
        return synthetic_text(seed, rng.randint(30, 60), language=1)
    if category == "summarization":
        return (synthetic_text(seed, rng.randint(150, 220)) + "\n\n"
                + synthetic_text(seed + 1, 6))
    passages = [synthetic_text(seed + k, rng.randint(60, 90)) for k in range(3)]
    return "\n\n".join(passages) + "\n\n" + synthetic_text(seed + 3, 12)


def build() -> list[dict[str, object]]:
    rng = random.Random("specperf-cpu-categories")
    items: list[dict[str, object]] = []
    for c, category in enumerate(CATEGORIES):
        for i in range(PER_CATEGORY):
            qid = c * 100 + i
            items.append({"question_id": qid, "category": category,
                          "turns": [_prompt(category, rng, SEED_BASE + 16 * qid)]})
    return items


def render(items: list[dict[str, object]]) -> str:
    return "".join(json.dumps(item, ensure_ascii=True) + "\n" for item in items)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path, default=OUT, help=f"default: {OUT.relative_to(ROOT)}")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if the file differs from what would be written")
    args = ap.parse_args(argv)
    text = render(build())
    if args.check:
        ok = args.out.exists() and args.out.read_text(encoding="utf-8") == text
        state = "up to date" if ok else "stale — run scripts/make_cpu_categories.py"
        print(f"{args.out}: {state}")
        return 0 if ok else 1
    from specperf.store.files import atomic_write_text

    atomic_write_text(args.out, text)
    print(f"wrote {args.out} ({len(CATEGORIES) * PER_CATEGORY} prompts, {len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

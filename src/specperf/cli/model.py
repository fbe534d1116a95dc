"""``specperf model``: what the speculative-decoding cost model predicts.

Examples::

    specperf model --acceptance 0.7 --k 3 --target-ms 43.1 --draft-ms 3 --tokens 512
    specperf model --acceptance 0.7 --sweep-k 1..16 --target-ms 43.1 --draft-ms 3 --tokens 512
    specperf model --k 3 --sweep-acceptance 0.2..0.95 --target-ms 43.1 --draft-ms 3 --tokens 512
    specperf model ... --json

Value checking happens in :func:`run` (the options are parsed as strings), so every
bad value -- out of range, unparsable, or a malformed ``LO..HI`` range -- is reported as
one line on stderr naming the option, with exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from specperf.analysis.costmodel import Prediction, best_k, break_even_acceptance, predict
from specperf.cli import options
from specperf.cli.options import BadInput
from specperf.config.exits import Exit

__all__ = ["add_parser", "run"]

PROG = "specperf model"
DEFAULT_SWEEP_K = "1..16"
DEFAULT_SWEEP_ACCEPTANCE = "0.2..0.95"
DEFAULT_STEP = 0.05
BEST_K_MAX = 16  # k range searched for the "best k" hint of a single prediction
MAX_ROWS = 1000  # refuse absurd sweeps instead of printing forever
#: Columns of the tables when stdout is not a terminal and COLUMNS is unset.
PIPED_WIDTH = 120


# --------------------------------------------------------------------------- argparse

#: What ``run`` returns, besides every command's {2, 130} (:data:`specperf.cli.EVERY_COMMAND`);
#: its ``--help`` epilogue lists them from specperf.config.exits.
EXITS: tuple[Exit, ...] = (Exit.OK,)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "model",
        help="predict speculative-decoding speedup/slowdown from the cost model",
        description=(
            "Predict the time to generate N tokens with k draft tokens per verification "
            "step versus plain decoding.  --acceptance is the i.i.d. per-token acceptance "
            "probability a (E = (1 - a^(k+1)) / (1 - a) tokens per step), NOT vLLM's "
            "'draft acceptance rate' (accepted/proposed = (E - 1)/k)."
        ),
    )
    p.add_argument("--acceptance", metavar="A", help="i.i.d. per-token acceptance in [0, 1]")
    p.add_argument("--k", metavar="K", help="draft tokens per verification step (>= 1)")
    p.add_argument(
        "--target-ms", metavar="T", help="target forward time per step = plain TPOT (ms, > 0)"
    )
    p.add_argument("--draft-ms", metavar="D", help="draft time per proposed token (ms, >= 0)")
    p.add_argument("--tokens", metavar="N", help="output tokens to generate (>= 1)")
    p.add_argument(
        "--overhead-ms",
        metavar="O",
        default=None,
        help="fixed extra time per verification step (ms, >= 0; default 0)",
    )
    p.add_argument(
        "--sweep-k",
        metavar="LO..HI",
        nargs="?",
        const=DEFAULT_SWEEP_K,
        default=None,
        help=f"tabulate k over an integer range (default {DEFAULT_SWEEP_K}); replaces --k",
    )
    p.add_argument(
        "--sweep-acceptance",
        metavar="LO..HI",
        nargs="?",
        const=DEFAULT_SWEEP_ACCEPTANCE,
        default=None,
        help=(
            f"tabulate acceptance over LO, LO+STEP, ... <= HI (default "
            f"{DEFAULT_SWEEP_ACCEPTANCE}); replaces --acceptance"
        ),
    )
    p.add_argument(
        "--step",
        metavar="S",
        default=None,
        help=f"acceptance step for --sweep-acceptance (default {DEFAULT_STEP})",
    )
    options.add_json(p, "the Prediction (a list of them for sweeps)")
    return p


# --------------------------------------------------------------------------- value parsing


def _get(args: argparse.Namespace, dest: str) -> Any:
    return getattr(args, dest, None)


def _parse_float(raw: Any, option: str) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise BadInput(f"{option}: expected a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise BadInput(f"{option}: expected a finite number, got {raw!r}")
    return value


def _parse_int(raw: Any, option: str) -> int:
    if isinstance(raw, bool):
        raise BadInput(f"{option}: expected an integer, got {raw!r}")
    if isinstance(raw, int):
        return raw
    try:
        return int(str(raw).strip())
    except ValueError:
        pass
    value = _parse_float(raw, option)  # accept "512.0" / "1e3", reject "2.5"
    if not value.is_integer():
        raise BadInput(f"{option}: expected an integer, got {raw!r}")
    return int(value)


def _acceptance(raw: Any, option: str) -> float:
    a = _parse_float(raw, option)
    if not 0.0 <= a <= 1.0:
        raise BadInput(f"{option}: acceptance must be in [0, 1], got {raw!r}")
    return a


def _k(raw: Any, option: str) -> int:
    k = _parse_int(raw, option)
    if k < 1:
        raise BadInput(f"{option}: k must be >= 1, got {raw!r}")
    return k


def _required(args: argparse.Namespace, dest: str, option: str, what: str) -> Any:
    raw = _get(args, dest)
    if raw is None:
        raise BadInput(f"{option} is required ({what})")
    return raw


def _split_range(raw: Any, option: str) -> tuple[str, str]:
    parts = str(raw).split("..")
    if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
        raise BadInput(f"{option}: expected a range LO..HI, got {raw!r}")
    return parts[0], parts[1]


def _k_range(raw: Any, option: str = "--sweep-k") -> list[int]:
    lo_s, hi_s = _split_range(raw, option)
    try:
        lo, hi = int(lo_s), int(hi_s)
    except ValueError:
        raise BadInput(f"{option}: expected integers LO..HI, got {raw!r}") from None
    if lo < 1 or hi < lo:
        raise BadInput(f"{option}: need 1 <= LO <= HI, got {raw!r}")
    if hi - lo + 1 > MAX_ROWS:
        raise BadInput(f"{option}: range {raw!r} has {hi - lo + 1} rows (max {MAX_ROWS})")
    return list(range(lo, hi + 1))


def _acceptance_range(raw: Any, step: float, option: str = "--sweep-acceptance") -> list[float]:
    lo_s, hi_s = _split_range(raw, option)
    try:
        lo, hi = float(lo_s), float(hi_s)
    except ValueError:
        raise BadInput(f"{option}: expected numbers LO..HI, got {raw!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or not 0.0 <= lo <= hi <= 1.0:
        raise BadInput(f"{option}: need 0 <= LO <= HI <= 1, got {raw!r}")
    n = math.floor((hi - lo) / step + 1e-9) + 1
    if n > MAX_ROWS:
        raise BadInput(
            f"{option}: range {raw!r} with step {step:g} has {n} rows (max {MAX_ROWS})"
        )
    # Round away float accumulation noise (0.2 + 3*0.05 = 0.35000000000000003).
    return [min(round(lo + i * step, 12), 1.0) for i in range(n)]


@dataclass(frozen=True)
class _Request:
    target_ms: float
    draft_ms: float
    tokens: int
    overhead_ms: float
    acceptances: list[float]  # one entry unless sweeping acceptance
    ks: list[int]  # one entry unless sweeping k
    mode: str  # "single" | "sweep-k" | "sweep-acceptance"
    as_json: bool


def _parse_request(args: argparse.Namespace) -> _Request:
    sweep_k = _get(args, "sweep_k")
    sweep_a = _get(args, "sweep_acceptance")
    if sweep_k is not None and sweep_a is not None:
        raise BadInput("--sweep-k and --sweep-acceptance cannot be combined")
    if sweep_k is not None and _get(args, "k") is not None:
        raise BadInput("--k cannot be combined with --sweep-k (the sweep sets k)")
    if sweep_a is not None and _get(args, "acceptance") is not None:
        raise BadInput(
            "--acceptance cannot be combined with --sweep-acceptance (the sweep sets it)"
        )
    if _get(args, "step") is not None and sweep_a is None:
        raise BadInput("--step only applies to --sweep-acceptance")

    acc, k = 0.0, 1  # placeholders; each is either parsed below or swept
    if sweep_a is None:
        acc = _acceptance(
            _required(args, "acceptance", "--acceptance", "i.i.d. per-token acceptance in [0, 1]"),
            "--acceptance",
        )
    if sweep_k is None:
        k = _k(_required(args, "k", "--k", "draft tokens per step"), "--k")

    target = _parse_float(
        _required(args, "target_ms", "--target-ms", "target time per step in ms"), "--target-ms"
    )
    if target <= 0:
        raise BadInput(f"--target-ms: must be > 0, got {_get(args, 'target_ms')!r}")
    draft = _parse_float(
        _required(args, "draft_ms", "--draft-ms", "draft time per token in ms"), "--draft-ms"
    )
    if draft < 0:
        raise BadInput(f"--draft-ms: must be >= 0, got {_get(args, 'draft_ms')!r}")
    tokens = _parse_int(
        _required(args, "tokens", "--tokens", "output tokens to generate"), "--tokens"
    )
    if tokens < 1:
        raise BadInput(f"--tokens: must be >= 1, got {_get(args, 'tokens')!r}")
    raw_o = _get(args, "overhead_ms")
    overhead = 0.0 if raw_o is None else _parse_float(raw_o, "--overhead-ms")
    if overhead < 0:
        raise BadInput(f"--overhead-ms: must be >= 0, got {raw_o!r}")

    as_json = bool(_get(args, "json"))
    if sweep_k is not None:
        return _Request(
            target, draft, tokens, overhead, [acc], _k_range(sweep_k), "sweep-k", as_json
        )
    if sweep_a is not None:
        raw_step = _get(args, "step")
        step = DEFAULT_STEP if raw_step is None else _parse_float(raw_step, "--step")
        if step <= 0:
            raise BadInput(f"--step: must be > 0, got {raw_step!r}")
        accs = _acceptance_range(sweep_a, step)
        return _Request(target, draft, tokens, overhead, accs, [k], "sweep-acceptance", as_json)
    return _Request(target, draft, tokens, overhead, [acc], [k], "single", as_json)


# --------------------------------------------------------------------------- rendering


def _ratio_text(ratio: float) -> Text:
    style = "green" if ratio < 1.0 else ("red" if ratio > 1.0 else "")
    return Text(f"{ratio:.3f}", style=style)


def _best_index(preds: Sequence[Prediction]) -> int | None:
    """Row with the lowest ratio (first on ties) if it beats plain decoding."""
    best = min(range(len(preds)), key=lambda i: (preds[i].ratio_to_plain, i))
    return best if preds[best].ratio_to_plain < 1.0 else None


def _fmt_a(a: float | None) -> str:
    return "-" if a is None else f"{a:.3f}"


def _render_single(console: Console, pred: Prediction, req: _Request) -> None:
    c = req.draft_ms / req.target_ms
    o = req.overhead_ms / req.target_ms
    table = Table(title=f"speculative decoding cost model (k={pred.k}, a={pred.acceptance:g})")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("tokens per step (E)", f"{pred.tokens_per_step:.3f}")
    table.add_row("verification steps", f"{pred.verification_steps:.1f}")
    table.add_row("draft tokens proposed", f"{pred.draft_tokens_proposed:.1f}")
    table.add_row("wasted draft tokens", f"{pred.wasted_draft_tokens:.1f}")
    table.add_row("total time (ms)", f"{pred.total_ms:.1f}")
    table.add_row("plain decoding (ms)", f"{pred.plain_ms:.1f}")
    table.add_row("ratio to plain", _ratio_text(pred.ratio_to_plain))
    table.add_row("speedup", f"{pred.speedup:.3f}x")
    console.print(table)
    be = break_even_acceptance(pred.k, c, o)
    console.print(
        f"break-even acceptance at k={pred.k}: "
        + (_fmt_a(be) if be is not None else "none (slower than plain even at a=1)")
    )
    bk = best_k(req.acceptances[0], c, k_max=BEST_K_MAX, overhead_ratio=o)
    console.print(
        f"best k for a={pred.acceptance:g} (1..{BEST_K_MAX}): "
        + (str(bk) if bk else "0 (don't speculate)")
    )


_SWEEP_LEGEND = (
    "tok/step: expected tokens per verification step; steps: expected verification "
    "steps; wasted: rejected draft tokens; ratio: time / plain-decoding time (< 1 is faster)"
)


def _sweep_table(title: str, first_col: str) -> Table:
    table = Table(title=title, caption=_SWEEP_LEGEND, show_edge=False)
    for name in [first_col, "tok/step", "steps", "wasted", "total ms", "ratio"]:
        _add_column(table, name)
    _add_column(table, "note", "left", min_width=len("break-even"))  # best/break-even/slower
    return table


def _add_column(
    table: Table, header: str, justify: JustifyMethod = "right", min_width: int = 0
) -> None:
    # Let headers wrap between words but never truncate a word ("tokens/…").
    longest = max(len(w) for w in header.split())
    table.add_column(header, justify=justify, min_width=max(longest, min_width))


def _row(first: str, p: Prediction, note: str) -> list[Any]:
    return [
        first,
        f"{p.tokens_per_step:.3f}",
        f"{p.verification_steps:.1f}",
        f"{p.wasted_draft_tokens:.1f}",
        f"{p.total_ms:.1f}",
        _ratio_text(p.ratio_to_plain),
        note,
    ]


def _render_sweep_k(console: Console, preds: list[Prediction], req: _Request) -> None:
    c = req.draft_ms / req.target_ms
    o = req.overhead_ms / req.target_ms
    a = req.acceptances[0]
    best = _best_index(preds)
    table = _sweep_table(f"sweep k at acceptance {a:g} (c = draft/target = {c:.4g})", "k")
    _add_column(table, "break-even a")
    for i, p in enumerate(preds):
        be = break_even_acceptance(p.k, c, o)
        if i == best:
            note = "best"
        elif p.ratio_to_plain >= 1.0:
            note = "slower" if p.ratio_to_plain > 1.0 else "break-even"
        else:
            note = ""
        cells = _row(str(p.k), p, note)
        cells.append(_fmt_a(be) if be is not None else "never")
        table.add_row(*cells, style="bold" if i == best else None)
    console.print(table)
    console.print(
        f"plain decoding: {req.tokens} x {req.target_ms:g} ms = {preds[0].plain_ms:.1f} ms"
    )
    if best is None:
        console.print("no k in the range beats plain decoding: don't speculate")
    else:
        console.print(f"best k = {preds[best].k} (ratio {preds[best].ratio_to_plain:.3f})")


def _render_sweep_acceptance(console: Console, preds: list[Prediction], req: _Request) -> None:
    c = req.draft_ms / req.target_ms
    o = req.overhead_ms / req.target_ms
    k = req.ks[0]
    be = break_even_acceptance(k, c, o)
    best = _best_index(preds)
    # The break-even marker goes on the first row at or above the break-even acceptance.
    accs = req.acceptances
    be_row = None
    if be is not None and accs[0] <= be <= accs[-1]:
        be_row = next(i for i, a in enumerate(accs) if a >= be)
    table = _sweep_table(f"sweep acceptance at k={k} (c = draft/target = {c:.4g})", "acceptance")
    for i, p in enumerate(preds):
        notes = []
        if i == be_row:
            notes.append("break-even")
        if i == best:
            notes.append("best")
        table.add_row(
            *_row(f"{p.acceptance:.3f}", p, ", ".join(notes)),
            style="bold" if i == best else None,
        )
    console.print(table)
    console.print(
        f"plain decoding: {req.tokens} x {req.target_ms:g} ms = {preds[0].plain_ms:.1f} ms"
    )
    if be is None:
        console.print(f"break-even acceptance at k={k}: none (slower than plain even at a=1)")
    else:
        where = "" if be_row is not None else " (outside the sweep)"
        console.print(
            f"break-even acceptance at k={k}: {_fmt_a(be)}{where}; below it speculation is slower"
        )


# --------------------------------------------------------------------------- command


@options.exits_2_on_bad_input(PROG)
def run(args: argparse.Namespace) -> int:
    """Run ``specperf model`` for parsed ``args``; returns the exit code (2 on bad input)."""
    req = _parse_request(args)
    preds = [
        predict(a, k, req.target_ms, req.draft_ms, req.tokens, req.overhead_ms)
        for a in req.acceptances
        for k in req.ks
    ]

    if req.as_json:
        payload: Any = (
            preds[0].model_dump(mode="json")
            if req.mode == "single"
            else [p.model_dump(mode="json") for p in preds]
        )
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        return Exit.OK

    console = options.stdout_console(PIPED_WIDTH)
    if req.mode == "single":
        _render_single(console, preds[0], req)
    elif req.mode == "sweep-k":
        _render_sweep_k(console, preds, req)
    else:
        _render_sweep_acceptance(console, preds, req)
    return Exit.OK

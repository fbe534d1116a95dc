"""When the no-spec reference blocks run (``[load] reference = "bracket"``): never two vLLM
servers up at once, so no-spec is measured on its own server in blocks that bracket the
spec configs — one before the first spec config whose TPOT gain is selected, one after
every ``[load] bracket_every`` of them, one after the last (:meth:`BracketSchedule.
due`, :attr:`BracketSchedule.open`) — and a fresh-server confirmation of a spec config
gets a fresh block of its own before and after its fresh start.

The schedule keeps the run's timeline (blocks and spec server starts, in the order they
ran); a spec start's bracket is the nearest block before it and the nearest after it
(:meth:`BracketSchedule.bracket`). It starts nothing itself: :class:`ReferenceBlocks`
measures the blocks when the measurer (specperf.engine.measurer) reaches a spec config or
its fresh start, and the closing one after the matrix (specperf.engine.after_matrix). How
a bracketed gain is judged: :mod:`specperf.analysis.bracket`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from specperf.config.profile import Profile
from specperf.engine.server import one_line
from specperf.engine.servers import ServerPool
from specperf.engine.trials import TrialRunner
from specperf.schemas import Case, Trial

__all__ = ["Block", "BracketSchedule", "ReferenceBlocks"]


@dataclass
class Block:
    """One no-spec reference block: its index in the run, its trials per concurrency
    (each marked with the block: Trial.reference_block), and why it failed, if it did."""

    index: int
    trials: dict[int, list[Trial]] = field(default_factory=dict)
    error: str | None = None


@dataclass
class BracketSchedule:
    #: [load] bracket_every: spec configs measured between two blocks.
    every: int
    blocks: list[Block] = field(default_factory=list)
    #: ("block", index) and ("spec", config id, server start), in the order they ran.
    timeline: list[tuple[str, ...]] = field(default_factory=list)
    #: Bracketed spec configs measured since the last block.
    since_block: int = 0
    #: The matrix is over and its closing block was measured (or tried).
    closed: bool = False

    def due(self) -> bool:
        """Whether a block must run before the next bracketed spec config starts: none has
        run yet, or ``every`` configs were measured since the last."""
        return not self.blocks or self.since_block >= self.every

    @property
    def open(self) -> bool:
        """A spec config was measured since the last block: a block must close it."""
        return bool(self.timeline) and self.timeline[-1][0] == "spec"

    def add_block(self, block: Block) -> None:
        self.blocks.append(block)
        self.timeline.append(("block", str(block.index)))
        self.since_block = 0

    def spec_started(self, config_id: str, start: int) -> None:
        self.timeline.append(("spec", config_id, str(start)))

    def spec_done(self) -> None:
        self.since_block += 1

    def bracket(self, config_id: str, start: int) -> tuple[Block | None, Block | None]:
        """The blocks measured just before and just after this spec server start."""
        key = ("spec", config_id, str(start))
        if key not in self.timeline:
            return None, None
        at = self.timeline.index(key)
        before = next((int(e[1]) for e in reversed(self.timeline[:at]) if e[0] == "block"), None)
        after = next((int(e[1]) for e in self.timeline[at + 1:] if e[0] == "block"), None)
        return (self.blocks[before] if before is not None else None,
                self.blocks[after] if after is not None else None)

    def trials_for(self, config_id: str, spec_trials: list[Trial],
                   c: int) -> tuple[list[Trial], str | None]:
        """The no-spec trials at concurrency ``c`` bracketing each server start the spec
        case's trials ran on (tagged with the start they bracket when there are two, as
        the spec trials are), and why a bracket is incomplete (None: complete). Empty while
        a start's bracket is still open (its block after has not run) and the matrix is
        not over."""
        starts = sorted({t.server_start or 0 for t in spec_trials}) or [0]
        tag_start = len(starts) > 1
        out: list[Trial] = []
        missing: list[str] = []
        for s in starts:
            before, after = self.bracket(config_id, s)
            if after is None and not self.closed:
                return [], None
            for name, block in (("before", before), ("after", after)):
                if block is None or not block.trials.get(c):
                    why = block.error if block is not None and block.error else "not measured"
                    missing.append(f"start {s + 1}: the no-spec block {name} it ({why})")
                    continue
                out.extend(t.model_copy(update={"server_start": s}) if tag_start else t
                           for t in block.trials[c])
        return out, "; ".join(missing) or None



class MeasureBlockError(RuntimeError):
    """A reference block could not be measured (no no-spec config)."""


@dataclass
class ReferenceBlocks:
    """Measures the no-spec reference blocks: on the no-spec server alone (the pool,
    exclusive under reference = "bracket", stops any other first), ``repeats`` rounds
    over the concurrencies with a selected gain, the first with warm-up requests; the
    server is stopped after."""

    profile: Profile
    pool: ServerPool
    schedule: BracketSchedule
    repeats: int
    #: Every concurrency with a selected TPOT gain (known after collection).
    concurrencies: Callable[[], list[int]]
    #: Who runs the blocks' trials (the measurer's runner, read at each block).
    runner: Callable[[], TrialRunner]
    say: Callable[[str], None] = print

    def before_spec_config(self) -> None:
        """Before a bracketed spec config starts: a block, when one is due."""
        if self.schedule.due():
            first = not self.schedule.blocks
            self.measure("before the first spec config" if first
                         else f"after {self.schedule.since_block} spec configs")

    def before_fresh_start(self, config_id: str) -> None:
        """A fresh start has fresh blocks of its own, before and after it (one server up
        at a time: the spec server stops first)."""
        self.pool.stop(config_id)
        self.measure(f"before {config_id}'s fresh start")

    def after_fresh_start(self, config_id: str, start: int) -> None:
        """Before a fresh start's gain is judged: its block after, if not measured yet
        (the pool stops the spec server first)."""
        if self.schedule.bracket(config_id, start)[1] is None:
            self.measure(f"after {config_id}'s fresh start")

    def close(self) -> None:
        """After the matrix: the closing block, if a spec config ran since the last."""
        if self.schedule.open:
            self.measure("after the last spec config")
        self.schedule.closed = True

    def measure(self, why: str) -> Block:
        """One block, added to the schedule; one that fails is kept with its error, and
        the gains it should have bracketed say so."""
        nospec = self.profile.nospec
        block = Block(len(self.schedule.blocks))
        concs = self.concurrencies()
        self.say(f"specperf: no-spec reference block {block.index} ({why}): {self.repeats} "
                 f"trial{'s' if self.repeats != 1 else ''} at c = {', '.join(map(str, concs))} "
                 "on the no-spec server alone ([load] reference = \"bracket\")")
        # The record of no-spec's own start (its cases) stays under its id; each block's
        # start is kept as <id>@block<N>.
        own = self.pool.records.pop(nospec.id, None) if nospec is not None else None
        try:
            if nospec is None:
                raise MeasureBlockError("the profile has no no-spec config")
            server = self.pool.server_for(nospec.id)
            for r in range(self.repeats):
                for c in concs:
                    trial = self.runner().trial(server, c, r, warmup=r == 0,
                                                case=Case(config_id=nospec.id, concurrency=c),
                                                paired=True)
                    block.trials.setdefault(c, []).append(
                        trial.model_copy(update={"reference_block": block.index}))
        except Exception as exc:  # noqa: BLE001 - fails only the gains it brackets
            block.error = f"{type(exc).__name__}: {one_line(str(exc))}"
            self.say(f"specperf: no-spec reference block {block.index} failed: {block.error}")
        finally:
            if nospec is not None:
                self.pool.stop(nospec.id)
                record = self.pool.records.pop(nospec.id, None)
                if record is not None:
                    self.pool.records[f"{nospec.id}@block{block.index}"] = record.model_copy(
                        update={"config_id": f"{nospec.id}@block{block.index}"})
                if own is not None:
                    self.pool.records[nospec.id] = own
        self.schedule.add_block(block)
        return block

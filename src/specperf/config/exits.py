"""The product's exit statuses: one number, one meaning, for the pytest run and every
``specperf`` command (and ``python -m specperf.lab.*``). docs/how-a-run-works.md ("Exit
statuses") is this table in prose; a test keeps the two the same.

Before this table a number meant different things on the two sides (2 was "interrupted"
in pytest and "bad input" in the CLI; a baseline of other hardware exited 4 in pytest and
2 in ``specperf compare``; 1 was both "a check failed" and "a download failed"; 3 both
"internal error" and "promote refused"). For one release, ``SPECPERF_LEGACY_EXIT_CODES=1``
gives back the old numbers (:func:`legacy`) to scripts that still read them.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from enum import IntEnum

__all__ = ["LEGACY_CLI", "LEGACY_PYTEST", "Exit", "epilog", "legacy", "meaning"]


class Exit(IntEnum):
    #: every check passed, or had nothing to judge against; the command did what it was asked
    OK = 0
    #: a check FAILED: a regression that survives the noise, or a fixed floor missed
    FAILED = 1
    #: nothing judged: bad input (a file, a field, an option, a setting) or a comparison
    #: refused (a baseline of other hardware, another profile); the message names the fix
    BAD_INPUT = 2
    #: specperf or pytest itself broke, or a result could not be written (disk full)
    INTERNAL = 3
    #: pytest's own: a command-line option pytest does not know (specperf's own options
    #: are bad input, 2)
    PYTEST_USAGE = 4
    #: nothing collected or selected (pytest's own, e.g. a ``-k`` that matches nothing)
    NOTHING_COLLECTED = 5
    #: nothing failed, but the data could not decide some checks (not a failure)
    INCONCLUSIVE = 6
    #: nothing failed, but the machine was busy during some timing checks (not a failure;
    #: wins over 6 — the cure is a quiet machine)
    BUSY = 7
    #: a download (``fetch-sharegpt``, ``fetch-specbench``, ``fetch-nightlies``) failed
    FETCH_FAILED = 8
    #: ``specperf promote`` refused the runs it was given (too few, or they disagree)
    PROMOTE_REFUSED = 9
    #: ``specperf.lab.bisect``: no release between the two differs
    NO_DIFFERENCE = 10
    #: ``specperf check``: a profile does not fit that vLLM (its config classes refuse it)
    PROFILE_REJECTED = 11
    #: ``specperf issues``: GitHub's rate limit stopped it; what is done is in its state
    #: file, and a rerun continues from there
    ISSUES_PAUSED = 12
    #: nothing run: another specperf run holds this GPU machine's lock (the message names
    #: its PID; specperf.engine.gpu_lock)
    GPU_LOCKED = 13
    #: ``specperf plan``: a shard's estimate exceeds --limit-minutes, or servers up
    #: together exceed a device's memory (the message names which)
    PLAN_DOES_NOT_FIT = 14
    #: interrupted (Ctrl-C, SIGTERM from CI cancelling the job): nothing was decided
    INTERRUPTED = 130


#: One line each, as docs/how-a-run-works.md shows them.
_MEANING: dict[Exit, str] = {
    Exit.OK: "every check passed (or had nothing to judge against); the command did what it "
             "was asked",
    Exit.FAILED: "a check FAILED: a regression that survives the noise, or a floor missed",
    Exit.BAD_INPUT: "nothing judged: bad input (file, field, option, setting) or a comparison "
                    "refused (baseline of other hardware or profile)",
    Exit.INTERNAL: "specperf or pytest itself broke, or a result could not be written",
    Exit.PYTEST_USAGE: "pytest's own: an option pytest does not know",
    Exit.NOTHING_COLLECTED: "pytest's own: nothing collected or selected",
    Exit.INCONCLUSIVE: "nothing failed; some checks undecided (not a failure)",
    Exit.BUSY: "nothing failed; some timing checks not measured, machine busy (not a failure)",
    Exit.FETCH_FAILED: "a download did not produce its file",
    Exit.PROMOTE_REFUSED: "`specperf promote` refused the runs",
    Exit.NO_DIFFERENCE: "bisect: no release in the range differs",
    Exit.PROFILE_REJECTED: "`specperf check`: a profile does not fit that vLLM",
    Exit.ISSUES_PAUSED: "`specperf issues` paused by GitHub's rate limit; a rerun continues",
    Exit.GPU_LOCKED: "nothing run: another specperf run holds this GPU machine (its PID named)",
    Exit.PLAN_DOES_NOT_FIT: "`specperf plan`: a shard over --limit-minutes or a device over "
                            "its memory (named)",
    Exit.INTERRUPTED: "interrupted (Ctrl-C, SIGTERM): nothing decided",
}


def meaning(code: Exit) -> str:
    return _MEANING[code]


#: How a command's ``--help`` epilogue (:func:`epilog`) begins.
EPILOG_HEADING = "Exit codes (docs/how-a-run-works.md):"


def epilog(codes: Iterable[Exit]) -> str:
    """The ``--help`` epilogue listing ``codes`` (a command's, or every command's) with
    their meanings from this table, wrapped at 78 columns (argparse's default formatter
    wraps it again to the terminal; a raw-description formatter prints it as it is)."""
    listed = ". ".join(f"{int(c)} = {meaning(c)}" for c in sorted(set(codes)))
    return textwrap.fill(f"{EPILOG_HEADING} {listed}.", width=78)


#: The numbers before this table, where they differ (SPECPERF_LEGACY_EXIT_CODES=1).
LEGACY_PYTEST: dict[Exit, int] = {Exit.BAD_INPUT: 4, Exit.INTERRUPTED: 2}
LEGACY_CLI: dict[Exit, int] = {Exit.FETCH_FAILED: 1, Exit.PROMOTE_REFUSED: 3,
                               Exit.NO_DIFFERENCE: 3, Exit.PROFILE_REJECTED: 1}


def legacy(code: int, *, pytest: bool, enabled: bool) -> int:
    """``code`` as it was numbered before this table when ``enabled`` (the setting
    SPECPERF_LEGACY_EXIT_CODES), for the pytest run (``pytest``) or a command."""
    if not enabled:
        return int(code)
    try:
        known = Exit(code)
    except ValueError:
        return int(code)
    return (LEGACY_PYTEST if pytest else LEGACY_CLI).get(known, int(known))

"""What the engine tells whoever watches a run: servers starting, trials, requests, cases.

The engine reports to a :class:`RunObserver`; it never imports a view. The live and plain
displays in specperf.report.progress satisfy the protocol as they are (structurally), and
the pytest plugin hands one in. :class:`LineObserver` is the engine's own fallback for
callers without a display (the lab tools, unit tests): the message lines, nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from specperf.schemas import Case

__all__ = ["LineObserver", "RunObserver"]


class RunObserver(Protocol):
    """The events of a perf run, in order (docs/architecture.md):

        server_starting → server_ready | server_failed
        case_started (each case of the config being measured, before its first trial)
        trial_started → request_done × n → trial_done      (cases interleaved)
        (a spec trial interleaved with its paired no-spec one request by request:
        trial_started(interleaved=True) → request_done × 2n → trial_done × 2)
        case_done | case_failed

    Events that carry a ``message`` carry the one line a plain log shows for them."""

    def line(self, message: str) -> None: ...

    def set_cases_total(self, n: int) -> None: ...

    def server_starting(self, config_id: str, message: str) -> None: ...

    def server_ready(self, config_id: str, message: str) -> None: ...

    def server_failed(self, config_id: str, cases: Iterable[Case] = ()) -> None: ...

    def case_started(self, case: Case, trials: int, requests: int) -> None: ...

    def case_more_trials(self, case: Case, trials: int) -> None: ...

    def trial_started(self, case: Case, paired: bool = False,
                      interleaved: bool = False) -> None: ...

    def request_done(self, ok: bool = True) -> None: ...

    def trial_done(self) -> None: ...

    def case_done(self, case: Case, message: str) -> None: ...

    def case_failed(self, case: Case) -> None: ...


class LineObserver:
    """The message lines of the events, written with ``say``; the other events are silent."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self._say = say

    def line(self, message: str) -> None:
        self._say(message)

    def set_cases_total(self, n: int) -> None:
        pass

    def server_starting(self, config_id: str, message: str) -> None:
        self.line(message)

    def server_ready(self, config_id: str, message: str) -> None:
        self.line(message)

    def server_failed(self, config_id: str, cases: Iterable[Case] = ()) -> None:
        pass

    def case_started(self, case: Case, trials: int, requests: int) -> None:
        pass

    def case_more_trials(self, case: Case, trials: int) -> None:
        pass

    def trial_started(self, case: Case, paired: bool = False,
                      interleaved: bool = False) -> None:
        pass

    def request_done(self, ok: bool = True) -> None:
        pass

    def trial_done(self) -> None:
        pass

    def case_done(self, case: Case, message: str) -> None:
        self.line(message)

    def case_failed(self, case: Case) -> None:
        pass

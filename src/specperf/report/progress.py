"""What a perf run shows while it runs: a rich live display on a terminal, plain lines in a log.

A run spends minutes in places pytest cannot see into: a vLLM server loading (most of a
minute on a CPU; measured: docs/validation.md), then trials of a server config's cases,
interleaved, each a batch of streamed requests. The fixture reports those events to a
:class:`RunProgress`:

    server_starting → server_ready | server_failed
    case_started (one per case of the config being measured, before its first trial)
    trial_started → request_done × n → trial_done      (repeated, cases interleaved)
    case_done | case_failed

Two views of the same events:

* :class:`PlainProgress` — today's quiet output: one line per server start and ready, and
  exactly one line per measured case. What CI logs, pipes, ``NO_COLOR``, ``TERM=dumb`` and
  ``-p no:terminal`` get.
* :class:`RichProgress` — the same permanent lines, plus a live region under them while
  something is running: a spinner with the seconds a server has been starting, per case a
  bar of its trials (paired no-spec trials included), the current trial's requests, and a
  bar of all the run's cases.

Living with pytest: during a test pytest's fd capture points fd 1 at a temp file, so the
live region writes to a duplicate of the terminal's descriptor taken before any test ran
(:func:`terminal_stream`); it never redirects ``sys.stdout`` (pytest's capture owns it).
It is shown only while a test is measuring: :meth:`RunProgress.pause` erases it before
pytest writes a report line, a summary, or after Ctrl-C, and the next event redraws it.
It redraws once a second from its own thread (see REFRESH_PER_SECOND); a request's
completion only bumps a counter, so the load client's event loop never draws.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal, TextIO

from rich.console import Console, RenderableType
from rich.live import Live
from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, Task, TaskID, TextColumn
from rich.table import Column
from rich.text import Text

from specperf.config import settings
from specperf.schemas import Case

__all__ = [
    "MODES",
    "PlainProgress",
    "RichProgress",
    "RunProgress",
    "choose_progress",
    "make_progress",
    "terminal_stream",
]

#: Values of ``--perf-progress``.
MODES = ("auto", "rich", "plain")
#: Live redraws per second: enough for a clock that ticks in seconds. Each redraw holds
#: the GIL for a few ms in a thread beside the load client's event loop, so it may delay
#: reading a streamed chunk by up to that; once a second keeps that rare
#: (``--perf-progress plain`` avoids it entirely).
REFRESH_PER_SECOND = 1.0


class RunProgress:
    """The events of a perf run and the one-line messages that go with some of them.

    This base class is the plain view: message lines go to ``write_line``; the events
    without a message print nothing.
    """

    def __init__(self, write_line: Callable[[str], None]) -> None:
        self._write_line = write_line

    def line(self, message: str) -> None:
        """A line for the user (a note, a warning): printed as it comes."""
        self._write_line(message)

    def set_cases_total(self, n: int) -> None:
        """How many cases the run will measure (known after collection)."""

    def server_starting(self, config_id: str, message: str) -> None:
        self.line(message)

    def server_ready(self, config_id: str, message: str) -> None:
        self.line(message)

    def server_failed(self, config_id: str, cases: Iterable[Case] = ()) -> None:
        """The server did not come up or died; ``cases``: its cases, now never measured.
        (pytest reports the failure itself.)"""

    def case_started(self, case: Case, trials: int, requests: int) -> None:
        """``case`` will run ``trials`` trials (its own and the paired no-spec ones) of
        ``requests`` measured requests each."""

    def case_more_trials(self, case: Case, trials: int) -> None:
        """``case`` runs ``trials`` more than announced (--perf-retry-inconclusive)."""

    def trial_started(self, case: Case, paired: bool = False,
                      interleaved: bool = False) -> None:
        """A trial of ``case`` begins; ``paired``: the no-spec trial run for its gain;
        ``interleaved``: the case's trial and that no-spec trial together, their requests
        alternating (twice the requests, then two trial_done)."""

    def request_done(self, ok: bool = True) -> None:
        """One measured request of the current trial finished (called by the load client
        on its event loop: must stay cheap)."""

    def trial_done(self) -> None:
        pass

    def case_done(self, case: Case, message: str) -> None:
        """``case`` is measured; ``message`` is its one summary line."""
        self.line(message)

    def case_failed(self, case: Case) -> None:
        """``case`` could not be measured (pytest reports why)."""

    def pause(self) -> None:
        """Take any live display off the terminal (pytest is about to write)."""

    def close(self) -> None:
        """End of the run: stop drawing and release the terminal."""
        self.pause()


class PlainProgress(RunProgress):
    """One line per server start, server ready and measured case; nothing else."""


class _Count(ProgressColumn):
    """``done/total unit`` for bars; nothing for the server spinner."""

    def render(self, task: Task) -> Text:
        if task.total is None:
            return Text("")
        txt = f"{task.completed:.0f}/{task.total:.0f} {task.fields.get('unit', '')}"
        failed = task.fields.get("failed", 0)
        if failed:
            txt += f", {failed} failed"
        return Text(txt, style="progress.download")


class _Elapsed(ProgressColumn):
    """Seconds for a server start (what a user compares with the startup timeout);
    h:mm:ss for the run."""

    def render(self, task: Task) -> Text:
        clock = task.fields.get("clock")
        elapsed = task.elapsed
        if not clock or elapsed is None:
            return Text("")
        if clock == "s":
            return Text(f"{elapsed:.0f} s", style="progress.elapsed")
        return Text(str(timedelta(seconds=int(elapsed))), style="progress.elapsed")


class _Spinner(SpinnerColumn):
    def render(self, task: Task) -> Text:
        return super().render(task) if task.fields.get("spin") else Text(" ")  # type: ignore[return-value]


#: Row order of the live region, top to bottom.
_SERVER, _CASE, _TRIAL, _RUN = range(4)


class _Rows(Progress):
    """Tasks drawn by row kind, not in the order they were added: the run's bar stays
    at the bottom though it is added first."""

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(sorted(self.tasks, key=lambda t: t.fields.get("row", 0)))


@dataclass
class _CaseRow:
    task: TaskID
    trials: int
    requests: int
    done: int = 0


class RichProgress(RunProgress):
    """The permanent lines of :class:`PlainProgress` plus a live region under them.

    ``console`` writes to the terminal (see :func:`terminal_stream`); ``write_line`` is
    how lines go out while no live region is shown (pytest's own writer, so its idea of
    the current line stays right); ``prepare`` runs before the live region appears (the
    plugin ends pytest's half-written line there). ``get_time`` is the clock of the
    elapsed-time columns (a monotonic clock by default).
    """

    def __init__(self, console: Console, write_line: Callable[[str], None], *,
                 prepare: Callable[[], None] | None = None,
                 get_time: Callable[[], float] | None = None,
                 owned_stream: TextIO | None = None) -> None:
        super().__init__(write_line)
        self.console = console
        self._prepare = prepare
        self._owned = owned_stream
        self._progress = _Rows(
            _Spinner("dots", style="cyan"),
            TextColumn("{task.description}", markup=False,
                        table_column=Column(no_wrap=True, overflow="ellipsis")),
            BarColumn(bar_width=20),
            _Count(table_column=Column(no_wrap=True)),
            _Elapsed(table_column=Column(no_wrap=True)),
            console=console,
            get_time=get_time,
            auto_refresh=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live: Live | None = None
        self._servers: dict[str, TaskID] = {}
        self._cases: dict[Case, _CaseRow] = {}
        self._trial: TaskID | None = None
        self._current: Case | None = None
        self._failed = 0
        self._overall: TaskID | None = None
        self._finished: set[Case] = set()
        self._closed = False

    # -- the live region ----------------------------------------------------------

    def _show(self) -> None:
        if self._live is not None or self._closed:
            return
        if self._prepare is not None:
            self._prepare()
        # A fresh Live each time: a stopped one remembers the height it last drew and
        # would erase that many of the lines pytest printed since.
        self._live = Live(get_renderable=self._progress.get_renderable, console=self.console,
                          auto_refresh=True, refresh_per_second=REFRESH_PER_SECOND,
                          transient=True, redirect_stdout=False, redirect_stderr=False)
        self._live.start(refresh=True)

    @property
    def live(self) -> bool:
        """Whether the live region is on the terminal now."""
        return self._live is not None

    def refresh(self) -> None:
        """Draw now (the live region otherwise redraws itself once a second)."""
        if self._live is not None:
            self._live.refresh()

    def pause(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.stop()

    def close(self) -> None:
        self.pause()
        self._closed = True
        if self._owned is not None:
            self._owned.close()
            self._owned = None

    def line(self, message: str) -> None:
        if self._live is not None:
            # Printed above the live region, which redraws under it.
            self.console.print(Text(message), soft_wrap=True)
        else:
            self._write_line(message)

    # -- events -------------------------------------------------------------------

    def set_cases_total(self, n: int) -> None:
        if n <= 0:
            return
        if self._overall is None:
            self._overall = self._progress.add_task("cases measured", total=n, unit="cases",
                                                    clock="hms", row=_RUN)
        else:
            self._progress.update(self._overall, total=n)

    def server_starting(self, config_id: str, message: str) -> None:
        self.line(message)
        self._server_gone(config_id)
        self._servers[config_id] = self._progress.add_task(
            f"starting vLLM for {config_id}", total=None, spin=True, clock="s", row=_SERVER)
        self._show()
        self.refresh()

    def _server_gone(self, config_id: str) -> None:
        task = self._servers.pop(config_id, None)
        if task is not None:
            self._progress.remove_task(task)

    def server_ready(self, config_id: str, message: str) -> None:
        self._server_gone(config_id)
        self.line(message)
        self.refresh()

    def server_failed(self, config_id: str, cases: Iterable[Case] = ()) -> None:
        self._server_gone(config_id)
        for case in cases:
            self.case_failed(case)
        self.refresh()

    def case_started(self, case: Case, trials: int, requests: int) -> None:
        old = self._cases.pop(case, None)
        if old is not None:
            self._progress.remove_task(old.task)
        task = self._progress.add_task(f"  {case}", total=trials, unit="trials", row=_CASE)
        self._cases[case] = _CaseRow(task, trials, requests)
        self._show()
        self.refresh()

    def case_more_trials(self, case: Case, trials: int) -> None:
        row = self._cases.get(case)
        if row is not None:
            row.trials += trials
            self._progress.update(row.task, total=row.trials)
            self.refresh()

    def trial_started(self, case: Case, paired: bool = False,
                      interleaved: bool = False) -> None:
        row = self._cases.get(case)
        of = f" {row.done + 1}/{row.trials}" if row is not None else f" of {case.id}"
        total = row.requests * (2 if interleaved else 1) if row is not None else None
        with_ = (", interleaved with paired no-spec" if interleaved
                 else ", paired no-spec" if paired else "")
        desc = f"  ↳ trial{of}{with_}"
        self._mark(self._current, False)
        self._current, self._failed = case, 0
        self._mark(case, True)
        fields = {"unit": "requests", "failed": 0, "clock": "s", "row": _TRIAL}
        if self._trial is None:
            self._trial = self._progress.add_task(desc, total=total, **fields)
        else:
            # reset() restarts the trial's clock and count (and replaces its fields).
            self._progress.reset(self._trial, total=total, description=desc, **fields)
        self._show()
        self.refresh()

    def _mark(self, case: Case | None, current: bool) -> None:
        # "▸" points at the case whose trial the row under the cases is running.
        row = self._cases.get(case) if case is not None else None
        if row is not None:
            self._progress.update(row.task, description=f"{'▸' if current else ' '} {case}")

    def request_done(self, ok: bool = True) -> None:
        if self._trial is None:
            return
        if ok:
            self._progress.advance(self._trial)
        else:
            self._failed += 1
            self._progress.update(self._trial, advance=1, failed=self._failed)

    def trial_done(self) -> None:
        row = self._cases.get(self._current) if self._current is not None else None
        if row is not None:
            row.done += 1
            self._progress.update(row.task, completed=row.done)

    def _case_over(self, case: Case) -> None:
        row = self._cases.pop(case, None)
        if row is not None:
            self._progress.remove_task(row.task)
        if case == self._current:
            self._current = None
        if not self._cases and self._trial is not None:
            self._progress.remove_task(self._trial)
            self._trial = None
        if case not in self._finished:
            self._finished.add(case)
            if self._overall is not None:
                self._progress.update(self._overall, completed=len(self._finished))

    def case_done(self, case: Case, message: str) -> None:
        self._case_over(case)
        self.line(message)
        self.refresh()

    def case_failed(self, case: Case) -> None:
        self._case_over(case)


def choose_progress(mode: str, stream: TextIO | None, environ: Mapping[str, str] | None = None,
                    terminal: bool = True) -> Literal["rich", "plain"]:
    """``--perf-progress``: ``rich`` and ``plain`` as asked; ``auto`` is rich only on an
    interactive terminal — ``stream`` a TTY, pytest's terminal reporter on (``terminal``),
    ``TERM`` not ``dumb`` and no ``NO_COLOR`` (https://no-color.org: a user who asks for
    no colour gets no animation either)."""
    if mode not in MODES:
        raise ValueError(f"--perf-progress {mode!r}: expected one of {', '.join(MODES)}")
    if mode != "auto":
        return mode  # type: ignore[return-value]
    if environ is None:  # the environment as specperf.config.settings reads it
        env = settings.current()
        no_color, term = env.no_color, env.term
    else:  # an explicit mapping (tests)
        no_color, term = bool(environ.get("NO_COLOR")), environ.get("TERM")
    isatty = getattr(stream, "isatty", None)
    tty = False
    if isatty is not None:
        try:
            tty = bool(isatty())
        except (OSError, ValueError):  # a closed or detached stream
            tty = False
    if not (terminal and tty) or no_color or term == "dumb":
        return "plain"
    return "rich"


def terminal_stream(stream: TextIO) -> TextIO | None:
    """A second handle on the terminal behind ``stream`` (a duplicated descriptor), or
    None if it has none. Taken before the tests run, it still reaches the terminal while
    pytest's fd capture has pointed descriptor 1 at a temp file."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    encoding = getattr(stream, "encoding", None) or "utf-8"
    return os.fdopen(os.dup(fd), "w", encoding=encoding, errors="replace")


def make_progress(mode: str, stream: TextIO | None, write_line: Callable[[str], None], *,
                  prepare: Callable[[], None] | None = None, terminal: bool = True,
                  environ: Mapping[str, str] | None = None) -> RunProgress:
    """The view ``mode`` asks for on ``stream`` (see :func:`choose_progress`); plain when
    the stream has no descriptor to draw on."""
    if choose_progress(mode, stream, environ, terminal) == "plain" or stream is None:
        return PlainProgress(write_line)
    term = terminal_stream(stream)
    if term is None:
        return PlainProgress(write_line)
    console = Console(file=term, force_terminal=True if mode == "rich" else None,
                      markup=False, highlight=False, emoji=False)
    return RichProgress(console, write_line, prepare=prepare, owned_stream=term)

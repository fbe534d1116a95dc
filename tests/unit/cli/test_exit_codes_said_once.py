"""Exit codes are said once (specperf.config.exits): each command's ``--help`` epilogue,
``specperf --help`` and docs/commands.md's per-command column list exactly the codes the
command can return, with the table's meanings.

What a command "can return" is read from its code, not restated here: every ``Exit.X`` its
module names, and those of the helpers it calls that return one (the bad-input decorator,
the download, the judge's exit status), plus what every command shares (argparse's exit 2
on a bad option, shown by running one; ``cli._run``'s own)."""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from specperf import cli
from specperf.analysis.judge import exit_status, outcome
from specperf.cli import options
from specperf.config.exits import EPILOG_HEADING, Exit, epilog, meaning
from tests.support import REPO_ROOT

#: The functions a command calls that return an exit code of their own choosing.
HELPERS: dict[str, Callable[..., Any]] = {
    "exits_2_on_bad_input": options.exits_2_on_bad_input,
    "run_fetch": options.run_fetch,
    "run_exit_status": exit_status.run_exit_status,
    "exit_status": outcome.exit_status,
}


def _codes_in(source: str, seen: frozenset[str] = frozenset()) -> set[Exit]:
    """Every ``Exit.X`` the source names (its ``EXITS`` declaration aside) and those of the
    helpers it calls."""
    tree = ast.parse(source)
    declared = {id(n) for node in ast.walk(tree) if isinstance(node, ast.AnnAssign | ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "EXITS"
                        for t in ([node.target] if isinstance(node, ast.AnnAssign) else node.targets))
                for n in ast.walk(node)}
    codes: set[Exit] = set()
    for node in ast.walk(tree):
        if id(node) in declared:
            continue
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "Exit"):
            codes.add(Exit[node.attr])
        name = node.id if isinstance(node, ast.Name) else (
            node.attr if isinstance(node, ast.Attribute) else None)
        if name in HELPERS and name not in seen:
            codes |= _codes_in(inspect.getsource(HELPERS[name]), seen | {name})
    return codes


def _name(command: ModuleType) -> str:
    return command.__name__.rsplit(".", 1)[-1].replace("_", "-")


def _every_command() -> set[Exit]:
    return _codes_in(inspect.getsource(cli._run)) | {Exit.BAD_INPUT}


def _can_return(command: ModuleType) -> set[Exit]:
    return _codes_in(inspect.getsource(command)) | _every_command()


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.main([*argv, "--help"])
    assert stop.value.code == 0
    return capsys.readouterr().out


def _epilog_codes(help_text: str) -> tuple[str, set[int]]:
    tail = " ".join(help_text[help_text.index(EPILOG_HEADING):].split())
    return tail, {int(n) for n in re.findall(r"(?:: |\. )(\d+) = ", tail)}


def test_every_command_shares_2_and_130() -> None:
    assert set(cli.EVERY_COMMAND) <= _every_command()
    with pytest.raises(SystemExit) as stop:  # argparse's own refusal is bad input
        cli.main(["show", "--no-such-option"])
    assert stop.value.code == Exit.BAD_INPUT


@pytest.mark.parametrize("command", cli.COMMANDS, ids=_name)
def test_help_lists_exactly_what_the_command_returns(
        command: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    can = _can_return(command)
    assert set(cli.command_exits(command)) == can, (
        f"{command.__name__}.EXITS must be the codes its run() returns: "
        f"{sorted(int(c) for c in can)}")
    tail, listed = _epilog_codes(_help(capsys, _name(command)))
    assert listed == {int(c) for c in can}
    assert tail == " ".join(epilog(can).split())
    for code in can:
        assert " ".join(meaning(code).split()) in tail


def test_the_top_help_lists_every_commands_codes(capsys: pytest.CaptureFixture[str]) -> None:
    tail, listed = _epilog_codes(_help(capsys))
    every = set().union(*(_can_return(c) for c in cli.COMMANDS))
    assert listed == {int(c) for c in every}
    assert " ".join(epilog(every).split()) in tail


def test_docs_commands_column_is_the_code() -> None:
    text = (REPO_ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    section = text[text.index("## The commands"):]
    column = {m[1]: {int(n) for n in m[2].split(",")} for m in re.finditer(
        r"^\| `([\w-]+)[^`]*` \|.*\| ([\d, ]+) \|$", section, flags=re.M)}
    assert column == {_name(c): {int(x) for x in _can_return(c)} for c in cli.COMMANDS}
    assert "| 3 | `promote` refused" not in text  # the table of the old numbers is gone

"""The size rule (docs/architecture.md, "Sizes"): no module of ``src/specperf`` over 800
lines, no class over 400, and every module over 600 says why in its docstring, on a line
that starts ``Why one module past 600 lines:`` followed by the reason.

A module is measured in lines (``wc -l``), a class by its ast node (``end_lineno -
lineno + 1``: decorators aside, its whole body). The checker is a function of module
sources, so the test of the test hands it oversized sources without touching the tree.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support import REPO_ROOT

PACKAGE = REPO_ROOT / "src" / "specperf"
MAX_MODULE_LINES = 800
MAX_CLASS_LINES = 400
#: Above this, the module's docstring says why it is one module.
EXPLAINED_ABOVE = 600
#: The line of a module docstring that gives the reason: the marker, then a sentence.
REASON = re.compile(r"^Why one module past 600 lines: \S", re.MULTILINE)

def package_sources() -> dict[str, str]:
    """Each module's source by its path relative to the repository."""
    return {str(p.relative_to(REPO_ROOT)): p.read_text(encoding="utf-8")
            for p in sorted(PACKAGE.rglob("*.py"))}


def size_offences(sources: dict[str, str]) -> dict[str, str]:
    """Each breach of the size rule: where (``path`` or ``path::Class``) → what."""
    found = {}
    for path, source in sources.items():
        lines = len(source.splitlines())
        tree = ast.parse(source)
        if lines > MAX_MODULE_LINES:
            found[path] = f"{lines} lines, over {MAX_MODULE_LINES}"
        elif lines > EXPLAINED_ABOVE and not REASON.search(ast.get_docstring(tree) or ""):
            found[path] = (f"{lines} lines, over {EXPLAINED_ABOVE}, and its docstring has no "
                           "line 'Why one module past 600 lines: <the reason>'")
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    found[f"{path}::{node.name}"] = f"{size} lines, over {MAX_CLASS_LINES}"
    return found


def test_no_module_or_class_is_over_its_size() -> None:
    found = [f"{where}: {what}" for where, what in size_offences(package_sources()).items()]
    assert not found, "split them (docs/architecture.md, \"Sizes\"):\n" + "\n".join(found)


def _module(lines: int, doc: str = "A module.") -> str:
    head = f'"""{doc}"""\n'
    return head + "x = 1\n" * (lines - head.count("\n"))


def _with_class(name: str, lines: int) -> str:
    return _module(2) + f"class {name}:\n" + "    y = 1\n" * (lines - 1)


def test_an_oversized_module_or_class_is_caught() -> None:
    sources = {
        "long.py": _module(801, "Long.\n\nWhy one module past 600 lines: one reason."),
        "big_class.py": _with_class("Big", 401),
        "fits.py": _with_class("Fits", 400),
        "at_800.py": _module(800, "Long.\n\nWhy one module past 600 lines: one reason."),
    }
    assert size_offences(sources) == {"long.py": "801 lines, over 800",
                                      "big_class.py::Big": "401 lines, over 400"}


def test_a_module_past_600_lines_must_say_why() -> None:
    sources = {
        "silent.py": _module(601),
        "marker_only.py": _module(601, "A module.\n\nWhy one module past 600 lines:"),
        "said_in_passing.py": _module(601, "It is long; Why one module past 600 lines: x."),
        "explained.py": _module(601, "A module.\n\nWhy one module past 600 lines: one table "
                                     "per file, read in one place."),
        "short.py": _module(600),
    }
    assert list(size_offences(sources)) == ["silent.py", "marker_only.py", "said_in_passing.py"]


def test_the_checker_reads_the_package() -> None:
    sources = package_sources()
    assert "src/specperf/config/profile.py" in sources
    assert all(Path(REPO_ROOT / p).is_file() for p in sources)

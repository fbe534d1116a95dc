"""Every code name a page of docs/ gives in backticks resolves in the code: a
``module.name`` (a function, class, constant or attribute; a class's method or field), a
``path.py`` and a ``package/``. A name that moved (``compare.replicated``,
``compare._not_measured_again``, ``compare._beside_reference``) fails here the day it
moves, naming the page and the line.

What is not a code name is passed over: a file of another kind (``run.json``), a profile
key (``load.pairing``: it resolves in the profile's schema instead), a command line."""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import typing
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import BaseModel

import specperf
from tests.support import REPO_ROOT

DOCS = sorted((REPO_ROOT / "docs").glob("*.md"))
SRC = REPO_ROOT / "src" / "specperf"
SPAN = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?$")
#: Endings that make a dotted span a file name, not code.
FILE_ENDINGS = {"json", "html", "md", "txt", "toml", "png", "gz", "yml", "yaml", "jsonl",
                "lock", "csv", "log", "cfg", "ini", "sh", "whl", "tar", "zip", "so"}
#: Files of vLLM's own source the pages cite (vllm/… paths are vLLM's too).
VLLM_FILES = {"kv_cache_manager.py", "cpu_model_runner.py"}
#: Directories a run or a baseline makes (not in the repository).
RUNTIME_DIRS = {"history/", "cache/", "tmp/"}
#: Where a dotted data key lives: a profile's (``load.pairing``) or a run file's
#: (``provenance.prompts_hash``, ``confirmation.note``).
DATA_MODELS = ("specperf.config.profile.Profile", "specperf.schemas.RunResult",
               "specperf.schemas.CaseResult")


@cache
def _modules() -> dict[str, ModuleType]:
    """Every specperf module by its dotted name (importing the heavy ones only as the code
    itself does: they import vLLM inside functions)."""
    out: dict[str, ModuleType] = {"specperf": specperf}
    for info in pkgutil.walk_packages(specperf.__path__, "specperf."):
        if not info.name.endswith("__main__"):  # runs its command when imported
            out[info.name] = importlib.import_module(info.name)
    return out


def _model_of(annotation: Any) -> Any:
    """The pydantic model an annotation holds (``X | None``, ``list[X]``), else itself."""
    if isinstance(annotation, type):
        return annotation
    models = [a for a in typing.get_args(annotation)
              if isinstance(a, type) and issubclass(a, BaseModel)]
    return models[0] if models else object()


def _attr(obj: Any, name: str) -> Any:
    if isinstance(obj, type) and issubclass(obj, BaseModel) and name in obj.model_fields:
        return _model_of(obj.model_fields[name].annotation)
    if hasattr(obj, name):
        return getattr(obj, name)
    if isinstance(obj, type) and name in getattr(obj, "__annotations__", {}):
        return object()  # a dataclass field
    raise AttributeError(name)


def _resolves(obj: Any, rest: list[str]) -> bool:
    for name in rest:
        try:
            obj = _attr(obj, name)
        except AttributeError:
            return False
    return True


def _data_key(parts: list[str]) -> bool:
    """A dotted key of a profile or a run file (``load.pairing``, ``confirmation.note``)."""
    modules = _modules()
    return any(_resolves(getattr(modules[m.rsplit(".", 1)[0]], m.rsplit(".", 1)[1]), parts)
               for m in DATA_MODELS)


def _code_name(name: str) -> bool | None:
    """True: ``name`` resolves in specperf; False: it looks like code and does not; None:
    not a code name."""
    parts = name.removesuffix("()").split(".")
    modules = _modules()
    if parts[0] == "specperf" or any(m.rsplit(".", 1)[-1] == parts[0] for m in modules):
        for cut in range(len(parts), 0, -1):
            dotted = ".".join(parts[:cut])
            found = [m for n, m in modules.items() if n == dotted or n.endswith("." + dotted)]
            if any(_resolves(m, parts[cut:]) for m in found):
                return True
        return _data_key(parts) or False
    holders = [m for m in modules.values() if isinstance(getattr(m, parts[0], None), type)]
    if holders:  # Class.method, Class.field
        return any(_resolves(getattr(m, parts[0]), parts[1:]) for m in holders)
    return None


@cache
def _repo_names() -> frozenset[str]:
    """The name of every file and directory in the repository (dirs with a trailing /)."""
    names: set[str] = set()
    for _root, dirs, files in os.walk(REPO_ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        names.update(f"{d}/" for d in dirs)
        names.update(files)
    return frozenset(names)


def _path_resolves(name: str) -> bool:
    """A path (``analysis/judge/rules.py``, ``judge/``) under the repository, src/,
    src/specperf/ or one of its packages; a bare name anywhere in the repository."""
    if name.startswith("vllm/") or name in VLLM_FILES or name in RUNTIME_DIRS:
        return True
    if "/" not in name.rstrip("/"):
        return name in _repo_names()
    roots = [REPO_ROOT, REPO_ROOT / "src", SRC, *[p for p in SRC.iterdir() if p.is_dir()]]
    return any((root / name.rstrip("/")).exists() for root in roots)


def _names(page: Path) -> list[tuple[int, str, str]]:
    """(line, kind, span) of every backticked code name on ``page``."""
    out = []
    fenced = False
    for i, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced:  # an example (a command's output, a profile), not the page's own words
            continue
        for span in SPAN.findall(line):
            span = span.strip()
            if " " in span or span.startswith(("-", "$", "http", "<", "~")) or "*" in span:
                continue
            if re.fullmatch(r"[\w./-]+\.py", span) or re.fullmatch(r"[a-z_][\w/]*/", span):
                out.append((i, "path", span))
            elif DOTTED.match(span) and span.split(".")[-1].lower() not in FILE_ENDINGS:
                out.append((i, "name", span))
    return out


@pytest.mark.parametrize("page", DOCS, ids=[p.name for p in DOCS])
def test_every_code_name_a_page_gives_resolves(page: Path) -> None:
    stale = []
    for line, kind, span in _names(page):
        ok = _path_resolves(span) if kind == "path" else _code_name(span)
        if ok is False:
            stale.append(f"docs/{page.name}:{line}: `{span}` names nothing in the code")
    assert not stale, "\n".join(stale)


def test_the_check_catches_the_names_that_moved() -> None:
    for gone in ("compare._not_measured_again", "compare._beside_reference",
                 "stats.replicated", "RunComparison.exit_code"):
        assert _code_name(gone) is False
    for here in ("judge.fresh_start.replicated", "stats.moderated_spreads",
                 "kinds.from_comparison", "CaseSelection.cases_for", "Comparison.held_by",
                 "specperf.lab.upgrade"):
        assert _code_name(here) is True, here
    assert _code_name("load.pairing") is True  # a profile key
    assert _code_name("confirmation.note") is True  # a run file's
    assert _code_name("load.requets") is False
    assert _path_resolves("analysis/judge/rules.py") and _path_resolves("judge/")
    assert not _path_resolves("analysis/judge/no_such.py") and not _path_resolves("judged/")

"""The import rule: packages import only the layers below them (docs/architecture.md).

    config → schemas → analysis | store → engine | report → plugin | cli | lab

* ``config`` imports nothing of specperf; ``schemas`` only config;
* ``analysis`` (pure: statistics, comparison, cost model) and ``store`` (files, baselines)
  import config and schemas, not each other;
* ``engine`` (servers, load, trials) and ``report`` (renderers of one result) import the
  layers below, not each other; the engine never imports pytest;
* ``plugin``, ``cli`` and ``lab`` sit on top: nothing imports them, except that a ``cli``
  command may start a ``lab`` tool.

Every import counts, the ones inside functions too. The checker is a function of module
sources, so the test of the test can hand it a forbidden import without touching the tree.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import REPO_ROOT

SRC = REPO_ROOT / "src"

#: Layer of each top-level part of the package; a module may import its own part and
#: the parts listed for it.
ALLOWED: dict[str, set[str]] = {
    "version": set(),  # specperf/__init__.py: the version string only
    "config": {"version"},
    "schemas": {"version", "config"},
    "analysis": {"version", "config", "schemas"},
    "store": {"version", "config", "schemas"},
    "engine": {"version", "config", "schemas", "analysis", "store"},
    "report": {"version", "config", "schemas", "analysis", "store"},
    "plugin": {"version", "config", "schemas", "analysis", "store", "engine", "report"},
    "lab": {"version", "config", "schemas", "analysis", "store", "engine", "report"},
    "cli": {"version", "config", "schemas", "analysis", "store", "engine", "report", "lab"},
}

#: Third-party packages a layer may not import at all.
FORBIDDEN_PACKAGES: dict[str, set[str]] = {
    "config": {"pytest", "aiohttp", "vllm", "torch", "scipy", "matplotlib", "rich"},
    "schemas": {"pytest", "aiohttp", "vllm", "torch", "scipy", "matplotlib", "rich"},
    "analysis": {"pytest", "aiohttp", "vllm", "torch", "matplotlib", "rich"},
    "store": {"pytest", "aiohttp", "vllm", "scipy", "matplotlib", "rich"},
    "engine": {"pytest", "matplotlib"},
    "report": {"pytest", "aiohttp", "vllm", "torch"},
}


def part_of(module: str) -> str:
    """The layer a dotted module name belongs to (``specperf.engine.server`` → engine)."""
    parts = module.split(".")
    if parts == ["specperf"]:
        return "version"
    return parts[1]


def module_name(path: Path, src: Path) -> str:
    rel = path.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in ``source``, relative ones resolved."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            out.append((node.lineno, name))
            if name == "specperf":  # `from specperf import engine`: the names are modules
                out += [(node.lineno, f"specperf.{a.name}") for a in node.names
                        if a.name != "__version__"]
    return out


def violations(sources: dict[str, tuple[str, bool, str]]) -> list[str]:
    """Breaches of the rule in ``{module: (source, is_package, shown_path)}``."""
    found = []
    for module, (source, is_package, shown) in sorted(sources.items()):
        mine = part_of(module)
        for line, name in imported_modules(source, module, is_package):
            top = name.split(".")[0]
            if top == "specperf":
                theirs = part_of(name)
                if theirs != mine and theirs not in ALLOWED[mine]:
                    found.append(f"{shown}:{line}: {mine} imports {name} ({theirs}); "
                                 f"{mine} may import {', '.join(sorted(ALLOWED[mine])) or 'nothing'}")
            elif top in FORBIDDEN_PACKAGES.get(mine, set()):
                found.append(f"{shown}:{line}: {mine} imports {top}, which it must not")
    return found


def package_sources(src: Path = SRC) -> dict[str, tuple[str, bool, str]]:
    out = {}
    for path in sorted((src / "specperf").rglob("*.py")):
        out[module_name(path, src)] = (path.read_text(encoding="utf-8"),
                                       path.name == "__init__.py",
                                       str(path.relative_to(src.parent)))
    return out


def test_every_module_has_a_layer():
    unknown = sorted({part_of(m) for m in package_sources()} - set(ALLOWED))
    assert unknown == [], f"new top-level part(s) {unknown}: give them a layer in ALLOWED"


def test_the_package_keeps_the_import_rule():
    assert violations(package_sources()) == []


def test_a_forbidden_import_is_caught():
    sources = package_sources()
    source, is_pkg, shown = sources["specperf.analysis.stats"]
    sources["specperf.analysis.stats"] = (
        source + "\n\ndef _late():\n    from specperf.engine.server import VllmServer\n", is_pkg, shown)
    found = violations(sources)
    assert len(found) == 1
    assert found[0].startswith("src/specperf/analysis/stats.py:")
    assert "analysis imports specperf.engine.server (engine)" in found[0]


def test_nothing_imports_the_top_and_the_engine_no_pytest():
    sources = package_sources()
    report, is_pkg, shown = sources["specperf.report.console"]
    sources["specperf.report.console"] = (report + "\nfrom specperf import plugin\n", is_pkg, shown)
    engine, is_pkg, shown = sources["specperf.engine.server"]
    sources["specperf.engine.server"] = (engine + "\nimport pytest\n", is_pkg, shown)
    lab, is_pkg, shown = sources["specperf.lab.upgrade"]
    sources["specperf.lab.upgrade"] = (lab + "\nfrom ..cli import main\n", is_pkg, shown)
    found = "\n".join(violations(sources))
    assert "report imports specperf.plugin (plugin)" in found
    assert "engine imports pytest" in found
    assert "lab imports specperf.cli (cli)" in found

"""The tests of the tests: a static scan (ast) of every test file for what makes a test pass
on one machine only.

* A file read outside the repository and the test's tmp_path: an absolute path written as
  a literal (``/tmp/...``, ``/home/...``, ``~/...``) and handed to something that opens,
  lists or tests a path; ``Path.home()`` or ``expanduser``; a ``tempfile`` directory
  instead of pytest's ``tmp_path``.
* A skip whose reason does not say how to remove it: every ``pytest.skip``,
  ``importorskip`` and ``skipif`` reason is built by ``tests.support.unchecked`` (or
  ``need_module``), so the run's summary can list what went unchecked and the command
  that checks it (tests/conftest.py).

Each rule has a test of its own on small sources, so a scan that finds nothing is a scan
that would have found something.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import REPO_ROOT, TESTS_DIR

#: Absolute paths a test may name, and why.
ALLOWED_PREFIXES: dict[str, str] = {
    "/proc": "the contention guard and the server tests read the kernel's process table "
             "(parsing it is their subject); the guard's own tests use a fake /proc in tmp_path",
    "/usr/bin": "a minimal PATH for a child interpreter (PATH strings, never opened)",
    "/bin": "a minimal PATH for a child interpreter (PATH strings, never opened)",
    "/dev/null": "the null device, as a sink",
}

#: Calls whose arguments are paths that get opened, listed, tested or written.
PATH_CALLS = {
    "Path", "PurePath", "PosixPath", "open", "read_text", "read_bytes", "exists", "is_file",
    "is_dir", "isfile", "isdir", "stat", "listdir", "scandir", "walk", "glob", "iglob",
    "load_result", "read_run", "load_baseline", "load_profile", "read_model", "load_run",
    "copy", "copyfile", "copytree", "rmtree", "unlink", "remove", "chdir", "mkdir", "makedirs",
}

#: The skip calls, and the position of their reason argument.
SKIP_CALLS = {"skip": 0, "importorskip": None, "skipif": 1}
REASON_BUILDERS = {"unchecked", "need_module"}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _literal_start(node: ast.expr) -> str | None:
    """The text a str literal (or an f-string's leading constant part) starts with."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value
    return None


def _outside_path(text: str) -> bool:
    """An absolute or home-relative path that is not allow-listed."""
    if text.startswith("~"):
        return True
    if not text.startswith("/") or text.startswith("//"):
        return False
    return not any(text == p or text.startswith(p + "/") or text.startswith(p + ":")
                   for p in ALLOWED_PREFIXES)


def _constants(tree: ast.AST) -> dict[str, ast.expr]:
    """Names bound once to a literal (``REAL_RUN = "/tmp/x"``), anywhere in the file."""
    bound: dict[str, ast.expr] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            bound[node.targets[0].id] = node.value
    return bound


def _path_argument(arg: ast.expr, constants: dict[str, ast.expr]) -> str | None:
    """The outside path ``arg`` spells, directly or through a name bound to a literal."""
    if isinstance(arg, ast.Name) and arg.id in constants:
        arg = constants[arg.id]
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Div):  # Path("/tmp") / "x"
        return _path_argument(arg.left, constants)
    text = _literal_start(arg)
    return text if text is not None and _outside_path(text) else None


def _skip_reason(call: ast.Call, name: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg in ("reason", "msg"):
            return kw.value
    pos = SKIP_CALLS[name]
    if pos is not None and len(call.args) > pos:
        return call.args[pos]
    return None


def _is_pytest_skip(call: ast.Call, name: str) -> bool:
    func = call.func
    if name == "skipif":  # pytest.mark.skipif(...)
        return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute) \
            and func.value.attr == "mark"
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
        and func.value.id == "pytest"


def scan(source: str, path: str = "<test>") -> list[Finding]:
    """What in one test file reads outside the repository or skips without a remedy."""
    tree = ast.parse(source)
    constants = _constants(tree)
    found: list[Finding] = []

    def add(node: ast.AST, what: str) -> None:
        found.append(Finding(path, getattr(node, "lineno", 0), what))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) \
                else [node.module or ""]
            if any(m == "tempfile" or m.startswith("tempfile.") for m in modules):
                add(node, "imports tempfile: use pytest's tmp_path / tmp_path_factory")
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        if name == "home" and isinstance(node.func, ast.Attribute):
            add(node, "Path.home(): a test reads the repository or its tmp_path, not $HOME")
        if name == "expanduser":
            add(node, "expanduser(): a test reads the repository or its tmp_path, not $HOME")
        if name in PATH_CALLS:
            for arg in [*node.args, *(kw.value for kw in node.keywords)]:
                outside = _path_argument(arg, constants)
                if outside is not None:
                    add(node, f"{name}({outside!r}...): a path outside the repository; "
                              "commit the file under tests/data/ or make it in tmp_path")
        if name in SKIP_CALLS and _is_pytest_skip(node, name):
            reason = _skip_reason(node, name)
            if not (isinstance(reason, ast.Call) and _name(reason.func) in REASON_BUILDERS):
                add(node, f"{name} without a reason from tests.support.unchecked(what, "
                          "enable): say what goes unchecked and the command that checks it")
    return found


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS_DIR.rglob("*.py") if "__pycache__" not in p.parts)


TEST_FILES = _test_files()


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: str(p.relative_to(TESTS_DIR)))
def test_no_test_reads_outside_the_repository_or_skips_without_a_remedy(path: Path) -> None:
    findings = scan(path.read_text(encoding="utf-8"), str(path.relative_to(REPO_ROOT)))
    assert not findings, "\n".join(map(str, findings))


def test_every_test_file_is_scanned() -> None:
    names = {p.relative_to(TESTS_DIR).as_posix() for p in TEST_FILES}
    assert {"support.py", "conftest.py", "integration/test_test_hygiene.py"} <= names
    assert any(n.startswith("unit/") for n in names) and any(n.startswith("e2e/") for n in names)


# --------------------------------------------------------------------------- the scan itself


@pytest.mark.parametrize("source", [
    'Path("/tmp/sp-run1/run.json").read_text()',
    'REAL_RUN = Path("/tmp/sp-run1/run.json")',
    'RUN = "/home/me/run.json"\nload_result(RUN)',
    'open("/root/.cache/x")',
    'load_run(f"/var/tmp/{name}.json")',
    'Path("/tmp") / "x.json"',
    'x = Path("~/runs/run.json")',
    'Path.home() / ".specperf"',
    'os.path.expanduser("~/x")',
    'import tempfile',
    'from tempfile import TemporaryDirectory',
])
def test_scan_finds_a_read_outside_the_repository(source: str) -> None:
    assert scan(source), source


@pytest.mark.parametrize("source", [
    'Path(f"/proc/{pid}/stat").read_text()',
    'env = {"PATH": "/usr/bin:/bin"}',
    'run_dir = "/runs/x"',  # a label in a run file, never opened
    'requests.get("/v1/completions")',
    'Path(tmp_path / "x").read_text()',
    'load_run("run-cpu-tiny.json")',
    'REPO_ROOT / "tests" / "data"',
])
def test_scan_leaves_the_repository_tmp_path_and_the_allow_list_alone(source: str) -> None:
    assert scan(source) == [], source


@pytest.mark.parametrize(("source", "bad"), [
    ('pytest.skip("no chromium")', True),
    ('pytest.skip(unchecked("the browser view", "apt-get install -y chromium"))', False),
    ('@pytest.mark.skipif(x, reason="reads /proc")\ndef test_a(): pass', True),
    ('@pytest.mark.skipif(x, reason=unchecked("/proc", "run on Linux"))\ndef test_a(): pass',
     False),
    ('pytest.importorskip("torch")', True),
    ('need_module("torch")', False),
    ('pytest.importorskip("torch", reason=unchecked("torch", "pip install torch"))', False),
])
def test_scan_wants_every_skip_to_name_its_remedy(source: str, bad: bool) -> None:
    assert bool(scan(source)) is bad, source


def test_allow_list_says_why() -> None:
    assert all(len(reason) > 20 for reason in ALLOWED_PREFIXES.values())


# --------------------------------------------------------------------------- the parallel phase


def test_e2e_tests_beside_others_run_their_perf_runs_without_the_contention_guard() -> None:
    """`nox -s tests` runs the e2e tests not marked `alone` on parallel workers: a perf run
    there must not wait for its neighbour's load and then set its timings aside as busy
    (tests/README.md, "Running"); those marked `alone` run one at a time."""
    import re

    guard_off = re.compile(r'"--perf-max-outside-cores",\s*"0"|max_outside_cores=0')
    # Runs started through e2e/perf_process.py (run_perf, the fault battery) get it there.
    assert guard_off.search((TESTS_DIR / "e2e" / "perf_process.py").read_text(encoding="utf-8"))
    offenders = []
    for path in sorted((TESTS_DIR / "e2e").glob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        if "pytest.mark.alone" in text:
            continue
        runs_perf = any(k in text for k in ('"perf_tests"', "TrialRunner(", "ws.run("))
        if runs_perf and not guard_off.search(text) and "run_perf(" not in text:
            offenders.append(path.name)
    assert not offenders, offenders


def test_every_e2e_file_has_its_place_in_the_run_order() -> None:
    """tests/conftest.py runs the e2e files first, longest first (the parallel phase's
    balance); a new one is placed there deliberately, by its time in CI's --durations."""
    from tests.conftest import E2E_LONGEST_FIRST

    on_disk = {p.name for p in (TESTS_DIR / "e2e").glob("test_*.py")}
    assert sorted(E2E_LONGEST_FIRST) == sorted(on_disk)

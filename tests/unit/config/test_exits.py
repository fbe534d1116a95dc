"""The one exit table: each number one meaning, the docs' table the same as the code's,
the legacy numbers only where they differ."""

from __future__ import annotations

import re

from specperf.config.exits import LEGACY_CLI, LEGACY_PYTEST, Exit, legacy, meaning
from tests.support import REPO_ROOT

DOC = REPO_ROOT / "docs" / "how-a-run-works.md"


def _doc_rows() -> list[tuple[int, str, str]]:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("### Exit statuses"):]
    return [(int(n), name, what) for n, name, what in
            re.findall(r"^\| (\d+) \| `(\w+)` \| (.+) \|$", section, flags=re.M)]


def test_the_docs_table_is_the_code_table() -> None:
    assert _doc_rows() == [(int(e), e.name, meaning(e)) for e in Exit]


def test_each_number_means_one_thing() -> None:
    assert len({int(e) for e in Exit}) == len(Exit)
    assert all(meaning(e) for e in Exit)


def test_legacy_numbers_only_when_asked() -> None:
    for code in Exit:
        assert legacy(code, pytest=False, enabled=False) == code
        assert legacy(code, pytest=True, enabled=False) == code
    assert legacy(Exit.FETCH_FAILED, pytest=False, enabled=True) == 1
    assert legacy(Exit.PROMOTE_REFUSED, pytest=False, enabled=True) == 3
    assert legacy(Exit.BAD_INPUT, pytest=True, enabled=True) == 4
    assert legacy(Exit.INTERRUPTED, pytest=True, enabled=True) == 2
    assert legacy(99, pytest=False, enabled=True) == 99  # not ours: passed through
    # The numbers the nightly scripts read did not move.
    assert not {Exit.OK, Exit.FAILED, Exit.INCONCLUSIVE, Exit.BUSY} & (
        set(LEGACY_CLI) | set(LEGACY_PYTEST))

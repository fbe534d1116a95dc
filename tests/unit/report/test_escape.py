"""specperf.report.escape: hostile text from a run file shows as text and does nothing —
no mention, no issue link, no markup or HTML, no new line, no workflow command."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specperf.report.escape import ZWJ, md_code, md_escape, neutralise_commands

# GitHub's mention and reference patterns, as they match in rendered text: a name right
# after '@', a number right after '#' or 'GH-'.
MENTION = re.compile(r"(?<![\w`])@[A-Za-z0-9]")
REF = re.compile(r"(?<![\w&])#\d|\bGH-\d", re.IGNORECASE)
# A markup character with no backslash before it (an odd run of backslashes escapes).
UNESCAPED = re.compile(r"(?<!\\)(?:\\\\)*[`*_\[\]<>|~$&!]")


@pytest.mark.parametrize(("hostile", "expected"), [
    ("@octocat look", f"@{ZWJ}octocat look"),
    ("cc @org/team", f"cc @{ZWJ}org/team"),
    ("fixes #123", f"fixes #{ZWJ}123"),
    ("see GH-7 and gh-8", f"see GH{ZWJ}-7 and gh{ZWJ}-8"),
    ("owner/repo#9", f"owner/repo#{ZWJ}9"),
    ("::add-mask::secret", r"\:\:add-mask\:\:secret"),
    ("  ::stop-commands::tok", r"  \:\:stop-commands\:\:tok"),
    ("<img src=x onerror=alert(1)>", r"\<img src=x onerror=alert(1)\>"),
    ("[click](https://evil.example)", r"\[click\](https://evil.example)"),
    ("&#64;octocat", f"\\&#{ZWJ}64;octocat"),
    ("a | b", r"a \| b"),
    ("**bold** _em_ `code` ~~x~~ $x$", r"\*\*bold\*\* \_em\_ \`code\` \~\~x\~\~ \$x\$"),
    ("line\n::error::forged", r"line \:\:error\:\:forged"),
    ("one\r\ntwo\u2028three\u2029four\x85five\vsix\fseven", "one two three four five six seven"),
    ("# Heading", r"\# Heading"),
    ("- item", r"\- item"),
    ("12. item", r"12\. item"),
    ("===", r"\==="),
    ("bell\x07null\x00", "bellnull"),
    # Ordinary text keeps its look: numbers, ranges, signs, a single colon.
    ("-3.2 %", "-3.2 %"),
    ("30.00", "30.00"),
    ("TPOT: 12 ms", "TPOT: 12 ms"),
])
def test_hostile_text(hostile: str, expected: str) -> None:
    assert md_escape(hostile) == expected


@given(st.text(alphabet=st.sampled_from(list("@#:GH-ab1 \n\r<>|*_[]`&!$~\\\u2028.=+"))
               | st.characters(), max_size=80))
def test_no_mention_ref_break_or_command_survives(text: str) -> None:
    out = md_escape(text)
    assert not any(ch in out for ch in "\r\n\v\f\x85\u2028\u2029")
    assert not MENTION.search(out)
    assert not REF.search(out)
    assert "::" not in out.replace("\\:", "")
    assert not UNESCAPED.search(out)
    # Nothing but escapes and joiners is added: take them out and the text is back
    # (line breaks as spaces, control characters dropped).
    plain = out.replace(ZWJ, "")
    plain = re.sub(r"\\(.)", r"\1", plain)
    folded = re.sub(r"[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]", " ",
                    text.replace("\r\n", "\n").replace(ZWJ, ""))
    folded = "".join(ch for ch in folded if ch == "\t" or not (ord(ch) < 32 or ord(ch) == 127))
    assert plain == folded


def test_a_document_has_no_workflow_command_line() -> None:
    doc = "### title\n::warning::forged\n  ::add-mask::x\nkept :: inside\n"
    assert neutralise_commands(doc) == ("### title\n\\:\\:warning::forged\n"
                                        "  \\:\\:add-mask::x\nkept :: inside\n")


@pytest.mark.parametrize(("text", "expected"), [
    ("runs/2026-01-01/run.json", "`runs/2026-01-01/run.json`"),
    ("a`b", "``a`b``"),
    ("`x`", "`` `x` ``"),
    ("x\n::error::y", "`x ::error::y`"),
])
def test_a_code_span_shows_the_text_and_cannot_be_left(text: str, expected: str) -> None:
    assert md_code(text) == expected


@given(st.text(max_size=40))
def test_a_code_span_is_one_line_and_fenced_longer_than_any_backtick_run(text: str) -> None:
    out = md_code(text)
    fence = len(out) - len(out.lstrip("`"))
    inner = out[fence:len(out) - fence]
    assert out.endswith("`" * fence) and "\n" not in out and "\r" not in out
    assert all(len(run) < fence for run in re.findall(r"`+", inner))

"""Text from a run file, a profile or a server log made harmless in the markdown specperf
writes (the job summary, issues, a promote pull request's body and commit message,
scenario tables): it shows as the text it is and does nothing else.

What it would otherwise do on GitHub:

* markup and HTML (``*``, ``[link](…)``, ``<img onerror=…>``, ``&#64;``): backslash-escaped;
* ``@name`` / ``@org/team``: notify people — a zero-width joiner after the ``@`` breaks
  the mention and looks the same;
* ``#123``, ``GH-123``, ``owner/repo#123``: link to (and mention, in the target's
  timeline) an issue or pull request — the same joiner after the ``#`` / ``GH``;
* a line break: would end a table row or start a block — folded into a space (every
  Unicode line separator, not only ``\\n``), so the text stays on its line;
* a line starting with ``::`` printed to a job's log is a workflow command
  (``::add-mask::``, ``::stop-commands::``): every ``::`` becomes ``\\:\\:``, which
  renders as ``::``;
* a block marker at its start (``#`` heading, ``-``/``+`` list, ``1.`` list, ``=``
  underline): escaped, for text that begins a line.
"""

from __future__ import annotations

import re

__all__ = ["ZWJ", "md_code", "md_escape", "neutralise_commands", "terminal_text", "title_text"]

#: U+200D ZERO WIDTH JOINER: invisible, and not a character of a user or issue name.
ZWJ = "\u200d"

# Every ASCII punctuation character CommonMark lets a backslash escape and that means
# something inline here; '$' is GitHub's inline maths, '&' starts an entity.
_ESCAPED = "\\`*_[]<>|~$&!"
_LINE_BREAKS = "\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_TABLE = str.maketrans({**{ch: "\\" + ch for ch in _ESCAPED},
                        **{ch: " " for ch in _LINE_BREAKS},
                        **{chr(c): "" for c in range(32) if chr(c) not in _LINE_BREAKS + "\t"},
                        "\x7f": ""})
_FOLD = str.maketrans({**{ch: " " for ch in _LINE_BREAKS},
                       **{chr(c): "" for c in range(32) if chr(c) not in _LINE_BREAKS + "\t"},
                       "\x7f": ""})
_MENTION = re.compile(r"@")
_REF = re.compile(r"#(?=\d)|(?<![A-Za-z0-9])(GH)(?=-\d)", re.IGNORECASE)
# Only what starts a block: a marker followed by a blank or the end ("-3.2 %" and "30.00"
# are no list).
_BLOCK_MARK = re.compile(r"^(\s*)(#+|[+-]|=+)(?=\s|$)")
_LIST_NUMBER = re.compile(r"^(\s*\d+)([.)])(?=\s|$)")


def md_escape(text: object) -> str:
    """``text`` for a GFM table cell, a paragraph or a list item: see the module's
    docstring for what is neutralised and how."""
    out = str(text).replace("\r\n", "\n").translate(_TABLE)
    out = _MENTION.sub("@" + ZWJ, out)
    out = _REF.sub(lambda m: (m.group(1) or "#") + ZWJ, out)
    out = out.replace("::", "\\:\\:")
    out = _BLOCK_MARK.sub(lambda m: m.group(1) + "\\" + m.group(2), out)
    return _LIST_NUMBER.sub(lambda m: m.group(1) + "\\" + m.group(2), out)


def title_text(text: object, limit: int) -> str:
    """``text`` for an issue or pull request title, which GitHub shows as text but still
    links ``#123`` and ``@name`` in: on one line (control characters dropped, line breaks
    folded), mentions and references broken as :func:`md_escape` breaks them, at most
    ``limit`` characters."""
    out = str(text).replace("\r\n", "\n").translate(_FOLD)
    out = _MENTION.sub("@" + ZWJ, out)
    out = _REF.sub(lambda m: (m.group(1) or "#") + ZWJ, out)
    return out if len(out) <= limit else out[:limit - 1] + "…"


_BACKTICKS = re.compile(r"`+")


def md_code(text: object) -> str:
    """``text`` as an inline code span (a path, a case id): shown verbatim — in a code
    span nothing is a mention, a reference, markup or HTML — fenced by more backticks than
    any run of them inside, on one line."""
    body = str(text).replace("\r\n", "\n").translate(_FOLD)
    fence = "`" * (1 + max((len(m) for m in _BACKTICKS.findall(body)), default=0))
    pad = " " if body.startswith("`") or body.endswith("`") or not body.strip() else ""
    return f"{fence}{pad}{body}{pad}{fence}"


_COMMAND_LINE = re.compile(r"^(\s*)::", re.MULTILINE)


def neutralise_commands(document: str) -> str:
    """A whole document with no line that a runner would take for a workflow command:
    a ``::`` starting a line (after blanks) is escaped. For what specperf prints or
    writes whole (a promote body, a commit message) on top of :func:`md_escape`."""
    return _COMMAND_LINE.sub(lambda m: m.group(1) + "\\:\\:", document)


#: Every C0 and C1 control character but newline and tab, and DEL: what a terminal acts on
#: (ESC starts a sequence that sets the window title, clears the screen, moves the cursor;
#: BEL ends an OSC; CSI U+009B is ESC [ in one; a carriage return overprints a line).
_TERMINAL = str.maketrans({c: f"\\x{c:02x}" for c in (*range(0x20), 0x7f, *range(0x80, 0xa0))
                           if chr(c) not in "\n\t"})


def terminal_text(text: str) -> str:
    """``text`` for a terminal or a CI log: every control character but newline and tab
    shown as its ``\\xNN`` escape, so it is seen, never acted on. The console renderer
    (specperf.report.console) passes all it prints through this."""
    return text.translate(_TERMINAL)


"""Result files on disk: read a run or a baseline with errors that name the file, the
field and the fix; write any file atomically (temp file in the same directory, fsync,
rename), so an interrupted run never leaves half a file.

Everything a file can be instead of a specperf file ends in :class:`BaselineError`, never
another exception: unreadable, not UTF-8 (a binary file), not JSON, JSON nested deeper
than the reader recurses, a number too long to read, a ``schema_version`` this specperf
does not read (newer: upgrade; older: re-record), or a field out of its bounds
(specperf.schemas). The bad-input table is docs/bad-input.md.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, Field, RootModel, ValidationError

from specperf.config.boundaries import SLUG, SLUG_MAX
from specperf.schemas import MIN_SCHEMA_VERSION, SCHEMA_VERSION, Baseline, RunResult


class BaselineError(ValueError):
    """A baseline file that cannot be used; the message names the file and the field."""


def _describe(err: ValidationError, path: Path, what: str) -> str:
    lines = [f"{path}: not a valid {what} file ({err.error_count()} problem(s))"]
    for e in err.errors()[:10]:
        where = ".".join(str(x) for x in e["loc"]) or "(top level)"
        got = e.get("input")
        shown = f" (got {got!r})" if isinstance(got, (int, float, str)) and len(repr(got)) < 40 else ""
        lines.append(f"  field `{where}`: {e['msg']}{shown}")
    lines.append(
        "  fix: restore it from version control (git checkout -- FILE) or record a new one "
        "with --perf-update-baselines"
    )
    return "\n".join(lines)


def _decode(raw: bytes, path: Path) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BaselineError(
            f"{path}: not UTF-8 text (byte {exc.start} is {raw[exc.start:exc.start + 1]!r}) — "
            "a binary or corrupted file, not a specperf run or baseline; give the run.json or "
            "baseline file, or restore it from version control"
        ) from None


def _parse(text: str, path: Path) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}) — "
            "the file is truncated or hand-edited; restore it from version control"
        ) from None
    except RecursionError:
        raise BaselineError(
            f"{path}: JSON nested deeper than the reader allows — not a specperf run or "
            "baseline (those nest a few levels); give the run.json or baseline file"
        ) from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise BaselineError(
            f"{path}: unreadable JSON value ({exc}) — the file is corrupted or hand-edited; "
            "restore it from version control"
        ) from None


def check_schema_version(data: Any, path: Path) -> None:
    """Refuse a file of a schema this specperf does not read, before its fields are: a
    newer file's fields may differ, and "unknown field" would hide the real fix."""
    if not isinstance(data, dict) or "schema_version" not in data:
        return  # the model reports a missing or misplaced field by name
    v = data["schema_version"]
    if isinstance(v, bool) or not isinstance(v, int):
        raise BaselineError(
            f"{path}: field `schema_version` is {v!r}, not an integer — the file is hand-edited "
            f"or not a specperf file; specperf {SCHEMA_VERSION} writes {SCHEMA_VERSION}")
    if v > SCHEMA_VERSION:
        raise BaselineError(
            f"{path}: field `schema_version` is {v}: written by a newer specperf (this one reads "
            f"{MIN_SCHEMA_VERSION}..{SCHEMA_VERSION}): upgrade specperf (pip install -U specperf)")
    if v < MIN_SCHEMA_VERSION:
        writer = (data.get("provenance") or {}).get("specperf_version") if isinstance(
            data.get("provenance"), dict) else None
        raise BaselineError(
            f"{path}: field `schema_version` is {v}, older than any this specperf reads "
            f"({MIN_SCHEMA_VERSION}..{SCHEMA_VERSION}); there is no migration from it — "
            "record the baseline again with `pytest <profile> --perf-update-baselines`, or read "
            "it with the specperf that wrote it"
            + (f" (pip install 'specperf=={writer}')" if isinstance(writer, str) else ""))


def one_line(message: str) -> str:
    """A multi-line BaselineError as one line: the file, the first field, the fix."""
    # A run-or-baseline file is validated as a tagged union; drop the tag from field paths.
    message = re.sub(r"`specperf-(?:run|baseline)\.", "`", str(message))
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else str(message)
    fields = [ln for ln in lines[1:] if ln.startswith("field")]
    fixes = [ln for ln in lines[1:] if ln.startswith("fix")]
    out = lines[0]
    if fields:
        out += f": {fields[0]}"
        if len(fields) > 1:
            out += f" (and {len(fields) - 1} more)"
    if fixes:
        out += f"; {fixes[0]}"
    return out


#: The provenance fields that become part of a path, and which: the baseline's directory
#: and file (``baselines/<profile_name>/<hardware_id>.json``) and its history entries
#: (``history/<hardware_id>/<date>-<git_commit>.json``).
PATH_FIELDS = {
    "profile_name": "the baseline's directory, baselines/<profile>/",
    "hardware_id": "the baseline's file name, <hardware-id>.json",
    "git_commit": "its history entries' names, <date>-<commit>.json",
}


def safe_name(value: str, *, source: Path | str, field: str, becomes: str) -> str:
    """``value`` when it can be one component of a file name (a slug, as profile names
    are: lower-case letters, digits, ``.``, ``_``, ``-``, starting with a letter or
    digit); else :class:`BaselineError` naming ``source``, the field and the fix. A
    string read from a file never walks out of the directory it names a file in
    (``/../../../`` as a commit would write ``baselines/<profile>/.json``)."""
    if len(value) <= SLUG_MAX and SLUG.match(value):
        return value
    shown = value if len(value) <= 60 else value[:57] + "..."
    raise BaselineError(
        f"{source}: field `{field}` is {shown!r}, which cannot name a file ({becomes}) — "
        "not a file specperf wrote: it writes lower-case letters, digits, '.', '_' and '-', "
        f"starting with a letter or digit, at most {SLUG_MAX} characters; restore the file "
        "from version control (git checkout -- FILE)")


def _check_path_fields(result: BaseModel, path: Path) -> None:
    """Every provenance string that becomes part of a path, checked on reading (every run
    and baseline file is read here before it is compared, pooled, merged or promoted)."""
    provenance = getattr(getattr(result, "root", result), "provenance", None)
    for name, becomes in PATH_FIELDS.items():
        value = getattr(provenance, name, None)
        if isinstance(value, str):
            safe_name(value, source=path, field=f"provenance.{name}", becomes=becomes)


def read_model(path: Path, model: type[BaseModel], what: str) -> BaseModel:
    """Read a JSON file into a model; errors name the file and the field."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    data = _parse(_decode(raw, path), path)
    check_schema_version(data, path)
    try:
        result = model.model_validate(data)
    except ValidationError as exc:
        raise BaselineError(_describe(exc, path, what)) from None
    except RecursionError:  # nesting json.loads took but validation did not
        raise BaselineError(
            f"{path}: JSON nested deeper than the reader allows — not a specperf {what} file"
        ) from None
    _check_path_fields(result, path)
    return result


def _read_umask() -> int:
    # Read once at import (single-threaded then): os.umask can only be read by setting it.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file 0600; a baseline or report is shared (CI artifacts, the
        # team's checkout), so give it the mode a plain open() would: the file's current
        # mode when replacing one, else 0666 less the umask.
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError:
            mode = 0o666 & ~_UMASK
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if sys.platform != "win32":  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


class _AnyResult(RootModel[Annotated[RunResult | Baseline, Field(discriminator="kind")]]):
    pass


def load_result(path: Path | str) -> RunResult | Baseline:
    """Read a run or a baseline file, told apart by its ``kind`` field.

    Raises :class:`BaselineError` naming the file (and the line or the
    field) for an unreadable, truncated or invalid file.
    """
    result = read_model(Path(path), _AnyResult, "specperf run or baseline")
    assert isinstance(result, _AnyResult)
    return result.root

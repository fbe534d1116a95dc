"""Result files on disk: read a run or a baseline with errors that name the file, the
field and the fix; write any file atomically (temp file in the same directory, fsync,
rename), so an interrupted run never leaves half a file.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field, RootModel, ValidationError

from specperf.schemas import Baseline, RunResult


class BaselineError(ValueError):
    """A baseline file that cannot be used; the message names the file and the field."""


def _describe(err: ValidationError, path: Path, what: str) -> str:
    lines = [f"{path}: not a valid {what} file ({err.error_count()} problem(s))"]
    for e in err.errors()[:10]:
        where = ".".join(str(x) for x in e["loc"]) or "(top level)"
        lines.append(f"  field `{where}`: {e['msg']}")
    lines.append(
        "  fix: restore it from version control (git checkout -- FILE) or record a new one "
        "with --perf-update-baselines"
    )
    return "\n".join(lines)


def read_model(path: Path, model: type[BaseModel], what: str) -> BaseModel:
    """Read a JSON file into a model; errors name the file and the field."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read {what}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}) — "
            "the file is truncated or hand-edited; restore it from version control"
        ) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BaselineError(_describe(exc, path, what)) from None


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

"""Reading a profile file: finding it by name or path, reading its TOML, validating it,
and turning pydantic's errors into lines that name the file, the field and the fix."""

from __future__ import annotations

import sys
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from specperf.config.boundaries import SLUG
from specperf.config.profile import Profile, ProfileError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: Where `--perf-profile NAME` looks when NAME is not a path.
PROFILE_DIRS = (Path("perf_tests") / "profiles",)

_FIX_HINTS = {
    "extra_forbidden": "remove it or check its spelling; allowed here: {allowed}",
    "missing": "add it",
    "union_tag_invalid": "use kind = \"synthetic\" or kind = \"sharegpt\"",
}


def _field_path(loc: tuple[Any, ...], data: Any) -> str:
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(item, int):
            label = f"[{item}]"
            if isinstance(node, list) and item < len(node) and isinstance(node[item], dict):
                cid = node[item].get("id")
                if cid:
                    label = f"[{item}] (id {cid!r})"
            parts.append(label)
        else:
            parts.append(("." if parts else "") + str(item))
        node = node[item] if isinstance(node, (dict, list)) and _has(node, item) else None
    return "".join(parts) or "(top level)"


def _has(node: Any, key: Any) -> bool:
    if isinstance(node, dict):
        return key in node
    return isinstance(key, int) and key < len(node)


def _allowed_keys(loc: tuple[Any, ...]) -> str:
    model: Any = Profile
    keyed = False  # the next item is a key of a dict of models (compare.metrics.<key>)
    for item in loc[:-1]:
        if isinstance(item, int) or model is None:
            continue
        if keyed:
            keyed = False
            continue
        field = getattr(model, "model_fields", {}).get(item)
        if field is None:
            return "see the profile reference in docs/profiles.md"
        model = _model_of(field.annotation)
        keyed = typing.get_origin(field.annotation) is dict
    if model is None or not hasattr(model, "model_fields"):
        return "see the profile reference in docs/profiles.md"
    return ", ".join(model.model_fields)


def _model_of(annotation: Any) -> Any:
    for arg in (annotation, *typing.get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
        for inner in typing.get_args(arg):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner
    return None


def format_validation_error(path: Path, err: ValidationError, data: Any) -> str:
    lines = [f"{path}: invalid profile ({err.error_count()} problem(s))"]
    for e in err.errors():
        loc = tuple(e["loc"])
        where = _field_path(loc, data)
        hint = _FIX_HINTS.get(e["type"], "")
        if "{allowed}" in hint:
            hint = hint.format(allowed=_allowed_keys(loc))
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"  field `{where}`: {msg}" + (f" — fix: {hint}" if hint else ""))
    return "\n".join(lines)


#: A profile is a few kilobytes; anything this large is not one (and is not read whole).
MAX_PROFILE_BYTES = 1 << 20


def resolve_profile_path(name_or_path: str, rootdir: Path | None = None) -> Path:
    p = Path(name_or_path).expanduser()
    # A bare name is looked up in perf_tests/profiles; anything with a separator or a
    # .toml suffix is a path (so "../../x" never reaches outside the profiles directory).
    if p.suffix == ".toml" or p.exists() or p.is_symlink() or not SLUG.match(name_or_path):
        return _checked_file(p)
    roots = [rootdir or Path.cwd()]
    for root in roots:
        for d in PROFILE_DIRS:
            cand = root / d / f"{name_or_path}.toml"
            if cand.exists() or cand.is_symlink():
                return _checked_file(cand)
    known = sorted({q.stem for root in roots for d in PROFILE_DIRS for q in (root / d).glob("*.toml")})
    raise ProfileError(
        f"no profile named {name_or_path!r}; known: {', '.join(known) or '(none)'} "
        "— pass a name from perf_tests/profiles or a path to a .toml file"
    )


def _checked_file(p: Path) -> Path:
    """The path, if it is a readable regular file; else what is wrong with it."""
    try:
        p.resolve(strict=True)
    except (RuntimeError, OSError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        if p.is_symlink() and ("loop" in str(exc).lower() or getattr(exc, "errno", 0) == 40):
            raise ProfileError(f"{p}: a symlink loop, not a profile — fix: point the link "
                               "at a .toml file") from None
        if p.is_symlink():
            raise ProfileError(f"{p}: a symlink to a missing file "
                               f"({_readlink(p)}) — fix: point it at a .toml file") from None
        raise ProfileError(f"{p}: profile file not found") from None
    if p.is_dir():
        raise ProfileError(f"{p}: a directory, not a profile — fix: pass a .toml file")
    return p


def _readlink(p: Path) -> str:
    try:
        return str(p.readlink())
    except OSError:  # pragma: no cover - raced away
        return "?"


def _read_toml(path: Path) -> dict[str, Any]:
    """The parsed file; every way it can fail is a ProfileError naming it."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_PROFILE_BYTES + 1)
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_PROFILE_BYTES:
        raise ProfileError(f"{path}: larger than {MAX_PROFILE_BYTES // 1024} KiB — not a "
                           "profile (a profile is a few KB of TOML)")
    nul = raw.find(b"\0")
    if nul >= 0:
        raise ProfileError(f"{path}: a binary file (NUL byte at offset {nul}), "
                           "not a TOML profile — fix: pass the profile's .toml file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ProfileError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at line {line}) — fix: "
            "save the profile as UTF-8 (TOML files are UTF-8)") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ProfileError(f"{path}: nested too deeply to be a profile — fix: a profile's "
                           "tables and arrays nest a few levels at most") from None


def load_profile(name_or_path: str | Path, rootdir: Path | None = None) -> Profile:
    path = resolve_profile_path(str(name_or_path), rootdir)
    data = _read_toml(path)
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(format_validation_error(path, exc, data)) from None
    except RecursionError:
        raise ProfileError(f"{path}: nested too deeply to be a profile — fix: a profile's "
                           "tables and arrays nest a few levels at most") from None
    return profile.model_copy(update={"source": path.resolve()})

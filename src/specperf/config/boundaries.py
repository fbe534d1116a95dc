"""Checks of profile values that pydantic's types cannot say: names that become paths,
server arguments the suite owns, and speculative configs.

Pure Python, no vLLM: a profile validates where vLLM is not installed (a laptop, the
lint job). Where it is, specperf.engine.spec_validation also checks a speculative config
against vLLM's own SpeculativeConfig (its keys, types and method names).
"""

from __future__ import annotations

import re
from typing import Any

#: A name that becomes a directory or file name (profile name, server config id, tiny
#: model name): starts with a letter or digit, so never "." / ".." / "-flag", and no
#: separator, so it stays inside the directory it is joined to.
SLUG = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
SLUG_MAX = 100

#: serve_args the suite sets itself: every server binds 127.0.0.1 on a port the suite
#: picked and serves the profile's target. vLLM's parser takes the last value given and
#: accepts unambiguous prefixes (argparse's allow_abbrev) and `_` for `-`, so any
#: spelling of these is refused, not only the exact one. --uds would move the server off
#: TCP altogether.
SUITE_OWNED = ("--host", "--port", "--model", "--uds")

#: vLLM's speculative methods (vllm/config/speculative.py, SpeculativeMethod, in
#: vllm 0.32): the pure check knows these; with vLLM installed, vLLM's own list decides
#: (specperf.engine.spec_validation). Every "<model>_mtp" is a spelling of "mtp".
KNOWN_METHODS = frozenset({
    "ngram", "ngram_gpu", "suffix", "medusa", "mlp_speculator", "draft_model", "custom_class",
    "eagle", "eagle3", "extract_hidden_states", "mtp", "dflash", "dspark",
})
_MTP = re.compile(r"^[a-z0-9_]+_mtp$")
#: Methods whose drafts need no `model`: vLLM uses the target's own layers (mtp, dspark)
#: or no model at all. Any other method (and none: vLLM then assumes draft_model) fails
#: at server start with "num_speculative_tokens was provided but without speculative model".
MODEL_FREE = frozenset({"ngram", "ngram_gpu", "suffix", "extract_hidden_states", "mtp", "dspark"})
#: Methods that cannot take k from a draft model's config: k must be in the profile.
NEEDS_K = frozenset({"ngram", "ngram_gpu"})
#: Methods whose proposals vary in length from step to step (a lookup proposes what it
#: finds, up to k; nothing when nothing matches): their acceptance is judged by the mean
#: acceptance length and the distributions, not by per-position floors. Dynamic k
#: (`num_speculative_tokens_per_batch_size`) varies too: specperf.analysis.spec_counters
#: sees it in the counters (drafts shorter than k on average).
VARIABLE_LENGTH_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})


def check_slug(value: str, what: str) -> str:
    if len(value) > SLUG_MAX or not SLUG.match(value):
        shown = value if len(value) <= 60 else value[:57] + "..."
        raise ValueError(
            f"{shown!r} is not a usable {what}: it names files and test ids — fix: use "
            f"lower-case letters, digits, '.', '_' and '-', starting with a letter or digit, "
            f"at most {SLUG_MAX} characters")
    return value


def owned_option(arg: str) -> str | None:
    """The suite-owned option `arg` spells (``--host=0.0.0.0``, ``--po``), or None."""
    if not arg.startswith("--") or len(arg) < 3:
        return None
    name = arg.split("=", 1)[0].replace("_", "-")
    for opt in SUITE_OWNED:
        if opt.startswith(name):
            return opt
    return None


#: serve_args that would change what is measured, or how the suite talks to the server,
#: behind the profile's back (issue #54): (option, the shortest abbreviation argparse takes
#: for it alone among vLLM 0.32's api_server options, what it does, the fix). Found by
#: vLLM's own parser: vllm.entrypoints.launchers.cli_args.make_arg_parser; ``--config``
#: has none (``--conf`` is also --config-format's).
REFUSED_OPTIONS = (
    ("--api-key", "--api-k",
     "makes the server refuse the suite's requests, which carry no key (servers bind "
     "127.0.0.1 only)", "remove it"),
    ("--served-model-name", "--ser",
     "renames the model the suite's requests and its run file name by what it serves",
     "remove it; a server config's name in reports is its `label`"),
    ("--config", "--config",
     "reads server options from a file outside the profile, where neither its hash nor its "
     "checks (the options the suite owns, unpinned remote code) see them",
     "write the file's options in serve_args"),
    ("--speculative-config", "--specu",
     "is set by the suite from the server config's speculative_config, and vLLM takes the "
     "last one given: a second one would replace what the run records as measured",
     "write it as the server config's speculative_config (none: the no-spec config)"),
)
#: --speculative-config's short form, and "-s": argparse takes it as an abbreviation of it.
_SHORT_SPEC = ("-s", "-sc")


def refused_option(arg: str) -> tuple[str, str, str] | None:
    """(option, what it does, fix) of a REFUSED_OPTIONS option ``arg`` spells — ``_`` for
    ``-``, an abbreviation, ``=value``, a dotted ``--speculative-config.key`` — or None."""
    if arg.startswith("--"):
        name = arg.split("=", 1)[0].split(".", 1)[0].replace("_", "-")
        for opt, stem, why, fix in REFUSED_OPTIONS:
            if name.startswith(stem) and opt.startswith(name):
                return opt, why, fix
    elif arg.split("=", 1)[0] in _SHORT_SPEC or arg.startswith("-sc"):
        opt, _, why, fix = REFUSED_OPTIONS[-1]
        return opt, why, fix
    return None


def check_serve_args(args: list[str]) -> list[str]:
    for arg in args:
        opt = owned_option(arg)
        if opt is not None:
            raise ValueError(
                f"{arg!r}: {opt} is set by the suite (servers bind 127.0.0.1 on a port it "
                "picks, serving the profile's target and drafts) — fix: remove it; to test "
                "another model, change `target` or the speculative_config's `model`")
        refused = refused_option(arg)
        if refused is not None:
            opt, why, fix = refused
            raise ValueError(f"{arg!r}: {opt} {why} — fix: {fix}")
    return args


def method_known(method: str) -> bool:
    return method in KNOWN_METHODS or bool(_MTP.match(method))


def check_speculative_config(spec: dict[str, Any]) -> None:
    """k ≥ 1 and an integer, a known method, a model where the method needs one."""
    method = spec.get("method")
    if method is not None and (not isinstance(method, str) or not method_known(method)):
        raise ValueError(
            f"method {method!r} is not a speculative method vLLM knows — fix: use one of "
            f"{', '.join(sorted(KNOWN_METHODS))} (or <model>_mtp)")
    if "num_speculative_tokens" in spec:
        k = spec["num_speculative_tokens"]
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(
                f"num_speculative_tokens = {k!r}: the number of draft tokens per step — fix: "
                "an integer ≥ 1 (e.g. num_speculative_tokens = 3)")
    elif method in NEEDS_K:
        raise ValueError(
            f"method {method!r} needs num_speculative_tokens — fix: add it, e.g. "
            "num_speculative_tokens = 3")
    model = spec.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise ValueError(
            f"model = {model!r} — fix: the draft model's HF id, local path or 'tiny:NAME'")
    if model is None and (method or "draft_model") not in MODEL_FREE and not (
            isinstance(method, str) and _MTP.match(method)):
        raise ValueError(
            f"method {method or 'draft_model (the default)'!r} needs a draft `model` — fix: "
            "add model = \"<HF id or path>\" to the speculative_config, or use a method that "
            f"needs none ({', '.join(sorted(MODEL_FREE))})")

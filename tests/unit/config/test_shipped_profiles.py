"""Every shipped profile validates, collects the matrix it should, and speaks vLLM's
language: speculative_config keys are fields of the installed vLLM's SpeculativeConfig,
methods are among its methods, and serve_args flags are engine or frontend arguments.

The vLLM checks read the installed vLLM's source with `ast` instead of importing it
(an import costs ~20 s on a small CPU machine); they are skipped where vLLM is absent.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
from functools import cache
from pathlib import Path

import pytest

from specperf import plugin
from specperf.analysis.judge.kinds import CASE_KINDS
from specperf.config.profile import Profile
from specperf.config.profile_file import load_profile
from specperf.config.tiny_models import TINY_PREFIX
from specperf.config.workload import ShareGPTWorkload
from specperf.engine.kinds import kind_names
from tests.support import GOLDEN_DIR, INSTALL_VLLM, PERF_PYTEST, REPO_ROOT, unchecked

ROOT = REPO_ROOT
PROFILE_DIR = ROOT / "perf_tests" / "profiles"
PROFILES = sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))
GPU_PROFILES = [n for n in PROFILES if not n.startswith("cpu-")]

#: Collected perf test items of the GPU profiles, counted by hand from the TOML files
#: (configs × concurrencies for `requests`, spec configs × concurrencies for
#: `acceptance`, spec configs × concurrencies ≤ max_concurrency for `tpot_gain`, and
#: configs × concurrencies again for each of `latency` and `throughput`: every case is
#: judged against the baseline), then per workload scenario kind (`prefix_cache`,
#: `context_length`, `categories`) its spec configs when the profile has the scenario, else
#: one skipped `no-cases` item. A change here is a change of what the nightly run
#: measures: update the number on purpose.
EXPECTED_ITEMS = {
    # Each ends + 2: the soak and the ramp (one item each, or one skipped no-cases item);
    # before that, context_length and categories (spec configs each on the h100-* profiles,
    # else one no-cases item each).
    # 11 configs × 7 c; 10 spec × 7; 10 spec × 5 (c ≤ 16); 2 × 11 × 7; no prefix_cache
    "a100-qwen3-32b": 77 + 70 + 50 + 154 + 1 + 2 + 2,
    # 3 × 3; 2 × 3; 2 × 1 (c = 1); 2 × 3 × 3; no prefix_cache
    "l40s-qwen3-1.7b": 9 + 6 + 2 + 18 + 1 + 2 + 2,
    # 3 × 4; 2 × 4; 2 × 3 (c ≤ 16); 2 × 3 × 4; no prefix_cache
    "h100x4-llama-70b": 12 + 8 + 6 + 24 + 1 + 2 + 2,
    # 4 × 3; 3 × 3; 3 × 2 (c ≤ 8); 2 × 4 × 3; prefix_cache: 3 spec; 3 + 3 segmented
    "h100-llama3.1-8b-eagle3": 12 + 9 + 6 + 24 + 3 + 6 + 2,
    "h100-gpt-oss-120b-eagle3": 12 + 9 + 6 + 24 + 1 + 6 + 2,
    # 3 × 3; 2 × 3; 2 × 2 (c ≤ 8); 2 × 3 × 3; prefix_cache: 2 spec; 2 + 2 segmented
    "h100-qwen3-8b-eagle3": 9 + 6 + 4 + 18 + 2 + 4 + 2,
    "h100-mimo-7b-mtp": 9 + 6 + 4 + 18 + 1 + 4 + 2,
    # 3 × 3; 2 × 3; 2 × 2 (c ≤ 16); 2 × 3 × 3; no prefix_cache
    "h200x8-deepseek-r1-mtp": 9 + 6 + 4 + 18 + 1 + 2 + 2,
}


def _expected_items(profile: Profile) -> int:
    """The same count, derived from the profile with the documented case rules."""
    per_kind = dict.fromkeys((k.name for k in CASE_KINDS), 0)
    for cfg in profile.server_configs:
        g = profile.gates_for(cfg)
        for c in profile.concurrencies:
            per_kind["requests"] += 1
            per_kind["acceptance"] += cfg.is_spec and g.acceptance is not None
            per_kind["tpot_gain"] += (cfg.is_spec and g.tpot_gain is not None
                                      and c <= g.tpot_gain.max_concurrency)
            per_kind["latency"] += 1
            per_kind["throughput"] += 1
    # A kind without a case is one skipped `[no-cases]` item.
    n = sum(k or 1 for k in per_kind.values())
    # A scenario kind the profile has no table for is one skipped `[no-cases]` item.
    spec = [c for c in profile.server_configs if c.is_spec]
    sc = profile.scenarios
    n += len(spec) if sc.prefix_cache is not None else 1
    n += len(spec) if sc.context_length is not None else 1
    n += len(spec) if sc.categories is not None else 1
    n += len(sc.soak) or 1
    n += len(sc.ramp) or 1
    return n


@pytest.mark.parametrize("name", PROFILES)
def test_profile_validates(name: str) -> None:
    p = load_profile(name, rootdir=ROOT)
    assert p.name == name, f"{p.source}: field `name` should match the file name {name!r}"
    assert p.nospec is not None, f"{p.source}: a profile needs a no-spec config to compare with"


def test_expected_counts_cover_every_gpu_profile() -> None:
    missing = sorted(set(GPU_PROFILES) - set(EXPECTED_ITEMS))
    assert not missing, f"add the expected item counts of {missing} to EXPECTED_ITEMS"


@pytest.mark.parametrize("name", PROFILES)
def test_profile_collects_its_matrix(name: str) -> None:
    profile = load_profile(name, rootdir=ROOT)
    want = _expected_items(profile)
    if name in EXPECTED_ITEMS:
        assert want == EXPECTED_ITEMS[name], (
            f"{name}: the profile now yields {want} perf test items, "
            f"EXPECTED_ITEMS says {EXPECTED_ITEMS[name]}"
        )
    # What `pytest perf_tests --co` lists for it: the golden node ids, which
    # tests/integration/test_golden_outputs.py collects for real and compares (one
    # collection per profile in the suite, not two: each is a pytest start of ~5 s).
    ids = (GOLDEN_DIR / f"collect-{name}.txt").read_text(encoding="utf-8").splitlines()
    assert len(ids) == want, f"{name}: collects {len(ids)} items, expected {want}\n{ids}"
    assert len(set(ids)) == len(ids)
    # Every case id is a config × concurrency of the profile.
    cases = {f"{c.id}-c{n}" for c in profile.server_configs for n in profile.concurrencies}
    cases.add("no-cases")  # a scenario the profile does not have: one skipped item
    sc = profile.scenarios
    for segmented in (sc.prefix_cache, sc.context_length, sc.categories):
        if segmented is not None:
            cases |= {f"{c.id}-c{segmented.concurrency}" for c in profile.server_configs}
    cases |= {f"{s.config}-c{s.concurrency}" for s in sc.soak}
    cases |= {f"{r.config}-c1" for r in sc.ramp}
    for line in ids:
        case = line.rsplit("[", 1)[1].rstrip("]")
        assert case in cases, line


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_gpu_profiles_use_real_models_and_the_fetched_dataset(name: str) -> None:
    p = load_profile(name, rootdir=ROOT)
    assert p.tiny is None and not p.target.startswith(TINY_PREFIX)
    assert all(not (c.draft_model or "").startswith(TINY_PREFIX) for c in p.server_configs)
    assert isinstance(p.workload, ShareGPTWorkload)
    path = p.dataset_path()
    assert path is not None
    # Where `specperf fetch-sharegpt datasets` puts it.
    assert path.resolve() == (ROOT / "datasets" / "ShareGPT_V3_unfiltered_cleaned_split.json")
    categories = p.scenarios.categories
    if categories is not None:
        # Where `specperf fetch-specbench datasets` puts Spec-Bench's question file.
        assert (p.source.parent / categories.dataset).resolve() == (
            ROOT / "datasets" / "spec_bench_question.jsonl")
    if name.startswith("h100-"):
        # Issue #16: every single-H100 profile carries both segmented scenarios, the
        # context buckets up to ~32k tokens on servers whose --max-model-len holds them.
        ctx = p.scenarios.context_length
        assert ctx is not None and categories is not None and ctx.text == "workload"
        longest = max(b.prompt_words for b in ctx.buckets)
        max_len = int(ctx.serve_args[ctx.serve_args.index("--max-model-len") + 1])
        assert 20_000 <= longest and longest * 1.5 + (ctx.max_tokens or 0) <= max_len
    assert p.sampling.temperature == 0.0, "acceptance is only repeatable at temperature 0"
    for c in p.server_configs:
        if c.is_spec:
            assert c.num_speculative_tokens, f"{name}: {c.id} needs num_speculative_tokens"


def test_h100x4_profile_is_multi_gpu() -> None:
    p = load_profile("h100x4-llama-70b", rootdir=ROOT)
    args = p.serve_args
    assert args[args.index("--tensor-parallel-size") + 1] == "4"
    assert p.target == "meta-llama/Llama-3.3-70B-Instruct"
    drafts = {c.id: c.speculative_config for c in p.server_configs if c.is_spec}
    assert drafts["llama-3.2-1b-k4"] == {
        "method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct",
        "num_speculative_tokens": 4, "draft_tensor_parallel_size": 1,
    }
    for spec in drafts.values():
        # vLLM: the draft TP is 1 or the target's.
        assert spec["draft_tensor_parallel_size"] in (1, 4)


def test_l40s_profile_is_small() -> None:
    p = load_profile("l40s-qwen3-1.7b", rootdir=ROOT)
    assert p.target == "Qwen/Qwen3-1.7B"
    assert p.concurrencies == [1, 8, 32]
    ks = sorted(c.num_speculative_tokens or 0 for c in p.server_configs if c.is_spec)
    assert ks == [2, 3]
    assert {c.draft_model for c in p.server_configs if c.is_spec} == {"Qwen/Qwen3-0.6B"}
    assert "--tensor-parallel-size" not in p.serve_args


# --- against the installed vLLM's source ------------------------------------------------


def _vllm_dir() -> Path:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(unchecked("the profiles against the installed vLLM's options "
                              "(vLLM is not installed)", INSTALL_VLLM))
    return Path(next(iter(spec.submodule_search_locations)))


@cache
def _module(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _class_fields(tree: ast.Module, name: str) -> set[str] | None:
    """Annotated class attributes (the fields of a dataclass), ClassVars excluded."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            out = set()
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    if "ClassVar" in ast.unparse(stmt.annotation):
                        continue
                    out.add(stmt.target.id)
            return out
    return None


def _literal_strings(tree: ast.Module, alias: str) -> set[str] | None:
    """The strings of a module-level `Name = Literal[...]` alias, following aliases of
    the same module; None if any part cannot be resolved here."""
    assigns = {
        n.targets[0].id: n.value for n in tree.body
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
    }

    def resolve(node: ast.expr) -> set[str] | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, ast.Name):
            return resolve(assigns[node.id]) if node.id in assigns else None
        if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("Literal"):
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            out: set[str] = set()
            for e in elts:
                got = resolve(e)
                if got is None:
                    return None
                out |= got
            return out
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            left, right = resolve(node.left), resolve(node.right)
            return None if left is None or right is None else left | right
        return None

    return resolve(assigns[alias]) if alias in assigns else None


def _spec_config_source() -> ast.Module:
    path = _vllm_dir() / "config" / "speculative.py"
    if not path.exists():
        pytest.fail(f"{path} not found: where does this vLLM define SpeculativeConfig?")
    return _module(path)


@pytest.mark.parametrize("name", PROFILES)
def test_speculative_config_keys_exist_in_vllm(name: str) -> None:
    tree = _spec_config_source()
    fields = _class_fields(tree, "SpeculativeConfig")
    assert fields and "num_speculative_tokens" in fields, "SpeculativeConfig not parsed"
    methods = _literal_strings(tree, "SpeculativeMethod")
    p = load_profile(name, rootdir=ROOT)
    for c in p.server_configs:
        for key in c.speculative_config or {}:
            assert key in fields, (
                f"{p.source}: server config {c.id!r}: speculative_config key {key!r} is not a "
                f"field of the installed vLLM's SpeculativeConfig; known: {sorted(fields)}"
            )
        method = (c.speculative_config or {}).get("method")
        if method is not None and methods is not None:
            assert method in methods, (
                f"{p.source}: server config {c.id!r}: method {method!r} is not one of vLLM's "
                f"{sorted(methods)}"
            )


def _serve_arg_fields() -> set[str]:
    root = _vllm_dir()
    fields: set[str] = set()
    arg_utils = root / "engine" / "arg_utils.py"
    for cls in ("EngineArgs", "AsyncEngineArgs"):
        fields |= _class_fields(_module(arg_utils), cls) or set()
    for path in sorted(root.glob("entrypoints/**/cli_args.py")):
        for cls in ("BaseFrontendArgs", "FrontendArgs"):
            fields |= _class_fields(_module(path), cls) or set()
    return fields


@pytest.mark.parametrize("name", PROFILES)
def test_serve_args_are_vllm_arguments(name: str) -> None:
    fields = _serve_arg_fields()
    assert "max_model_len" in fields, "EngineArgs not parsed"
    p = load_profile(name, rootdir=ROOT)
    for owner, args in [("serve_args", p.serve_args)] + [
        (f"server config {c.id!r} serve_args", c.serve_args) for c in p.server_configs
    ]:
        for a in args:
            if not a.startswith("--"):
                continue
            flag = a[2:].split("=", 1)[0].replace("-", "_")
            ok = flag in fields or (flag.startswith("no_") and flag[3:] in fields)
            assert ok, f"{p.source}: {owner}: {a} is not a vLLM engine or frontend argument"


def test_kinds_are_what_the_counts_assume() -> None:
    assert kind_names() == ("requests", "acceptance", "tpot_gain", "latency", "throughput",
                            "prefix_cache", "context_length", "categories", "soak", "ramp")


# --- sharding (what the nightly workflow's matrix relies on) ----------------------------


@pytest.mark.parametrize("name", PROFILES)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_shards_partition_the_server_configs(name: str, n: int) -> None:
    from types import SimpleNamespace

    ps = SimpleNamespace(profile=load_profile(name, rootdir=ROOT))
    parts = [plugin.shard_configs(ps, f"{i}/{n}") for i in range(1, n + 1)]
    ids = [c.id for c in ps.profile.server_configs]
    assert sorted(cid for part in parts for cid in part) == sorted(ids)  # each exactly once
    assert ps.profile.nospec.id in parts[0]


def test_a100_shards_collect_the_whole_matrix_once() -> None:
    def collect(*extra: str) -> list[str]:
        proc = subprocess.run(
            [*PERF_PYTEST, "--co", "-q",
             "--perf-profile", "a100-qwen3-32b", *extra],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        # A skipped no-cases item is shard 1's alone, so the two still partition the matrix.
        return [ln for ln in proc.stdout.splitlines() if "::" in ln]

    one, two = collect("--perf-shard", "1/2"), collect("--perf-shard", "2/2")
    assert one and two and not set(one) & set(two)
    assert len(one) + len(two) == EXPECTED_ITEMS["a100-qwen3-32b"]

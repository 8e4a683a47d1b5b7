"""Checks of the model against the target SGLang release and the parallel sizes: model-arch, model-quant,
model-parallel, context-length, speculative.

Each rule mirrors a line of SGLang's own code, cited as ``file:line (releases)``. The model's ``config.json`` is
found as the memory planner finds it (``sglwrap.memory.model.find_config``: a local directory, the offline HF
cache, the built-in catalogue). What a release registers (model architectures, quantization methods) comes from
the release data bundled with sglwrap (``table.extra`` of ``sglwrap/data/sglang/sglang-<v>.json``), or, for the
installed release, from its own ``srt/`` files read with ``ast`` (no import).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglwrap.diskcache import from_files
from sglwrap.preflight.model import Context, Status, Verdict
from sglwrap.record import replace
from sglwrap.versions import InvalidVersion, Version, at_least, before, strict

if TYPE_CHECKING:  # the model reader is imported when a model is checked, not when preflight starts
    from sglwrap.memory.facts import ModelFacts
    from sglwrap.memory.model import ModelShape

# Releases from which an architecture SGLang does not register is handed to the Transformers backend
# (``srt/models/transformers.py`` first ships in 0.4.9; ``model_loader/utils.py`` ``resolve_transformers_arch``).
TRANSFORMERS_FALLBACK = "TransformersForCausalLM"
# Architectures whose checkpoint carries its own MTP/NEXTN layers: SGLang 0.5.23 sets the draft model to the
# target (srt/arg_groups/speculative_hook.py:1120-1145); older releases had the DeepSeek-V3 family only.
BUNDLED_DRAFT_ARCHS = frozenset({
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM", "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
    "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "HYV3ForCausalLM",
    "HYV4ForCausalLM", "Qwen4ExpForConditionalGeneration",
})
_NEXTN_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")


def model_facts(ctx: Context) -> ModelFacts | str:
    """The model's facts, or why there are none (no --model-path, no config.json found): read once by
    ``run_preflight`` before the checks."""
    return ctx.model


_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def missing_local_model(model_path: str) -> str | None:
    """Why ``model_path`` names a local model that is not there (a path that does not exist and is no Hugging Face
    repo id SGLang could download, or a directory without config.json); None when it may be fine."""
    p = Path(model_path).expanduser()
    if p.is_dir():
        return None if (p / "config.json").is_file() else \
            f"--model-path {model_path}: the directory has no config.json (SGLang reads the model's config there)"
    if p.exists():
        return None
    if _HUB_ID.match(model_path) and not model_path.startswith((".", "~")):
        return None  # SGLang would try the Hub: offline planning cannot tell
    return f"--model-path {model_path}: no such file or directory, and not a Hugging Face repo id (org/name)"


def target_version(ctx: Context) -> str:
    """The SGLang release the plan is for: the assumed/installed one of the facts, else the flag table's."""
    return ctx.stack.sglang or ctx.args.version


# --- what a release registers -----------------------------------------------------------------------------


def _bundled_release_data() -> dict[str, dict[str, Any]]:
    from sglwrap.sglang.flags import bundled_dir

    out: dict[str, dict[str, Any]] = {}
    for p in bundled_dir().glob("sglang-*.json"):
        try:
            raw = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        out[str(raw.get("version", p.stem.removeprefix("sglang-")))] = raw
    return out


_BUNDLED: dict[str, dict[str, Any]] | None = None


@functools.lru_cache(maxsize=64)
def bundled_release(version: str) -> dict[str, Any] | None:
    """One bundled release's data (``sglang-<version>.json``), or None."""
    from sglwrap.sglang.flags import bundled_dir

    try:
        raw: dict[str, Any] = json.loads((bundled_dir() / f"sglang-{version}.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return raw


def bundled_release_data() -> dict[str, dict[str, Any]]:
    """Every bundled release's data by version (read once per process)."""
    global _BUNDLED
    if _BUNDLED is None:
        _BUNDLED = _bundled_release_data()
    return _BUNDLED


@functools.lru_cache(maxsize=8)
def entry_classes(models_dir: Path) -> frozenset[str]:
    """The ``EntryClass`` names of ``srt/models/*.py`` (SGLang's registry, ``pkgutil.iter_modules``), by ``ast``."""
    from sglwrap.sglang.generate import read_architectures

    files = sorted(models_dir.glob("*.py"))
    names = from_files("entry-classes", [models_dir, *files],
                      lambda: read_architectures(models_dir.parent.parent)["architectures"])
    return frozenset(names)


@functools.lru_cache(maxsize=8)
def quantization_registry(pkg: Path) -> frozenset[str]:
    """The keys of ``srt/layers/quantization/__init__.py``'s ``(BASE_|VLLM_)QUANTIZATION_METHODS`` dicts: the
    names ``ModelConfig._verify_quantization`` accepts (a superset of ``--quantization``'s choices)."""
    import ast  # only for an installed release, once per run at most

    from sglwrap.preflight.installed import parse_source

    tree = parse_source(pkg / "srt" / "layers" / "quantization" / "__init__.py")
    if tree is None:
        return frozenset()
    names: set[str] = set()
    pattern = re.compile(r"(BASE_|VLLM_)?QUANTIZATION_METHODS")

    def keys(d: ast.expr | None) -> None:
        if isinstance(d, ast.Dict):
            names.update(k.value for k in d.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))

    for node in ast.walk(tree):  # the dicts, their ``.update({...})`` under platform ifs, ``X["name"] = ...``
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and pattern.fullmatch(t.id):
                    keys(node.value)
                elif isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and pattern.fullmatch(t.value.id) \
                        and isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str):
                    names.add(t.slice.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update" \
                and isinstance(node.func.value, ast.Name) and pattern.fullmatch(node.func.value.id) and node.args:
            keys(node.args[0])
    return frozenset(names)


@functools.lru_cache(maxsize=4)
def installed_package_dir(python: str, dist: str = "sglang") -> Path | None:
    """The installed package directory of ``dist`` for ``python`` (from metadata, no import)."""
    from importlib import metadata

    from sglwrap.host.stack import site_paths

    for d in metadata.distributions(name=dist, path=site_paths(python)):
        pkg = Path(str(d.locate_file(dist.replace("-", "_"))))
        return pkg if pkg.is_dir() else None
    return None


def _installed_pkg(ctx: Context, version: str) -> Path | None:
    """The installed SGLang package directory when release ``version`` is the installed one (package metadata: the
    fact-gathering stage asks, on the paths that need it)."""
    if ctx.installed_sglang != version:
        return None
    from sglwrap.sglang.release import target_python

    return installed_package_dir(target_python(ctx.environ))


def release_architectures(ctx: Context, version: str) -> tuple[frozenset[str], str] | None:
    """(architectures release ``version`` registers, where that was read), or None when unknown."""
    extra = ctx.args.table.extra if ctx.args.version == version else {}
    if extra.get("architectures"):
        return frozenset(extra["architectures"]), f"release data {ctx.args.table.source}"
    raw = bundled_release(version)
    if raw and raw.get("architectures"):
        return frozenset(raw["architectures"]), f"bundled data sglang-{version}.json"
    pkg = _installed_pkg(ctx, version)
    if pkg is not None and (pkg / "srt" / "models").is_dir():
        return entry_classes(pkg / "srt" / "models"), f"installed {pkg}/srt/models"
    return None


def first_release_with(arch: str, catalogue: Mapping[str, Iterable[str]]) -> str | None:
    """The oldest release in ``catalogue`` (version -> architectures) that registers ``arch``."""
    found: list[Version] = []
    for v, archs in catalogue.items():
        try:
            if arch in set(archs):
                found.append(strict(v))
        except InvalidVersion:
            continue
    return str(min(found)) if found else None


def architectures_catalogue() -> dict[str, frozenset[str]]:
    """Bundled releases' architectures (version -> names), for "first supported in"."""
    return {v: frozenset(r["architectures"]) for v, r in bundled_release_data().items() if r.get("architectures")}


# --- model-arch ------------------------------------------------------------------------------------------


def arch_verdict(archs: list[str], registered: frozenset[str], version: str, where: str,
                 catalogue: Mapping[str, Iterable[str]], *, transformers_has: bool | None = None,
                 model_impl: str | None = None) -> Verdict:
    """model-arch from the model's ``architectures`` and what release ``version`` registers (pure).

    ``transformers_has``: whether the transformers that will run knows the class (None: unknown, e.g. an assumed
    release); the Transformers backend (0.4.9+) can only take a class it knows."""
    cid = "model-arch"
    if not archs:
        return Verdict(cid, Status.WARN, "config.json has no 'architectures': SGLang cannot pick a model class "
                       "(srt/models/registry.py 'No model architectures are specified')",
                       "add \"architectures\": [\"<ModelClass>\"] to config.json")
    hit = [a for a in archs if a in registered]
    if hit:
        return Verdict(cid, Status.PASS, f"SGLang {version} registers {hit[0]} ({where})")
    firsts = {a: first_release_with(a, catalogue) for a in archs}
    named = [f"{a} (first in {r} of the releases sglwrap has data for)" for a, r in firsts.items() if r]
    since = min((r for r in firsts.values() if r), default=None, key=strict)
    later = f"; {', '.join(named)}" if named else "; no release sglwrap knows registers it"
    fix = f"upgrade SGLang to >= {since}" if since else "use a model SGLang supports"
    head = f"SGLang {version} does not register {', '.join(archs)} ({where}){later}"
    if TRANSFORMERS_FALLBACK in registered and (transformers_has or model_impl == "transformers"):
        return Verdict(cid, Status.WARN, f"{head}: it falls back to the Transformers backend "
                       "(model_loader/utils.py resolve_transformers_arch): slower, and fails if the class does not "
                       "support it", fix)
    fallback = ""
    if TRANSFORMERS_FALLBACK in registered:
        fallback = (" and the Transformers backend cannot take it (the installed transformers lacks the class)"
                    if transformers_has is False else
                    " (the Transformers backend fallback is unverified for an assumed release)")
    return Verdict(cid, Status.BLOCK, f"{head}{fallback}: 'Model architectures {archs} are not supported for "
                   "now' (srt/models/registry.py)", fix)


def between_releases(archs: list[str], version: str, catalogue: Mapping[str, Iterable[str]]) -> Verdict:
    """model-arch for a release sglwrap has no list of, from the nearest releases around it (pure): registered in
    an older one -> pass (SGLang does not drop models); absent from a newer one -> block; else unknown."""
    cid = "model-arch"
    want = strict(version)
    known = sorted(((strict(v), v) for v in catalogue), key=lambda t: t[0])
    older = [v for pv, v in known if pv < want]
    newer = [v for pv, v in known if pv > want]
    if older and any(a in set(catalogue[older[-1]]) for a in archs):
        return Verdict(cid, Status.PASS, f"{archs[0]} is registered by SGLang {older[-1]} already (no list for "
                       f"{version} itself)")
    if newer and not any(a in set(catalogue[newer[0]]) for a in archs):
        v = arch_verdict(archs, frozenset(catalogue[newer[0]]), newer[0], f"bundled data of the next known "
                         f"release, {newer[0]}", catalogue)
        if v.status is Status.BLOCK:
            return replace(v, reason=f"SGLang {version} (no list of its own): even {v.reason}")
        return v
    if not archs:
        return Verdict(cid, Status.WARN, "config.json has no 'architectures'")
    first = first_release_with(archs[0], catalogue)
    oldest = min(catalogue, key=strict) if catalogue else None
    if first is not None and first == oldest:  # older than any list sglwrap has: unknown, not absent
        return Verdict(cid, Status.WARN, f"no architecture list for SGLang {version} (sglwrap's lists start at "
                       f"{oldest}, which registers {archs[0]}): whether {version} does is not known here",
                       f"name a release >= {oldest} with --assume-stack sglang=VERSION to check it")
    return Verdict(cid, Status.WARN, f"no architecture list for SGLang {version}; {archs[0]} is registered from "
                   f"{first or 'no known release'}", f"upgrade SGLang to >= {first}" if first else "")


def check_model_arch(ctx: Context) -> Verdict:
    """The model's ``architectures`` must be registered by the target release (or handed to the Transformers
    backend, 0.4.9+); a block names the first release that registers it."""
    cid = "model-arch"
    mf = model_facts(ctx)
    if isinstance(mf, str):
        missing = ctx.model_missing
        if missing is None:
            return Verdict(cid, Status.SKIP, mf)
        fix = "give the directory that holds the model's config.json and weights, or a Hugging Face repo id"
        if ctx.facts.source.startswith("nvml"):  # this machine: SGLang fails on it before loading anything
            return Verdict(cid, Status.BLOCK, f"{missing}: SGLang cannot load it here", fix)
        return Verdict(cid, Status.WARN, f"{missing} on this machine; planned without the model's config "
                       f"({ctx.facts.source}: make sure it exists where it will run)", fix)
    version = target_version(ctx)
    reg = ctx.arch_registry
    if reg is None:
        return between_releases(mf.architectures, version, ctx.arch_catalogue)
    has = ctx.transformers_has
    impl = ctx.args.get("model_impl")
    hit = [a for a in mf.architectures if a in reg[0]]
    catalogue = {} if hit else ctx.arch_catalogue
    return arch_verdict(mf.architectures, reg[0], version, reg[1], catalogue, transformers_has=has,
                        model_impl=None if impl is None else str(impl))


# --- model-quant ------------------------------------------------------------------------------------------


def checkpoint_quant_method(cfg: Mapping[str, Any]) -> str | None:
    """The checkpoint's ``quantization_config.quant_method`` (lowercased), as ModelConfig reads it."""
    q = cfg.get("quantization_config") or cfg.get("compression_config")
    if not isinstance(q, dict):
        tc = cfg.get("text_config")
        q = tc.get("quantization_config") if isinstance(tc, dict) else None
    if not isinstance(q, dict):
        return None
    m = q.get("quant_method")
    return str(m).lower() if m else None


def check_model_quant(ctx: Context) -> Verdict:
    """The checkpoint's quantization method must be one the release knows: ModelConfig raises 'Unknown
    quantization method: X. Must be one of [...]' (srt/configs/model_config.py:2150-2154, 0.5.23; same check
    since 0.3)."""
    cid = "model-quant"
    mf = model_facts(ctx)
    if isinstance(mf, str):
        return Verdict(cid, Status.SKIP, mf)
    method = checkpoint_quant_method(mf.config)
    user = ctx.args.get("quantization") if ctx.args.is_given("quantization") else None
    if method is None:
        return Verdict(cid, Status.PASS, "unquantized checkpoint" + (f"; --quantization {user}" if user else ""))
    version = target_version(ctx)
    pkg = ctx.sglang_package if ctx.installed_sglang == version else None
    known = ctx.quant_registry if pkg is not None else frozenset()
    where = f"installed {pkg}/srt/layers/quantization" if known else ""
    sure = bool(known)
    if not known:
        listed = ctx.quant_listed
        info = ctx.args.table.by_dest("quantization")
        if not listed and info is not None and info.choices and ctx.args.version == version:
            listed = list(info.choices)
        if not listed:
            return Verdict(cid, Status.SKIP, f"checkpoint quant_method {method}; no method list for SGLang {version}")
        known, where = frozenset(str(x) for x in listed), "--quantization choices (a subset of what it loads)"
    if method in known or method.replace("_", "-") in known:
        return Verdict(cid, Status.PASS, f"checkpoint quant_method {method} is known to SGLang {version} ({where})")
    reason = (f"checkpoint quant_method {method!r} is not a quantization method of SGLang {version} ({where}): "
              f"ModelConfig raises 'Unknown quantization method: {method}'")
    fix = "upgrade SGLang to a release that loads it, or use a checkpoint in a supported format"
    return Verdict(cid, Status.BLOCK if sure else Status.WARN, reason, fix)


# --- model-parallel ---------------------------------------------------------------------------------------


def parallel_problems(shape: ModelShape, cfg: Mapping[str, Any], *, tp: int, pp: int, ep: int, attn_dp: int,
                      moe_a2a: str | None, environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """(what is wrong, fix) for each parallel size the model cannot be split by (pure)."""
    out: list[tuple[str, str]] = []
    attn_tp = tp // attn_dp if attn_dp > 1 and tp % attn_dp == 0 else tp
    if attn_dp > 1 and tp % attn_dp:
        out.append((f"--tp-size {tp} is not divisible by the attention-DP size {attn_dp}: SGLang asserts "
                    "'cfg.tp_size % cfg.attn_dp_size == 0' (srt/arg_groups/parallel_hook.py:326 in 0.5.23; "
                    "'self.tp_size % self.dp_size == 0' in server_args.py since 0.3.6, :640 in 0.5.2)",
                    f"use a --dp-size that divides {tp}"))
    what = f"attention TP {attn_tp} (tp {tp} / attn-dp {attn_dp})" if attn_dp > 1 else f"--tp-size {tp}"
    heads, kv = shape.num_attention_heads, shape.num_kv_heads
    divisors = [d for d in range(1, 2 * max(heads, 1) + 1) if heads % d == 0]
    if heads % attn_tp:
        ok = [d for d in divisors if d <= max(tp, 8)]
        out.append((f"{shape.name} has {heads} attention heads, not divisible by {what}: the model asserts "
                    "'total_num_heads % tp_size == 0' (srt/models/llama.py:183 in 0.5.23, :118 in 0.4.6; "
                    "qwen3.py:166 with attn_tp_size)", f"use a --tp-size that divides {heads}: "
                    f"{', '.join(map(str, ok))}"))
    elif not shape.is_mla and kv and (kv % attn_tp if kv >= attn_tp else attn_tp % kv):
        rule = "total_num_kv_heads % tp_size == 0" if kv >= attn_tp else "tp_size % total_num_kv_heads == 0"
        out.append((f"{shape.name} has {kv} KV heads and {what}: the model asserts '{rule}' "
                    "(srt/models/llama.py:186-193, 0.5.23)", f"use a --tp-size that divides {kv} or a multiple of it"))
    experts = shape.n_routed_experts
    moe_ep = ep if ep > 1 else (tp if moe_a2a not in (None, "none") else 1)
    if experts and moe_ep > 1 and experts % moe_ep:
        out.append((f"{shape.name} has {experts} routed experts, not divisible by EP size {moe_ep}: FusedMoE "
                    "asserts '_num_global_routed % storage_ep_size == 0' "
                    "(srt/layers/moe/fused_moe_triton/layer.py:414, 0.5.23)",
                    f"use an --ep-size that divides {experts}"))
    layers = shape.num_layers
    if pp > 1:
        part = environ.get("SGLANG_PP_LAYER_PARTITION")
        if pp > layers:
            out.append((f"--pp-size {pp} exceeds the model's {layers} layers: make_layers asserts "
                        "'num_hidden_layers >= pp_size' (srt/utils/common.py:1635, 0.5.23)",
                        f"use --pp-size <= {layers}"))
        elif part:
            try:
                parts = [int(x) for x in part.split(",")]
            except ValueError:
                parts = []
            if len(parts) != pp or sum(parts) != layers:
                out.append((f"SGLANG_PP_LAYER_PARTITION={part} must list {pp} stages summing to {layers} layers "
                            "(srt/distributed/utils.py:123-133 get_pp_indices, 0.5.23)",
                            "fix the partition list or unset it (SGLang then splits evenly)"))
    if moe_ep > 1 and tp % moe_ep:
        out.append((f"--tp-size {tp} is not divisible by the EP size {moe_ep}: SGLang raises 'tp_size {tp} must be "
                    f"divisible by ep_size {moe_ep}' (model_runner_components/moe_ep_setup.py:150, 0.5.23)",
                    f"use an --ep-size that divides {tp}"))
    shared_tp1 = (environ.get("SGLANG_SHARED_EXPERT_TP1") or "").strip().lower() in ("1", "true", "yes", "on")
    out += block_quant_problems(shape, cfg, tp=tp, ep=moe_ep, shared_tp1=shared_tp1)
    return out


def block_quant_problems(shape: ModelShape, cfg: Mapping[str, Any], *, tp: int, ep: int,
                         shared_tp1: bool = False) -> list[tuple[str, str]]:
    """Block-FP8 checkpoints (``weight_block_size`` [n, k]): every TP shard of an MLP weight must hold whole blocks;
    Fp8LinearMethod / Fp8MoEMethod raise ValueError otherwise (srt/layers/quantization/fp8.py:593-611 linear,
    :1585-1601 MoE, 0.5.23). Shared experts are plain TP layers even with EP (sgl-project/sglang#10852)."""
    q = cfg.get("quantization_config")
    if not isinstance(q, dict):
        tc = cfg.get("text_config")
        q = tc.get("quantization_config") if isinstance(tc, dict) else None
    if not isinstance(q, dict) or tp <= 1:
        return []
    block = q.get("weight_block_size")
    if not (isinstance(block, (list, tuple)) and len(block) == 2 and all(isinstance(b, int) and b > 0
                                                                           for b in block)):
        return []
    bn, bk = int(block[0]), int(block[1])
    skip = " ".join(str(x) for x in (q.get("modules_to_not_convert") or q.get("ignore") or ()))
    tc = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    assert isinstance(tc, dict)
    parts: list[tuple[str, int, int]] = []  # (what, full size, shards)
    if shape.is_moe:
        parts.append(("routed experts' moe_intermediate_size", shape.moe_intermediate_size, max(tp // max(ep, 1), 1)))
        shared = tc.get("shared_expert_intermediate_size")
        if shared and "shared_expert" not in skip and not shared_tp1:
            parts.append(("shared_expert_intermediate_size", int(shared), tp))
    elif shape.intermediate_size:
        parts.append(("intermediate_size", shape.intermediate_size, tp))
    out: list[tuple[str, str]] = []
    for what, size, shards in parts:
        if shards <= 1 or size % shards:
            continue
        per = size // shards
        if per % bn or per % bk:
            bad = bn if per % bn else bk
            ok = [t for t in (1, 2, 4, 8, 16) if t <= tp and size % t == 0 and (size // t) % bn == 0
                  and (size // t) % bk == 0]
            out.append((f"{shape.name} is block-FP8 ({bn}x{bk}) and its {what} {size} / {shards} = {per} per GPU "
                        f"is not a multiple of {bad}: SGLang raises ValueError before loading ('For quantized MoE "
                        "models, please make sure (moe_intermediate_size / moe_tp_size) % weight_block_size_n == 0', "
                        "model_runner_components/moe_ep_setup.py:140-175 in 0.5.23) or while creating the weights "
                        f"('The output_size of gate's and up's weight = {per} is not divisible by weight quantization "
                        f"block_n = {bn}', srt/layers/quantization/fp8.py:1585-1601)",
                        f"use --tp-size {max(ok) if ok else 1}" + (" (with --dp-size/--ep-size for more GPUs)"
                                                                   if ok else "")))
    return out


def check_model_parallel(ctx: Context) -> Verdict:
    """Attention/KV heads vs TP (attention TP under DP attention), experts vs EP, layers vs PP, TP vs DP
    attention: the model files' own assertions, checked before NCCL starts."""
    cid = "model-parallel"
    mf = model_facts(ctx)
    if isinstance(mf, str):
        return Verdict(cid, Status.SKIP, mf)
    a = ctx.args
    moe_a2a = a.get("moe_a2a_backend")
    env = {**ctx.environ}
    if ctx.profile is not None:
        env.update({k: v.value for k, v in ctx.profile.env.items()})
    ep = a.ep if a.ep > 1 else (a.tp if a.get("enable_ep_moe") or a.get("enable_deepep_moe") else 1)  # 0.4.x
    attn_dp = a.attn_dp
    if a.get("enable_dp_attention") and at_least(target_version(ctx), "0.3.6") and before(target_version(ctx), "0.4.6"):
        attn_dp = a.tp  # these releases set dp_size = tp_size under DP attention (server_args.py:254 in 0.4.3)
    probs = parallel_problems(mf.shape, mf.config, tp=a.tp, pp=a.pp, ep=ep, attn_dp=attn_dp,
                              moe_a2a=None if moe_a2a is None else str(moe_a2a), environ=env)
    s = mf.shape
    facts = (f"{s.name}: {s.num_attention_heads} heads, {s.num_kv_heads} KV heads, {s.num_layers} layers"
             + (f", {s.n_routed_experts} experts" if s.n_routed_experts else "") + f" ({mf.source})")
    if probs:
        return Verdict(cid, Status.BLOCK, "; ".join(p for p, _ in probs), "; ".join(f for _, f in probs))
    return Verdict(cid, Status.PASS, f"{facts} split by tp={a.tp} pp={a.pp} ep={ep} attn-dp={attn_dp}")


# --- context-length ---------------------------------------------------------------------------------------


def context_override_default(version: str) -> bool | None:
    """Whether release ``version`` lets a longer ``--context-length`` through when
    SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is unset: None for releases without the check (< 0.3.6), True for
    0.4.6-0.4.10 (``get_bool_env_var(..., default="True")``, model_config.py:112 in 0.4.6), False otherwise (0.3.6-0.4.3
    and 0.5.1+: ``EnvBool(False)`` in srt/environ.py from 0.5.3)."""
    if before(version, "0.3.6"):
        return None
    return at_least(version, "0.4.6") and before(version, "0.5.0")


def check_context_length(ctx: Context) -> Verdict:
    """``--context-length`` above the derived context is a ValueError in ModelConfig unless
    SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN allows it (srt/configs/model_config.py:1291-1316 in 0.5.23; the check
    exists from 0.3.6, allowed by default in 0.4.6-0.4.10)."""
    cid = "context-length"
    if not ctx.args.is_given("context_length") or ctx.args.get("context_length") is None:
        return Verdict(cid, Status.PASS, "--context-length not given: SGLang derives it from config.json")
    mf = model_facts(ctx)
    if isinstance(mf, str):
        return Verdict(cid, Status.SKIP, mf)
    want = int(ctx.args.get("context_length"))
    from sglwrap.memory.model import context_length, names_context_length

    derived = context_length(mf.text_config)
    if want <= derived:
        return Verdict(cid, Status.PASS, f"--context-length {want} <= the derived context_length {derived}")
    if not names_context_length(mf.text_config):
        # transformers fills the model class's own default (Gemma3TextConfig: 131072), which config.json does not say
        return Verdict(cid, Status.WARN, f"config.json ({mf.source}) names no context length, so the one SGLang "
                       f"derives (the model class's default in transformers) is not known here; --context-length "
                       f"{want} is checked by SGLang at start", "none needed if the model supports this length")
    version = target_version(ctx)
    default = context_override_default(version)
    msg = f"User-specified context_length ({want}) is greater than the derived context_length ({derived})"
    risk = "'This may lead to incorrect model outputs or CUDA errors'"
    if default is None:
        return Verdict(cid, Status.WARN, f"{msg}: SGLang {version} does not check it; {risk}",
                       f"use --context-length <= {derived} unless the model really supports more")
    raw = ctx.env("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN")
    ci = (ctx.env("SGLANG_IS_IN_CI") or "").strip().lower() in ("1", "true") and at_least(version, "0.5.1")
    allowed = default if raw is None else raw.strip().lower() in ("1", "true", "yes", "on")
    if allowed or ci:
        why = (f"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN={raw}" if raw is not None else
               "SGLANG_IS_IN_CI" if ci else f"SGLang {version} allows it by default")
        return Verdict(cid, Status.WARN, f"{msg}; allowed ({why}): {risk}",
                       "check the model was trained (or rope-scaled) for this length")
    return Verdict(cid, Status.BLOCK, f"{msg}: SGLang {version}'s ModelConfig raises ValueError "
                   "(srt/configs/model_config.py:1296-1316 in 0.5.23; the same since 0.5.1, and 0.3.6-0.4.3)",
                   f"use --context-length <= {derived}, or set SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 if the "
                   "model really supports it")


# --- speculative ------------------------------------------------------------------------------------------


def nextn_layers(cfg: Mapping[str, Any]) -> int:
    """MTP/NEXTN layers the checkpoint carries (``num_nextn_predict_layers`` and its aliases)."""
    for src in (cfg, cfg.get("text_config") or {}):
        for k in _NEXTN_KEYS:
            if isinstance(src, dict) and src.get(k):
                return int(src[k])
    return 0


def draft_archs_of(model_config_py: Path) -> frozenset[str]:
    """Architectures a release drafts from the target checkpoint itself: the string constants compared with
    ``hf_config.architectures[0]`` in ModelConfig's ``if is_draft_model and ...`` branches (srt/configs/
    model_config.py:1032-1209 in 0.5.23, where each becomes its MTP class), read with ``ast``."""

    def read() -> list[str]:
        import ast

        from sglwrap.preflight.installed import parse_source

        tree = parse_source(model_config_py)
        if tree is None:
            return []
        out: set[str] = set()
        for node in ast.walk(tree):
            if not (isinstance(node, ast.If) and isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.And)):
                continue
            vals = node.test.values
            if not any(isinstance(v, (ast.Name, ast.Attribute)) and getattr(v, "id", getattr(v, "attr", "")) ==
                       "is_draft_model" for v in vals):
                continue
            for v in vals:
                if isinstance(v, ast.Compare) and "architectures" in ast.unparse(v.left):
                    for c in v.comparators:
                        out.update(n.value for n in ast.walk(c) if isinstance(n, ast.Constant) and isinstance(n.value, str))
        return sorted(out)

    return frozenset(from_files("draft-archs", [model_config_py], read))


def release_draft_archs(ctx: Context, version: str) -> tuple[frozenset[str], str] | None:
    """(architectures release ``version`` drafts from the target, where read): the installed package, else the
    release sources the data generator unpacked (``$XDG_CACHE_HOME/sglwrap/releases/src``); None when neither."""
    from sglwrap.fsutil import cache_dir

    pkg = _installed_pkg(ctx, version)
    if pkg is None:
        src = cache_dir() / "releases" / "src" / version / "sglang"
        pkg = src if src.is_dir() else None
    if pkg is None:
        return None
    path = pkg / "srt" / "configs" / "model_config.py"
    if not path.is_file():
        return None
    return draft_archs_of(path) | BUNDLED_DRAFT_ARCHS, f"{path}"


def gather_architectures(ctx: Context) -> dict[str, Any]:
    """The architectures the target release registers (``model-arch``, a draft's check), read before the checks; on
    a miss, every bundled release's list ("first in") and whether the installed transformers has the class (the
    Transformers backend's fallback, read only when the target release is the installed one)."""
    archs = [m.architectures for m in (ctx.model, ctx.draft) if m is not None and not isinstance(m, str)]
    if not archs:
        return {}
    version = target_version(ctx)
    reg = release_architectures(ctx, version)
    out: dict[str, Any] = {"arch_registry": reg}
    missed = [a for a in archs if reg is None or not any(x in reg[0] for x in a)]
    if missed:  # every release's list is read only for a miss
        out["arch_catalogue"] = architectures_catalogue()
    mf = ctx.model
    if not isinstance(mf, str) and reg is not None and not any(a in reg[0] for a in mf.architectures) \
            and _installed_pkg(ctx, version) is not None:
        from sglwrap.preflight.installed import installed_dirs, transformers_classes
        from sglwrap.sglang.release import target_python

        tdir = installed_dirs(target_python(ctx.environ)).get("transformers")
        known = transformers_classes(Path(tdir)) if tdir else frozenset()
        out["transformers_has"] = any(a in known for a in mf.architectures) if known else None
    return out


def gather_release_registries(ctx: Context) -> dict[str, Any]:
    """What the target release registers, read from its installed (or unpacked) sources before the checks, and
    only where a check will ask: its quantization methods for a quantized checkpoint (``model-quant``: the installed
    package's registry, else the release data's list), the architectures it drafts from the checkpoint for
    EAGLE/NEXTN/MTP without a draft model (``speculative``)."""
    out: dict[str, Any] = {}
    mf = ctx.model
    if isinstance(mf, str):
        return out
    version = target_version(ctx)
    if checkpoint_quant_method(mf.config) is not None:
        pkg = _installed_pkg(ctx, version)
        out["sglang_package"] = pkg
        registry = quantization_registry(pkg) if pkg is not None else frozenset()
        out["quant_registry"] = registry
        if not registry:  # the release's own list: its data, else the bundled data of that release
            extra = ctx.args.table.extra if ctx.args.version == version else {}
            out["quant_listed"] = extra.get("quantization_methods") or \
                (bundled_release(version) or {}).get("quantization_methods")
    algo = str(ctx.args.get("speculative_algorithm") or "").upper()
    if algo in ("EAGLE", "EAGLE3", "NEXTN", "MTP") and not ctx.args.get("speculative_draft_model_path"):
        out["draft_archs"] = release_draft_archs(ctx, version)
    return out


def check_speculative(ctx: Context) -> Verdict:
    """EAGLE/EAGLE3/NEXTN need a draft: ``--speculative-draft-model-path``, or a checkpoint SGLang drafts from itself
    (its MTP/NEXTN layers: ModelConfig's draft branches, model_config.py:1032-1209, and speculative_hook.py:1120-1145
    in 0.5.23). Without either SGLang loads the target as its own draft and fails at startup
    (sgl-project/sglang#36528)."""
    cid = "speculative"
    algo = ctx.args.get("speculative_algorithm")
    if not algo:
        return Verdict(cid, Status.PASS, "no speculative decoding")
    algo = str(algo).upper()
    if algo not in ("EAGLE", "EAGLE3", "NEXTN", "MTP"):
        return Verdict(cid, Status.PASS, f"--speculative-algorithm {algo}: not checked against the model")
    draft = ctx.args.get("speculative_draft_model_path")
    if draft:
        return draft_verdict(ctx, algo, str(draft))
    mf = model_facts(ctx)
    if isinstance(mf, str):
        return Verdict(cid, Status.SKIP, mf)
    arch = mf.architectures[0] if mf.architectures else "?"
    layers = nextn_layers(mf.config)
    zero = any(isinstance(src, dict) and src.get(k) == 0 for src in (mf.config, mf.text_config) for k in _NEXTN_KEYS)
    version = target_version(ctx)
    known = ctx.draft_archs
    archs, where = known if known else (BUNDLED_DRAFT_ARCHS, "the 0.5.23 list of speculative_hook.py:1120-1137")
    if layers > 0 or (arch in archs and not zero):
        how = (f"{layers} NEXTN layer(s) in config.json" if layers else f"SGLang {version} drafts {arch} from the "
               f"checkpoint's MTP layers ({where})")
        if algo == "EAGLE3":
            return Verdict(cid, Status.WARN, f"EAGLE3 without --speculative-draft-model-path: {how}, not EAGLE3 heads",
                           "pass --speculative-draft-model-path <EAGLE3 draft>, or use --speculative-algorithm NEXTN")
        return Verdict(cid, Status.PASS, f"{algo}: {how}")
    why = (f"{arch} declares 0 NEXTN layers" if zero else
           f"{arch} carries no NEXTN/MTP layers and SGLang {version} does not draft it from the checkpoint ({where})")
    return Verdict(cid, Status.BLOCK, f"--speculative-algorithm {algo} without --speculative-draft-model-path: {why}; "
                   "SGLang loads the target as its own draft and fails at startup (sgl-project/sglang#36528)",
                   "pass --speculative-draft-model-path <a draft model for this target>")


def draft_verdict(ctx: Context, algo: str, draft: str) -> Verdict:
    """A draft model whose config.json can be found must be an architecture the release registers (EAGLE drafts
    are classes of their own, e.g. ``LlamaForCausalLMEagle3``); otherwise the draft path is taken on trust."""
    cid = "speculative"
    df = ctx.draft if ctx.draft is not None else "no --speculative-draft-model-path given"
    if isinstance(df, str):
        return Verdict(cid, Status.PASS, f"{algo} with draft {draft} (its config.json is not here to check)")
    version = target_version(ctx)
    reg = ctx.arch_registry
    if reg is None or not df.architectures or any(a in reg[0] for a in df.architectures):
        return Verdict(cid, Status.PASS, f"{algo} with draft {draft} ({', '.join(df.architectures) or '?'})")
    v = arch_verdict(df.architectures, reg[0], version, reg[1], ctx.arch_catalogue)
    return replace(v, id=cid, reason=f"draft model {draft}: {v.reason}")

"""A model's shape from its ``config.json``: a local directory, the local Hugging Face cache, or the catalogue.

Only what the memory budget needs is read, with SGLang 0.5.23's own rules for it
(``srt/configs/model_config.py``: ``_derive_model_shapes`` 1341-1480, ``get_total_num_kv_heads`` 1626-1690;
``srt/utils/hf_transformers/common.py:668-694`` ``get_context_length``).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from sglwrap.errors import ConfigError
from sglwrap.memory.catalogue import CATALOGUE_DIR, catalogue_dir, catalogue_names  # noqa: F401 (re-exported)
from sglwrap.memory.mamba import MambaLayout, unmodelled_hybrid
from sglwrap.memory.mamba import layout_from_config as mamba_layout
from sglwrap.memory.swa import SwaLayout, layout_from_config
from sglwrap.record import Record


# Architectures SGLang 0.5.23 runs with MLA (model_config.py:1367-1401, the ones we may meet).
MLA_ARCHS = frozenset({
    "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLMNextN",
    "KimiK25ForConditionalGeneration", "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "MistralLarge3ForCausalLM",
    "LongcatFlashForCausalLM", "KimiVLForConditionalGeneration", "DeepseekVL2ForCausalLM",
})
_CONTEXT_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")
_KV_HEAD_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups")


class ModelShape(Record):
    """The geometry of one model as SGLang sizes it (text backbone of a multimodal wrapper)."""

    name: str
    source: str  # where config.json came from
    directory: str | None  # local directory holding config.json (weights may sit beside it)
    architecture: str
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int  # total, before TP
    head_dim: int
    v_head_dim: int
    is_mla: bool
    kv_lora_rank: int | None
    qk_rope_head_dim: int | None
    qk_nope_head_dim: int | None
    q_lora_rank: int | None
    context_len: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    torch_dtype: str
    n_routed_experts: int
    moe_intermediate_size: int
    n_shared_experts: int
    first_k_dense: int
    quant_method: str | None
    quant_bits: int | None
    quant_group_size: int | None
    quant_scope: str  # "all-linear" or "routed-experts"
    is_multimodal: bool
    vision_params: int  # parameters of a vision tower, 0 when none
    sliding_window: int | None
    swa: SwaLayout | None = None  # set when SGLang 0.5.23 gives the model a hybrid SWA pool (swa.py)
    mamba: MambaLayout | None = None  # set for a mamba / linear-attention hybrid this accountant sizes (mamba.py)
    unmodelled_hybrid: bool = False  # a linear-attention hybrid whose state pool is not modelled
    moe_layer_step: int = 1  # every step-th layer (1-based) past first_k_dense is MoE (Llama-4, Qwen-MoE)
    dense_intermediate_size: int | None = None  # FFN width of the dense layers when it differs (Llama-4)
    shared_expert_intermediate: int | None = None  # total shared-expert FFN width per MoE layer, when set
    attn_output_gate: bool = False  # q_proj also emits an output gate (Qwen3-Next / Qwen3.5 full-attention layers)
    shared_experts_quantized: bool = False  # with quant_scope "routed-experts": shared experts quantised as well
    lm_head: bool = True  # SGLang builds an lm_head (a classification / reward model has a score head instead)
    score_params: int = 0  # parameters of a classification / reward score head (replicated, model dtype)
    vision_tp_sharded: bool = False  # the vision tower's linears are TP-sharded (Qwen2/2.5/3-VL, Qwen3.5 towers)

    @property
    def num_moe_layers(self) -> int:
        """How many layers hold routed experts."""
        if not self.is_moe:
            return 0
        step = max(1, self.moe_layer_step)
        return sum(1 for i in range(self.first_k_dense, self.num_layers) if (i + 1) % step == 0)

    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0


def hf_cached_file(name: str, filename: str) -> Path | None:
    """``filename`` of Hub repo ``name`` in the local HF cache (read as files, offline); None if absent."""
    from sglwrap.hubcache import cached_file

    return cached_file(name, filename)


def _hf_cache_dir(name: str) -> Path | None:
    """The snapshot directory of ``name`` in the local HF cache, offline; None if absent."""
    hit = hf_cached_file(name, "config.json")
    return hit.parent if hit is not None else None


def find_config(model_path: str) -> tuple[Path, str]:
    """(config.json path, where it came from): local path, then the HF cache, then the catalogue."""
    p = Path(model_path).expanduser()
    if p.is_file() and p.name.endswith(".json"):
        return p, f"file {p}"
    if (p / "config.json").is_file():
        return p / "config.json", f"local {p}"
    hf = _hf_cache_dir(model_path)
    if hf is not None and (hf / "config.json").is_file():
        return hf / "config.json", f"hf-cache {hf}"
    cat = catalogue_dir(model_path)
    if cat is not None:
        return cat / "config.json", f"catalogue {cat.name}"
    from sglwrap.errors import UsageError

    # a usage error (64): the flag names no model to plan for; never the predicted-OOM code
    import difflib

    names = catalogue_names()
    close = difflib.get_close_matches(model_path.rstrip("/").rsplit("/", 1)[-1], names, n=3, cutoff=0.6)
    hint = (f"; did you mean the built-in config {' or '.join(close)}?" if close
            else f"; or name one of sglwrap's {len(names)} built-in configs (sglwrap/data/models)")
    raise UsageError(
        f"--model-path {model_path}: no config.json found (not a local directory, not in the local Hugging Face "
        f"cache){hint}")


# Defaults of transformers' config classes for model types whose published config.json leaves the geometry to them
# (google's gemma-3 files name only a few keys): transformers 5.19 ``Gemma3TextConfig`` (configuration_gemma3.py).
_TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "max_position_embeddings": 131_072, "sliding_window": 4096, "tie_word_embeddings": True},
}


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    for key in ("text_config", "llm_config", "language_config"):
        sub = cfg.get(key)
        if isinstance(sub, dict) and sub.get("num_hidden_layers"):
            return {**_TEXT_DEFAULTS.get(str(sub.get("model_type")), {}), **sub}
    return {**_TEXT_DEFAULTS.get(str(cfg.get("model_type")), {}), **cfg}


# Config classes that turn ``rope_scaling`` into per-layer-type ``rope_parameters`` (transformers 5, which SGLang
# 0.5.23 runs): the attribute SGLang reads then has no top-level ``factor`` (configuration_gemma3.py).
_PER_LAYER_ROPE_TYPES = frozenset({"gemma3_text"})


def names_context_length(tc: dict[str, Any]) -> bool:
    """Whether the (text) config states a context length itself; without one, transformers fills its model class's
    default, which the raw config.json does not show."""
    return any(tc.get(key) is not None for key in _CONTEXT_KEYS)


def context_length(tc: dict[str, Any]) -> int:
    """SGLang's ``get_context_length``: the first length key, times a rope factor unless llama3/original set."""
    rope = tc.get("rope_scaling") or {}
    factor = rope.get("factor", 1) if isinstance(rope, dict) and rope else 1
    if isinstance(rope, dict) and ("original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3"):
        factor = 1
    if tc.get("model_type") in _PER_LAYER_ROPE_TYPES:
        factor = 1
    for key in _CONTEXT_KEYS:
        if tc.get(key) is not None:
            return int(factor * tc[key])
    return 2048


def _kv_heads(tc: dict[str, Any], model_type: str | None) -> int:
    if tc.get("multi_query") and not tc.get("new_decoder_architecture"):
        return 1
    for key in _KV_HEAD_KEYS:
        if tc.get(key) is not None:
            return int(tc[key])
    return int(tc["num_attention_heads"])


def _is_vision_module(name: str) -> bool:
    return any(t in name for t in ("vision", "visual", "mm_projector", "multi_modal_projector"))


def _quant(cfg: dict[str, Any], tc: dict[str, Any]) -> tuple[str | None, int | None, int | None, str]:
    q = cfg.get("quantization_config") or tc.get("quantization_config")
    if not isinstance(q, dict):
        return None, None, None, "all-linear"
    method = str(q.get("quant_method") or q.get("quantization") or "unknown")
    bits = q.get("bits") or q.get("w_bit")
    group = q.get("group_size") or q.get("q_group_size")
    scope = "all-linear"
    if method == "fp8":
        bits = 8
    if method == "mxfp4":  # e2m1 values + one e8m0 scale per 32 (gpt-oss); attention etc. listed as not converted
        bits, group = 4, 32
        if any("self_attn" in str(x) for x in q.get("modules_to_not_convert", ())):
            scope = "routed-experts"
    groups = q.get("config_groups")
    if isinstance(groups, dict) and groups:  # compressed-tensors
        w = next(iter(groups.values())).get("weights", {})
        bits = w.get("num_bits", bits)
        group = w.get("group_size", group)
        # the vision tower's own layers (often listed one by one) say nothing of the language model's
        ignore = " ".join(str(x) for x in q.get("ignore", ()) if not _is_vision_module(str(x)))
        if "self_attn" in ignore or "shared_experts" in ignore:
            scope = "routed-experts"
    return method, None if bits is None else int(bits), None if group is None else int(group), scope


def _shared_quantized(cfg: dict[str, Any], tc: dict[str, Any], scope: str) -> bool:
    """Whether shared experts keep the quantised format when attention does not (``routed-experts`` scope): they
    do unless the ignore list names them (RedHat's FP8-dynamic Llama-4 keeps only attention and the router in bf16,
    Kimi-K2.5 its shared experts too)."""
    q = cfg.get("quantization_config") or tc.get("quantization_config")
    if scope != "routed-experts" or not isinstance(q, dict) or not q.get("config_groups"):
        return False
    return not any("shared_expert" in str(x) for x in q.get("ignore", ()))


# transformers' own default of tie_word_embeddings where a config leaves it out (Gemma's configs do; PretrainedConfig
# defaults to True, but LlamaConfig, Qwen2Config, MistralConfig and most decoder configs to False).
_TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text"})


def _tied(cfg: dict[str, Any], tc: dict[str, Any]) -> bool:
    for c in (cfg, tc):
        if "tie_word_embeddings" in c:
            return bool(c["tie_word_embeddings"])
    return (tc.get("model_type") or cfg.get("model_type")) in _TIED_BY_DEFAULT


def _moe_layout(tc: dict[str, Any]) -> tuple[int, int | None, int | None]:
    """(MoE layer step, dense-layer FFN width, shared-expert FFN width) beyond the DeepSeek-style keys.

    Llama-4 (``llama4_text``): MoE on every ``interleave_moe_layer_step``-th layer, the dense layers'
    FFN is ``intermediate_size_mlp``, every MoE layer adds one shared expert of ``intermediate_size``.
    Qwen2/3-MoE: ``decoder_sparse_step`` and ``shared_expert_intermediate_size``."""
    if tc.get("model_type") == "llama4_text":
        return (int(tc.get("interleave_moe_layer_step") or 1), tc.get("intermediate_size_mlp"),
                int(tc.get("intermediate_size") or 0))
    shared = tc.get("shared_expert_intermediate_size")
    return int(tc.get("decoder_sparse_step") or 1), None, None if shared is None else int(shared)


def _vision_params(cfg: dict[str, Any]) -> int:
    v = cfg.get("vision_config")
    if not isinstance(v, dict):
        return 0
    layers = int(v.get("num_hidden_layers") or v.get("depth") or v.get("vt_num_hidden_layers") or 24)
    hidden = int(v.get("hidden_size") or v.get("vt_hidden_size") or v.get("embed_dim") or 1024)
    inter = int(v.get("intermediate_size") or v.get("vt_intermediate_size") or 4 * hidden)
    # a SiLU vision MLP is gated (Qwen2.5-VL: gate/up/down), a GELU one has fc1/fc2
    mlp_mats = 3 if str(v.get("hidden_act") or "") == "silu" else 2
    blocks = layers * (4 * hidden * hidden + mlp_mats * hidden * inter)
    merge, out = v.get("spatial_merge_size"), v.get("out_hidden_size")
    if merge and out:  # Qwen-VL patch merger: (merge^2 x hidden) -> same -> the language model's width
        wide = hidden * int(merge) ** 2
        # Qwen3-VL adds one more merger per deepstack layer
        blocks += (1 + len(v.get("deepstack_visual_indexes") or ())) * (wide * wide + wide * int(out))
    return blocks


def _num_labels(cfg: dict[str, Any], tc: dict[str, Any]) -> int:
    """transformers' ``num_labels``: the length of ``id2label`` when given, else ``num_labels``, else its default 2."""
    for c in (cfg, tc):
        labels = c.get("id2label")
        if isinstance(labels, dict) and labels:
            return len(labels)
    for c in (cfg, tc):
        if c.get("num_labels"):
            return int(c["num_labels"])
    return 2


def head_of(arch: str, cfg: dict[str, Any], tc: dict[str, Any], hidden: int) -> tuple[bool, int]:
    """(whether SGLang builds an lm_head, parameters of the score head that replaces it).

    SGLang's classification and reward models keep the decoder and the input embedding but no lm_head
    (0.4.0 ``models/llama_reward.py``: ``LlamaForSequenceClassification`` = ``LlamaModel`` + ``score``
    ``nn.Linear(hidden, num_labels, bias=False)``; 0.5.23 ``qwen2_classification.py`` / ``qwen3_classification.py``
    ``nn.Linear(hidden, num_labels)``, ``gemma2_reward.py`` the same without bias; ``qwen2_rm.py`` / ``qwen3_rm.py``
    ``*ForRewardModel``: ``Linear(hidden, hidden)`` + ``Linear(hidden, num_labels)``; ``internlm2_reward.py``
    ``v_head`` ``Linear(hidden, 1)``; 0.4.0 ``llama_classification.py`` ``LlamaForClassification``
    ``classification_head`` ``Linear(hidden, classification_out_size)``). The head is a plain ``nn.Linear``:
    replicated on every rank, in the model dtype."""
    if arch.endswith("ForSequenceClassification") or arch.endswith("ForSequenceClassificationWithNormal_Weights"):
        n = _num_labels(cfg, tc)
        return False, hidden * n + n
    if arch == "InternLM2ForRewardModel":
        return False, hidden
    if arch.endswith("ForRewardModel"):
        n = _num_labels(cfg, tc)
        return False, hidden * hidden + hidden + hidden * n + n
    if arch == "LlamaForClassification":
        return False, hidden * int(tc.get("classification_out_size") or cfg.get("classification_out_size") or 1)
    return True, 0


def _vision_tp_sharded(cfg: dict[str, Any]) -> bool:
    """Whether SGLang shards the vision tower's linears over TP: the Qwen-VL family's towers (a patch merger,
    ``spatial_merge_size`` + ``out_hidden_size``) use Column/RowParallelLinear over the TP group (0.5.14
    ``models/qwen2_5_vl.py:96-107,223-237`` ``tp_size``; ``qwen3_vl.py:111-122,271-283`` the attention-TP group,
    which Qwen3.5 reuses) unless ``--mm-enable-dp-encoder`` (not read here: the tower is then replicated)."""
    v = cfg.get("vision_config")
    return isinstance(v, dict) and bool(v.get("spatial_merge_size")) and bool(v.get("out_hidden_size"))


def shape_from_config(cfg: dict[str, Any], *, name: str, source: str, directory: str | None) -> ModelShape:
    """Build a ModelShape from a parsed config.json dict (SGLang 0.5.23's rules)."""
    try:
        tc = _text_config(cfg)
        arch = (cfg.get("architectures") or tc.get("architectures") or ["?"])[0]
        heads = int(tc["num_attention_heads"])
        hidden = int(tc["hidden_size"])
        head_dim = int(tc.get("head_dim") or hidden // heads)
        v_head_dim = int(tc.get("v_head_dim") or head_dim)
        is_mla = arch in MLA_ARCHS and tc.get("kv_lora_rank") is not None
        method, bits, group, scope = _quant(cfg, tc)
        sliding = tc.get("sliding_window") if tc.get("use_sliding_window", True) else None
        model_type = tc.get("model_type") or cfg.get("model_type")
        step, dense, shared = _moe_layout(tc)
        mamba = mamba_layout(model_type, tc)
        has_lm_head, score = head_of(str(arch), cfg, tc, hidden)
        return ModelShape(
            name=name, source=source, directory=directory, architecture=str(arch),
            num_layers=int(tc["num_hidden_layers"]), num_attention_heads=heads,
            num_kv_heads=_kv_heads(tc, cfg.get("model_type")),
            head_dim=256 if is_mla else head_dim,  # SGLang's placeholder for MLA (model_config.py:1396)
            v_head_dim=int(tc["v_head_dim"]) if is_mla else v_head_dim,
            is_mla=is_mla,
            kv_lora_rank=int(tc["kv_lora_rank"]) if is_mla else None,
            qk_rope_head_dim=int(tc["qk_rope_head_dim"]) if is_mla else None,
            qk_nope_head_dim=int(tc["qk_nope_head_dim"]) if is_mla else None,
            q_lora_rank=tc.get("q_lora_rank") if is_mla else None,
            context_len=context_length(tc), hidden_size=hidden,
            intermediate_size=int(tc.get("intermediate_size") or 4 * hidden),
            vocab_size=int(tc.get("vocab_size") or cfg.get("vocab_size") or 32000),
            tie_word_embeddings=_tied(cfg, tc),
            torch_dtype=str(tc.get("torch_dtype") or cfg.get("torch_dtype") or tc.get("dtype") or "bfloat16"),
            n_routed_experts=int(tc.get("n_routed_experts") or tc.get("num_experts") or tc.get("num_local_experts")
                                 or 0),
            moe_intermediate_size=int(tc.get("moe_intermediate_size") or tc.get("intermediate_size") or 0),
            n_shared_experts=int(tc.get("n_shared_experts") or 0),
            first_k_dense=int(tc.get("first_k_dense_replace") or 0),
            quant_method=method, quant_bits=bits, quant_group_size=group, quant_scope=scope,
            is_multimodal="vision_config" in cfg,
            vision_params=_vision_params(cfg),
            sliding_window=int(sliding) if isinstance(sliding, int) else None,
            swa=layout_from_config(str(arch), tc),
            mamba=mamba,
            unmodelled_hybrid=mamba is None and unmodelled_hybrid(model_type, str(arch)),
            moe_layer_step=step, dense_intermediate_size=None if dense is None else int(dense),
            shared_expert_intermediate=shared,
            attn_output_gate=mamba is not None and mamba.family == "gdn" and bool(tc.get("attn_output_gate", True)),
            shared_experts_quantized=_shared_quantized(cfg, tc, scope),
            lm_head=has_lm_head, score_params=score, vision_tp_sharded=_vision_tp_sharded(cfg),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{source}: config.json lacks what the memory model needs ({type(e).__name__}: {e})") \
            from None


def config_text(path: Path) -> str:
    """The text of a model's config file: read once per process while its stamp (size, mtime, inode), taken now, is
    unchanged (preflight's checks, the release rules and the accountant all read the same file)."""
    st = path.stat()
    return _config_text(str(path), st.st_size, st.st_mtime_ns, st.st_ino)


@functools.lru_cache(maxsize=32)
def _config_text(path: str, size: int, mtime_ns: int, inode: int) -> str:
    return Path(path).read_text(encoding="utf-8")


def load_shape(model_path: str) -> ModelShape:
    """Find and read the model's config.json (see ``find_config``)."""
    path, source = find_config(model_path)
    try:
        cfg = json.loads(config_text(path))
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: cannot read config.json: {e}") from None
    return shape_from_config(cfg, name=model_path.rstrip("/").rsplit("/", 1)[-1], source=source,
                             directory=str(path.parent))

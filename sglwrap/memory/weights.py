"""Weight bytes per rank: exact totals from the checkpoint when it is local, else parameters x stored dtype.

The split over ranks follows how SGLang shards: attention by the attention-TP group (``tp / attn_dp``; MLA's
``q_a``/``kv_a`` projections replicated), dense MLP, experts, shared experts and vocab by TP (EP only moves
experts between the same TP ranks), norms and router replicated, a vision tower replicated but for the Qwen-VL
family's (sharded over the attention-TP group, ``model.py`` ``_vision_tp_sharded``).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from sglwrap.memory.model import ModelShape
from sglwrap.record import Record, replace

_DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 2.0, "fp8": 1.0}  # fp32 checkpoints load as bf16


class Weights(Record):
    """Weight bytes: the whole checkpoint and the most loaded rank's share."""

    total_bytes: int
    per_rank_bytes: int
    source: str  # "index total_size", "safetensors headers", "weights.json", "params x dtype"
    params_total: int
    load_extra_bytes: int = 0  # what loading holds beyond per_rank_bytes at its peak (online quantisation)
    load_peak_source: str = ""

    @property
    def peak_bytes(self) -> int:
        """What loading needs at its peak on the most loaded rank: the loaded weights plus the loading excess (kept
        as an excess so that a later change of ``per_rank_bytes``, e.g. ``--cpu-offload-gb``, moves the peak too)."""
        return self.per_rank_bytes + max(0, self.load_extra_bytes)


def _exact_total(directory: str | None) -> tuple[int, str] | None:
    if directory is None:
        return None
    d = Path(directory)
    for name, label in (("model.safetensors.index.json", "index total_size"), ("weights.json", "weights.json")):
        p = d / name
        if p.is_file():
            try:
                raw = json.loads(p.read_text(encoding="utf-8"))
                total = raw.get("metadata", {}).get("total_size") if "metadata" in raw else raw.get("total_size")
                if total:
                    return int(total), f"{label} ({p})"
            except (OSError, json.JSONDecodeError, ValueError):
                pass
    total = 0
    for st in sorted(d.glob("*.safetensors")):
        try:
            with st.open("rb") as fh:
                n = struct.unpack("<Q", fh.read(8))[0]
                header = json.loads(fh.read(n))
            total += sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items()
                         if k != "__metadata__")
        except (OSError, ValueError, KeyError, struct.error):
            return None
    return (total, f"safetensors headers ({d})") if total else None


def _linear_bytes(shape: ModelShape, online_quant: str | None) -> float:
    """Bytes per parameter of a quantised linear layer."""
    if online_quant in ("fp8", "w8a8_fp8", "modelopt_fp8"):
        return 1.0
    if shape.quant_method is None:
        return _DTYPE_BYTES.get(shape.torch_dtype, 2.0)
    if shape.quant_method == "mxfp4":
        return 4 / 8 + 1 / 32  # 4-bit values, one 1-byte e8m0 scale per 32
    bits = shape.quant_bits or 8
    group = shape.quant_group_size or 0
    scale = 2.0 / group if group else 4.0 / (128 * 128)  # bf16 scale per group; fp8 block scales
    return bits / 8 + scale


def _layer_params(shape: ModelShape, attn_tp: int, tp: int) -> tuple[float, float, float, float]:
    """(attention sharded, attention replicated, dense-MLP/shared sharded, routed experts) params per layer."""
    h = shape.hidden_size
    if shape.is_mla:
        nope, rope, v = shape.qk_nope_head_dim or 0, shape.qk_rope_head_dim or 0, shape.v_head_dim
        heads = shape.num_attention_heads
        q_rank = shape.q_lora_rank
        repl = h * ((q_rank or 0) + (shape.kv_lora_rank or 0) + rope)
        sharded = heads * ((q_rank or h) * (nope + rope) + (shape.kv_lora_rank or 0) * (nope + v) + v * h)
    else:
        hd = shape.head_dim
        kv = shape.num_kv_heads
        repl = 0
        kv_per_rank = max(1, kv // attn_tp) * attn_tp  # replicated KV heads count once per rank
        q_out = 2 if shape.attn_output_gate else 1  # a gated q_proj (Qwen3-Next/3.5) emits the gate beside q
        sharded = h * shape.num_attention_heads * hd * (1 + q_out) + h * kv_per_rank * hd * 2
    return float(sharded), float(repl), 0.0, 0.0


def _gdn_layer_params(shape: ModelShape) -> float:
    """One Gated-DeltaNet layer (Qwen3-Next / Qwen3.5 ``linear_attention``): in_proj_qkvz, in_proj_ba, the
    depthwise conv over q/k/v, A_log/dt_bias and out_proj (``models/qwen3_next.py`` shapes)."""
    m = shape.mamba
    assert m is not None
    h = shape.hidden_size
    key_dim, value_dim = m.n_groups * m.state_size, m.num_heads * m.head_dim
    return float(h * (2 * key_dim + 2 * value_dim) + h * 2 * m.num_heads + (2 * key_dim + value_dim) * m.conv_kernel
                 + 2 * m.num_heads + value_dim * h)


def _attention_layers(shape: ModelShape, sharded: float) -> float:
    """Attention parameters over all layers (sharded part): GDN layers of a GDN hybrid sized as such."""
    m = shape.mamba
    if m is None or m.family != "gdn":
        return shape.num_layers * sharded
    return len(m.full_layer_ids) * sharded + len(m.linear_layer_ids) * _gdn_layer_params(shape)


class Sharding(Record):
    """How SGLang 0.5.23 lays out the DeepSeek-V2 family under DP attention (``models/deepseek_v2.py``):
    the input embedding over the attention-TP group (``layers/vocab_parallel_embedding.py:166-185``), the
    lm_head over it with ``--enable-dp-lm-head``, shared experts replicated with a DeepEP-like all-to-all
    backend (``deepseek_v2.py:873-896``), dense MLPs replicated when the dense FFN is fully data-parallel
    (``:2671``), and ``--ep-num-redundant-experts`` extra expert copies spread over the ranks."""

    embed_tp: int | None = None
    head_tp: int | None = None
    shared_replicated: bool = False
    dense_replicated: bool = False
    redundant_experts: int = 0


def loaded_dtype_bytes(shape: ModelShape) -> float:
    """Bytes per element of the checkpoint's unquantized tensors as SGLang loads them (fp32 checkpoints as bf16)."""
    return _DTYPE_BYTES.get(shape.torch_dtype, 2.0)


def estimate_params(shape: ModelShape, *, tp: int = 1, attn_tp: int = 1, online_quant: str | None = None,
                    sharding: Sharding | None = None) -> tuple[float, float]:
    """(total bytes, most loaded rank's bytes) from the config alone."""
    h, layers = shape.hidden_size, shape.num_layers
    base = loaded_dtype_bytes(shape)
    lin = _linear_bytes(shape, online_quant)
    attn_lin = base if shape.quant_scope == "routed-experts" else lin
    sharded, repl, _, _ = _layer_params(shape, attn_tp, tp)
    total = rank = 0.0
    # attention (sharded by attn_tp) and its replicated down-projections
    attn = _attention_layers(shape, sharded)
    total += attn * attn_lin + layers * repl * attn_lin
    rank += attn * attn_lin / attn_tp + layers * repl * attn_lin
    mlp_dense = 3 * h * (shape.dense_intermediate_size or shape.intermediate_size)
    if shape.is_moe:
        moe_layers = shape.num_moe_layers
        dense_layers = layers - moe_layers  # first_k_dense plus the dense layers between interleaved MoE ones
        experts = shape.n_routed_experts * 3 * h * shape.moe_intermediate_size
        shared_width = shape.shared_expert_intermediate
        if shared_width is None:
            shared_width = shape.n_shared_experts * shape.moe_intermediate_size
        shared = 3 * h * shared_width
        router = shape.n_routed_experts * h
        sh = sharding or Sharding()
        per_expert = 3 * h * shape.moe_intermediate_size
        rank_experts = (shape.n_routed_experts + sh.redundant_experts) * per_expert / tp
        shared_lin = lin if shape.shared_experts_quantized else attn_lin
        total += moe_layers * (experts * lin + shared * shared_lin + router * base) + dense_layers * mlp_dense * attn_lin
        rank += moe_layers * (rank_experts * lin + shared * shared_lin / (1 if sh.shared_replicated else tp)
                              + router * base) \
            + dense_layers * mlp_dense * attn_lin / (1 if sh.dense_replicated else tp)
    else:
        total += layers * mlp_dense * lin
        rank += layers * mlp_dense * lin / tp
    untied_head = shape.lm_head and not shape.tie_word_embeddings  # a classification model has no lm_head
    vocab = shape.vocab_size * h * (2 if untied_head else 1)
    total += vocab * base
    sh = sharding or Sharding()
    if sh.embed_tp is None and sh.head_tp is None:
        rank += vocab * base / tp
    else:
        embed = shape.vocab_size * h * base
        rank += embed / (sh.embed_tp or tp) + (embed / (sh.head_tp or tp) if untied_head else 0)
    score = shape.score_params * base  # a classification / reward head: plain nn.Linear, replicated
    total += score
    rank += score
    norms = layers * 2 * h * base
    vision = shape.vision_params * base
    total += norms + vision
    rank += norms + vision / (attn_tp if shape.vision_tp_sharded else 1)
    return total, rank


# Classes that, before SGLang 0.4.0, always built their own ``ParallelLMHead`` and copied the embedding into it for a
# tied checkpoint (0.3.6 ``models/llama.py:305`` and ``:383-421``, ``qwen2.py:276``); 0.4.0 shares the embedding
# (``llama.py:309-314``, ``qwen2.py:280``). Mistral runs on the Llama class.
_SEPARATE_TIED_HEAD_BEFORE_040 = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"})


def as_loaded_by(shape: ModelShape, version: str | None) -> ModelShape:
    """``shape`` as the release lays out its weights: a tied checkpoint still gets a separate lm_head before 0.4.0
    (corpus 28, Llama-3.2-1B on 0.3.5: 2.91 GB logged, 2.44 with the head shared, 2.91 without)."""

    from sglwrap.versions import before

    if (before(version, "0.4.0") and shape.tie_word_embeddings and shape.lm_head
            and shape.architecture in _SEPARATE_TIED_HEAD_BEFORE_040):
        return replace(shape, tie_word_embeddings=False)
    return shape


def _largest_linear_params(shape: ModelShape, tp: int) -> float:
    """Parameters of the largest single linear weight one rank quantises at once (the fused gate/up of a dense MLP,
    or a MoE layer's fused w13 over all its experts), for the transient FP8 copy of online quantisation."""
    h = shape.hidden_size
    dense = 2 * h * (shape.dense_intermediate_size or shape.intermediate_size)
    experts = 2 * h * shape.moe_intermediate_size * shape.n_routed_experts if shape.is_moe else 0
    return max(dense, experts) / tp


def online_load_peak(shape: ModelShape, *, tp: int, attn_tp: int, pp: int, online_quant: str,
                     sharding: Sharding | None, final_rank: float) -> tuple[float, str]:
    """(peak bytes per rank, how) while SGLang quantises a 16-bit checkpoint at load time.

    ``Fp8LinearMethod.create_weights`` (0.4.6 ``fp8.py:251``, 0.5.16 ``:535-541``, 0.5.23 ``:654``) allocates every
    linear weight in the checkpoint's dtype when the checkpoint is not FP8-serialised (``weight_dtype = fp8 if
    is_checkpoint_fp8_serialized else params_dtype``; ``Fp8MoEMethod`` and ``W8A8Fp8LinearMethod`` alike);
    ``DefaultModelLoader.load_model`` builds the whole model, loads every weight, and only then calls
    ``process_weights_after_loading`` module by module (0.5.16 ``model_loader/loader.py:772-849``), which quantises
    each weight into a new FP8 tensor before the 16-bit one is released. So the peak is the whole model in 16 bits
    plus the largest single weight's FP8 copy; what stays is the FP8 model."""
    total16, rank16 = estimate_params(shape, tp=tp, attn_tp=attn_tp, online_quant=None, sharding=sharding)
    rank16 /= pp
    exact = _exact_total(shape.directory)  # the 16-bit checkpoint on disk: its exact size, split like the estimate
    if exact is not None and total16 > 0:
        rank16 = exact[0] * rank16 / total16
    if rank16 <= final_rank:
        return final_rank, ""
    transient = _largest_linear_params(shape, tp) * _linear_bytes(shape, online_quant)
    return rank16 + transient, (f"online --quantization {online_quant}: every linear is created in "
                                f"{shape.torch_dtype} and quantised after loading (peak = the 16-bit model "
                                f"{rank16 / (1 << 30):.2f} GiB/rank + the largest weight's FP8 copy "
                                f"{transient / (1 << 30):.2f} GiB)")


def weights_for(shape: ModelShape, *, tp: int, attn_tp: int, pp: int = 1, online_quant: str | None = None,
                sharding: Sharding | None = None) -> Weights:
    """Weight bytes of the most loaded rank; an exact checkpoint total rescales the estimate. With online
    quantisation (``--quantization fp8`` on a 16-bit checkpoint) the loading peak is kept too (``online_load_peak``)."""
    est_total, est_rank = estimate_params(shape, tp=tp, attn_tp=attn_tp, online_quant=online_quant,
                                          sharding=sharding)
    est_rank /= pp
    peak, peak_how = 0.0, ""
    if online_quant:
        peak, peak_how = online_load_peak(shape, tp=tp, attn_tp=attn_tp, pp=pp, online_quant=online_quant,
                                          sharding=sharding, final_rank=est_rank)
    exact = None if online_quant else _exact_total(shape.directory)
    if exact is not None:
        total, source = exact
        return Weights(total, int(total * est_rank / est_total), source, int(est_total))
    return Weights(int(est_total), int(est_rank), "params x dtype (no checkpoint index found)", int(est_total),
                   int(max(0.0, peak - est_rank)), peak_how)

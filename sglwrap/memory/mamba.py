"""Mamba / linear-attention hybrids: the per-request state pool SGLang 0.5.23 carves out before the KV cache.

Which models: ``srt/configs/hybrid_arch.py:54-153`` (``mambaish_config``: config *classes*). Modelled here, by
``model_type``: the hybrid GDN family (``qwen3_next``, ``qwen3_5``, ``qwen3_5_moe`` and their ``*_text``,
``hybrid_gdn_config`` :54-66) and the Mamba2 family (``nemotron_h``, ``falcon_h1``, ``mamba2_config`` :69-104).
Not modelled (sized as all-full-attention with a note): Kimi-Linear / KDA, Lightning, LFM2, Granite-hybrid, Zaya,
Jet-Nemotron, Inkling, MiniCPM-hybrid, pure Mamba.

State per request (``configs/mamba_utils.py:135-147`` ``mamba_cache_per_req`` and ``:204-253``
``Mamba2StateShape.create``), per linear layer on one attention-TP rank::

    n_groups'  = n_groups rounded up to a multiple of tp when tp does not divide it  (:226-230)
    conv_dim   = intermediate + 2 * n_groups' * state_size
    conv state = (conv_dim / tp, conv_kernel - 1)        x conv dtype  (SGLANG_MAMBA_CONV_DTYPE, bfloat16)
    ssm state  = (num_heads / tp, head_dim, state_size)  x ssm dtype   (--mamba-ssm-dtype > config
                                                                        mamba_ssm_dtype > float32, :47-105)

GDN (``configs/qwen3_next.py:287-313``): intermediate = linear_value_head_dim x linear_num_value_heads,
n_groups = linear_num_key_heads, heads = linear_num_value_heads, head_dim = linear_value_head_dim,
state = linear_key_head_dim; linear layers are those with ``(i + 1) % full_attention_interval != 0`` (:259-285).

Pool (``mem_cache/kv_cache_configurator.py:3229-3409`` ``_handle_max_mamba_cache``, run on ``rest_memory`` before
the KV pool is sized)::

    --max-mamba-cache-size N          K = N // attn_dp                           (:3303-3308)
    radix cache off and --max-running-requests M:  K = max(1, M // attn_dp)      (:3325-3334)
    otherwise (ratio r = --mamba-full-memory-ratio, fallback 0.9):
        budget = rest * r / (1 + r);  K = int((budget - per_req) // per_req)     (:3348-3386)
    K <= 0 -> RuntimeError "Not enough GPU memory for hybrid (mamba/linear-attention) state cache ..."
    rest  -= (K + 1) * per_req        (+1: the pool's padding slot)               (:3404-3409)

The KV pool then gets what is left with only the full-attention layers (``pool_configurator.py:229-236``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sglwrap.record import Record


DEFAULT_MAMBA_FULL_MEMORY_RATIO = 0.9  # arg_groups/fields/schedule.py:220-227 (fallback)
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}  # mamba_utils.py:62-66
_GDN_TYPES = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"})
_MAMBA2_TYPES = frozenset({"nemotron_h", "falcon_h1"})
# overrides.py:369-432: archs whose mamba radix cache may keep the extra state buffer (all modelled ones do).
MAMBA_STATE_SLOTS_BASE = 3  # kv_cache_configurator.py:227 MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
_NEMOTRON_CODES = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}  # configs/nemotron_h.py:35-38


class MambaLayout(Record):
    """Which layers hold recurrent state instead of KV, and the state geometry before TP."""

    family: str  # "gdn" or "mamba2"
    linear_layer_ids: tuple[int, ...]
    full_layer_ids: tuple[int, ...]
    intermediate_size: int
    n_groups: int
    num_heads: int
    head_dim: int
    state_size: int
    conv_kernel: int
    config_ssm_dtype: str | None  # ``mamba_ssm_dtype`` in the (text) config


class StateShape(Record):
    """Per-layer, per-request state on one rank (SGLang's ``Mamba2StateShape`` conv/temporal)."""

    conv: tuple[int, int]
    temporal: tuple[int, int, int]
    conv_bytes: int  # bytes per element
    ssm_bytes: int

    @property
    def per_layer_bytes(self) -> int:
        """Conv + SSM bytes of one layer for one request."""
        return (self.conv[0] * self.conv[1] * self.conv_bytes
                + self.temporal[0] * self.temporal[1] * self.temporal[2] * self.ssm_bytes)


def _nemotron_types(tc: Mapping[str, Any]) -> list[str]:
    lbt = tc.get("layers_block_type")
    if isinstance(lbt, list) and lbt:
        return [str(t) for t in lbt]
    pattern = str(tc.get("hybrid_override_pattern") or "")
    return [_NEMOTRON_CODES.get(c, "?") for c in pattern]


def layout_from_config(model_type: str | None, tc: Mapping[str, Any]) -> MambaLayout | None:
    """The hybrid layout SGLang 0.5.23 builds for this (text) config, or None if it is not a modelled hybrid."""
    dtype = tc.get("mamba_ssm_dtype")
    dtype = str(dtype) if dtype is not None else None
    mt = str(model_type or tc.get("model_type") or "")
    if mt in _GDN_TYPES or tc.get("model_type") in _GDN_TYPES:
        n = int(tc["num_hidden_layers"])
        interval = int(tc["full_attention_interval"])
        full = tuple(i for i in range(n) if (i + 1) % interval == 0)
        nv, vd = int(tc.get("linear_num_value_heads", 32)), int(tc.get("linear_value_head_dim", 128))
        return MambaLayout("gdn", tuple(i for i in range(n) if i not in full), full, nv * vd,
                           int(tc.get("linear_num_key_heads", 16)), nv, vd, int(tc.get("linear_key_head_dim", 128)),
                           int(tc.get("linear_conv_kernel_dim", 4)), dtype)
    if mt == "nemotron_h":  # configs/nemotron_h.py:409-437
        types = _nemotron_types(tc)
        heads, hd = int(tc["mamba_num_heads"]), int(tc["mamba_head_dim"])
        return MambaLayout("mamba2", tuple(i for i, t in enumerate(types) if t == "mamba"),
                           tuple(i for i, t in enumerate(types) if t == "attention"), heads * hd,
                           int(tc.get("n_groups", 8)), heads, hd, int(tc.get("ssm_state_size", 128)),
                           int(tc.get("conv_kernel", 4)), dtype)
    if mt == "falcon_h1":  # configs/falcon_h1.py:210-223, 287-316: attention and mamba in every layer
        n = int(tc["num_hidden_layers"])
        inter = tc.get("mamba_d_ssm")
        inter = int(inter) if inter is not None else int(tc.get("mamba_expand", 2)) * int(tc["hidden_size"])
        heads = int(tc.get("mamba_n_heads", 128))
        d_head = tc.get("mamba_d_head", "auto")
        hd = inter // heads if d_head == "auto" else int(d_head)
        return MambaLayout("mamba2", tuple(range(n)), tuple(range(n)), inter, int(tc.get("mamba_n_groups", 1)),
                           heads, hd, int(tc.get("mamba_d_state", 256)), int(tc.get("mamba_d_conv", 4)), dtype)
    return None


def unmodelled_hybrid(model_type: str | None, arch: str) -> bool:
    """A linear-attention hybrid SGLang gives a state pool that this module does not size (sized as all-full)."""
    names = (str(model_type or "").lower(), arch.lower())
    return any(k in n for n in names for k in ("kimi_linear", "kimilinear", "lfm2", "granitemoehybrid", "zaya",
                                              "jet_nemotron", "jetnemotron", "bailing_hybrid", "minicpm_hybrid",
                                              "falcon_mamba", "falconmamba", "mamba2", "inkling"))


def ssm_dtype(layout: MambaLayout, cli: str | None, env: Mapping[str, str]) -> str:
    """``mamba2_state_dtype``: --mamba-ssm-dtype (exported as SGLANG_MAMBA_SSM_DTYPE, serving_hook.py:439-440),
    else the env var, else the config's ``mamba_ssm_dtype``, else float32; unknown names fall back."""
    for value in (cli, env.get("SGLANG_MAMBA_SSM_DTYPE")):
        if value in _DTYPE_BYTES:
            return str(value)
    if layout.config_ssm_dtype in _DTYPE_BYTES:
        return str(layout.config_ssm_dtype)
    return "float32"


def state_shape(layout: MambaLayout, tp: int, *, ssm: str = "float32", conv: str = "bfloat16") -> StateShape:
    """``Mamba2StateShape.create`` (mamba_utils.py:204-253) for one attention-TP rank."""
    groups = layout.n_groups
    if groups % tp:
        groups += tp - groups  # extra_groups_for_head_shards (:29-38)
    conv_dim = layout.intermediate_size + 2 * groups * layout.state_size
    if conv_dim % tp or layout.num_heads % tp:
        from sglwrap.errors import UsageError

        raise UsageError(f"attention TP {tp} does not divide the linear-attention state (conv_dim {conv_dim}, "
                         f"{layout.num_heads} heads); SGLang's divide() would fail")
    return StateShape((conv_dim // tp, layout.conv_kernel - 1), (layout.num_heads // tp, layout.head_dim,
                                                                  layout.state_size),
                      _DTYPE_BYTES.get(conv, 2), _DTYPE_BYTES[ssm])


def stage_layers(layout: MambaLayout, num_layers: int, pp: int) -> tuple[int, int]:
    """(most linear layers on one PP stage, most full-attention layers on one PP stage)."""
    from sglwrap.memory.swa import pp_stage

    lin, full = set(layout.linear_layer_ids), set(layout.full_layer_ids)
    stages = [pp_stage(num_layers, r, pp) for r in range(pp)]
    return (max(sum(i in lin for i in s) for s in stages), max(sum(i in full for i in s) for s in stages))


def per_request_bytes(layout: MambaLayout, shape: StateShape, num_layers: int, pp: int) -> int:
    """``stage_per_req``: all linear layers' state, scaled to the largest PP stage's share (:3233-3260)."""
    total = shape.per_layer_bytes * len(layout.linear_layer_ids)
    if pp <= 1 or not layout.linear_layer_ids:
        return total
    return int(total * (stage_layers(layout, num_layers, pp)[0] / len(layout.linear_layer_ids)))


def state_slots_per_request(*, disable_radix_cache: bool, strategy: str | None, overlap: bool,
                            page_size: int) -> int:
    """``_calculate_mamba_ratio`` (kv_cache_configurator.py:3072-3096) after the radix-cache strategy resolution
    (overrides.py:453-482: ``auto`` -> extra_buffer when overlap or paging, else no_buffer)."""
    if disable_radix_cache:
        return 1
    strategy = strategy or "auto"
    if strategy == "auto":
        strategy = "extra_buffer" if (overlap or page_size > 1) else "no_buffer"
    if strategy == "extra_buffer":
        return MAMBA_STATE_SLOTS_BASE + (2 if overlap else 1)
    if strategy == "extra_buffer_lazy":
        return MAMBA_STATE_SLOTS_BASE + 1
    return MAMBA_STATE_SLOTS_BASE


class MambaPool(Record):
    """The state pool of one rank and what it leaves for the KV cache."""

    per_request_bytes: int  # stage_per_req
    slots: int  # K = max_mamba_cache_size (per DP shard)
    budget_bytes: float | None  # the ratio path's mamba_budget; None when K was given
    ratio: float | None
    ratio_source: str
    slots_source: str  # "mamba-full-memory-ratio", "--max-mamba-cache-size", "--max-running-requests"
    state_bytes: int  # (K + 1) * per_req + speculative intermediate state
    rest_before: int
    rest_after: int  # what the KV pool is sized from
    slots_per_request: int  # _calculate_mamba_ratio
    error: str | None  # SGLang's RuntimeError when K <= 0
    spec_reserve_bytes: int = 0  # speculative decoding's intermediate state (part of state_bytes)


def not_enough_error(slots: int, rest_bytes: float, per_req: int) -> str:
    """The text of kv_cache_configurator.py:3392-3402."""
    return (f"RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
            f"Computed max_mamba_cache_size={slots} (total_rest_memory={rest_bytes / (1 << 30):.2f} GB, "
            f"mamba_cache_per_req={per_req / (1 << 20):.2f} MB). Try: (1) reduce --max-running-requests, "
            f"(2) increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens, or "
            f"(4) use GPUs with more memory.")


def too_few_requests_error(slots: int, slots_per_request: int, reqs: int) -> str:
    """The text of kv_cache_configurator.py:3151-3159 (the request cap K // ratio reached 0)."""
    return (f"RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
            f"max_mamba_cache_size={slots}, mamba_ratio={slots_per_request}, resulting max_num_reqs={reqs}. "
            f"Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, or "
            f"(3) use GPUs with more memory.")


def size_pool(rest: int, *, per_req: int, ratio: float | None, max_mamba_cache_size: int | None,
              disable_radix_cache: bool, max_running_requests: int | None, attn_dp: int,
              draft_tokens: int | None, slots_per_request: int) -> MambaPool:
    """``_handle_max_mamba_cache`` (kv_cache_configurator.py:3229-3409) on ``rest`` bytes (P*f - W - mm).

    ``draft_tokens`` is --speculative-num-draft-tokens when speculative decoding is on (its intermediate state is
    reserved from the same budget, :3357-3380); ReplaySSM and fused draft entries are not modelled.
    """
    r = ratio if ratio is not None else DEFAULT_MAMBA_FULL_MEMORY_RATIO
    r_source = "--mamba-full-memory-ratio" if ratio is not None else "SGLang fallback 0.9"
    dp = max(1, attn_dp)
    spec = draft_tokens is not None and max_running_requests is not None
    mrr = max(1, (max_running_requests or 1) // dp)
    reserve = 0.0
    budget: float | None = None
    if max_mamba_cache_size is not None:
        k, source = max_mamba_cache_size // dp, "--max-mamba-cache-size"
        if spec:
            reserve = per_req * (min(mrr, k // slots_per_request) + 1) * int(draft_tokens or 0)
    elif disable_radix_cache and max_running_requests is not None:
        k, source = max(1, max_running_requests // dp), "--max-running-requests (radix cache off)"
        if spec:
            reserve = per_req * (k + 1) * int(draft_tokens or 0)
    else:
        source = "--mamba-full-memory-ratio"
        budget = rest * r / (1 + r)
        if spec:
            d = int(draft_tokens or 0)
            k = int((budget - per_req * (1 + d)) // (per_req * (1 + d / slots_per_request)))
            reserve = per_req * (min(mrr, k // slots_per_request) + 1) * d
        else:
            k = int((budget - per_req) // per_req)
    rest_spec = rest - reserve
    error = not_enough_error(k, rest_spec, per_req) if k <= 0 else None
    state = (k + 1) * per_req if k > 0 else 0
    after = int(rest_spec - state) if k > 0 else int(rest_spec)
    return MambaPool(per_req, k, budget, r, r_source, source, int(state + reserve), rest, after,
                     slots_per_request, error, int(reserve))


def min_rest_bytes(pool: MambaPool, kv_page_bytes: int) -> float:
    """Smallest ``rest`` (P*f - W - mm) for which SGLang builds both pools and serves one request: K at least
    the state slots of one request and one KV page left (ratio path inverted; explicit K: K slots + a page)."""
    need_k = max(1, pool.slots_per_request)
    if pool.budget_bytes is None:
        k = max(pool.slots, need_k)
        return float((k + 1) * pool.per_request_bytes + kv_page_bytes)
    r = pool.ratio or DEFAULT_MAMBA_FULL_MEMORY_RATIO
    for_slots = (need_k + 1) * pool.per_request_bytes * (1 + r) / r
    return max(for_slots, kv_page_bytes * (1 + r))

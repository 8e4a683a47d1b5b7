"""KV cache bytes per token per rank, exactly as SGLang 0.5.23 computes them.

Source: ``srt/model_executor/pool_configurator.py:340-535`` (``_compute_cell_size``) and
``model_config.py:1700-1711`` (``get_num_kv_heads``). Speculative decoding adds the draft layers' share
(``pool_configurator.py:259-314``).
"""

from __future__ import annotations

from collections.abc import Mapping

from sglwrap.memory.mamba import StateShape, per_request_bytes, ssm_dtype, stage_layers, state_shape
from sglwrap.memory.model import ModelShape
from sglwrap.memory.swa import pp_stage
from sglwrap.record import Record

_ELEMENT_SIZE = {"auto": 0, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "float32": 4,
                 "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8": 1, "mxfp8": 1}


class Cell(Record):
    """Bytes one token of KV cache costs on one rank, and how it was computed."""

    bytes_per_token: int
    kv_heads_per_rank: int | None  # None for MLA (latent replicated on every rank)
    layers: int
    element_size: int
    formula: str
    swa: SwaCell | None = None  # hybrid SWA pools (then bytes_per_token is the full pool's per token)
    mamba: MambaCell | None = None  # mamba / linear-attention hybrid (bytes_per_token counts full layers only)


class SwaCell(Record):
    """Per-layer bytes of a hybrid SWA model on the most loaded rank (``pool_configurator.py:676-727``)."""

    full_per_layer: int
    swa_per_layer: int
    full_layers: int
    swa_layers: int
    draft_full_layers: int
    ratio: float
    window: int | None


class MambaCell(Record):
    """Recurrent state one request costs on the most loaded rank (``mamba_cache_per_req``, PP-stage share)."""

    per_request_bytes: int
    state: StateShape
    linear_layers: int  # all linear layers (SGLang's per-request state covers them all, then scales by PP)
    full_layers: int  # full-attention layers of the most loaded PP stage (the KV cell's layers)
    ssm_dtype: str
    conv_dtype: str


def element_size(kv_cache_dtype: str, model_dtype: str) -> int:
    """Bytes per KV element: ``auto`` follows the model dtype (bf16/fp16 -> 2)."""
    size = _ELEMENT_SIZE.get(kv_cache_dtype.lower())
    if size is None:
        from sglwrap.errors import UsageError

        raise UsageError(f"--kv-cache-dtype {kv_cache_dtype}: the memory model knows "
                         f"{', '.join(k for k in _ELEMENT_SIZE if k != 'half')}")
    if size == 0:
        size = 4 if model_dtype in ("float32", "fp32") else 2
    return size


def kv_heads_per_rank(shape: ModelShape, attn_tp: int) -> int:
    """``max(1, total_kv_heads // attn_tp)``: heads are replicated when TP exceeds them."""
    return max(1, shape.num_kv_heads // attn_tp)


def mamba_cell(shape: ModelShape, *, attn_tp: int, pp: int, mamba_ssm_dtype: str | None,
               env: Mapping[str, str]) -> MambaCell:
    """Per-request state of a mamba / linear-attention hybrid (``mamba.py``); conv dtype from
    SGLANG_MAMBA_CONV_DTYPE (bfloat16, ``environ.py:1628``)."""
    assert shape.mamba is not None
    ssm = ssm_dtype(shape.mamba, mamba_ssm_dtype, env)
    conv = env.get("SGLANG_MAMBA_CONV_DTYPE", "bfloat16")
    conv = conv if conv in ("float32", "bfloat16", "float16") else "bfloat16"
    st = state_shape(shape.mamba, attn_tp, ssm=ssm, conv=conv)
    _, full = stage_layers(shape.mamba, shape.num_layers, pp)
    return MambaCell(per_request_bytes(shape.mamba, st, shape.num_layers, pp), st,
                     len(shape.mamba.linear_layer_ids), full, ssm, conv)


def cell_bytes(shape: ModelShape, *, attn_tp: int, pp: int = 1, kv_cache_dtype: str = "auto",
               draft_layers: int = 0, swa_ratio: float | None = None, mamba_ssm_dtype: str | None = None,
               env: Mapping[str, str] | None = None) -> Cell:
    """The per-token KV cost on the most loaded rank (PP stage with the most layers).

    With ``swa_ratio`` set and a hybrid-SWA model, the cell describes the two pools (``Cell.swa``). For a
    mamba / linear-attention hybrid only the full-attention layers hold KV (``pool_configurator.py:229-236``)
    and ``Cell.mamba`` carries the per-request state.
    """
    if swa_ratio is not None and shape.swa is not None:
        return _swa_cell(shape, attn_tp=attn_tp, pp=pp, kv_cache_dtype=kv_cache_dtype,
                         draft_layers=draft_layers, ratio=swa_ratio)
    size = element_size(kv_cache_dtype, shape.torch_dtype)
    layers = -(-shape.num_layers // pp)
    mamba = None
    if shape.mamba is not None:
        mamba = mamba_cell(shape, attn_tp=attn_tp, pp=pp, mamba_ssm_dtype=mamba_ssm_dtype, env=env or {})
        layers = mamba.full_layers
    if shape.is_mla:
        dim = int(shape.kv_lora_rank or 0) + int(shape.qk_rope_head_dim or 0)
        cell = dim * layers * size
        formula = f"(kv_lora_rank {shape.kv_lora_rank} + qk_rope {shape.qk_rope_head_dim}) x {layers} layers x {size} B"
        if kv_cache_dtype == "mxfp8":
            cell += dim * layers // 32
        heads = None
    else:
        heads = kv_heads_per_rank(shape, attn_tp)
        cell = heads * (shape.head_dim + shape.v_head_dim) * layers * size
        formula = (f"{heads} KV heads/rank x ({shape.head_dim} + {shape.v_head_dim}) x {layers} layers x {size} B")
        if kv_cache_dtype == "mxfp8":
            cell += heads * (shape.head_dim + shape.v_head_dim) * layers // 32
    if mamba is not None:
        formula += " (full-attention layers only)"
    if draft_layers and layers:
        cell += cell * draft_layers // layers
        formula += f" + {draft_layers} draft layer(s)"
    return Cell(cell, heads, layers, size, formula, mamba=mamba)


def _swa_cell(shape: ModelShape, *, attn_tp: int, pp: int, kv_cache_dtype: str, draft_layers: int,
              ratio: float) -> Cell:
    """Hybrid SWA: full and SWA per-token bytes per layer (``pool_configurator.py:676-727``); the PP stage with
    the largest combined cell (SGLang takes the minimum token count over PP ranks)."""
    assert shape.swa is not None
    lay = shape.swa
    size = element_size(kv_cache_dtype, shape.torch_dtype)
    if shape.is_mla:  # SWA layers reuse the latent dims unless swa_kv_lora_rank is given (model_config.py:1403)
        dim = int(shape.kv_lora_rank or 0) + int(shape.qk_rope_head_dim or 0)
        full_per = swa_per = dim * size
    else:
        heads = kv_heads_per_rank(shape, attn_tp)
        swa_total = lay.swa_num_kv_heads if lay.swa_num_kv_heads is not None else shape.num_kv_heads
        swa_heads = max(1, swa_total // attn_tp)  # get_swa_num_kv_heads (model_config.py:1713-1726)
        swa_hd = lay.swa_head_dim or shape.head_dim
        swa_vhd = lay.swa_v_head_dim or swa_hd
        full_per = heads * (shape.head_dim + shape.v_head_dim) * size
        swa_per = swa_heads * (swa_hd + swa_vhd) * size
        if kv_cache_dtype == "mxfp8":
            full_per += heads * (shape.head_dim + shape.v_head_dim) // 32
            swa_per += swa_heads * (swa_hd + swa_vhd) // 32
    swa_ids, full_ids = set(lay.swa_layer_ids), set(lay.full_layer_ids)
    best: tuple[float, int, int] = (-1.0, 0, 0)
    for rank in range(pp):
        stage = pp_stage(shape.num_layers, rank, pp)
        nf, ns = sum(i in full_ids for i in stage), sum(i in swa_ids for i in stage)
        cost = full_per * nf + ratio * swa_per * ns if nf else float(swa_per * ns)
        best = max(best, (cost, nf, ns))
    _, nf, ns = best
    sc = SwaCell(full_per, swa_per, nf, ns, draft_layers, ratio, lay.window)
    full_b = full_per * (nf + draft_layers)
    formula = (f"full {full_per:,} B x {nf} layers + {ratio:g} x SWA {swa_per:,} B x {ns} layers"
               if nf else f"all-SWA {swa_per:,} B x {ns} layers")
    if draft_layers:
        formula += f" + {draft_layers} draft layer(s)"
    return Cell(full_b if nf else swa_per * ns + full_b, None if shape.is_mla else kv_heads_per_rank(shape, attn_tp),
                nf + ns, size, formula, sc)

"""KV cache bytes per token per rank, exactly as SGLang 0.5.23 computes them.

Source: ``srt/model_executor/pool_configurator.py:340-535`` (``_compute_cell_size``) and
``model_config.py:1700-1711`` (``get_num_kv_heads``). Speculative decoding adds the draft layers' share
(``pool_configurator.py:259-314``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sglwrap.memory.model import ModelShape

_ELEMENT_SIZE = {"auto": 0, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "float32": 4,
                 "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8": 1, "mxfp8": 1}


@dataclass(frozen=True)
class Cell:
    """Bytes one token of KV cache costs on one rank, and how it was computed."""

    bytes_per_token: int
    kv_heads_per_rank: int | None  # None for MLA (latent replicated on every rank)
    layers: int
    element_size: int
    formula: str


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


def cell_bytes(shape: ModelShape, *, attn_tp: int, pp: int = 1, kv_cache_dtype: str = "auto",
               draft_layers: int = 0) -> Cell:
    """The per-token KV cost on the most loaded rank (PP stage with the most layers)."""
    size = element_size(kv_cache_dtype, shape.torch_dtype)
    layers = -(-shape.num_layers // pp)
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
    if draft_layers:
        cell += cell * draft_layers // layers
        formula += f" + {draft_layers} draft layer(s)"
    return Cell(cell, heads, layers, size, formula)

"""Hybrid sliding-window (SWA) KV pools, sized as SGLang 0.5.23 sizes them.

Which models get a hybrid pool: ``srt/configs/model_config.py:2651-2699`` (``is_hybrid_swa_model``, an allow-list
plus ``is_hybrid_swa: true`` in the config) and ``:2702-2826`` (``get_hybrid_layer_ids``). Gemma-2/3, Mistral,
Ministral, Qwen2 and other sliding-window configs are *not* on the list (and Gemma-2/3, Exaone-4 and Olmo-2 are
forced off by ``arg_groups/model_overrides/``), so SGLang gives them an ordinary pool with every layer full.

Pool split: ``srt/model_executor/pool_configurator.py:656-921`` (``HybridSWAPoolConfigurator``)::

    cell        = full_per * n_full + r * swa_per * n_swa            (:796-802, a float)
    full_tokens = page_align(int(available // cell))                 (:908-915, :880)
    swa_tokens  = page_align(int(full_tokens * r))                   (:881)
    all-SWA:      cell = swa_per * n_swa; swa_tokens = page_align(available // cell), no full pool (:786-794, :865)
    reject:       sliding_window + page_size >= swa_tokens  -> "SWA pool (N tokens) cannot hold even one request"

``r`` is ``--swa-full-tokens-ratio`` (fallback 0.8, ``arg_groups/fields/schedule.py:150-163``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sglwrap.record import Record


DEFAULT_SWA_FULL_TOKENS_RATIO = 0.8  # arg_groups/fields/schedule.py:160 (fallback)

# model_config.py:88-96 (SWA_SINK_ARCHS) and :2655-2679 (hybrid_swa_archs), DeepSeek-V4 left out (own configurator).
_SINK_ARCHS = frozenset({"GptOssForCausalLM", "GraniteSWAForCausalLM", "GraniteMoeSWAForCausalLM",
                         "IQuestQ1ForCausalLM", "IQuestQ1MTP"})
_MIMO_ARCHS = frozenset({"MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM"})
_LAYER_TYPES_ARCHS = frozenset({
    "BeamForCausalLM", "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", "EmbeddingGemma2Model",
    "Gemma4UnifiedForConditionalGeneration", "DiffusionGemmaForBlockDiffusion", "LagunaForCausalLM",
    "MellumForCausalLM", "MuseGlimmerForCausalLM", "MuseGlimmerForConditionalGeneration",
})
HYBRID_SWA_ARCHS = frozenset({
    "Llama4ForConditionalGeneration", "Step3p5ForCausalLM", "Step3p7ForConditionalGeneration",
    "InklingForConditionalGeneration", "UnlimitedOCRForCausalLM", "MiMoV2MTP", "Step3p5MTP",
}) | _SINK_ARCHS | _MIMO_ARCHS | _LAYER_TYPES_ARCHS
# Models whose runner window is ``sliding_window - 1`` (their ``get_attention_sliding_window_size``:
# models/gpt_oss.py:131-132, gemma4_causal.py:83-84, gemma4_mm.py:314-315, mellum.py:124-127,
# muse_glimmer.py:119-120, beam.py:1379-1382, gemma4_diffusion.py:513-515); others use the config value
# (model_runner_components/load_model_utils.py:144-156).
_WINDOW_MINUS_ONE = frozenset({"GptOssForCausalLM", "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration",
                               "MellumForCausalLM", "MuseGlimmerForCausalLM", "MuseGlimmerForConditionalGeneration",
                               "BeamForCausalLM", "DiffusionGemmaForBlockDiffusion"})
_WINDOW_KEYS = ("sliding_window_size", "sliding_window", "window_size")  # model_config.py:1961-1966


class SwaLayout(Record):
    """Which layers SGLang keeps in the SWA pool, and the SWA layers' KV geometry."""

    swa_layer_ids: tuple[int, ...]
    full_layer_ids: tuple[int, ...]
    config_window: int | None  # ModelConfig.sliding_window_size (first of sliding_window_size/sliding_window/...)
    window: int | None  # what the runner passes to the pool check (see _WINDOW_MINUS_ONE)
    swa_num_kv_heads: int | None  # ``swa_num_key_value_heads``; None = same as full layers
    swa_head_dim: int | None  # None = head_dim
    swa_v_head_dim: int | None  # None = swa_head_dim


def _is_hybrid(arch: str, tc: Mapping[str, Any]) -> bool:
    """``is_hybrid_swa_model`` (model_config.py:2651-2699)."""
    if arch in HYBRID_SWA_ARCHS:
        if arch == "BeamForCausalLM":
            return "sliding_attention" in (tc.get("layer_types") or [])
        if arch == "LagunaForCausalLM" and not tc.get("sliding_window"):
            return False
        return True
    return bool(tc.get("is_hybrid_swa"))


def _split(ids: list[int], n: int, swa: set[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(i for i in ids if i in swa), tuple(i for i in range(n) if i not in swa)


def _layer_ids(arch: str, tc: Mapping[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``get_hybrid_layer_ids`` (model_config.py:2702-2826): (SWA layer ids, full layer ids)."""
    n = int(tc["num_hidden_layers"])
    types = list(tc.get("layer_types") or [])
    if arch == "Llama4ForConditionalGeneration":  # every 4th layer is global (:2706-2711)
        return tuple(i for i in range(n) if (i + 1) % 4), tuple(i for i in range(n) if (i + 1) % 4 == 0)
    if arch in _SINK_ARCHS or arch in _LAYER_TYPES_ARCHS or arch.startswith("MuseSpark"):
        return (tuple(i for i, t in enumerate(types) if t == "sliding_attention"),
                tuple(i for i, t in enumerate(types) if t == "full_attention"))
    if arch in ("Step3p5ForCausalLM", "Step3p7ForConditionalGeneration"):
        return (tuple(i for i, t in enumerate(types) if t == "sliding_attention" and i < n),
                tuple(i for i, t in enumerate(types) if t == "full_attention" and i < n))
    if arch in ("MiMoV2MTP", "Step3p5MTP"):
        return (0,), ()
    if arch == "UnlimitedOCRForCausalLM":
        return tuple(range(n)), ()
    if arch == "InklingForConditionalGeneration":
        local = {int(i) for i in tc.get("local_layer_ids") or ()}
        return _split(list(range(n)), n, local)
    pattern = tc.get("hybrid_layer_pattern")  # MiMo-V2 and the generic opt-in (1 = SWA, 0 = full)
    if pattern is not None:
        return (tuple(i for i in range(n) if pattern[i] == 1), tuple(i for i in range(n) if pattern[i] == 0))
    return None


def layout_from_config(arch: str, tc: Mapping[str, Any]) -> SwaLayout | None:
    """The hybrid-SWA layout SGLang 0.5.23 builds for this text config, or None for an ordinary pool."""
    if not _is_hybrid(arch, tc):
        return None
    ids = _layer_ids(arch, tc)
    if ids is None or not ids[0]:
        return None  # HybridSWAPoolConfigurator asserts at least one SWA layer (pool_configurator.py:668)
    config_window = next((tc[k] for k in _WINDOW_KEYS if tc.get(k) is not None), None)
    window = config_window
    if arch in _WINDOW_MINUS_ONE and isinstance(config_window, int):
        window = config_window - 1
    elif window is None and tc.get("attention_chunk_size") is not None:  # Llama-4 (load_model_utils.py:151-155)
        window = int(tc["attention_chunk_size"])
    swa_heads = tc.get("swa_num_key_value_heads")
    return SwaLayout(
        swa_layer_ids=ids[0], full_layer_ids=ids[1],
        config_window=int(config_window) if isinstance(config_window, int) else None,
        window=int(window) if isinstance(window, int) else None,
        swa_num_kv_heads=int(swa_heads) if swa_heads is not None else None,
        swa_head_dim=int(tc["swa_head_dim"]) if tc.get("swa_head_dim") is not None else None,
        swa_v_head_dim=int(tc["swa_v_head_dim"]) if tc.get("swa_v_head_dim") is not None else None,
    )


def pp_stage(num_layers: int, rank: int, pp: int) -> range:
    """Layers of PP stage ``rank``: SGLang's ``get_pp_indices`` (distributed/utils.py:110-150), the last
    ``num_layers % pp`` stages get one extra layer (no SGLANG_PP_LAYER_PARTITION)."""
    base, rem = divmod(num_layers, pp)
    if rank >= pp - rem:
        start = rank * (base + 1) - (pp - rem)
        return range(start, start + base + 1)
    return range(rank * base, rank * base + base)


class SwaPool(Record):
    """The two pools of one rank: bytes per token of each, token counts, and SGLang's rejection if any."""

    full_bytes_per_token: int  # full_per * n_full (+ draft full layers)
    swa_bytes_per_token: int  # swa_per * n_swa
    ratio: float
    full_layers: int
    swa_layers: int
    window: int | None
    full_tokens: int
    swa_tokens: int
    error: str | None  # SGLang's error text when the pool is rejected

    @property
    def cell(self) -> float:
        """Bytes one full-pool token costs once its SWA share is added (SGLang's ``_cell_size``)."""
        if self.full_layers == 0:
            return float(self.swa_bytes_per_token + self.full_bytes_per_token)
        return self.full_bytes_per_token + self.ratio * self.swa_bytes_per_token

    @property
    def pool_bytes(self) -> int:
        """Bytes the two pools allocate (padding slot aside)."""
        return self.full_tokens * self.full_bytes_per_token + self.swa_tokens * self.swa_bytes_per_token

    @property
    def max_total_tokens(self) -> int:
        """SGLang's ``max_total_num_tokens``: the full pool, or the SWA pool when every layer is SWA."""
        return self.swa_tokens if self.full_layers == 0 else self.full_tokens


def split_pool(*, full_per: int, swa_per: int, full_layers: int, swa_layers: int, ratio: float,
               available: int, page_size: int, window: int | None, draft_full_layers: int = 0,
               max_tokens: int | None = None) -> SwaPool:
    """``HybridSWAPoolConfigurator.calculate_pool_sizes`` (pool_configurator.py:905-915, 862-893).

    ``full_per``/``swa_per`` are bytes per token per layer on this rank; ``max_tokens`` is --max-total-tokens
    (``calculate_pool_sizes_from_max_tokens``, :917-921, applied when it caps the profiled count).
    """
    full_b = full_per * (full_layers + draft_full_layers)
    swa_b = swa_per * swa_layers
    cell = SwaPool(full_b, swa_b, ratio, full_layers, swa_layers, window, 0, 0, None).cell
    if full_layers == 0:  # all-SWA: integer cell, no full pool, no window check (:786-794, :865-877)
        swa_tokens = (available // (swa_b + full_b) if available > 0 else 0) // page_size * page_size
        if max_tokens is not None:
            swa_tokens = min(swa_tokens, max_tokens // page_size * page_size)
        return SwaPool(full_b, swa_b, ratio, 0, swa_layers, window, 0, swa_tokens, None)
    full_tokens = (int(available // cell) if available > 0 else 0) // page_size * page_size
    error = _window_error(int(full_tokens * ratio) // page_size * page_size, window, page_size)
    if error is None and max_tokens is not None and max_tokens < full_tokens:  # re-solved and re-checked
        full_tokens = max_tokens // page_size * page_size
        error = _window_error(int(full_tokens * ratio) // page_size * page_size, window, page_size)
    swa_tokens = int(full_tokens * ratio) // page_size * page_size
    return SwaPool(full_b, swa_b, ratio, full_layers, swa_layers, window, full_tokens, swa_tokens, error)


def _window_error(swa_tokens: int, window: int | None, page_size: int) -> str | None:
    """``validate_swa_pool_size`` (pool_configurator.py:198-216), run before the pool config is built."""
    if window is None or window + page_size < swa_tokens:
        return None
    return (f"ValueError: SWA pool ({swa_tokens} tokens) cannot hold even one request: the prefill admission "
            f"floor is sliding_window_size ({window}) + page_size ({page_size}). Increase "
            f"--swa-full-tokens-ratio or the total KV budget.")

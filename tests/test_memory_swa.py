"""Hybrid sliding-window pools: token counts for a given free memory, exactly as SGLang 0.5.23's formula gives them.

Expectations are computed here from ``HybridSWAPoolConfigurator`` (``pool_configurator.py:656-921``) and the
config's own numbers, never by calling ``sglwrap.memory.swa``:

    rest        = int(P * f) - W                         (kv_cache_configurator.py:3038, mm reserve 0 here)
    cell        = full_per * n_full + r * swa_per * n_swa
    full_tokens = int(rest // cell) // page * page ;  swa_tokens = int(full_tokens * r) // page * page
    reject when sliding_window - 1 (gpt-oss runner window) + page >= swa_tokens
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglwrap.host.catalogue import resolve_assume
from sglwrap.memory import Observed, plan

CAT = Path(__file__).resolve().parents[1] / "sglwrap" / "data" / "models"
GPT_OSS = CAT / "gpt-oss-120b"
GIB = 1 << 30


def _gpt_oss_numbers() -> tuple[int, int, int, int, int]:
    cfg = json.loads((GPT_OSS / "config.json").read_text())
    types = cfg["layer_types"]
    return (types.count("full_attention"), types.count("sliding_attention"), cfg["num_key_value_heads"],
            cfg["head_dim"], cfg["sliding_window"])


def _plan(model: Path | str, extra: list[str], *, p_gib: float = 100.0, w_gib: float = 60.0, f: float = 0.9,
          tp: int = 1):
    argv = ["--model-path", str(model), "--tp-size", str(tp), "--mem-fraction-static", str(f), *extra]
    return plan(resolve_assume(f"{max(tp, 1)}xH200"), {}, argv, sglang_version="0.5.23",
                observed=Observed(int(p_gib * GIB), int(w_gib * GIB)))


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("ratio", [None, 0.5, 1.0])
@pytest.mark.parametrize("page", [1, 64])
def test_memory_swa_gpt_oss_tokens_equal_sglang_formula(tp: int, ratio: float | None, page: int) -> None:
    n_full, n_swa, kv_heads, head_dim, _ = _gpt_oss_numbers()
    extra = ["--page-size", str(page)] + ([] if ratio is None else ["--swa-full-tokens-ratio", str(ratio)])
    p = _plan(GPT_OSS, extra, tp=tp)
    r = 0.8 if ratio is None else ratio
    per_layer = max(1, kv_heads // tp) * (head_dim + head_dim) * 2  # bf16 K+V, same geometry on both layer kinds
    cell = per_layer * n_full + r * per_layer * n_swa
    rest = int(int(100.0 * GIB) * 0.9) - int(60.0 * GIB)
    full = int(rest // cell) // page * page
    swa = int(full * r) // page * page
    assert (n_full, n_swa) == (18, 18)
    assert p.budget.kv_budget == rest
    assert p.budget.kv_tokens == full
    assert p.budget.swa_tokens == swa
    assert p.budget.kv_pool == full * per_layer * n_full + swa * per_layer * n_swa
    d = p.to_dict()
    assert (d["kv_tokens"], d["swa_tokens"]) == (full, swa)
    assert d["swa"]["window_checked"] == 127 and d["swa"]["sliding_window"] == 128
    assert p.verdict in ("fits", "graph_oom_risk")


def test_memory_swa_pool_too_small_for_one_window_is_rejected_with_sglangs_text() -> None:
    """A budget that leaves the SWA pool at or below window + page: SGLang's ValueError, verdict kv_pool_oom."""
    n_full, n_swa, kv_heads, head_dim, window = _gpt_oss_numbers()
    per_layer = kv_heads * 2 * head_dim * 2
    cell = per_layer * n_full + 0.8 * per_layer * n_swa
    w = int(60.0 * GIB)
    p_bytes = int((w + 100 * cell) / 0.9) + 1  # room for ~100 full tokens
    p = plan(resolve_assume("1xH200"), {}, ["--model-path", str(GPT_OSS), "--mem-fraction-static", "0.9"],
             sglang_version="0.5.23", observed=Observed(p_bytes, w))
    rest = int(p_bytes * 0.9) - w
    full = int(rest // cell)
    swa = int(full * 0.8)
    assert window - 1 + 1 >= swa > 0
    assert p.verdict == "kv_pool_oom"
    assert p.result.sglang_error == (
        f"ValueError: SWA pool ({swa} tokens) cannot hold even one request: the prefill admission floor is "
        f"sliding_window_size ({window - 1}) + page_size (1). Increase --swa-full-tokens-ratio or the total "
        f"KV budget.")
    assert p.exit_code == 78
    assert any("SGLang rejects that pool" in s for s in p.explanation)


def test_memory_swa_ratio_fix_is_suggested_when_a_higher_ratio_clears_the_window() -> None:
    _, _, kv_heads, head_dim, _ = _gpt_oss_numbers()
    per_layer = kv_heads * 2 * head_dim * 2
    w = int(60.0 * GIB)
    p_bytes = int((w + 300 * per_layer * 18 * 1.4) / 0.9)  # ~300 full tokens at r=0.4: SWA 120 < 128
    p = plan(resolve_assume("1xH200"), {}, ["--model-path", str(GPT_OSS), "--mem-fraction-static", "0.9",
                                            "--swa-full-tokens-ratio", "0.4"],
             sglang_version="0.5.23", observed=Observed(p_bytes, w))
    assert p.verdict == "kv_pool_oom"
    assert p.result.fix is not None and p.result.fix.startswith("--swa-full-tokens-ratio 0.45 ")


def _write(tmp_path: Path, name: str, cfg: dict) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def _oss_like(**over: object) -> dict:
    cfg = json.loads((GPT_OSS / "config.json").read_text())
    cfg.pop("quantization_config")
    cfg.update(over)
    return cfg


def test_memory_swa_all_sliding_layers_size_one_pool_without_ratio(tmp_path: Path) -> None:
    """All-SWA (pool_configurator.py:786-794, 865-877): cell = swa_per * n_swa, no ratio, no window check."""
    d = _write(tmp_path, "all-swa", _oss_like(layer_types=["sliding_attention"] * 36))
    p = _plan(d, ["--page-size", "16"])
    cell = 8 * 128 * 2 * 36
    rest = int(int(100.0 * GIB) * 0.9) - int(60.0 * GIB)
    assert p.budget.kv_tokens == p.budget.swa_tokens == rest // cell // 16 * 16
    assert p.to_dict()["swa"]["full_tokens"] == 0


def test_memory_swa_distinct_swa_geometry_uses_swa_heads_and_dims(tmp_path: Path) -> None:
    """MiMo-V2-style keys: swa_num_key_value_heads / swa_head_dim / swa_v_head_dim size the SWA layers."""
    cfg = {"architectures": ["MiMoV2FlashForCausalLM"], "num_hidden_layers": 8, "hidden_size": 4096,
           "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 192, "v_head_dim": 128,
           "swa_num_key_value_heads": 8, "swa_head_dim": 192, "swa_v_head_dim": 128, "sliding_window": 128,
           "hybrid_layer_pattern": [0, 1, 1, 1, 1, 1, 1, 1], "vocab_size": 152576, "intermediate_size": 16384,
           "torch_dtype": "bfloat16", "max_position_embeddings": 32768}
    p = _plan(_write(tmp_path, "mimo", cfg), [], w_gib=10.0, tp=2)
    full_per, swa_per = (4 // 2) * (192 + 128) * 2, (8 // 2) * (192 + 128) * 2
    cell = full_per * 1 + 0.8 * swa_per * 7
    rest = int(int(100.0 * GIB) * 0.9) - int(10.0 * GIB)
    assert p.budget.kv_tokens == int(rest // cell)
    assert p.budget.swa_tokens == int(p.budget.kv_tokens * 0.8)


@pytest.mark.parametrize("arch", ["Gemma3ForCausalLM", "MistralForCausalLM", "Gemma2ForCausalLM"])
def test_memory_swa_sliding_configs_sglang_does_not_split_get_an_ordinary_pool(tmp_path: Path, arch: str) -> None:
    """Not on SGLang 0.5.23's hybrid list (model_config.py:2655-2679): every layer sized as full attention."""
    d = _write(tmp_path, arch, _oss_like(architectures=[arch]))
    p = _plan(d, [])
    assert p.budget.swa_tokens is None and p.to_dict()["swa"] is None
    assert p.cell.bytes_per_token == 8 * 128 * 2 * 36


def test_memory_swa_disable_hybrid_swa_memory_sizes_every_layer_full() -> None:
    p = _plan(GPT_OSS, ["--disable-hybrid-swa-memory"])
    assert p.budget.swa_tokens is None
    assert p.cell.bytes_per_token == 8 * 128 * 2 * 36


def test_memory_swa_max_total_tokens_caps_the_full_pool_and_rescales_swa() -> None:
    p = _plan(GPT_OSS, ["--max-total-tokens", "100000"])
    assert (p.budget.kv_tokens, p.budget.swa_tokens) == (100000, 80000)


def test_memory_swa_table_shows_both_pools() -> None:
    from sglwrap.memory.render import render_table

    out = render_table(_plan(GPT_OSS, []).to_dict())
    assert "hybrid SWA: 18 full + 18 sliding-window layers (window 128), ratio 0.8" in out

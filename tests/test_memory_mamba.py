"""Mamba / linear-attention hybrids: the state pool and the KV tokens for a given free memory, as SGLang 0.5.23.

Expectations are computed here from the Qwen3-Next config's own numbers and SGLang's formulas, in SGLang's own
units (GB floats, ``kv_cache_configurator.py:3229-3409``), never by calling ``sglwrap.memory.mamba``::

    per layer = (conv_dim / tp) x (kernel - 1) x 2 B  +  (v_heads / tp) x v_dim x k_dim x 4 B   (bf16 conv, fp32 ssm)
    conv_dim  = v_heads x v_dim + 2 x k_heads x k_dim;   per_req = per layer x linear layers
    rest_gb   = (int(P*f) - W) / 2**30
    K         = int((rest_gb x r / (1 + r) x 2**30 - per_req) // per_req)          r = 0.9 unless given
    kv bytes  = int((rest_gb - (K + 1) x per_req / 2**30) x 2**30)
    tokens    = kv bytes // (max(1, kv_heads // tp) x (head_dim x 2) x full layers x 2 B), page-aligned
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglwrap.host.catalogue import resolve_assume
from sglwrap.memory import Observed, plan
from sglwrap.memory.render import render_table

QWEN3_NEXT = Path(__file__).resolve().parents[1] / "sglwrap" / "data" / "models" / "Qwen3-Next-80B-A3B"
GIB = 1 << 30


def _cfg() -> dict:
    return json.loads((QWEN3_NEXT / "config.json").read_text())


def _per_req(tp: int, ssm_bytes: int = 4) -> int:
    c = _cfg()
    n_lin = sum(1 for i in range(c["num_hidden_layers"]) if (i + 1) % c["full_attention_interval"])
    conv_dim = c["linear_num_value_heads"] * c["linear_value_head_dim"] + 2 * c["linear_num_key_heads"] * \
        c["linear_key_head_dim"]
    conv = conv_dim // tp * (c["linear_conv_kernel_dim"] - 1) * 2
    ssm = c["linear_num_value_heads"] // tp * c["linear_value_head_dim"] * c["linear_key_head_dim"] * ssm_bytes
    return (conv + ssm) * n_lin


def _cell(tp: int) -> int:
    c = _cfg()
    n_full = c["num_hidden_layers"] // c["full_attention_interval"]
    return max(1, c["num_key_value_heads"] // tp) * 2 * c["head_dim"] * n_full * 2


def _plan(extra: list[str], *, p_gib: float = 100.0, w_gib: float = 60.0, f: float = 0.9, tp: int = 1):
    argv = ["--model-path", str(QWEN3_NEXT), "--tp-size", str(tp), "--mem-fraction-static", str(f), *extra]
    return plan(resolve_assume(f"{max(tp, 1)}xH200"), {}, argv, sglang_version="0.5.23",
                observed=Observed(int(p_gib * GIB), int(w_gib * GIB)))


def _sglang_ratio_path(rest: int, per_req: int, r: float) -> tuple[int, int]:
    """(K, KV bytes) exactly as _handle_max_mamba_cache and _profile_available_bytes compute them."""
    rest_gb = rest / GIB
    budget_bytes = rest_gb * r / (1 + r) * GIB
    k = int((budget_bytes - per_req) // per_req)
    return k, int((rest_gb - (k + 1) * per_req / GIB) * GIB)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("ratio", [None, 0.5, 2.0])
@pytest.mark.parametrize("page", [1, 64])
def test_memory_mamba_qwen3_next_slots_and_tokens_equal_sglang_formula(tp: int, ratio: float | None,
                                                                       page: int) -> None:
    extra = ["--page-size", str(page)] + ([] if ratio is None else ["--mamba-full-memory-ratio", str(ratio)])
    p = _plan(extra, tp=tp)
    r = 0.9 if ratio is None else ratio
    per_req = _per_req(tp)
    rest = int(int(100.0 * GIB) * 0.9) - int(60.0 * GIB)
    k, kv = _sglang_ratio_path(rest, per_req, r)
    tokens = kv // _cell(tp) // page * page
    assert per_req == {1: 77_266_944, 2: 38_633_472, 4: 19_316_736, 8: 9_658_368}[tp]  # SGLang's numbers (TP1-8)
    assert p.cell.bytes_per_token == _cell(tp)
    assert p.budget.kv_budget == kv
    assert p.budget.kv_tokens == tokens
    d = p.to_dict()
    m = d["mamba"]
    assert (m["per_request_bytes"], m["slots"], m["ratio"]) == (per_req, k, r)
    assert m["ratio_source"] == ("SGLang fallback 0.9" if ratio is None else "--mamba-full-memory-ratio")
    assert m["budget_bytes"] == int(rest * r / (1 + r))
    assert (m["linear_layers"], m["full_attention_layers"]) == (36, 12)
    assert d["terms"]["mamba_state"] == (k + 1) * per_req
    assert d["kv_tokens"] == tokens and d["kv_cell_bytes"] == _cell(tp)
    # 5 state slots per request: radix cache on, overlap on -> extra_buffer (3 + 2), kv_cache_configurator:3072-3096
    assert d["max_running_requests"] <= k // 5
    assert p.verdict in ("fits", "graph_oom_risk")


def test_memory_mamba_every_layer_was_full_before() -> None:
    """The KV cell counts only the 12 full-attention layers, not 48."""
    p = _plan([], tp=2)
    assert p.cell.layers == 12
    assert p.cell.bytes_per_token == 1 * 512 * 12 * 2


def test_memory_mamba_max_mamba_cache_size_fixes_the_slots() -> None:
    per_req = _per_req(1)
    p = _plan(["--max-mamba-cache-size", "100"])
    rest = int(int(100.0 * GIB) * 0.9) - int(60.0 * GIB)
    kv = int(rest - 101 * per_req)
    assert p.budget.mamba is not None and p.budget.mamba.slots == 100
    assert p.to_dict()["mamba"]["slots_source"] == "--max-mamba-cache-size"
    assert p.to_dict()["mamba"]["ratio"] is None
    assert p.budget.kv_budget == kv
    assert p.budget.kv_tokens == kv // _cell(1)
    assert p.budget.max_running_requests == 100 // 5


def test_memory_mamba_radix_cache_off_takes_slots_from_max_running_requests() -> None:
    per_req = _per_req(2)
    p = _plan(["--disable-radix-cache", "--max-running-requests", "64"], tp=2)
    rest = int(int(100.0 * GIB) * 0.9) - int(60.0 * GIB)
    assert p.budget.mamba is not None and p.budget.mamba.slots == 64
    assert p.budget.mamba.slots_per_request == 1
    assert p.budget.kv_budget == int(rest - 65 * per_req)
    assert p.budget.max_running_requests == 64


def test_memory_mamba_ssm_dtype_flag_halves_the_ssm_state() -> None:
    p = _plan(["--mamba-ssm-dtype", "bfloat16"], tp=4)
    assert p.budget.mamba is not None
    assert p.budget.mamba.per_request_bytes == _per_req(4, ssm_bytes=2)
    assert p.to_dict()["mamba"]["ssm_dtype"] == "bfloat16"


def test_memory_mamba_zero_slots_is_kv_pool_oom_with_sglangs_text() -> None:
    """rest too small for two state slots: K = 0 and SGLang's RuntimeError (before any KV check)."""
    per_req = _per_req(1)
    w = int(60.0 * GIB)
    rest_target = int(1.5 * per_req * 1.9 / 0.9)  # budget = 1.5 per_req -> K = 0
    p_bytes = int((w + rest_target) / 0.9) + 1
    p = plan(resolve_assume("1xH200"), {}, ["--model-path", str(QWEN3_NEXT), "--mem-fraction-static", "0.9"],
             sglang_version="0.5.23", observed=Observed(p_bytes, w))
    rest = int(p_bytes * 0.9) - w
    k, _ = _sglang_ratio_path(rest, per_req, 0.9)
    assert k == 0
    assert p.verdict == "kv_pool_oom"
    assert p.result.sglang_error == (
        f"RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
        f"Computed max_mamba_cache_size={k} (total_rest_memory={rest / GIB:.2f} GB, "
        f"mamba_cache_per_req={per_req / (1 << 20):.2f} MB). Try: (1) reduce --max-running-requests, "
        f"(2) increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens, or "
        f"(4) use GPUs with more memory.")
    assert p.result.fix is not None and "--mem-fraction-static" in p.result.fix
    assert p.budget.min_mem_fraction_static > 0.9


def test_memory_mamba_weights_over_the_limit_report_the_mamba_error_first() -> None:
    """rest <= 0: SGLang's _handle_max_mamba_cache runs before the 'Loaded weights leave no memory' check."""
    p = _plan([], p_gib=100.0, w_gib=95.0)
    assert p.verdict == "kv_pool_oom"
    assert p.result.sglang_error is not None
    assert p.result.sglang_error.startswith("RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention)")
    assert "total_rest_memory=-5.00 GB" in p.result.sglang_error


def test_memory_mamba_too_few_slots_for_one_request_is_rejected() -> None:
    """K = 3 with 5 slots per request: resolve_max_num_reqs raises (kv_cache_configurator.py:3151-3159)."""
    p = _plan(["--max-mamba-cache-size", "3"])
    assert p.verdict == "kv_pool_oom"
    assert p.result.sglang_error == (
        "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
        "max_mamba_cache_size=3, mamba_ratio=5, resulting max_num_reqs=0. Try: (1) reduce --max-running-requests, "
        "(2) increase --mem-fraction-static, or (3) use GPUs with more memory.")


def test_memory_mamba_table_and_json_report_the_pool() -> None:
    d = _plan([], tp=2).to_dict()
    text = render_table(d)
    assert "mamba/linear attention: 36 linear + 12 full-attention layers" in text
    assert "- mamba/linear-attention state" in text
    assert d["mamba"]["conv_state_shape"] == [4096, 3] and d["mamba"]["ssm_state_shape"] == [16, 128, 128]


def test_memory_mamba_ordinary_models_have_no_mamba_section() -> None:
    p = plan(resolve_assume("1xH200"), {}, ["--model-path", "Qwen3-8B"], sglang_version="0.5.23")
    d = p.to_dict()
    assert d["mamba"] is None and d["terms"]["mamba_state"] == 0
    assert "mamba" not in render_table(d)


def test_memory_mamba_speculative_decoding_reserves_intermediate_state_in_the_budget() -> None:
    """EAGLE with D draft tokens: K from the joint solve, intermediate state for min(M, K // ratio) + 1 requests."""
    per_req, d, m = _per_req(2), 4, 64
    p = _plan(["--speculative-algorithm", "EAGLE", "--speculative-num-draft-tokens", str(d),
               "--max-running-requests", str(m)], tp=2)
    assert p.budget.draft_weights > 0  # SGLang 0.5.23 loads the draft before sizing the pool: it is in W
    rest = int(int(100.0 * GIB) * 0.9) - int(60.0 * GIB) - p.budget.draft_weights
    rest_gb = rest / GIB
    budget_bytes = rest_gb * 0.9 / 1.9 * GIB
    k = int((budget_bytes - per_req * (1 + d)) // (per_req * (1 + d / 5)))
    inter = per_req * (min(m, k // 5) + 1) * d
    kv = int((rest_gb - inter / GIB - (k + 1) * per_req / GIB) * GIB)
    assert p.budget.mamba is not None
    assert (p.budget.mamba.slots, p.budget.mamba.spec_reserve_bytes) == (k, inter)
    assert abs(p.budget.kv_budget - kv) <= 1
    assert p.cell.bytes_per_token == _cell(2) + _cell(2) // 12  # one MTP draft layer's KV share

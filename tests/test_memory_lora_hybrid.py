"""LoRA buffers on a hybrid GatedDeltaNet (linear-attention) MoE model: corpus k766 (Qwen3-Next-80B-A3B with a LoRA
adapter on 8 x H100, SGLang 0.5.7, the default --max-loras-per-batch 8).

The accountant used to size the LoRA pool with 0.5.23's per-expert MoE buffers for every release (149 GiB per rank
at the assumed rank 64), which drove the mamba state budget to -105 GB and blocked the launch. SGLang's LoRA pool
(``lora/mem_pool.py``) has per-expert buffers only from 0.5.10; up to 0.5.9 it allocates the plain 3-D buffers
of ``get_hidden_dim`` (``config.intermediate_size`` for gate_up/down) on every layer. An adapter whose rank is not
known (no --max-lora-rank, no adapter_config.json on this machine) widens the uncertainty instead of blocking.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sglwrap.host.catalogue import resolve_assume
from sglwrap.memory.explain import SURE_FAILURES
from sglwrap.memory import plan
from tests.test_preflight_corpus import CORPUS, _load, bare_python, corpus_env, run_case  # noqa: F401

GIB = 1 << 30
K766 = _load(next(CORPUS.glob("k766_*.yaml")))
FLAGS = [str(f) for f in K766["flags"]]  # Qwen3-Next-80B-A3B, --tp-size 8, --enable-lora, one adapter
H, R, N, TP, LAYERS = 2048, 64, 8, 8, 48  # hidden, assumed rank, default --max-loras-per-batch, TP, layers


def _no_negative_term(d: dict[str, Any]) -> None:
    """Every term of the JSON contract, and the state pool's budget and slots, are >= 0 (SGLang's error text may
    still carry its own negative arithmetic)."""
    negative = {k: v for k, v in d["terms"].items() if k not in ("kv_budget", "runtime_free") and v < 0}
    assert not negative, negative
    m = d["mamba"]
    assert m is not None and m["slots"] >= 0 and (m["budget_bytes"] or 0) >= 0 and m["state_bytes"] >= 0


def _pool_057(r: int, n: int, tp: int) -> int:
    """SGLang 0.5.7 ``LoRAMemoryPool.init_buffers`` for Qwen3-Next (no ``get_hidden_dim`` on the model: the default
    of ``lora/utils.py``), targets qkv/o/gate_up/down on all 48 layers, bf16."""
    heads, kv, hd, inter = 16, 2, 256, 5120
    a = 3 * r * H + r * heads * hd // tp + 2 * r * H + r * inter // tp
    b = hd * (heads + 2 * kv) // tp * r + H * r + 2 * inter // tp * r + H * r
    return LAYERS * (a + b) * n * 2


def test_k766_on_sglang_057_fits_at_the_default_max_loras_per_batch() -> None:
    p = plan(resolve_assume("8xH100"), {}, FLAGS, sglang_version="0.5.7")
    assert p.budget.lora == _pool_057(R, N, TP)  # 0.80 GiB, not 149 GiB of per-expert buffers
    assert p.budget.lora < 1 * GIB
    assert not p.blocks_launch and p.verdict == "fits"
    assert p.budget.mamba is not None and p.budget.mamba.error is None and p.budget.mamba.slots > 1000
    assert p.budget.kv_tokens > 1_000_000
    _no_negative_term(p.to_dict())


@pytest.mark.usefixtures("corpus_env")
def test_k766_preflight_memory_check_does_not_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """The corpus case through the CLI (``sglwrap preflight --json``): the memory check passes."""
    _code, result, _err = run_case(K766, monkeypatch)
    memory = next(c for c in result["checks"] if c["id"] == "memory")
    assert memory["status"] == "pass", memory["reason"]


def test_per_expert_lora_buffers_start_in_sglang_0510() -> None:
    """mem_pool.py: 0.5.9 has no MoE branch; 0.5.10 adds 4-D (n, experts, ...) gate_up/down buffers."""
    facts = resolve_assume("8xH100")
    flags = [*FLAGS, "--max-lora-rank", "16", "--lora-target-modules", "gate_proj", "up_proj", "down_proj"]
    old = plan(facts, {}, flags, sglang_version="0.5.9").budget.lora
    new = plan(facts, {}, flags, sglang_version="0.5.10").budget.lora
    r, e, mi, inter = 16, 512, 512, 5120
    assert old == LAYERS * (2 * r * H + 2 * inter // TP * r + r * inter // TP + H * r) * N * 2
    # 0.5.10-0.5.20: the shared expert's 3-D buffers still take config.intermediate_size
    per_layer = (e * 2 * r * H + 2 * r * H) + (e * 2 * mi / TP * r + 2 * inter / TP * r) + \
        (e * r * mi / TP + r * inter / TP) + (e * H * r + H * r)
    assert new == pytest.approx(LAYERS * per_layer * N * 2, rel=1e-6)
    assert new > 50 * old


def test_k766_on_a_release_with_per_expert_buffers_warns_instead_of_blocking() -> None:
    """0.5.23 sizes per-expert buffers for Qwen3-Next's 512 experts: 149 GiB at rank 64, 19 GiB at rank 8. The
    adapter's rank is not known, so the term carries ± all of it: a warning that names torch's OOM, no block, and
    no negative state pool."""
    p = plan(resolve_assume("8xH100"), {}, FLAGS, sglang_version="0.5.23")
    assert p.budget.lora > 100 * GIB and p.budget.lora_pm == p.budget.lora
    assert p.verdict == "fits_tight" and not p.blocks_launch
    assert p.result.sglang_error is not None and p.result.sglang_error.startswith("torch.OutOfMemoryError")
    assert p.budget.mamba_error is not None and not p.budget.mamba_error_sure
    d = p.to_dict()
    assert d["mamba"]["slots"] == 0 and d["mamba"]["budget_bytes"] == 0
    _no_negative_term(d)


def test_a_lora_pool_that_cannot_fit_still_blocks() -> None:
    """Rank and targets known (--max-lora-rank 64, --lora-target-modules): the 0.5.23 pool is sure not to fit
    after the weights; the fix is fewer adapter slots, which re-plans to fits."""
    facts = resolve_assume("8xH100")
    flags = [*FLAGS, "--max-lora-rank", "64", "--lora-target-modules", "q_proj", "k_proj", "v_proj", "o_proj",
             "gate_proj", "up_proj", "down_proj"]
    p = plan(facts, {}, flags, sglang_version="0.5.23")
    # a sure deficit; the catalogue config has no checkpoint index, so the size is an estimate and it warns (exit 1)
    assert p.verdict == "kv_pool_oom" and p.weights_estimated and not p.blocks_launch and p.exit_code == 1
    assert p.result.sglang_error is not None and "LoRA memory pool" in p.result.sglang_error
    assert p.result.fix is not None and p.result.fix.startswith("--max-loras-per-batch")
    _no_negative_term(p.to_dict())
    one = plan(facts, {}, [*flags, "--max-loras-per-batch", "1"], sglang_version="0.5.23")
    assert one.verdict == "fits"


def test_weights_that_cannot_fit_still_block_with_an_unknown_adapter() -> None:
    """The widened ± of an unknown adapter does not hide a deficit the weights alone make (TP 2: 75 GiB/rank)."""
    flags = [*FLAGS[:FLAGS.index("--tp-size")], "--tp-size", "2", *FLAGS[FLAGS.index("--tp-size") + 2:]]
    p = plan(resolve_assume("2xH100"), {}, flags, sglang_version="0.5.7")
    assert p.verdict in SURE_FAILURES and p.weights_estimated and p.exit_code == 1, p.verdict
    _no_negative_term(p.to_dict())


def test_the_adapters_own_config_sets_rank_and_targets(tmp_path: Path) -> None:
    """SGLang infers max_lora_rank (largest r) and the target modules (union) from adapter_config.json
    (lora_manager.init_lora_shapes); when the adapter directory is on this machine the term is exact."""
    a, b = tmp_path / "a", tmp_path / "b"
    for d, r, mods in ((a, 8, ["q_proj", "v_proj"]), (b, 16, ["o_proj"])):
        d.mkdir()
        (d / "adapter_config.json").write_text(json.dumps({"r": r, "target_modules": mods, "lora_alpha": 16}))
    flags = [*FLAGS[:FLAGS.index("--lora-paths")], "--lora-paths", f"a={a}",
             json.dumps({"lora_name": "b", "lora_path": str(b)})]
    p = plan(resolve_assume("8xH100"), {}, flags, sglang_version="0.5.23")
    r, heads, hd = 16, 16, 256
    qkv = 3 * r * H + (heads * hd / TP + 2 * hd) * r  # TP 8 > 2 KV heads: one whole K and V head per rank (0.5.12+)
    o = r * heads * hd / TP + H * r
    assert p.budget.lora == pytest.approx(LAYERS * (qkv + o) * N * 2, rel=1e-6)
    assert p.budget.lora_pm <= 0.05 * p.budget.lora
    assert "the adapters' largest r" in dict(p.budget.term_sources)["lora"]
    assert p.verdict == "fits"

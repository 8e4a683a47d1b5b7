"""Round 7 second pass (f): DeepEP low_latency prefill chunks against the per-rank dispatch cap
(``prefill_per_rank_over``) and FlashInfer all-reduce fusion with hybrid EP + MoE-TP (an ``args`` operand naming
another dest), each checked at its edges."""

from __future__ import annotations

from sglwrap.compat.kb import validate_entry
from tests.compat_helpers import named_anywhere

DSV3 = ("--model-path", "deepseek-ai/DeepSeek-V3", "--trust-remote-code", "--tp-size", "8")
QWEN = ("--model-path", "Qwen/Qwen3-235B-A22B")


def _fires(entry: str, spec: str, release: str, args: tuple[str, ...], env: dict[str, str] | None = None,
           stack: dict[str, str] | None = None) -> bool:
    return named_anywhere(entry, spec, release, args, env, **(stack or {}))


LL_OLD = (*DSV3, "--dp-size", "8", "--enable-dp-attention", "--enable-deepep-moe", "--deepep-mode", "low_latency")
LL_NEW = (*DSV3, "--dp-size", "8", "--enable-dp-attention", "--moe-a2a-backend", "deepep", "--deepep-mode",
          "low_latency")
CAP = "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"


def test_deepep_low_latency_prefill_hardcoded_cap() -> None:
    e = "deepep-low-latency-prefill-over-cap-0.4.5"
    assert _fires(e, "8xH20", "0.4.6.post4", LL_OLD)  # 8192 / 8 = 1024 per rank > 128
    # 0.4.5 - 0.4.6.post5 ignore the variable; a chunk of 128 x 8 stays within; normal/auto and a PD decode role
    # are not judged; 0.4.7 belongs to the env entry
    assert _fires(e, "8xH20", "0.4.6.post4", LL_OLD, env={CAP: "2048"})
    assert not _fires(e, "8xH20", "0.4.6.post4", (*LL_OLD, "--chunked-prefill-size", "1024"))
    assert not _fires(e, "8xH20", "0.4.6.post4", (*LL_OLD[:-1], "normal"))
    assert not _fires(e, "8xH20", "0.4.6.post4", (*LL_OLD, "--disaggregation-mode", "decode"))
    assert not _fires(e, "8xH20", "0.4.7", LL_OLD)


def test_deepep_low_latency_prefill_env_cap() -> None:
    e = "deepep-low-latency-prefill-over-cap-enable-deepep-moe"
    assert _fires(e, "8xH200", "0.4.8", LL_OLD)
    # PR 7569's launch: 512 over 8 ranks with the cap at 256; the cap raised to the chunk; a chunk over a raised cap;
    # chunked prefill off (whole prompts); an unparsable variable is SGLang's own refusal, not this entry
    assert not _fires(e, "8xH200", "0.4.8", (*LL_OLD, "--chunked-prefill-size", "512"), env={CAP: "256"})
    assert not _fires(e, "8xH200", "0.4.8", LL_OLD, env={CAP: "1024"})
    assert _fires(e, "8xH200", "0.4.8", LL_OLD, env={CAP: "512"})
    assert _fires(e, "8xH200", "0.4.8", (*LL_OLD, "--chunked-prefill-size", "-1"), env={CAP: "1024"})
    assert not _fires(e, "8xH200", "0.4.8", LL_OLD, env={CAP: "many"})
    assert not _fires(e, "8xH200", "0.4.6.post4", LL_OLD)


def test_deepep_low_latency_prefill_a2a_backend() -> None:
    e = "deepep-low-latency-prefill-over-cap"
    assert _fires(e, "8xH200", "0.5.9", LL_NEW)
    assert _fires(e, "8xH200", "0.5.23", LL_NEW)
    assert not _fires(e, "8xH200", "0.5.9", (*LL_NEW, "--chunked-prefill-size", "1024"))
    assert not _fires(e, "8xH200", "0.5.9", (*LL_NEW[:-1], "auto"))
    assert not _fires(e, "8xH200", "0.5.9", (*LL_NEW, "--disaggregation-mode", "decode"))


FUSION = (*QWEN, "--tp-size", "8", "--enable-flashinfer-allreduce-fusion")


def test_fusion_hybrid_ep_moe_tp_edges() -> None:
    e = "fusion-hybrid-ep-moe-tp-under-reduced"
    assert _fires(e, "8xH200", "0.5.15", (*FUSION, "--ep-size", "2"))
    assert _fires(e, "8xH200", "0.5.15", (*FUSION, "--ep-size", "4"))
    assert _fires(e, "4xH100", "0.5.10", (*QWEN, "--tp-size", "4", "--ep-size", "2",
                                          "--enable-flashinfer-allreduce-fusion"))
    # pure EP (ep = tp), pure MoE-TP (ep 1), 0.5.18's own guard, DP attention (no fusion), a GPU without fusion
    assert not _fires(e, "8xH200", "0.5.15", (*FUSION, "--ep-size", "8"))
    assert not _fires(e, "8xH200", "0.5.15", FUSION)
    assert not _fires(e, "8xH200", "0.5.18", (*FUSION, "--ep-size", "2"))
    assert not _fires(e, "8xH200", "0.5.15", (*FUSION, "--ep-size", "2", "--dp-size", "8", "--enable-dp-attention"))
    assert not _fires(e, "8xA100-80G", "0.5.15", (*FUSION, "--ep-size", "2"))


def test_fusion_hybrid_backend_and_auto_edges() -> None:
    backend = (*QWEN, "--tp-size", "8", "--ep-size", "2", "--flashinfer-allreduce-fusion-backend", "trtllm")
    assert _fires("fusion-backend-hybrid-ep-moe-tp-under-reduced", "8xH200", "0.5.15", backend)
    assert not _fires("fusion-backend-hybrid-ep-moe-tp-under-reduced", "8xH200", "0.5.18", backend)
    plain = (*QWEN, "--tp-size", "8", "--ep-size", "2")
    assert _fires("auto-fusion-hybrid-ep-moe-tp-under-reduced", "8xH200", "0.5.15", plain)
    assert not _fires("auto-fusion-hybrid-ep-moe-tp-under-reduced", "8xH200", "0.5.15",
                      (*plain, "--enforce-disable-flashinfer-allreduce-fusion"))
    assert not _fires("auto-fusion-hybrid-ep-moe-tp-under-reduced", "8xH200", "0.5.18", plain)


def test_prefill_per_rank_over_schema() -> None:
    base = {"id": "x", "title": "t", "consequence": "c", "severity": "warn", "fix": "f",
            "sources": ["https://example.org/a"], "checked": "2026-12-02", "evidence": "single"}
    ok = {**base, "applies": {"prefill_per_rank_over": {"cap": 128, "env": "SGLANG_X"}}}
    assert validate_entry(ok, "w") == []
    for bad in ({"cap": "128"}, {"env": "SGLANG_X"}, {"cap": 128, "other": 1}, 128):
        assert validate_entry({**base, "applies": {"prefill_per_rank_over": bad}}, "w")


def test_deepep_low_latency_prefill_only_attention_tp_1() -> None:
    # attention TP > 1 (dp 2 < tp 8) and no DP attention: tokens may be scattered further, not judged
    assert not _fires("deepep-low-latency-prefill-over-cap-0.4.5", "8xH20", "0.4.6.post4",
                      (*DSV3, "--dp-size", "2", "--enable-dp-attention", "--enable-deepep-moe", "--deepep-mode",
                       "low_latency"))
    assert not _fires("deepep-low-latency-prefill-over-cap", "8xH200", "0.5.9",
                      (*DSV3, "--moe-a2a-backend", "deepep", "--deepep-mode", "low_latency"))

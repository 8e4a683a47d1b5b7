"""Scopes narrowed to what the evidence shows: the release code decides where an entry holds, and a launch the code
runs is not caught by a neighbouring case (dense vs MoE FP8 on Ampere, distills of FP8 models, capability major 12
for SM12x checks, the DeepEP buffer mode, the release that lifted a refusal)."""

from __future__ import annotations

from tests.compat_helpers import compat, fires

QWEN3_MOE_FP8 = ("--model-path", "Qwen/Qwen3-30B-A3B-FP8", "--tp-size", "2")
QWEN3_DENSE_FP8 = ("--model-path", "Qwen/Qwen3-8B-FP8")


def test_fp8_moe_experts_on_ampere_block_in_every_release() -> None:
    v = compat("2xRTX-3090", "0.5.23", *QWEN3_MOE_FP8)
    assert v.detail["entries"].get("quant-fp8-e4m3-needs-sm89") == "block"
    assert fires("quant-fp8-e4m3-needs-sm89", "2xRTX-3090", "0.4.7.post1", *QWEN3_MOE_FP8)


def test_dense_fp8_on_ampere_runs_through_marlin_from_0_5_6() -> None:
    assert not fires("quant-fp8-e4m3-needs-sm89", "1xRTX-3090", "0.5.23", *QWEN3_DENSE_FP8)
    assert not fires("quant-fp8-dense-e4m3-needs-sm89-before-0.5.6", "1xRTX-3090", "0.5.23", *QWEN3_DENSE_FP8)
    old = compat("1xRTX-3090", "0.4.7.post1", *QWEN3_DENSE_FP8)
    assert old.detail["entries"].get("quant-fp8-dense-e4m3-needs-sm89-before-0.5.6") == "warn"


def test_deepseek_distills_and_conversions_are_not_native_fp8() -> None:
    argv = ("--tp-size", "4")
    for name in ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "cognitivecomputations/DeepSeek-R1-AWQ"):
        assert not fires("quant-deepseek-native-fp8-ampere", "4xRTX-3090", "0.5.9", "--model-path", name, *argv)
    assert fires("quant-deepseek-native-fp8-ampere", "8xA100-80G", "0.5.9", "--model-path",
                 "deepseek-ai/DeepSeek-R1", "--tp-size", "8", "--trust-remote-code")


def test_sm12x_checks_cover_capability_major_12() -> None:
    # is_sm120 is capability major 12: GB10 (12.1) runs nvfp4 KV and trtllm_mha prefill like an RTX PRO 6000
    assert not fires("attn-nvfp4-kv-arch", "1xGB10", "0.5.23", "--kv-cache-dtype", "nvfp4")
    assert fires("attn-nvfp4-kv-arch", "1xH100", "0.5.23", "--kv-cache-dtype", "nvfp4")
    assert not fires("attn-trtllm-mha-arch", "1xGB10", "0.5.23", "--attention-backend", "trtllm_mha")
    assert fires("attn-trtllm-mha-arch", "1xA100-80G", "0.5.23", "--attention-backend", "trtllm_mha")


def test_cutlass_fp8_moe_assertion_follows_cutlass_fp8_supported() -> None:
    argv = ("--moe-runner-backend", "cutlass", *QWEN3_MOE_FP8)
    assert not fires("quant-cutlass-fp8-moe-arch", "2xRTX-4090", "0.5.23", *argv)
    assert fires("quant-cutlass-fp8-moe-arch", "2xRTX-3090", "0.5.23", *argv)


def test_deepep_nvl_peer_assertion_only_without_the_low_latency_buffer() -> None:
    argv = ("--tp-size", "2", "--nnodes", "2", "--moe-a2a-backend", "deepep")
    assert fires("deepep-normal-small-internode", "1xH100", "0.5.9", *argv, "--deepep-mode", "normal")
    assert not fires("deepep-normal-small-internode", "1xH100", "0.5.9", *argv, "--deepep-mode", "auto")


def test_tilelang_fp8_kv_refusal_ends_where_0_5_22_accepts_it() -> None:
    argv = ("--model-path", "deepseek-ai/DeepSeek-V3.2", "--trust-remote-code", "--tp-size", "8",
            "--dsa-decode-backend", "tilelang", "--dsa-prefill-backend", "tilelang", "--kv-cache-dtype", "fp8_e4m3")
    assert fires("attn-dsa-tilelang-fp8-kv-cuda", "8xH100", "0.5.21", *argv)
    assert not fires("attn-dsa-tilelang-fp8-kv-cuda", "8xH100", "0.5.22", *argv)


def test_a_dense_distill_of_an_moe_family_is_dense() -> None:
    distill = ("--model-path", "RedHatAI/DeepSeek-R1-Distill-Llama-70B-FP8-dynamic", "--tp-size", "4")
    assert not fires("quant-fp8-e4m3-needs-sm89", "4xRTX-3090", "0.5.23", *distill)
    assert fires("quant-fp8-dense-e4m3-needs-sm89-before-0.5.6", "4xRTX-3090", "0.4.7.post1", *distill)

"""Round 6a entries (Blackwell and new architectures), each checked at its edges: the GPU, the release range, the
model family and the user's own flags that decide whether it fires."""

from __future__ import annotations

from sglwrap.preflight import Status
from sglwrap.preflight.checks_compat import entries
from tests.compat_helpers import compat as _run
from tests.compat_helpers import fires as _fires


GLM53 = ("--model-path", "zai-org/GLM-5.3-Flash", "--trust-remote-code")


def test_dsa_trtllm_default_blocks_on_sm12x_only() -> None:
    v = _run("1xGB10", "0.5.20", *GLM53)
    assert v.status is Status.BLOCK and "[attn-dsa-trtllm-default-sm12x]" in v.reason
    assert _fires("attn-dsa-trtllm-default-sm12x", "1xRTX-PRO-6000", "0.5.23", "--model-path",
                  "deepseek-ai/DeepSeek-V3.2", "--trust-remote-code")
    # SM100 runs the trtllm FMHA kernels; GLM-5 (not Flash) on SM12x takes flashinfer_sparse_mla; a user-chosen backend
    # is another entry's business; before the dsa_* backends (0.5.13) the release is not judged.
    assert not _fires("attn-dsa-trtllm-default-sm12x", "8xB200", "0.5.20", *GLM53, "--tp-size", "8")
    assert not _fires("attn-dsa-trtllm-default-sm12x", "8xRTX-PRO-6000", "0.5.20", "--model-path", "zai-org/GLM-5.1-FP8",
                      "--tp-size", "8")
    assert not _fires("attn-dsa-trtllm-default-sm12x", "1xGB10", "0.5.20", *GLM53, "--dsa-decode-backend", "tilelang",
                      "--dsa-prefill-backend", "tilelang", "--kv-cache-dtype", "bfloat16")
    assert not _fires("attn-dsa-trtllm-default-sm12x", "1xRTX-PRO-6000", "0.5.12", "--model-path",
                      "deepseek-ai/DeepSeek-V3.2", "--trust-remote-code")


def test_dsa_trtllm_decode_chosen_by_the_user_blocks_on_sm12x_only() -> None:
    argv = (*GLM53, "--dsa-decode-backend", "trtllm")
    v = _run("1xGB10", "0.5.20", *argv)
    assert v.status is Status.BLOCK and "[attn-dsa-trtllm-decode-sm12x]" in v.reason and "--dsa-decode-backend" in v.fix
    assert not _fires("attn-dsa-trtllm-decode-sm12x", "1xB200", "0.5.20", *argv)


def test_tilelang_dsa_with_an_fp8_kv_cache_by_release() -> None:
    argv = (*GLM53, "--dsa-decode-backend", "tilelang", "--dsa-prefill-backend", "tilelang")
    v = _run("2xGB10", "0.5.20", *argv, "--kv-cache-dtype", "fp8_e4m3", "--tp-size", "2")
    assert v.status is Status.BLOCK and "[attn-dsa-tilelang-fp8-kv-cuda]" in v.reason
    assert "[attn-dsa-tilelang-fp8-kv-cuda-prefill]" in v.reason
    assert not _fires("attn-dsa-tilelang-fp8-kv-cuda", "2xGB10", "0.5.20", *argv, "--kv-cache-dtype", "bfloat16")
    # Before 0.5.17 the same launch boots and fails at decode CUDA-graph capture (another entry, another message).
    old = ("--model-path", "deepseek-ai/DeepSeek-V3.2", "--dsa-decode-backend", "tilelang", "--kv-cache-dtype",
           "fp8_e4m3", "--tp-size", "8")
    assert _fires("attn-dsa-tilelang-fp8-kv-cuda-old", "8xH100", "0.5.15", *old)
    assert not _fires("attn-dsa-tilelang-fp8-kv-cuda", "8xH100", "0.5.15", *old)
    assert not _fires("attn-dsa-tilelang-fp8-kv-cuda-old", "8xH100", "0.5.17", *old)


DSV4 = ("--model-path", "deepseek-ai/DeepSeek-V4-Flash", "--trust-remote-code", "--tp-size", "2")


def test_dsv4_dspark_on_sm12x_only_before_flashinfer_0_6_18() -> None:
    v = _run("2xRTX-PRO-6000", "0.5.16", *DSV4, "--speculative-algorithm", "DSPARK")
    assert v.status is Status.BLOCK and "[dsv4-dspark-sm12x-topk192]" in v.reason
    assert "deepgemm" not in v.reason  # 0.5.16 turns the DeepGEMM DeepSeek-V4 paths off on SM120 by itself
    assert not _fires("dsv4-dspark-sm12x-topk192", "2xRTX-PRO-6000", "0.5.19", *DSV4, "--speculative-algorithm", "DSPARK")
    assert not _fires("dsv4-dspark-sm12x-topk192", "2xB200", "0.5.16", *DSV4, "--speculative-algorithm", "DSPARK")
    assert _run("2xRTX-PRO-6000", "0.5.16", *DSV4).status is not Status.BLOCK


def test_dsv4_deepgemm_on_sm12x_only_before_0_5_13() -> None:
    v = _run("4xRTX-PRO-6000", "0.5.12", "--model-path", "deepseek-ai/DeepSeek-V4-Flash", "--tp-size", "4")
    assert v.status is Status.BLOCK and "[deepgemm-dsv4-sm12x-before-0.5.13]" in v.reason
    assert _run("2xRTX-PRO-6000", "0.5.15", *DSV4).status is not Status.BLOCK
    assert not _fires("deepgemm-dsv4-sm12x-before-0.5.13", "1xGB10", "0.5.13", "--model-path",
                      "deepseek-ai/DeepSeek-V4-Flash")
    # Ampere/Ada have no DeepGEMM DeepSeek-V4 kernels in any release (the older entry).
    assert _fires("deepgemm-hyperconnection-arch", "8xA100", "0.5.20", "--model-path", "deepseek-ai/DeepSeek-V4-Flash",
                  "--tp-size", "8")


GLM5_EAGLE = ("--model-path", "nvidia/GLM-5-NVFP4", "--tp-size", "4", "--speculative-algorithm", "EAGLE",
              "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")


def test_glm5_nvfp4_eagle_draft_moe_is_downgraded_to_triton_from_0_5_12_on_sm10x() -> None:
    v = _run("4xB300", "0.5.12", *GLM5_EAGLE)
    assert v.status is Status.DOWNGRADE and "[glm-dsa-nvfp4-eagle-draft-trtllm-moe]" in v.reason
    assert [(c.feature, c.mode) for c in v.changes] == [("sglang:speculative_moe_runner_backend", "triton")]
    # the user's own target MoE backend stays: only the draft's is set
    mine = _run("4xB300", "0.5.12", *GLM5_EAGLE, "--moe-runner-backend", "flashinfer_trtllm")
    assert mine.status is Status.DOWNGRADE and "[glm-dsa-nvfp4-eagle-draft-trtllm-moe]" in mine.reason
    assert not _fires("glm-dsa-nvfp4-eagle-draft-trtllm-moe", "4xB300", "0.5.11", *GLM5_EAGLE)
    assert not _fires("glm-dsa-nvfp4-eagle-draft-trtllm-moe", "4xB300", "0.5.12", *GLM5_EAGLE,
                      "--speculative-moe-runner-backend", "triton")
    assert not _fires("glm-dsa-nvfp4-eagle-draft-trtllm-moe", "4xH200", "0.5.12", *GLM5_EAGLE)
    assert not _fires("glm-dsa-nvfp4-eagle-draft-trtllm-moe", "4xB300", "0.5.12", "--model-path", "zai-org/GLM-5-FP8",
                      "--tp-size", "4", "--speculative-algorithm", "EAGLE")


MLA = ("--model-path", "deepseek-ai/DeepSeek-V2-Lite-Chat", "--enable-flashinfer-mla")
OLD_FI = {"flashinfer-python": "0.2.2.post1"}


def test_flashinfer_mla_ragged_prefill_on_100kb_smem_gpus_before_flashinfer_0_2_4() -> None:
    v = _run("1xL40", "0.4.3.post3", *MLA, **OLD_FI)
    assert v.status is Status.BLOCK and "[attn-flashinfer-mla-ragged-small-smem]" in v.reason
    assert _fires("attn-flashinfer-mla-ragged-small-smem", "1xRTX-3090", "0.4.4", *MLA, **OLD_FI)
    for gpu in ("1xA100", "1xH100"):  # 164 KB / 228 KB per SM: a non-zero KV tile
        assert not _fires("attn-flashinfer-mla-ragged-small-smem", gpu, "0.4.3.post3", *MLA, **OLD_FI)
    assert not _fires("attn-flashinfer-mla-ragged-small-smem", "1xL40", "0.4.4", *MLA, **{"flashinfer-python": "0.2.4"})
    assert not _fires("attn-flashinfer-mla-ragged-small-smem", "1xL40", "0.4.3.post3", *MLA,
                      "--flashinfer-mla-disable-ragged", **OLD_FI)
    assert not _fires("attn-flashinfer-mla-ragged-small-smem", "1xL40", "0.4.3.post3", "--model-path",
                      "meta-llama/Llama-3.1-8B", "--enable-flashinfer-mla", **OLD_FI)
    # An unstated FlashInfer is a fact nobody knows.
    assert not _fires("attn-flashinfer-mla-ragged-small-smem", "1xL40", "0.4.3.post3", *MLA)


def test_round6a_entries_are_loaded_with_sources() -> None:
    ids = {e.id: e for e in entries()}
    for name in ("attn-dsa-trtllm-default-sm12x", "attn-dsa-trtllm-decode-sm12x", "attn-dsa-tilelang-fp8-kv-cuda",
                 "attn-dsa-tilelang-fp8-kv-cuda-prefill", "attn-dsa-tilelang-fp8-kv-cuda-old",
                 "attn-flashinfer-mla-ragged-small-smem", "deepgemm-dsv4-sm12x-before-0.5.13",
                 "dsv4-dspark-sm12x-topk192", "glm-dsa-nvfp4-eagle-draft-trtllm-moe"):
        assert ids[name].sources and str(ids[name].checked) == "2026-12-01", name

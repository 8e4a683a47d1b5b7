"""Round 8g entries (model loading and formats by release), each checked at its edges: the release range, the model
family and the parallel flags that decide whether it fires."""

from __future__ import annotations

from sglwrap.preflight import Status
from tests.compat_helpers import compat as _run
from tests.compat_helpers import fires as _fires


VL30 = ("--model-path", "Qwen/Qwen3-VL-30B-A3B-Instruct-FP8")


def test_qwen3_vl_moe_pp_blocks_from_0_5_3_to_0_5_9() -> None:
    e = "qwen3-vl-moe-pp-expert-keyerror"
    v = _run("2xH100", "0.5.3", *VL30, "--pp-size", "2")
    assert v.status is Status.BLOCK and f"[{e}]" in v.reason
    assert _fires(e, "4xH200", "0.5.9", "--model-path", "Qwen/Qwen3-VL-235B-A22B-Instruct", "--tp-size", "2",
                  "--pp-size", "2")
    # fixed in 0.5.10; no PP; a dense Qwen3-VL; 0.5.2 has no Qwen3-VL MoE at all
    assert not _fires(e, "2xH100", "0.5.10", *VL30, "--pp-size", "2")
    assert not _fires(e, "2xH100", "0.5.7", *VL30, "--tp-size", "2")
    assert not _fires(e, "2xH100", "0.5.7", "--model-path", "Qwen/Qwen3-VL-8B-Instruct", "--pp-size", "2")
    assert not _fires(e, "2xH100", "0.5.2", *VL30, "--pp-size", "2")


def test_qwen35_moe_pp_blocks_in_0_5_9_only() -> None:
    e = "qwen35-moe-pp-expert-keyerror-0.5.9"
    argv = ("--model-path", "Qwen/Qwen3.5-122B-A10B-FP8", "--tp-size", "1", "--pp-size", "8")
    assert _fires(e, "8xH100", "0.5.9", *argv)
    assert not _fires(e, "8xH100", "0.5.10", *argv)
    assert not _fires(e, "8xH100", "0.5.9", "--model-path", "Qwen/Qwen3.5-122B-A10B-FP8", "--tp-size", "8")
    assert not _fires(e, "8xH100", "0.5.9", "--model-path", "Qwen/Qwen3.5-27B", "--pp-size", "2")


def test_llava_hf_clip_processor_before_0_5_7() -> None:
    e = "llava-hf-clip-processor-before-0.5.7"
    assert _fires(e, "1xH100", "0.5.5.post3", "--model-path", "llava-hf/llava-1.5-7b-hf")
    assert _fires(e, "1xH100", "0.5.6.post2", "--model-path", "/models/llava-1.5-13b-hf")
    assert not _fires(e, "1xH100", "0.5.7", "--model-path", "llava-hf/llava-1.5-7b-hf")
    # the original-format checkpoints (LlavaLlamaForCausalLM) take another processor
    assert not _fires(e, "1xH100", "0.5.5.post3", "--model-path", "liuhaotian/llava-v1.5-7b")


def test_qwen3_embedding_before_0_4_7() -> None:
    e = "qwen3-embedding-before-0.4.7"
    assert _fires(e, "8xA800", "0.4.6.post5", "--model-path", "Qwen/Qwen3-Embedding-8B", "--is-embedding")
    assert not _fires(e, "1xH100", "0.4.7", "--model-path", "Qwen/Qwen3-Embedding-8B", "--is-embedding")
    assert not _fires(e, "1xH100", "0.4.6.post5", "--model-path", "Qwen/Qwen3-8B")

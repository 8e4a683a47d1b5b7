"""Round 7c entries (models, speculative decoding and attention backends), each checked at its edges: the release
range, the GPU, the model family and the user's own flags that decide whether it fires."""

from __future__ import annotations

from tests.compat_helpers import fires as _fires


EAGLE = ("--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "/d", "--speculative-num-steps", "3",
         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")
KIMI = ("--model-path", "moonshotai/Kimi-K2.5", "--tp-size", "8", "--trust-remote-code", "--speculative-algorithm",
        "EAGLE3", "--speculative-draft-model-path", "lightseekorg/kimi-k2.5-eagle3", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")
LLAMA4 = ("--model-path", "meta-llama/Llama-4-Scout-17B-16E-Instruct", "--tp-size", "8")


def test_eagle_swa_target_edges() -> None:
    e = "eagle-swa-target-flashinfer-triton"
    assert _fires(e, "1xA100-80G", "0.5.10.post1", "--model-path", "google/gemma-2-2b-it", *EAGLE)
    assert _fires(e, "1xA100-80G", "0.5.12", "--model-path", "google/gemma-3-4b-it", *EAGLE)
    assert _fires(e, "1xA100-40G", "0.4.9.post2", "--model-path", "google/gemma-3-12b-it", *EAGLE)
    # range ends, a full-attention target, no speculative decoding, Gemma 3n, a user-chosen fa3 backend
    assert not _fires(e, "1xA100-80G", "0.5.13", "--model-path", "google/gemma-3-4b-it", *EAGLE)
    assert not _fires(e, "1xA100-80G", "0.4.9", "--model-path", "google/gemma-3-4b-it", *EAGLE)
    assert not _fires(e, "1xH100", "0.5.10.post1", "--model-path", "meta-llama/Llama-3.1-8B-Instruct", *EAGLE)
    assert not _fires(e, "1xA100-80G", "0.5.10.post1", "--model-path", "google/gemma-3-4b-it")
    assert not _fires(e, "1xA100-80G", "0.5.10.post1", "--model-path", "google/gemma-3n-E4B-it", *EAGLE)
    assert not _fires(e, "1xH100", "0.5.10.post1", "--model-path", "google/gemma-3-4b-it", *EAGLE,
                      "--attention-backend", "fa3")
    # Hopper: the release picks fa3 by itself there, which does not take the crashing path; Blackwell picks flashinfer
    assert not _fires(e, "1xH100", "0.5.10.post1", "--model-path", "google/gemma-3-4b-it", *EAGLE)
    assert _fires(e, "1xB200", "0.5.10.post1", "--model-path", "google/gemma-3-4b-it", *EAGLE)


def test_llama4_attention_backend_required_edges() -> None:
    e = "llama4-attention-backend-required"
    assert _fires(e, "8xH100", "0.5.5.post2", *LLAMA4)
    assert _fires(e, "8xB200", "0.5.2", *LLAMA4)
    # 0.5.6 picks one itself; a given backend is not this entry's business; other models; 0.4.x is left out
    assert not _fires(e, "8xH100", "0.5.6", *LLAMA4)
    assert not _fires(e, "8xH100", "0.5.5.post2", *LLAMA4, "--attention-backend", "fa3")
    assert not _fires(e, "8xH100", "0.5.5.post2", "--model-path", "meta-llama/Llama-3.1-70B-Instruct", "--tp-size", "8")
    assert not _fires(e, "8xH100", "0.4.10.post2", *LLAMA4)


def test_eagle3_draft_inherits_mla_backend_edges() -> None:
    e = "eagle3-draft-inherits-mla-backend-sm100"
    assert _fires(e, "8xB200", "0.5.9", *KIMI)
    assert _fires(e, "8xB300", "0.5.10.post1", *KIMI)
    # Hopper picks no trtllm_mla; a draft backend given; a non-MLA backend given; no EAGLE3; range ends
    assert not _fires(e, "8xH200", "0.5.9", *KIMI)
    assert not _fires(e, "8xB200", "0.5.9", *KIMI, "--speculative-draft-attention-backend", "trtllm_mha")
    assert not _fires(e, "8xB200", "0.5.9", *KIMI, "--attention-backend", "flashinfer")
    assert not _fires(e, "8xB200", "0.5.9", "--model-path", "moonshotai/Kimi-K2.5", "--tp-size", "8",
                      "--trust-remote-code")
    assert not _fires(e, "8xB200", "0.5.8", *KIMI)
    assert not _fires(e, "8xB200", "0.5.15", *KIMI)

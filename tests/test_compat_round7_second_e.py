"""Round 7 second pass (helper e): bitsandbytes without the package, EAGLE with an unset topk on SM100 in 0.5.6.post1 -
0.5.6.post2, Qwen3.8-Flash-Next-FP8 without EP; each entry checked at its edges, plus the two code changes they need
(bitsandbytes probed and kept across a planned release; 0.5.6.post1/post2's own backend default)."""

from __future__ import annotations

import json
from pathlib import Path

from sglwrap.host import stack
from sglwrap.host.catalogue import resolve_assume
from sglwrap.host.probe import RELEASE_PINNED, apply_assume_stack
from sglwrap.sglang.resolved import GpuInfo, ModelTraits, resolve_server_args
from tests.compat_helpers import fires


def _fires(entry: str, spec: str, stack_: dict[str, str], *argv: str) -> bool:
    rest = dict(stack_)
    return fires(entry, spec, rest.pop("sglang"), *argv, **rest)


BNB = ("--model-path", "unsloth/llama-3-8b-bnb-4bit")


def test_bitsandbytes_is_probed_and_survives_a_planned_release() -> None:
    assert "bitsandbytes" in stack.PACKAGES and "bitsandbytes" not in RELEASE_PINNED
    f = resolve_assume("1xA100-80G")
    f = f.__class__(**{**f.__dict__, "packages": {"sglang": "0.5.9", "bitsandbytes": "0.46.1", "torch": "2.8.0"}})
    planned = apply_assume_stack(f, {"sglang": "0.5.23"})
    assert planned.packages.get("bitsandbytes") == "0.46.1" and "torch" not in planned.packages


def test_bnb_load_format_edges() -> None:
    e = "bnb-load-format-needs-bitsandbytes"
    lf = ("--load-format", "bitsandbytes")
    assert _fires(e, "1xA100-80G", {"sglang": "0.4.1.post4", "vllm": "0.6.4.post1"}, *BNB, *lf)
    assert _fires(e, "1xA100-80G", {"sglang": "0.5.23"}, *BNB, *lf)
    # installed; another load format (0.4.0 and older have no bitsandbytes choice: the parser refuses it)
    assert not _fires(e, "1xA100-80G", {"sglang": "0.5.23", "bitsandbytes": "0.46.1"}, *BNB, *lf)
    assert not _fires(e, "1xA100-80G", {"sglang": "0.5.23"}, *BNB)
    assert not _fires(e, "1xA100-80G", {"sglang": "0.5.23", "vllm": "0.11.0"}, *BNB, "--load-format", "safetensors")


def test_bnb_quantization_flag_edges() -> None:
    e = "bnb-quantization-needs-bitsandbytes"
    q = ("--quantization", "bitsandbytes")
    assert _fires(e, "1xA100-80G", {"sglang": "0.5.8"}, "--model-path", "meta-llama/Llama-3.1-8B-Instruct", *q)
    assert not _fires(e, "1xA100-80G", {"sglang": "0.5.8", "bitsandbytes": "0.46.1"},
                      "--model-path", "meta-llama/Llama-3.1-8B-Instruct", *q)
    # vllm's method (before 0.5.4.post2) and the releases without the method are left out
    assert not _fires(e, "1xA100-80G", {"sglang": "0.5.7"}, "--model-path", "meta-llama/Llama-3.1-8B-Instruct", *q)
    assert not _fires(e, "1xA100-80G", {"sglang": "0.5.3", "vllm": "0.10.1"},
                      "--model-path", "meta-llama/Llama-3.1-8B-Instruct", *q)


def test_bnb_checkpoint_edges(tmp_path: Path) -> None:
    model = tmp_path / "llama-bnb"
    model.mkdir()
    cfg = json.loads((Path(__file__).resolve().parent.parent / "sglwrap" / "data" / "models" / "Llama-3.1-8B"
                      / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}
    (model / "config.json").write_text(json.dumps(cfg))
    e = "bnb-checkpoint-needs-bitsandbytes"
    assert _fires(e, "1xA100-80G", {"sglang": "0.5.23"}, "--model-path", str(model))
    assert not _fires(e, "1xA100-80G", {"sglang": "0.5.23", "bitsandbytes": "0.46.1"}, "--model-path", str(model))
    assert not _fires(e, "1xA100-80G", {"sglang": "0.5.23"}, "--model-path", "meta-llama/Llama-3.1-8B-Instruct")
    n = "bnb-named-checkpoint-needs-bitsandbytes"
    assert _fires(n, "1xA100-80G", {"sglang": "0.5.9"}, *BNB)
    assert not _fires(n, "1xA100-80G", {"sglang": "0.5.7"}, *BNB)
    assert not _fires(n, "1xA100-80G", {"sglang": "0.5.9", "bitsandbytes": "0.48.0"}, *BNB)
    assert not _fires(n, "1xA100-80G", {"sglang": "0.5.9"}, "--model-path", str(model))  # read: the other entry


LLAMA_EAGLE3 = ("--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--speculative-algorithm", "EAGLE3",
                "--speculative-draft-model-path", "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B")


def test_0_5_6_post_releases_pick_trtllm_mha_with_an_unset_topk() -> None:
    b200 = GpuInfo(183359, (10, 0), "NVIDIA B200")
    pro = GpuInfo(97887, (12, 0), "NVIDIA RTX PRO 6000 Blackwell Server Edition")
    llama = ModelTraits(architectures=("LlamaForCausalLM",))
    spec = {"speculative_algorithm": "EAGLE3"}
    assert resolve_server_args(spec, "0.5.6.post2", b200, llama).attention_backend == "trtllm_mha"
    assert resolve_server_args(spec, "0.5.7", b200, llama).attention_backend == "flashinfer"  # PR 15127
    assert resolve_server_args({**spec, "speculative_eagle_topk": 4}, "0.5.6.post2", b200, llama
                               ).attention_backend == "flashinfer"
    assert resolve_server_args({}, "0.5.6.post1", pro, llama).attention_backend == "trtllm_mha"  # is_blackwell()
    assert resolve_server_args({}, "0.5.7", pro, llama).attention_backend == "flashinfer"


def test_eagle_topk_unset_auto_trtllm_mha_edges() -> None:
    e = "eagle-topk-unset-auto-trtllm-mha"
    assert _fires(e, "1xB200", {"sglang": "0.5.6.post2"}, *LLAMA_EAGLE3)
    assert _fires(e, "1xB200", {"sglang": "0.5.6.post1"}, *LLAMA_EAGLE3)
    # fixed in 0.5.7; no trtllm_mha default in 0.5.6; Hopper; parameters given; a backend given; a (3, 1, 4) arch
    assert not _fires(e, "1xB200", {"sglang": "0.5.7"}, *LLAMA_EAGLE3)
    assert not _fires(e, "1xB200", {"sglang": "0.5.6"}, *LLAMA_EAGLE3)
    assert not _fires(e, "1xH100", {"sglang": "0.5.6.post2"}, *LLAMA_EAGLE3)
    assert not _fires(e, "1xB200", {"sglang": "0.5.6.post2"}, *LLAMA_EAGLE3, "--speculative-num-steps", "3",
                      "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")
    assert not _fires(e, "1xB200", {"sglang": "0.5.6.post2"}, *LLAMA_EAGLE3, "--attention-backend", "flashinfer")
    assert not _fires(e, "8xB200", {"sglang": "0.5.6.post2"}, "--model-path", "openai/gpt-oss-120b", "--tp-size",
                      "8", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/d")


FLASH_NEXT = ("--model-path", "Qwen/Qwen3.8-Flash-Next-FP8")


def test_qwen38_flash_next_fp8_tp_without_ep_edges() -> None:
    e = "qwen38-flash-next-fp8-tp-without-ep"
    assert _fires(e, "8xH100", {"sglang": "0.5.20"}, *FLASH_NEXT, "--tp-size", "4")
    assert _fires(e, "8xH100", {"sglang": "0.5.23"}, *FLASH_NEXT, "--tp-size", "8")
    # EP equal to TP; one GPU; 0.5.19 has no such model; the bf16 checkpoint
    assert not _fires(e, "8xH100", {"sglang": "0.5.20"}, *FLASH_NEXT, "--tp-size", "4", "--ep-size", "4")
    assert not _fires(e, "8xH100", {"sglang": "0.5.20"}, *FLASH_NEXT)
    assert not _fires(e, "8xH100", {"sglang": "0.5.19"}, *FLASH_NEXT, "--tp-size", "4")
    assert not _fires(e, "8xH100", {"sglang": "0.5.20"}, "--model-path", "Qwen/Qwen3.8-Flash-Next", "--tp-size", "4")

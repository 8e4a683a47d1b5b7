"""Round 6c entries at their edges, through the CLI as the corpus runs it: each fires inside its release range and
family, not outside it, and the working setups next to the failures stay unblocked."""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_preflight_corpus import bare_python, corpus_env, run_case  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("corpus_env")


def _run(monkeypatch: pytest.MonkeyPatch, gpus: str, stack: dict[str, str], flags: list[str],
         env: dict[str, str] | None = None) -> dict[str, Any]:
    doc = {"gpus": gpus, "stack": stack, "flags": flags, "env": env or {}}
    _code, result, _err = run_case(doc, monkeypatch)
    assert result["verdict"] != "refused", result["checks"]  # the command line itself must be one SGLang takes
    assert any(c["id"] == "compat" for c in result["checks"])
    return result


def _status(result: dict[str, Any], entry: str) -> str | None:
    """The status of the compat check when it names ``entry``, else None."""
    for c in result["checks"]:
        if c["id"] == "compat" and f"[{entry}]" in c["reason"]:
            return str(c["status"])
    return None


FP16 = "hybrid-gdn-fp16-conv-state"
GPTQ = "hybrid-gdn-gptq-fp16-conv-state"


@pytest.mark.parametrize("release", ["0.5.9", "0.5.15.post1", "0.5.23"])
def test_fp16_hybrid_gdn_fires_from_0_5_9(monkeypatch: pytest.MonkeyPatch, release: str) -> None:
    r = _run(monkeypatch, "1xH100", {"sglang": release}, ["--model-path", "Qwen/Qwen3.6-27B", "--dtype", "float16"])
    # the user's float16 stays; the conv state follows it (the variable the user did not set)
    assert _status(r, FP16) == "downgrade" and r["verdict"] == "downgraded"
    assert "SGLANG_MAMBA_CONV_DTYPE=float16" in next(c["reason"] for c in r["checks"] if c["id"] == "compat")


@pytest.mark.parametrize(("release", "flags", "env"), [
    ("0.5.8", ["--model-path", "Qwen/Qwen3-Next-80B-A3B-Instruct", "--tp", "4", "--dtype", "float16"], None),
    ("0.5.15.post1", ["--model-path", "Qwen/Qwen3.6-27B", "--dtype", "float16"], {"SGLANG_MAMBA_CONV_DTYPE": "float16"}),
    ("0.5.15.post1", ["--model-path", "Qwen/Qwen3.6-27B", "--dtype", "bfloat16"], None),
    ("0.5.15.post1", ["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--dtype", "float16"], None),
])
def test_fp16_hybrid_gdn_stays_quiet_outside(monkeypatch: pytest.MonkeyPatch, release: str, flags: list[str],
                                              env: dict[str, str] | None) -> None:
    r = _run(monkeypatch, "4xH100", {"sglang": release}, flags, env)
    assert _status(r, FP16) is None


def test_gptq_hybrid_gdn_is_downgraded_to_a_float16_conv_state(monkeypatch: pytest.MonkeyPatch) -> None:
    r = _run(monkeypatch, "1xRTX-5090", {"sglang": "0.5.10"}, ["--model-path", "Qwen/Qwen3.5-35B-A3B-GPTQ-Int4"])
    assert _status(r, GPTQ) == "downgrade" and r["verdict"] == "downgraded"
    assert "SGLANG_MAMBA_CONV_DTYPE=float16" in next(c["reason"] for c in r["checks"] if c["id"] == "compat")


@pytest.mark.parametrize(("model", "extra"), [
    ("Qwen/Qwen3.5-35B-A3B-GPTQ-Int4", ["--dtype", "bfloat16"]),
    ("cyankiwi/Qwen3.5-27B-AWQ-4bit", []),
    ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", []),
])
def test_gptq_hybrid_gdn_needs_the_family_the_format_and_float16(monkeypatch: pytest.MonkeyPatch, model: str,
                                                                  extra: list[str]) -> None:
    r = _run(monkeypatch, "1xRTX-5090", {"sglang": "0.5.10"}, ["--model-path", model, *extra])
    assert _status(r, GPTQ) is None


SPEC = "hybrid-gdn-speculative-radix-no-buffer-refused"
MTP = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
       "--speculative-num-draft-tokens", "4"]


@pytest.mark.parametrize("release", ["0.5.10", "0.5.13.post1"])
def test_speculative_radix_no_buffer_refused_in_range(monkeypatch: pytest.MonkeyPatch, release: str) -> None:
    r = _run(monkeypatch, "4xH200", {"sglang": release},
             ["--model-path", "Qwen/Qwen3.5-122B-A10B", "--tp-size", "4", *MTP])
    assert _status(r, SPEC) == "block"


@pytest.mark.parametrize(("release", "extra"), [
    ("0.5.9", []),
    ("0.5.14", []),
    ("0.5.10", ["--disable-radix-cache"]),
    ("0.5.10", ["--mamba-scheduler-strategy", "extra_buffer"]),
])
def test_speculative_radix_no_buffer_outside(monkeypatch: pytest.MonkeyPatch, release: str, extra: list[str]) -> None:
    r = _run(monkeypatch, "4xH200", {"sglang": release},
             ["--model-path", "Qwen/Qwen3.5-122B-A10B", "--tp-size", "4", *MTP, *extra])
    assert _status(r, SPEC) is None


VL = "qwen3-vl-eagle-before-0.5.11"


def test_qwen3_vl_eagle3_blocked_before_0_5_11(monkeypatch: pytest.MonkeyPatch) -> None:
    r = _run(monkeypatch, "1xH100", {"sglang": "0.5.10.post1"},
             ["--model-path", "Qwen/Qwen3-VL-8B-Instruct", "--speculative-algorithm", "EAGLE3",
              "--speculative-draft-model-path", "some/draft"])
    assert _status(r, VL) == "block" and r["verdict"] == "blocked"


@pytest.mark.parametrize(("release", "model", "algo"), [
    ("0.5.11", "Qwen/Qwen3-VL-8B-Instruct", "EAGLE3"),
    ("0.5.10", "Qwen/Qwen2.5-VL-7B-Instruct", "EAGLE3"),
    ("0.5.10", "Qwen/Qwen3-VL-8B-Instruct", "NGRAM"),
])
def test_qwen3_vl_eagle_outside(monkeypatch: pytest.MonkeyPatch, release: str, model: str, algo: str) -> None:
    flags = ["--model-path", model, "--speculative-algorithm", algo]
    if algo != "NGRAM":
        flags += ["--speculative-draft-model-path", "some/draft"]
    r = _run(monkeypatch, "1xH100", {"sglang": release}, flags)
    assert _status(r, VL) is None


KIMI = ["--model-path", "moonshotai/Kimi-Linear-48B-A3B-Instruct", "--tp-size", "2", "--trust-remote-code"]


def test_kimi_linear_flashinfer_blocked_until_0_5_10(monkeypatch: pytest.MonkeyPatch) -> None:
    r = _run(monkeypatch, "2xH100", {"sglang": "0.5.9"}, [*KIMI, "--attention-backend", "flashinfer"])
    assert _status(r, "kimi-linear-mla-scaling") == "block"
    fixed = _run(monkeypatch, "2xH100", {"sglang": "0.5.10"}, [*KIMI, "--attention-backend", "flashinfer"])
    assert _status(fixed, "kimi-linear-mla-scaling") is None
    triton = _run(monkeypatch, "2xH100", {"sglang": "0.5.9"}, [*KIMI, "--attention-backend", "triton"])
    assert _status(triton, "kimi-linear-mla-scaling") is None


def test_kimi_linear_default_downgraded_on_sm100_only(monkeypatch: pytest.MonkeyPatch) -> None:
    r = _run(monkeypatch, "2xB200", {"sglang": "0.5.7"}, KIMI)
    assert _status(r, "kimi-linear-mla-scaling-sm100-default") == "downgrade" and r["verdict"] == "downgraded"
    hopper = _run(monkeypatch, "2xH100", {"sglang": "0.5.7"}, KIMI)
    assert _status(hopper, "kimi-linear-mla-scaling-sm100-default") is None
    assert hopper["verdict"] != "blocked"


AWQ = "quant-awq-gptq-needs-vllm"


@pytest.mark.parametrize("release", ["0.4.4.post3", "0.4.6.post5", "0.4.10.post2"])
def test_awq_without_vllm_blocked_in_range(monkeypatch: pytest.MonkeyPatch, release: str) -> None:
    r = _run(monkeypatch, "1xH100", {"sglang": release, "vllm": "none"}, ["--model-path", "Qwen/Qwen2.5-7B-Instruct-AWQ"])
    assert _status(r, AWQ) == "block"
    unknown = _run(monkeypatch, "1xH100", {"sglang": release}, ["--model-path", "Qwen/Qwen2.5-7B-Instruct-AWQ"])
    assert _status(unknown, AWQ) == "warn"  # whether vllm is installed is not known: no block on it


@pytest.mark.parametrize(("stack", "model"), [
    ({"sglang": "0.4.7", "vllm": "0.9.0.1"}, "Qwen/Qwen2.5-7B-Instruct-AWQ"),
    ({"sglang": "0.5.1"}, "Qwen/Qwen2.5-7B-Instruct-AWQ"),
    ({"sglang": "0.4.4.post1"}, "Qwen/Qwen2.5-7B-Instruct-AWQ"),
    ({"sglang": "0.4.7"}, "Qwen/Qwen2.5-7B-Instruct"),
])
def test_awq_without_vllm_outside(monkeypatch: pytest.MonkeyPatch, stack: dict[str, str], model: str) -> None:
    r = _run(monkeypatch, "1xH100", stack, ["--model-path", model])
    assert _status(r, AWQ) is None and _status(r, "quant-awq-gptq-flag-needs-vllm") is None


def test_awq_flag_without_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    r = _run(monkeypatch, "1xH100", {"sglang": "0.4.8", "vllm": "none"}, ["--model-path", "/models/mine",
                                                                         "--quantization", "awq"])
    assert _status(r, "quant-awq-gptq-flag-needs-vllm") == "block"
    moe = _run(monkeypatch, "1xH100", {"sglang": "0.4.8"}, ["--model-path", "/models/mine-AWQ",
                                                            "--quantization", "moe_wna16"])
    assert _status(moe, AWQ) is None and _status(moe, "quant-awq-gptq-flag-needs-vllm") is None


def test_gguf_without_vllm_until_0_5_4_post2(monkeypatch: pytest.MonkeyPatch) -> None:
    flags = ["--model-path", "/models/x.gguf", "--quantization", "gguf"]
    assert _status(_run(monkeypatch, "1xA100", {"sglang": "0.5.4", "vllm": "none"}, flags),
                   "quant-gguf-needs-vllm") == "block"
    assert _status(_run(monkeypatch, "1xA100", {"sglang": "0.5.4.post2"}, flags), "quant-gguf-needs-vllm") is None
    file_only = _run(monkeypatch, "1xA100", {"sglang": "0.4.9", "vllm": "none"}, ["--model-path", "/models/x.gguf"])
    assert _status(file_only, "quant-gguf-file-needs-vllm") == "block"


def test_wna16_without_vllm_0_5_1_to_0_5_3(monkeypatch: pytest.MonkeyPatch) -> None:
    flags = ["--model-path", "RedHatAI/Qwen3-8B-quantized.w4a16"]
    entry = "compressed-tensors-wna16-needs-vllm"
    assert _status(_run(monkeypatch, "1xL40S", {"sglang": "0.5.3.post3", "vllm": "none"}, flags), entry) == "block"
    assert _status(_run(monkeypatch, "1xL40S", {"sglang": "0.5.4"}, flags), entry) is None
    assert _status(_run(monkeypatch, "1xL40S", {"sglang": "0.5.2", "vllm": "0.10.1"}, flags), entry) is None


PAGE = "hybrid-gdn-page-size-radix-no-buffer"


@pytest.mark.parametrize("release", ["0.5.4", "0.5.8", "0.5.10.post1"])
def test_page_size_on_hybrid_gdn_blocked_before_0_5_11(monkeypatch: pytest.MonkeyPatch, release: str) -> None:
    r = _run(monkeypatch, "4xH100", {"sglang": release},
             ["--model-path", "Qwen/Qwen3-Next-80B-A3B-Instruct", "--tp-size", "4", "--page-size", "64"])
    assert _status(r, PAGE) == "block"


@pytest.mark.parametrize(("release", "extra"), [
    ("0.5.11", ["--page-size", "64"]),
    ("0.5.8", ["--page-size", "1"]),
    ("0.5.8", ["--page-size", "128", "--mamba-scheduler-strategy", "extra_buffer"]),
    ("0.5.8", ["--page-size", "64", "--disable-radix-cache"]),
])
def test_page_size_on_hybrid_gdn_outside(monkeypatch: pytest.MonkeyPatch, release: str, extra: list[str]) -> None:
    r = _run(monkeypatch, "4xH100", {"sglang": release},
             ["--model-path", "Qwen/Qwen3-Next-80B-A3B-Instruct", "--tp-size", "4", *extra])
    assert _status(r, PAGE) is None


def test_speculative_with_torch_native_warned(monkeypatch: pytest.MonkeyPatch) -> None:
    flags = ["--model-path", "Qwen/Qwen2.5-0.5B-Instruct", "--speculative-algorithm", "NGRAM"]
    r = _run(monkeypatch, "1xH100", {"sglang": "0.5.18"}, [*flags, "--attention-backend", "torch_native"])
    assert _status(r, "torch-native-speculative-crash") == "warn"  # one report: a warning
    other = _run(monkeypatch, "1xH100", {"sglang": "0.5.18"}, [*flags, "--attention-backend", "triton"])
    assert _status(other, "torch-native-speculative-crash") is None
    plain = _run(monkeypatch, "1xH100", {"sglang": "0.5.18"},
                 ["--model-path", "Qwen/Qwen2.5-0.5B-Instruct", "--attention-backend", "torch_native"])
    assert _status(plain, "torch-native-speculative-crash") is None


SPLIT = "hybrid-gdn-split-attention-backends-0.5.9"


def test_split_backends_on_hybrid_gdn_only_in_0_5_9(monkeypatch: pytest.MonkeyPatch) -> None:
    split = ["--prefill-attention-backend", "fa3", "--decode-attention-backend", "flashinfer"]
    qwen35 = ["--model-path", "Qwen/Qwen3.5-35B-A3B"]
    assert _status(_run(monkeypatch, "1xH200", {"sglang": "0.5.9"}, [*qwen35, *split]), SPLIT) == "block"
    decode_only = _run(monkeypatch, "1xH200", {"sglang": "0.5.9"},
                       [*qwen35, "--decode-attention-backend", "flashinfer"])
    assert _status(decode_only, SPLIT + "-decode") == "block"
    assert _status(_run(monkeypatch, "1xH200", {"sglang": "0.5.10"}, [*qwen35, *split]), SPLIT) is None
    dense = _run(monkeypatch, "1xH200", {"sglang": "0.5.9"}, ["--model-path", "Qwen/Qwen3-8B", *split])
    assert _status(dense, SPLIT) is None


def test_bitsandbytes_and_rare_vllm_methods_without_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    bnb = ["--model-path", "unsloth/Qwen3-14B-unsloth-bnb-4bit", "--quantization", "bitsandbytes"]
    assert _status(_run(monkeypatch, "1xH100", {"sglang": "0.4.6.post5", "vllm": "none"}, bnb),
                   "quant-gguf-needs-vllm") == "block"
    with_vllm = _run(monkeypatch, "1xH100", {"sglang": "0.4.6.post5", "vllm": "0.8.4"}, bnb)
    assert _status(with_vllm, "quant-gguf-needs-vllm") is None
    marlin = ["--model-path", "/models/mine", "--quantization", "marlin"]
    entry = "quant-marlin-flag-needs-vllm-0.5"
    assert _status(_run(monkeypatch, "1xH100", {"sglang": "0.5.3", "vllm": "none"}, marlin), entry) == "block"
    assert _status(_run(monkeypatch, "1xH100", {"sglang": "0.5.4.post2"}, marlin), entry) is None
    assert _status(_run(monkeypatch, "1xH100", {"sglang": "0.5.1"}, ["--model-path", "/models/m", "--quantization",
                                                                       "gptq"]), entry) is None


def test_pd_decode_node_refused_only_in_0_5_10(monkeypatch: pytest.MonkeyPatch) -> None:
    flags = ["--model-path", "Qwen/Qwen3.5-122B-A10B", "--tp-size", "4", "--disaggregation-mode", "decode", *MTP]
    old = _run(monkeypatch, "4xH200", {"sglang": "0.5.10"}, flags)
    assert _status(old, SPEC + "-pd-decode") == "block" and _status(old, SPEC) is None
    new = _run(monkeypatch, "4xH200", {"sglang": "0.5.11"}, flags)
    assert _status(new, SPEC + "-pd-decode") is None and _status(new, SPEC) is None
    assert new["verdict"] != "blocked"


def test_page_size_on_a_pd_decode_node_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    r = _run(monkeypatch, "4xH100", {"sglang": "0.5.8"},
             ["--model-path", "Qwen/Qwen3-Next-80B-A3B-Instruct", "--tp-size", "4", "--page-size", "64",
              "--disaggregation-mode", "decode"])
    assert _status(r, PAGE) is None

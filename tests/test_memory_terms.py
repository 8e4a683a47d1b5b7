"""Terms beyond the plain budget, the verdicts with uncertainty, and the re-planned fixes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sglwrap.cli import main
from sglwrap.host.catalogue import resolve_assume
from sglwrap.memory import Observed, plan
from sglwrap.memory.extras import capture_sizes

GIB = 1 << 30
STORY = ["--model-path", "Kimi-K2.5", "--tp", "8", "--mem-fraction-static", "0.55"]


@pytest.mark.parametrize(("max_bs", "version", "count"), [
    (80, "0.4.3", 13),    # corpus 01: 13 graphs
    (160, "0.5.2", 23),   # corpus 02 (0.5.2rc2): 23
    (160, "0.4.6", 23),   # corpus 19: [1, 2, 4, 8, 16, ..., 160]
    (256, "0.5.6", 36),   # corpus 09: 36
    (512, "0.5.3", 52),   # corpus 07 and 08: 52
])
def test_capture_sizes_match_the_logged_lists(max_bs: int, version: str, count: int) -> None:
    assert len(capture_sizes(max_bs, version)) == count


def test_story_with_eagle3_counts_the_draft_model_and_keeps_the_finding() -> None:
    facts = resolve_assume("8xRTX-PRO-6000")
    base = plan(facts, {}, STORY, sglang_version="0.5.23")
    spec = plan(facts, {}, [*STORY, "--speculative-algorithm", "EAGLE3"], sglang_version="0.5.23")
    assert spec.budget.draft_weights > 0
    assert spec.budget.weights == base.budget.weights + spec.budget.draft_weights  # 0.5.23 counts it in W
    assert spec.verdict == base.verdict == "kv_pool_oom"
    assert spec.budget.min_mem_fraction_static > base.budget.min_mem_fraction_static
    assert spec.cell.bytes_per_token > base.cell.bytes_per_token  # the draft layer's KV share
    old = plan(facts, {}, [*STORY, "--speculative-algorithm", "EAGLE3"], sglang_version="0.5.9")
    old_base = plan(facts, {}, STORY, sglang_version="0.5.9")  # same release: its own defaults on both sides
    assert old.budget.weights == old_base.budget.weights  # before 0.5.14 the draft loads after KV sizing ...
    assert old.budget.runtime_need >= old_base.budget.runtime_need + old.budget.draft_weights  # ... from the slack


def test_nextn_draft_is_one_decoder_layer_of_the_target() -> None:
    facts = resolve_assume("8xH200")
    p = plan(facts, {}, ["--model-path", "DeepSeek-V3", "--tp", "8", "--speculative-algorithm", "NEXTN"],
             sglang_version="0.5.23")
    per_layer = p.weights_info.per_rank_bytes / p.shape.num_layers
    assert 0.5 * per_layer < p.budget.draft_weights < 2.0 * per_layer


def test_deepep_buffers_come_out_of_the_runtime_slack() -> None:
    facts = resolve_assume("8xH200")
    argv = ["--model-path", "DeepSeek-V3", "--tp", "8", "--mem-fraction-static", "0.85"]
    plain = plan(facts, {}, argv, sglang_version="0.5.23").budget
    deepep = plan(facts, {}, [*argv, "--moe-a2a-backend", "deepep"], sglang_version="0.5.23").budget
    # low-latency RDMA: 2 x 2 x 256 experts x 128 tokens x (2 x 7168 + 16) B, + 1 GiB NVLink + 0.5 GiB NVSHMEM
    expected = 2 * 2 * 256 * 128 * (2 * 7168 + 16) + 1.5 * GIB
    assert deepep.deepep == pytest.approx(expected, rel=0.001)
    assert deepep.runtime_need - plain.runtime_need >= deepep.deepep
    assert deepep.kv_budget <= plain.kv_budget  # shared experts replicated under DeepEP: more weights, not less


def test_lora_buffers_grow_with_adapters_and_rank() -> None:
    facts = resolve_assume("1xH100")
    base = ["--model-path", "Llama-3.1-8B", "--lora-paths", "a=/tmp/a"]
    small = plan(facts, {}, [*base, "--max-loras-per-batch", "2", "--max-lora-rank", "16"], sglang_version="0.5.23")
    big = plan(facts, {}, [*base, "--max-loras-per-batch", "8", "--max-lora-rank", "64"], sglang_version="0.5.23")
    assert 0 < small.budget.lora < big.budget.lora
    assert big.budget.lora == pytest.approx(small.budget.lora * 16, rel=0.01)


def test_a_deficit_within_the_uncertainty_is_fits_tight_and_exits_zero() -> None:
    facts = resolve_assume("1xH100")
    seen = Observed(70 * GIB, 16 * GIB)

    def at(f: float):  # type: ignore[no-untyped-def]
        return plan(facts, {}, ["--model-path", "Llama-3.1-8B", "--mem-fraction-static", f"{f:.3f}"],
                    sglang_version="0.5.23", observed=seen)

    need = at(0.8).budget.runtime_need
    tight = at(1 - need / (70 * GIB))  # the slack P(1-f) equals the runtime need: margin 0, inside its ±
    assert abs(tight.budget.slack - tight.budget.runtime_need) <= tight.budget.margin_pm
    assert tight.verdict == "fits_tight" and tight.exit_code == 0 and not tight.blocks_launch
    low = at(0.99)  # 0.7 GiB of slack for several GiB of graphs and activations
    assert low.budget.runtime_need - low.budget.slack > low.budget.margin_pm
    assert low.verdict == "graph_oom_risk" and low.exit_code == 1 and not low.blocks_launch
    assert (low.result.fix or "").startswith(("--cuda-graph-max-bs", "--chunked-prefill-size",
                                              "--mem-fraction-static", "no single change"))


def test_fix_is_replanned_and_stays_on_the_host() -> None:
    """1 GPU: no --tp-size suggestion; the suggested change re-plans to fits; fractions stay below 1."""
    facts = resolve_assume("1xL4")
    argv = ["--model-path", "Qwen3-8B", "--mem-fraction-static", "0.60"]
    p = plan(facts, {}, argv, sglang_version="0.5.23")
    assert p.verdict == "kv_pool_oom"
    fix = p.result.fix or ""
    assert "--tp-size" not in fix
    if fix.startswith("--mem-fraction-static"):
        value = float(fix.split()[1])
        assert 0 < value < 1
        again = plan(facts, {}, ["--model-path", "Qwen3-8B", "--mem-fraction-static", str(value)],
                     sglang_version="0.5.23")
        assert again.verdict == "fits"
    else:
        assert "no single change" in fix


def test_story_fix_never_suggests_more_gpus_than_the_host_has() -> None:
    p = plan(resolve_assume("8xRTX-PRO-6000"), {}, STORY, sglang_version="0.5.23")
    fix = p.result.fix or ""
    assert "--tp-size 16" not in fix
    assert "fits" in fix or "no single change" in fix


def test_missing_model_is_a_usage_error_not_the_oom_code(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["memory", "--assume", "1xH100", "--", "--model-path", "/nonexistent/model-dir"])
    err = capsys.readouterr().err
    assert rc == 64 and "no config.json found" in err


def test_json_carries_the_uncertainty_and_the_sources(capsys: pytest.CaptureFixture[str]) -> None:
    main(["memory", "--json", "--assume", "2xH200", "--", "--model-path", "Qwen3-8B", "--tp-size", "2"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["uncertainty"]["pre_weights_free"] > 0 and doc["uncertainty"]["kv_tokens"] > 0
    assert doc["term_sources"]["overhead"].startswith("fit: ") and "140.4 GiB" in doc["term_sources"]["overhead"]
    assert doc["terms"]["overhead_before_nccl"] > 0


def test_weights_beyond_the_gpu_get_no_impossible_fraction_or_gpu_count() -> None:
    """Llama-3.1-70B on one L4: no fraction below 1 can hold a page, and the host has no second GPU."""
    p = plan(resolve_assume("1xL4"), {}, ["--model-path", "Llama-3.1-70B"], sglang_version="0.5.23")
    assert p.verdict == "weights_dont_fit" and p.weights_estimated and p.exit_code == 1 and not p.blocks_launch
    text = " ".join(p.explanation) + (p.result.fix or "")
    assert "no --mem-fraction-static below 1" in text
    assert "--tp-size" not in (p.result.fix or "")
    assert not re.search(r"--mem-fraction-static [1-9]\.\d", text)


def test_corpus_75_glm_flash_bf16_on_one_rtx5090_is_a_sure_failure() -> None:
    """Corpus 75: GLM-4.7-Flash in BF16 on one RTX 5090 at 0.85; SGLang refused to size the KV pool ("Loaded
    weights leave no GPU memory"). The weights alone exceed the card, so the plan blocks the launch (exit 78)."""
    import yaml

    from sglwrap.host.catalogue import resolve_assume
    from sglwrap.memory import plan

    corpus = Path(__file__).parent / "corpus" / "memory"
    case = yaml.safe_load((corpus / "75_glm-4.7-flash-bf16_1xRTX5090_kv_pool_oom.yaml").read_text())
    p = plan(resolve_assume("1xRTX-5090"), {}, [str(a) for a in case["argv"]], sglang_version=case["version_for_plan"])
    assert p.verdict in ("weights_dont_fit", "kv_pool_oom") and p.weights_estimated and p.exit_code == 1


_CORPUS = Path(__file__).parent / "corpus" / "memory"


def _corpus_case(prefix: str) -> dict:  # type: ignore[type-arg]
    import yaml

    return yaml.safe_load(next(_CORPUS.glob(prefix + "_*.yaml")).read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _corpus_plan(case: dict):  # type: ignore[no-untyped-def,type-arg]
    repo = Path(__file__).resolve().parents[1]
    argv = [str(a) for a in case["argv"]]
    i = argv.index("--model-path") + 1
    if argv[i].startswith("tests/"):
        argv[i] = str(repo / argv[i])
    g = case["gpu"]
    return plan(resolve_assume(f"{g['count']}x{g['catalogue']}"), {}, argv, sglang_version=case["version_for_plan"])


def test_corpus_74_online_fp8_loads_the_16bit_model_first_and_does_not_fit() -> None:
    """Corpus 74: MedGemma-27B (gemma-3-27b geometry) in BF16 with --quantization fp8 on one L40S, SGLang 0.5.16:
    torch.OutOfMemoryError in fp8.py create_weights. Fp8LinearMethod creates every linear in the checkpoint dtype and
    quantises after all weights are loaded, so the loading peak is the 16-bit model (+ one weight's FP8 copy): more
    than the 44.02 GB the log had free, though the FP8 result (what stays) would fit."""
    case = _corpus_case("74")
    p = _corpus_plan(case)
    assert p.verdict == "weights_dont_fit" and p.weights_estimated and p.exit_code == 1
    b = p.budget
    logged_free = case["truth"]["avail_before_weights_gb"] * GIB
    assert b.weights < logged_free < b.weights_peak  # the FP8 model would fit; its 16-bit loading does not
    sixteen = _corpus_plan({**case, "argv": [a for a in case["argv"] if a not in ("--quantization", "fp8")]}).budget
    gate_up_fp8 = 2 * 21504 * 5376 * 1  # the largest weight of the 27B geometry, quantised
    assert b.weights_peak == pytest.approx(sixteen.weights + gate_up_fp8, rel=0.001)
    # the OOM's 442.00 MiB is one bf16 gate_up_proj of this geometry, rounded to 2 MiB blocks
    assert case["truth"]["oom_tried_to_allocate_mib"] == 2 * -(-(2 * 21504 * 5376 * 2) // (2 << 20))
    assert "loading peak" in " ".join(p.explanation) or "while loading" in (p.result.fix or "")


def test_an_fp8_checkpoint_has_no_16bit_loading_peak() -> None:
    facts = resolve_assume("1xH100")
    p = plan(facts, {}, ["--model-path", "Qwen3-32B-FP8", "--quantization", "fp8"], sglang_version="0.5.23")
    assert p.budget.weights_peak == 0


@pytest.mark.parametrize("prefix", ["31", "67", "68"])
def test_skywork_reward_model_has_a_score_head_and_no_lm_head(prefix: str) -> None:
    """Corpus 31, 67, 68: SGLang logs type=LlamaForSequenceClassification: LlamaModel + a score head, no lm_head.
    The weights come out at the logged (free before - free after) and the pool within 1% of the logged tokens."""
    case = _corpus_case(prefix)
    p = _corpus_plan(case)
    t = case["truth"]
    logged_w = (t["avail_before_weights_gb"] - t["avail_after_weights_gb"]) * GIB
    assert p.budget.weights == pytest.approx(logged_w, abs=0.03 * GIB)
    assert abs(p.budget.kv_tokens - t["kv_tokens"]) / t["kv_tokens"] < 0.01
    causal = plan(resolve_assume("1xH100"), {}, ["--model-path", "Llama-3.1-8B", "--is-embedding"],
                  sglang_version=case["version_for_plan"])
    # the catalogue's Llama-3.1-8B carries the checkpoint's exact total; compare the estimates from the configs
    lm_head_bytes = 128256 * 4096 * 2
    assert causal.weights_info.params_total - p.weights_info.params_total == pytest.approx(lm_head_bytes, rel=0.001)


def _lora_elems(r: int, layers: int, h: int, q: int, kv: int, inter: int, tp: int, modules: set[str]) -> float:
    """SGLang 0.5.23 lora/mem_pool.py buffer shapes per adapter slot, written out here from the source."""
    a = {"qkv": 3 * r * h, "o": r * q / tp, "gate_up": 2 * r * h, "down": r * inter / tp}
    b = {"qkv": (q + 2 * kv) / tp * r, "o": h * r, "gate_up": 2 * inter / tp * r, "down": h * r}
    return layers * sum(a[m] + b[m] for m in modules)


def test_corpus_39_lora_pool_matches_sglangs_buffers_and_the_logged_gap() -> None:
    """Corpus 39 (Llama-3.1-8B, 3 adapters, --max-loras-per-batch 2, --max-lora-rank 256, 2026-04 build on an
    H200): the LoRA pool is allocated after the weights and before the KV pool, so it sits in the logged gap between
    "Load weight end" and "Memory pool end" next to the K and V buffers; it fits with room to spare."""
    case = _corpus_case("39")
    p = _corpus_plan(case)
    expected = 2 * _lora_elems(256, 32, 4096, 4096, 1024, 14336, 1, {"qkv", "o", "gate_up", "down"}) * 2
    assert p.budget.lora == pytest.approx(expected, rel=0.001)
    t = case["truth"]
    gap = (t["avail_after_weights_gb"] - t["avail_after_kv_pool_gb"] - t["k_size_gb"] - t["v_size_gb"]) * GIB
    assert 0.9 * gap < p.budget.lora <= gap
    assert p.verdict == "fits" and p.exit_code == 0


def test_lora_pool_comes_out_of_the_kv_budget_and_shards_like_sglang() -> None:
    facts = resolve_assume("2xH100")
    base = ["--model-path", "Llama-3.1-8B", "--mem-fraction-static", "0.8", "--tp-size", "2"]
    lora = [*base, "--lora-paths", "a=/tmp/a", "--max-loras-per-batch", "4", "--max-lora-rank", "32",
            "--lora-target-modules", "q_proj", "v_proj", "down_proj"]
    plain = plan(facts, {}, base, sglang_version="0.5.23").budget
    with_lora = plan(facts, {}, lora, sglang_version="0.5.23").budget
    expected = 4 * _lora_elems(32, 32, 4096, 4096, 1024, 14336, 2, {"qkv", "down"}) * 2
    assert with_lora.lora == pytest.approx(expected, rel=0.001)
    assert plain.kv_budget - with_lora.kv_budget == pytest.approx(with_lora.lora, abs=2)
    assert with_lora.runtime_need <= plain.runtime_need  # not in the slack (fewer KV tokens, fewer requests)


def test_corpus_73_qwen35_vision_tower_is_sharded_over_tp() -> None:
    """Corpus 73 (Qwen3.5-9B, TP 2 on two RTX 4090): SGLang's Qwen3-VL-style tower is built from Column/RowParallel
    linears over the attention-TP group, so each rank holds half of it; the planned W lands on the logged 8.85 GB."""
    case = _corpus_case("73")
    p = _corpus_plan(case)
    logged = case["truth"]["weight_mem_gb"] * GIB
    assert abs(p.budget.weights - logged) / logged < 0.015
    assert p.shape.vision_tp_sharded and p.shape.vision_params > 0.4e9
    single = plan(resolve_assume("1xH100"), {}, ["--model-path", "Qwen3.5-9B"], sglang_version="0.5.14")
    # two ranks together hold the one-rank model plus one more copy of what stays replicated: the norms only (a
    # replicated tower would add its 0.9 GB here as well)
    norms = p.shape.num_layers * 2 * p.shape.hidden_size * 2
    assert 2 * p.weights_info.per_rank_bytes - single.weights_info.per_rank_bytes == pytest.approx(norms, rel=0.01)


@pytest.mark.parametrize(("arch", "lm_head", "score"), [
    ("Qwen2ForCausalLM", True, 0),
    ("Qwen2ForSequenceClassification", False, 3584 * 1 + 1),  # nn.Linear(hidden, num_labels), bias
    ("Qwen2ForRewardModel", False, 3584 * 3584 + 3584 + 3584 * 1 + 1),  # Linear(h, h) + ReLU + Linear(h, labels)
    ("InternLM2ForRewardModel", False, 3584),  # v_head Linear(h, 1, bias=False)
])
def test_classification_and_reward_heads_follow_sglangs_classes(arch: str, lm_head: bool, score: int) -> None:
    from sglwrap.memory.model import shape_from_config
    from sglwrap.memory.weights import estimate_params

    cfg = {"architectures": [arch], "model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28,
           "num_key_value_heads": 4, "num_hidden_layers": 28, "intermediate_size": 18944, "vocab_size": 152064,
           "tie_word_embeddings": False, "id2label": {"0": "LABEL_0"}}
    shape = shape_from_config(cfg, name="x", source="test", directory=None)
    assert (shape.lm_head, shape.score_params) == (lm_head, score)
    causal = shape_from_config({**cfg, "architectures": ["Qwen2ForCausalLM"]}, name="x", source="test",
                               directory=None)
    diff = estimate_params(causal)[0] - estimate_params(shape)[0]
    assert diff == (0 if lm_head else 152064 * 3584 * 2 - score * 2)


def test_tied_embeddings_get_their_own_head_before_040() -> None:
    """Corpus 28 (Llama-3.2-1B, tied, 0.3.5 build) logged 2.91 GB of weights, 64 (the same model, 0.4.0) 2.42: SGLang
    0.3.x's LlamaForCausalLM always built a ParallelLMHead and copied the embedding into it; 0.4.0 shares it."""
    old, new = _corpus_case("28"), _corpus_case("64")
    w_old, w_new = _corpus_plan(old).budget.weights, _corpus_plan(new).budget.weights
    head = 128256 * 2048 * 2
    assert w_old - w_new == pytest.approx(head, rel=0.001)
    for case, w in ((old, w_old), (new, w_new)):
        t = case["truth"]
        logged = (t["avail_before_weights_gb"] - t["avail_after_weights_gb"]) * GIB
        assert abs(w - logged) < 0.05 * GIB, case["id"]


def test_lora_pool_of_a_moe_model_has_per_expert_buffers() -> None:
    """SGLang 0.5.23 mem_pool.init_buffers: with gate_up/down targeted, a MoE model gets 4-D buffers over all its
    experts on every layer (Qwen3-30B-A3B: 128 experts of 768, hidden 2048, 48 layers, no shared expert)."""
    facts = resolve_assume("1xH100")
    argv = ["--model-path", "Qwen3-30B-A3B", "--lora-paths", "a=/tmp/a", "--max-loras-per-batch", "2",
            "--max-lora-rank", "16", "--lora-target-modules", "gate_proj", "up_proj", "down_proj"]
    lora = plan(facts, {}, argv, sglang_version="0.5.23").budget.lora
    e, mi, h, r, n, layers = 128, 768, 2048, 16, 2, 48
    gate_up = e * 2 * r * h + e * 2 * mi * r
    down = e * r * mi + e * h * r
    assert lora == pytest.approx(n * layers * (gate_up + down) * 2, rel=0.001)


def test_a_sure_oom_blocks_only_when_the_checkpoint_size_is_read(tmp_path: Path) -> None:
    """Llama-3.1-70B on one L4 does not fit either way; with the checkpoint's own index (its total_size) the
    verdict blocks (exit 78), with the size estimated from config.json it warns (exit 1) and says so."""
    import json
    import shutil

    repo = Path(__file__).resolve().parents[1]
    d = tmp_path / "Llama-3.1-70B"
    shutil.copytree(repo / "sglwrap" / "data" / "models" / "Llama-3.1-70B", d)
    estimated = plan(resolve_assume("1xL4"), {}, ["--model-path", str(d)], sglang_version="0.5.23")
    assert estimated.weights_estimated and estimated.exit_code == 1 and not estimated.blocks_launch
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 141107412992},
                                                                "weight_map": {}}))
    read = plan(resolve_assume("1xL4"), {}, ["--model-path", str(d)], sglang_version="0.5.23")
    assert read.verdict == "weights_dont_fit" and not read.weights_estimated
    assert read.exit_code == 78 and read.blocks_launch and read.to_dict()["blocks_launch"]

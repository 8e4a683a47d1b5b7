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
    assert p.verdict == "weights_dont_fit" and p.exit_code == 78 and p.blocks_launch
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
    assert p.verdict in ("weights_dont_fit", "kv_pool_oom") and p.exit_code == 78 and p.blocks_launch

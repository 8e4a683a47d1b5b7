"""The reference story and the CLI contract.

Kimi-K2.5 (real geometry, weights computed as params x dtype: 595.0 GB, within 0.1% of the ~595 GB INT4
checkpoint) on 8x RTX PRO 6000 at --mem-fraction-static 0.55, default NCCL vs fewchan. What the tool computes:
the weights alone (71.7 GiB/rank) exceed P*f (51.6 GiB) at 0.55, so the story's "0.55 had worked" is not
consistent with this model on 96 GB cards; and fewchan moves NCCL memory by ~0.12 GiB per rank, which moves the
KV budget by ~0.07 GiB: the NCCL change cannot be what turned a working launch into a KV-pool failure.
"""

from __future__ import annotations

import json

import pytest

from sglwrap.cli import main
from sglwrap.host.catalogue import resolve_assume
from sglwrap.memory import plan

FEWCHAN = {"NCCL_MIN_NCHANNELS": "1", "NCCL_MAX_NCHANNELS": "2", "NCCL_BUFFSIZE": "131072"}
STORY = ["--model-path", "Kimi-K2.5", "--tp", "8", "--mem-fraction-static", "0.55"]
GIB = 1 << 30


def test_memory_story_default_vs_fewchan() -> None:
    facts = resolve_assume("8xRTX-PRO-6000")
    base = plan(facts, {}, STORY, sglang_version="0.5.23")
    few = plan(facts, FEWCHAN, STORY, sglang_version="0.5.23")
    assert base.verdict == few.verdict == "kv_pool_oom"
    assert base.budget.weights > base.budget.static_limit  # the weights alone exceed P*f at 0.55
    assert 0.74 < base.budget.min_mem_fraction_static < 0.80
    d_nccl = base.budget.nccl_init - few.budget.nccl_init
    assert 0 < d_nccl < 0.25 * GIB  # fewer channels use less NCCL memory, not more
    d_kv = few.budget.kv_budget - base.budget.kv_budget
    assert d_kv == pytest.approx(0.55 * d_nccl, rel=0.01)  # before the baseline: it moves P, so KV by f x dNCCL
    assert "Loaded weights leave no GPU memory for the KV cache" in (base.result.sglang_error or "")
    old = plan(facts, {}, STORY, sglang_version="0.5.9")
    assert (old.result.sglang_error or "").startswith("RuntimeError: Not enough memory. Please try to increase")


def test_memory_story_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["memory", "--json", "--assume", "8xRTX-PRO-6000", "--explain-change", "fewchan", "--", *STORY])
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert rc == 1 and doc["weights_estimated"] and not doc["blocks_launch"]  # no checkpoint index: estimated size
    for key in ("kv_cell_bytes", "kv_tokens", "weights_bytes_per_rank", "mem_fraction_static",
                "min_mem_fraction_static", "max_context_tokens", "terms", "verdict", "explanation"):
        assert key in doc
    assert doc["mem_fraction_static"] == {"value": 0.55, "source": "--mem-fraction-static"}
    assert doc["kv_cell_bytes"] == 70272
    assert all(isinstance(v, int) for v in doc["terms"].values())
    assert doc["explain_change"]["term_deltas"]["nccl_init"] < 0
    assert "verdict: kv_pool_oom" in out.err


def test_memory_fits_exit0_llama_demo(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["memory", "--json", "--assume", "8xRTX-PRO-6000", "--",
               "--model-path", "sglwrap/data/models/Llama-3.1-8B", "--tp", "8", "--mem-fraction-static", "0.85"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["verdict"] == "fits"
    assert doc["kv_cell_bytes"] == 131072 // 8
    assert doc["weights_source"].startswith("weights.json")


def test_memory_observations_replace_p_and_w(capsys: pytest.CaptureFixture[str]) -> None:
    main(["memory", "--json", "--assume", "8xRTX-PRO-6000", "--avail-before-weights-gib", "90",
          "--weights-gib", "40", "--", *STORY])
    doc = json.loads(capsys.readouterr().out)
    assert doc["terms"]["pre_weights_free"] == 90 * GIB and doc["weights_bytes_per_rank"] == 40 * GIB
    assert doc["kv_tokens"] == int(90 * GIB * 0.55 - 40 * GIB - 100 * (1 << 20)) // 70272


def test_memory_without_model_path_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory", "--assume", "2xH200", "--", "--tp", "2"]) == 64
    assert "--model-path" in capsys.readouterr().err


def test_memory_default_mfs_matches_sglang_0_5_23() -> None:
    """memory_hook.py's default on H100 TP8 dense (0.812) and H200 TP8 MLA (0.886)."""
    assert plan(resolve_assume("8xH100"), {}, ["--model-path", "Llama-3.1-70B", "--tp", "8"],
                sglang_version="0.5.23").budget.mem_fraction_static == 0.812
    assert plan(resolve_assume("8xH200"), {}, ["--model-path", "DeepSeek-V3", "--tp", "8"],
                sglang_version="0.5.23").budget.mem_fraction_static == 0.886


def test_memory_plot_writes_png(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("matplotlib")
    out = tmp_path / "budget.png"
    main(["memory", "--assume", "2xH200", "--plot", str(out), "--", "--model-path", "Qwen3-8B", "--tp", "2"])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

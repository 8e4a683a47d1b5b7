"""`sglwrap memory` plans with the defaults of the SGLang release it is asked about (--assume-stack sglang=X).

Expected values are read from the released sources, not from sglwrap:
- 0.4.6 server_args.py:221-266: GPUs <= 81920 MiB take the TP ladder (0.88 at TP 1); below 25,000 MiB chunked prefill
  is 2048 and the decode graph max bs 8 (TP < 4); no prefill CUDA graphs exist in that release.
- 0.4.9 server_args.py:277-321: f = round((gpu_mem - reserved) / gpu_mem, 3), reserved (2.8 + tp/10) GiB below
  35 GiB, (9.5 + tp/2) GiB below 90 GiB: 0.879 on an RTX 4090 (24,564 MiB), 0.874 on an H100 (81,559 MiB).
- 0.5.23 (memory_hook.py) has its own reserve with prefill graphs on: a smaller default than 0.4.x on the same GPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sglwrap.cli import main


def _memory(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    rc = main(["memory", "--json", *argv])
    return rc, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("gpu", "release", "fraction"), [
    ("1xRTX-4090", "0.4.6", 0.88), ("1xRTX-4090", "0.4.9", 0.879), ("1xH100", "0.4.9", 0.874)])
def test_default_fraction_is_the_releases_own(capsys: pytest.CaptureFixture[str], gpu: str, release: str,
                                              fraction: float) -> None:
    rc, doc = _memory(capsys, "--assume", gpu, "--assume-stack", f"sglang={release}", "--", "--model-path",
                      "Qwen3-8B")
    assert rc == 0
    assert doc["sglang_version"] == release
    assert doc["mem_fraction_static"] == {"value": fraction, "source": "sglang-default"}
    assert doc["sglang_defaults"]["version"] == release


def test_046_on_a_24gb_card_uses_its_small_gpu_chunk_and_graph_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    _, doc = _memory(capsys, "--assume", "1xRTX-4090", "--assume-stack", "sglang=0.4.6", "--", "--model-path",
                     "Qwen3-8B")
    d = doc["sglang_defaults"]
    assert d["chunked_prefill_size"] == 2048 and d["cuda_graph_max_bs"] == 8
    assert d["decode_graph_sizes"] == 4  # 0.4.6 cuda_graph_runner.py: [1, 2, 4, 8]
    assert d["prefill_cuda_graph"] is False and doc["terms"]["prefill_graphs"] == 0


def test_the_same_launch_gets_more_kv_under_046_than_under_0523(capsys: pytest.CaptureFixture[str]) -> None:
    """0.88 of P against 0.5.23's smaller default: the pool follows the release's fraction, everything else equal."""
    argv = ["--", "--model-path", "Qwen3-8B"]
    _, old = _memory(capsys, "--assume", "1xRTX-4090", "--assume-stack", "sglang=0.4.6", *argv)
    _, new = _memory(capsys, "--assume", "1xRTX-4090", "--assume-stack", "sglang=0.5.23", *argv)
    assert new["mem_fraction_static"]["value"] < old["mem_fraction_static"]["value"]
    assert new["terms"]["pre_weights_free"] == old["terms"]["pre_weights_free"]
    assert old["kv_tokens"] > new["kv_tokens"]
    assert new["terms"]["prefill_graphs"] > 0  # 0.5.23 captures prefill graphs by default


def test_a_given_fraction_wins_over_every_releases_default(capsys: pytest.CaptureFixture[str]) -> None:
    for release in ("0.4.6", "0.4.9", "0.5.23"):
        _, doc = _memory(capsys, "--assume", "1xH100", "--assume-stack", f"sglang={release}", "--",
                         "--model-path", "Qwen3-8B", "--mem-fraction-static", "0.7")
        assert doc["mem_fraction_static"] == {"value": 0.7, "source": "--mem-fraction-static"}


def test_old_spelling_of_the_decode_graph_size_is_read_by_the_old_release(capsys: pytest.CaptureFixture[str]) -> None:
    _, doc = _memory(capsys, "--assume", "1xH100", "--assume-stack", "sglang=0.4.9", "--", "--model-path",
                     "Qwen3-8B", "--cuda-graph-max-bs", "32")
    assert doc["sglang_defaults"]["cuda_graph_max_bs"] == 32
    assert doc["sglang_defaults"]["decode_graph_sizes"] == 7  # 0.4.9 cuda_graph_runner.py:145-175: [1,2,4,8,16,24,32]


def test_disabling_cuda_graphs_removes_both_graph_terms_in_any_release(capsys: pytest.CaptureFixture[str]) -> None:
    for release in ("0.4.9", "0.5.23"):
        _, doc = _memory(capsys, "--assume", "1xH100", "--assume-stack", f"sglang={release}", "--",
                         "--model-path", "Qwen3-8B", "--disable-cuda-graph")
        assert doc["terms"]["decode_graphs"] == 0 and doc["terms"]["prefill_graphs"] == 0
        assert doc["sglang_defaults"]["decode_cuda_graph"] is False


_DOCS = "https://github.com/Stars1233/sgl-project.github.io/blob"


@pytest.mark.parametrize(("gpu", "release", "fraction", "source"), [
    ("1xH100", "0.5.2", 0.874, f"{_DOCS}/cdc02c5088/basic_usage/native_api.html (0.5.2rc1 build)"),
    ("1xH100", "0.5.4", 0.841, f"{_DOCS}/c84e4c2e8a/basic_usage/native_api.html (0.5.4.post3 build)"),
    ("1xH100", "0.5.14", 0.836, f"{_DOCS}/afa03d9fe3/basic_usage/native_api.html (main build of 2026-03-10)"),
    ("1xH200", "0.5.23", 0.907, f"{_DOCS}/d827b20afe/basic_usage/native_api.html (main build of 2026-04-05)")])
def test_default_fraction_matches_sglangs_docs_ci(capsys: pytest.CaptureFixture[str], gpu: str, release: str,
                                                  fraction: float, source: str) -> None:
    """SGLang's docs CI launched qwen2.5-0.5b-instruct with only --model-path; its logged server_args carry
    max_total_tokens=20480, cuda_graph_max_bs=4 and the mem_fraction_static the release computed (``source``):
    on its H100 runner (81,559 MiB) 0.874, then 0.841, then 0.836; later on an H200 runner 0.907. The main
    builds' releases are not named; the rules of the release range they fall in are used."""
    flag = "--cuda-graph-max-bs-decode" if release == "0.5.23" else "--cuda-graph-max-bs"  # 0.5.23 split the flag
    _, doc = _memory(capsys, "--assume", gpu, "--assume-stack", f"sglang={release}", "--", "--model-path",
                     "Qwen2.5-7B", "--max-total-tokens", "20480", flag, "4")
    assert doc["mem_fraction_static"] == {"value": fraction, "source": "sglang-default"}


@pytest.mark.parametrize("release", ["0.5.20", "0.5.23"])
def test_defaults_match_a_logged_2026_build_on_h100(capsys: pytest.CaptureFixture[str], release: str) -> None:
    """Corpus 72 (a 2026-08 source build, Qwen3-30B-A3B-FP8 on one H100) logged mem_fraction_static=0.83,
    chunked_prefill_size=8192, a breakable prefill graph and 36 decode batch sizes up to 256; planned without
    any of them, the release rules give the same, and the pool lands within 1% of the logged 392,920 tokens."""
    config = Path(__file__).parent / "corpus" / "memory" / "configs" / "Qwen3-30B-A3B-FP8.json"
    rc, doc = _memory(capsys, "--assume", "1xH100", "--assume-stack", f"sglang={release}", "--", "--model-path",
                      str(config))
    d = doc["sglang_defaults"]
    assert rc == 0 and doc["mem_fraction_static"] == {"value": 0.83, "source": "sglang-default"}
    assert d["chunked_prefill_size"] == 8192 and d["decode_graph_sizes"] == 36 and d["prefill_cuda_graph"] is True
    assert abs(doc["kv_tokens"] - 392920) / 392920 < 0.01


def test_multimodal_runner_reduction_of_044_matches_a_logged_pool(capsys: pytest.CaptureFixture[str]) -> None:
    """Corpus 76 (gemma-3-4b-it on one H200, a 2025-03-27 branch of 0.4.4): the ModelRunner of 0.4.4 multiplies the
    fraction of a multimodal model by 0.95 (model_runner.py:242), so the 0.88 of the TP ladder sizes the pool at
    0.836; the logged pool (834,615 tokens) is within 1% of that plan and 5% away from a plain 0.88. 0.4.5-0.4.8
    multiply by 0.90 (model_runner.py:273 in 0.4.5), and from 0.4.9 the runner leaves a given fraction alone."""
    argv = ["--", "--model-path", "google/gemma-3-4b-it"]
    _, doc = _memory(capsys, "--assume", "1xH200", "--assume-stack", "sglang=0.4.4", *argv)
    assert doc["mem_fraction_static"]["value"] == pytest.approx(0.88 * 0.95)
    assert abs(doc["kv_tokens"] - 834615) / 834615 < 0.01
    _, doc = _memory(capsys, "--assume", "1xH200", "--assume-stack", "sglang=0.4.5", *argv)
    assert doc["mem_fraction_static"]["value"] == pytest.approx(0.88 * 0.90)
    _, doc = _memory(capsys, "--assume", "1xH200", "--assume-stack", "sglang=0.5.23", "--", "--model-path",
                     "google/gemma-3-4b-it", "--mem-fraction-static", "0.8")
    assert doc["mem_fraction_static"]["value"] == 0.8

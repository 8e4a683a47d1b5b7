"""Speculative decoding's draft worker is a second worker of the same attempt; hybrid pools report their totals.

Lines follow SGLang 0.4.6's format strings (model_runner.py "Init torch distributed begin." / "Load weight
begin/end", memory_pool.py "KV Cache is allocated", eagle_worker.py "Capture draft cuda graph begin/end"); the draft
ModelRunner prints "Init torch distributed begin." and its own weight/KV lines in the same process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglwrap.cli import main

T = "[2025-05-01 10:00:{:02d} TP0] "
SPEC = "\n".join(T.format(i) + ln for i, ln in enumerate([
    "server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', mem_fraction_static=0.8, tp_size=1, "
    "speculative_algorithm='EAGLE', disable_cuda_graph=False)",
    "Init torch distributed begin.",
    "Init torch distributed ends. mem usage=0.10 GB",
    "Load weight begin. avail mem=78.90 GB",
    "Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.90 GB, mem usage=15.00 GB.",
    "KV Cache is allocated. #tokens: 20480, K size: 1.25 GB, V size: 1.25 GB",
    "Memory pool end. avail mem=61.30 GB",
    "Capture cuda graph begin. This can take up to several minutes. avail mem=61.20 GB",
    "Capture cuda graph end. Time elapsed: 5.10 s. avail mem=60.50 GB. mem usage=0.70 GB.",
    "Init torch distributed begin.",
    "Load weight begin. avail mem=60.50 GB",
    "Load weight end. type=LlamaForCausalLMEagle, dtype=torch.bfloat16, avail mem=58.35 GB, mem usage=2.15 GB.",
    "KV Cache is allocated. #tokens: 20480, K size: 0.04 GB, V size: 0.04 GB",
    "Memory pool end. avail mem=58.20 GB",
    "Capture draft cuda graph begin. This can take up to several minutes. avail mem=58.20 GB",
    "Capture draft cuda graph end. Time elapsed: 3.00 s. avail mem=57.90 GB. mem usage=0.30 GB.",
    "max_total_num_tokens=20480, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=48, "
    "context_len=131072",
    "The server is fired up and ready to roll!",
])) + "\n"


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> tuple[int, dict]:
    p = tmp_path / "x.log"
    p.write_text(text)
    rc = main(["diagnose", "--json", str(p)])
    return rc, json.loads(capsys.readouterr().out)


def test_draft_worker_is_reported_apart_from_the_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, rep = _run(tmp_path, capsys, SPEC)
    assert (rc, rep["outcome"], rep["launch_attempts"]) == (0, "ok", 1)
    [r] = rep["ranks"]
    assert (r["weight_mem_gib"], r["kv_size_gib"], r["cuda_graph_mem_gib"]) == (15.0, 2.5, 0.7)
    assert r["avail_before_weights_gib"] == 78.9
    d = r["draft"]
    assert (d["weight_mem_gib"], d["kv_size_gib"], d["cuda_graph_mem_gib"]) == (2.15, 0.08, 0.3)
    assert (d["avail_before_weights_gib"], d["avail_after_kv_pool_gib"]) == (60.5, 58.2)


def test_a_relaunch_with_fresh_memory_is_a_new_attempt_not_a_draft(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    lines = SPEC.splitlines()
    target_only = "\n".join(lines[1:9])  # no server_args: an excerpt; then the same launch again from the start
    _rc, rep = _run(tmp_path, capsys, target_only + "\n" + target_only + "\n")
    assert rep["launch_attempts"] >= 1
    [r] = rep["ranks"]
    assert r["draft"] is None and r["weight_mem_gib"] == 15.0


def test_no_speculative_algorithm_in_server_args_means_no_draft(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    text = "\n".join(SPEC.replace("speculative_algorithm='EAGLE', ", "").splitlines()[:14]) + "\n"
    _rc, rep = _run(tmp_path, capsys, text)
    # the server args say no speculative decoding: a second weight load is a second launch, reported as the last
    assert rep["launch_attempts"] == 2
    assert [(r["draft"], r["weight_mem_gib"]) for r in rep["ranks"]] == [(None, 2.15)]


def test_draft_weight_load_oom_is_staged_in_the_draft(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = SPEC.splitlines()[:11] + [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.06 GiB is free."]
    _rc, rep = _run(tmp_path, capsys, "\n".join(lines) + "\n")
    assert (rep["outcome"], rep["stage"]) == ("oom", "weight_load")
    assert rep["ranks"][0]["weight_mem_gib"] == 15.0 and rep["ranks"][0]["draft"] is not None


def test_swa_pool_total_replaces_the_sub_pools(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # SG-0.5.4+ swa_memory_pool.py: the full and SWA sub-pools log "KV Cache is allocated", then the total.
    text = "\n".join(T.format(i) + ln for i, ln in enumerate([
        "Load weight begin. avail mem=139.00 GB",
        "Load weight end. type=GptOssForCausalLM, dtype=torch.bfloat16, avail mem=126.00 GB, mem usage=13.00 GB.",
        "KV Cache is allocated. #tokens: 1000000, K size: 4.02 GB, V size: 4.01 GB",
        "KV Cache is allocated. #tokens: 8000000, K size: 34.80 GB, V size: 34.80 GB",
        "SWAKVPool mem usage: 77.63 GB, swa size: 8000000, full size: 1000000",
        "Memory pool end. avail mem=48.30 GB",
    ])) + "\n"
    _rc, rep = _run(tmp_path, capsys, text)
    r = rep["ranks"][0]
    assert r["kv_size_gib"] == 77.63 and r["kv_tokens"] == 1000000 and r["draft"] is None


def test_mamba_state_is_its_own_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = T.format(1) + ("Mamba Cache is allocated. max_mamba_cache_size: 512, conv_state size: 0.30GB, "
                          "ssm_state size: 12.10GB\n")
    _rc, rep = _run(tmp_path, capsys, text)
    assert rep["ranks"][0]["mamba_state_gib"] == 12.4


def test_text_report_has_a_row_for_the_draft(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "x.log"
    p.write_text(SPEC)
    from sglwrap.cli import main as cli

    assert cli(["diagnose", str(p)]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith("TP0 draft"))
    assert "2.15" in row and "60.50" in row

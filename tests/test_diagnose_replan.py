"""diagnose re-plans a logged launch with the memory accountant, from the log's own readings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglwrap.cli import main

from .conftest import REPO

LOGS = REPO / "tests" / "fixtures" / "logs"


def _json(capsys: pytest.CaptureFixture[str], name: str) -> dict:
    main(["diagnose", "--json", str(LOGS / name)])
    return json.loads(capsys.readouterr().out)


def test_kv_pool_oom_is_replanned_and_the_fix_buys_kv_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _json(capsys, "v0.5.23_tp8_no-kv-budget.log")
    acc = doc["accountant"]
    assert acc["model"] == "Kimi-K2.5" and acc["verdict"] == "kv_pool_oom"
    rank0 = doc["ranks"][0]
    # The smallest fraction that fits is where P*f reaches the logged weights: f = W / P from the log's readings.
    assert acc["min_mem_fraction_static"] == pytest.approx(rank0["weight_mem_gib"] / rank0["avail_before_weights_gib"],
                                                           abs=0.01)
    after = acc["after_fix"]
    assert after["verdict"] == "fits" and after["kv_tokens"] > 0
    # Tokens bought = (P*f' - W) / cell, MLA cell (512 + 64) x 61 layers x 2 B for Kimi-K2.5.
    cell = (512 + 64) * 61 * 2
    assert acc["kv_cell_bytes"] == cell
    budget = rank0["avail_before_weights_gib"] * after["mem_fraction_static"] - rank0["weight_mem_gib"]
    # At most what P*f' - W buys; a little less since Kimi-K2.5 is multimodal and SGLang reserves its mm cache.
    assert 0.9 * budget * 2**30 / cell <= after["kv_tokens"] <= budget * 2**30 / cell


def test_the_accountants_cell_matches_the_pool_a_real_format_log_allocated(capsys: pytest.CaptureFixture[str]) -> None:
    acc = _json(capsys, "v0.5.9_tp2_capture-oom.log")["accountant"]
    assert acc["kv_cell_bytes"] == pytest.approx(acc["log_kv_cell_bytes"], rel=0.005)


def test_unknown_models_are_skipped_with_the_reason(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    log = tmp_path / "unknown.log"
    log.write_text((LOGS / "v0.4.8_docker_tp4_mla_ok.log").read_text().replace("deepseek-ai/DeepSeek-V2-Lite",
                                                                                "acme/Unreleased-MLA-9B"))
    main(["diagnose", "--json", str(log)])
    acc = json.loads(capsys.readouterr().out)["accountant"]
    assert "Unreleased-MLA-9B" in acc["skipped"]


def test_a_bundled_model_named_by_the_log_is_replanned(capsys: pytest.CaptureFixture[str]) -> None:
    """The 0.4.8 fixture names deepseek-ai/DeepSeek-V2-Lite, bundled since: it is planned, with the MLA cell of its
    config (27 layers x (512 + 64) x 2 B). The fixture's own pool numbers are constructed, not a real V2-Lite pool."""
    acc = _json(capsys, "v0.4.8_docker_tp4_mla_ok.log")["accountant"]
    assert "DeepSeek-V2-Lite" in acc["model"] and acc["kv_cell_bytes"] == (512 + 64) * 27 * 2


def test_text_report_carries_the_accountant_lines(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(LOGS / "v0.5.23_tp8_no-kv-budget.log")]) == 1
    out = capsys.readouterr().out
    assert "accountant (Kimi-K2.5" in out and "KV tokens (max context" in out


def test_model_path_option_replaces_a_path_that_is_not_on_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    # The 0.4.8 fixture names deepseek-ai/DeepSeek-V2-Lite, which is not here; point it at a built-in MLA config.
    main(["diagnose", "--json", "--model-path", "DeepSeek-V3", str(LOGS / "v0.4.8_docker_tp4_mla_ok.log")])
    acc = json.loads(capsys.readouterr().out)["accountant"]
    assert acc["model"] == "DeepSeek-V3" and acc["kv_cell_bytes"] == (512 + 64) * 61 * 2

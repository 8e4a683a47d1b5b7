"""diagnose's own memory fix is re-planned with the accountant and printed only when it fits."""

from __future__ import annotations

import json

import pytest

from sglwrap.cli import main
from sglwrap.diagnose import diagnose, fixcheck
from sglwrap.record import replace

from .conftest import REPO

LOGS = REPO / "tests" / "fixtures" / "logs"
KIMI = str(LOGS / "v0.5.23_tp8_no-kv-budget.log")  # Kimi-K2.5 (built-in config), KV-budget failure


def test_changes_are_the_concrete_flag_values_only() -> None:
    fix = ("--cuda-graph-max-bs 256 (half of 512; or lower --mem-fraction-static by 0.03-0.05 to give the graphs "
           "more room)")
    assert fixcheck.changes(fix) == [("--cuda-graph-max-bs", "256")]
    assert fixcheck.changes("raise --mem-fraction-static above 0.9 (the log does not show by how much)") == []
    assert fixcheck.changes("--mem-fraction-static 0.95; if that fails, more GPUs (--tp)") == [
        ("--mem-fraction-static", "0.95")]
    assert fixcheck.changes("if --mem-fraction-static was below 0.885, use 0.94; otherwise reduce per-GPU "
                            "weights") == [("--mem-fraction-static", "0.94")]


def test_a_fix_that_fits_is_kept_and_its_replan_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    main(["diagnose", "--json", KIMI])
    doc = json.loads(capsys.readouterr().out)
    check, acc = doc["fix_check"], doc["accountant"]
    assert check["logged_verdict"] == "kv_pool_oom" and check["model"] == "Kimi-K2.5"
    [(flag, value)] = fixcheck.changes(doc["fix"])
    [entry] = check["checked"]
    # above the accountant's own smallest fraction for the pool, so the pool exists and the re-plan fits
    assert float(value) > acc["min_mem_fraction_static"]
    assert entry["verdict"] in fixcheck.FITS and entry["kv_tokens"] > 0 and check["fix"] == doc["fix"]


def test_a_change_that_does_not_suffice_is_dropped_and_said(capsys: pytest.CaptureFixture[str]) -> None:
    main(["diagnose", "--json", KIMI])
    minimum = json.loads(capsys.readouterr().out)["accountant"]["min_mem_fraction_static"]
    report = diagnose([KIMI])
    low, high = round(minimum - 0.2, 2), round(minimum + 0.05, 2)
    report = replace(report, finding=replace(report.finding,
                                             fix=f"--mem-fraction-static {low} or --mem-fraction-static {high}"))
    doc = fixcheck.check(report)
    assert doc is not None
    verdicts = {c["change"]: c["verdict"] for c in doc["checked"]}
    assert verdicts[f"--mem-fraction-static {low}"] == "kv_pool_oom"
    assert verdicts[f"--mem-fraction-static {high}"] in fixcheck.FITS
    printed = fixcheck.apply(report, doc).finding.fix
    assert printed is not None and printed.startswith(f"--mem-fraction-static {high} ")
    assert f"--mem-fraction-static {low} (kv_pool_oom) did not suffice" in printed
    # none suffices: nothing unchecked is offered as a number
    report = replace(report, finding=replace(report.finding, fix=f"--mem-fraction-static {low}"))
    printed = fixcheck.apply(report, fixcheck.check(report)).finding.fix
    assert printed is not None and "did not suffice" in printed and printed.count("--mem-fraction-static") == 1


def test_the_text_report_says_what_was_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", KIMI]) == 1
    out = capsys.readouterr().out
    assert "fix checked with the accountant (Kimi-K2.5" in out and "re-plans as kv_pool_oom" in out


def test_model_path_lets_an_old_log_be_checked_and_unknown_models_say_why(
        capsys: pytest.CaptureFixture[str]) -> None:
    log = str(LOGS / "v0.2.7_tp2_not-enough-memory.log")
    main(["diagnose", "--json", log])
    assert "no config.json found" in json.loads(capsys.readouterr().out)["fix_check"]["skipped"]
    main(["diagnose", "--json", "--model-path", "Llama-3.1-70B", log])
    check = json.loads(capsys.readouterr().out)["fix_check"]
    assert check["model"] == "Llama-3.1-70B" and check["checked"]


def test_ok_and_non_memory_runs_have_no_fix_check(capsys: pytest.CaptureFixture[str]) -> None:
    main(["diagnose", "--json", str(LOGS / "v0.4.8_docker_tp4_mla_ok.log")])
    assert json.loads(capsys.readouterr().out)["fix_check"] is None


def test_a_log_without_the_before_reading_is_replanned_from_after_plus_weights(
        capsys: pytest.CaptureFixture[str]) -> None:
    # case 58: DeepSeek-R1 (the DeepSeek-V3 architecture) logs only "avail mem=21.73 GB, mem usage=166.59 GB"
    log = str(REPO / "tests" / "corpus" / "diagnose" / "58_deepseek-r1_8gpu-rocm-dp8_2025-07_negative-profile.log")
    main(["diagnose", "--json", "--model-path", "DeepSeek-V3", log])
    doc = json.loads(capsys.readouterr().out)
    acc, check = doc["accountant"], doc["fix_check"]
    # the smallest fraction for a pool is W / P with P = A + W read off the one line
    assert acc["min_mem_fraction_static"] == pytest.approx(166.59 / (21.73 + 166.59), abs=0.001)
    assert [c["change"] for c in check["checked"]] == [f"--mem-fraction-static {fixcheck.changes(doc['fix'])[0][1]}"]
    assert check["checked"][0]["verdict"] in fixcheck.FITS

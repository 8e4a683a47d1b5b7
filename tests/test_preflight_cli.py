"""`sglwrap preflight`: the JSON contract, exit codes, option splitting; no NVML reached (all --assume)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglwrap.cli import main
from sglwrap.commands.preflight import OWN_OPTIONS, split_args
from sglwrap.host import nvml
from sglwrap.host.facts import facts_from_dict
from sglwrap.sglang.flags import bundled_table

FIX = Path(__file__).parent / "fixtures" / "hostfacts"
# SGLang 0.5.23 as its wheel pins it (torch 2.14.1, FlashInfer 0.7.2, CUDA 13: DESIGN.md); an older torch beside the
# sglang-kernel 0.4.10 of the test venv is a real ABI break (compat entry sglang-kernel-torch-abi-2.14)
STORY = "sglang=0.5.23,torch=2.14.1+cu130,flashinfer-python=0.7.2,driver=580.95.05"


@pytest.fixture(autouse=True)
def no_real_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> object:
        raise AssertionError("a test reached the real NVML")

    monkeypatch.setattr(nvml, "_load_pynvml", refuse)


def preflight_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict, str]:
    rc = main(["preflight", "--json", *argv])
    out = capsys.readouterr()
    return rc, json.loads(out.out), out.err


def test_json_contract_on_the_story_box(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prof = tmp_path / "story.yaml"
    prof.write_text("name: story\ndescription: d\nextends: fewchan\nfeatures:\n"
                    "  flashinfer_allreduce_fusion: prefer\n  torch_symm_mem: prefer\n")
    rc, doc, err = preflight_json(capsys, "--profile", str(prof), "--assume", "8xRTX-PRO-6000",
                                  "--assume-stack", STORY, "--", "--model-path", "/m", "--tp-size", "8")
    assert rc == 1 and doc["verdict"] == "downgraded" and doc["exit_code"] == 1
    assert {"verdict", "checks", "profile", "facts"} <= set(doc)
    assert all(set(c) == {"id", "status", "reason", "fix"} for c in doc["checks"])
    assert {c["status"] for c in doc["checks"]} <= {"pass", "warn", "downgrade", "block", "skip"}
    assert doc["profile"]["name"] == "story" and doc["profile"]["features"] == {}
    assert doc["profile"]["env"]["NCCL_MAX_NCHANNELS"] == {"value": "2", "force": False}
    facts = facts_from_dict(doc["facts"])
    assert facts.gpu_count == 8 and facts.packages["flashinfer-python"] == "0.7.2"
    assert "flashinfer-fusion" in err and "DOWN" in err  # the table went to stderr


def test_blocked_exits_78(capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc, _ = preflight_json(capsys, "--assume", "8xRTX-PRO-6000", "--assume-stack", STORY,
                                "--tp-size", "8", "--enable-symm-mem")
    assert rc == 78 and doc["verdict"] == "blocked"
    assert next(c for c in doc["checks"] if c["id"] == "symm-mem")["status"] == "block"


def test_ok_exits_0_with_a_captured_facts_file(capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc, _ = preflight_json(capsys, "--assume", str(FIX / "h200x2-capture.json"),
                                "--assume-stack", "sglang=0.5.23", "--", "--tp-size", "2")
    assert rc == 0 and doc["verdict"] == "ok", [c for c in doc["checks"] if c["status"] != "pass"]
    assert doc["facts"]["source"].startswith("capture:")


def test_profile_from_environment(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLWRAP_PROFILE", "pcie-ring")
    _, doc, _ = preflight_json(capsys, "--assume", "2xRTX-PRO-6000", "--assume-stack", STORY, "--tp-size", "2")
    assert doc["profile"]["name"] == "pcie-ring"


def test_bad_assume_stack_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["preflight", "--assume", "1xH100", "--assume-stack", "torch"]) == 64
    assert "--assume-stack" in capsys.readouterr().err


def test_split_args_keeps_sglang_options_that_start_like_ours() -> None:
    own, rest = split_args(["--json", "--json-model-override-args", "{}", "--profile", "fewchan", "--tp-size", "2",
                            "--", "--force"])
    assert own == {"--json": True, "--profile": "fewchan"}
    assert rest == ["--json-model-override-args", "{}", "--tp-size", "2", "--force"]


def test_own_options_are_not_sglang_flags() -> None:
    for version in ("0.5.23", "0.5.9"):
        table = bundled_table(version)
        assert not set(OWN_OPTIONS) & set(table.flags), version

"""The preflight gate inside `sglwrap launch`: blocked exits 78 before SGLang; downgraded launches what remains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglwrap.cli import main
from sglwrap.host import nvml

STORY = "sglang=0.5.23,torch=2.14.1+cu130,flashinfer-python=0.7.2,driver=580.95.05"  # as 0.5.23 pins it


@pytest.fixture(autouse=True)
def no_real_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> object:
        raise AssertionError("a test reached the real NVML")

    monkeypatch.setattr(nvml, "_load_pynvml", refuse)


@pytest.fixture
def story(tmp_path: Path) -> str:
    p = tmp_path / "story.yaml"
    p.write_text("name: story\ndescription: d\nextends: fewchan\nfeatures:\n  flashinfer_allreduce_fusion: prefer\n"
                 "  torch_symm_mem: prefer\n")
    return str(p)


def test_downgraded_profile_is_what_launches_and_the_manifest_says_why(
        capsys: pytest.CaptureFixture[str], story: str) -> None:
    rc = main(["launch", "--dry-run", "--keep", "--json", "--profile", story, "--assume", "8xRTX-PRO-6000",
               "--assume-stack", STORY, "--", "--model-path", "m", "--tp-size", "8"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    doc = json.loads(out.out)
    assert "--enable-torch-symm-mem" not in doc["argv"]
    assert not any("allreduce-fusion" in a for a in doc["argv"])
    assert doc["env"]["NCCL_MAX_NCHANNELS"] == "2"
    pre = doc["gates"]["preflight"]
    assert pre["verdict"] == "downgraded"
    assert {d["feature"] for d in pre["downgrades"]} == {"flashinfer_allreduce_fusion", "torch_symm_mem"}
    manifest = json.loads(Path(doc["manifest"]).read_text())
    assert "SM90 or SM10X" in json.dumps(manifest)


def test_blocked_launch_exits_78_before_sglang(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from sglwrap import launch

    def no_exec(*a: object, **k: object) -> None:
        raise AssertionError("SGLang was started")

    monkeypatch.setattr(launch, "exec_plan", no_exec)
    rc = main(["launch", "--profile", "fewchan", "--assume", "8xRTX-PRO-6000", "--assume-stack", STORY,
               "--", "--model-path", "m", "--tp-size", "8", "--enable-symm-mem"])
    err = capsys.readouterr().err
    assert rc == 78
    assert "preflight blocked the launch" in err and "symm-mem" in err and "NCCL_NVLS_ENABLE=1" in err


def test_force_launches_and_records_the_blocks(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["launch", "--dry-run", "--keep", "--json", "--force", "--profile", "fewchan", "--assume", "8xRTX-PRO-6000",
               "--assume-stack", STORY, "--", "--model-path", "m", "--tp-size", "8",
               "--moe-a2a-backend", "flashinfer"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert doc["gates"]["preflight"]["forced"] is True
    assert any(c["id"] == "ep-a2a" and c["status"] == "block" for c in doc["gates"]["preflight"]["checks"])

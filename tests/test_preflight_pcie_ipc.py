"""The pcie-ipc-allreduce check: SGLang 0.5.23's opt-in FlashInfer PCIe-IPC all-reduce, which quietly keeps NCCL
when its conditions fail (srt/distributed/device_communicators/pcie_ipc_ar.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglwrap.preflight.model import Status
from sglwrap.profiles import Profile, load_profile

from .test_preflight_scenarios import box, check, h200, run

PREFER = "name: ipc\ndescription: PCIe-IPC all-reduce when available\nextends: fewchan\nfeatures:\n  pcie_ipc_allreduce: prefer\n"


@pytest.fixture
def ipc(tmp_path: Path) -> Profile:
    path = tmp_path / "ipc.yaml"
    path.write_text(PREFER)
    return load_profile(str(path))


def test_not_requested_passes() -> None:
    assert check(run(box(**{"flashinfer-python": "0.7.2"}), None, "--tp-size", "8"), "pcie-ipc-allreduce").status \
        is Status.PASS


def test_sm120_pcie_box_with_flashinfer_072_keeps_it(ipc: Profile) -> None:
    r = run(box(**{"flashinfer-python": "0.7.2"}), ipc, "--tp-size", "8")
    v = check(r, "pcie-ipc-allreduce")
    assert v.status is Status.PASS and "PCIe" in v.reason
    assert r.profile.features["pcie_ipc_allreduce"] == "prefer"  # type: ignore[union-attr]


def test_world_size_six_drops_it_with_the_reason(ipc: Profile) -> None:
    r = run(box("6xRTX-PRO-6000", **{"flashinfer-python": "0.7.2"}), ipc, "--tp-size", "6")
    v = check(r, "pcie-ipc-allreduce")
    assert v.status is Status.DOWNGRADE and "[2, 4, 8]" in v.reason
    assert "pcie_ipc_allreduce" not in r.profile.features  # type: ignore[union-attr]


def test_user_environment_asking_for_it_under_deterministic_mode_blocks() -> None:
    r = run(box(**{"flashinfer-python": "0.7.2"}), None, "--tp-size", "8", "--enable-deterministic-inference",
            environ={"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"})
    v = check(r, "pcie-ipc-allreduce")
    assert v.status is Status.BLOCK and "deterministic" in v.reason
    assert "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1" in v.reason


def test_older_sglang_does_not_know_the_variable(ipc: Profile) -> None:
    r = run(box(sglang="0.5.9", **{"flashinfer-python": "0.7.2"}), ipc, "--tp-size", "8")
    v = check(r, "pcie-ipc-allreduce")
    assert v.status is Status.DOWNGRADE and "0.5.9" in v.reason


def test_on_nvlink_it_only_warns_that_custom_allreduce_goes_first(ipc: Profile) -> None:
    v = check(run(h200(), ipc, "--tp-size", "2"), "pcie-ipc-allreduce")
    assert v.status in (Status.WARN, Status.DOWNGRADE)


def test_builtin_pcie_ipc_profile_sets_the_knob_on_the_story_box_and_is_dropped_where_it_cannot_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from sglwrap.cli import main

    base = ["launch", "--dry-run", "--json", "--profile", "pcie-ipc", "--assume-stack", "flashinfer-python=0.7.2"]
    assert main([*base, "--assume", "8xRTX-PRO-6000", "--", "--model-path", "m", "--tp-size", "8"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["env"]["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "1"
    assert main([*base, "--assume", "6xRTX-PRO-6000", "--", "--model-path", "m", "--tp-size", "6"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" not in doc["env"]
    assert doc["gates"]["preflight"]["downgrades"][0]["feature"] == "pcie_ipc_allreduce"

"""The NVML layer on a real GPU machine against nvidia-smi: the committed capture, and (marked gpu) a live probe."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sglwrap.host.facts import facts_from_dict
from tests.test_host_nvml import agree_with_nvidia_smi

FIX = Path(__file__).parent / "fixtures" / "hostfacts"


def test_captured_h200_pair_agrees_with_nvidia_smi_captured_beside_it() -> None:
    facts = facts_from_dict(json.loads((FIX / "h200x2-capture.json").read_text()))
    agree_with_nvidia_smi(facts, (FIX / "h200x2-nvidia-smi-query.csv").read_text(),
                          (FIX / "h200x2-nvidia-smi-topo-m.txt").read_text())
    assert facts.all_pairs_nvlink and facts.nvswitch
    assert facts.links[0].common_ancestor == "PHB"  # HOSTBRIDGE, although NV18 joins the pair


def test_captured_cvd_subset_maps_by_uuid() -> None:
    full = facts_from_dict(json.loads((FIX / "h200x2-capture.json").read_text()))
    one = facts_from_dict(json.loads((FIX / "h200x2-cvd1-capture.json").read_text()))
    assert [g.nvml_index for g in one.gpus] == [1]
    assert one.gpus[0].index == 0
    assert one.gpus[0].uuid == full.gpus[1].uuid
    assert one.cuda_visible_devices and full.gpus[1].uuid.startswith(one.cuda_visible_devices)  # type: ignore[union-attr]


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs an NVIDIA GPU and nvidia-smi")
def test_live_probe_agrees_with_live_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    from sglwrap.host.nvml import probe_nvml

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    facts = probe_nvml(environ={})
    query = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name,memory.total,pci.bus_id,compute_cap,"
                            "driver_version", "--format=csv"], capture_output=True, text=True, check=True).stdout
    topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, check=True).stdout
    assert facts.gpus, facts.notes
    agree_with_nvidia_smi(facts, query, topo)


def test_captured_single_h200_agrees_with_nvidia_smi_and_plans_alone() -> None:
    """Captured on the 1-GPU nvidia-h200 device machine (2026-11-30) with `python3 -m sglwrap.host.capture`."""
    facts = facts_from_dict(json.loads((FIX / "h200x1-capture.json").read_text()))
    agree_with_nvidia_smi(facts, (FIX / "h200x1-nvidia-smi-query.csv").read_text(),
                          (FIX / "h200x1-nvidia-smi-topo-m.txt").read_text())
    assert facts.gpu_count == 1 and facts.links == () and not facts.all_pairs_nvlink
    from sglwrap.preflight.runner import run_preflight

    blocked = run_preflight(facts, None, ("--model-path", "m", "--tp-size", "2"))
    assert blocked.verdict == "blocked"
    assert [v.id for v in blocked.checks if v.status.value == "block"] == ["gpu-count"]

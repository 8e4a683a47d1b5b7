"""The reference story as scenarios: 8x RTX PRO 6000 Blackwell (SM120) on PCIe, driver 580, SGLang 0.5.23, torch
cu128 with and without sm_120, FlashInfer 0.6.16 vs 0.7.2; and the captured 2x H200 for the NVLink answers.

Each of the story's four failures (FlashInfer all-reduce fusion, custom all-reduce at TP=2 on PCIe, torch symm-mem,
EP flashinfer all-to-all) must be predicted with the right status and fix; what remains of the profile launches.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sglwrap.host.catalogue import resolve_assume
from sglwrap.host.facts import HostFacts, facts_from_dict
from sglwrap.host.probe import apply_assume_stack
from sglwrap.preflight import Status, run_preflight
from sglwrap.preflight.runner import PreflightResult
from sglwrap.profiles import Profile, load_profile
from sglwrap.sglang.flags import bundled_table

FIX = Path(__file__).parent / "fixtures" / "hostfacts"
# flashinfer 0.7.2: what SGLang 0.5.23 asserts at startup (compat sglang-0.5.23-flashinfer-floor); the story's own
# 0.6.16 is kept only where a test is about that version
STORY_STACK = {"sglang": "0.5.23", "torch": "2.9.1+cu128", "flashinfer-python": "0.7.2", "driver": "580.95.05"}
STORY_PROFILE = """\
name: story
description: the reference story's fewchan launch with every optimisation it tried, as preferences
extends: fewchan
features:
  flashinfer_allreduce_fusion: prefer
  torch_symm_mem: prefer
"""


def box(gpus: str = "8xRTX-PRO-6000", **stack: str) -> HostFacts:
    return apply_assume_stack(resolve_assume(gpus), {**STORY_STACK, **stack})


def h200() -> HostFacts:
    return facts_from_dict(json.loads((FIX / "h200x2-capture.json").read_text()))


@pytest.fixture
def story(tmp_path: Path) -> Profile:
    path = tmp_path / "story.yaml"
    path.write_text(STORY_PROFILE)
    return load_profile(str(path))


def check(result: PreflightResult, cid: str) -> Any:
    return next(v for v in result.checks if v.id == cid)


def run(facts: HostFacts, profile: Profile | None, *args: str, **kw: Any) -> PreflightResult:
    return run_preflight(facts, profile, args, flags=bundled_table(facts.packages.get("sglang", "0.5.23")), **kw)


# --- failure 1: FlashInfer all-reduce fusion -----------------------------------------------------------------


def test_fusion_on_sm120_with_sglang_0523_is_dropped_with_sglangs_own_message(story: Profile) -> None:
    r = run(box(), story, "--tp-size", "8")
    v = check(r, "flashinfer-fusion")
    assert v.status is Status.DOWNGRADE
    assert "requires SM90 or SM10X" in v.reason and "SM12x" in v.reason
    assert "flashinfer_allreduce_fusion" not in r.profile.features  # type: ignore[union-attr]


def test_fusion_on_sm120_with_story_era_stack_names_flashinfers_jit_error(story: Profile) -> None:
    r = run(box(sglang="0.5.9", **{"flashinfer-python": "0.6.3"}), story, "--tp-size", "8")
    v = check(r, "flashinfer-fusion")
    assert v.status is Status.DOWNGRADE
    assert "No supported CUDA architectures found for major versions [9, 10]" in v.reason
    assert "0.6.17" in v.fix


def test_fusion_on_sm120_with_old_sglang_and_flashinfer_072_is_supported(story: Profile) -> None:
    r = run(box(sglang="0.5.9", **{"flashinfer-python": "0.7.2"}), story, "--tp-size", "8")
    assert check(r, "flashinfer-fusion").status is Status.PASS
    assert "flashinfer_allreduce_fusion" in r.profile.features  # type: ignore[union-attr]


def test_explicit_fusion_flag_blocks_unless_forced() -> None:
    prof = load_profile("fewchan")
    blocked = run(box(), prof, "--tp-size", "8", "--enable-flashinfer-allreduce-fusion")
    assert check(blocked, "flashinfer-fusion").status is Status.BLOCK
    assert "remove --enable-flashinfer-allreduce-fusion" in check(blocked, "flashinfer-fusion").fix
    assert blocked.verdict == "blocked" and blocked.exit_code == 78
    forced = run(box(), prof, "--tp-size", "8", "--enable-flashinfer-allreduce-fusion", force=True)
    assert check(forced, "flashinfer-fusion").status is Status.WARN


def test_required_fusion_blocks(tmp_path: Path) -> None:
    p = tmp_path / "req.yaml"
    p.write_text("name: req\ndescription: d\nextends: fewchan\nfeatures:\n  flashinfer_allreduce_fusion: require\n")
    r = run(box(), load_profile(str(p)), "--tp-size", "8")
    v = check(r, "flashinfer-fusion")
    assert v.status is Status.BLOCK and "requires flashinfer_allreduce_fusion" in v.reason


def test_fusion_on_h200_passes(story: Profile) -> None:
    r = run(h200(), story, "--tp-size", "2")
    assert check(r, "flashinfer-fusion").status is Status.PASS


# --- failure 2: custom all-reduce at TP=2 on PCIe ------------------------------------------------------------


def test_custom_allreduce_two_pcie_gpus_downgrades_to_disable_flag(tmp_path: Path) -> None:
    p = tmp_path / "auto.yaml"
    p.write_text("name: auto\ndescription: d\nextends: fewchan\nfeatures:\n  custom_all_reduce: auto\n")
    r = run(box("2xRTX-PRO-6000"), load_profile(str(p)), "--tp-size", "2")
    v = check(r, "custom-allreduce")
    assert v.status is Status.DOWNGRADE
    assert "--disable-custom-all-reduce" in v.fix and "2x slower" in v.reason
    assert r.profile.features["custom_all_reduce"] == "off"  # type: ignore[union-attr]
    assert r.verdict == "downgraded" and r.exit_code == 1


def test_custom_allreduce_two_pcie_gpus_only_advises_when_the_profile_does_not_name_it() -> None:
    r = run(box("2xRTX-PRO-6000"), load_profile("fewchan"), "--tp-size", "2")
    v = check(r, "custom-allreduce")
    assert v.status is Status.WARN and "--disable-custom-all-reduce" in v.fix
    assert r.verdict == "ok" and "custom_all_reduce" not in r.profile.features  # type: ignore[union-attr]


def test_custom_allreduce_eight_pcie_gpus_is_sglangs_own_business() -> None:
    v = check(run(box(), load_profile("fewchan"), "--tp-size", "8"), "custom-allreduce")
    assert v.status is Status.PASS and "disables it itself" in v.reason


def test_custom_allreduce_on_h200_nvlink_runs() -> None:
    v = check(run(h200(), load_profile("fewchan"), "--tp-size", "2"), "custom-allreduce")
    assert v.status is Status.PASS and "NVLink" in v.reason


def test_custom_allreduce_already_off_in_profile_passes() -> None:
    v = check(run(box("2xRTX-PRO-6000"), load_profile("pcie-ring"), "--tp-size", "2"), "custom-allreduce")
    assert v.status is Status.PASS


# --- failure 3: torch symmetric memory -----------------------------------------------------------------------


def test_torch_symm_mem_on_sm120_is_dropped_citing_sglangs_table(story: Profile) -> None:
    r = run(box(), story, "--tp-size", "8")
    v = check(r, "symm-mem")
    assert v.status is Status.DOWNGRADE
    assert "majors [9, 10]" in v.reason and "[12]" in v.reason
    assert "torch_symm_mem" not in r.profile.features  # type: ignore[union-attr]


def test_explicit_torch_symm_mem_blocks_on_sm120() -> None:
    r = run(box(), load_profile("fewchan"), "--tp-size", "8", "--enable-torch-symm-mem")
    assert check(r, "symm-mem").status is Status.BLOCK


def test_nccl_symm_mem_on_pcie_blocks_because_it_forces_nvls() -> None:
    r = run(box(), load_profile("fewchan"), "--tp-size", "8", "--enable-symm-mem")
    v = check(r, "symm-mem")
    assert v.status is Status.BLOCK and "NCCL_NVLS_ENABLE=1" in v.reason and "NVSwitch" in v.reason


def test_torch_symm_mem_on_captured_h200_is_off_because_multicast_is_disabled_there(story: Profile) -> None:
    v = check(run(h200(), story, "--tp-size", "2"), "symm-mem")
    assert v.status is Status.DOWNGRADE and "TORCH_SYMM_MEM_DISABLE_MULTICAST" in v.reason


def test_torch_symm_mem_on_hgx_h200_passes(story: Profile) -> None:
    v = check(run(box("8xH200", torch="2.14.1"), story, "--tp-size", "8"), "symm-mem")
    assert v.status is Status.PASS


# --- failure 4: EP with the flashinfer all-to-all ------------------------------------------------------------


def test_ep_flashinfer_a2a_without_attention_dp_blocks_with_the_flag_to_add() -> None:
    r = run(box(), load_profile("fewchan"), "--tp-size", "8", "--ep-size", "8", "--moe-a2a-backend", "flashinfer")
    v = check(r, "ep-a2a")
    assert v.status is Status.BLOCK and "attn-dp-size equal to --tp-size" in v.reason
    assert "--attn-dp-size 8" in v.fix


def test_ep_flashinfer_a2a_on_sglang_059_suggests_dp_attention() -> None:
    r = run(box(sglang="0.5.9"), load_profile("fewchan"), "--tp-size", "8", "--moe-a2a-backend", "flashinfer")
    assert "--enable-dp-attention --dp-size 8" in check(r, "ep-a2a").fix


def test_ep_flashinfer_a2a_with_attention_dp_warns_about_its_workspace() -> None:
    r = run(box(), load_profile("fewchan"), "--tp-size", "8", "--attn-dp-size", "8", "--moe-a2a-backend=flashinfer")
    v = check(r, "ep-a2a")
    assert v.status is Status.WARN and "workspace" in v.reason


def test_ep_flashinfer_a2a_without_chunked_prefill_blocks() -> None:
    r = run(box(), None, "--tp-size", "8", "--attn-dp-size", "8", "--moe-a2a-backend", "flashinfer",
            "--chunked-prefill-size", "-1")
    assert check(r, "ep-a2a").status is Status.BLOCK


# --- the stack underneath ------------------------------------------------------------------------------------


def test_torch_cu128_without_sm120_blocks_and_with_it_passes() -> None:
    without = run(box(**{"torch-arch": "sm_80:sm_90:sm_100"}), None, "--tp-size", "8")
    v = check(without, "torch-arch")
    assert v.status is Status.BLOCK and "sm_120" in v.reason and "cu128" in v.fix
    assert check(run(box(), None, "--tp-size", "8"), "torch-arch").status is Status.PASS


def test_torch_27_default_wheel_is_cu126_without_sm120() -> None:
    v = check(run(box(torch="2.7.1"), None, "--tp-size", "8"), "torch-arch")
    assert v.status is Status.BLOCK


def test_ptx_covers_newer_gpus() -> None:
    assert check(run(box(**{"torch-arch": "sm_90:compute_90"}), None), "torch-arch").status is Status.PASS


def test_cuda13_torch_needs_driver_580() -> None:
    old = check(run(box(torch="2.14.1", driver="570.124.06"), None), "cuda-driver")
    assert old.status is Status.BLOCK and ">= 580" in old.fix
    assert check(run(box(torch="2.14.1"), None), "cuda-driver").status is Status.PASS


def test_flashinfer_cubin_mismatch_warns() -> None:
    v = check(run(box(**{"flashinfer-python": "0.7.2", "flashinfer-cubin": "0.6.13"}), None), "flashinfer-cubin")
    assert v.status is Status.WARN and "flashinfer-cubin==0.7.2" in v.fix


def test_flashinfer_cubin_mismatch_before_0_7_blocks() -> None:
    """FlashInfer < 0.7 raises at import on a mismatched flashinfer-cubin (NVIDIA-NeMo/Export-Deploy PR 679)."""
    v = check(run(box(**{"flashinfer-python": "0.6.10", "flashinfer-cubin": "0.6.8.post1"}), None), "flashinfer-cubin")
    assert v.status is Status.BLOCK and "[flashinfer-cubin-mismatch-raises]" in v.reason
    assert "flashinfer-cubin==0.6.10" in v.fix


def test_flashinfer_cubin_same_base_version_passes() -> None:
    v = check(run(box(**{"flashinfer-python": "0.6.16", "flashinfer-jit-cache": "0.6.16+cu130"}), None),
              "flashinfer-cubin")
    assert v.status is Status.PASS


# --- the whole story: what remains launches ------------------------------------------------------------------


def test_story_box_downgrades_fewchan_and_keeps_its_nccl_settings(story: Profile) -> None:
    r = run(box(), story, "--model-path", "/m", "--tp-size", "8")
    assert r.verdict == "downgraded", [v.to_dict() for v in r.checks]
    assert {c.feature for c in r.changes} == {"flashinfer_allreduce_fusion", "torch_symm_mem"}
    kept = r.profile
    assert kept is not None and kept.features == {}
    assert {k: v.value for k, v in kept.env.items()} == {
        "NCCL_MIN_NCHANNELS": "1", "NCCL_MAX_NCHANNELS": "2", "NCCL_BUFFSIZE": "131072"}
    assert kept.hash != story.hash
    assert len(r.manifest()["downgrades"]) == 2


def test_story_launch_plan_uses_the_downgraded_profile(story: Profile) -> None:
    from sglwrap.launch import plan_launch

    r = run(box(), story, "--model-path", "/m", "--tp-size", "8")
    from sglwrap.sglang.cmdline import parse_cmdline

    cmd = parse_cmdline(("--model-path", "/m", "--tp-size", "8"), bundled_table("0.5.23"))
    plan = plan_launch(r.profile, cmd, python="python3", environ={})  # type: ignore[arg-type]
    assert "--enable-torch-symm-mem" not in plan.argv
    assert not any("allreduce-fusion" in a for a in plan.argv)
    assert plan.env_set.get("NCCL_MAX_NCHANNELS") == "2"


def test_every_required_check_id_reports() -> None:
    r = run(box(), None, "--tp-size", "8")
    assert {v.id for v in r.checks} >= {
        "cuda-driver", "torch-arch", "flashinfer-fusion", "symm-mem", "custom-allreduce", "ep-a2a", "nccl-env",
        "gpu-processes", "gpu-count", "sglang-flags", "flashinfer-cubin", "memory",
        "pcie-ipc-allreduce", "compat"}
    assert all(v.reason for v in r.checks)
    assert all(v.fix for v in r.checks if v.status in (Status.BLOCK, Status.DOWNGRADE, Status.WARN))

"""The compat check's decisions: who chose the failing path decides between downgrade and block; entries are named;
a downgrade reaches the profile (and so the launch); facts nobody knows never fire an entry."""

from __future__ import annotations

import dataclasses

from sglwrap.host.catalogue import resolve_assume
from sglwrap.host.facts import HostFacts
from sglwrap.host.probe import apply_assume_stack
from sglwrap.preflight import Status, run_preflight
from sglwrap.preflight.checks_compat import entries
from sglwrap.profiles import load_profile
from sglwrap.sglang.flags import bundled_table


def facts(spec: str, **stack: str) -> HostFacts:
    f = resolve_assume(spec)
    return apply_assume_stack(f, stack) if stack else f


def compat(f: HostFacts, *argv: str, profile: str | None = "baseline", force: bool = False,
           environ: dict[str, str] | None = None):
    prof = load_profile(profile) if profile else None
    r = run_preflight(f, prof, argv, flags=bundled_table("0.5.23"), environ=environ, force=force)
    return r, next(v for v in r.checks if v.id == "compat")


def test_default_path_crash_is_downgraded_under_baseline_and_recorded() -> None:
    r, v = compat(facts("8xB200"), "--tp-size", "8")
    assert v.status is Status.DOWNGRADE and "[auto-fusion-b200-tp8-rendezvous-hang]" in v.reason
    assert r.verdict == "downgraded"
    assert r.profile is not None and r.profile.features["flashinfer_allreduce_fusion"] == "off"
    assert r.manifest()["downgrades"][0]["feature"] == "flashinfer_allreduce_fusion"


def test_the_users_own_switch_means_no_downgrade() -> None:
    _, v = compat(facts("8xB200"), "--tp-size", "8", "--enforce-disable-flashinfer-allreduce-fusion")
    assert v.status is Status.PASS


def test_an_env_downgrade_becomes_a_forced_worker_variable() -> None:
    f = facts("2xRTX-PRO-6000", nccl="2.30.4")
    r, v = compat(f, "--tp-size", "2")
    assert v.status is Status.DOWNGRADE and "[nccl-2.30.4-sm120-p2p-hang]" in v.reason
    env = r.profile.env["NCCL_P2P_DISABLE"]  # type: ignore[union-attr]
    assert env.value == "1" and env.force


def test_the_users_own_variable_already_avoids_it() -> None:
    _, v = compat(facts("2xRTX-PRO-6000", nccl="2.30.4"), "--tp-size", "2", environ={"NCCL_P2P_DISABLE": "1"})
    assert v.status is Status.PASS


def test_the_users_own_flag_for_a_broken_path_blocks_and_force_only_warns() -> None:
    _, v = compat(facts("1xRTX-5090"), "--attention-backend", "fa3")
    assert v.status is Status.BLOCK and "[attn-fa3-arch]" in v.reason and "--attention-backend" in v.fix
    _, forced = compat(facts("1xRTX-5090"), "--attention-backend", "fa3", force=True)
    assert forced.status is Status.WARN


def test_same_flag_on_a_gpu_it_supports_passes() -> None:
    _, v = compat(facts("1xH100"), "--attention-backend", "fa3")
    assert v.status is Status.PASS


def test_every_matching_entry_is_named() -> None:
    _, v = compat(facts("8xL20"), "--tp-size", "8", "--moe-a2a-backend", "deepep", "--deepep-mode", "normal")
    assert "[deepep-normal-needs-nvlink]" in v.reason and "[deepep-needs-deepgemm-arch]" in v.reason
    assert set(v.detail["entries"]) >= {"deepep-normal-needs-nvlink", "deepep-needs-deepgemm-arch"}


def test_unknown_facts_do_not_fire_entries() -> None:
    """No package versions, no binaries, no /sys facts: only the GPU and the flags are known."""
    bare = dataclasses.replace(resolve_assume("1xGB10"), packages={}, binaries={})
    _, v = compat(bare)
    assert v.status is Status.PASS, v.reason


def test_a_mixed_box_downgrades_the_imbalance_check_for_the_release_that_raises() -> None:
    r, v = compat(facts("1xRTX-A4000+1xRTX-3090", sglang="0.5.9"), "--tp-size", "2")
    assert "[tp-memory-imbalance]" in v.reason
    assert r.profile.env["SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK"].value == "0"  # type: ignore[union-attr]


def test_pcie_profile_on_nvswitch_warns_with_the_measured_cost() -> None:
    r = run_preflight(facts("2xH200"), load_profile("pcie-ring"), ("--tp-size", "2"), flags=bundled_table("0.5.23"))
    v = next(x for x in r.checks if x.id == "profile-fit")
    assert v.status is Status.WARN and "14%" in v.reason and "NVSwitch" in v.reason
    r2 = run_preflight(facts("2xRTX-PRO-6000"), load_profile("pcie-ring"), ("--tp-size", "2"),
                       flags=bundled_table("0.5.23"))
    assert next(x for x in r2.checks if x.id == "profile-fit").status is Status.PASS


def test_headline_counts_skipped_checks() -> None:
    r, _ = compat(facts("1xH100"))
    skipped = [v.id for v in r.checks if v.status is Status.SKIP]
    assert r.headline.startswith("OK") and f"{len(skipped)} of {len(r.checks)} checks skipped" in r.headline
    for cid in skipped:
        assert cid in r.headline


def test_no_message_says_flashinfer_none() -> None:
    r, _ = compat(facts("8xRTX-PRO-6000"), "--tp-size", "8", "--enable-flashinfer-allreduce-fusion", force=True)
    assert all("FlashInfer None" not in v.reason and "flashinfer-python None" not in v.reason for v in r.checks)


def test_live_host_without_gpu_blocks_unless_device_says_otherwise() -> None:
    live = HostFacts(source="nvml", gpus=(), notes=("NVML could not start (NVML Shared Library Not Found)",))
    r = run_preflight(live, None, ("--tp-size", "1"), flags=bundled_table("0.5.23"))
    assert next(v for v in r.checks if v.id == "nvml").status is Status.BLOCK and r.verdict == "blocked"
    r2 = run_preflight(live, None, ("--device", "cpu"), flags=bundled_table("0.5.23"))
    assert next(v for v in r2.checks if v.id == "nvml").status is Status.SKIP


def test_entry_count_and_sources() -> None:
    es = entries()
    assert len(es) >= 80 and all(e.sources for e in es)


def test_sglang_missing_blocks_only_on_the_live_host() -> None:
    """The dev interpreter has no SGLang: a live NVML host blocks, a catalogue or captured host (another machine) warns,
    and --assume-stack sglang=X passes."""
    def status(f: HostFacts) -> Status:
        r = run_preflight(f, None, ("--model-path", "m"), flags=bundled_table("0.5.23"))
        return next(v for v in r.checks if v.id == "sglang-installed").status

    cat = facts("1xH200")
    assert status(cat) is Status.WARN
    assert status(dataclasses.replace(cat, source="capture:box")) is Status.WARN
    assert status(dataclasses.replace(cat, source="nvml")) is Status.BLOCK
    assert status(facts("1xH200", sglang="0.5.23")) is Status.PASS


def test_hybrid_gdn_gate_of_sglang_0_5_9_depends_on_who_chose_the_backend() -> None:
    """0.5.9 (read in its sources): SM100 defaults hybrid-GDN models to triton, SM12x to flashinfer, and the gate
    admits only triton/trtllm_mha on every Blackwell."""
    def run(spec: str, *argv: str):
        f = facts(spec, sglang="0.5.9")
        r = run_preflight(f, load_profile("baseline"), ("--model-path", "Qwen/Qwen3.5-9B", *argv),
                          flags=bundled_table("0.5.9"))
        return r, next(v for v in r.checks if v.id == "compat")

    r, v = run("1xRTX-5090")
    assert v.status is Status.DOWNGRADE and "[attn-hybrid-gdn-blackwell-old-default]" in v.reason
    assert r.profile is not None and r.profile.sglang.get("attention_backend") == "triton"
    _, v = run("1xB200")
    assert "hybrid-gdn" not in v.reason
    _, v = run("1xB200", "--attention-backend", "flashinfer")
    assert v.status is Status.BLOCK and "[attn-hybrid-gdn-blackwell-old-user]" in v.reason
    _, v = run("1xRTX-5090", "--attention-backend", "triton")
    assert "hybrid-gdn" not in v.reason

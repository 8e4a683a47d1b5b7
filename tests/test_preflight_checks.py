"""Host-side checks one by one: gpu-count, gpu-processes, nccl-env, sglang-flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglwrap.host.catalogue import resolve_assume
from sglwrap.host.facts import GpuProcess, HostFacts, facts_from_dict
from sglwrap.preflight import Status, run_preflight
from sglwrap.record import replace
from sglwrap.sglang.cmdline import parse_cmdline
from sglwrap.profiles import load_profile
from sglwrap.sglang.flags import bundled_table

FIX = Path(__file__).parent / "fixtures" / "hostfacts"
GIB = 2**30


def h200() -> HostFacts:
    return facts_from_dict(json.loads((FIX / "h200x2-capture.json").read_text()))


def verdict(facts: HostFacts, cid: str, *args: str, profile: str | None = None, environ: dict[str, str] | None = None):
    prof = load_profile(profile) if profile else None
    r = run_preflight(facts, prof, args, flags=bundled_table("0.5.23"), environ=environ)
    return next(v for v in r.checks if v.id == cid)


@pytest.mark.parametrize(
    ("argv", "need"),
    [
        pytest.param(["--tp-size", "8"], 8, id="tp"),
        pytest.param(["--tp", "2", "--dp-size", "4"], 8, id="tp-times-dp"),
        pytest.param(["--tp-size=4", "--pp-size", "2"], 8, id="tp-times-pp"),
        pytest.param(["--tp-size", "8", "--dp-size", "8", "--enable-dp-attention"], 8, id="dp-attention-inside-tp"),
        pytest.param(["--tp-size", "8", "--attn-dp-size", "8"], 8, id="attn-dp-size"),
        pytest.param([], 1, id="default"),
    ],
)
def test_launch_args_gpus_needed(argv: list[str], need: int) -> None:
    assert parse_cmdline(argv, bundled_table("0.5.23")).gpus_needed == need


def test_gpu_count_blocks_when_short_and_names_cvd() -> None:
    facts = replace(h200(), cuda_visible_devices="0,1")
    v = verdict(facts, "gpu-count", "--tp-size", "4")
    assert v.status is Status.BLOCK and "needs 4" in v.reason and "CUDA_VISIBLE_DEVICES=0,1" in v.reason


def test_gpu_count_no_gpu_is_a_block_with_the_reason() -> None:
    facts = HostFacts(source="nvml", gpus=(), notes=("NVML could not start (Driver Not Loaded)",))
    v = verdict(facts, "gpu-count", "--tp-size", "1", "--device", "cuda")
    assert v.status is Status.BLOCK and "Driver Not Loaded" in v.reason and "--assume" in v.fix
    assert verdict(facts, "gpu-count", "--tp-size", "1").status is Status.WARN
    assert verdict(facts, "gpu-count", "--device", "cpu").status is Status.SKIP


def test_gpu_count_per_node_with_nnodes() -> None:
    assert verdict(h200(), "gpu-count", "--tp-size", "4", "--nnodes", "2").status is Status.PASS


def test_gpu_count_mixed_gpus_warn() -> None:
    f = h200()
    g1 = replace(f.gpus[1], name="NVIDIA H100 80GB HBM3", memory_total_bytes=80 * GIB)
    v = verdict(replace(f, gpus=(f.gpus[0], g1)), "gpu-count", "--tp-size", "2")
    assert v.status is Status.WARN


def with_procs(used_gib: float, pid: int = 31337) -> HostFacts:
    f = h200()
    g = f.gpus[0]
    used = int(used_gib * GIB)
    g0 = replace(g, processes=(GpuProcess(pid, used, "python -m sglang.launch_server"),),
                 memory_free_bytes=g.memory_total_bytes - used)
    return replace(f, gpus=(g0, f.gpus[1]))


def test_leftover_worker_holding_most_memory_blocks_with_its_pid() -> None:
    v = verdict(with_procs(120), "gpu-processes", "--tp-size", "2")
    assert v.status is Status.BLOCK and "pid 31337" in v.reason and "kill 31337" in v.fix


def test_small_process_only_warns() -> None:
    assert verdict(with_procs(2), "gpu-processes", "--tp-size", "2").status is Status.WARN


def test_memory_used_by_unnamed_processes_is_reported() -> None:
    f = h200()
    g0 = replace(f.gpus[0], memory_free_bytes=f.gpus[0].memory_total_bytes // 2)
    v = verdict(replace(f, gpus=(g0, f.gpus[1])), "gpu-processes", "--tp-size", "2")
    assert v.status is Status.BLOCK and "cannot name" in v.reason


def test_clean_captured_gpus_pass_and_catalogue_skips() -> None:
    assert verdict(h200(), "gpu-processes", "--tp-size", "2").status is Status.PASS
    assert verdict(resolve_assume("2xH200"), "gpu-processes").status is Status.SKIP


@pytest.mark.parametrize(
    ("hw", "env", "status", "words"),
    [
        pytest.param("8xRTX-PRO-6000", {"NCCL_NVLS_ENABLE": "1"}, Status.BLOCK, "no NVSwitch", id="nvls-on-pcie"),
        pytest.param("8xH200", {"NCCL_NVLS_ENABLE": "1"}, Status.PASS, "", id="nvls-on-nvswitch"),
        pytest.param("8xRTX-PRO-6000", {"NCCL_PROTO": "LL128"}, Status.WARN, "LL128", id="ll128-pcie"),
        pytest.param("8xRTX-PRO-6000", {"NCCL_PROTO": "^LL128"}, Status.PASS, "", id="ll128-excluded"),
        pytest.param("8xRTX-PRO-6000", {"NCCL_PROTO": "allreduce:LL128;broadcast:Simple"}, Status.WARN, "LL128",
                     id="ll128-per-func"),
        pytest.param("8xH200", {"NCCL_PROTO": "LL128"}, Status.PASS, "", id="ll128-nvlink"),
        pytest.param("8xRTX-PRO-6000", {"NCCL_P2P_LEVEL": "PIX"}, Status.WARN, "NODE", id="p2p-level-too-low"),
        pytest.param("8xRTX-PRO-6000", {"NCCL_P2P_LEVEL": "SYS"}, Status.PASS, "", id="p2p-level-sys"),
        pytest.param("8xRTX-PRO-6000", {"NCCL_P2P_LEVEL": "phb"}, Status.WARN, "case-sensitive", id="lowercase"),
        pytest.param("8xRTX-PRO-6000", {"NCCL_P2P_LEVEL": "1"}, Status.WARN, "NODE", id="legacy-int"),
        pytest.param("8xH200", {"NCCL_P2P_DISABLE": "1"}, Status.WARN, "NVLink", id="p2p-off-on-nvlink"),
        pytest.param("8xH200", {"NCCL_MIN_NCHANNELS": "8", "NCCL_MAX_NCHANNELS": "2"}, Status.WARN, "MIN_NCHANNELS=8 >",
                     id="min-above-max"),
    ],
)
def test_nccl_env_against_topology(hw: str, env: dict[str, str], status: Status, words: str) -> None:
    v = verdict(resolve_assume(hw), "nccl-env", "--tp-size", "8", environ=env)
    assert v.status is status, v.reason
    assert words in v.reason


def test_nccl_env_reads_profile_values_and_user_env_wins() -> None:
    v = verdict(resolve_assume("8xRTX-PRO-6000"), "nccl-env", profile="fewchan", environ={"NCCL_MAX_NCHANNELS": "4"})
    assert "NCCL_MAX_NCHANNELS=4" in v.reason and "NCCL_MIN_NCHANNELS=1" in v.reason


def test_nccl_env_on_captured_h200_says_nvswitch() -> None:
    v = verdict(h200(), "nccl-env", "--tp-size", "2", profile="pcie-ring")
    assert v.status is Status.PASS and "NVSwitch" in v.reason


@pytest.mark.parametrize(
    ("argv", "status", "words"),
    [
        pytest.param(["--tp-size", "2", "--model-path", "m"], Status.PASS, "", id="exact"),
        pytest.param(["--tp", "2"], Status.WARN, "--tp -> --tp-size", id="abbreviation"),
    ],
)
def test_sglang_flags(argv: list[str], status: Status, words: str) -> None:
    v = verdict(h200(), "sglang-flags", *argv)
    assert v.status is status, v.reason
    assert words in v.reason


@pytest.mark.parametrize(("argv", "words"), [
    pytest.param(["--tp-sise", "2"], "--tp-size", id="typo"),
    pytest.param(["--cuda-graph-max-bs", "128"], "ambiguous", id="ambiguous-in-0523"),
])
def test_sglang_flags_refused_when_the_command_line_is_read(argv: list[str], words: str) -> None:
    """Unknown and ambiguous options never reach the checks: reading the command line refuses them (exit 64),
    naming the flag SGLang would have meant."""
    from sglwrap.errors import UsageError

    with pytest.raises(UsageError) as e:
        verdict(h200(), "sglang-flags", *argv)
    assert words in str(e.value)


def test_sglang_flags_profile_setting_without_flag_in_old_sglang_blocks() -> None:
    facts = replace(h200(), packages={**h200().packages, "sglang": "0.5.9"})
    r = run_preflight(facts, load_profile("lowgraph"), (), flags=bundled_table("0.5.9"))
    v = next(x for x in r.checks if x.id == "sglang-flags")
    assert v.status in (Status.PASS, Status.BLOCK)  # 0.5.9 spells it --cuda-graph-max-bs: must be found
    assert v.status is Status.PASS, v.reason


def test_sglang_flags_skip_without_table() -> None:
    r = run_preflight(h200(), None, ("--tp-size", "2"), flags=None)
    assert next(x for x in r.checks if x.id == "sglang-flags").status is Status.SKIP

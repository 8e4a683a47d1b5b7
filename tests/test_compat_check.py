"""The compat check's decisions: who chose the failing path decides between downgrade and block; entries are named;
a downgrade reaches the profile (and so the launch); facts nobody knows never fire an entry."""

from __future__ import annotations

from pathlib import Path

from sglwrap.host.catalogue import resolve_assume
from sglwrap.host.facts import HostFacts
from sglwrap.host.probe import apply_assume_stack
from sglwrap.preflight import Status, run_preflight
from sglwrap.preflight.checks_compat import entries
from sglwrap.profiles import load_profile
from sglwrap.record import replace
from sglwrap.sglang.flags import bundled_table
from tests.compat_helpers import model_dir


def facts(spec: str, **stack: str) -> HostFacts:
    f = resolve_assume(spec)
    return apply_assume_stack(f, stack) if stack else f


def compat(f: HostFacts, *argv: str, profile: str | None = "baseline", force: bool = False,
           environ: dict[str, str] | None = None):
    prof = load_profile(profile) if profile else None
    r = run_preflight(f, prof, argv, flags=bundled_table("0.5.23"), environ=environ, force=force)
    return r, next(v for v in r.checks if v.id == "compat")


def test_default_path_crash_is_downgraded_under_baseline_and_recorded() -> None:
    r, v = compat(facts("2xRTX-4090", sglang="0.4.4.post1"), "--tp-size", "2")
    assert v.status is Status.DOWNGRADE and "[custom-ar-geforce-peer-access]" in v.reason
    assert r.verdict == "downgraded"
    assert r.profile is not None and r.profile.features["custom_all_reduce"] == "off"
    assert r.manifest()["downgrades"][0]["feature"] == "custom_all_reduce"


def test_the_users_own_switch_means_no_downgrade() -> None:
    _, v = compat(facts("2xRTX-4090", sglang="0.4.4.post1"), "--tp-size", "2", "--disable-custom-all-reduce")
    assert v.status is Status.PASS


def test_a_single_report_warns_and_changes_nothing() -> None:
    """One report of a hang on 8x B200 (issue 29073): the launch keeps SGLang's fusion and is told about it."""
    r, v = compat(facts("8xB200", sglang="0.5.20"), "--tp-size", "8")
    assert v.detail["entries"].get("auto-fusion-b200-tp8-rendezvous-hang") == "warn"
    assert r.profile is not None and r.profile.features.get("flashinfer_allreduce_fusion") != "off"


def test_an_env_downgrade_becomes_a_forced_worker_variable() -> None:
    f = facts("4xH200", **{"nvidia-caps": "no"})
    r, v = compat(f, "--tp-size", "4", "--enable-nccl-nvls")
    assert v.status is Status.DOWNGRADE and "[nccl-nvls-no-multicast-device]" in v.reason
    env = r.profile.env["NCCL_NVLS_ENABLE"]  # type: ignore[union-attr]
    assert env.value == "0" and env.force


def test_the_users_own_variable_already_avoids_it() -> None:
    _, v = compat(facts("4xH200", **{"nvidia-caps": "no"}), "--tp-size", "4", "--enable-nccl-nvls",
                  environ={"NCCL_NVLS_ENABLE": "0"})
    assert v.status is Status.PASS


def test_a_one_report_entry_only_warns() -> None:
    """nccl-2.30.4-sm120-p2p-hang rests on one report: it names the switch but changes nothing."""
    r, v = compat(facts("2xRTX-PRO-6000", nccl="2.30.4"), "--tp-size", "2")
    assert v.status is Status.WARN and "[nccl-2.30.4-sm120-p2p-hang]" in v.reason
    assert r.profile is not None and "NCCL_P2P_DISABLE" not in r.profile.env


def test_the_users_own_flag_for_a_broken_path_blocks_and_force_only_warns() -> None:
    _, v = compat(facts("1xRTX-5090"), "--attention-backend", "fa3")
    assert v.status is Status.BLOCK and "[attn-fa3-arch]" in v.reason and "--attention-backend" in v.fix
    _, forced = compat(facts("1xRTX-5090"), "--attention-backend", "fa3", force=True)
    assert forced.status is Status.WARN


def test_same_flag_on_a_gpu_it_supports_passes() -> None:
    _, v = compat(facts("1xH100"), "--attention-backend", "fa3")
    assert v.status is Status.PASS


def test_every_matching_entry_is_named() -> None:
    _, v = compat(facts("8xL20"), "--tp-size", "8", "--moe-a2a-backend", "deepep", "--deepep-mode", "auto")
    assert "[deepep-normal-needs-nvlink]" in v.reason and "[deepep-needs-deepgemm-arch]" in v.reason
    assert set(v.detail["entries"]) >= {"deepep-normal-needs-nvlink", "deepep-needs-deepgemm-arch"}


def test_unknown_facts_do_not_fire_entries() -> None:
    """No package versions, no binaries, no /sys facts: only the GPU and the flags are known."""
    bare = replace(resolve_assume("1xGB10"), packages={}, binaries={})
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
    assert status(replace(cat, source="capture:box")) is Status.WARN
    assert status(replace(cat, source="nvml")) is Status.BLOCK
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


def _run(spec: str, release: str, *argv: str, **stack: str):
    f = facts(spec, sglang=release, **stack)
    r = run_preflight(f, load_profile("baseline"), argv, flags=bundled_table(release))
    return next(v for v in r.checks if v.id == "compat")


def test_flashinfer_floor_counts_the_backend_the_release_picks_by_itself() -> None:
    """0.5.9 picks flashinfer on an RTX 4090 without being told (server_args), so an old FlashInfer fails at start;
    on an H100 it picks fa3 and the same stack starts; 0.4.7 picks at model load, after the check."""
    old = {"flashinfer-python": "0.5.0", "sgl-kernel": "0.3.21"}
    v = _run("1xRTX-4090", "0.5.9", "--model-path", "Qwen/Qwen3-8B", **old)
    assert v.status is Status.BLOCK and "[sglang-0.5.9-flashinfer-floor]" in v.reason
    assert "flashinfer-floor" not in _run("1xH100", "0.5.9", "--model-path", "Qwen/Qwen3-8B", **old).reason
    assert "flashinfer-floor" not in _run("1xRTX-4090", "0.4.8", "--model-path", "Qwen/Qwen3-8B",
                                          **{"flashinfer-python": "0.2.5"}).reason
    v = _run("1xRTX-4090", "0.4.8", "--model-path", "Qwen/Qwen3-8B", "--attention-backend", "flashinfer",
             **{"flashinfer-python": "0.2.5"})
    assert "[sglang-0.4.7-flashinfer-floor]" in v.reason


def test_default_backend_of_an_unnamed_release_fires_nothing() -> None:
    """With no SGLang named or installed, the bundled release is a guess: its default backend decides no entry."""
    f = facts("1xGB10", **{"flashinfer-python": "0.6.17"})
    r = run_preflight(f, load_profile("baseline"), ("--tp-size", "1"), flags=bundled_table("0.5.23"))
    assert "flashinfer-floor" not in next(v for v in r.checks if v.id == "compat").reason


def test_pipeline_parallelism_on_a_model_class_without_it_blocks_by_release() -> None:
    """Kimi K2.5's class took pp_proxy_tensors from 0.5.10 (read in the sources); Llama's always did."""
    argv = ("--tp-size", "8", "--pp-size", "2", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "h:1")
    v = _run("8xH100", "0.5.9", "--model-path", "moonshotai/Kimi-K2.5", "--trust-remote-code", *argv)
    assert v.status is Status.BLOCK and "[pp-unsupported-model-until-0.5.10]" in v.reason
    assert "pp-unsupported" not in _run("8xH100", "0.5.10", "--model-path", "moonshotai/Kimi-K2.5",
                                        "--trust-remote-code", *argv).reason
    assert "pp-unsupported" not in _run("8xH100", "0.5.9", "--model-path", "meta-llama/Llama-3.1-70B", *argv).reason
    assert "pp-unsupported" not in _run("8xH100", "0.5.9", "--model-path", "moonshotai/Kimi-K2.5",
                                        "--trust-remote-code", "--tp-size", "8").reason


def test_dp_attention_with_speculative_decoding_blocks_before_0_4_8_only() -> None:
    argv = ("--model-path", "deepseek-ai/DeepSeek-V3", "--trust-remote-code", "--tp-size", "8", "--dp-size", "8",
            "--enable-dp-attention", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "1",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2")
    assert "[dp-attention-speculative-before-0.4.8]" in _run("8xH200", "0.4.6", *argv).reason
    assert "dp-attention-speculative" not in _run("8xH200", "0.4.9", *argv).reason


def test_lora_with_speculative_decoding_follows_the_release_and_the_users_backend() -> None:
    base = ("--model-path", "Qwen/Qwen3-4B", "--lora-paths", "a=/l/a", "--speculative-algorithm", "NGRAM")
    assert "[lora-speculative-csgmv-graph]" in _run("1xH100", "0.5.5", *base).reason
    assert "lora-speculative" not in _run("1xH100", "0.5.5", *base, "--lora-backend", "triton").reason
    assert "lora-speculative" not in _run("1xH100", "0.5.9", *base).reason
    eagle = ("--model-path", "Qwen/Qwen3-4B", "--lora-paths", "a=/l/a", "--speculative-algorithm", "EAGLE",
             "--speculative-draft-model-path", "/d")
    assert "[lora-speculative-refused]" in _run("1xH100", "0.5.9", *eagle).reason


def test_gpt_oss_auto_flashinfer_mxfp4_on_sm12x_only_in_the_releases_that_pick_it() -> None:
    argv = ("--model-path", "openai/gpt-oss-20b")
    v = _run("1xRTX-5090", "0.5.5", *argv)
    # the release picks the kernel (source); its failure on SM12x rests on two reports and no setting switches it
    assert v.status is Status.WARN and "[gpt-oss-flashinfer-mxfp4-auto-sm12x]" in v.reason
    assert "gpt-oss-flashinfer-mxfp4" not in _run("1xRTX-5090", "0.5.10", *argv).reason
    assert "gpt-oss-flashinfer-mxfp4" not in _run("1xB200", "0.5.5", *argv).reason
    assert "gpt-oss-flashinfer-mxfp4" not in _run("1xRTX-5090", "0.5.5", *argv, "--moe-runner-backend",
                                                  "triton_kernel").reason


def test_dp_attention_before_0_4_6_only_for_the_models_that_take_it() -> None:
    argv = ("--tp-size", "4", "--enable-dp-attention", "--dp-size", "4")
    v = _run("4xH100", "0.4.3", "--model-path", "Qwen/Qwen2.5-32B", *argv)
    # one report and the flag's help, no release raises it: a warning
    assert v.status is Status.WARN and "[dp-attention-model-unsupported-before-0.4.6]" in v.reason
    ds = _run("8xH200", "0.4.3", "--model-path", "deepseek-ai/DeepSeek-V3", "--trust-remote-code", "--tp-size", "8",
              "--enable-dp-attention", "--dp-size", "8")
    assert "dp-attention-model-unsupported" not in ds.reason
    assert "dp-attention-model-unsupported" not in _run("4xH100", "0.4.3", "--model-path", "/nowhere/model",
                                                        *argv).reason  # no config: nobody knows the class
    assert "dp-attention-model-unsupported" not in _run("4xH100", "0.4.9", "--model-path", "Qwen/Qwen2.5-32B",
                                                        *argv).reason


def test_a_package_left_out_by_assume_stack_is_not_absent() -> None:
    """Planning another release drops the installed FlashInfer (that release brings its own): not 'missing'."""
    f = resolve_assume("1xRTX-5090")
    f = replace(f, packages={**f.packages, "sglang": "0.5.23", "flashinfer-python": "0.7.2"})
    planned = apply_assume_stack(f, {"sglang": "0.5.19"})
    assert "flashinfer-python" in planned.probes.get("assume_stack_left_out", {})
    r = run_preflight(planned, load_profile("baseline"), ("--model-path", "Qwen/Qwen3-8B", "--attention-backend",
                                                          "flashinfer"), flags=bundled_table("0.5.19"))
    assert "sglang-flashinfer-python-missing" not in next(v for v in r.checks if v.id == "compat").reason


def test_deepep_normal_mode_with_cuda_graphs_blocks_only_before_the_release_that_turns_graphs_off() -> None:
    """0.4.6.post3's ServerArgs disables CUDA graphs itself in normal mode; 0.4.6.post2 captures and fails."""
    argv = ("--model-path", "deepseek-ai/DeepSeek-R1", "--trust-remote-code", "--tp-size", "8",
            "--enable-deepep-moe", "--deepep-mode", "normal")
    v = _run("8xH200", "0.4.6.post2", *argv)
    assert v.status is Status.BLOCK and "[deepep-normal-cuda-graph-before-0.4.6.post3]" in v.reason
    assert "deepep-normal-cuda-graph" not in _run("8xH200", "0.4.6.post3", *argv).reason
    assert "deepep-normal-cuda-graph" not in _run("8xH200", "0.4.6.post2", *argv, "--disable-cuda-graph").reason
    low = ("--model-path", "deepseek-ai/DeepSeek-R1", "--trust-remote-code", "--tp-size", "8",
           "--enable-deepep-moe", "--deepep-mode", "low_latency")
    assert "deepep-normal-cuda-graph" not in _run("8xH200", "0.4.6.post2", *low).reason


def test_torch_compile_rules_follow_the_model_family_the_release_and_cuda_graphs() -> None:
    ds = ("--model-path", "deepseek-ai/DeepSeek-V3", "--trust-remote-code", "--tp-size", "8", "--enable-torch-compile")
    assert "[torch-compile-deepseek-graph-capture]" in _run("8xH200", "0.4.6.post4", *ds).reason
    assert "torch-compile-deepseek" not in _run("8xH200", "0.4.6.post4", *ds, "--disable-cuda-graph").reason
    assert "torch-compile-deepseek" not in _run("8xH200", "0.4.3", *ds).reason
    llama = ("--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--enable-torch-compile")
    assert "torch-compile" not in _run("1xH100", "0.4.6.post4", *llama).reason
    moe = ("--model-path", "mistralai/Mixtral-8x7B-Instruct-v0.1", "--tp-size", "2", "--enable-torch-compile")
    assert "[torch-compile-vllm-fusedmoe-before-0.3.2]" in _run("2xA100", "0.3.1", *moe).reason
    assert "torch-compile-vllm-fusedmoe" not in _run("2xA100", "0.3.2", *moe).reason


def test_server_args_refusals_decided_from_argv_and_release() -> None:
    q = ("--model-path", "Qwen/Qwen3-8B")
    v = _run("1xH100", "0.5.9", *q, "--enable-deterministic-inference", "--attention-backend", "torch_native")
    assert v.status is Status.BLOCK and "[deterministic-inference-backend-refused]" in v.reason
    for ok in (("--enable-deterministic-inference", "--attention-backend", "triton"),
               ("--enable-deterministic-inference",)):
        assert "deterministic-inference-backend" not in _run("1xH100", "0.5.9", *q, *ok).reason
    both = ("--enable-tokenizer-batch-encode", "--enable-dynamic-batch-tokenizer")
    assert "[tokenizer-batch-encode-dynamic-batch-refused]" in _run("1xH100", "0.5.9", *q, *both).reason
    assert "tokenizer-batch-encode" not in _run("1xH100", "0.5.9", *q, "--enable-tokenizer-batch-encode").reason


def test_lmcache_and_sm75_rules_by_release() -> None:
    lm = ("--model-path", "Qwen/Qwen3-14B", "--enable-lmcache")
    assert "[lmcache-committed-kv-0.5.5.post1]" in _run("1xA100", "0.5.5.post3", *lm).reason
    assert "lmcache-committed-kv" not in _run("1xA100", "0.5.6", *lm).reason
    assert "lmcache-committed-kv" not in _run("1xA100", "0.5.5", *lm).reason
    v = _run("1xT4", "0.5.10", "--model-path", "Qwen/Qwen3-0.6B")
    assert v.status is Status.BLOCK and "[sglang-sm80-plus-kernels]" in v.reason
    assert "sglang-sm80-plus" not in _run("1xA10", "0.5.10", "--model-path", "Qwen/Qwen3-0.6B").reason


def test_lora_flag_assertions_follow_the_release_sources() -> None:
    """0.3.1 - 0.4.6.post5 assert --disable-cuda-graph and --disable-radix-cache with --lora-paths; 0.4.7 - 0.4.10.post2
    only the radix cache; 0.5.1 neither."""
    lora = ("--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--lora-paths", "a=/adapters/a")
    v = _run("1xH100", "0.4.6", *lora)
    assert v.status is Status.BLOCK and "[lora-needs-disable-cuda-graph-before-0.4.7]" in v.reason
    assert "[lora-needs-disable-radix-cache-before-0.5.1]" in v.reason
    both_off = (*lora, "--disable-cuda-graph", "--disable-radix-cache")
    assert "lora-needs" not in _run("1xH100", "0.4.6", *both_off).reason
    r = _run("1xH100", "0.4.7", *lora).reason
    assert "lora-needs-disable-cuda-graph" not in r and "[lora-needs-disable-radix-cache-before-0.5.1]" in r
    assert "lora-needs" not in _run("1xH100", "0.4.10.post2", *lora, "--disable-radix-cache").reason
    assert "lora-needs" not in _run("1xH100", "0.5.1", *lora).reason
    assert "lora-needs" not in _run("1xH100", "0.4.6", "--model-path", "meta-llama/Llama-3.1-8B-Instruct").reason


def test_hybrid_attention_with_speculative_decoding_by_release() -> None:
    spec = ("--model-path", "deepseek-ai/DeepSeek-V3", "--trust-remote-code", "--tp-size", "8",
            "--speculative-algorithm", "EAGLE")
    hybrid = (*spec, "--attention-backend", "trtllm_mla", "--prefill-attention-backend", "flashinfer")
    v = _run("8xB200", "0.5.1", *hybrid)
    assert v.status is Status.BLOCK and "[hybrid-attention-speculative-refused]" in v.reason
    assert "hybrid-attention-speculative" not in _run("8xB200", "0.5.2", *hybrid).reason
    assert "hybrid-attention-speculative" not in _run("8xB200", "0.5.1", *spec, "--attention-backend",
                                                      "trtllm_mla").reason
    decode = (*spec, "--decode-attention-backend", "flashmla")
    assert "[hybrid-attention-speculative-refused-decode]" in _run("8xH200", "0.5.1", *decode).reason


def test_compressed_tensors_int8_names_by_release_and_quantization_flag() -> None:
    """Without a config.json, an INT8 W8A8 name in 0.4.4.post2 - 0.5.2 gets --quantization w8a8_int8 added (the
    method that loads both compressed-tensors and SGLang's own format); a user's own flag, another release or an FP8
    name leave it alone."""
    nm = ("--model-path", "neuralmagic/Qwen2-0.5B-Instruct-quantized.w8a8")
    v = _run("1xH100", "0.5.2", *nm)
    assert v.status is Status.DOWNGRADE and "[compressed-tensors-w8a8-int8-named-undefined]" in v.reason
    assert "quantization unknown" in v.reason
    assert "compressed-tensors-w8a8" not in _run("1xH100", "0.5.2", *nm, "--quantization", "w8a8_int8").reason
    assert "compressed-tensors-w8a8" not in _run("1xH100", "0.5.3", *nm).reason
    assert "compressed-tensors-w8a8" not in _run("1xH100", "0.4.4.post1", *nm).reason
    fp8 = _run("1xH100", "0.5.2", "--model-path", "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic").reason
    assert "compressed-tensors-w8a8" not in fp8
    named = _run("1xH100", "0.4.5", "--model-path", "org/Qwen2.5-14B-W8A8-Int8")
    assert named.status is Status.DOWNGRADE and "[compressed-tensors-w8a8-int8-named-undefined]" in named.reason


def _checkpoint(tmp_path: Path, name: str, quant: dict | None) -> str:
    """A model directory whose config.json is Qwen2-0.5B's shape with ``quant`` as its quantization_config."""
    cfg = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
           "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "vocab_size": 151936,
           "max_position_embeddings": 32768, "torch_dtype": "bfloat16"}
    if quant is not None:
        cfg["quantization_config"] = quant
    return model_dir(tmp_path, name, cfg)


CT_INT8 = {"quant_method": "compressed-tensors", "format": "int-quantized",
           "config_groups": {"group_0": {"targets": ["Linear"],
                                         "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
                                         "input_activations": {"num_bits": 8, "type": "int", "dynamic": True}}}}


def test_the_checkpoint_config_decides_over_the_name(tmp_path: Path) -> None:
    """With config.json at hand the quantization it states decides: compressed-tensors INT8 under any name gets the
    flag added (and the launch argv carries it); SGLang's own w8a8_int8 format or an FP8 scheme under an INT8 name
    gets nothing; neither does a launch that names its own --quantization."""
    plain = _checkpoint(tmp_path, "model", CT_INT8)
    f = facts("1xA100", sglang="0.4.6")
    r = run_preflight(f, load_profile("baseline"), ("--model-path", plain), flags=bundled_table("0.4.6"))
    v = next(c for c in r.checks if c.id == "compat")
    assert v.status is Status.DOWNGRADE and "[compressed-tensors-w8a8-int8-undefined]" in v.reason
    assert "checkpoint quantization compressed-tensors:w8a8-int" in v.reason
    assert r.verdict == "downgraded"
    assert any(d["feature"] == "sglang:quantization" and d["set"] == "w8a8_int8" for d in r.manifest()["downgrades"])
    assert r.profile is not None and r.profile.sglang["quantization"] == "w8a8_int8"
    own = _checkpoint(tmp_path, "Qwen2-W8A8-Int8", {"quant_method": "w8a8_int8"})
    assert "compressed-tensors-w8a8" not in _run("1xA100", "0.4.6", "--model-path", own).reason
    fp8 = dict(CT_INT8, config_groups={"group_0": {"weights": {"num_bits": 8, "type": "float"},
                                                   "input_activations": {"num_bits": 8, "type": "float"}}})
    named_fp8 = _checkpoint(tmp_path, "Qwen2-W8A8-Int8-really-fp8", fp8)
    assert "compressed-tensors-w8a8" not in _run("1xA100", "0.4.6", "--model-path", named_fp8).reason
    assert "compressed-tensors-w8a8" not in _run("1xA100", "0.5.3", "--model-path", plain).reason
    assert "compressed-tensors-w8a8" not in _run("1xA100", "0.4.6", "--model-path", plain, "--quantization",
                                                 "w8a8_int8").reason


def test_checkpoint_quant_names_the_scheme() -> None:
    from sglwrap.compat.match import checkpoint_quant

    assert checkpoint_quant(None) == "unknown"
    assert checkpoint_quant({"architectures": ["X"]}) == "none"
    assert checkpoint_quant({"quantization_config": {"quant_method": "FP8"}}) == "fp8"
    assert checkpoint_quant({"quantization_config": CT_INT8}) == "compressed-tensors:w8a8-int"
    w4 = {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}}}
    assert checkpoint_quant({"quantization_config": w4}) == "compressed-tensors:w4a16-int"


def test_pp_on_qwen3_moe_blocks_only_in_the_release_whose_load_weights_walks_every_layer() -> None:
    pp = ("--model-path", "Qwen/Qwen3-30B-A3B-FP8", "--pp-size", "2")
    v = _run("2xH100", "0.4.6.post5", *pp)
    assert v.status is Status.BLOCK and "[pp-qwen3-moe-load-weights-0.4.6.post5]" in v.reason
    assert "pp-qwen3-moe" not in _run("2xH100", "0.4.7", *pp).reason
    assert "pp-qwen3-moe" not in _run("2xH100", "0.4.6.post5", "--model-path", "Qwen/Qwen3-30B-A3B-FP8").reason
    assert "pp-qwen3-moe" not in _run("2xH100", "0.4.6.post5", "--model-path", "Qwen/Qwen3-32B", "--pp-size",
                                      "2").reason


def test_data_parallelism_across_nodes_by_release() -> None:
    """Before 0.4.2 any dp_size > 1 across nodes is refused (DP attention sets dp_size = tp_size); from 0.4.2 DP
    attention is the exception."""
    two = ("--model-path", "deepseek-ai/DeepSeek-V3", "--trust-remote-code", "--tp", "16", "--nnodes", "2",
           "--node-rank", "0", "--dist-init-addr", "10.0.0.1:5000")
    v = _run("8xH20", "0.4.1.post4", *two, "--enable-dp-attention")
    assert v.status is Status.BLOCK and "[multinode-dp-attention-refused-before-0.4.2]" in v.reason
    assert "multinode-dp" not in _run("8xH20", "0.4.2", *two, "--enable-dp-attention").reason
    assert "multinode-dp" not in _run("8xH20", "0.4.1.post4", *two).reason
    plain_dp = (*two, "--dp-size", "2")
    assert "[multinode-dp-refused-before-0.4.2]" in _run("8xH20", "0.4.1.post4", *plain_dp).reason
    assert "[multinode-dp-needs-dp-attention]" in _run("8xH20", "0.4.2", *plain_dp).reason


def test_server_args_refusals_read_from_the_0_4_and_0_5_sources() -> None:
    ds = ("--model-path", "deepseek-ai/DeepSeek-V3", "--trust-remote-code", "--tp-size", "8")
    v = _run("8xH200", "0.4.6", *ds, "--enable-dp-attention")
    assert v.status is Status.BLOCK and "[dp-attention-needs-dp-size-0.4.4.post1]" in v.reason
    assert "dp-attention-needs-dp-size" not in _run("8xH200", "0.4.6", *ds, "--enable-dp-attention", "--dp-size",
                                                    "8").reason
    assert "dp-attention-needs-dp-size" not in _run("8xH200", "0.5.2", *ds, "--enable-dp-attention").reason
    deepep = (*ds, "--enable-dp-attention", "--dp-size", "8", "--enable-deepep-moe")
    assert "[deepep-auto-dp-attention-refused]" in _run("8xH200", "0.4.6", *deepep).reason
    assert "deepep-auto-dp" not in _run("8xH200", "0.4.6", *deepep, "--deepep-mode", "low_latency").reason
    q = ("--model-path", "Qwen/Qwen3-8B")
    assert "[fa4-decode-refused-0.5.4]" in _run("1xB200", "0.5.5", *q, "--attention-backend", "fa4").reason
    assert "fa4-decode-refused" not in _run("1xB200", "0.5.5", *q, "--prefill-attention-backend", "fa4").reason
    assert "fa4-decode-refused" not in _run("1xB200", "0.5.8", *q, "--attention-backend", "fa4").reason
    mla = (*ds, "--attention-backend", "trtllm_mla")
    assert "[trtllm-mla-kv-fp8-e5m2-refused]" in _run("8xB200", "0.5.23", *mla, "--kv-cache-dtype",
                                                      "fp8_e5m2").reason
    assert "trtllm-mla-kv" not in _run("8xB200", "0.5.23", *mla, "--kv-cache-dtype", "fp8_e4m3").reason
    assert "[trtllm-mla-kv-bf16-refused-before-0.5.7]" in _run("8xB200", "0.5.6", *mla, "--kv-cache-dtype",
                                                                "bf16").reason
    assert "trtllm-mla-kv-bf16" not in _run("8xB200", "0.5.7", *mla, "--kv-cache-dtype", "bf16").reason
    spec = (*mla, "--speculative-algorithm", "EAGLE")
    assert "[trtllm-mla-speculative-refused-0.4.10.post1]" in _run("8xB200", "0.4.10.post2", *spec).reason
    assert "trtllm-mla-speculative" not in _run("8xB200", "0.5.1", *spec).reason


def test_a_release_nobody_named_is_a_guess_so_its_entries_only_warn() -> None:
    """Nothing installed, no --assume-stack sglang: the newest bundled release is planned, but a block that rests on
    it would rest on a guess; the entry warns and the verdict says which fact was unknown."""
    argv = ("--model-path", "Qwen/Qwen3-8B", "--attention-backend", "flashinfer")
    named = run_preflight(facts("1xH100", sglang="0.5.23", **{"flashinfer-python": "0.2.11"}), load_profile("baseline"),
                          argv, flags=bundled_table("0.5.23"))
    v = next(c for c in named.checks if c.id == "compat")
    assert v.status is Status.BLOCK and "[sglang-0.5.23-flashinfer-floor]" in v.reason
    r, v = compat(facts("1xH100", **{"flashinfer-python": "0.2.11"}), *argv)
    assert v.status is Status.WARN and "[sglang-0.5.23-flashinfer-floor]" in v.reason
    assert "not known here: which SGLang release" in v.reason and r.verdict == "ok"
    assert "which SGLang release" in r.headline

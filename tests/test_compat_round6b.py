"""Round 6b entries (moe-a2a.yaml) at their edges: the DeepEP hidden-size tables of the images SGLang built, and
PP + attention TP + an a2a backend under CUDA-graph capture."""

from __future__ import annotations

from sglwrap.host.catalogue import resolve_assume
from sglwrap.host.probe import apply_assume_stack
from sglwrap.preflight import Status, run_preflight
from sglwrap.profiles import load_profile
from sglwrap.sglang.flags import bundled_table


def _run(spec: str, release: str, *argv: str, **stack: str):
    f = apply_assume_stack(resolve_assume(spec), {"sglang": release, **stack})
    r = run_preflight(f, load_profile("baseline"), argv, flags=bundled_table(release))
    return next(v for v in r.checks if v.id == "compat")


MINIMAX = ("--model-path", "MiniMaxAI/MiniMax-M2.5", "--trust-remote-code", "--tp-size", "8", "--ep-size", "8")


def test_minimax_m2_with_deepep_warns_in_the_releases_whose_images_pin_deepep_9af0e0d() -> None:
    for release in ("0.5.4.post3", "0.5.9", "0.5.16"):
        v = _run("8xB200", release, *MINIMAX, "--moe-a2a-backend", "deepep")
        # two reports and an image proxy for the DeepEP build: a warning
        assert v.detail["entries"].get("deepep-hidden-3072-sglang-images") == "warn", release
    # 0.5.18 takes DeepEP from the sgl-deep-ep wheel
    assert "deepep-hidden-3072" not in _run("8xB200", "0.5.18", *MINIMAX, "--moe-a2a-backend", "deepep").reason
    # no DeepEP: no hidden-size table
    assert "deepep-hidden-3072" not in _run("8xB200", "0.5.9", *MINIMAX).reason
    # a model whose hidden size the table has
    qwen = ("--model-path", "Qwen/Qwen3-235B-A22B-FP8", "--tp-size", "8", "--moe-a2a-backend", "deepep")
    assert "deepep-hidden" not in _run("8xH200", "0.5.9", *qwen).reason


def test_qwen3_coder_with_deepep_warns_only_before_the_image_took_hidden_6144() -> None:
    coder = ("--model-path", "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8", "--trust-remote-code", "--tp-size", "8")
    v = _run("8xH200", "0.5.0rc0", *coder, "--moe-a2a-backend", "deepep")
    assert v.detail["entries"].get("deepep-hidden-6144-before-0.5.0rc1") == "warn"
    assert "deepep-hidden-6144" not in _run("8xH200", "0.5.0rc1", *coder, "--moe-a2a-backend", "deepep").reason
    assert "deepep-hidden-6144" not in _run("8xH200", "0.5.0rc0", *coder).reason
    v = _run("8xH200", "0.4.10", *coder, "--enable-deepep-moe")
    assert v.detail["entries"].get("deepep-hidden-6144-enable-deepep-moe") == "warn"
    assert "deepep-hidden-6144" not in _run("8xH200", "0.4.10", *coder).reason


PP = ("--model-path", "Qwen/Qwen3-235B-A22B-FP8", "--trust-remote-code", "--tp-size", "4", "--pp-size", "2")


def test_pp_with_attention_tp_and_deepep_warns_while_cuda_graphs_are_captured() -> None:
    for release in ("0.5.0rc0", "0.5.9", "0.5.23"):
        v = _run("8xH100", release, *PP, "--moe-a2a-backend", "deepep")
        # one report: a warning
        assert v.detail["entries"].get("pp-a2a-scattered-cuda-graph") == "warn", release
        assert "--disable-cuda-graph" in v.fix
    # the report's own workaround
    assert "pp-a2a-scattered" not in _run("8xH100", "0.5.9", *PP, "--moe-a2a-backend", "deepep",
                                          "--disable-cuda-graph").reason
    # no a2a backend: hidden states are not scattered at the stage boundary
    assert "pp-a2a-scattered" not in _run("8xH100", "0.5.9", *PP).reason
    # no PP
    assert "pp-a2a-scattered" not in _run("8xH100", "0.5.9", "--model-path", "Qwen/Qwen3-235B-A22B-FP8",
                                          "--tp-size", "8", "--moe-a2a-backend", "deepep").reason
    # DP attention with dp == tp: attention TP 1
    assert "pp-a2a-scattered" not in _run("8xH100", "0.5.9", *PP, "--moe-a2a-backend", "deepep", "--dp-size", "4",
                                          "--enable-dp-attention").reason
    # before --moe-a2a-backend existed
    assert "pp-a2a-scattered" not in _run("8xH100", "0.4.10", *PP, "--enable-deepep-moe").reason


MULTINODE = ("--trust-remote-code", "--tp-size", "8", "--nnodes", "2", "--node-rank", "0",
             "--dist-init-addr", "10.0.0.1:5000")


def test_auto_fusion_across_nodes_blocks_deepseek_on_sm100_only_in_0_5_4_to_0_5_5_post2() -> None:
    r1 = ("--model-path", "deepseek-ai/DeepSeek-R1", *MULTINODE)
    for release in ("0.5.4", "0.5.5"):
        v = _run("4xGB200", release, *r1)
        assert v.status is Status.BLOCK and "[auto-fusion-sm100-multinode-0.5.4]" in v.reason, release
    assert "auto-fusion-sm100-multinode" not in _run("4xGB200", "0.5.5.post3", *r1).reason
    assert "auto-fusion-sm100-multinode" not in _run("4xGB200", "0.5.3", *r1).reason
    assert "auto-fusion-sm100-multinode" not in _run("4xGB200", "0.5.4", *r1, "--dp-size", "8",
                                                     "--enable-dp-attention").reason
    # one node: the fusion works there
    assert "auto-fusion-sm100-multinode" not in _run("8xB200", "0.5.4", "--model-path", "deepseek-ai/DeepSeek-R1",
                                                     "--trust-remote-code", "--tp-size", "8").reason
    # Hopper: the release auto-enables only on SM100
    assert "auto-fusion-sm100-multinode" not in _run("8xH200", "0.5.4", *r1).reason
    # DeepSeek-V3.2 (NSA) is not auto-enabled by these releases
    assert "auto-fusion-sm100-multinode" not in _run("4xGB200", "0.5.4", "--model-path",
                                                     "deepseek-ai/DeepSeek-V3.2-Exp", *MULTINODE).reason


def test_explicit_fusion_across_nodes_on_blackwell_blocks_before_the_unified_workspace() -> None:
    llama = ("--model-path", "meta-llama/Llama-3.1-70B", *MULTINODE, "--enable-flashinfer-allreduce-fusion")
    v = _run("4xGB200", "0.5.4.post1", *llama)
    assert v.status is Status.BLOCK and "[fusion-ipc-multinode-blackwell-before-0.5.10]" in v.reason
    assert "fusion-ipc-multinode" not in _run("4xGB200", "0.5.10", *llama).reason
    single = ("--model-path", "meta-llama/Llama-3.1-70B", "--tp-size", "8", "--enable-flashinfer-allreduce-fusion")
    assert "fusion-ipc-multinode" not in _run("8xB200", "0.5.4.post1", *single).reason


def test_auto_fusion_across_nodes_covers_gpt_oss_on_sm100() -> None:
    oss = ("--model-path", "openai/gpt-oss-120b", *MULTINODE)
    v = _run("4xGB200", "0.5.5", *oss)
    assert v.status is Status.BLOCK and "[auto-fusion-sm100-multinode-0.5.4]" in v.reason
    assert "auto-fusion-sm100-multinode" not in _run("4xGB200", "0.5.5.post3", *oss).reason

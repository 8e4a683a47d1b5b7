"""Round 9j entries (AWQ / compressed-tensors MoE checkpoints that keep layers unquantized: Qwen3.5 MoE AWQ before
0.5.13, Qwen3-Next compressed-tensors before 0.5.9 and under shared-expert fusion from 0.5.14), each checked at its
edges: the release range, the checkpoint's unquantized modules (config.json) or its name, and the flag that decides."""

from __future__ import annotations

from pathlib import Path

from sglwrap.compat.match import unquantized_modules
from sglwrap.preflight import Status
from tests.compat_helpers import compat as _run
from tests.compat_helpers import fires as _fires
from tests.compat_helpers import model_dir

QWEN35_AWQ = "awq-qwen3.5-moe-unconverted-layer-before-0.5.13"
QWEN35_NAMED = "awq-qwen3.5-moe-named-unconverted-layer-before-0.5.13"
NEXT_CT = "qwen3-next-ct-unquantized-fused-shard-before-0.5.9"
NEXT_NAMED = "qwen3-next-named-awq-4bit-before-0.5.9"
NEXT_FUSION = "qwen3-next-ct-unquantized-shared-expert-fusion"


def _qwen35_moe(tmp_path: Path, name: str, quant: dict | None) -> str:
    cfg = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
           "text_config": {"model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_hidden_layers": 40,
                           "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
                           "vocab_size": 248320, "num_experts": 256, "moe_intermediate_size": 512,
                           "shared_expert_intermediate_size": 512, "max_position_embeddings": 262144,
                           "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4},
           "torch_dtype": "bfloat16"}
    if quant is not None:
        cfg["quantization_config"] = quant
    return model_dir(tmp_path, name, cfg)


def _qwen3_next(tmp_path: Path, name: str, ignore: list[str], method: str = "compressed-tensors") -> str:
    quant: dict = {"quant_method": method}
    if method == "compressed-tensors":
        quant.update(format="pack-quantized", ignore=ignore, config_groups={"group_0": {
            "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32}}})
    cfg = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
           "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
           "vocab_size": 151936, "num_experts": 512, "moe_intermediate_size": 512,
           "shared_expert_intermediate_size": 512, "max_position_embeddings": 262144, "torch_dtype": "bfloat16",
           "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, 
           "quantization_config": quant}
    return model_dir(tmp_path, name, cfg)


AWQ_LAYER0 = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm",
              "modules_to_not_convert": ["model.layers.0.", "self_attn", "shared_expert", "linear_attn", "mtp",
                                         "visual", "mlp.gate"]}
AWQ_ALL = dict(AWQ_LAYER0, modules_to_not_convert=["self_attn", "shared_expert", "linear_attn", "mtp", "visual"])
CT_SHARDS = ["lm_head", "model.layers.0.mlp.gate", "model.layers.0.mlp.shared_expert_gate",
             "model.layers.0.mlp.shared_expert.gate_proj", "model.layers.0.mlp.shared_expert.up_proj",
             "model.layers.0.mlp.shared_expert.down_proj", "model.layers.3.self_attn.q_proj"]
CT_GATES = ["lm_head", "model.layers.0.mlp.gate", "model.layers.0.mlp.shared_expert_gate"]


def test_unquantized_modules_reads_every_list() -> None:
    assert unquantized_modules(None) == []
    assert unquantized_modules({"architectures": ["X"]}) == []
    assert unquantized_modules({"quantization_config": {"modules_to_not_convert": ["a"], "ignore": ["b"]}}) == ["a",
                                                                                                               "b"]
    assert unquantized_modules({"quantization_config": {"exclude_modules": ["lm_head"]}}) == ["lm_head"]


def test_qwen35_awq_with_an_unconverted_layer_from_its_config(tmp_path: Path) -> None:
    bad = _qwen35_moe(tmp_path, "m", AWQ_LAYER0)
    v = _run("1xA100-40G", "0.5.9", "--model-path", bad)
    assert v.status is Status.DOWNGRADE and f"[{QWEN35_AWQ}]" in v.reason
    assert "checkpoint keeps model.layers.0. unquantized" in v.reason
    assert _fires(QWEN35_AWQ, "1xH100", "0.5.12", "--model-path", bad)
    assert not _fires(QWEN35_AWQ, "1xH100", "0.5.13", "--model-path", bad)  # AWQMarlin skips the FusedMoE
    assert not _fires(QWEN35_AWQ, "1xH100", "0.5.8", "--model-path", bad)
    assert not _fires(QWEN35_AWQ, "1xH100", "0.5.9", "--model-path", bad, "--quantization", "moe_wna16")
    every_layer = _qwen35_moe(tmp_path, "all", AWQ_ALL)  # experts quantized in every layer: loads
    assert not _fires(QWEN35_AWQ, "1xH100", "0.5.9", "--model-path", every_layer)
    # a config read never lets the name entry fire, whatever the name
    named = _qwen35_moe(tmp_path, "Qwen3.5-35B-A3B-AWQ", AWQ_ALL)
    assert not _fires(QWEN35_NAMED, "1xH100", "0.5.9", "--model-path", named)


def test_qwen35_awq_by_name_without_a_config() -> None:
    v = _run("1xA100-40G", "0.5.9", "--model-path", "/data/llm/Qwen3.5-35B-A3B-AWQ", "--tp", "1")
    assert v.status is Status.DOWNGRADE and f"[{QWEN35_NAMED}]" in v.reason
    assert _fires(QWEN35_NAMED, "8xH200", "0.5.10", "--model-path", "QuantTrio/Qwen3.5-397B-A17B-AWQ", "--tp", "8")
    assert not _fires(QWEN35_NAMED, "1xH100", "0.5.13", "--model-path", "QuantTrio/Qwen3.5-35B-A3B-AWQ")
    assert not _fires(QWEN35_NAMED, "1xH100", "0.5.9", "--model-path", "cyankiwi/Qwen3.5-35B-A3B-AWQ-4bit")
    assert not _fires(QWEN35_NAMED, "1xH100", "0.5.9", "--model-path", "QuantTrio/Qwen3.5-27B-AWQ")  # dense
    assert not _fires(QWEN35_NAMED, "1xH100", "0.5.9", "--model-path", "QuantTrio/Qwen3.5-35B-A3B-AWQ",
                      "--quantization", "moe_wna16")


def test_qwen3_next_ct_fused_shards_before_0_5_9(tmp_path: Path) -> None:
    bad = _qwen3_next(tmp_path, "m", CT_SHARDS)
    v = _run("1xH100", "0.5.5.post2", "--model-path", bad)
    assert v.status is Status.BLOCK and f"[{NEXT_CT}]" in v.reason
    assert _fires(NEXT_CT, "1xH100", "0.5.8", "--model-path", bad)
    assert not _fires(NEXT_CT, "1xH100", "0.5.9", "--model-path", bad)  # packed_modules_mapping
    only_qkv = _qwen3_next(tmp_path, "qkv", [*CT_GATES, "model.layers.3.self_attn.k_proj"])
    assert _fires(NEXT_CT, "1xH100", "0.5.6", "--model-path", only_qkv)
    gates = _qwen3_next(tmp_path, "gates", CT_GATES)  # routers only: every fused layer quantized, loads
    assert not _fires(NEXT_CT, "1xH100", "0.5.5.post2", "--model-path", gates)
    regex = _qwen3_next(tmp_path, "regex", ["lm_head", "re:.*shared_expert.*"])  # matches the fused name: loads
    assert not _fires(NEXT_CT, "1xH100", "0.5.5.post2", "--model-path", regex)


def test_qwen3_next_by_name_before_0_5_9() -> None:
    v = _run("1xH100", "0.5.5.post2", "--model-path", "cpatonn/Qwen3-Next-80B-A3B-Instruct-AWQ-4bit")
    # the name stands for one report's checkpoint config: a warning
    assert v.detail["entries"].get(NEXT_NAMED) == "warn"
    # the name stands for the one checkpoint a report showed: other uploads are left to their config.json
    assert not _fires(NEXT_NAMED, "1xH100", "0.5.8", "--model-path", "cyankiwi/Qwen3-Coder-Next-AWQ-4bit")
    assert not _fires(NEXT_NAMED, "1xH100", "0.5.9", "--model-path", "cpatonn/Qwen3-Next-80B-A3B-Instruct-AWQ-4bit")
    assert not _fires(NEXT_NAMED, "1xH100", "0.5.5.post2", "--model-path", "Qwen/Qwen3-Next-80B-A3B-Instruct")


def test_qwen3_next_shared_expert_fusion_from_0_5_14(tmp_path: Path) -> None:
    bad = _qwen3_next(tmp_path, "m", CT_SHARDS)
    v = _run("2xA100-40G", "0.5.16", "--model-path", bad, "--tp-size", "2")
    assert v.status is Status.DOWNGRADE and f"[{NEXT_FUSION}]" in v.reason
    assert _fires(NEXT_FUSION, "1xH200", "0.5.14", "--model-path", bad)
    assert _fires(NEXT_FUSION, "1xH200", "0.5.23", "--model-path", bad)
    regex = _qwen3_next(tmp_path, "regex", ["lm_head", "re:.*shared_expert.*"])  # fusion ignores the ignore list
    assert _fires(NEXT_FUSION, "1xH200", "0.5.23", "--model-path", regex)
    assert not _fires(NEXT_FUSION, "1xH200", "0.5.13", "--model-path", bad)
    assert not _fires(NEXT_FUSION, "1xH200", "0.5.23", "--model-path", bad, "--disable-shared-experts-fusion")
    gates = _qwen3_next(tmp_path, "gates", CT_GATES)  # shared_expert_gate only: the shared expert is quantized
    assert not _fires(NEXT_FUSION, "1xH200", "0.5.23", "--model-path", gates)
    awq = _qwen3_next(tmp_path, "awq", [], method="awq")
    assert not _fires(NEXT_FUSION, "1xH200", "0.5.23", "--model-path", awq)

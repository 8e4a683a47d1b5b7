"""Every shipped model config: our shape equals what SGLang 0.5.23's own ModelConfig reports (CPU, offline).

All configs are read in ONE subprocess per session (importing sglang takes seconds).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglwrap.memory.cells import kv_heads_per_rank
from sglwrap.memory.mamba import per_request_bytes, ssm_dtype, state_shape
from sglwrap.memory.model import CATALOGUE_DIR, ModelShape, catalogue_names, load_shape
from tests.conftest import requires_sglang

TPS = (1, 2, 4, 8)
_SCRIPT = r"""
import json, sys, warnings
from types import SimpleNamespace
warnings.filterwarnings("ignore")
from sglang.srt.configs import model_config as mc
from sglang.srt.configs.hybrid_arch import mambaish_config
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.layers.quantization.mxfp4 import Mxfp4Config
# mxfp4 (gpt-oss) is registered only on cpu/cuda/hip/xpu devices (layers/quantization/__init__.py:98-104); on a
# GPU-less CI runner it is missing, so register it for the name check. It does not touch the KV geometry.
mc.QUANTIZATION_METHODS.setdefault("mxfp4", Mxfp4Config)


def mamba(m):
    # SGLang's own mambaish_config and mamba2_cache_params (Mamba2StateShape.create, mamba_cache_per_req); the
    # property reads the attention-TP width from the runtime context, which is set per TP here.
    c = mambaish_config(m)
    if c is None:
        return None
    g = type(c).mamba2_cache_params.fget.__globals__
    saved = {k: g.get(k) for k in ("linear_attn_tp_size", "get_parallel")}
    per_tp = {}
    for tp in (1, 2, 4, 8):
        g["linear_attn_tp_size"] = lambda tp=tp: tp
        g["get_parallel"] = lambda tp=tp: SimpleNamespace(attn_tp_size=tp, enable_cp_tp_group_sharing=False)
        p = c.mamba2_cache_params
        per_tp[tp] = {"conv": [list(x) for x in p.shape.conv], "temporal": list(p.shape.temporal),
                      "conv_dtype": str(p.dtype.conv).removeprefix("torch."),
                      "ssm_dtype": str(p.dtype.temporal).removeprefix("torch."),
                      "per_req": int(p.mamba_cache_per_req), "layers": list(p.layers)}
    g.update(saved)
    return {"full": list(c.full_attention_layer_ids), "per_tp": per_tp}


out = {}
for name, path in json.loads(sys.argv[1]).items():
    try:
        m = ModelConfig(path, trust_remote_code=False)  # auto_map code files are not shipped
        mla = m.attention_arch.name == "MLA"
        out[name] = {"layers": m.num_hidden_layers, "kv_heads": {tp: m.get_num_kv_heads(tp) for tp in (1, 2, 4, 8)},
                     "head_dim": m.head_dim, "v_head_dim": m.v_head_dim, "context_len": m.context_len, "mla": mla,
                     "kv_lora_rank": getattr(m, "kv_lora_rank", None) if mla else None,
                     "qk_rope_head_dim": getattr(m, "qk_rope_head_dim", None) if mla else None,
                     "hybrid_swa": bool(m.is_hybrid_swa), "swa_layers": m.swa_attention_layer_ids,
                     "full_layers": m.full_attention_layer_ids, "sliding_window_size": m.sliding_window_size,
                     "swa_head_dim": m.swa_head_dim, "swa_v_head_dim": m.swa_v_head_dim,
                     "swa_kv_heads": {tp: m.get_swa_num_kv_heads(tp) for tp in (1, 2, 4, 8)},
                     "mamba": mamba(m)}
    except Exception as e:
        out[name] = {"error": f"{type(e).__name__}: {e}"}
print("RESULT " + json.dumps(out))
"""


# Synthetic hybrids of the other modelled families (no public config shipped): SGLang parses them with its own
# config classes in the same subprocess. Falcon-H1's single group exercises the group extension under TP.
SYNTHETIC = {
    "synthetic-nemotron-h": {
        "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
        "hybrid_override_pattern": "M-M*-M-M*-M-", "num_hidden_layers": 12, "hidden_size": 1024,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128, "mamba_num_heads": 32,
        "mamba_head_dim": 64, "n_groups": 8, "ssm_state_size": 128, "conv_kernel": 4, "vocab_size": 1024,
        "intermediate_size": 2048, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"},
    "synthetic-falcon-h1": {
        "architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "num_hidden_layers": 4,
        "hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128,
        "mamba_d_ssm": 1536, "mamba_n_heads": 24, "mamba_d_head": 64, "mamba_n_groups": 1, "mamba_d_state": 256,
        "mamba_d_conv": 4, "vocab_size": 1024, "intermediate_size": 2048, "max_position_embeddings": 8192,
        "torch_dtype": "bfloat16"},
    "synthetic-qwen3.5-text": {
        "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "num_hidden_layers": 8,
        "full_attention_interval": 4, "hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 2,
        "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "mamba_ssm_dtype": "bfloat16",
        "vocab_size": 1024, "intermediate_size": 2048, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"},
}
# every bundled config this accountant sizes as a mamba / linear-attention hybrid, and the synthetic ones
MAMBA_NAMES = [n for n in catalogue_names() if load_shape(str(CATALOGUE_DIR / n)).mamba is not None] + list(SYNTHETIC)


@pytest.fixture(scope="session")
def model_paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    paths = {n: str(CATALOGUE_DIR / n) for n in catalogue_names()}
    root = tmp_path_factory.mktemp("synthetic-hybrids")
    for name, cfg in SYNTHETIC.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
        paths[name] = str(root / name)
    return paths


@pytest.fixture(scope="session")
def sglang_shapes(model_paths: dict[str, str]) -> dict[str, dict]:
    paths = model_paths
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(paths)], capture_output=True, text=True,
                          timeout=600, env=env, check=False)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, proc.stderr[-3000:]
    return json.loads(line[0][7:])


@requires_sglang
@pytest.mark.parametrize("name", catalogue_names())
def test_memory_differential_shape_matches_modelconfig(name: str, sglang_shapes: dict[str, dict]) -> None:
    ref = sglang_shapes[name]
    assert "error" not in ref, ref.get("error")
    ours = load_shape(str(Path(CATALOGUE_DIR / name)))
    assert ours.num_layers == ref["layers"]
    assert {str(tp): kv_heads_per_rank(ours, tp) for tp in TPS} == {str(k): v for k, v in ref["kv_heads"].items()}
    assert ours.is_mla == ref["mla"]
    assert ours.head_dim == ref["head_dim"]
    assert ours.v_head_dim == ref["v_head_dim"]
    assert ours.context_len == ref["context_len"]
    if ours.is_mla:
        assert (ours.kv_lora_rank, ours.qk_rope_head_dim) == (ref["kv_lora_rank"], ref["qk_rope_head_dim"])
    _assert_swa_matches(ours, ref)


def _assert_swa_matches(ours: ModelShape, ref: dict) -> None:
    """Hybrid-SWA detection, the layer split, the window and the SWA layers' KV geometry."""
    assert (ours.swa is not None) == ref["hybrid_swa"]
    if ours.swa is None:
        return
    assert list(ours.swa.swa_layer_ids) == ref["swa_layers"]
    assert list(ours.swa.full_layer_ids) == ref["full_layers"]
    assert ours.swa.config_window == ref["sliding_window_size"]
    assert (ours.swa.swa_head_dim or ours.head_dim) == ref["swa_head_dim"]
    assert (ours.swa.swa_v_head_dim or ours.swa.swa_head_dim or ours.head_dim) == ref["swa_v_head_dim"]
    swa_total = ours.swa.swa_num_kv_heads or ours.num_kv_heads
    assert {str(tp): max(1, swa_total // tp) for tp in TPS} == {str(k): v for k, v in ref["swa_kv_heads"].items()}


@requires_sglang
@pytest.mark.parametrize("name", MAMBA_NAMES)
def test_memory_differential_mamba_state_matches_sglang(name: str, sglang_shapes: dict[str, dict],
                                                        model_paths: dict[str, str]) -> None:
    """Hybrid layer split, full-attention layers, conv/SSM state shapes and dtypes and the per-request state bytes
    at TP 1/2/4/8 equal SGLang's ``mambaish_config(...).mamba2_cache_params``."""
    ref = sglang_shapes[name]
    assert "error" not in ref, ref.get("error")
    ours = load_shape(model_paths[name])
    assert ours.mamba is not None and ref["mamba"] is not None
    lay = ours.mamba
    assert list(lay.full_layer_ids) == ref["mamba"]["full"]
    assert ours.num_layers == ref["layers"]
    for tp in TPS:
        want = ref["mamba"]["per_tp"][str(tp)]
        assert list(lay.linear_layer_ids) == want["layers"]
        dtype = ssm_dtype(lay, None, {})
        st = state_shape(lay, tp, ssm=dtype, conv="bfloat16")
        assert [list(st.conv)] == want["conv"], tp
        assert list(st.temporal) == want["temporal"], tp
        assert (dtype, "bfloat16") == (want["ssm_dtype"], want["conv_dtype"])
        assert per_request_bytes(lay, st, ours.num_layers, 1) == want["per_req"], tp


@requires_sglang
@pytest.mark.parametrize("name", catalogue_names())
def test_memory_differential_no_false_hybrids(name: str, sglang_shapes: dict[str, dict]) -> None:
    """A shipped config is a modelled mamba hybrid exactly when SGLang gives it a mamba-ish config."""
    ref = sglang_shapes[name]
    assert (load_shape(str(CATALOGUE_DIR / name)).mamba is not None) == (ref.get("mamba") is not None)

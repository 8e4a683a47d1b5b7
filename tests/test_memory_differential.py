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
from sglwrap.memory.model import CATALOGUE_DIR, ModelShape, catalogue_names, load_shape
from tests.conftest import requires_sglang

TPS = (1, 2, 4, 8)
_SCRIPT = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
from sglang.srt.configs import model_config as mc
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.layers.quantization.mxfp4 import Mxfp4Config
# mxfp4 (gpt-oss) is registered only on cpu/cuda/hip/xpu devices (layers/quantization/__init__.py:98-104); on a
# GPU-less CI runner it is missing, so register it for the name check. It does not touch the KV geometry.
mc.QUANTIZATION_METHODS.setdefault("mxfp4", Mxfp4Config)
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
                     "swa_kv_heads": {tp: m.get_swa_num_kv_heads(tp) for tp in (1, 2, 4, 8)}}
    except Exception as e:
        out[name] = {"error": f"{type(e).__name__}: {e}"}
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="session")
def sglang_shapes() -> dict[str, dict]:
    paths = {n: str(CATALOGUE_DIR / n) for n in catalogue_names()}
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

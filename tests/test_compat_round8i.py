"""Round 8i entries (Triton kernels whose tiles exceed the shared memory of SM86/SM89 GPUs), each checked at its
edges: the GPU, the release range and the user's own flags that decide whether it fires."""

from __future__ import annotations

from sglwrap.preflight import Status
from tests.compat_helpers import compat as _run
from tests.compat_helpers import fires as _fires


DET = "deterministic-fp16-persistent-matmul-smem-sm8x"
QWEN = ("--model-path", "Qwen/Qwen3-0.6B", "--enable-deterministic-inference")


def test_deterministic_float16_blocks_on_sm86_and_sm89() -> None:
    v = _run("1xL40S", "0.5.17", *QWEN, "--dtype", "float16")
    assert v.status is Status.BLOCK and f"[{DET}]" in v.reason and "bfloat16" in v.fix
    assert _fires(DET, "1xRTX-A6000", "0.5.23", *QWEN, "--dtype", "half")
    assert _fires(DET, "1xRTX-4090", "0.5.3", *QWEN, "--dtype", "float16")


def test_deterministic_float16_does_not_fire_off_its_edges() -> None:
    # bfloat16 (the model's own dtype) fits; without the flag the persistent matmul is not used
    assert not _fires(DET, "1xL40S", "0.5.17", *QWEN)
    assert not _fires(DET, "1xL40S", "0.5.17", *QWEN, "--dtype", "bfloat16")
    assert not _fires(DET, "1xL40S", "0.5.17", "--model-path", "Qwen/Qwen3-0.6B", "--dtype", "float16")
    # SM80 and SM90 have room for the float16 tiles
    assert not _fires(DET, "1xA100-80G", "0.5.17", *QWEN, "--dtype", "float16")
    assert not _fires(DET, "1xH100", "0.5.17", *QWEN, "--dtype", "float16")


EP = "ep-moe-grouped-gemm-smem-sm8x"
V2LITE = ("--model-path", "deepseek-ai/DeepSeek-V2-Lite", "--tp-size", "4", "--trust-remote-code")


def test_ep_moe_grouped_gemm_blocks_before_0_4_3_post3_on_small_smem() -> None:
    v = _run("4xL40S", "0.4.2.post3", *V2LITE, "--enable-ep-moe")
    assert v.status is Status.BLOCK and f"[{EP}]" in v.reason
    assert _fires(EP, "4xRTX-3090", "0.4.1.post4", *V2LITE, "--enable-ep-moe")
    assert _fires(EP, "4xL40S", "0.4.3.post2", *V2LITE, "--enable-ep-moe")


def test_ep_moe_grouped_gemm_does_not_fire_off_its_edges() -> None:
    assert not _fires(EP, "4xL40S", "0.4.2.post3", *V2LITE)  # plain TP MoE launches (the report)
    assert not _fires(EP, "4xL40S", "0.4.3.post4", *V2LITE, "--enable-ep-moe")  # 64x32x128 tiles
    assert not _fires(EP, "4xA100-80G", "0.4.2.post3", *V2LITE, "--enable-ep-moe")  # 164 KiB on SM80
    assert not _fires(EP, "4xH100", "0.4.2.post3", *V2LITE, "--enable-ep-moe")
    assert not _fires(EP, "4xL40S", "0.4.2.post3", *V2LITE, "--enable-ep-moe", "--quantization", "fp8")

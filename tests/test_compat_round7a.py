"""Round 7a entries (host stack: Triton's ptxas on SM103, sgl-kernel / torch ABI, SGLang's own Qwen2_5_VLConfig against
transformers, green-context driver calls), each checked at its edges: the GPU, the version ranges and the user's
environment that decide whether it fires."""

from __future__ import annotations

from tests.compat_helpers import named_anywhere

MODEL = ("--model-path", "Qwen/Qwen3-8B")


def _fires(entry: str, spec: str, release: str, stack: dict[str, str], env: dict[str, str] | None = None) -> bool:
    return named_anywhere(entry, spec, release, MODEL, env, **stack)


def test_triton_ptxas_sm103_edges() -> None:
    stack = {"torch": "2.8.0+cu129", "triton": "3.4.0"}
    assert _fires("triton-ptxas-sm103", "1xB300", "0.5.5.post3", stack)
    assert _fires("triton-ptxas-sm103", "1xB300", "0.5.6", {"torch": "2.9.1+cu129", "triton": "3.5.1"})
    # Triton 3.6 brings ptxas-blackwell 12.9; B200 (sm_100a) is known to the 12.8 ptxas; the variable is the fix;
    # an unknown Triton is not judged.
    assert not _fires("triton-ptxas-sm103", "1xB300", "0.5.12", {"torch": "2.10.0+cu130", "triton": "3.6.0"})
    assert not _fires("triton-ptxas-sm103", "1xB200", "0.5.5.post3", stack)
    assert not _fires("triton-ptxas-sm103", "1xB300", "0.5.5.post3",
                      stack, env={"TRITON_PTXAS_PATH": "/usr/local/cuda/bin/ptxas"})
    assert not _fires("triton-ptxas-sm103", "1xB300", "0.5.5.post3", {"torch": "2.8.0+cu129"})


def test_sgl_kernel_torch_abi_2_7_early_edges() -> None:
    assert _fires("sgl-kernel-torch-abi-2.7-early", "1xH100", "0.4.7", {"sgl-kernel": "0.1.7", "torch": "2.6.0"})
    assert _fires("sgl-kernel-torch-abi-2.7-early", "1xH100", "0.4.8", {"sgl-kernel": "0.1.9", "torch": "2.8.0"})
    # the torch it was built with (any local tag), a +cu build from SGLang's index, and the range ends
    assert not _fires("sgl-kernel-torch-abi-2.7-early", "1xH100", "0.4.7",
                      {"sgl-kernel": "0.1.7", "torch": "2.7.1+cu126"})
    assert not _fires("sgl-kernel-torch-abi-2.7-early", "1xH100", "0.4.7",
                      {"sgl-kernel": "0.1.7+cu128", "torch": "2.6.0"})
    assert not _fires("sgl-kernel-torch-abi-2.7-early", "1xH100", "0.4.6.post5",
                      {"sgl-kernel": "0.1.4", "torch": "2.7.1"})
    assert not _fires("sgl-kernel-torch-abi-2.7-early", "1xH100", "0.4.9", {"sgl-kernel": "0.2.4", "torch": "2.6.0"})


def test_qwen25vl_config_transformers_edges() -> None:
    e = "sglang-qwen25vl-config-transformers-4.49"
    assert _fires(e, "1xH100", "0.4.4.post1", {"transformers": "4.49.0"})
    assert _fires(e, "1xH100", "0.4.3.post2", {"transformers": "4.50.0"})
    # the pinned transformers 4.48.3, the releases before (0.4.3) and after (0.4.4.post2) the own config, an unknown
    # transformers
    assert not _fires(e, "1xH100", "0.4.4.post1", {"transformers": "4.48.3"})
    assert not _fires(e, "1xH100", "0.4.3", {"transformers": "4.49.0"})
    assert not _fires(e, "1xH100", "0.4.4.post2", {"transformers": "4.50.0"})
    assert not _fires(e, "1xH100", "0.4.4.post1", {})


def test_sgl_kernel_027_green_ctx_edges() -> None:
    e = "sgl-kernel-0.2.7-green-ctx-driver"
    assert _fires(e, "1xA100", "0.4.9.post4", {"sgl-kernel": "0.2.7", "torch": "2.7.1", "cuda-driver": "12.2"})
    # a driver with the 12.4 API, the earlier sgl-kernel 0.2.5, and 0.2.8 (the older entry's business)
    assert not _fires(e, "1xA100", "0.4.9.post4", {"sgl-kernel": "0.2.7", "torch": "2.7.1", "cuda-driver": "12.4"})
    assert not _fires(e, "1xA100", "0.4.9.post2", {"sgl-kernel": "0.2.5", "torch": "2.7.1", "cuda-driver": "12.2"})
    assert not _fires(e, "1xA100", "0.4.10.post1", {"sgl-kernel": "0.2.8", "torch": "2.7.1", "cuda-driver": "12.2"})

"""--cpu-offload-gb: whole decoder layers leave the GPU until the limit is reached (SGLang's OffloaderV1)."""

from __future__ import annotations

from sglwrap.host.catalogue import resolve_assume
from sglwrap.memory import plan

GIB = 1 << 30
ARGV = ["--model-path", "Qwen/Qwen3-32B"]


def _plan(*extra: str):  # type: ignore[no-untyped-def]
    return plan(resolve_assume("1xRTX-4090"), {}, [*ARGV, *extra], sglang_version="0.5.9")


def test_offloading_moves_whole_layers_off_the_gpu_and_a_launch_that_did_not_fit_now_fits() -> None:
    full = _plan()
    assert full.verdict == "weights_dont_fit" and full.weights_estimated and full.exit_code == 1
    layer = (full.weights_info.per_rank_bytes - 2 * 151936 * 5120 * 2) / 64  # Qwen3-32B: 64 layers, untied 151936 x 5120
    for gb in (1, 50):
        off = _plan("--cpu-offload-gb", str(gb))
        moved = full.weights_info.per_rank_bytes - off.weights_info.per_rank_bytes
        assert gb * GIB <= moved < gb * GIB + layer + 1
        assert "--cpu-offload-gb" in off.weights_info.source
    fits = _plan("--cpu-offload-gb", "50")
    assert fits.verdict in ("fits", "fits_tight") and fits.exit_code == 0


def test_a_limit_above_the_model_keeps_the_embeddings_and_lm_head_on_the_gpu() -> None:
    off = _plan("--cpu-offload-gb", "500")
    assert off.weights_info.per_rank_bytes >= 2 * 151936 * 5120 * 2 * 0.99

"""SGLang 0.5.23's GPU-memory-dependent defaults: chunked prefill, decode graph max bs, mem-fraction-static.

Source: ``srt/arg_groups/memory_hook.py:47-354`` (``handle_gpu_memory_settings``, ``reserve_for_graph_mb``,
``adjust_mem_fraction_for_vlm``) and ``srt/arg_groups/cuda_graph_hook.py:480-532`` (capture lists).
"""

from __future__ import annotations

from dataclasses import dataclass

from sglwrap.memory.args import ServerArgs
from sglwrap.memory.model import ModelShape


@dataclass(frozen=True)
class Resolved:
    """The values SGLang would run with, and where each came from."""

    chunked_prefill_size: int
    decode_max_bs: int
    prefill_graph_sizes: int
    mem_fraction_static: float
    mfs_source: str  # "--mem-fraction-static", "profile", "sglang-default"
    reserved_mb: float | None  # SGLang's reserve when it computed the default


def _buckets(gpu_mem_mib: float | None, tp: int) -> tuple[int, int]:
    if gpu_mem_mib is None:
        return 4096, 160
    gib = 1024
    if gpu_mem_mib < 20 * gib:
        return 2048, 8
    if gpu_mem_mib < 35 * gib:
        return 4096, 48 if tp < 4 else 160
    if gpu_mem_mib < 60 * gib:
        return 4096, 32 if tp < 4 else 160
    if gpu_mem_mib < 160 * gib:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """``generate_prefill_cuda_graph_batch_sizes`` (cuda_graph_hook.py:480-497)."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_bs + 1, 512)))
    return [s for s in sizes if s <= max_bs]


def _vlm_factor(shape: ModelShape) -> float:
    if not shape.is_multimodal:
        return 1.0
    # vision layers x hidden^2 relative to ViT-L/14 (memory_hook.py:417-462); Kimi's config class defaults 27/1152
    ratio = shape.vision_params / max(1, 24 * (4 * 1024 * 1024 + 2 * 1024 * 4096)) if shape.vision_params else 1.0
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


def resolve(args: ServerArgs, shape: ModelShape, gpu_mem_mib: float | None, *,
            profile_mfs: float | None = None) -> Resolved:
    """Reproduce 0.5.23's defaults for this GPU (nvidia-smi MiB, min over GPUs) and these arguments."""
    cps_default, bs_default = _buckets(gpu_mem_mib, args.tp_size)
    cps = args.chunked_prefill_size if args.chunked_prefill_size is not None else cps_default
    max_bs = args.cuda_graph_max_bs if args.cuda_graph_max_bs is not None else bs_default
    if args.cuda_graph_max_bs is None and args.max_running_requests is not None:
        max_bs = min(max_bs, args.max_running_requests)
    prefill_max = min(8192, cps) if shape.is_mla else cps
    if args.max_total_tokens is not None:
        prefill_max = min(prefill_max, args.max_total_tokens)
    n_prefill = len(prefill_graph_sizes(prefill_max)) if cps > 0 else 0
    if args.mem_fraction_static is not None:
        return Resolved(cps, max_bs, n_prefill, args.mem_fraction_static, "--mem-fraction-static", None)
    if profile_mfs is not None:
        return Resolved(cps, max_bs, n_prefill, profile_mfs, "profile", None)
    activation_tokens = max(cps, 2048) if cps > 0 else 2048
    reserved = 512 + activation_tokens * 1.5 + args.tp_size * args.pp_size / 8 * 1024
    graph = 0.0
    if args.decode_graph:
        graph += max_bs * 2
    if args.attn_dp_size > 1:
        graph += max_bs * args.attn_dp_size * 3 + (max_bs * args.attn_dp_size * 1.5 if max_bs > 300 else 0)
    if args.prefill_graph:
        graph += 1536 if shape.is_mla else 8 * n_prefill
    reserved += graph
    if gpu_mem_mib is not None and gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    f = round((gpu_mem_mib - reserved) / gpu_mem_mib, 3) if gpu_mem_mib else 0.95
    f *= _vlm_factor(shape)
    return Resolved(cps, max_bs, n_prefill, f, "sglang-default", reserved)

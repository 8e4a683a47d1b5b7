"""Upper bounds on numbers a user types, checked before anything is planned.

SGLang's parser takes any integer for a GPU count or a batch size; sglwrap would then build per-GPU and per-pair
tables or the list of CUDA-graph batch sizes from it. A value no host or server could have is a usage error (exit
64, one line) instead of minutes of work and an out-of-memory kill. The bounds are far above any real deployment.
"""

from __future__ import annotations

import math

from sglwrap.errors import UsageError

MAX_GPUS_PER_HOST = 256  # the largest single machines seen carry 16-20 GPUs; an NVL72 rack is 18 hosts of 4
MAX_PARALLEL = 65536  # --tp/--pp/--dp/--ep sizes and --nnodes across a whole cluster
MAX_BATCH = 65536  # requests in one batch (CUDA-graph batch sizes); SGLang's defaults stop at 256-1024
MAX_TOKENS = 1 << 20  # tokens in one prefill chunk / prefill graph; SGLang's defaults are 2048-16384
MAX_GIB = 1 << 20  # GiB of memory on one GPU (a petabyte)

# SGLang destinations with a bound sglwrap enforces (canonical names), and what the number counts.
SGLANG_BOUNDS: dict[str, tuple[int, str]] = {
    "tp_size": (MAX_PARALLEL, "GPUs"), "pp_size": (MAX_PARALLEL, "GPUs"), "dp_size": (MAX_PARALLEL, "replicas"),
    "ep_size": (MAX_PARALLEL, "GPUs"), "attn_dp_size": (MAX_PARALLEL, "replicas"), "nnodes": (MAX_PARALLEL, "nodes"),
    "cuda_graph_max_bs": (MAX_BATCH, "requests"), "cuda_graph_max_bs_decode": (MAX_BATCH, "requests"),
    "cuda_graph_bs": (MAX_BATCH, "requests"), "cuda_graph_bs_decode": (MAX_BATCH, "requests"),
    "cuda_graph_max_bs_prefill": (MAX_TOKENS, "tokens"), "cuda_graph_bs_prefill": (MAX_TOKENS, "tokens"),
    "chunked_prefill_size": (MAX_TOKENS, "tokens"), "piecewise_cuda_graph_max_tokens": (MAX_TOKENS, "tokens"),
}


def check_count(what: str, value: int, limit: int, unit: str) -> None:
    """UsageError unless ``value`` <= ``limit`` (``what`` names the option as the user wrote it)."""
    if value > limit:
        shown = value if value < 10**15 else "more than 10^15"
        raise UsageError(f"{what}: {shown} {unit} is beyond what sglwrap plans for (at most {limit:,}); "
                         "a typo? Give the real number")


def finite_gib(what: str, value: float | None) -> float | None:
    """``value`` if it is a finite, non-negative number of GiB within MAX_GIB; else a UsageError naming ``what``."""
    if value is None:
        return None
    if not math.isfinite(value) or value < 0 or value > MAX_GIB:
        raise UsageError(f"{what} {value}: expected a number of GiB between 0 and {MAX_GIB:,} (e.g. 70.5)")
    return value


def finite_seconds(what: str, value: float | None) -> float | None:
    """``value`` if it is a finite positive number of seconds (at most a year); else a UsageError."""
    if value is None:
        return None
    if not math.isfinite(value) or value <= 0 or value > 366 * 86400:
        raise UsageError(f"{what} {value}: expected a positive number of seconds (e.g. 180)")
    return value

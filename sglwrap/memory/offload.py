"""``--cpu-offload-gb``: decoder layers whose weights SGLang keeps in pinned host memory instead of on the GPU.

SGLang's ``OffloaderV1`` (0.5.23 ``srt/utils/offloader.py``; ``make_layers``/``maybe_offload_to_cpu`` in
``srt/utils.py`` since 0.4.0, where the flag appeared) walks the decoder layers in order and moves each one's
parameters to the CPU until the bytes moved reach the limit: whole layers, so the last one may overshoot by up to a
layer. Each rank applies the limit to its own shard. Embeddings, the LM head and norms stay on the GPU.
"""

from __future__ import annotations

import math

from sglwrap.memory.model import ModelShape
from sglwrap.memory.weights import Weights, loaded_dtype_bytes
from sglwrap.record import replace

GIB = 1 << 30


def offloaded_bytes(weights: Weights, shape: ModelShape, cpu_offload_gb: float, *, tp: int, pp: int = 1) -> int:
    """Bytes of one rank's weights SGLang moves to the CPU for ``--cpu-offload-gb`` (whole layers, at least the
    limit, at most every decoder layer of the rank)."""
    if cpu_offload_gb <= 0 or shape.num_layers <= 0:
        return 0
    tables = int(shape.vocab_size * shape.hidden_size * loaded_dtype_bytes(shape)
                 * (1 if shape.tie_word_embeddings else 2)) // max(tp, 1)
    layers_bytes = max(weights.per_rank_bytes - tables, 0)
    layers = max(shape.num_layers // max(pp, 1), 1)
    per_layer = layers_bytes / layers
    if per_layer <= 0:
        return 0
    moved_layers = min(math.ceil(cpu_offload_gb * GIB / per_layer), layers)
    return int(moved_layers * per_layer)


def with_offload(weights: Weights, shape: ModelShape, cpu_offload_gb: float, *, tp: int, pp: int = 1) -> Weights:
    """``weights`` with the rank's GPU share reduced by what ``--cpu-offload-gb`` moves to the CPU."""
    moved = offloaded_bytes(weights, shape, cpu_offload_gb, tp=tp, pp=pp)
    if moved == 0:
        return weights
    return replace(weights, per_rank_bytes=weights.per_rank_bytes - moved,
                   source=f"{weights.source}; {moved / GIB:.2f} GiB per rank in host memory (--cpu-offload-gb)")

"""``--plot FILE``: the budget as one stacked bar per rank (matplotlib, Agg, optional), written atomically."""

from __future__ import annotations

from pathlib import Path

from sglwrap.errors import ConfigError
from sglwrap.fsutil import atomic_write_bytes
from sglwrap.plotting import png_bytes, pyplot

_SEGMENTS = (("context", ("driver_reserved", "cuda_context", "other_processes"), "#999999"),
             ("NCCL", ("nccl_init", "custom_allreduce"), "#d62728"), ("weights", ("weights",), "#1f77b4"),
             ("KV pool", ("kv_pool",), "#2ca02c"),
             ("graphs + activations", ("req_to_token", "decode_graphs", "prefill_graphs", "activations",
                                       "nccl_late", "symm_mem"), "#ff7f0e"))


def write_plot(d: dict, path: Path) -> None:
    """Draw ``d`` (MemoryPlan.to_dict) to a PNG at ``path``; ConfigError if matplotlib is missing."""
    plt = pyplot(ConfigError, hint="pip install 'sglwrap[plot]' (or matplotlib)")
    t, gib = d["terms"], float(1 << 30)
    ranks = d["parallel"]["tp"] * d["parallel"]["pp"]
    fig, ax = plt.subplots(figsize=(max(4, ranks * 0.9 + 2) + 1.8, 5))
    used = 0.0
    for label, keys, colour in _SEGMENTS:
        h = sum(max(0, t[k]) for k in keys) / gib
        ax.bar(range(ranks), [h] * ranks, bottom=[used] * ranks, color=colour, label=label)
        used += h
    free = max(0.0, t["gpu_total"] / gib - used)
    ax.bar(range(ranks), [free] * ranks, bottom=[used] * ranks, color="#eeeeee", label="free")
    limit = (t["gpu_total"] - t["pre_weights_free"]) / gib + t["static_limit"] / gib
    ax.axhline(limit, color="black", linestyle="--", label=f"f = {d['mem_fraction_static']['value']:.3f}")
    ax.set_xlabel("rank")
    ax.set_ylabel("GiB")
    ax.set_title(f"{d['model']['name']}: {d['verdict']}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    try:
        data = png_bytes(fig, dpi=100)
    finally:
        plt.close(fig)
    try:
        atomic_write_bytes(path, data, mode=0o644)
    except OSError as e:
        raise ConfigError(f"--plot {path}: cannot write: {e.strerror}") from None

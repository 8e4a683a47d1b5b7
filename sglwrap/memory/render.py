"""Human rendering of a MemoryPlan (stderr) and of a profile comparison; JSON is ``MemoryPlan.to_dict``."""

from __future__ import annotations

from sglwrap.memory.explain import gib

_ROWS = (
    ("gpu_total", "GPU memory (nvidia-smi total)"), ("driver_reserved", "- driver reserve"),
    ("cuda_context", "- CUDA context"), ("other_processes", "- other processes"),
    ("nccl_init", "- NCCL at init (PyNccl)"), ("custom_allreduce", "- custom all-reduce buffers"),
    ("pre_weights_free", "= P, free before weights"), ("static_limit", "P x f (static limit)"),
    ("weights", "- weights W"), ("draft_weights", "  (of which draft model weights)"), ("mm_reserve", "- multimodal cache"),
    ("lora_buffers", "- LoRA buffers"),
    ("mamba_state", "- mamba/linear-attention state"), ("kv_budget", "= KV budget"),
    ("kv_pool", "KV pool allocated"), ("slack", "P x (1-f) runtime slack"),
    ("req_to_token", "- req_to_token"), ("decode_graphs", "- decode CUDA graphs"),
    ("prefill_graphs", "- prefill CUDA graphs"), ("activations", "- activations"),
    ("nccl_late", "- NCCL created later"), ("symm_mem", "- symmetric memory"),
    ("draft_graphs", "- draft CUDA graphs"),
    ("deepep_buffers", "- DeepEP/NVSHMEM buffers"),
    ("runtime_free", "= left at runtime"),
)
_OPTIONAL = ("draft_weights", "draft_graphs", "deepep_buffers", "lora_buffers")


def render_table(d: dict) -> str:
    """The plan as a table of terms plus the verdict and explanation."""
    lines = [f"sglwrap memory: {d['model']['name']} on {d['gpu']['count']}x {d['gpu']['name']} "
             f"(tp {d['parallel']['tp']}, SGLang {d['sglang_version'] or 'unknown'})", ""]
    for key, label in _ROWS:
        if key == "mamba_state" and not d.get("mamba"):
            continue
        if key in _OPTIONAL and not d["terms"].get(key):
            continue
        lines.append(f"  {label:34s} {gib(d['terms'].get(key, 0)):>12s}")
    lines += ["", f"  KV cell: {d['kv_cell_bytes']:,} B/token ({d['kv_cell_formula']})",
              f"  KV tokens: {d['kv_tokens']:,}   max context: {d['max_context_tokens']:,}   "
              f"mem-fraction-static: {d['mem_fraction_static']['value']:.3f} ({d['mem_fraction_static']['source']}), "
              f"minimum {d['min_mem_fraction_static']:.3f}",
              f"  NCCL: {d['nccl']['formula']}"]
    unc = d.get("uncertainty")
    if unc:
        lines.append(f"  uncertainty (from the fits): P ± {gib(unc['pre_weights_free'])}, W ± {gib(unc['weights'])}, "
                     f"KV tokens ± {unc['kv_tokens']:,}, runtime margin ± {gib(unc['runtime_margin'])}")
    swa = d.get("swa")
    if swa:
        lines.append(f"  hybrid SWA: {swa['full_layers']} full + {swa['swa_layers']} sliding-window layers "
                     f"(window {swa['sliding_window']}), ratio {swa['swa_full_tokens_ratio']:g}: "
                     f"full tokens {swa['full_tokens']:,}, SWA tokens {swa['swa_tokens']:,}")
    mamba = d.get("mamba")
    if mamba:
        ratio = (f"ratio {mamba['ratio']:g} ({mamba['ratio_source']})" if mamba["ratio"] is not None
                 else mamba["slots_source"])
        lines.append(f"  mamba/linear attention: {mamba['linear_layers']} linear + {mamba['full_attention_layers']} "
                     f"full-attention layers, {mamba['per_request_bytes'] / (1 << 20):.2f} MiB/request "
                     f"(conv {mamba['conv_dtype']}, ssm {mamba['ssm_dtype']}), {ratio}: {mamba['slots']:,} slots")
    lines += ["", f"verdict: {d['verdict']}"]
    if d.get("weights_estimated") and d["verdict"] in ("kv_pool_oom", "weights_dont_fit"):
        lines.append("  the checkpoint's size is estimated from its config (no index or safetensors headers found): "
                     "a warning, not a block; put the checkpoint (or its model.safetensors.index.json) where "
                     "--model-path points to make it exact")
    cap = d.get("context_capped")
    if cap:
        other = f" (or {cap['alternative']})" if cap.get("alternative") else ""
        lines[-1] += f", but the context is capped at {cap['max_request_tokens']:,} tokens"
        lines.append(f"  the KV pool holds {cap['kv_tokens']:,} tokens, fewer than --context-length "
                     f"{cap['context_length']:,}: SGLang starts, but refuses or truncates any request longer than "
                     f"{cap['max_request_tokens']:,} tokens")
        lines.append(f"  fix: {cap['fix']}{other}")
    if d.get("sglang_error"):
        lines.append(f"  SGLang would fail with: {d['sglang_error']}")
    if d.get("fix"):
        lines.append(f"  fix: {d['fix']}")
    lines.append("")
    lines += [f"  - {s}" for s in d["explanation"]]
    return "\n".join(lines) + "\n"


def compare(a: dict, b: dict) -> dict:
    """How each term moves from plan ``a`` to plan ``b`` (bytes, b - a)."""
    deltas = {k: b["terms"][k] - a["terms"][k] for k in a["terms"] if b["terms"][k] != a["terms"][k]}
    return {"from": a["profile_env"], "to": b["profile_env"], "term_deltas": deltas,
            "kv_tokens": {"from": a["kv_tokens"], "to": b["kv_tokens"], "delta": b["kv_tokens"] - a["kv_tokens"]},
            "verdict": {"from": a["verdict"], "to": b["verdict"]}}


def render_compare(name: str, c: dict) -> str:
    """The comparison as sentences."""
    lines = [f"switching to profile {name!r}:"]
    if not c["term_deltas"]:
        lines.append("  no term moves")
    for k, v in c["term_deltas"].items():
        lines.append(f"  {k:22s} {'+' if v >= 0 else '-'}{gib(abs(v))}")
    kv = c["kv_tokens"]
    lines.append(f"  kv_tokens {kv['from']:,} -> {kv['to']:,} ({kv['delta']:+,}); "
                 f"verdict {c['verdict']['from']} -> {c['verdict']['to']}")
    return "\n".join(lines) + "\n"

"""What the target SGLang release will do with this launch by itself (``sglwrap.sglang.resolved``), for the
preflight report: the defaults it fills in and the paths it turns on, given these GPUs and these args."""

from __future__ import annotations

from typing import Any

from sglwrap.host.facts import HostFacts
from sglwrap.record import asdict
from sglwrap.sglang.cmdline import SglangCmdline


def sglang_defaults(cmd: SglangCmdline, facts: HostFacts, release: str | None) -> dict[str, Any]:
    """The resolved server args as a JSON-able record, or ``{"skipped": why}`` when they cannot be resolved."""
    from sglwrap.sglang.resolved import GpuInfo, UnsupportedSGLangVersion, resolve_server_args

    version = release or cmd.version
    gpu = None
    if facts.gpus:  # as the accountant takes it: SGLang reads the smallest visible GPU
        gpu = GpuInfo(total_mib=min(g.memory_total_bytes for g in facts.gpus) / 2**20,
                      capability=facts.gpus[0].compute_capability, name=facts.gpus[0].name, count=len(facts.gpus))
    from sglwrap.memory.facts import model_traits_for

    traits, note = model_traits_for(cmd.model_path)
    try:
        r = resolve_server_args(cmd.canonical_given(), version, gpu, traits)  # type: ignore[arg-type]
    except (UnsupportedSGLangVersion, ValueError) as e:
        return {"skipped": f"SGLang {version}: {e}"}
    doc = asdict(r)
    doc["notes"] = [*doc["notes"], *([note] if note else [])]
    return doc


def describe(doc: dict[str, Any]) -> str:
    """One line: what SGLang will run with where the user did not say."""
    if "skipped" in doc:
        return f"sglang defaults: not resolved ({doc['skipped']})"
    graphs = (f"decode graphs up to bs {doc['cuda_graph_max_bs']}" if doc["decode_cuda_graph"]
              else "no decode graphs")
    auto = ", ".join(doc["auto_enabled"]) or "nothing"
    return (f"SGLang {doc['version']} will run with --mem-fraction-static {doc['mem_fraction_static']} "
            f"({doc['mem_fraction_static_source']}), chunked prefill {doc['chunked_prefill_size']}, {graphs}, "
            f"prefill graphs {'on' if doc['prefill_cuda_graph'] else 'off'}, attention backend "
            f"{doc['attention_backend'] or 'chosen at load'}; turns on by itself: {auto}")

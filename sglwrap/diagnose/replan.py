"""Re-plan a logged launch with the memory accountant, from the log's own numbers.

The log gives the free memory before weights (P) and the weights (W) of each rank; the accountant adds what the
log cannot say: the KV cell of the model, how many tokens the fix would buy, and whether the fix leaves room for
CUDA graphs. Needs the model's config.json (the log's ``model_path`` when it is a local directory, in the local
Hugging Face cache or one of sglwrap's built-in configs); otherwise the report says why it was skipped.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sglwrap.errors import SglwrapError
from sglwrap.host.facts import GpuFacts, HostFacts
from sglwrap.record import Record, replace

if TYPE_CHECKING:
    from sglwrap.diagnose import Report
    from sglwrap.memory import MemoryPlan
    from sglwrap.memory.budget import Observed

GIB = 1 << 30
# server_args key -> the flag the accountant reads (same meaning in every SGLang version that logs the key).
_FLAGS = {
    "model_path": "--model-path", "tp_size": "--tp-size", "pp_size": "--pp-size", "dp_size": "--dp-size",
    "mem_fraction_static": "--mem-fraction-static", "kv_cache_dtype": "--kv-cache-dtype",
    "context_length": "--context-length", "page_size": "--page-size", "dtype": "--dtype",
    "quantization": "--quantization", "chunked_prefill_size": "--chunked-prefill-size",
    "max_running_requests": "--max-running-requests",
}


def _argv(server_args: dict[str, object], version: str) -> list[str]:
    argv: list[str] = []
    for key, flag in _FLAGS.items():
        value = server_args.get(key)
        if value is None or value == "auto" and key != "kv_cache_dtype":
            continue
        if isinstance(value, float) and value.is_integer() and key != "mem_fraction_static":
            value = int(value)
        argv += [flag, str(value)]
    graph = server_args.get("cuda_graph_max_bs_decode", server_args.get("cuda_graph_max_bs"))
    if isinstance(graph, (int, float)):
        from sglwrap.sglang.flags import bundled_table

        flags = bundled_table(version).flags
        flag = "--cuda-graph-max-bs-decode" if "--cuda-graph-max-bs-decode" in flags else "--cuda-graph-max-bs"
        argv += [flag, str(int(graph))]
    return argv


def _observed_rank(report: Report) -> tuple[Any, float] | None:
    """The first rank with a free-memory reading before weights (logged, or free after + weights: SGLang's
    ``mem usage`` is before − after on the same rank) and its weights (logged, or the free drop)."""
    for r in report.ranks:
        before = r.avail_before_weights_gib
        if before is None and r.avail_after_weights_gib is not None and r.weight_mem_gib is not None:
            before = r.avail_after_weights_gib + r.weight_mem_gib
            r = replace(r, avail_before_weights_gib=before)
        if before is None:
            continue
        if r.weight_mem_gib is not None:
            return r, r.weight_mem_gib
        if r.avail_after_weights_gib is not None:
            return r, before - r.avail_after_weights_gib
    return None


def replan(report: Report, model_path: str | None = None) -> dict[str, Any]:
    """The accountant's view of the logged launch, or ``{"skipped": why}``; never raises (diagnose must not).

    ``model_path`` replaces the log's own ``model_path`` (e.g. a local copy of the config).
    """
    try:
        return _replan(report, model_path)
    except Exception as e:  # noqa: BLE001 - a log must never crash diagnose; say what went wrong instead
        return {"skipped": f"re-plan failed ({type(e).__name__}: {e})"}


class Context(Record):
    """What the accountant needs to re-plan a logged launch: the GPUs, NCCL env, argv and the log's readings."""

    facts: HostFacts
    env: dict[str, str]
    argv: list[str]
    version: str
    observed: Observed
    rank: str

    def plan(self, argv: list[str] | None = None) -> MemoryPlan:
        """The accountant's plan for ``argv`` (default: the logged launch) on the log's own readings."""
        from sglwrap import memory

        return memory.plan(self.facts, self.env, self.argv if argv is None else argv,
                           sglang_version=self.version, observed=self.observed)


def context(report: Report, model_path: str | None = None) -> Context | str:
    """The re-plan context of ``report``, or why there is none (no model_path, no readings)."""
    args = dict(report.server_args)
    if model_path:
        args["model_path"] = model_path
    model = args.get("model_path")
    found = _observed_rank(report)
    if not model or found is None:
        return "the log shows no server args with model_path, or no free-memory/weights readings"
    from sglwrap.memory.budget import Observed

    rank, weights_gib = found
    from sglwrap.versions import newest_known

    version = report.sglang_version or (newest_known() if report.log_format == "0.5.23-style" else "0.5.9")
    tp = int(float(args.get("tp_size") or 1)) * int(float(args.get("pp_size") or 1))  # type: ignore[arg-type]
    total = _gpu_total_bytes(report.finding.error) or int((rank.avail_before_weights_gib + 2) * GIB)
    gpus = tuple(GpuFacts(index=i, name="GPU from the log", compute_capability=(9, 0), memory_total_bytes=total)
                 for i in range(tp))
    facts = HostFacts(source="log", gpus=gpus, provenance="re-planned from a log's own readings")
    env = {k: v for w in report.workers for k, v in w.env.items() if k.startswith("NCCL_")}
    observed = Observed(int(rank.avail_before_weights_gib * GIB), int(weights_gib * GIB))
    return Context(facts, env, _argv(args, version), version, observed, rank.label)


def _replan(report: Report, model_path: str | None) -> dict[str, Any]:
    ctx = context(report, model_path)
    if isinstance(ctx, str):
        return {"skipped": ctx}
    found = _observed_rank(report)
    assert found is not None  # context() found it
    rank = found[0]
    facts, env, argv, version, observed = ctx.facts, ctx.env, ctx.argv, ctx.version, ctx.observed
    from sglwrap import memory

    try:
        plan = ctx.plan()
    except SglwrapError as e:
        return {"skipped": e.message}
    doc = plan.to_dict()
    out: dict[str, Any] = {
        "model": doc["model"]["name"], "verdict": plan.verdict, "kv_cell_bytes": doc["kv_cell_bytes"],
        "kv_tokens": doc["kv_tokens"], "min_mem_fraction_static": doc["min_mem_fraction_static"],
        "fix": plan.result.fix, "rank": rank.label,
    }
    if rank.kv_tokens and rank.kv_size_gib:
        out["log_kv_cell_bytes"] = round(rank.kv_size_gib * GIB / rank.kv_tokens)
    fixed = _fixed_fraction(plan.result.fix)
    if fixed is not None:
        argv2 = [a for a in argv]
        if "--mem-fraction-static" in argv2:
            argv2[argv2.index("--mem-fraction-static") + 1] = str(fixed)
        else:
            argv2 += ["--mem-fraction-static", str(fixed)]
        try:
            after = memory.plan(facts, env, argv2, sglang_version=version, observed=observed).to_dict()
            out["after_fix"] = {"mem_fraction_static": fixed, "verdict": after["verdict"],
                                "kv_tokens": after["kv_tokens"], "max_context_tokens": after["max_context_tokens"],
                                "runtime_free_gib": round(after["terms"].get("runtime_free", 0) / GIB, 2)}
        except SglwrapError:
            pass
    return out


def _fixed_fraction(fix: str | None) -> float | None:
    m = re.search(r"--mem-fraction-static\s+([0-9.]+)", fix or "")
    return float(m.group(1)) if m else None


def _gpu_total_bytes(error: str | None) -> int | None:
    m = re.search(r"total capacity of ([0-9.]+) GiB", error or "")
    return int(float(m.group(1)) * GIB) if m else None


def describe(doc: dict[str, Any]) -> list[str]:
    """Text lines for the human report."""
    if "skipped" in doc:
        return [f"accountant: not re-planned ({doc['skipped']})"]
    lines = [f"accountant ({doc['model']}, from rank {doc['rank']}'s readings): KV pool {doc['verdict']}, "
             f"KV cell {doc['kv_cell_bytes']:,} B/token"
             + (f" (the log's pool implies {doc['log_kv_cell_bytes']:,})" if "log_kv_cell_bytes" in doc else "")
             + f", smallest --mem-fraction-static for the pool {doc['min_mem_fraction_static']}"]
    after = doc.get("after_fix")
    if after:
        lines.append(f"  with --mem-fraction-static {after['mem_fraction_static']}: {after['verdict']}, "
                     f"{after['kv_tokens']:,} KV tokens (max context {after['max_context_tokens']:,}), "
                     f"{after['runtime_free_gib']} GiB left after graphs and activations")
    return lines

"""The two renderings of a ``Report``: one JSON object (stdout) and a human table (stderr)."""

from __future__ import annotations

import json
from typing import Final

from sglwrap.diagnose import Report
from sglwrap.diagnose.compare import nccl_env
from sglwrap.diagnose.timeline import RankMemory
from sglwrap.record import asdict

SCHEMA_VERSION: Final = 1
RANK_KEYS: Final = (
    "avail_before_weights_gib", "weight_mem_gib", "avail_after_weights_gib", "kv_tokens", "kv_size_gib",
    "cuda_graph_mem_gib", "avail_final_gib",
)
EXTRA_KEYS: Final = (
    "init_mem_gib", "k_size_gib", "v_size_gib", "avail_after_kv_pool_gib", "avail_before_cuda_graph_gib",
    "cuda_graph_bs_count", "mamba_state_gib",
)


def rank_dict(r: RankMemory) -> dict[str, object]:
    """One rank as the JSON contract spells it."""
    d: dict[str, object] = {"rank": r.rank, "label": r.label, "node": r.node or None, "stage": r.stage}
    for k in RANK_KEYS + EXTRA_KEYS:
        d[k] = getattr(r, k)
    d["draft"] = None if r.draft is None else {k: v for k, v in rank_dict(r.draft).items()
                                                if k not in ("rank", "label", "node", "draft")}
    return d


def to_dict(rep: Report) -> dict[str, object]:
    """The JSON object ``diagnose --json`` prints."""
    f = rep.finding
    return {
        "schema_version": SCHEMA_VERSION,
        "command": "diagnose",
        "exit_code": rep.exit_code,
        "outcome": f.outcome,
        "stage": f.stage,
        "sglang_version": rep.sglang_version,
        "log_format": rep.log_format,
        "sglang_release_range": list(rep.release_span) if rep.release_span else None,
        "error": f.error,
        "hint": f.hint,
        "hint_correct": f.hint_correct,
        "cause": f.cause,
        "fix": f.fix,
        "ranks": [rank_dict(r) for r in rep.ranks],
        "unbalanced": [dict(asdict(i), spread_gib=i.spread_gib) for i in rep.imbalances],
        "max_total_num_tokens": rep.max_total.get("tokens"),
        "max_running_requests": rep.max_total.get("max_running_requests"),
        "context_len": rep.max_total.get("context_len"),
        "profiled_kv_tokens": rep.profiled.get("profiled"),
        "requested_max_total_tokens": rep.profiled.get("requested"),
        "mem_fraction_static": rep.server_args.get("mem_fraction_static"),
        "launch_attempts": rep.attempts,
        "earlier_attempts": [{"attempt": i, "outcome": e.outcome, "stage": e.stage, "error": e.error,
                              "cause": e.cause} for i, e in rep.earlier],
        "files": list(rep.files),
        "workers": [
            {"node": w.node or None, "pid": w.pid, "ppid": w.ppid, "role": w.role, "profile": w.profile,
             "hash": w.hash, "nccl_env": nccl_env(w.env)}
            for w in rep.workers
        ],
        "manifests": [
            {"file": m.source, "profile": m.profile_name, "hash": m.profile_hash, "nccl_env": nccl_env(m.env),
             "argv": list(m.argv)}
            for m in rep.manifests
        ],
        "env_disagreements": list(rep.env_disagreements),
        "skipped_inputs": [{"file": p, "why": w} for p, w in rep.skipped],
    }


def to_json(rep: Report) -> str:
    """``to_dict`` as one line of JSON."""
    return json.dumps(to_dict(rep), sort_keys=False)


def _cell(x: object) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.2f}"
    return str(x)


def to_text(rep: Report) -> str:
    """The human report: per-rank table, then outcome, cause, fix and environment notes."""
    lines: list[str] = []
    head = ("rank", "stage", "free0", "weights", "free1", "kv_tok", "kv_GiB", "pool", "graphs", "final")
    keys = ("avail_before_weights_gib", "weight_mem_gib", "avail_after_weights_gib", "kv_tokens", "kv_size_gib",
            "avail_after_kv_pool_gib", "cuda_graph_mem_gib", "avail_final_gib")
    rows: list[tuple[str, ...]] = [head]
    for r in rep.ranks[:64]:
        name = f"{r.node}:{r.label}" if r.node else r.label
        rows.append((name, r.stage, *(_cell(getattr(r, k)) for k in keys)))
        if r.draft is not None:  # the speculative-decoding draft worker of the same rank, on its own row
            rows.append((f"{name} draft", r.draft.stage, *(_cell(getattr(r.draft, k)) for k in keys)))
    if len(rep.ranks) > 64:
        rows.append((f"... {len(rep.ranks) - 64} more", *([""] * 9)))
    if len(rows) > 1:
        widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
        lines.append("free0/free1 = GiB free before/after weights; pool/final = GiB free after KV pool / at the end")
        lines.extend("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)
        lines.append("")
    f = rep.finding
    ver = rep.sglang_version or (f"unknown (log format {rep.log_format})" if rep.log_format else "unknown")
    if rep.sglang_version is None and rep.release_span:
        lo, hi = rep.release_span
        ver = f"unknown (its messages match catalogued releases {lo}" + (f" to {hi})" if hi != lo else ")")
    lines.append(f"outcome: {f.outcome}   stage: {f.stage or '-'}   sglang: {ver}")
    if f.error:
        lines.append(f"error: {f.error}")
    if f.hint:
        verdict = {True: "right", False: "WRONG", None: "cannot tell"}[f.hint_correct]
        lines.append(f"SGLang's hint: {f.hint} -> {verdict}")
    lines.append(f"cause: {f.cause}")
    if f.fix:
        lines.append(f"fix: {f.fix}")
    for n, e in rep.earlier:
        what = e.outcome if e.stage is None else f"{e.outcome} at {e.stage.replace('_', ' ')}"
        lines.append(f"earlier launch {n} of {rep.attempts} in this log: {what}"
                     + (f" ({e.error[:160]})" if e.error else "") + "; the report above is the last launch")
    for i in rep.imbalances:
        lines.append(f"ranks disagree on {i.field}: {i.min_label} {i.min_gib:.2f} vs {i.max_label} "
                     f"{i.max_gib:.2f} GiB ({i.spread_gib:.2f} GiB)")
    for m in rep.manifests:
        lines.append(f"manifest {m.source}: profile {m.profile_name} hash {str(m.profile_hash)[:12]} "
                     f"{_env_text(nccl_env(m.env))}")
    for w in rep.workers[:32]:
        lines.append(f"worker pid {w.pid} {w.role or ''} profile {w.profile}: {_env_text(nccl_env(w.env))}")
    for d in rep.env_disagreements:
        lines.append(f"env differs: {d}")
    return "\n".join(lines) + "\n"


def _env_text(env: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in env.items()) or "(no NCCL variables)"

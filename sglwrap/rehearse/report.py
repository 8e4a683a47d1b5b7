"""The rehearsal's verdict: how the run ended plus diagnose's reading of its log, and SGLang's real numbers per
rank beside the memory accountant's prediction. ``to_dict`` is the JSON contract; ``to_text`` the report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from sglwrap.diagnose import Report
from sglwrap.errors import EXIT_CONFIG, EXIT_OK
from sglwrap.rehearse.plan import GIB, Rehearsal
from sglwrap.rehearse.run import RunResult, describe_code

SCHEMA_VERSION: Final = 1
TAIL_LINES: Final = 12
WIDE_RANKS: Final = 4  # more ranks than this: min and max columns instead of one per rank
# diagnose's per-rank readings that the accountant also predicts: (JSON key, words, unit)
MEASURES: Final = (
    ("avail_before_weights_gib", "free before weights", "GiB"),
    ("weight_mem_gib", "weights", "GiB"),
    ("kv_tokens", "KV tokens", "tokens"),
    ("kv_size_gib", "KV pool", "GiB"),
    ("cuda_graph_mem_gib", "CUDA graphs", "GiB"),
)


def predicted(memory: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The accountant's per-rank prediction in diagnose's units, or None when it did not plan."""
    if not memory or "terms" not in memory:
        return None
    t = memory["terms"]
    graphs = (t.get("decode_graphs") or 0) + (t.get("prefill_graphs") or 0) + (t.get("draft_graphs") or 0)
    return {"avail_before_weights_gib": round(t.get("pre_weights_free", 0) / GIB, 2),
            "weight_mem_gib": round((memory.get("weights_bytes_per_rank") or t.get("weights", 0)) / GIB, 2),
            "kv_tokens": memory.get("kv_tokens"), "kv_size_gib": round(t.get("kv_pool", 0) / GIB, 2),
            "cuda_graph_mem_gib": round(graphs / GIB, 2), "verdict": memory.get("verdict")}


def redacted(argv: Sequence[str]) -> list[str]:
    """``argv`` with the value of every secret flag (``--api-key``, ``--ssl-keyfile-password``, any flag with a word
    key/token/secret/password) replaced, as the unit file does: reports and the verdict cache never hold secrets."""
    from sglwrap.systemd_unit import is_secret_flag

    out: list[str] = []
    hide = False
    for tok in argv:
        name, eq, _value = tok.partition("=")
        if hide:
            out.append("<redacted>")
            hide = False
        elif name.startswith("--") and is_secret_flag(name):
            out.append(f"{name}=<redacted>" if eq else tok)
            hide = not eq
        else:
            out.append(tok)
    return out


def _stage_and_reason(run: RunResult, diag: Report) -> tuple[str | None, str]:
    f = diag.finding
    if run.ended == "passed":
        return None, "passed"
    if run.ended == "request_failed":
        return "first_request", "the first request failed"
    if run.ended == "hang":
        return f.stage or "startup", "hang"
    if f.stage is None:
        return "startup", "SGLang exited before its first startup line (import or argument error)"
    return f.stage, "SGLang exited"


def to_dict(reh: Rehearsal, run: RunResult, diag: Report, *, tail: Sequence[str], log_path: str,
            memory: Mapping[str, Any] | None, notes: Sequence[str] = (), fingerprint: str | None = None,
            sglang_version: str | None = None, profile: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The rehearsal's JSON object."""
    f = diag.finding
    passed = run.ended == "passed"
    stage, reason = _stage_and_reason(run, diag)
    cause, fix, error = f.cause, f.fix, f.error
    if run.ended == "hang":
        where = (stage or "startup").replace("_", " ")
        cause = (f"no /health 200 within the {reh.timeout_s:g} s timeout; the log had reached {where} and made no "
                 f"further progress, so the rehearsal was stopped" + (f" ({f.cause})" if f.error else ""))
        fix = fix if f.error else ("read the end of the log for the step that hangs (NCCL rendezvous, a JIT build, "
                                   "graph capture); if it was only slow, raise --timeout")
    elif run.ended == "request_failed":
        said = f"HTTP {run.request_status}" if run.request_status else "no answer"
        first = f"the first /generate request got {said} ({run.request_detail})"
        cause = f"{first}; {f.cause}" if f.error else first + "."
        fix = fix or "read the log around the request for the scheduler's traceback"
    elif not passed and error is None:
        error = tail[-1] if tail else None
        last = f"; its last line: {tail[-1]}" if tail else "; it printed nothing"
        if stage == "startup":
            cause = (f"SGLang exited ({describe_code(run.returncode)}) before its first startup line: an import or "
                     f"argument error{last}")
            fix = "read the log's last lines (below); install what is missing or correct the argument"
        else:
            cause = (f"SGLang exited ({describe_code(run.returncode)}) during {str(stage).replace('_', ' ')} "
                     f"without an error line diagnose recognises{last}")
            fix = "read the log's last lines (below) and the traceback above them"
    ranks = [{"rank": r.rank, "label": r.label, **{k: getattr(r, k) for k, _w, _u in MEASURES}}
             for r in diag.ranks]
    return {
        "schema_version": SCHEMA_VERSION,
        "command": "rehearse",
        "verdict": "passed" if passed else "failed",
        "exit_code": EXIT_OK if passed else EXIT_CONFIG,
        "ended": run.ended,
        "reason": reason,
        "stage": stage,
        "outcome": f.outcome,
        "error": error,
        "cause": cause,
        "fix": fix,
        "hint": f.hint,
        "hint_correct": f.hint_correct,
        "elapsed_s": round(run.elapsed_s, 1),
        "health_after_s": None if run.health_after_s is None else round(run.health_after_s, 1),
        "request": {"status": run.request_status, "answer": run.request_detail},
        "timeout_s": reh.timeout_s,
        "timeout_why": reh.timeout_why,
        "stopped": {"how": run.stop, "returncode": run.returncode, "leftover_processes": run.leftovers,
                    "shm_removed": list(run.shm_removed)},
        "argv": redacted(reh.argv),
        "added": list(reh.added),
        "layers": reh.layers,
        "sglang_version": sglang_version or diag.sglang_version,
        "profile": dict(profile or {}),
        "ranks": ranks,
        "predicted": predicted(memory),
        "notes": [*reh.notes, *notes],
        "log": log_path,
        "log_tail": list(tail) if not passed else [],
        "fingerprint": fingerprint,
        "cached": False,
    }


def _num(v: object, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "tokens":
        return f"{int(v):,}" if isinstance(v, (int, float)) else str(v)
    return f"{float(v):.2f} GiB" if isinstance(v, (int, float)) else str(v)


def memory_table(doc: Mapping[str, Any]) -> list[str]:
    """SGLang's numbers per rank beside the accountant's prediction (one row per measure)."""
    ranks = doc.get("ranks") or []
    pred = doc.get("predicted")
    if not ranks and not pred:
        return []
    wide = len(ranks) > WIDE_RANKS  # TP 8: the tightest and the loosest rank, not eight columns
    heads = [f"min of {len(ranks)}", f"max of {len(ranks)}"] if wide else [
        str(r.get("label")) if r.get("label") not in (None, "", "-") else f"rank {r.get('rank')}" for r in ranks]
    lines = ["memory per rank (SGLang's log" + (" vs the accountant's prediction)" if pred else ")")]
    cols = [*heads, *(["predicted"] if pred else [])]
    lines.append(f"  {'':<20}" + "".join(f"{c:>16}" for c in cols))
    for key, words, unit in MEASURES:
        if wide:
            seen = [r.get(key) for r in ranks if isinstance(r.get(key), (int, float))]
            measured = [_num(min(seen), unit), _num(max(seen), unit)] if seen else ["-", "-"]
        else:
            measured = [_num(r.get(key), unit) for r in ranks]
        row = measured + ([_num(pred.get(key), unit)] if pred else [])
        if all(c == "-" for c in row):
            continue
        lines.append(f"  {words:<20}" + "".join(f"{c:>16}" for c in row))
    if doc.get("layers"):
        lines.append(f"  (--layers {doc['layers']}: these numbers are not the real model's)")
    return lines


def to_text(doc: Mapping[str, Any]) -> str:
    """The human report."""
    passed = doc["verdict"] == "passed"
    head = "PASS" if passed else "BLOCK"
    lines: list[str] = []
    if doc.get("cached"):
        lines.append(f"rehearse  {head}: skipped, this fingerprint ({str(doc.get('fingerprint'))[:12]}) passed on "
                     f"{doc.get('recorded', 'an earlier run')}; nothing was started")
        return "\n".join(lines) + "\n"
    if passed:
        lines.append(f"rehearse  {head}: SGLang {doc.get('sglang_version') or ''} came up with dummy weights in "
                     f"{doc.get('health_after_s')} s and answered one /generate; stopped by {doc['stopped']['how']}")
    else:
        lines.append(f"rehearse  {head}: failed at {str(doc.get('stage')).replace('_', ' ')} ({doc['reason']}) "
                     f"after {doc.get('elapsed_s')} s")
        if doc.get("error"):
            lines.append(f"error     {doc['error']}")
        lines.append(f"cause     {doc.get('cause')}")
        if doc.get("fix"):
            lines.append(f"fix       {doc['fix']}")
    lines += memory_table(doc)
    lines.append(f"timeout   {doc.get('timeout_why')}")
    lines.append(f"added     {' '.join(doc.get('added') or [])}")
    for n in doc.get("notes") or []:
        lines.append(f"note      {n}")
    stopped = doc.get("stopped") or {}
    if stopped.get("leftover_processes"):
        lines.append(f"cleanup   {stopped['leftover_processes']} process(es) outlived SGLang's main process and were "
                     "killed")
    if stopped.get("shm_removed"):
        lines.append(f"cleanup   removed from /dev/shm: {', '.join(stopped['shm_removed'])}")
    lines.append(f"log       {doc.get('log')}")
    if not passed and doc.get("log_tail"):
        lines.append("log tail:")
        lines += [f"  {t}" for t in doc["log_tail"]]
    return "\n".join(lines) + "\n"

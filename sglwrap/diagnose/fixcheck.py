"""Check diagnose's own memory fix with the memory accountant before printing it.

When the log's model is known (a built-in config, a local path, the offline HF cache or ``--model-path``), each
concrete change the fix names (``--mem-fraction-static 0.95``, ``--cuda-graph-max-bs 4`` …) is re-planned through
``sglwrap.memory.plan`` on the log's own readings (free memory before weights, weights). A change is printed only
when its re-plan fits; otherwise the report says what was checked and that it did not suffice.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final

from sglwrap.errors import SglwrapError
from sglwrap.record import replace

if TYPE_CHECKING:
    from sglwrap.diagnose import Report
    from sglwrap.diagnose.replan import Context

FITS: Final = ("fits", "fits_tight")
GRAPH_FLAGS: Final = ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode")
# Flags whose value the accountant reads (sglwrap.memory parses them; same meaning in every release that has them).
CHECKABLE: Final = frozenset({"--mem-fraction-static", "--chunked-prefill-size", "--max-running-requests",
                              "--context-length", *GRAPH_FLAGS})
CHANGE_RE: Final = re.compile(r"(--[a-z][a-z-]*)\s+(\d+(?:\.\d+)?)(?![\d.-])")
# cause.py's conditional advice: "if --mem-fraction-static was below 0.885, use 0.94; otherwise …"
CONDITIONAL_RE: Final = re.compile(r"(--[a-z][a-z-]*) was below [\d.]+, use (\d+(?:\.\d+)?)(?![\d.-])")


def changes(fix: str | None) -> list[tuple[str, str]]:
    """The concrete ``(flag, value)`` changes a fix names, in order, each once (relative advice has none)."""
    out: list[tuple[str, str]] = []
    for flag, value in CONDITIONAL_RE.findall(fix or "") + CHANGE_RE.findall(fix or ""):
        if flag in CHECKABLE and (flag, value) not in out:
            out.append((flag, value))
    return out


def _with(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``flag`` set to ``value``; a graph flag replaces whichever graph flag the launch used."""
    names = GRAPH_FLAGS if flag in GRAPH_FLAGS else (flag,)
    out, i = [], 0
    present = None
    while i < len(argv):
        if argv[i] in names:
            present = present or argv[i]
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out + [present if present and flag in GRAPH_FLAGS else flag, value]


def check(report: Report, model_path: str | None = None) -> dict[str, Any] | None:
    """The accountant's check of the report's memory fix, or None when there is no memory fix to check.

    Returns ``{"skipped": why}`` when the model or the readings are unknown; otherwise the logged launch's verdict,
    one entry per concrete change (its verdict and KV tokens), and ``fix``: the text to print instead of the
    original (only changes that fit, or what was checked and did not suffice).
    """
    f = report.finding
    if f.outcome != "oom" or not f.fix:
        return None
    from sglwrap.diagnose.replan import context

    ctx = context(report, model_path)
    if isinstance(ctx, str):
        return {"skipped": ctx}
    try:
        return _check(ctx, f.fix)
    except SglwrapError as e:
        return {"skipped": e.message}
    except Exception as e:  # noqa: BLE001 - a log must never crash diagnose; say what went wrong instead
        return {"skipped": f"re-plan failed ({type(e).__name__}: {e})"}


def _check(ctx: Context, fix: str) -> dict[str, Any]:
    before = ctx.plan()
    model = before.to_dict()["model"]["name"]
    todo = changes(fix)
    doc: dict[str, Any] = {"model": model, "rank": ctx.rank, "logged_verdict": before.verdict, "checked": []}
    if not todo:
        doc["note"] = "the fix names no concrete value to re-plan (it is relative to the launch's own values)"
        return doc
    for flag, value in todo:
        after = ctx.plan(_with(ctx.argv, flag, value)).to_dict()
        doc["checked"].append({"change": f"{flag} {value}", "verdict": after["verdict"],
                               "kv_tokens": after["kv_tokens"]})
    good = [c for c in doc["checked"] if c["verdict"] in FITS]
    bad = [c for c in doc["checked"] if c["verdict"] not in FITS]
    where = f"the accountant ({model}, from {ctx.rank}'s readings)"
    if not bad:
        doc["fix"] = fix
    elif good:
        doc["fix"] = (" or ".join(c["change"] for c in good)
                      + f" (checked by {where}; {_list(bad)} did not suffice)")
    else:
        doc["fix"] = (f"{_list(bad)} checked by {where} did not suffice; reduce the per-GPU weights (more GPUs via "
                      "--tp, a quantized checkpoint) or free the GPUs of other processes")
    if before.verdict in FITS:
        doc["note"] = ("the accountant re-plans the failed launch as fitting too, so it cannot confirm that the "
                       "fix removes this failure")
    return doc


def _list(items: list[dict[str, Any]]) -> str:
    return ", ".join(f"{c['change']} ({c['verdict']})" for c in items)


def apply(report: Report, doc: dict[str, Any] | None) -> Report:
    """``report`` with its fix replaced by the checked one (unchanged when nothing was checked)."""
    if not doc or "fix" not in doc or doc["fix"] == report.finding.fix:
        return report
    return replace(report, finding=replace(report.finding, fix=doc["fix"]))


def describe(doc: dict[str, Any] | None) -> list[str]:
    """Text lines for the human report."""
    if not doc:
        return []
    if "skipped" in doc:
        return [f"fix not checked with the accountant ({doc['skipped']})"]
    lines = [f"fix checked with the accountant ({doc['model']}, from {doc['rank']}'s readings; the logged launch "
             f"re-plans as {doc['logged_verdict']}):"]
    lines += [f"  {c['change']}: {c['verdict']}, {c['kv_tokens']:,} KV tokens" for c in doc["checked"]]
    if "note" in doc:
        lines.append(f"  {doc['note']}")
    return lines

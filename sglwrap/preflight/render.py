"""The two renderings of a PreflightResult: one JSON object, or a table for a terminal."""

from __future__ import annotations

from typing import Any

from sglwrap.preflight.runner import PreflightResult

SCHEMA_VERSION = 1


def to_json(result: PreflightResult, **extra: Any) -> dict[str, Any]:
    """The ``--json`` object: verdict, checks, the resolved profile after downgrades, and the facts used."""
    return {
        "schema_version": SCHEMA_VERSION,
        "command": "preflight",
        "verdict": result.verdict,
        "exit_code": result.exit_code,
        "checks": [v.to_dict() for v in result.checks],
        "downgrades": result.manifest()["downgrades"],
        "profile": result.profile.to_dict() if result.profile is not None else None,
        "facts": result.facts.to_dict(),
        "sglang_defaults": result.sglang_defaults,
        **extra,
    }


_MARK = {"pass": "PASS", "skip": "skip", "warn": "WARN", "downgrade": "DOWN", "block": "BLOCK"}
_VERDICT = {"ok": "PASS", "downgraded": "DOWN (downgraded)", "blocked": "BLOCK (blocked)"}


def to_table(result: PreflightResult, width: int | None = None, *, verbose: bool = False) -> str:
    """Check, status, reason and fix, one check per block, wrapped to ``width`` (default: the terminal's); the
    skipped checks fold into one ``skipped`` line unless ``verbose``.

    Status words are plain here (PASS, WARN, DOWN, BLOCK, skip); ``sglwrap.term`` colours them on a terminal.
    """
    import textwrap

    from sglwrap import term

    width = max(width or min(term.width(), 140), 60)
    verdict = _VERDICT.get(result.verdict, result.verdict.upper())
    warned = sum(v.status.value == "warn" for v in result.checks)
    if warned:
        verdict += f", {warned} WARN"
    lines = [f"preflight on {result.facts.source}: {verdict}"]
    skipped = [v.id for v in result.checks if v.status.value == "skip"]
    for v in result.checks:
        if v.status.value == "skip" and not verbose:
            continue
        head = f"{v.id:<18} {_MARK[v.status.value]:<5} "
        body = textwrap.wrap(v.reason, width - len(head), break_long_words=False, break_on_hyphens=False) or [""]
        lines.append(head + body[0])
        lines += [" " * len(head) + b for b in body[1:]]
        if v.fix and v.status.value not in ("pass", "skip"):
            fix = textwrap.wrap("fix: " + v.fix, width - len(head), break_long_words=False, break_on_hyphens=False)
            lines += [" " * len(head) + f for f in fix]
    if skipped and not verbose:
        # one line, never wrapped, so `grep ^skipped` finds all of them
        lines.append(f"{'skipped':<18} {'':<5} {', '.join(skipped)} (--verbose shows why)")
    if result.sglang_defaults is not None:
        from sglwrap.preflight.sglang_defaults import describe

        lines += textwrap.wrap(describe(result.sglang_defaults), width, subsequent_indent="  ",
                               break_long_words=False, break_on_hyphens=False)
    if result.profile is not None and result.changes:
        drops = ", ".join(f"{c.feature} -> {c.mode or 'dropped'}" for c in result.changes)
        lines += textwrap.wrap(f"profile {result.profile.name} launches downgraded: {drops}", width,
                               subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)
    return "\n".join(lines) + "\n"

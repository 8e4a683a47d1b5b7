"""The two renderings of a PreflightResult: one JSON object, or a table for a terminal."""

from __future__ import annotations

import shutil
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
        **extra,
    }


_MARK = {"pass": "ok", "skip": "--", "warn": "WARN", "downgrade": "DOWN", "block": "BLOCK"}


def to_table(result: PreflightResult, width: int | None = None) -> str:
    """Check, status, reason and fix, one check per block, wrapped to the terminal."""
    import textwrap

    width = width or min(shutil.get_terminal_size((120, 20)).columns, 140)
    lines = [f"preflight on {result.facts.source}: {result.verdict.upper()}"]
    for v in result.checks:
        head = f"{v.id:<18} {_MARK[v.status.value]:<5} "
        body = textwrap.wrap(v.reason, width - len(head)) or [""]
        lines.append(head + body[0])
        lines += [" " * len(head) + b for b in body[1:]]
        if v.fix and v.status.value not in ("pass", "skip"):
            fix = textwrap.wrap("fix: " + v.fix, width - len(head))
            lines += [" " * len(head) + f for f in fix]
    if result.profile is not None and result.changes:
        drops = ", ".join(f"{c.feature} -> {c.mode or 'dropped'}" for c in result.changes)
        lines.append(f"profile {result.profile.name} launches downgraded: {drops}")
    return "\n".join(lines) + "\n"

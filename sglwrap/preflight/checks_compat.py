"""The ``compat`` check: every knowledge-base entry (``sglwrap/data/compat/*.yaml``) against the facts and the
parsed command line. Each verdict names the entry ids it used (``[id]``); ``sglwrap preflight --explain ID``
prints an entry with its sources.

What a matching entry does:
- ``warn``: a warning with the fix.
- ``block``: nothing makes this launch work (``--force`` turns a block caused by the user's own flag into a warning).
- ``downgrade``: SGLang's own default path would crash and the entry's ``downgrade`` turns it off, so the launch is
  downgraded (even under ``--profile baseline``) and the change is recorded. When the user's own flags are among
  the entry's conditions, it still downgrades if the change touches only settings the user left to SGLang (an
  EAGLE3 launch keeps EAGLE3 and gets a draft attention backend that works); when it would override something the
  user gave, or turns a feature off, it blocks instead (the user asked for exactly what fails).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sglwrap.compat.kb import Entry, read
from sglwrap.compat.match import Match, matches
from sglwrap.preflight.model import SEVERITY, Context, FeatureChange, Status, Verdict

CHECK_ID = "compat"
_ENTRIES: tuple[Entry, ...] | None = None
_LEFT_OUT: list[str] | None = None
# Entries another check reports (with the entry id in its reason), so the compat check does not say them twice.
OWNED_ELSEWHERE = {"torch-missing-arch": "torch-arch", "driver-too-old-cuda13-torch": "cuda-driver",
                   "flashinfer-cubin-mismatch-raises": "flashinfer-cubin",
                   "flashinfer-jit-cache-mismatch-raises": "flashinfer-cubin",
                   "flashinfer-cubin-mismatch-ignored": "flashinfer-cubin"}


def entries() -> tuple[Entry, ...]:
    """The knowledge base, loaded once per process."""
    return _knowledge()[0]


def left_out() -> list[str]:
    """Schema problems of the entries ``entries()`` had to leave out (empty for the bundled data)."""
    return _knowledge()[1]


def _knowledge() -> tuple[tuple[Entry, ...], list[str]]:
    global _ENTRIES, _LEFT_OUT
    if _ENTRIES is None or _LEFT_OUT is None:
        _ENTRIES, _LEFT_OUT = read()
    return _ENTRIES, _LEFT_OUT


def downgrade_changes(entry: Entry, why: str) -> tuple[FeatureChange, ...]:
    """The entry's downgrade as FeatureChanges: a feature set off, a profile setting (``sglang:<name>``) or a worker
    variable (``env:<NAME>``); the runner applies them to the profile, so they end in the launch's argv/env."""
    out: list[FeatureChange] = []
    down: Mapping[str, Any] = entry.downgrade
    for name, mode in (down.get("feature") or {}).items():
        out.append(FeatureChange(name, str(mode), why))
    for name, value in (down.get("sglang") or {}).items():
        out.append(FeatureChange(f"sglang:{name}", str(value), why))
    for name, value in (down.get("env") or {}).items():
        out.append(FeatureChange(f"env:{name}", str(value), why))
    return tuple(out)


def _blocked_by_profile(ctx: Context, entry: Entry) -> str | None:
    for name in (entry.downgrade.get("feature") or {}):
        if ctx.mode(name) == "require":
            return name
    return None


def _spares_the_user(ctx: Context, entry: Entry) -> bool:
    """True when the entry's downgrade sets only SGLang settings and variables the user did not give."""
    down = entry.downgrade
    if down.get("feature") or not (down.get("sglang") or down.get("env")):
        return False
    from sglwrap.settings import SETTINGS

    table = ctx.args.table
    for name in (down.get("sglang") or {}):  # the dests the setting's flags have in this release, as launch reads them
        dests = {table.flags[flag].dest for flag in SETTINGS[name].flags if flag in table.flags} | {name}
        if any(ctx.args.is_given(d) for d in dests):
            return False
    return not any(ctx.environ.get(name) is not None for name in (down.get("env") or {}))


def _one(ctx: Context, m: Match) -> Verdict:
    e = m.entry
    head = f"[{e.id}] {e.title} ({m.facts}): {e.consequence}"
    if e.severity == "warn":
        return Verdict(CHECK_ID, Status.WARN, head, e.fix)
    if m.unknown:  # no entry blocks or changes a launch on a fact nobody knows
        return Verdict(CHECK_ID, Status.WARN, f"{head}; not known here: {', '.join(m.unknown)}, so this is a "
                       f"warning, not a {e.severity}", e.fix)
    if e.severity == "downgrade" and (not m.user_flags or _spares_the_user(ctx, e)):
        required = _blocked_by_profile(ctx, e)
        if required is None:
            changes = downgrade_changes(e, f"{e.title} [{e.id}]")
            what = ", ".join(f"{c.feature}={c.mode}" for c in changes)
            return Verdict(CHECK_ID, Status.DOWNGRADE, f"{head}; SGLang's default path is turned off: {what}",
                           e.fix, changes)
        return Verdict(CHECK_ID, Status.BLOCK, f"{head}; profile requires {required}",
                       f"set features.{required}: auto in the profile; {e.fix}")
    if m.user_flags and ctx.force:
        return Verdict(CHECK_ID, Status.WARN, f"{', '.join(m.user_flags)} given with --force; {head}", e.fix)
    fix = e.fix if not m.user_flags else f"remove {', '.join(m.user_flags)} (or pass --force); {e.fix}"
    return Verdict(CHECK_ID, Status.BLOCK, head, fix)


def check_compat(ctx: Context) -> Verdict:
    """Evaluate every entry; the worst outcome is the verdict, with every matching entry named."""
    if not ctx.facts.gpus:
        return Verdict(CHECK_ID, Status.SKIP, "no GPU facts to compare the knowledge base with")
    pairs: list[tuple[str, Verdict]] = []
    unknown: dict[str, list[str]] = {}
    broken = ctx.knowledge_left_out
    if broken:  # fail visibly: an entry the schema refuses is not silently "no entry applies"
        pairs.append(("knowledge-base", Verdict(CHECK_ID, Status.WARN, f"{len(broken)} knowledge-base entries "
                                                f"could not be read and were left out: {'; '.join(broken[:3])}",
                                                "report this as a bug of sglwrap (its bundled data is broken)")))
    for e in ctx.knowledge:
        if e.id in OWNED_ELSEWHERE:
            continue
        try:
            m = matches(e, ctx)
        except Exception as exc:  # fail visibly: a broken entry is a warning, never a silent "no entry applies"
            pairs.append((e.id, Verdict(CHECK_ID, Status.WARN,
                                        f"[{e.id}] could not be checked: {type(exc).__name__}: {exc}",
                                        f"report this entry as a bug of sglwrap (sglwrap preflight --explain {e.id})")))
            continue
        if m is not None:
            pairs.append((m.entry.id, _one(ctx, m)))
            if m.unknown and e.severity != "warn":
                unknown[e.id] = list(m.unknown)
    if not pairs:
        return Verdict(CHECK_ID, Status.PASS, f"none of {len(ctx.knowledge)} knowledge-base entries applies")
    pairs.sort(key=lambda p: -SEVERITY[p[1].status])
    worst = pairs[0][1]
    fixes: list[str] = []
    for _, v in pairs:
        if v.fix and v.fix not in fixes:
            fixes.append(v.fix)
    changes = tuple(c for _, v in pairs if v.status is Status.DOWNGRADE for c in v.changes) \
        if worst.status is Status.DOWNGRADE else ()
    return Verdict(CHECK_ID, worst.status, "; ".join(v.reason for _, v in pairs), "; ".join(fixes), changes,
                   detail={"entries": {eid: v.status.value for eid, v in pairs}, "unknown": unknown})

"""Load and validate the knowledge base: one YAML file per domain under ``sglwrap/data/compat/``.

An entry: ``id``, ``title``, ``applies`` (conditions, all must hold; see ``sglwrap.compat.match``), ``consequence``
(the error users see, verbatim from the public report), ``severity`` (block / downgrade / warn), ``fix``,
``downgrade`` (optional: what makes SGLang's default path safe: ``feature``, ``sglang`` or ``env``), ``sources``
(public URLs), ``checked`` (date), ``evidence`` (how sure the knowledge is) and ``evidence_ref`` (where: a release
file and line for ``source``, the maintainer's comment or merged fix for ``maintainer``). The parsed files are cached
as JSON keyed by their size and mtime.

Evidence decides the strongest verdict an entry may give (``STRONGEST``): ``source`` (the release's own code raises
or asserts it) and ``maintainer`` (a maintainer confirmed it, or a merged fix names the cause) may block; ``reports``
(two or more independent public reports) may downgrade where a switch exists; ``single`` (one report) warns.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sglwrap.record import Record, field


DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "compat"
SEVERITIES = ("block", "downgrade", "warn")
EVIDENCE = ("source", "maintainer", "reports", "single")
# the strongest severity each evidence level allows; SEVERITIES is ordered strongest first
STRONGEST = {"source": "block", "maintainer": "block", "reports": "downgrade", "single": "warn"}
ENTRY_KEYS = {"id", "title", "applies", "consequence", "severity", "fix", "downgrade", "sources", "checked", "notes",
              "evidence", "evidence_ref"}
APPLIES_KEYS = {"cc", "cc_min", "cc_max", "cc_not", "gpu_name", "interconnect", "packages", "not_packages", "absent",
                "args", "not_args", "env", "auto", "lacks_arch", "world_min", "gpus_min", "mixed_gpus",
                "iommu", "acs", "model", "nnodes_min", "nnodes_max", "gpus_max", "world_max", "p2p",
                "version_differs", "host", "forward_compat", "resolved", "arch", "not_user_args", "not_arch",
                "checkpoint_quant", "checkpoint_unquantized", "prefill_per_rank_over", "from_index"}
DOWNGRADE_KEYS = {"feature", "sglang", "env"}


class Entry(Record):
    """One piece of sourced knowledge."""

    id: str
    domain: str
    title: str
    applies: Mapping[str, Any]
    consequence: str
    severity: str
    fix: str
    sources: tuple[str, ...]
    checked: str
    downgrade: Mapping[str, Any] = field(default_factory=dict)
    notes: str = ""
    evidence: str = "single"
    evidence_ref: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The entry as the YAML spells it, with its domain."""
        return {"id": self.id, "domain": self.domain, "title": self.title, "applies": dict(self.applies),
                "consequence": self.consequence, "severity": self.severity, "fix": self.fix,
                "downgrade": dict(self.downgrade), "sources": list(self.sources), "checked": self.checked,
                "notes": self.notes, "evidence": self.evidence, "evidence_ref": self.evidence_ref}


class KnowledgeError(ValueError):
    """A knowledge-base file or entry that breaks the schema."""


def validate_entry(raw: Any, where: str) -> list[str]:
    """Every schema problem of one raw entry, as ``where: id: problem`` lines (empty when it is valid)."""
    if not isinstance(raw, dict):
        return [f"{where}: an entry must be a mapping"]
    import datetime  # validation only: the warm path reads the JSON cache

    eid = raw.get("id", "?")
    bad: list[str] = []
    if isinstance(raw.get("checked"), datetime.date):  # YAML reads an unquoted date as a date
        raw = {**raw, "checked": raw["checked"].isoformat()}

    def err(msg: str) -> None:
        bad.append(f"{where}: {eid}: {msg}")

    for key in sorted(set(raw) - ENTRY_KEYS):
        err(f"unknown key {key!r} (allowed: {', '.join(sorted(ENTRY_KEYS))})")
    for key in ("id", "title", "consequence", "fix", "checked"):
        if not isinstance(raw.get(key), str) or not str(raw.get(key)).strip():
            err(f"{key} must be a non-empty string")
    if isinstance(raw.get("id"), str) and not all(c.isalnum() or c in "-." for c in raw["id"]):
        err("id may hold letters, digits, '-' and '.' only")
    if raw.get("severity") not in SEVERITIES:
        err(f"severity must be one of {', '.join(SEVERITIES)}")
    applies = raw.get("applies")
    if not isinstance(applies, dict) or not applies:
        err("applies must be a non-empty mapping")
    else:
        for key in sorted(set(applies) - APPLIES_KEYS):
            err(f"applies: unknown condition {key!r} (allowed: {', '.join(sorted(APPLIES_KEYS))})")
        from sglwrap.compat.schema import condition_problems

        for problem in condition_problems(applies):
            err(problem)
        over = applies.get("prefill_per_rank_over")
        if over is not None and not (isinstance(over, dict) and isinstance(over.get("cap"), int)
                                     and set(over) <= {"cap", "env"} and isinstance(over.get("env", ""), str)):
            err("applies: prefill_per_rank_over must be {cap: <int>, env: <NAME>} (env optional)")
    sources = raw.get("sources")
    if not isinstance(sources, list) or not sources:
        err("sources must be a non-empty list of URLs")
    else:
        for s in sources:
            if not isinstance(s, str) or not s.startswith("https://"):
                err(f"source {s!r} is not an https URL")
    try:
        datetime.date.fromisoformat(str(raw.get("checked")))
    except ValueError:
        err("checked must be a date, YYYY-MM-DD")
    down = raw.get("downgrade")
    if down is not None:
        if not isinstance(down, dict) or not down or set(down) - DOWNGRADE_KEYS:
            err(f"downgrade must map one or more of {', '.join(sorted(DOWNGRADE_KEYS))} to settings")
        else:
            from sglwrap.settings import FEATURES, SETTINGS

            for name in (down.get("feature") or {}):
                if name not in FEATURES:
                    err(f"downgrade.feature {name!r} is not a feature ({', '.join(sorted(FEATURES))})")
            for name in (down.get("sglang") or {}):
                if name not in SETTINGS:
                    err(f"downgrade.sglang {name!r} is not a profile setting")
    if raw.get("severity") == "downgrade" and not down:
        err("severity downgrade needs a downgrade action")
    _check_evidence(raw, err)
    return bad


def _check_evidence(raw: Mapping[str, Any], err: Callable[[str], None]) -> None:
    """Report a bad ``evidence``/``evidence_ref``, or a severity stronger than the evidence allows."""
    level = raw.get("evidence")
    if level not in EVIDENCE:
        err(f"evidence must be one of {', '.join(EVIDENCE)} (got {level!r})")
        return
    ref = raw.get("evidence_ref")
    if level in ("source", "maintainer") and (not isinstance(ref, str) or not ref.strip()):
        err(f"evidence {level} needs evidence_ref (a release file:line, or the maintainer's comment / merged fix URL)")
    severity = raw.get("severity")
    if severity in SEVERITIES and SEVERITIES.index(severity) < SEVERITIES.index(STRONGEST[level]):
        err(f"severity {severity} needs stronger evidence than {level!r} (it allows {STRONGEST[level]} at most)")


def _files(data_dir: Path) -> list[Path]:
    return sorted(p for p in data_dir.glob("*.yaml") if p.is_file())


def _parse(files: list[Path]) -> list[dict[str, Any]]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out: list[dict[str, Any]] = []
    for path in files:
        try:
            doc = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
        except yaml.YAMLError as e:
            raise KnowledgeError(f"{path}: not YAML: {e}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
            raise KnowledgeError(f"{path}: expected a mapping with an 'entries' list")
        for raw in doc["entries"]:
            if isinstance(raw, dict):
                raw = dict(raw)
                raw["_domain"] = path.stem
                raw["_file"] = path.name
                if "checked" in raw:
                    raw["checked"] = str(raw["checked"])
                # validated once, when the cache is built: a warm load reads the verdict
                raw["_problems"] = validate_entry({k: v for k, v in raw.items() if not k.startswith("_")}, path.name)
            out.append(raw)
    return out


def raw_entries(data_dir: Path = DATA_DIR, environ: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The raw entries of every domain file, from the JSON cache when the files are unchanged."""
    from sglwrap import diskcache

    files = _files(data_dir)
    stamps = diskcache.stamp([*files, Path(__file__)])  # this module validates what the cache holds
    name = diskcache.key(str(data_dir))
    cached: list[dict[str, Any]] | None = diskcache.load("compat", name, environ, stamps=stamps)
    if cached is not None:
        return cached
    entries = _parse(files)
    diskcache.store("compat", name, entries, environ, stamps=stamps)
    return entries


def read(data_dir: Path = DATA_DIR, environ: Mapping[str, str] | None = None) -> tuple[tuple[Entry, ...], list[str]]:
    """Every valid entry, and the schema problems (one line each) of those left out: a broken entry is left out so
    one bad line never stops a launch, and its problem is said instead."""
    out: list[Entry] = []
    problems: list[str] = []
    seen: set[str] = set()
    for raw in raw_entries(data_dir, environ if environ is not None else os.environ):
        where = raw.get("_file", "?") if isinstance(raw, dict) else "?"
        # _parse validated every mapping when the cache was built (the cache key includes this module)
        bad = list(raw["_problems"]) if isinstance(raw, dict) else [f"{where}: not a mapping"]
        if isinstance(raw, dict) and raw.get("id") in seen:
            bad.append(f"{where}: {raw.get('id')}: duplicate id")
        if bad:
            problems += bad
            continue
        seen.add(raw["id"])
        out.append(Entry(id=raw["id"], domain=raw["_domain"], title=raw["title"], applies=raw["applies"],
                         consequence=raw["consequence"].strip(), severity=raw["severity"], fix=raw["fix"].strip(),
                         sources=tuple(raw["sources"]), checked=raw["checked"],
                         downgrade=raw.get("downgrade") or {}, notes=str(raw.get("notes") or ""),
                         evidence=str(raw["evidence"]), evidence_ref=str(raw.get("evidence_ref") or "")))
    return tuple(out), problems


def load(data_dir: Path = DATA_DIR, environ: Mapping[str, str] | None = None, *,
         strict: bool = False) -> tuple[Entry, ...]:
    """Every valid entry. ``strict`` raises KnowledgeError listing all schema problems (the test uses it); otherwise
    a broken entry is left out (``read`` says which)."""
    entries, problems = read(data_dir, environ)
    if strict and problems:
        raise KnowledgeError("\n".join(problems))
    return entries


def by_id(entries: tuple[Entry, ...]) -> dict[str, Entry]:
    """Entries keyed by id."""
    return {e.id: e for e in entries}


def explain(entry: Entry) -> str:
    """The text ``sglwrap preflight --explain ID`` prints."""
    import textwrap

    lines = [f"{entry.id}  [{entry.domain}, {entry.severity}, evidence: {entry.evidence}]", f"  {entry.title}",
             "  applies when:"]
    for key, value in entry.applies.items():
        lines.append(f"    {key}: {json.dumps(value, default=str)}")
    lines.append("  what users see:")
    lines += ["    " + ln for ln in textwrap.wrap(entry.consequence, 110)]
    lines.append("  fix:")
    lines += ["    " + ln for ln in textwrap.wrap(entry.fix, 110)]
    if entry.downgrade:
        lines.append(f"  downgrade (SGLang's default path turned off): {json.dumps(dict(entry.downgrade))}")
    if entry.notes:
        lines += ["  notes:"] + ["    " + ln for ln in textwrap.wrap(entry.notes, 110)]
    lines.append("  sources:")
    lines += [f"    {s}" for s in entry.sources]
    if entry.evidence_ref:
        lines.append(f"  evidence: {entry.evidence_ref}")
    lines.append(f"  checked: {entry.checked}")
    return "\n".join(lines) + "\n"

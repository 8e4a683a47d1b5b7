"""Rehearsal verdicts by fingerprint, in the ``rehearse`` area of sglwrap's one cache (``sglwrap.diskcache``).

One document per fingerprint (``<digest>``) and, per launch argv, the last verdict (``last-<argv>``) so that a miss
can say what changed since it. Documents are private (mode 0600); one that is unreadable, of another fingerprint or
malformed is a miss, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sglwrap import diskcache
from sglwrap.rehearse.fingerprint import Fingerprint

AREA = "rehearse"


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where verdicts (and the rehearsals' logs, under ``logs/``) live."""
    return diskcache.location(AREA, "-", environ).parent


def _read(name: str, environ: Mapping[str, str] | None) -> dict[str, Any] | None:
    doc = diskcache.load(AREA, name, environ)
    return doc if isinstance(doc, dict) else None


def lookup(fp: Fingerprint, environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The recorded verdict of exactly this fingerprint, or None."""
    doc = _read(fp.digest, environ)
    if doc is None or doc.get("fingerprint") != fp.digest or doc.get("verdict") not in ("passed", "failed"):
        return None
    return doc


def last_for(fp: Fingerprint, environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The last verdict recorded for the same launch argv (any fingerprint), or None."""
    return _read(f"last-{fp.parts['argv']}", environ)


def store(fp: Fingerprint, report: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Path | None:
    """Record ``report`` (its ``verdict`` is passed or failed) under ``fp``; None when the cache is not writable."""
    doc = {"fingerprint": fp.digest, "parts": fp.parts, "verdict": report.get("verdict"), "report": dict(report)}
    path = diskcache.store(AREA, fp.digest, doc, environ, private=True)
    if path is not None:
        diskcache.store(AREA, f"last-{fp.parts['argv']}", doc, environ, private=True)
    return path

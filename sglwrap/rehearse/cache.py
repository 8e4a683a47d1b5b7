"""Rehearsal verdicts by fingerprint, under ``$XDG_CACHE_HOME/sglwrap/rehearse/`` (else ``~/.cache``).

One JSON file per fingerprint (``<digest>.json``) and, per launch argv, the last verdict (``last-<argv>.json``) so
that a miss can say what changed since it. Files are written atomically, mode 0600; a file that is unreadable, of
another fingerprint or malformed is a miss, never an error.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sglwrap.fsutil import atomic_write_text
from sglwrap.rehearse.fingerprint import Fingerprint


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where verdicts live."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "sglwrap" / "rehearse"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def lookup(fp: Fingerprint, environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The recorded verdict of exactly this fingerprint, or None."""
    doc = _read(cache_dir(environ) / f"{fp.digest}.json")
    if doc is None or doc.get("fingerprint") != fp.digest or doc.get("verdict") not in ("passed", "failed"):
        return None
    return doc


def last_for(fp: Fingerprint, environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The last verdict recorded for the same launch argv (any fingerprint), or None."""
    return _read(cache_dir(environ) / f"last-{fp.parts['argv']}.json")


def store(fp: Fingerprint, report: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Path | None:
    """Record ``report`` (its ``verdict`` is passed or failed) under ``fp``; None when the cache is not writable."""
    doc = {"fingerprint": fp.digest, "parts": fp.parts, "verdict": report.get("verdict"), "report": dict(report)}
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    where = cache_dir(environ)
    try:
        where.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = where / f"{fp.digest}.json"
        atomic_write_text(path, text, mode=0o600)
        atomic_write_text(where / f"last-{fp.parts['argv']}.json", text, mode=0o600)
    except OSError:
        return None
    return path

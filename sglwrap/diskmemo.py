"""Values derived from files, computed once: JSON under ``$XDG_CACHE_HOME/sglwrap/static/``, keyed by a kind and the
source files' paths, sizes and mtimes, so a warm run re-reads no package source and re-runs no tool."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sglwrap.fsutil import atomic_write_text, cache_dir


def disk_memo(kind: str, paths: Iterable[Path], compute: Callable[[], Any]) -> Any:
    """``compute()`` (JSON-able), cached under the kind and the paths' names, sizes and mtimes."""
    stamp = []
    for p in paths:
        try:
            st = p.stat()
        except OSError:
            continue
        stamp.append([str(p), st.st_size, st.st_mtime_ns])
    key = hashlib.sha256(json.dumps([kind, stamp]).encode()).hexdigest()[:24]
    path = cache_dir() / "static" / f"{kind}-{key}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        pass
    value = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(value), mode=0o644)
    except OSError:
        pass  # a read-only cache only costs time
    return value

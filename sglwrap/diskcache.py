"""sglwrap's one on-disk cache: JSON documents under ``$XDG_CACHE_HOME/sglwrap/<area>/<key>.json``.

Every reading sglwrap keeps between runs goes through here: one key function, one stamp of source files taken when
they are read, one atomic writer and one bound per area. A document carries the stamps it was computed under; a
document of another format, with other stamps or unreadable, is a miss, never an error. A cache that cannot be
written (read-only home, full disk) only costs time.

Bounded: each area holds at most ``LIMITS[area]`` documents. A store past the bound removes the least recently used
(by mtime; a hit older than ``_TOUCH_AFTER_S`` refreshes its own mtime, so the fast path writes nothing).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from sglwrap.fsutil import atomic_write_text, cache_dir

FORMAT = 1  # bump when the document wrapper changes: every older document becomes a miss
# Documents kept per area; what each area holds is said beside it.
LIMITS: dict[str, int] = {
    "compat": 4,  # the knowledge base parsed and validated, per version of its files (~400 kB each)
    "specs": 4,  # which versions the knowledge base's version specifiers contain, per packaging release
    "stack": 64,  # import-level stack probes and installed-package versions, per interpreter and site stamps
    "binaries": 1,  # architectures and NCCL versions read from .so files, one map keyed by file stamps
    "static": 512,  # values derived from package sources (transformers' model types, pins, nvcc)
    "sglang": 16,  # flag tables introspected from an installed SGLang, per release and interpreter
    "yaml": 256,  # YAML documents parsed once per text (profiles, corpus files)
    "selfcheck": 512,  # SGLang's own argument checks, per command line that can change their verdict
    "rehearse": 512,  # rehearsal verdicts per fingerprint, and the last one per launch argv
}
_TOUCH_AFTER_S = 3600.0
# What sglwrap 0.1 kept beside the areas (one knowledge-base parse per edit of it, ~400 kB each, never removed): swept
# when the knowledge base is next cached, which happens once after an upgrade.
_LEGACY = ("compat-*.json", "binaries.json")


def digest(data: bytes | str) -> str:
    """A stable 24-hex-digit digest of ``data`` (BLAKE2b: the builtin module ``hashlib`` wraps, without the ~3 ms
    of loading OpenSSL that ``import hashlib`` costs every run)."""
    try:
        from _blake2 import blake2b
    except ImportError:  # an interpreter built without it
        from hashlib import blake2b
    return blake2b(data.encode("utf-8") if isinstance(data, str) else data, digest_size=12).hexdigest()


def key(*parts: object) -> str:
    """A short stable digest of ``parts`` (JSON-able; anything else by its ``str``)."""
    return digest(json.dumps(parts, sort_keys=True, default=str, separators=(",", ":")))


def stamp(paths: Iterable[Path | str], *, inode: bool = False) -> list[list[Any]]:
    """``[path, size, mtime_ns]`` (and the inode, for files an installer replaces rather than rewrites) of each file
    that exists, taken now (before the files are read)."""
    out: list[list[Any]] = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        out.append([str(p), st.st_size, st.st_mtime_ns, *([st.st_ino] if inode else [])])
    return out


def location(area: str, name: str, environ: Mapping[str, str] | None = None) -> Path:
    """The file of document ``name`` in ``area``."""
    if area not in LIMITS:
        raise ValueError(f"unknown cache area {area!r}")
    return cache_dir(environ) / area / f"{name}.json"


def load(area: str, name: str, environ: Mapping[str, str] | None = None, *,
         stamps: list[list[Any]] | None = None) -> Any | None:
    """The value kept under ``name`` (with exactly ``stamps`` when given), or None on a miss."""
    return _load(area, name, environ, stamps)[1]


def _load(area: str, name: str, environ: Mapping[str, str] | None,
          stamps: list[list[Any]] | None) -> tuple[bool, Any]:
    """(hit, value): a kept ``None`` is a hit."""
    path = location(area, name, environ)
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
            mtime = os.fstat(fh.fileno()).st_mtime
    except (OSError, ValueError):
        return False, None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or "value" not in doc:
        return False, None
    if stamps is not None and doc.get("stamps") != stamps:
        return False, None
    if time.time() - mtime > _TOUCH_AFTER_S:
        try:
            os.utime(path)
        except OSError:
            pass
    return True, doc["value"]


def store(area: str, name: str, value: Any, environ: Mapping[str, str] | None = None, *,
          stamps: list[list[Any]] | None = None, private: bool = False) -> Path | None:
    """Keep ``value`` (JSON-able) under ``name``; the path, or None when the cache is not writable. ``private``:
    mode 0600 in a 0700 directory (what may name a user's files or endpoints)."""
    path = location(area, name, environ)
    doc = {"format": FORMAT, "stamps": stamps, "value": value}
    try:
        text = json.dumps(doc, default=str)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700 if private else 0o755)
        atomic_write_text(path, text, mode=0o600 if private else 0o644)
    except (OSError, TypeError, ValueError):
        return None
    _prune(path.parent, LIMITS[area])
    if area == "compat":
        for pattern in _LEGACY:
            for old in path.parent.parent.glob(pattern):
                _unlink(str(old))
    return path


def memo(area: str, name: str, compute: Callable[[], Any], environ: Mapping[str, str] | None = None, *,
         stamps: list[list[Any]] | None = None) -> Any:
    """The kept value of ``name``, else ``compute()`` kept and returned."""
    hit, kept = _load(area, name, environ, stamps)
    if hit:
        return kept
    value = compute()
    store(area, name, value, environ, stamps=stamps)
    return value


def _prune(directory: Path, limit: int) -> None:
    """Remove the least recently used documents of ``directory`` beyond ``limit``, and temp files a crashed writer
    left behind (older than ``_TOUCH_AFTER_S``)."""
    try:
        entries = [e for e in os.scandir(directory) if e.is_file()]
    except OSError:
        return
    aged: list[tuple[int, str]] = []
    stale = time.time() - _TOUCH_AFTER_S
    for e in entries:
        try:
            mtime_ns = e.stat().st_mtime_ns
        except OSError:
            continue
        if e.name.endswith(".json"):
            aged.append((mtime_ns, e.path))
        elif e.name.startswith(".") and e.name.endswith(".tmp") and mtime_ns / 1e9 < stale:
            _unlink(e.path)
    aged.sort()
    for _mtime, path in aged[:max(0, len(aged) - limit)]:
        _unlink(path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass  # another process pruned it first


def from_files(kind: str, paths: Iterable[Path], compute: Callable[[], Any],
               environ: Mapping[str, str] | None = None) -> Any:
    """``compute()`` (JSON-able), derived from the files ``paths`` and kept in the ``static`` area under their
    stamps (taken before ``compute`` reads them): a warm run re-reads no package source and re-runs no tool."""
    files = list(paths)
    return memo("static", f"{kind}-{key([str(p) for p in files])}", compute, environ, stamps=stamp(files))

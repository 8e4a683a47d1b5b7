"""Installed distribution versions read from ``*.dist-info`` / ``*.egg-info`` names on a search path.

The fast path's stand-in for ``importlib.metadata.version``: the same answer for a name (the first distribution on
the path wins, names compared after PEP 503 normalisation), without importing ``importlib.metadata`` and its email
parser, which costs a warm preflight about 20 ms.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

_SEP = re.compile(r"[-_.]+")


def canonical_name(name: str) -> str:
    """PEP 503 normalised distribution name (what ``packaging.utils.canonicalize_name`` returns)."""
    return _SEP.sub("-", name).lower()


def _version_from_metadata(path: str) -> str | None:
    files = [os.path.join(path, "METADATA"), os.path.join(path, "PKG-INFO")] if os.path.isdir(path) else [path]
    for fname in files:
        try:
            with open(fname, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip() or None
                    if not line.strip():
                        break
        except OSError:
            continue
    return None


def _metadata_dirs(entry: str) -> dict[str, list[str]]:
    """canonical name -> the ``*.dist-info``/``*.egg-info`` names in one directory (sorted), listed once."""
    try:
        names = sorted(os.listdir(entry or "."))
    except OSError:
        names = []
    index: dict[str, list[str]] = {}
    for fname in names:
        stem, dot, suffix = fname.rpartition(".")
        if dot and suffix in ("dist-info", "egg-info"):
            index.setdefault(canonical_name(stem.partition("-")[0]), []).append(fname)
    return index


def installed_version(name: str, paths: Iterable[str]) -> str | None:
    """The version of distribution ``name`` first found on ``paths`` (like ``importlib.metadata.version``), or None.
    Each directory is listed once per call; callers asking for many names should use :func:`installed_versions`."""
    return installed_versions([name], paths).get(name)


def installed_versions(names: Iterable[str], paths: Iterable[str]) -> dict[str, str]:
    """``installed_version`` for several names, listing each directory of ``paths`` once; missing names are left out."""
    indexes = [(entry, _metadata_dirs(entry)) for entry in paths]
    out: dict[str, str] = {}
    for name in names:
        found = _first_version(canonical_name(name), indexes)
        if found is not None:
            out[name] = found
    return out


def _first_version(want: str, indexes: list[tuple[str, dict[str, list[str]]]]) -> str | None:
    for entry, index in indexes:
        for fname in index.get(want, ()):
            rest = fname.rpartition(".")[0].partition("-")[2]
            meta = os.path.join(entry or ".", fname)
            version = _version_from_metadata(meta)
            if version is None and rest:
                version = rest.split("-", 1)[0]
            if version:
                return version
    return None


def installed_origins(names: Iterable[str], paths: Iterable[str]) -> dict[str, str]:
    """Where each installed distribution of ``names`` came from, read from its PEP 610 ``direct_url.json``: "index"
    (no such file: a package index wheel), "local" (built from a directory), "vcs" (built from a repository) or
    "file" (a wheel or archive by path or URL: nobody can tell a copied index wheel from a custom build)."""
    import json

    indexes = [(entry, _metadata_dirs(entry)) for entry in paths]
    out: dict[str, str] = {}
    for name in names:
        want = canonical_name(name)
        found = next(((entry, f) for entry, index in indexes for f in index.get(want, ())
                      if f.endswith(".dist-info")), None)
        if found is None:
            continue
        try:
            with open(os.path.join(found[0] or ".", found[1], "direct_url.json"), encoding="utf-8") as f:
                doc = json.load(f)
        except FileNotFoundError:
            out[name] = "index"
            continue
        except (OSError, ValueError):
            continue
        out[name] = ("local" if isinstance(doc, dict) and "dir_info" in doc else
                     "vcs" if isinstance(doc, dict) and "vcs_info" in doc else "file")
    return out

"""The local Hugging Face Hub cache, read as files (no ``huggingface_hub`` import, no network, no environment writes).

Layout and variables as huggingface_hub 1.x reads them (``constants.py``, ``file_download.try_to_load_from_cache``):
``$HF_HUB_CACHE``, else ``$HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``,
else ``~/.cache/huggingface/hub``; a repo lives in ``models--{org}--{name}``, ``refs/main`` names the commit, the
files sit in ``snapshots/{commit}/``. Importing huggingface_hub instead costs ~150 ms (httpx, rich) on every run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def hub_cache_dir(environ: Mapping[str, str]) -> Path:
    """The Hub cache directory the environment ``environ`` selects, as huggingface_hub would resolve it."""
    explicit = environ.get("HF_HUB_CACHE") or environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(os.path.expandvars(explicit)).expanduser()
    home = environ.get("HF_HOME")
    if not home:
        xdg = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        home = os.path.join(xdg, "huggingface")
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def cached_file(repo_id: str, filename: str, environ: Mapping[str, str] | None = None,
                revision: str = "main") -> Path | None:
    """``filename`` of model repo ``repo_id`` at ``revision`` in the local cache; None when not cached there."""
    if repo_id.count("/") != 1 or not all(repo_id.split("/")) or ".." in repo_id:
        return None
    repo = hub_cache_dir(os.environ if environ is None else environ) / ("models--" + repo_id.replace("/", "--"))
    try:
        ref = (repo / "refs" / revision).read_text().strip()
    except (OSError, UnicodeDecodeError):
        ref = revision
    if not ref or "/" in ref or ref.startswith("."):
        return None
    hit = repo / "snapshots" / ref / filename
    return hit if hit.is_file() else None

"""Which built-in config (``sglwrap/data/models/<Name>/config.json``) a ``--model-path`` names.

People type a model many ways: ``Qwen/Qwen2.5-72B-Instruct``, ``qwen2.5-72b-instruct``, a local directory
named like the repository (``/models/Qwen2.5-72B-Instruct/``), or a Hugging Face cache path
(``.../models--Qwen--Qwen2.5-72B-Instruct/snapshots/<hash>``). The lookup, in order:

1. the repository name, case-insensitively, equal to a folder name;
2. both sides reduced to a *key*: ``meta-`` dropped in front, and the dash-separated words that do not change
   the geometry (``instruct``, ``chat``, ``it``, ``hf``, ``base``, ``thinking``) dropped anywhere
   (``Mistral-7B-Instruct-v0.3`` -> ``mistral-7b-v0.3``, ``gemma-2-9b-it`` -> ``gemma-2-9b``);
3. the key in ``aliases.json`` (models bundled under another name because their geometry is the same:
   ``DeepSeek-R1`` -> ``DeepSeek-V3``, ``Llama-3.3-70B`` -> ``Llama-3.1-70B``);
4. the key without a four-digit release tag (``Qwen3-30B-A3B-Instruct-2507``, ``DeepSeek-R1-0528``):
   a re-release with the same geometry whose context may be longer than the bundled file says.

Names listed under ``"different"`` in ``aliases.json`` (``Kimi-K2-Thinking``: an INT4 release the word rule would
send to the fp8 ``Kimi-K2-Instruct``) match nothing but a folder of their own name.

A quantisation suffix (``-FP8``, ``-AWQ``) is never dropped: the weights would be sized as the wrong dtype.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

CATALOGUE_DIR = Path(__file__).resolve().parent.parent / "data" / "models"
ALIASES_PATH = CATALOGUE_DIR / "aliases.json"
_DROPPED_WORDS = frozenset({"instruct", "chat", "it", "hf", "base", "thinking"})
_RELEASE_TAG = re.compile(r"-\d{4}(?=-|$)")
_HF_CACHE_DIR = re.compile(r"^models--[^-].*?--(?P<name>.+)$")


def catalogue_names() -> list[str]:
    """Names of the built-in configs (``sglwrap/data/models/<Name>/config.json``)."""
    return list(_catalogue_names())


@cache
def _catalogue_names() -> tuple[str, ...]:
    # package data: listed once per process (it changes only with sglwrap)
    return tuple(sorted(p.parent.name for p in CATALOGUE_DIR.glob("*/config.json")))


def repo_name(model_path: str) -> str:
    """The repository part of ``model_path``: the last path component, or the name inside an HF cache path."""
    parts = [p for p in model_path.replace("\\", "/").split("/") if p]
    for part in parts:
        m = _HF_CACHE_DIR.match(part)
        if m:
            return m.group("name")
    return parts[-1] if parts else model_path


def key(name: str) -> str:
    """The comparison key of a model name (see the module docstring, step 2)."""
    k = name.lower().removeprefix("meta-")
    return "-".join(w for w in k.split("-") if w not in _DROPPED_WORDS)


@cache
def _aliases_file() -> dict[str, dict[str, object]]:
    try:
        raw = json.loads(ALIASES_PATH.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return raw if isinstance(raw, dict) else {}


def _aliases() -> dict[str, str]:
    """alias key -> folder name, from ``aliases.json`` (``{"aliases": {alias: {"to": folder, "why": ...}}}``)."""
    entries = _aliases_file().get("aliases", {})
    return {key(alias): str(entry["to"]) for alias, entry in entries.items() if isinstance(entry, dict)}


def _different() -> frozenset[str]:
    """Lower-cased names that must not fall back to a bundled file (``"different"`` in ``aliases.json``)."""
    return frozenset(name.lower() for name in _aliases_file().get("different", {}))


def catalogue_match(model_path: str) -> str | None:
    """The folder name ``model_path`` resolves to, or None (see the module docstring for the order)."""
    name = repo_name(model_path.strip())
    names = catalogue_names()
    for known in names:
        if known.lower() == name.lower():
            return known
    by_key: dict[str, str] = {}
    for known in names:
        by_key.setdefault(key(known), known)
    aliases = {k: v for k, v in _aliases().items() if v in names}
    if name.lower() in _different() or _RELEASE_TAG.sub("", name.lower()) in _different():
        return None
    want = key(name)
    for candidate in (want, _RELEASE_TAG.sub("", want)):
        if candidate in by_key:
            return by_key[candidate]
        if candidate in aliases:
            return aliases[candidate]
    return None


def catalogue_dir(model_path: str) -> Path | None:
    """The built-in config directory ``model_path`` names, or None."""
    hit = catalogue_match(model_path)
    return None if hit is None else CATALOGUE_DIR / hit

"""The one version parser of sglwrap: ``packaging.version`` for every package and release it reasons about.

Feature gates compare *releases* (``0.5.23rc1`` and ``0.5.23.post2`` both have what ``0.5.23`` has: a release
candidate ships the code of its release); ordering of two exact versions uses the full PEP 440 order. Which SGLang
releases sglwrap knows, and the newest of them, is read from the bundled release data (``sglwrap/data/sglang/``),
never written in code.
"""

from __future__ import annotations

import os
import re
from functools import cache

from packaging.version import InvalidVersion, Version

__all__ = ["InvalidVersion", "Version", "at_least", "before", "known_releases", "newest_known", "parse", "release",
           "strict"]

_LEADING = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")
_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "sglang")


def parse(text: str | None) -> Version | None:
    """``text`` as a Version (``2.9.1+cu128``, ``0.5.23rc1``, ``v1.2``); the leading numbers of anything else
    (``570.124.06`` is fine, ``12.x`` reads as 12); None when there is no number at all."""
    if not text:
        return None
    raw = str(text).strip()
    try:
        return Version(raw[1:] if raw[:1] in "vV" else raw)
    except InvalidVersion:
        m = _LEADING.match(raw)
        return Version(m.group(1)) if m else None


def strict(text: str) -> Version:
    """``text`` as an exact PEP 440 version; InvalidVersion when it is not one (user input is checked with this)."""
    return Version(str(text).strip())


def release(text: str | None) -> tuple[int, ...] | None:
    """The release numbers of ``text`` (``0.5.23rc1`` → ``(0, 5, 23)``), or None."""
    v = parse(text)
    return None if v is None else v.release


def at_least(text: str | None, floor: str) -> bool:
    """Whether release ``text`` has what release ``floor`` introduced (pre/post/dev tags of a release count as it).
    Unknown versions are not at least anything."""
    r = release(text)
    f = release(floor)
    return r is not None and f is not None and _pad(r) >= _pad(f)


def before(text: str | None, floor: str) -> bool:
    """Whether a known release ``text`` predates release ``floor`` (unknown versions are before nothing)."""
    return release(text) is not None and not at_least(text, floor)


def _pad(t: tuple[int, ...]) -> tuple[int, ...]:
    return t + (0,) * (4 - len(t)) if len(t) < 4 else t


@cache
def known_releases() -> tuple[str, ...]:
    """The SGLang releases whose data ships with sglwrap (``sglwrap/data/sglang/sglang-*.json``), oldest first."""
    found: list[tuple[Version, str]] = []
    try:
        names = os.listdir(_DATA)
    except OSError:
        names = []
    for name in names:
        if name.startswith("sglang-") and name.endswith(".json"):
            text = name[len("sglang-"):-len(".json")]
            try:
                found.append((Version(text), text))
            except InvalidVersion:
                continue
    return tuple(t for _, t in sorted(found))


def newest_known() -> str:
    """The newest SGLang release sglwrap ships data for: what is planned for when no release is named."""
    known = known_releases()
    if not known:
        raise RuntimeError(f"no SGLang release data in {_DATA}")
    return known[-1]

"""The one version parser of sglwrap: ``packaging.version`` for every package and release it reasons about.

Feature gates compare *releases* (``0.5.23rc1`` and ``0.5.23.post2`` both have what ``0.5.23`` has: a release
candidate ships the code of its release); ordering of two exact versions uses the full PEP 440 order.
"""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version

_LEADING = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")


def parse(text: str | None) -> Version | None:
    """``text`` as a Version (``2.9.1+cu128``, ``0.5.23rc1``, ``v1.2``); the leading numbers of anything else
    (``570.124.06`` is fine, ``12.x`` reads as 12); None when there is no number at all."""
    if not text:
        return None
    raw = text.strip()
    try:
        return Version(raw[1:] if raw[:1] in "vV" else raw)
    except InvalidVersion:
        m = _LEADING.match(raw)
        return Version(m.group(1)) if m else None


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


def _pad(t: tuple[int, ...]) -> tuple[int, ...]:
    return t + (0,) * (4 - len(t)) if len(t) < 4 else t

"""What an SGLang release installs with it: ``sglwrap/data/sglang/pins.json``, generated from each release's own
``Requires-Dist`` by ``tools/gen_release_pins.py`` (``pip install "sglang[all]"`` on Linux x86_64).

Planning with ``--assume-stack sglang=X`` uses it for the packages the user did not name: an exact pin (``==0.6.3``)
of a plain ``pip install sglang`` gives their version, any other of its requirements says the package is there in a
version nobody knows; what only ``sglang[all]`` adds, and a package the release does not require at all, are unknown
(neither there nor absent).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from sglwrap import versions

PINS_FILE = Path(__file__).resolve().parent.parent / "data" / "sglang" / "pins.json"


@lru_cache(maxsize=1)
def _releases() -> dict[str, dict[str, dict[str, str]]]:
    try:
        doc = json.loads(PINS_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    releases = doc.get("releases")
    return releases if isinstance(releases, dict) else {}


def release_requirements(version: str) -> tuple[str, dict[str, dict[str, str]]] | None:
    """``(release read, {"base": {distribution: specifier}, "all": {...}})`` for the newest bundled release not
    newer than ``version`` (a post or pre release of a bundled one reads as it); None when no bundled release is that
    old. ``base`` is what ``pip install sglang`` installs, ``all`` what the ``all`` extra adds."""
    want = versions.parse(version)
    if want is None:
        return None
    best: tuple[versions.Version, str, dict[str, dict[str, str]]] | None = None
    for name, reqs in _releases().items():
        have = versions.parse(name)
        if have is None:
            continue
        # a release candidate ships its release's code (and pins): 0.5.3rc0 reads as 0.5.3
        same_release = want.is_prerelease and have.release == want.release and not have.is_postrelease
        if (have <= want or same_release) and (best is None or have > best[0]):
            best = (have, name, reqs)
    return None if best is None else (best[1], best[2])


def exact_pin(spec: str) -> str | None:
    """The version an ``==X`` specifier pins (not a wildcard), else None."""
    spec = spec.strip()
    if spec.startswith("==") and "," not in spec and "*" not in spec:
        return spec[2:].strip() or None
    return None

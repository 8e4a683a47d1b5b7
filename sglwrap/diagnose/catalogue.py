"""SGLang's own message catalogue (``sglwrap/data/diagnose/messages.json``, built by ``tools/gen_catalogue.py``).

Each template names the releases that print it; ``VersionRange`` intersects the releases of the messages a log
holds, so a log without a version line still says which SGLang releases could have written it.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Final

from sglwrap.record import Record


PATH: Final = Path(__file__).resolve().parents[1] / "data" / "diagnose" / "messages.json"
MAX_CHECKED: Final = 512  # fact lines per file compared with the catalogue (enough to pin the format)


class Message(Record):
    """One message template and the releases whose source prints it."""

    id: str
    template: str
    versions: tuple[str, ...]
    regex: re.Pattern[str]


def template_regex(template: str) -> re.Pattern[str]:
    """A regex matching the lines a template prints: ``{}`` any value, ``{a|b}`` one of the literals."""
    out: list[str] = []
    for lit, hole in re.findall(r"([^{]*)(\{[^{}]*\}|$)", template):
        out.append(re.escape(lit))
        if hole == "{}":
            out.append(r".*?")
        elif hole:
            out.append("(?:" + "|".join(re.escape(a) for a in hole[1:-1].split("|")) + ")")
    return re.compile("".join(out).replace(r"\ ", r"\s+"))


@cache
def releases() -> tuple[str, ...]:
    """The releases the catalogue was built from, oldest first."""
    return tuple(json.loads(PATH.read_text())["releases"])


@cache
def messages() -> tuple[Message, ...]:
    """Every template of the catalogue."""
    doc = json.loads(PATH.read_text())
    return tuple(Message(m["id"], m["template"], tuple(m["versions"]), template_regex(m["template"]))
                 for m in doc["messages"])


@cache
def by_id() -> dict[str, tuple[Message, ...]]:
    """Templates grouped by message id (the ``Event`` kind or error kind they belong to)."""
    out: dict[str, list[Message]] = {}
    for m in messages():
        out.setdefault(m.id, []).append(m)
    return {k: tuple(v) for k, v in out.items()}


class VersionRange:
    """Narrows the set of releases that could have written a log, one recognised message at a time."""

    def __init__(self) -> None:
        self.candidates: frozenset[str] | None = None
        self.checked = 0

    def feed(self, mid: str, text: str) -> None:
        """Intersect with the releases of the templates (of id ``mid``) that ``text`` matches."""
        if self.checked >= MAX_CHECKED:
            return
        templates = by_id().get(mid)
        if not templates:
            return
        self.checked += 1
        hit = [m for m in templates if m.regex.search(text)]
        if not hit:
            return
        found = frozenset(v for m in hit for v in m.versions)
        both = found if self.candidates is None else self.candidates & found
        if both:  # an empty intersection means two releases in one file: keep what was known
            self.candidates = both

    def span(self) -> tuple[str, str] | None:
        """(oldest, newest) release consistent with every message fed, or None when nothing matched."""
        if not self.candidates:
            return None
        order = [v for v in releases() if v in self.candidates]
        return (order[0], order[-1]) if order else None

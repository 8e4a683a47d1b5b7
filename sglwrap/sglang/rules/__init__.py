"""SGLang's launch-time defaults, one module per era of release ranges; ``ALL_RANGES`` is every range, oldest first.

A release needs only its own era's module (:func:`era_ranges`): a 0.5.x launch never imports the ~40 resolvers of
the older eras."""

from __future__ import annotations

from sglwrap.sglang.rules._base import Range

# Each era's first release and its module, oldest first; every range of an era starts at or after the era's first
# release and before the next era's (tests/test_sglang_resolved.py checks this against the modules' RANGES).
ERAS: tuple[tuple[str, str], ...] = (("0.2.15", "legacy"), ("0.4.7.post1", "bucket_reserve"), ("0.5.3", "terms"))
OLDEST = ERAS[0][0]


def era_ranges(era: str) -> tuple[Range, ...]:
    """The ranges of one era (a module name of :data:`ERAS`), oldest first; imports only that era's module."""
    if era == "legacy":
        from sglwrap.sglang.rules import legacy

        return legacy.RANGES
    if era == "bucket_reserve":
        from sglwrap.sglang.rules import bucket_reserve

        return bucket_reserve.RANGES
    if era == "terms":
        from sglwrap.sglang.rules import terms

        return terms.RANGES
    raise ValueError(f"no era {era!r}; expected one of {', '.join(m for _, m in ERAS)}")


def __getattr__(name: str) -> tuple[Range, ...]:
    if name == "ALL_RANGES":  # every era's ranges, oldest first (imports every era)
        return tuple(r for _, era in ERAS for r in era_ranges(era))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ALL_RANGES", "ERAS", "OLDEST", "Range", "era_ranges"]

"""The matcher table of ``sglwrap.compat.match``: every condition the schema allows has exactly one matcher, a
condition no matcher knows fails loudly, and the Match's words come in the table's order, not the entry's."""

from __future__ import annotations

import pytest

from sglwrap.compat import match
from sglwrap.compat.kb import APPLIES_KEYS, Entry, validate_entry
from sglwrap.preflight import checks_compat
from sglwrap.preflight.model import Context, Status
from tests.compat_helpers import plan


def _entry(applies: dict[str, object]) -> Entry:
    return Entry(id="table-order", domain="x", title="t", applies=applies, consequence="c", severity="warn",
                 fix="f", sources=("https://example.org",), checked="2026-12-06", evidence="source",
                 evidence_ref="x.py:1")


def test_every_condition_the_schema_allows_has_exactly_one_matcher() -> None:
    keys = [key for keys, _ in match.MATCHERS for key in keys]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    assert sorted(APPLIES_KEYS - set(keys)) == [], "a condition the schema allows that no matcher reads"
    assert sorted(set(keys) - APPLIES_KEYS) == [], "a matcher for a condition the schema refuses"


def test_a_condition_no_matcher_knows_is_refused_by_the_schema_and_by_matches() -> None:
    raw = {"id": "x", "title": "t", "applies": {"vendor": "amd"}, "consequence": "c", "severity": "warn", "fix": "f",
           "sources": ["https://x"], "checked": "2026-01-01", "evidence": "source", "evidence_ref": "x.py:1"}
    assert any("unknown condition 'vendor'" in p for p in validate_entry(raw, "t.yaml"))
    with pytest.raises(ValueError, match="no matcher for vendor"):
        match.matches(_entry({"vendor": "amd", "world_min": 1}), None)  # type: ignore[arg-type]


def test_the_words_follow_the_table_order_whatever_the_entry_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry naming its conditions backwards still says the GPU first, then the package, the argument, the
    variable and tp; the user's own flag and variable are its user flags, in the same order."""
    backwards = _entry({"world_min": 2, "env": {"NCCL_ALGO": "Ring"}, "args": {"attention_backend": "flashinfer"},
                        "packages": {"sglang": ">=0.5"}, "cc": ["8.9"]})
    seen: list[match.Match | None] = []

    def recording(entry: Entry, ctx: Context) -> match.Match | None:
        seen.append(match.matches(entry, ctx))
        return seen[-1]

    monkeypatch.setattr(checks_compat, "entries", lambda: (backwards,))
    monkeypatch.setattr(checks_compat, "matches", recording)
    argv = ("--model-path", "Qwen/Qwen2.5-7B-Instruct", "--tp-size", "2", "--attention-backend", "flashinfer")
    v = next(c for c in plan("2xRTX-4090", "0.5.9", argv, environ={"NCCL_ALGO": "Ring"}).checks if c.id == "compat")
    assert v.status is Status.WARN and "[table-order]" in v.reason
    m = seen[0]
    assert m is not None
    assert m.facts.endswith("(CC 8.9), sglang 0.5.9, attention_backend=flashinfer, NCCL_ALGO=Ring, tp=2"), m.facts
    assert m.user_flags == ("--attention-backend flashinfer", "NCCL_ALGO=Ring") and m.unknown == ()


def test_the_first_condition_that_does_not_hold_ends_the_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU condition that fails keeps a later, broken one from being read at all (as before the table)."""
    entry = _entry({"cc": ["7.0"], "version_differs": "not a pair"})
    assert match.matches(entry, plan_ctx(monkeypatch)) is None
    with pytest.raises(ValueError):
        match.matches(_entry({"cc": ["8.9"], "version_differs": "not a pair"}), plan_ctx(monkeypatch))


def plan_ctx(monkeypatch: pytest.MonkeyPatch) -> Context:
    """The Context the compat check sees for a 2xRTX-4090 launch on SGLang 0.5.9."""
    got: list[Context] = []
    monkeypatch.setattr(checks_compat, "entries", lambda: (_entry({"world_min": 1}),))
    monkeypatch.setattr(checks_compat, "matches", lambda entry, ctx: got.append(ctx))
    plan("2xRTX-4090", "0.5.9", ("--model-path", "Qwen/Qwen2.5-7B-Instruct", "--tp-size", "2"))
    return got[0]

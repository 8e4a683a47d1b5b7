"""The held-out figure: how the knowledge base scored each batch of public cases before any rule was written for it
(what users get on reports nobody here has read), next to how the same cases score now (tuned).

Old batches carry their recorded figures (``tests/corpus/preflight_held_out.yaml``); a case of a newer batch carries
``first_verdict: "<verdict> [ids]"`` written when it was collected. The figures go to the terminal summary.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

CORPUS = Path(__file__).parent / "corpus" / "preflight"
VERDICTS = ("ok", "warned", "downgraded", "blocked", "refused", "not-blocked")
FIGURES: dict[str, str] = {}


def parse_first_verdict(text: str) -> tuple[str, tuple[str, ...]]:
    """``"blocked [a, b]"`` -> ``("blocked", ("a", "b"))``; raises ValueError on anything else."""
    m = re.fullmatch(r"\s*([a-z-]+)\s*(?:\[([^\]]*)\])?\s*", text)
    if not m or m.group(1) not in VERDICTS:
        raise ValueError(f"first_verdict {text!r}: expected '<{'|'.join(VERDICTS)}> [ids]'")
    ids = tuple(i.strip() for i in (m.group(2) or "").split(",") if i.strip())
    return m.group(1), ids


def caught_before(doc: dict[str, Any]) -> bool:
    """A failure counts as caught before when its first verdict blocked, downgraded or refused it naming the entry
    the case expects (a block by another fact of the launch, or of a case no entry is expected for, is not a catch)."""
    verdict, ids = parse_first_verdict(str(doc["first_verdict"]))
    exp = doc.get("expect") or {}
    entry = exp.get("entry") if isinstance(exp, dict) else None
    return verdict in ("blocked", "downgraded", "refused") and entry is not None and entry in ids


def blocked_before(doc: dict[str, Any]) -> bool:
    verdict, _ = parse_first_verdict(str(doc["first_verdict"]))
    return verdict in ("blocked", "refused")


def _cases() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in sorted(CORPUS.glob("k*.yaml"))]


def held_out_figures() -> dict[str, tuple[int, int]]:
    """``{"failures": (caught before, n), "working": (blocked before, n)}`` over every held-out batch."""
    doc = yaml.safe_load((CORPUS.parent / "preflight_held_out.yaml").read_text())
    fc = sum(b["failures_caught"] for b in doc["recorded"])
    fn = sum(b["failures"] for b in doc["recorded"])
    wb = sum(b["working_blocked"] for b in doc["recorded"])
    wn = sum(b["working"] for b in doc["recorded"])
    for case in _cases():
        if "first_verdict" not in case:
            continue
        if case.get("kind") == "failure":
            fn += 1
            fc += caught_before(case)
        elif case.get("kind") == "working":
            wn += 1
            wb += blocked_before(case)
    return {"failures": (fc, fn), "working": (wb, wn)}


def test_every_first_verdict_is_readable_and_marks_a_held_out_case() -> None:
    for case in _cases():
        if "first_verdict" in case:
            parse_first_verdict(str(case["first_verdict"]))
            assert case.get("held_out") is True, f"{case['id']}: a case scored before the rules is held out"
    with pytest.raises(ValueError):
        parse_first_verdict("fine")
    assert parse_first_verdict("blocked [a, b]") == ("blocked", ("a", "b"))


def test_the_held_out_figure_is_counted_and_reported() -> None:
    """The held-out rate over all batches, next to the tuned rate of the whole corpus (terminal summary)."""
    fig = held_out_figures()
    (fc, fn), (wb, wn) = fig["failures"], fig["working"]
    assert 0 <= fc <= fn and 0 <= wb <= wn and fn >= 135
    cases = _cases()
    failures = [c for c in cases if c.get("kind") == "failure"]
    missed = sum(1 for c in failures if c.get("missed"))
    warned = sum(1 for c in failures if not c.get("missed") and (c.get("expect") or {}).get("verdict") == "warned")
    tuned = len(failures) - missed - warned
    working = [c for c in cases if c.get("kind") == "working"]
    FIGURES["held-out"] = (f"held-out (scored before any rule for them): {fc} of {fn} failures caught "
                           f"({100 * fc / fn:.0f}%), {wb} of {wn} working setups blocked ({100 * wb / max(wn, 1):.0f}%)")
    FIGURES["tuned"] = (f"tuned (the whole corpus now): {tuned} of {len(failures)} failures blocked or downgraded "
                        f"({100 * tuned / len(failures):.0f}%), {warned} more warned, {missed} missed; 0 of "
                        f"{len(working)} working setups blocked (held by test_preflight_corpus)")
    scored = [c for c in failures if "first_verdict" in c]
    now = sum(1 for c in scored if not c.get("missed"))
    if scored:
        FIGURES["held-out now"] = (f"the {len(scored)} held-out failures with a per-case first verdict: "
                                   f"{sum(map(caught_before, scored))} caught before, {now} caught now")
    assert len(working) >= len(failures) or pytest.fail(
        f"the working-setups corpus ({len(working)}) must be at least as large as the failure corpus "
        f"({len(failures)})")


def test_a_working_case_blocked_first_counts_against_the_held_out_figure() -> None:
    assert blocked_before({"first_verdict": "refused [sglang-flags]"})
    assert not blocked_before({"first_verdict": "ok [sglang-flags]"})
    assert caught_before({"first_verdict": "blocked [x, y]", "expect": {"entry": "y"}})
    assert not caught_before({"first_verdict": "blocked [x]", "expect": {"entry": "y"}})
    assert not caught_before({"first_verdict": "blocked [x]", "expect": {"verdict": "blocked-or-downgraded"}})

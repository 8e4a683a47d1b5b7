"""Real SGLang logs from public reports (tests/corpus/diagnose): every number of each truth block, read off the log
by hand, against diagnose's JSON; outcome, stage, and that no memory error is called "not a memory error".

The memory accountant's corpus (tests/corpus/memory, if present) is read too, for outcome and crash-freedom only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sglwrap.cli import main

ROOT = Path(__file__).resolve().parent / "corpus"
CASES = sorted((ROOT / "diagnose").glob("*.yaml"))
MEMORY_LOGS = sorted((ROOT / "memory").glob("*.log")) if (ROOT / "memory").is_dir() else []
TOP = ("max_total_num_tokens", "context_len", "max_running_requests", "profiled_kv_tokens",
       "requested_max_total_tokens", "mem_fraction_static", "launch_attempts")


def _doc(case: Path) -> dict:
    return yaml.safe_load(case.read_text())


def _diagnose(log: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    rc = main(["diagnose", "--json", str(log)])
    return rc, json.loads(capsys.readouterr().out)


def _rank(rep: dict, label: str) -> dict:
    found = [r for r in rep["ranks"] if r["label"] == label]
    assert found, f"no rank {label} in {[r['label'] for r in rep['ranks']]}"
    return found[0]


def test_corpus_cases_are_complete() -> None:
    assert len(CASES) >= 3
    for case in CASES:
        doc = _doc(case)
        assert case.with_suffix(".log").is_file(), case
        assert str(doc["source"]).startswith("https://github.com/"), case
        assert {"outcome", "stage", "cause_class"} <= doc["truth"].keys(), case


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_corpus_log_matches_its_truth(case: Path, capsys: pytest.CaptureFixture[str]) -> None:
    truth = _doc(case)["truth"]
    rc, rep = _diagnose(case.with_suffix(".log"), capsys)
    assert rep["outcome"] == truth["outcome"]
    assert rc == (0 if truth["outcome"] == "ok" else 1)
    assert rep["stage"] == truth["stage"]
    if truth["cause_class"] == "memory":
        assert "not a memory error" not in rep["cause"]
    for label, fields in (truth.get("ranks") or {}).items():
        rank = _rank(rep, str(label))
        for key, want in fields.items():
            if key == "draft":
                for dkey, dwant in want.items():
                    assert rank["draft"] is not None and rank["draft"][dkey] == pytest.approx(dwant), (label, dkey)
                continue
            got = rank[key]
            assert (got is None) if want is None else got == pytest.approx(want, abs=0.005), (label, key, got)
    for key, want in (truth.get("run") or {}).items():
        assert key in TOP, key
        assert rep[key] == (pytest.approx(want) if want is not None else None), key


@pytest.mark.parametrize("log", MEMORY_LOGS, ids=[p.stem for p in MEMORY_LOGS])
def test_memory_corpus_logs_are_read_without_error(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, rep = _diagnose(log, capsys)
    assert rep["outcome"] in {"ok", "oom", "error", "incomplete"} and rc in (0, 1)

"""The knowledge base under sglwrap/data/compat: every entry valid and sourced, the matcher's rules, --explain."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sglwrap.compat.kb import DATA_DIR, SEVERITIES, load, validate_entry
from sglwrap.compat.match import arch_covers, version_ok

REPO = Path(__file__).resolve().parent.parent


def _raw_entries() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(DATA_DIR.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for raw in doc["entries"]:
            out.append((path.name, raw))
    return out


RAW = _raw_entries()


def test_every_entry_passes_the_schema() -> None:
    entries = load(strict=True)  # raises with every problem listed
    assert len(entries) == len(RAW)
    assert len(entries) >= 80, f"only {len(entries)} entries"


@pytest.mark.parametrize("where,raw", RAW, ids=[r.get("id", "?") for _, r in RAW])
def test_entry_is_sourced_and_dated(where: str, raw: dict) -> None:
    assert validate_entry(raw, where) == []
    assert raw["sources"] and all(s.startswith("https://github.com/") or s.startswith("https://") for s in raw["sources"])
    assert raw["severity"] in SEVERITIES
    assert datetime.date.fromisoformat(str(raw["checked"])) <= datetime.date(2027, 1, 1)
    if raw["severity"] == "downgrade":
        assert raw.get("downgrade"), "a downgrade entry must say what it turns off"


def test_ids_are_unique_across_domains() -> None:
    ids = [raw["id"] for _, raw in RAW]
    assert len(ids) == len(set(ids))


def test_domains_cover_the_issue() -> None:
    domains = {p.stem for p in DATA_DIR.glob("*.yaml")}
    for want in ("kernels-arch", "nccl", "attention-backends", "quantization", "moe-a2a", "jit-toolchain",
                 "driver-floors", "sglang-auto-paths"):
        assert want in domains


@pytest.mark.parametrize("bad,why", [
    ({"id": "x"}, "title"),
    ({"id": "x", "title": "t", "applies": {"cc": ["9.0"]}, "consequence": "c", "severity": "fatal", "fix": "f",
      "sources": ["https://x"], "checked": "2026-01-01"}, "severity"),
    ({"id": "x", "title": "t", "applies": {"bogus": 1}, "consequence": "c", "severity": "warn", "fix": "f",
      "sources": ["https://x"], "checked": "2026-01-01"}, "unknown condition"),
    ({"id": "x", "title": "t", "applies": {"cc": ["9.0"]}, "consequence": "c", "severity": "warn", "fix": "f",
      "sources": ["http://x"], "checked": "2026-01-01"}, "https"),
    ({"id": "x", "title": "t", "applies": {"cc": ["9.0"]}, "consequence": "c", "severity": "downgrade", "fix": "f",
      "sources": ["https://x"], "checked": "2026-01-01"}, "downgrade action"),
    ({"id": "x", "title": "t", "applies": {"cc": ["9.0"]}, "consequence": "c", "severity": "warn", "fix": "f",
      "sources": ["https://x"], "checked": "yesterday"}, "date"),
])
def test_schema_refuses_broken_entries(bad: dict, why: str) -> None:
    problems = validate_entry(bad, "t.yaml")
    assert any(why in p for p in problems), problems


@pytest.mark.parametrize("version,spec,ok", [
    ("0.5.7", "==0.5.7", True), ("0.5.7.post1", "==0.5.7", False), ("0.5.23", ">=0.5.15", True),
    ("0.5.9", ">=0.5.2,<0.5.12", True), ("0.5.12", ">=0.5.2,<0.5.12", False), ("2.30.4", "==2.30.*", True),
    ("0.3.21+cu130", "!+cu130", False), ("0.3.21", "!+cu130", True), ("0.3.21+cu130", "+cu130", True),
    (None, "*", False), ("12.8", "<12.9", True), ("13.0", "<12.9", False),
])
def test_version_specs(version: str | None, spec: str, ok: bool) -> None:
    assert version_ok(version, spec) is ok


@pytest.mark.parametrize("cc,arches,ok", [
    ((12, 1), ["sm_120a"], False),          # arch-specific SASS runs on its own CC only (GB10 report)
    ((12, 1), ["sm_120"], True),            # plain SASS runs on a later minor of the same major
    ((12, 1), ["sm_121a"], True),
    ((12, 0), ["sm_100f"], False),
    ((10, 3), ["sm_100f"], True),           # family SASS: same major
    ((12, 0), ["sm_80", "compute_90"], True),  # PTX JIT-compiles forward
    ((8, 9), ["sm_90a", "sm_100a"], False),
])
def test_arch_coverage(cc: tuple[int, int], arches: list[str], ok: bool) -> None:
    assert arch_covers(cc, arches) is ok


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sglwrap", "preflight", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120, check=False)


def test_explain_prints_the_entry_with_its_sources() -> None:
    raw = next(r for _, r in RAW if r["id"] == "multimem-allgather-no-p2p")
    proc = _cli("--explain", "multimem-allgather-no-p2p")
    assert proc.returncode == 0, proc.stderr
    for src in raw["sources"]:
        assert src in proc.stdout
    assert raw["severity"] in proc.stdout


def test_explain_unknown_id_is_a_usage_error_with_a_suggestion() -> None:
    proc = _cli("--explain", "multimem-allgather-no-p2")
    assert proc.returncode == 64
    assert "multimem-allgather-no-p2p" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cache_is_reused_and_equal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sglwrap.compat.kb import raw_entries

    env = {"XDG_CACHE_HOME": str(tmp_path)}
    first = raw_entries(environ=env)
    cached = list((tmp_path / "sglwrap").glob("compat-*.json"))
    assert len(cached) == 1
    assert raw_entries(environ=env) == first == json.loads(cached[0].read_text())

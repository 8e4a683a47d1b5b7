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
    cached = list((tmp_path / "sglwrap" / "compat").glob("*.json"))
    assert len(cached) == 1
    assert raw_entries(environ=env) == first == json.loads(cached[0].read_text())["value"]


@pytest.mark.parametrize("applies,why", [
    ({"world_min": "2"}, "world_min must be an integer"),
    ({"world_min": 0}, "world_min must be an integer from 1"),
    ({"cc": ["12"]}, "is not a compute capability"),
    ({"interconnect": ["nvlinkk"]}, "interconnect takes"),
    ({"packages": {"sglang": ">=0.5.x"}}, "is not a PEP 440 clause"),
    ({"packages": {"torch": ""}}, "non-empty string"),
    ({"args": {"tp-size": 2}}, "is not an SGLang option dest"),
    ({"args": {"tp_size": {"atleast": 2}}}, "a comparison takes"),
    ({"p2p": "no"}, "p2p must be true or false"),
    ({"gpu_name": "H100("}, "not a regular expression"),
    ({"env": {"nccl_p2p_disable": "1"}}, "UPPER_CASE"),
])
def test_schema_refuses_bad_condition_values(applies: dict, why: str) -> None:
    raw = {"id": "x", "title": "t", "applies": applies, "consequence": "c", "severity": "warn", "fix": "f",
           "sources": ["https://example.org/x"], "checked": "2026-12-06", "evidence": "single"}
    problems = validate_entry(raw, "f.yaml")
    assert any(why in p for p in problems), problems


def _release_tables() -> dict[str, dict]:
    data = REPO / "sglwrap" / "data" / "sglang"
    return {p.name.removeprefix("sglang-").removesuffix(".json"): json.loads(p.read_text())
            for p in data.glob("sglang-*.json")}


def test_every_option_and_architecture_an_entry_names_exists_in_a_release_of_its_range() -> None:
    """args / not_args / not_user_args name dests, arch / not_arch name model classes, that at least one bundled
    release inside the entry's own sglang range has (an entry on an option no release of its range has never
    fires: a typo, or a range that ends too early)."""
    tables = _release_tables()
    bad: list[str] = []
    for where, raw in RAW:
        ap = raw["applies"]
        spec = (ap.get("packages") or {}).get("sglang", "*")
        releases = [t for v, t in tables.items() if version_ok(v, spec)] or list(tables.values())
        dests = {f["dest"] for t in releases for f in t["flags"]} | set().union(
            *(t.get("server_args_defaults") or {} for t in releases))
        archs = set().union(*(t.get("architectures") or [] for t in releases))
        for key in ("args", "not_args", "not_user_args"):
            bad += [f"{where}: {raw['id']}: {key}.{d}" for d in ap.get(key) or {} if d not in dests]
        for key in ("arch", "not_arch"):  # config.json may spell a class the registry maps: one must be real
            names = ap[key] if isinstance(ap.get(key), list) else [ap[key]] if key in ap else []
            if names and not any(a in archs for a in names):
                bad.append(f"{where}: {raw['id']}: {key} {names}")
    assert not bad, "names no release of the entry's range has:\n" + "\n".join(bad)


def test_every_entry_carries_evidence_and_a_block_rests_on_source_or_maintainer() -> None:
    """The issue's rule: block only on what SGLang's own code or a maintainer confirms."""
    missing = [raw["id"] for _, raw in RAW if raw.get("evidence") not in ("source", "maintainer", "reports", "single")]
    assert not missing, f"{len(missing)} entries without evidence: {', '.join(missing[:20])}"
    for _, raw in RAW:
        if raw["severity"] == "block":
            assert raw["evidence"] in ("source", "maintainer") and raw.get("evidence_ref"), raw["id"]
        if raw["evidence"] == "single":
            assert raw["severity"] == "warn", raw["id"]

"""sglwrap's one on-disk cache: stamps taken when read, a bound per area, misses never errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglwrap import diskcache

REPO = Path(__file__).resolve().parents[1]


def _env(tmp_path: Path) -> dict[str, str]:
    return {"XDG_CACHE_HOME": str(tmp_path)}


def test_a_value_comes_back_only_under_the_stamps_it_was_kept_with(tmp_path: Path) -> None:
    src = tmp_path / "source.txt"
    src.write_text("one")
    stamps = diskcache.stamp([src, tmp_path / "absent"])
    assert [s[0] for s in stamps] == [str(src)]  # a missing file has no stamp
    diskcache.store("static", "k", {"a": [1, 2]}, _env(tmp_path), stamps=stamps)
    assert diskcache.load("static", "k", _env(tmp_path), stamps=stamps) == {"a": [1, 2]}
    src.write_text("two, longer")  # the source changed: its size and mtime move
    assert diskcache.load("static", "k", _env(tmp_path), stamps=diskcache.stamp([src])) is None


def test_from_files_recomputes_when_a_source_changes_and_keeps_a_none(tmp_path: Path) -> None:
    src = tmp_path / "pkg.py"
    src.write_text("x = 1")
    calls: list[str] = []

    def compute() -> None:
        calls.append(src.read_text())

    env = _env(tmp_path)
    assert diskcache.from_files("kind", [src], compute, env) is None
    assert diskcache.from_files("kind", [src], compute, env) is None
    assert calls == ["x = 1"]  # a kept None is a hit
    src.write_text("x = 22")
    diskcache.from_files("kind", [src], compute, env)
    assert calls == ["x = 1", "x = 22"]


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"value": 1}', '{"format": 0, "value": 1}'])
def test_a_document_of_another_format_or_unreadable_is_a_miss(tmp_path: Path, text: str) -> None:
    path = diskcache.location("yaml", "doc", _env(tmp_path))
    path.parent.mkdir(parents=True)
    path.write_text(text)
    assert diskcache.load("yaml", "doc", _env(tmp_path)) is None
    assert diskcache.memo("yaml", "doc", lambda: "fresh", _env(tmp_path)) == "fresh"
    assert json.loads(path.read_text())["value"] == "fresh"


def test_each_area_is_bounded_and_drops_the_least_recently_used(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(diskcache.LIMITS, "selfcheck", 3)
    env = _env(tmp_path)
    for i in range(3):
        path = diskcache.store("selfcheck", f"k{i}", i, env)
        assert path is not None
        os.utime(path, ns=(i * 10**18, i * 10**18))  # k0 oldest
    # a hit on k0, older than the touch interval, makes it the most recently used
    assert diskcache.load("selfcheck", "k0", env) == 0
    diskcache.store("selfcheck", "k3", 3, env)
    kept = sorted(p.stem for p in diskcache.location("selfcheck", "x", env).parent.glob("*.json"))
    assert kept == ["k0", "k2", "k3"]


def test_an_unwritable_cache_costs_time_only(tmp_path: Path) -> None:
    blocker = tmp_path / "sglwrap"
    blocker.write_text("a file where the cache directory should be")
    env = _env(tmp_path)
    assert diskcache.store("stack", "k", 1, env) is None
    assert diskcache.memo("stack", "k", lambda: 7, env) == 7


def test_private_documents_are_for_their_owner_only(tmp_path: Path) -> None:
    path = diskcache.store("rehearse", "v", {"argv": ["--api-key", "<redacted>"]}, _env(tmp_path), private=True)
    assert path is not None
    assert path.stat().st_mode & 0o077 == 0 and path.parent.stat().st_mode & 0o077 == 0


def test_an_unknown_area_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown cache area"):
        diskcache.location("everything", "k")


def test_every_kept_reading_lives_in_a_bounded_area(tmp_path: Path) -> None:
    """A warm preflight writes only under the areas LIMITS names: no second cache beside this one."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PYTHONPATH": str(REPO), "SGLWRAP_SELFCHECK": "0"}
    for port in ("30001", "30002"):
        subprocess.run([sys.executable, "-m", "sglwrap", "preflight", "--json", "--assume", "8xH200", "--",
                        "--model-path", "Qwen/Qwen2.5-7B-Instruct", "--port", port],
                       capture_output=True, text=True, env=env, check=False, timeout=300)
    top = {p.name for p in (tmp_path / "sglwrap").iterdir()}
    assert top and top <= set(diskcache.LIMITS), top
    for area in top:
        files = list((tmp_path / "sglwrap" / area).glob("*.json"))
        assert len(files) <= diskcache.LIMITS[area], area


def test_a_crashed_writers_temp_file_is_removed_once_stale(tmp_path: Path) -> None:
    env = _env(tmp_path)
    area = diskcache.location("yaml", "x", env).parent
    area.mkdir(parents=True)
    stale, fresh = area / ".k.json.abc.tmp", area / ".j.json.def.tmp"
    stale.write_text("half")
    fresh.write_text("being written")
    os.utime(stale, (0, 0))
    diskcache.store("yaml", "k", 1, env)
    assert not stale.exists() and fresh.exists()


def test_the_knowledge_base_caches_of_older_versions_are_swept_when_it_is_next_cached(tmp_path: Path) -> None:
    from sglwrap.compat.kb import raw_entries

    root = tmp_path / "sglwrap"
    root.mkdir()
    legacy = [root / "compat-0cf8a9482d69a57f8eb5.json", root / "binaries.json"]
    for f in legacy:
        f.write_text("{}")
    keep = root / "notes.txt"  # not ours to remove
    keep.write_text("x")
    raw_entries(environ=_env(tmp_path))
    assert not any(f.exists() for f in legacy) and keep.exists()
    assert len(list((root / "compat").glob("*.json"))) == 1

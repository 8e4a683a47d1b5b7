"""``tools/gen_catalogue.py``, the generator of ``sglwrap/data/diagnose/messages.json``: on a small release tree
written here (the real release sources are not in CI), and its ``--check --offline`` / ``--check --installed`` on
the bundled file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.gen_catalogue import GENERATED_BY, build, dump, installed_differences, offline_problems

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "gen_catalogue.py"
BUNDLED = REPO / "sglwrap" / "data" / "diagnose" / "messages.json"


def _tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=300)


def _release(src: Path, version: str, lines: str) -> Path:
    root = src / version / "sglang"
    (root / "srt").mkdir(parents=True)
    (root / "srt" / "model_runner.py").write_text(lines)
    (root / "srt" / "test").mkdir()
    (root / "srt" / "test" / "t.py").write_text('print("Load weight begin. in a test")\n')
    return root


def test_build_keeps_each_template_once_with_its_releases(tmp_path: Path) -> None:
    _release(tmp_path, "0.5.9", 'logger.info(f"Load weight begin. avail mem={m:.2f} GB")\n')
    _release(tmp_path, "0.5.10", 'logger.info(f"Load weight begin. avail mem={m:.2f} GB")\n'
                                 'logger.info("Load weight end. %s", x)\n')
    doc = build(tmp_path)
    assert doc["releases"] == ["0.5.9", "0.5.10"] and doc["generated_by"] == GENERATED_BY
    got = [(m["id"], m["template"], m["versions"], m["first"], m["last"]) for m in doc["messages"]]  # type: ignore[attr-defined]
    assert got == [("load_begin", "Load weight begin. avail mem={} GB", ["0.5.9", "0.5.10"], "0.5.9", "0.5.10"),
                   ("load_end", "Load weight end. {}", ["0.5.10"], "0.5.10", "0.5.10")]
    assert offline_problems(dump(doc)) == []


def test_the_bundled_file_passes_the_offline_check() -> None:
    """``--check --offline`` (CI runs it here)."""
    proc = _tool("--check", "--offline")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "well formed" in proc.stdout


def test_the_offline_check_catches_broken_entries() -> None:
    doc = json.loads(BUNDLED.read_text())
    doc["messages"][0]["last"] = "0.1.0"
    doc["messages"][1]["versions"] = list(reversed(doc["messages"][1]["versions"]))
    doc["messages"].append(dict(doc["messages"][2]))
    doc["generated_by"] = "python -m sglwrap.diagnose.gen_catalogue"
    problems = offline_problems(dump(doc))
    assert len(problems) == 4, problems
    assert "generated_by" in problems[0] and "messages[0]" in problems[1] and "messages[1]" in problems[2]
    assert "stored twice" in problems[3]
    assert offline_problems(json.dumps(json.loads(BUNDLED.read_text()))) == [
        "not the text this tool writes for its own content"]


def test_installed_differences_names_both_sides(tmp_path: Path) -> None:
    root = _release(tmp_path, "0.5.10", 'logger.info("Load weight end. %s", x)\n')
    doc = {"messages": [{"id": "load_begin", "template": "Load weight begin. avail mem={} GB", "versions": ["0.5.10"]},
                        {"id": "load_end", "template": "Load weight end. {}", "versions": ["0.5.9"]}]}
    diffs = installed_differences(doc, "0.5.10", root)
    assert len(diffs) == 2
    assert diffs[0].startswith("load_begin:") and "in the file for 0.5.10, not in its source" in diffs[0]
    assert diffs[1].startswith("load_end:") and "in the source of 0.5.10, not in the file" in diffs[1]


@pytest.mark.real_sglang
def test_the_bundled_file_agrees_with_the_installed_sglang() -> None:
    """``--check --installed`` (CI runs it here with SGLang 0.5.23): the templates the file gives that release are
    exactly those its source holds."""
    proc = _tool("--check", "--installed")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "agrees with the installed sglang" in proc.stdout


def test_the_full_check_without_sources_says_so(tmp_path: Path) -> None:
    proc = _tool("--check", str(tmp_path / "none"))
    assert proc.returncode == 2 and "no release sources" in proc.stderr

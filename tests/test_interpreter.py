"""SGLWRAP_PYTHON names another venv built from the same base Python: it is told apart from the running one by its
prefix and site-packages, not by the binary both share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglwrap.host.stack import site_paths
from sglwrap.interpreter import interpreter_id, is_running
from sglwrap.sglang import release
from tests.conftest import run_sglwrap

BASE = getattr(sys, "_base_executable", sys.executable)


def _venv(where: Path, sglang: str | None = None) -> Path:
    """A venv from the base Python that runs the tests (no pip); ``sglang``: a dist-info saying that version."""
    subprocess.run([BASE, "-m", "venv", "--without-pip", str(where)], check=True, capture_output=True, timeout=120)
    if sglang is not None:
        site = next(where.glob("lib/python3*/site-packages"))
        info = site / f"sglang-{sglang}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {sglang}\n")
    return where / "bin" / "python"


def test_two_venvs_from_one_base_share_the_binary_but_not_the_identity(tmp_path: Path) -> None:
    a = _venv(tmp_path / "a")
    b = _venv(tmp_path / "b")
    assert os.path.realpath(a) == os.path.realpath(b)  # the premise: one base binary
    assert interpreter_id(str(a)) != interpreter_id(str(b))
    assert interpreter_id(str(a)) == os.path.realpath(tmp_path / "a")
    assert not is_running(str(a))
    assert is_running(sys.executable)


def test_sglang_in_another_venv_is_found_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = _venv(tmp_path / "other", sglang="0.5.9")
    monkeypatch.setattr(release, "_INSTALLED", {})
    assert release.installed_version_text(str(other)) == "0.5.9"
    paths = site_paths(str(other))
    assert paths and all(p.startswith(str(tmp_path / "other")) for p in paths)


def test_launch_plans_for_what_the_target_venv_has_not_what_sglwrap_runs_in(tmp_path: Path) -> None:
    bare = _venv(tmp_path / "bare")
    env = dict(os.environ, SGLWRAP_PYTHON=str(bare))
    r = run_sglwrap("launch", "--dry-run", "--json", "--assume", "8xH200", "--", "--model-path", "m", env=env)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["sglang"]["installed"] is None, plan["sglang"]
    assert plan["sglang"]["source"] == "bundled-newest"

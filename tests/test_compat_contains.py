"""Version specifiers of the knowledge base: PEP 440's answers, and kept between runs so a warm preflight neither
imports ``packaging.specifiers`` nor builds a set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglwrap.compat import match

from .conftest import run_sglwrap


@pytest.mark.parametrize(("version", "spec", "holds"), [
    ("0.5.3rc0", "<0.5.3", False),  # PEP 440: an exclusive bound keeps out the bound's own pre-releases
    ("0.5.3rc0", ">=0.5.2", True),  # pre-releases count (the knowledge base means them too)
    ("2.9.0+cu130", "==2.9.0", True),  # a local tag is ignored unless the spec names one
    ("2.9.0+cu130", "2.9.0,+cu128", False),
    ("2.9.0+cu130", "!+cu130", False),
    ("0.5.4.post3", ">0.5.4", False),  # an exclusive bound keeps out the bound's own post releases
    ("0.5.10", ">=0.5.2,<0.5.12", True),
    ("2.30.1", "==2.30.*", True),
    ("not a version", ">=1", False),
    ("1.0", ">=>1", False),  # a broken specifier never holds
])
def test_version_ok_gives_pep_440s_answer_cold_and_kept(version: str, spec: str, holds: bool) -> None:
    match._CONTAINS.clear()
    assert match.version_ok(version, spec) is holds
    assert match.version_ok(version, spec) is holds  # the kept answer


def test_answers_are_kept_on_disk_and_answer_the_next_run(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    argv = ("preflight", "--json", "--assume", "8xH200", "--", "--model-path", "Llama-3.1-8B")
    first = run_sglwrap(*argv, "--port", "30001", env=env)
    assert first.returncode == 0, first.stderr[-500:]
    docs = list((tmp_path / "cache" / "sglwrap" / "specs").glob("*.json"))
    assert len(docs) == 1
    kept = json.loads(docs[0].read_text())["value"]
    assert kept and all(isinstance(v, bool) and "|" in k for k, v in kept.items())
    mtime = docs[0].stat().st_mtime_ns
    # a second run (another --port) answers from the kept document: packaging.specifiers is never imported
    code = ("import runpy, sys\nsys.argv = ['sglwrap', *sys.argv[1:]]\ntry:\n    runpy.run_module('sglwrap', "
            "run_name='__main__')\nexcept SystemExit:\n    pass\nsys.stderr.write('\\nSPEC=%s\\n' % "
            "('packaging.specifiers' in sys.modules))\n")
    second = subprocess.run([sys.executable, "-c", code, *argv, "--port", "30002"], capture_output=True, text=True,
                            env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}, timeout=120)
    assert "SPEC=False" in second.stderr, second.stderr[-500:]
    assert json.loads(second.stdout)["checks"] == json.loads(first.stdout)["checks"]
    assert docs[0].stat().st_mtime_ns == mtime  # nothing new asked: nothing written

"""What `launch` says is what it does: --dry-run --json always answers in JSON, a forced variable says it
overrides yours, a --notify plan says it supervises, and the exec'd server is one `pgrep -f 'sglang serve'` finds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglwrap.cli import main

from .conftest import REPO

MODEL = str(REPO / "sglwrap" / "data" / "models" / "Llama-3.1-8B")
STORY = "sglang=0.5.23,torch=2.14.1+cu130,flashinfer-python=0.7.2,driver=580.95.05"


def _json_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict, str]:
    rc = main(["launch", "--dry-run", "--json", *argv])
    out = capsys.readouterr()
    return rc, json.loads(out.out), out.err


def test_a_blocked_dry_run_still_prints_its_json_with_the_gates(capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc, err = _json_run(capsys, "--assume", "8xRTX-PRO-6000", "--assume-stack", STORY, "--",
                             "--model-path", MODEL, "--tp-size", "8", "--enable-symm-mem")
    assert rc == 78 and doc["exit_code"] == 78 and doc["verdict"] == "blocked"
    assert any(c["id"] == "symm-mem" and c["status"] == "block" for c in doc["gates"]["preflight"]["checks"])
    assert "symm-mem" in doc["error"] and "preflight blocked" in err


@pytest.mark.parametrize("argv, words", [
    (["--assume", "8xH100", "--", "--model-path", MODEL, "--tp-size", "abc"], "--tp-size"),
    (["--assume", "8xH100"], "no SGLang arguments"),
    (["--assume", "8xH1OO", "--", "--model-path", MODEL], "--assume"),
    (["--profile", "--", "--model-path", MODEL], "--profile"),
])
def test_a_usage_error_in_a_json_dry_run_is_json_too(argv: list[str], words: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc, _ = _json_run(capsys, *argv)
    assert rc == 64 and doc["exit_code"] == 64 and doc["verdict"] == "usage_error"
    assert words in doc["error"]


def test_a_forced_variable_says_it_overrides_yours(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_MIN_NCHANNELS", "8")
    forced = tmp_path / "forced.yaml"
    forced.write_text("description: x\nextends: fewchan\nenv:\n  NCCL_MIN_NCHANNELS: {value: 1, force: true}\n")
    rc, doc, _ = _json_run(capsys, "--assume", "8xH100", "--profile", str(forced), "--", "--model-path", MODEL)
    assert rc == 0 and doc["env"]["NCCL_MIN_NCHANNELS"] == "1"
    assert doc["env_forced"] == {"NCCL_MIN_NCHANNELS": {"yours": "8", "profile": "1"}}
    assert main(["launch", "--dry-run", "--assume", "8xH100", "--profile", str(forced), "--",
                 "--model-path", MODEL]) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if "NCCL_MIN_NCHANNELS" in ln and "8" in ln)
    assert "force" in line and "yours" in line


def test_a_notify_plan_says_supervise_not_exec(capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc, _ = _json_run(capsys, "--notify", "--assume", "8xH100", "--", "--model-path", MODEL)
    assert rc == 0 and doc["mode"] == "supervise"
    assert main(["launch", "--dry-run", "--notify", "--assume", "8xH100", "--", "--model-path", MODEL]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(ln.startswith("supervise ") for ln in lines)
    assert not any(ln.startswith("exec ") for ln in lines)


_FAKE_SCRIPT = """#!{python}
import json, os, sys
with open(os.environ["FAKE_OUT"], "w") as fh:
    json.dump({{"pid": os.getpid(), "cmdline": open("/proc/self/cmdline", "rb").read().decode().split("\\0")}}, fh)
"""


def test_the_execd_server_is_found_by_pgrep_as_sglang_serve_and_keeps_the_pid(tmp_path: Path) -> None:
    base = getattr(sys, "_base_executable", sys.executable)
    venv = tmp_path / "venv"
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True, timeout=120)
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "sglang-0.5.23.dist-info").mkdir()
    (site / "sglang-0.5.23.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\n"
                                                                "Version: 0.5.23\n")
    script = venv / "bin" / "sglang"  # the console script pip writes for sglang.cli.main:main
    script.write_text(_FAKE_SCRIPT.format(python=venv / "bin" / "python"))
    script.chmod(0o755)
    out = tmp_path / "out.json"
    env = dict(os.environ, SGLWRAP_PYTHON=str(venv / "bin" / "python"), FAKE_OUT=str(out),
               PYTHONPATH=str(REPO))
    env.pop("SGLWRAP_SERVER_MODULE", None)
    proc = subprocess.Popen([sys.executable, "-m", "sglwrap", "launch", "--force", "--assume-stack", "sglang=0.5.23",
                             "--", "--model-path", MODEL], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    seen = json.loads(out.read_text())
    assert seen["pid"] == proc.pid
    joined = " ".join(seen["cmdline"])
    assert "sglang serve" in joined and str(venv) in joined, joined

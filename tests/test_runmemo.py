"""The run memo: a preflight planned with --assume is replayed only while everything it read is unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglwrap import runmemo

REPO = Path(__file__).resolve().parents[1]


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sglwrap", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, check=False, timeout=120)


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SGLWRAP_", "NCCL_"))}
    e.update(XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(REPO), SGLWRAP_SELFCHECK="0",
             SGLWRAP_PROFILE_PATH=str(tmp_path / "profiles"))
    (tmp_path / "profiles").mkdir()
    return e


def _replayed(proc: subprocess.CompletedProcess[str]) -> bool:
    return bool(json.loads(proc.stdout)["timing"].get("memo", {}).get("replayed"))


def _until_replayed(args: list[str], env: dict[str, str]) -> list[subprocess.CompletedProcess[str]]:
    """Runs until one is a replay (cold runs fill caches and are not kept), at most five."""
    runs = [_run(args, env)]
    while not _replayed(runs[-1]) and len(runs) < 5:
        runs.append(_run(args, env))
    assert _replayed(runs[-1]), runs[-1].stderr[-500:]
    return runs


ARGS = ["preflight", "--json", "--assume", "8xH200", "--", "--tp", "4"]


def test_a_warm_run_is_replayed_with_the_same_report_and_exit_code(env: dict[str, str]) -> None:
    runs = _until_replayed(ARGS, env)
    runs.append(_run(ARGS, env))
    assert len({r.returncode for r in runs}) == 1 and _replayed(runs[-1])
    # the cold runs fill caches (not kept); a warm run is kept; the next identical run is a replay of it
    fresh, again = json.loads(runs[-3].stdout), json.loads(runs[-2].stdout)
    fresh.pop("timing"), again.pop("timing")
    assert fresh == again and runs[-3].stderr == runs[-2].stderr
    assert json.loads(runs[-2].stdout)["timing"]["memo"]["inputs_unchanged"] > 100


def test_a_changed_profile_file_or_variable_or_a_new_file_on_a_probed_path_is_not_replayed(
        env: dict[str, str], tmp_path: Path) -> None:
    prof = tmp_path / "profiles" / "mine.yaml"
    prof.write_text("description: first text\nenv: {}\n")
    args = ["preflight", "--json", "--profile", "mine", "--assume", "2xH200"]
    _until_replayed(args, env)
    prof.write_text("description: second text\nenv: {NCCL_DEBUG: WARN}\n")
    changed = _run(args, env)
    assert not _replayed(changed) and "NCCL_DEBUG" in changed.stdout
    assert not _replayed(_run(args, {**env, "NCCL_DEBUG": "INFO"}))
    # a profile of the same name appearing earlier on the search path (a path probed and found missing before)
    _until_replayed(args, env)
    first = tmp_path / "first"
    first.mkdir()
    env2 = {**env, "SGLWRAP_PROFILE_PATH": f"{first}:{tmp_path / 'profiles'}"}
    _until_replayed(args, env2)
    (first / "mine.yaml").write_text("description: shadowing text\nenv: {NCCL_BUFFSIZE: 4194304}\n")
    shadowed = _run(args, env2)
    assert not _replayed(shadowed) and "NCCL_BUFFSIZE" in shadowed.stdout


def test_usage_errors_live_runs_and_a_memo_turned_off_are_never_replayed(env: dict[str, str]) -> None:
    bad = ["preflight", "--json", "--assume", "8xH200", "--", "--tp-sise", "2"]
    runs = [_run(bad, env) for _ in range(3)]
    assert all(r.returncode == 64 and "did you mean --tp-size" in r.stderr for r in runs)
    assert not (Path(env["XDG_CACHE_HOME"]) / "sglwrap" / "runs").exists()
    assert not runmemo.memoizable(["preflight", "--json"])  # live facts: NVML, /proc, sockets
    assert not runmemo.memoizable(["preflight", "--explain", "x", "--assume", "1xH100"])
    off = {**env, "SGLWRAP_MEMO": "0"}
    assert not any(_replayed(_run(ARGS, off)) for _ in range(3))


def test_a_run_that_touched_anything_live_or_wrote_a_file_is_not_kept(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    argv = ["preflight", "--assume", "1xH100"]
    for event, args in [("subprocess.Popen", ("nvcc", ["nvcc"], None, None)), ("ctypes.dlopen", ("libnvidia-ml.so.1",)),
                        ("open", ("/proc/meminfo", "r", 0)), ("open", (str(tmp_path / "x"), "w", 0)),
                        ("socket.bind", (None, ("127.0.0.1", 30000)))]:
        rec = runmemo.Recorder(argv)
        rec.audit(event, args)
        rec.streams = (runmemo._Tee(sys.stdout), runmemo._Tee(sys.stderr))
        runmemo.finish(rec, 0)
        assert not (tmp_path / "sglwrap" / "runs").exists(), event
    rec = runmemo.Recorder(argv)
    rec.audit("open", (str(tmp_path / "read-me"), "r", 0))
    rec.streams = (runmemo._Tee(sys.stdout), runmemo._Tee(sys.stderr))
    runmemo.finish(rec, 0)
    kept = json.loads(next((tmp_path / "sglwrap" / "runs").glob("*.json")).read_text())
    assert [str(tmp_path / "read-me"), True, None] in kept["inputs"]  # a missing input is stamped as missing


def test_a_removed_working_directory_turns_the_memo_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert not runmemo.memoizable(["preflight", "--assume", "1xH100"])
    assert runmemo.replay(["preflight", "--assume", "1xH100"]) is None


def test_a_replay_into_a_closed_pipe_ends_like_a_fresh_run(env: dict[str, str]) -> None:
    """`sglwrap preflight --json ... | head -c0`: the reader is gone; a replay ends with 0 and no traceback, as the
    CLI does (BrokenPipeError)."""
    _until_replayed(ARGS, env)
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run([sys.executable, "-m", "sglwrap", *ARGS], stdout=w, stderr=subprocess.PIPE, text=True,
                              env=env, cwd=REPO, check=False, timeout=120)
    finally:
        os.close(w)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr

"""The injector: rendered sitecustomize reaches every spawned process, keeps the right values, never raises."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sglwrap.errors import ConfigError
from sglwrap.inject import planned_run_dir, render_sitecustomize, run_dir_for, write_sitecustomize
from sglwrap.profiles import load_profile

# A parent that behaves like SGLang's launcher: it sets some NCCL variables itself after start-up, switches
# multiprocessing to spawn, and its child spawns a grandchild. Each process records its environment.
SPAWN_TREE = textwrap.dedent("""
    import json, multiprocessing as mp, os, sys

    def record(tag, out):
        keys = [k for k in os.environ if k.startswith("NCCL_") or k == "CUDA_DEVICE_MAX_CONNECTIONS"]
        with open(os.path.join(out, tag + ".json"), "w") as fh:
            json.dump({"pid": os.getpid(), "env": {k: os.environ[k] for k in keys}}, fh)

    def grandchild(out):
        record("grandchild", out)

    def child(out):
        record("child", out)
        p = mp.get_context("spawn").Process(target=grandchild, args=(out,))
        p.start(); p.join()
        sys.exit(p.exitcode)

    if __name__ == "__main__":
        out = sys.argv[1]
        os.environ["NCCL_MIN_NCHANNELS"] = "4"          # the launcher's own choice, as SGLang does for some
        os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "8"  # variables in engine.py
        mp.set_start_method("spawn", force=True)
        record("parent", out)
        p = mp.Process(target=child, args=(out,))
        p.start(); p.join()
        sys.exit(p.exitcode)
""")


def _run_tree(site_dir: Path, tmp_path: Path, extra_env: dict[str, str] | None = None,
              extra_path: list[Path] | None = None) -> tuple[dict[str, dict], list[dict], str]:
    script = tmp_path / "tree.py"
    script.write_text(SPAWN_TREE)
    out = tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in [site_dir, *(extra_path or [])])
    env.update(extra_env or {})
    proc = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    lines = [json.loads(ln) for ln in proc.stderr.splitlines() if '"sglwrap": "worker-env"' in ln]
    assert all(ln.startswith('{"sglwrap": "worker-env", "pid": ') for ln in proc.stderr.splitlines()
               if "worker-env" in ln), "the contract's key order"
    return seen, lines, proc.stderr


def _site_for(tmp_path: Path, profile_body: str | None = None, name: str = "fewchan") -> Path:
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    if profile_body is None:
        prof = load_profile(name)
    else:
        path = tmp_path / f"{name}.yaml"
        path.write_text(profile_body)
        prof = load_profile(str(path))
    write_sitecustomize(site_dir, render_sitecustomize(prof))
    return site_dir


def test_fewchan_reaches_grandchildren_and_parents_own_values_are_kept(tmp_path: Path) -> None:
    seen, lines, _ = _run_tree(_site_for(tmp_path), tmp_path)
    assert set(seen) == {"parent", "child", "grandchild"}
    for tag in ("child", "grandchild"):
        env = seen[tag]["env"]
        assert env["NCCL_MAX_NCHANNELS"] == "2"
        assert env["NCCL_BUFFSIZE"] == "131072"
        assert env["NCCL_MIN_NCHANNELS"] == "4", "set-unless-set: the launcher's own value wins"
    # One worker-env line per process, naming the profile and its hash.
    pids = [ln["pid"] for ln in lines]
    assert len(pids) == len(set(pids))
    for tag in ("parent", "child", "grandchild"):
        assert seen[tag]["pid"] in pids
    fewchan = load_profile("fewchan")
    assert {ln["profile"] for ln in lines} == {"fewchan"}
    assert {ln["hash"] for ln in lines} == {fewchan.hash}
    by_pid = {ln["pid"]: ln for ln in lines}
    child_line = by_pid[seen["child"]["pid"]]
    assert child_line["ppid"] == seen["parent"]["pid"]
    assert child_line["role"] == "spawn-worker"
    assert child_line["env"]["NCCL_MIN_NCHANNELS"] == "4"
    assert child_line["applied"]["NCCL_MIN_NCHANNELS"].startswith("kept")


def test_forced_variable_overrides_the_launchers_value_in_every_worker(tmp_path: Path) -> None:
    body = ("name: forced\ndescription: force one channel\nenv:\n"
            "  NCCL_MIN_NCHANNELS: {value: 1, force: true}\n  NCCL_MAX_NCHANNELS: 2\n")
    seen, lines, _ = _run_tree(_site_for(tmp_path, body, "forced"), tmp_path)
    assert seen["child"]["env"]["NCCL_MIN_NCHANNELS"] == "1"
    assert seen["grandchild"]["env"]["NCCL_MIN_NCHANNELS"] == "1"
    by_pid = {ln["pid"]: ln for ln in lines}
    assert by_pid[seen["child"]["pid"]]["applied"]["NCCL_MIN_NCHANNELS"] == "forced(was 4)"


def test_quiet_mode_prints_no_worker_lines_but_still_applies(tmp_path: Path) -> None:
    seen, lines, stderr = _run_tree(_site_for(tmp_path), tmp_path, {"SGLWRAP_QUIET": "1"})
    assert lines == [] and "worker-env" not in stderr
    assert seen["grandchild"]["env"]["NCCL_BUFFSIZE"] == "131072"


def test_shadowed_sitecustomize_is_chain_imported(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['SHADOWED_RAN'] = str(os.getpid())\n")
    site_dir = _site_for(tmp_path)
    env = {**os.environ, "PYTHONPATH": f"{site_dir}{os.pathsep}{other}"}
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('SHADOWED_RAN'), "
                           "os.environ.get('NCCL_BUFFSIZE'), os.getpid())"],
                          capture_output=True, text=True, env=env, timeout=60)
    shadowed, buffsize, pid = proc.stdout.split()
    assert shadowed == pid and buffsize == "131072"


def test_a_failing_shadowed_sitecustomize_does_not_take_the_process_down(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("raise RuntimeError('broken site hook')\n")
    site_dir = _site_for(tmp_path)
    env = {**os.environ, "PYTHONPATH": f"{site_dir}{os.pathsep}{other}"}
    proc = subprocess.run([sys.executable, "-c", "print('alive')"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "alive"
    assert "broken site hook" in proc.stderr


def test_injector_never_raises_even_without_stderr(tmp_path: Path) -> None:
    site_dir = _site_for(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(site_dir)}
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.environ['NCCL_MAX_NCHANNELS'])"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, timeout=60,
                          text=True, close_fds=True, preexec_fn=lambda: os.close(2))
    assert proc.returncode == 0 and proc.stdout.strip() == "2"


def test_rendered_values_are_literals_not_code(tmp_path: Path) -> None:
    body = ("name: evil\ndescription: tries to inject code\nenv:\n"
            "  NCCL_SOCKET_IFNAME: \"eth0'); import os; os.environ['PWNED']=('1\"\n")
    site_dir = _site_for(tmp_path, body, "evil")
    text = (site_dir / "sitecustomize.py").read_text()
    compile(text, "sitecustomize.py", "exec")
    env = {**os.environ, "PYTHONPATH": str(site_dir), "SGLWRAP_QUIET": "1"}
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('PWNED'), "
                           "os.environ['NCCL_SOCKET_IFNAME'])"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.stdout.startswith("None eth0');")


def test_sitecustomize_file_is_written_atomically_and_private(tmp_path: Path) -> None:
    d = tmp_path / "rd"
    d.mkdir()
    write_sitecustomize(d, "x = 0\n")
    site = write_sitecustomize(d, "x = 1\n")
    assert stat.S_IMODE(site.stat().st_mode) == 0o600
    assert site.read_text() == "x = 1\n"
    assert [p.name for p in d.iterdir()] == ["sitecustomize.py"], "no temp file left behind"


def test_run_dir_under_xdg_runtime_is_private_and_per_launch(isolated_env: Path) -> None:
    d = run_dir_for("ab" * 32)
    assert d == Path(os.environ["XDG_RUNTIME_DIR"]) / "sglwrap" / f"{'ab' * 8}-{os.getpid()}"
    assert d == planned_run_dir("ab" * 32), "a dry run reports the directory a real launch would use"
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert stat.S_IMODE(d.parent.stat().st_mode) == 0o700


def test_run_dir_prefers_systemd_runtime_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rd = tmp_path / "systemd-run"
    rd.mkdir(mode=0o755)
    monkeypatch.setenv("RUNTIME_DIRECTORY", f"{rd}:{tmp_path / 'second'}")
    assert run_dir_for("cd" * 32) == rd
    assert stat.S_IMODE(rd.stat().st_mode) == 0o700


def test_run_dir_falls_back_to_a_fresh_private_tempdir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    a, b = run_dir_for("ef" * 32), run_dir_for("ef" * 32)
    assert a != b and stat.S_IMODE(a.stat().st_mode) == 0o700


def test_run_dir_refuses_a_symlink(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(link))
    with pytest.raises(ConfigError, match="is a symbolic link"):
        run_dir_for("00" * 32)


def test_run_dir_refuses_a_directory_writable_by_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(shared))
    with pytest.raises(ConfigError, match="writable by others"):
        run_dir_for("00" * 32)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to create a directory owned by another user")
def test_run_dir_refuses_a_directory_owned_by_someone_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(theirs))
    with pytest.raises(ConfigError, match="owned by uid 65534"):
        run_dir_for("00" * 32)

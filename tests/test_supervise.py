"""`launch --notify`: readiness from a real loopback /health, sd_notify on a real socket, real signals.

Most tests drive ``sglwrap.supervise.supervise`` in a child interpreter (the supervisor must be a process of
its own: it is a subreaper and it re-raises the child's signal on itself); two go through `sglwrap launch`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sglwrap.errors import ConfigError, UsageError
from sglwrap.sglang.cmdline import parse_cmdline
from sglwrap.sglang.flags import bundled_table
from sglwrap.supervise import Endpoint, endpoint_from_args, stop_grace_from_env

from .conftest import REPO, requires_sglang

FAKE = REPO / "tests" / "fixtures" / "fakeserver"

DRIVER = """
import json, sys
from sglwrap.supervise import Endpoint, SuperviseConfig, exit_like, supervise
cfg = json.loads(sys.argv[1])
config = SuperviseConfig(endpoint=Endpoint("127.0.0.1", cfg["port"]), poll_s=0.1, probe_timeout_s=1.0,
                         stop_grace_s=cfg.get("grace", 5.0), reap_grace_s=cfg.get("reap", 1.0))
argv = [sys.executable, "-m", "fake_health_server", "--port", str(cfg["port"])]
sys.exit(exit_like(supervise(argv, dict(__import__("os").environ), config)))
"""


class Collector:
    """A real unix datagram socket standing in for systemd's notify socket."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="sdn-", dir="/tmp")
        self.path = os.path.join(self.dir, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.1)
        self.messages: list[tuple[float, dict[str, str]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            self.messages.append((time.monotonic(), fields))

    def wait_for(self, key: str, value: str | None = None, timeout: float = 8.0) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for _t, m in list(self.messages):
                if key in m and (value is None or m[key] == value):
                    return m
            time.sleep(0.02)
        raise AssertionError(f"no {key}={value} within {timeout} s; got {[m for _t, m in self.messages]}")

    def statuses(self) -> list[str]:
        return [m["STATUS"] for _t, m in self.messages if "STATUS" in m]

    def count(self, key: str) -> int:
        return sum(1 for _t, m in self.messages if key in m)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(1)
        self.sock.close()
        os.unlink(self.path)
        os.rmdir(self.dir)


@pytest.fixture
def notify() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fake_env(notify: Collector | None, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{FAKE}"
    env["FAKE_HEALTH_LOG"] = str(tmp_path / "health.log")
    if notify is not None:
        env["NOTIFY_SOCKET"] = notify.path
    env.update(extra)
    return env


def start_driver(env: dict[str, str], **cfg: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(cfg)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def health_codes(tmp_path: Path) -> list[str]:
    p = tmp_path / "health.log"
    return p.read_text().split() if p.exists() else []


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# --- readiness and status -----------------------------------------------------------------------------------


def test_ready_waits_for_health_200_and_statuses_follow_the_log(notify: Collector, tmp_path: Path) -> None:
    ready_file = tmp_path / "ready"
    port = free_port()
    proc = start_driver(fake_env(notify, tmp_path, FAKE_READY_FILE=str(ready_file)), port=port)
    try:
        deadline = time.monotonic() + 8
        while health_codes(tmp_path).count("503") < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert health_codes(tmp_path).count("503") >= 3, "the supervisor never polled /health"
        assert notify.count("READY") == 0, "READY=1 while /health still answered 503"
        ready_file.touch()
        notify.wait_for("READY", "1")
        assert "200" in health_codes(tmp_path)
        statuses = notify.statuses()
        order = ["starting SGLang", "loading weights", "weights loaded", "KV cache pool: 400000 tokens",
                 "capturing", "warm-up done", "ready:"]
        idx = [next(i for i, s in enumerate(statuses) if s.startswith(o)) for o in order]
        assert idx == sorted(idx), statuses
        assert f"127.0.0.1:{port}/health answers 200" in statuses[idx[-1]]
        loading = [m for _t, m in notify.messages if m.get("STATUS", "").startswith("loading weights")]
        assert loading and int(loading[0]["EXTEND_TIMEOUT_USEC"]) >= 60 * 10**6, "progress extends the start timeout"
        assert not any("EXTEND_TIMEOUT_USEC" in m for _t, m in notify.messages if "READY" in m)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=8)
    finally:
        proc.kill()
    first = json.loads(out.splitlines()[0])
    assert first["notify_socket"] is None, "NOTIFY_SOCKET must not leak to SGLang"
    assert "Load weight begin" in err and "fired up" in err, "the child's log must be teed through"
    assert proc.returncode == 0


def test_sigterm_reaches_the_child_and_its_exit_code_comes_back(notify: Collector, tmp_path: Path) -> None:
    proc = start_driver(fake_env(notify, tmp_path, FAKE_TERM_CODE="23"), port=free_port())
    try:
        notify.wait_for("READY", "1")
        proc.send_signal(signal.SIGTERM)
        out, _err = proc.communicate(timeout=8)
    finally:
        proc.kill()
    assert proc.returncode == 23
    assert "got-signal SIGTERM" in out
    stopping = notify.wait_for("STOPPING", "1")
    assert "SIGTERM forwarded as SIGTERM" in stopping["STATUS"]


@pytest.mark.parametrize(("sent", "received"), [
    pytest.param(signal.SIGINT, "SIGINT", id="sigint-as-is"),
    pytest.param(signal.SIGHUP, "SIGTERM", id="sighup-drains"),
])
def test_stop_signals_are_forwarded_as_sglang_expects(tmp_path: Path, sent: int, received: str) -> None:
    port = free_port()
    proc = start_driver(fake_env(None, tmp_path), port=port)
    try:
        deadline = time.monotonic() + 8
        while "200" not in health_codes(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(sent)
        out, _err = proc.communicate(timeout=8)
    finally:
        proc.kill()
    assert f"got-signal {received}" in out
    assert proc.returncode == 0


def test_child_killed_by_a_signal_is_reported_as_that_signal(tmp_path: Path) -> None:
    proc = start_driver(fake_env(None, tmp_path, FAKE_MODE="ignore"), port=free_port())
    try:
        pid = json.loads(proc.stdout.readline())["pid"]  # type: ignore[union-attr]
        os.kill(pid, signal.SIGKILL)  # an OOM kill, say
        proc.communicate(timeout=8)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL


# --- no survivors ---------------------------------------------------------------------------------------------


def test_child_ignoring_sigterm_is_killed_after_the_grace_with_no_survivors(notify: Collector,
                                                                            tmp_path: Path) -> None:
    pidfile = tmp_path / "pids.json"
    proc = start_driver(fake_env(notify, tmp_path, FAKE_MODE="ignore", FAKE_GRANDCHILDREN="1",
                                 FAKE_PIDFILE=str(pidfile)), port=free_port(), grace=1.0)
    try:
        notify.wait_for("READY", "1")
        pids = json.loads(pidfile.read_text())
        assert pids["pgid"] == pids["server"], "the child must lead its own session/process group"
        assert pids["pgid"] != os.getpgrp()
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=8)
        elapsed = time.monotonic() - t0
    finally:
        proc.kill()
    assert 0.9 <= elapsed < 6, f"the grace was 1 s, stop took {elapsed:.1f} s"
    assert proc.returncode == -signal.SIGKILL, "the child died by SIGKILL, so the supervisor does too"
    with pytest.raises(ProcessLookupError):
        os.killpg(pids["pgid"], 0)
    for pid in [pids["server"], *pids["grandchildren"]]:
        assert gone(pid), f"pid {pid} survived"
    assert any("grace of 1 s over" in s for s in notify.statuses())


def test_leftovers_are_killed_when_the_child_exits_on_its_own(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids.json"
    proc = start_driver(fake_env(None, tmp_path, FAKE_MODE="exit", FAKE_EXIT_CODE="3", FAKE_GRANDCHILDREN="1",
                                 FAKE_PIDFILE=str(pidfile)), port=free_port(), reap=0.5)
    try:
        proc.communicate(timeout=8)
    finally:
        proc.kill()
    assert proc.returncode == 3
    pids = json.loads(pidfile.read_text())
    for pid in pids["grandchildren"]:
        assert gone(pid), f"grandchild {pid} outlived the server"
    with pytest.raises(ProcessLookupError):
        os.killpg(pids["pgid"], 0)


# --- watchdog ---------------------------------------------------------------------------------------------------


def test_watchdog_pings_only_while_health_answers(notify: Collector, tmp_path: Path) -> None:
    sick = tmp_path / "sick"
    env = fake_env(notify, tmp_path, FAKE_SICK_FILE=str(sick), WATCHDOG_USEC="300000")
    proc = start_driver(env, port=free_port())
    try:
        notify.wait_for("READY", "1")
        time.sleep(1.0)
        healthy = notify.count("WATCHDOG")
        assert healthy >= 3, f"expected a ping every 0.15 s, got {healthy} in 1 s"
        sick.touch()
        time.sleep(0.4)  # one probe may have been in flight
        before = notify.count("WATCHDOG")
        time.sleep(1.0)
        assert notify.count("WATCHDOG") == before, "WATCHDOG=1 sent while /health answered 503"
        sick.unlink()
        time.sleep(0.8)
        assert notify.count("WATCHDOG") > before, "pings must resume once /health answers again"
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=8)
    finally:
        proc.kill()


# --- endpoint and settings -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "want"), [
    pytest.param([], Endpoint("127.0.0.1", 30000), id="sglang-defaults"),
    pytest.param(["--host", "0.0.0.0", "--port", "8000"], Endpoint("127.0.0.1", 8000), id="wildcard-v4"),
    pytest.param(["--host", "::", "--port=8001"], Endpoint("::1", 8001), id="wildcard-v6"),
    pytest.param(["--host", "10.1.2.3"], Endpoint("10.1.2.3", 30000), id="explicit-host"),
    pytest.param(["--ssl-certfile", "c.pem", "--ssl-keyfile", "k.pem"], Endpoint("127.0.0.1", 30000, tls=True),
                 id="tls"),
])
def test_endpoint_is_read_from_the_users_sglang_args(args: list[str], want: Endpoint) -> None:
    assert endpoint_from_args(parse_cmdline(["--model-path", "m", *args], bundled_table("0.5.23"))) == want


def test_endpoint_from_sglangs_config_file_and_cli_wins(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("host: 0.0.0.0\nport: 9100\n")
    table = bundled_table("0.5.23")
    assert endpoint_from_args(parse_cmdline(["--config", str(cfg)], table)) == Endpoint("127.0.0.1", 9100)
    assert endpoint_from_args(parse_cmdline(["--config", str(cfg), "--port", "9200"], table)).port == 9200
    assert Endpoint("::1", 1).url == "http://[::1]:1"


def test_grpc_mode_has_no_health_to_notify_from() -> None:
    with pytest.raises(ConfigError, match=r"--grpc-mode serves gRPC.*drop --notify"):
        endpoint_from_args(parse_cmdline(["--model-path", "m", "--grpc-mode"], bundled_table("0.5.23")))


def test_bad_port_names_the_flag_and_the_range() -> None:
    with pytest.raises(UsageError, match=r"--port 70000: not a TCP port; allowed: 1-65535"):
        endpoint_from_args(parse_cmdline(["--port", "70000"], bundled_table("0.5.23")))


@pytest.mark.parametrize("raw", ["soon", "-1", "nan", "inf"])
def test_bad_stop_grace_is_a_config_error_naming_the_variable(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"SGLWRAP_STOP_GRACE=.*expected seconds"):
        stop_grace_from_env({"SGLWRAP_STOP_GRACE": raw})
    assert stop_grace_from_env({}) == 90.0
    assert stop_grace_from_env({"SGLWRAP_STOP_GRACE": "2.5"}) == 2.5


# --- through `sglwrap launch` --------------------------------------------------------------------------------


def launch_env(notify: Collector | None, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = fake_env(notify, tmp_path, SGLWRAP_SERVER_MODULE="fake_health_server", **extra)
    return env


def test_launch_notify_end_to_end(notify: Collector, tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglwrap", "launch", "--notify", "--force", "--profile", "fewchan", "--",
         "--model-path", "m", "--host", "0.0.0.0", "--port", str(port)],
        env=launch_env(notify, tmp_path, FAKE_TERM_CODE="5", SGLWRAP_STOP_GRACE="3"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = notify.wait_for("READY", "1", timeout=60)
        assert f"127.0.0.1:{port}/health" in ready["STATUS"]
        first = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        assert first["pid"] != proc.pid, "--notify keeps sglwrap as the parent"
        assert first["notify_socket"] is None
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 5
    assert "got-signal SIGTERM" in out
    worker = [json.loads(line) for line in err.splitlines() if '"worker-env"' in line]
    assert worker and worker[0]["env"]["NCCL_MAX_NCHANNELS"] == "2", "the injector must reach the child"
    launched = [json.loads(line) for line in err.splitlines() if '"launch.exec"' in line]
    assert launched[0]["mode"] == "supervise" and launched[0]["hash"] == worker[0]["hash"]


def test_launch_without_notify_still_execs_in_the_same_pid(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "sglwrap", "launch", "--force", "--profile", "fewchan", "--",
                             "--model-path", "m", "--port", str(free_port())],
                            env=launch_env(None, tmp_path, FAKE_MODE="exit", FAKE_EXIT_CODE="4"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, _err = proc.communicate(timeout=60)
    assert proc.returncode == 4
    assert json.loads(out.splitlines()[0])["pid"] == proc.pid


@pytest.mark.parametrize(("log", "expected"), [
    pytest.param("v0.5.23_tp2_decode-graph-oom.journal.json",
                 ["loading weights", "weights loaded: 30.7 GiB", "KV cache pool: 1538816 tokens",
                  "capturing target prefill CUDA graphs", "CUDA graphs captured", "capturing target decode"],
                 id="0.5.23-journal"),
    pytest.param("v0.4.8_docker_tp4_mla_ok.log", ["loading weights", "weights loaded", "KV cache pool",
                                                  "capturing", "warm-up done"], id="0.4.8"),
])
def test_status_follows_real_sglang_logs_in_order(log: str, expected: list[str]) -> None:
    from sglwrap.startup_status import status_for_line

    lines = (REPO / "tests" / "fixtures" / "logs" / log).read_text(errors="replace").splitlines()
    statuses = [s for s in map(status_for_line, lines) if s]
    pos = 0
    for want in expected:
        pos = next((i for i in range(pos, len(statuses)) if statuses[i].startswith(want)), -1)
        assert pos >= 0, f"{want!r} missing (in order) from {statuses}"


@requires_sglang
@pytest.mark.sglang
def test_real_sglang_failure_comes_back_through_the_supervisor(notify: Collector, tmp_path: Path) -> None:
    """Plain `python -m sglang.launch_server --model-path <missing>` exits 1 (SGLang 0.5.23, ~10 s)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    env["NOTIFY_SOCKET"] = notify.path
    # --force: preflight blocks a CUDA launch on this GPU-less host; SGLang's own failure is what is tested here
    res = subprocess.run([sys.executable, "-m", "sglwrap", "launch", "--notify", "--force", "--profile", "baseline",
                          "--", "--model-path", str(tmp_path / "no-such-model"), "--port", str(free_port())],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 1, res.stderr[-2000:]
    assert "no-such-model" in res.stderr, "SGLang's own error must reach our stderr (journald)"
    assert notify.count("READY") == 0
    assert any(s.startswith("SGLang exited (exit code 1)") for s in notify.statuses())

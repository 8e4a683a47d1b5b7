"""``launch --notify``: run SGLang as a supervised child for a ``Type=notify`` systemd unit.

What the supervisor adds over exec mode, and why:
- ``READY=1`` only once ``GET /health`` answers 200 on SGLang's ``--host``/``--port`` (SGLang never calls
  sd_notify; its ``/health`` returns 503 until warm-up is done, research-deploy §2.3).
- ``STATUS=`` from the child's log lines (loading weights, KV pool, CUDA graphs), teed through unchanged to our
  stdout/stderr so journald still records every line.
- ``WATCHDOG=1`` every ``WATCHDOG_USEC/2``: while loading and while stopping as long as the child lives (both
  are bounded by ``TimeoutStartSec``/the stop grace), and once ready only while ``/health`` answers 200.
- Signals: SIGTERM and SIGINT are forwarded to the SGLang main PID only, never its group (its schedulers have
  no handler, so a group signal loses the drain, sglang #35202). SIGHUP becomes SIGTERM: SGLang has no SIGHUP
  handler and would die without draining. SIGQUIT/SIGUSR1/SIGUSR2 pass through unchanged.
- No survivors: the child runs in its own session with ``PR_SET_PDEATHSIG``; the supervisor is a child
  subreaper, so orphaned grandchildren come back to it. After a stop signal the child gets ``stop_grace_s`` to
  drain, then the whole session is SIGKILLed; when the child has exited, whatever is left of its session or our
  descendants gets SIGTERM, then SIGKILL after ``reap_grace_s``.
- The exit status is the child's: its code, or the same signal re-raised on ourselves.
"""

from __future__ import annotations

import ctypes
import http.client
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Final

from sglwrap.errors import ConfigError
from sglwrap.record import Record
from sglwrap.sdnotify import NOTIFY_VARIABLES, Notifier, watchdog_interval_s
from sglwrap.sglang.cmdline import SglangCmdline
from sglwrap.startup_status import status_for_line

PR_SET_PDEATHSIG: Final = 1
PR_SET_CHILD_SUBREAPER: Final = 36
STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# signal received by the supervisor -> signal sent to SGLang's main PID
FORWARD: Final = {
    signal.SIGTERM: signal.SIGTERM,
    signal.SIGINT: signal.SIGINT,
    signal.SIGHUP: signal.SIGTERM,
    signal.SIGQUIT: signal.SIGQUIT,
    signal.SIGUSR1: signal.SIGUSR1,
    signal.SIGUSR2: signal.SIGUSR2,
}
DEFAULT_STOP_GRACE_S: Final = 90.0  # systemd's default TimeoutStopSec; units set SGLWRAP_STOP_GRACE below theirs
STOP_GRACE_VAR: Final = "SGLWRAP_STOP_GRACE"


class Endpoint(Record):
    """Where SGLang's HTTP server listens, as seen from this host."""

    host: str
    port: int
    tls: bool = False

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"


class SuperviseConfig(Record):
    """How to judge readiness and how long to wait when stopping."""

    endpoint: Endpoint
    health_path: str = "/health"
    poll_s: float = 1.0
    probe_timeout_s: float = 20.0  # SGLANG_HEALTH_CHECK_TIMEOUT's default: /health runs a 1-token generate
    stop_grace_s: float = DEFAULT_STOP_GRACE_S
    reap_grace_s: float = 5.0
    # While loading, each progress line also sends EXTEND_TIMEOUT_USEC: a load that keeps making progress is not
    # killed by TimeoutStartSec, and one that stalls for this long is (systemd.service(5), sd_notify(3)).
    progress_window_s: float = 1800.0


class Outcome(Record):
    """How the supervised child ended."""

    returncode: int  # Popen convention: -N when killed by signal N
    ready: bool  # READY=1 was sent
    killed_after_grace: bool  # the stop grace ran out and the session was SIGKILLed
    leftovers: int  # processes still alive after the child exited (then killed)


def stop_grace_from_env(environ: Mapping[str, str]) -> float:
    """``$SGLWRAP_STOP_GRACE`` in seconds (default 90); ConfigError (exit 78) for anything but a number ≥ 0."""
    raw = environ.get(STOP_GRACE_VAR)
    if raw is None or raw == "":
        return DEFAULT_STOP_GRACE_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ConfigError(f"{STOP_GRACE_VAR}={raw!r}: expected seconds, a number >= 0 (e.g. 300); it bounds "
                          "SGLang's drain after SIGTERM before the whole session is killed")
    return value


def endpoint_from_args(cmd: SglangCmdline) -> Endpoint:
    """SGLang's ``--host``/``--port`` (CLI, else its ``--config`` file, else 127.0.0.1:30000), made reachable here."""
    values = cmd.given_values
    for mode in ("grpc_mode", "smg_grpc_mode"):
        if values.get(mode) is True:
            raise ConfigError(f"launch --notify: --{mode.replace('_', '-')} serves gRPC, not the HTTP /health that "
                              "readiness is read from; drop --notify (use Type=exec) or drop the gRPC mode")
    host = str(values.get("host") or "127.0.0.1").strip("[]")
    # A wildcard bind is reachable on loopback; a probe to 0.0.0.0 works on Linux but says nothing useful.
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    raw_port = str(values.get("port") or 30000)
    try:
        port = int(raw_port)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise ConfigError(f"--port {raw_port!r}: expected a TCP port number 1-65535")
    return Endpoint(host=host, port=port, tls=bool(values.get("ssl_certfile")))


# --- process helpers ----------------------------------------------------------------------------------------


def prctl(option: int, arg: int) -> bool:
    """``prctl(2)`` with one argument; False where it is unavailable or refused."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, arg, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def child_setup(parent: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child dies with ``parent`` (PR_SET_PDEATHSIG) and starts with default signal handlers."""

    def setup() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os._exit(1)
        for sig in FORWARD:
            signal.signal(sig, signal.SIG_DFL)

    return setup


def _proc_stat(pid: int) -> tuple[int, int] | None:
    """(ppid, session id) of ``pid`` from /proc, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()
    if not fields or fields[0] == b"Z":
        return None  # a zombie holds no resources; it is reaped below if it is ours
    return int(fields[1]), int(fields[3])


def tree_members(session: int, root: int) -> set[int]:
    """Live processes in ``session`` plus every live descendant of ``root`` (excluding ``root``)."""
    stats: dict[int, tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _proc_stat(int(name))
            if st is not None:
                stats[int(name)] = st
    members = {pid for pid, (_pp, sid) in stats.items() if sid == session}
    children: dict[int, list[int]] = {}
    for pid, (pp, _sid) in stats.items():
        children.setdefault(pp, []).append(pid)
    frontier = [root]
    seen = {root}
    while frontier:
        for kid in children.get(frontier.pop(), []):
            if kid not in seen:
                seen.add(kid)
                members.add(kid)
                frontier.append(kid)
    members.discard(root)
    members.discard(os.getpid())
    return members


def signal_all(pids: set[int], sig: int) -> None:
    """Send ``sig`` to each of ``pids``, ignoring those already gone or not ours."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def reap_orphans(child_pid: int) -> bool:
    """Reap exited orphans that came back to us (subreaper); True when the child itself is waiting to be reaped."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return False
        if info is None or info.si_pid == 0:
            return False
        if info.si_pid == child_pid:
            return True
        try:
            os.waitpid(info.si_pid, 0)
        except ChildProcessError:
            return False


# --- readiness and log stream -------------------------------------------------------------------------------


def probe(endpoint: Endpoint, path: str, timeout_s: float, *, api_key: str | None = None,
          agent: str = "sglwrap-supervisor") -> int | None:
    """HTTP status of ``GET path`` on the endpoint, or None when nothing answers (``api_key``: sent as a bearer
    token, for a server started with --api-key)."""
    conn: http.client.HTTPConnection
    if endpoint.tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # our own server on loopback; only liveness is asked
        conn = http.client.HTTPSConnection(endpoint.host, endpoint.port, timeout=timeout_s, context=ctx)
    else:
        conn = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=timeout_s)
    headers = {"User-Agent": agent}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        resp.read(65536)
        return resp.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


class _Supervisor:
    def __init__(self, config: SuperviseConfig, notifier: Notifier, environ: Mapping[str, str]) -> None:
        self.config = config
        self.notifier = notifier
        self.watchdog_s = watchdog_interval_s(environ)
        self.done = threading.Event()
        self.ready = threading.Event()
        self.stop_at: float | None = None
        self.pid = 0
        self.pending: list[int] = []  # signals that arrived before the child existed

    def status(self, text: str) -> None:
        # No lock: each message is one datagram, sent atomically (and a lock could deadlock the signal handler).
        self.notifier.send(STATUS=text)

    def tee(self, src: IO[bytes], dst: IO[bytes]) -> None:
        for line in iter(lambda: src.readline(1 << 16), b""):
            try:
                dst.write(line)
                dst.flush()
            except (OSError, ValueError):
                pass  # our own stdout went away; keep draining the pipe so the child never blocks
            text = status_for_line(line.decode("utf-8", "replace"))
            if text and not self.ready.is_set() and self.stop_at is None:
                self.notifier.send(STATUS=text, EXTEND_TIMEOUT_USEC=int(self.config.progress_window_s * 1e6))
            elif text and not (self.ready.is_set() and not text.startswith("draining")):
                self.status(text)
        src.close()

    def watch_health(self) -> None:
        cfg = self.config
        timeout = min(cfg.probe_timeout_s, self.watchdog_s) if self.watchdog_s else cfg.probe_timeout_s
        next_ping = time.monotonic()
        while not self.done.is_set():
            now = time.monotonic()
            if not self.ready.is_set() and self.stop_at is None:
                if probe(cfg.endpoint, cfg.health_path, timeout) == 200:
                    self.ready.set()
                    self.notifier.send(READY=1, STATUS=f"ready: {cfg.endpoint.url}{cfg.health_path} answers 200")
                    continue
            if self.watchdog_s and now >= next_ping:
                next_ping = now + self.watchdog_s
                if not self.ready.is_set() or self.stop_at is not None or \
                        probe(cfg.endpoint, cfg.health_path, timeout) == 200:
                    self.notifier.send(WATCHDOG=1)
            wait = cfg.poll_s if not self.ready.is_set() else (self.watchdog_s or 3600.0)
            if self.watchdog_s:
                wait = min(wait, max(0.0, next_ping - time.monotonic()))
            self.done.wait(max(wait, 0.01))

    def on_signal(self, signum: int, _frame: object) -> None:
        target = FORWARD.get(signal.Signals(signum), signal.Signals(signum))
        if signum in STOP_SIGNALS and self.stop_at is None:
            self.stop_at = time.monotonic()
            name = signal.Signals(signum).name
            self.notifier.send(STOPPING=1, STATUS=f"stopping: {name} forwarded as {target.name}; "
                                                  f"drain up to {self.config.stop_grace_s:g} s")
        if self.pid <= 0:
            self.pending.append(int(target))  # never os.kill(0, ...): that would signal our own group
            return
        try:
            os.kill(self.pid, target)
        except ProcessLookupError:
            pass


def supervise(argv: Sequence[str], env: Mapping[str, str], config: SuperviseConfig, *,
              notifier: Notifier | None = None, environ: Mapping[str, str] | None = None,
              stdout: IO[bytes] | None = None, stderr: IO[bytes] | None = None) -> Outcome:
    """Run ``argv`` as a supervised child until it exits; see the module docstring. Blocks; main thread only."""
    environ = os.environ if environ is None else environ
    notifier = notifier or Notifier(environ)
    sup = _Supervisor(config, notifier, environ)
    child_env = {k: v for k, v in env.items() if k not in NOTIFY_VARIABLES}
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    previous = {sig: signal.getsignal(sig) for sig in FORWARD}
    for sig in FORWARD:  # install before the fork: a signal in between must not kill us with the child orphaned
        signal.signal(sig, sup.on_signal)
    try:
        child = subprocess.Popen(list(argv), env=child_env, start_new_session=True, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 preexec_fn=child_setup(os.getpid()))
    except OSError as e:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        raise ConfigError(f"cannot start {argv[0]}: {e.strerror}") from None
    sup.pid = child.pid
    for pending_sig in sup.pending:
        os.kill(child.pid, pending_sig)
    sup.status(f"starting SGLang (pid {child.pid})")
    assert child.stdout is not None and child.stderr is not None
    threads = [
        threading.Thread(target=sup.tee, args=(child.stdout, stdout or sys.stdout.buffer), daemon=True),
        threading.Thread(target=sup.tee, args=(child.stderr, stderr or sys.stderr.buffer), daemon=True),
        threading.Thread(target=sup.watch_health, daemon=True),
    ]
    for t in threads:
        t.start()
    killed = False
    try:
        killed = _wait_child(child, sup)
        leftovers = _clean_up(child.pid, config.reap_grace_s)
    finally:
        sup.done.set()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for t in threads[:2]:
        t.join(timeout=2.0)
    code = child.returncode
    sup.status(f"SGLang exited ({_describe_code(code)})")
    return Outcome(returncode=code, ready=sup.ready.is_set(), killed_after_grace=killed, leftovers=leftovers)


def _wait_child(child: subprocess.Popen[bytes], sup: _Supervisor) -> bool:
    killed = False
    while child.returncode is None:
        if reap_orphans(child.pid):
            child.wait()
            break
        if sup.stop_at is not None and not killed and time.monotonic() - sup.stop_at > sup.config.stop_grace_s:
            killed = True
            sup.status(f"stop grace of {sup.config.stop_grace_s:g} s over: killing the session")
            signal_all(tree_members(child.pid, os.getpid()) | {child.pid}, signal.SIGKILL)
        time.sleep(0.05)
    return killed


def _clean_up(session: int, grace_s: float) -> int:
    """SIGTERM, then SIGKILL after ``grace_s``, whatever is left of the child's session and our descendants."""
    left = tree_members(session, os.getpid())
    if not left:
        reap_orphans(-1)
        return 0
    signal_all(left, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        reap_orphans(-1)
        if not tree_members(session, os.getpid()):
            break
        time.sleep(0.05)
    for _ in range(100):  # SIGKILL until nothing is left (a process may fork while we look)
        rest = tree_members(session, os.getpid())
        if not rest:
            break
        signal_all(rest, signal.SIGKILL)
        time.sleep(0.02)
        reap_orphans(-1)
    reap_orphans(-1)
    return len(left)


def _describe_code(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def exit_like(outcome: Outcome) -> int:
    """Leave as the child did: return its exit code, or re-raise its fatal signal on ourselves."""
    code = outcome.returncode
    if code >= 0:
        return code
    sig = -code
    sys.stdout.flush()
    sys.stderr.flush()
    if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot have a handler, nor need one reset
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            return 128 + sig
    os.kill(os.getpid(), sig)
    time.sleep(0.5)
    return 128 + sig  # the signal's default action does not terminate (e.g. SIGCHLD): shell convention

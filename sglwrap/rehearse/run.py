"""Run one rehearsal: start SGLang in its own session, wait for ``/health`` 200, send one short ``/generate``, stop
it (SIGTERM to its main PID, a grace, then SIGKILL to everything left of its session and our descendants), and
remove the shared-memory files it left in ``/dev/shm``. The log goes to a file that ``diagnose`` reads.

Nothing survives: the child gets ``PR_SET_PDEATHSIG`` and its own session, this process is a child subreaper while
it runs (orphaned grandchildren come back to it), and an interrupt (Ctrl-C, SIGTERM) kills the whole tree before it
propagates.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Final

from sglwrap import supervise
from sglwrap.errors import ConfigError
from sglwrap.record import Record, field
from sglwrap.startup_status import status_for_line

SHM_DIR: Final = Path("/dev/shm")
POLL_S: Final = 0.25
PROBE_TIMEOUT_S: Final = 5.0
REQUEST_TIMEOUT_S: Final = 120.0
DEFAULT_GRACE_S: Final = 20.0  # SGLang drains and its schedulers exit within ~15 s of SIGTERM
PROMPT_IDS: Final = (1, 2, 3, 4)  # token ids, so a server started with --skip-tokenizer-init answers too
NEW_TOKENS: Final = 4


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM reached the rehearsal; the child tree has been killed (exit 130, as for Ctrl-C)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Request(Record):
    """The one request a rehearsal sends once ``/health`` answers."""

    path: str = "/generate"
    body: Mapping[str, object] = field(default_factory=lambda: {
        "input_ids": list(PROMPT_IDS), "sampling_params": {"max_new_tokens": NEW_TOKENS, "temperature": 0}})
    api_key: str | None = None


class RunResult(Record):
    """How the rehearsal went, in the order things happen."""

    ended: str  # "passed", "exited" (before /health), "request_failed", "hang" (timeout)
    elapsed_s: float
    health_after_s: float | None  # when /health first answered 200
    returncode: int | None  # the child's (Popen convention: -N for signal N); None while it was alive at the stop
    request_status: int | None = None
    request_detail: str | None = None  # the answer's first bytes, or why there was none
    stop: str = ""  # how it was stopped: "exited by itself", "SIGTERM", "SIGKILL after N s grace"
    leftovers: int = 0  # processes besides the main one alive when it ended or its grace ran out (then killed)
    shm_removed: tuple[str, ...] = ()


def _health(host: str, port: int, api_key: str | None) -> int | None:
    return supervise.probe(supervise.Endpoint(host, port), "/health", PROBE_TIMEOUT_S, api_key=api_key,
                           agent="sglwrap-rehearse")


def send_request(host: str, port: int, req: Request, timeout_s: float) -> tuple[int | None, str]:
    """POST the request; (HTTP status or None, the answer's first 300 characters or why there was none)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        headers = {"Content-Type": "application/json", "User-Agent": "sglwrap-rehearse"}
        if req.api_key:
            headers["Authorization"] = f"Bearer {req.api_key}"
        conn.request("POST", req.path, body=json.dumps(req.body), headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read(4096).decode("utf-8", "replace")[:300]
    except TimeoutError:
        return None, f"no answer within {timeout_s:g} s"
    except (OSError, http.client.HTTPException) as e:
        return None, f"the connection failed: {type(e).__name__}: {e}"
    finally:
        conn.close()


def shm_snapshot() -> set[str]:
    """Names in /dev/shm now (empty when there is no /dev/shm)."""
    try:
        return set(os.listdir(SHM_DIR))
    except OSError:
        return set()


def _open_elsewhere(names: set[str]) -> set[str]:
    """Those of ``names`` (files in /dev/shm) that some live process still has open or mapped."""
    held: set[str] = set()
    paths = {str(SHM_DIR / n): n for n in names}
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target in paths:
                    held.add(paths[target])
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    path = line.rstrip("\n").split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
                    path = path.removesuffix(" (deleted)")
                    if path in paths:
                        held.add(paths[path])
        except OSError:
            continue
    return held


def clean_shm(before: set[str]) -> tuple[str, ...]:
    """Remove files that appeared in /dev/shm since ``before``, are ours (same uid) and no live process holds."""
    new = {n for n in shm_snapshot() - before if _owned(SHM_DIR / n)}
    if not new:
        return ()
    removed: list[str] = []
    for name in sorted(new - _open_elsewhere(new)):
        try:
            (SHM_DIR / name).unlink()
            removed.append(name)
        except OSError:
            pass
    return tuple(removed)


def _owned(path: Path) -> bool:
    try:
        st = path.lstat()
    except OSError:
        return False
    return st.st_uid == os.getuid() and not path.is_symlink()


def _descendants(root_session: int) -> set[int]:
    return supervise.tree_members(root_session, os.getpid())


def _kill_tree(child: subprocess.Popen[bytes], sig: int) -> None:
    supervise.signal_all(_descendants(child.pid) | ({child.pid} if child.returncode is None else set()), sig)


class _Tee:
    """Copies the child's output to the log file; each startup step becomes one progress line."""

    def __init__(self, log: IO[bytes], progress: Callable[[str], None]) -> None:
        self.log = log
        self.progress = progress

    def pump(self, src: IO[bytes]) -> None:
        for line in iter(lambda: src.readline(1 << 16), b""):
            try:
                self.log.write(line)
                self.log.flush()
            except (OSError, ValueError):
                pass
            text = status_for_line(line.decode("utf-8", "replace"))
            if text:
                self.progress(text)
        src.close()


def rehearse(argv: Sequence[str], env: Mapping[str, str], *, host: str, port: int, timeout_s: float,
             log_path: Path, request: Request | None = None, grace_s: float = DEFAULT_GRACE_S,
             progress: Callable[[str], None] = lambda _t: None) -> RunResult:
    """Run ``argv`` once as described in the module docstring. Raises :class:`Interrupted` on Ctrl-C/SIGTERM
    (after killing the tree) and ConfigError when the program cannot start at all."""
    shm_before = shm_snapshot()
    start = time.monotonic()
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}

    def on_signal(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    was_subreaper = supervise.prctl(supervise.PR_SET_CHILD_SUBREAPER, 1)
    for s in previous:
        signal.signal(s, on_signal)
    # mode 0600: SGLang's server_args line holds --api-key's value
    log = os.fdopen(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600), "wb")
    child: subprocess.Popen[bytes] | None = None
    threads: list[threading.Thread] = []
    try:
        try:
            child = subprocess.Popen(list(argv), env=dict(env), start_new_session=True, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     preexec_fn=supervise.child_setup(os.getpid()))
        except OSError as e:
            raise ConfigError(f"rehearse: cannot start {argv[0]}: {e.strerror}") from None
        assert child.stdout is not None
        tee = _Tee(log, progress)
        threads = [threading.Thread(target=tee.pump, args=(child.stdout,), daemon=True)]
        for t in threads:
            t.start()
        result = _drive(child, host=host, port=port, timeout_s=timeout_s, request=request, start=start)
        stop, leftovers = _stop(child, grace_s)
        return _finish(result, stop, leftovers, child, shm_before, start)
    except BaseException:  # Ctrl-C, SIGTERM, or a bug: never leave the server running
        if child is not None:
            _kill_tree(child, signal.SIGKILL)
            _reap_all(child)
        clean_shm(shm_before)
        raise
    finally:
        for t in threads:
            t.join(timeout=5.0)
        log.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
        if was_subreaper:
            supervise.prctl(supervise.PR_SET_CHILD_SUBREAPER, 0)  # a later exec must not inherit it


class _Progress(Record, frozen=False):
    ended: str
    health_after_s: float | None = None
    request_status: int | None = None
    request_detail: str | None = None


def _drive(child: subprocess.Popen[bytes], *, host: str, port: int, timeout_s: float, request: Request | None,
           start: float) -> _Progress:
    deadline = start + timeout_s
    while True:
        if child.poll() is not None:
            return _Progress("exited")
        if time.monotonic() >= deadline:
            return _Progress("hang")
        if _health(host, port, request.api_key if request else None) == 200:
            break
        time.sleep(POLL_S)
    up = time.monotonic() - start
    if request is None:
        return _Progress("passed", up)
    status, detail = send_request(host, port, request, min(REQUEST_TIMEOUT_S, max(1.0, deadline - time.monotonic())))
    time.sleep(0.2)  # a crash on the request takes the server down a moment after the answer (or its absence)
    alive = child.poll() is None
    if status == 200 and alive:
        return _Progress("passed", up, status, detail)
    if status == 200:
        detail = f"the request answered 200, then SGLang exited ({describe_code(child.returncode)})"
    return _Progress("request_failed", up, status, detail)


def _stop(child: subprocess.Popen[bytes], grace_s: float) -> tuple[str, int]:
    """Stop the child: SIGTERM to its main PID (SGLang drains), SIGKILL to the whole tree after ``grace_s``."""
    if child.poll() is not None:
        how = "exited by itself"
    else:
        try:
            os.kill(child.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            child.wait(timeout=grace_s)
            how = "SIGTERM"
        except subprocess.TimeoutExpired:
            others = len(_descendants(child.pid))
            _kill_tree(child, signal.SIGKILL)
            child.wait()
            return f"SIGKILL after a {grace_s:g} s grace (it ignored SIGTERM)", others + _reap_all(child)
    return how, _reap_all(child)


def _reap_all(child: subprocess.Popen[bytes]) -> int:
    """Kill and reap whatever is left of the child's session and our descendants; how many there were."""
    if child.poll() is None:
        child.kill()
        child.wait()
    left = _descendants(child.pid)
    if left:
        supervise.signal_all(left, signal.SIGTERM)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and _descendants(child.pid):
            supervise.reap_orphans(-1)
            time.sleep(0.05)
    for _ in range(100):
        rest = _descendants(child.pid)
        if not rest:
            break
        supervise.signal_all(rest, signal.SIGKILL)
        time.sleep(0.02)
        supervise.reap_orphans(-1)
    supervise.reap_orphans(-1)
    return len(left)


def _finish(p: _Progress, stop: str, leftovers: int, child: subprocess.Popen[bytes], shm_before: set[str],
            start: float) -> RunResult:
    return RunResult(ended=p.ended, elapsed_s=time.monotonic() - start, health_after_s=p.health_after_s,
                     returncode=child.returncode, request_status=p.request_status, request_detail=p.request_detail,
                     stop=stop, leftovers=leftovers, shm_removed=clean_shm(shm_before))


def describe_code(code: int | None) -> str:
    """How a process ended, in words: ``exit code 1``, ``killed by SIGKILL``."""
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


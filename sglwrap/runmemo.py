"""A whole command run kept with everything it read, and replayed while none of that has changed.

``sglwrap preflight`` with ``--assume`` is a pure function of its argv, environment, working directory, terminal and
the files it reads (sglwrap's own code and data, profiles, the target interpreter's packages, caches, a model's
config). A run records those inputs as it goes: every file opened for reading and every directory listed (Python's
audit events), every path whose existence or metadata it asked for (``os.stat``/``lstat``/``access``), and the
source file of every module it imported. When it ends normally and touched nothing live, its output and exit code
are stored under ``$XDG_CACHE_HOME/sglwrap/runs/`` with a stamp of each input (type, inode, size, mtime).

The next identical invocation re-stats those inputs (a few hundred ``stat`` calls) and, when every stamp is equal,
writes the stored output and returns the stored exit code without importing the checks: same inputs, same answer.
A run that touched anything live is never stored: a subprocess, a shared library (NVML), a socket, a read of
``/proc``, ``/sys`` or ``/dev``, an exit by exception; nor is a run that wrote a file (a cold run filling caches,
whose progress lines a warm run would not print). ``SGLWRAP_MEMO=0`` turns the memo off. The JSON report says
when it was replayed (``timing.memo``).

This module imports only what a bare interpreter already has loaded, plus ``json`` (and ``hashlib`` when a run may
be memoized).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

SCHEMA = 1
KEEP = 64  # stored runs kept; the oldest go first
_VERBS = ("preflight",)
_LIVE_EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.fork", "os.forkpty",
                "ctypes.dlopen", "socket.", "pty.spawn")
_LIVE_PREFIXES = ("/proc/", "/sys/", "/dev/")


def _cache_dir() -> str:
    # sglwrap.fsutil.cache_dir() / "runs", spelled with os.path: the replay path does not import pathlib
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ.get("HOME") or os.path.expanduser("~"),
                                                            ".cache")
    return os.path.join(base, "sglwrap", "runs")


def memoizable(argv: Sequence[str]) -> bool:
    """Whether a run of ``argv`` may be recorded or replayed: a preflight planned with ``--assume`` (no live
    facts), not ``--explain`` or ``--help``, and the memo not turned off."""
    if os.environ.get("SGLWRAP_MEMO", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    try:
        os.getcwd()
    except OSError:  # the working directory was removed: relative paths mean nothing to compare
        return False
    own = list(argv[: argv.index("--")] if "--" in argv else argv)
    if not own or own[0] not in _VERBS:
        return False
    if any(a in ("-h", "--help", "--version") or a.startswith("--explain") for a in own):
        return False
    return any(a == "--assume" or a.startswith("--assume=") for a in own)


def _terminal(fd: int) -> list[int] | None:
    try:
        if not os.isatty(fd):
            return None
        size = os.get_terminal_size(fd)
        return [size.columns, size.lines]
    except OSError:
        return None


def run_key(argv: Sequence[str]) -> str:
    """The hash of everything a run is given: argv, environment, working directory, interpreter, terminals."""
    import hashlib  # only memoizable runs pay for it

    blob = json.dumps([SCHEMA, list(argv), sorted(os.environ.items()), os.getcwd(), sys.executable,
                       sys.version, _terminal(1), _terminal(2)])
    return hashlib.sha256(blob.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _stamp(path: str, follow: bool = True) -> list[int] | None:
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except (OSError, ValueError):
        return None
    return [st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_uid]


def replay(argv: Sequence[str]) -> int | None:
    """Write a stored run's output and return its exit code when every input it read is unchanged; else None."""
    if not memoizable(argv):
        return None
    path = os.path.join(_cache_dir(), run_key(argv) + ".json")
    try:
        with open(path, encoding="utf-8") as f:
            entry = json.load(f)
        if entry.get("schema") != SCHEMA:
            return None
        for p, follow, stamp in entry["inputs"]:
            if _stamp(p, follow) != stamp:
                return None
        stdout, stderr, code = entry["stdout"], entry["stderr"], int(entry["exit_code"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if stdout and "--json" in argv:
        stdout = _mark_replayed(stdout, entry)
    try:
        sys.stderr.write(stderr)
        sys.stderr.flush()
        sys.stdout.write(stdout)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (| head): as the CLI does, no traceback, and no flush at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return code


def _mark_replayed(stdout: str, entry: dict[str, Any]) -> str:
    try:
        doc = json.loads(stdout)
    except ValueError:
        return stdout
    if isinstance(doc, dict) and isinstance(doc.get("timing"), dict):
        doc["timing"]["memo"] = {"replayed": True, "recorded_unix": entry.get("recorded_unix"),
                                 "inputs_unchanged": len(entry["inputs"])}
        return json.dumps(doc, indent=1, sort_keys=False) + "\n"
    return stdout


class _Tee:
    """A text stream that passes everything on and keeps a copy."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner
        self.copy: list[str] = []

    def write(self, text: str) -> int:
        self.copy.append(text)
        return self._inner.write(text)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, flush, encoding, ...
        return getattr(self._inner, name)


class Recorder:
    """What one run reads, and whether it touched anything live."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)
        self.key = run_key(argv)
        self.active = True
        self.live: str | None = None
        self.paths: dict[str, bool] = {}  # path -> follow symlinks when stamping
        self.streams: tuple[_Tee, _Tee] | None = None  # stdout and stderr as the run wrote them

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        """The audit hook: files opened for reading, directories listed, anything live."""
        if not self.active:
            return
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None))[:3]
            writes = any(c in mode for c in "wax+") if isinstance(mode, str) \
                else isinstance(flags, int) and bool(flags & (os.O_WRONLY | os.O_RDWR))
            if writes and self.live is None and path != "/dev/null":
                self.live = f"wrote {path}"  # a cold run (caches being filled) is not kept: the next, warm one is
            elif isinstance(path, str) and not writes:
                self._note(path, True)
        elif event in ("os.listdir", "os.scandir"):
            path = args[0] if args else "."
            if isinstance(path, str | os.PathLike):
                self._note(os.fspath(path) or ".", True)
        elif self.live is None and event.startswith(_LIVE_EVENTS):
            self.live = event

    def _note(self, path: str, follow: bool) -> None:
        if path.startswith(_LIVE_PREFIXES) and path != "/dev/null" and self.live is None:
            self.live = f"read {path}"
        self.paths.setdefault(path, follow)

    def probe(self, path: Any, follow: bool) -> None:
        """A stat/lstat/access of ``path``: its existence and metadata are an input."""
        if self.active and isinstance(path, str | os.PathLike) and not isinstance(path, bytes):
            self._note(os.fspath(path), follow)

    def store(self, code: int, stdout: str, stderr: str) -> None:
        """Keep the run when it touched nothing live (atomically; a failure to write only costs the next run)."""
        self.active = False
        if self.live is not None:
            return
        for mod in list(sys.modules.values()):
            f = getattr(mod, "__file__", None)
            if isinstance(f, str):
                self.paths.setdefault(f, True)
        inputs = [[p, follow, _stamp(p, follow)] for p, follow in sorted(self.paths.items())]
        import time

        entry = {"schema": SCHEMA, "argv": self.argv, "exit_code": code, "stdout": stdout, "stderr": stderr,
                 "recorded_unix": int(time.time()), "inputs": inputs}
        try:
            from pathlib import Path

            from sglwrap.fsutil import atomic_write_text

            d = Path(_cache_dir())
            d.mkdir(parents=True, exist_ok=True)
            atomic_write_text(d / f"{self.key}.json", json.dumps(entry), 0o600)
            _prune(d)
        except OSError:
            pass


def _prune(d: Any) -> None:
    runs = sorted(d.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    for old in runs[:-KEEP]:
        old.unlink(missing_ok=True)


_RECORDER: Recorder | None = None


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if _RECORDER is not None:
        _RECORDER.audit(event, args)


@contextmanager
def recording(argv: Sequence[str]) -> Iterator[Recorder | None]:
    """Record the run of ``argv`` when it may be memoized (else yield None and record nothing). The caller calls
    ``finish(code)`` on the recorder when the command returned normally."""
    global _RECORDER
    if not memoizable(argv):
        yield None
        return
    rec = Recorder(argv)
    _RECORDER = rec
    if not getattr(sys, "_sglwrap_memo_hook", False):
        sys.addaudithook(_hook)  # audit hooks cannot be removed: this one goes quiet when the run ends
        sys._sglwrap_memo_hook = True  # type: ignore[attr-defined]
    real = {name: getattr(os, name) for name in ("stat", "lstat", "access")}

    def stat(path: Any, *a: Any, **kw: Any) -> Any:
        rec.probe(path, kw.get("follow_symlinks", True))
        return real["stat"](path, *a, **kw)

    def lstat(path: Any, *a: Any, **kw: Any) -> Any:
        rec.probe(path, False)
        return real["lstat"](path, *a, **kw)

    def access(path: Any, *a: Any, **kw: Any) -> Any:
        rec.probe(path, True)
        return real["access"](path, *a, **kw)

    out, err = _Tee(sys.stdout), _Tee(sys.stderr)
    saved = sys.stdout, sys.stderr
    os.stat, os.lstat, os.access = stat, lstat, access  # type: ignore[assignment]
    sys.stdout, sys.stderr = out, err  # type: ignore[assignment]
    rec.streams = (out, err)
    try:
        yield rec
    finally:
        rec.active = False
        os.stat, os.lstat, os.access = real["stat"], real["lstat"], real["access"]  # type: ignore[assignment]
        sys.stdout, sys.stderr = saved
        _RECORDER = None


def finish(rec: Recorder | None, code: int) -> None:
    """Store the recorded run that returned ``code`` normally (0 ok, 1 warnings, 78 blocked)."""
    if rec is None or rec.streams is None or code not in (0, 1, 78):
        return
    out, err = rec.streams
    rec.store(code, "".join(out.copy), "".join(err.copy))

"""Render a systemd service unit that runs SGLang through ``sglwrap launch`` (research-deploy §2).

Choices, each for a reason:
- ``KillMode=mixed``: SIGTERM to the main PID only (SGLang drains; its schedulers have no SIGTERM handler),
  SIGKILL for the rest of the cgroup after ``TimeoutStopSec``.
- ``TimeoutStartSec=45min``: weight loading plus CUDA-graph capture outlasts systemd's 90 s default.
- ``Restart=on-failure`` with ``RestartPreventExitStatus=64 78``: a usage error or a blocked profile cannot be
  fixed by restarting.
- ``RuntimeDirectory=sglwrap/%N`` (mode 0700) holds the injector's files: one directory per unit, because
  systemd deletes a unit's runtime directory when it stops and two units sharing ``/run/sglwrap`` would
  overwrite each other's ``sitecustomize.py``.
- ``--notify``: ``Type=notify`` + ``NotifyAccess=main``; the unit is active only once ``/health`` answers 200.

``ExecStart=`` arguments are quoted per systemd.service(5) "Command lines": ``%`` → ``%%``, ``$`` → ``$$``,
C-style escapes inside double quotes, and a word is quoted whenever it is empty or holds whitespace, quotes,
backslashes, control characters or is a lone ``;``.
"""

from __future__ import annotations

import os
import shlex
import site
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from sglwrap import __version__
from sglwrap.errors import UsageError

ENV_FILE: Final = "-/etc/sglwrap/%N.env"
TIMEOUT_START: Final = "45min"
TIMEOUT_STOP_S: Final = 330  # > longest request + SGLang's 15 s scheduler exit + margin
STOP_GRACE_S: Final = 300  # the supervisor's own deadline, before systemd's SIGKILL at TimeoutStopSec
_SAFE: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,/:=+@%$^~[]{}()!?#*&<>|")


@dataclass(frozen=True)
class UnitSpec:
    """What goes into the unit."""

    profile: str
    sglang_args: tuple[str, ...]
    command: tuple[str, ...]  # how to run sglwrap: (absolute executable,) or (python, "-m", "sglwrap")
    notify: bool = False
    watchdog_sec: int | None = None
    description: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)


def quote_word(word: str) -> str:
    """One ``ExecStart=`` word, so that systemd hands exactly ``word`` to the program."""
    out = []
    for ch in word:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        elif ch == "%":
            out.append("%%")
        elif ch == "$":
            out.append("$$")
        else:
            out.append(ch)
    text = "".join(out)
    if word and word != ";" and all(ch in _SAFE for ch in word):
        return text
    return f'"{text}"'


def quote_assignment(name: str, value: str) -> str:
    """An ``Environment=`` value: ``"NAME=value"`` with quotes/backslashes escaped and ``%`` doubled."""
    text = f"{name}={value}".replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{text}"'


def exec_start(spec: UnitSpec) -> str:
    """The ``ExecStart=`` value."""
    words = [*spec.command, "launch", "--profile", spec.profile]
    if spec.notify:
        words.append("--notify")
    words += ["--", *spec.sglang_args]
    return " ".join(quote_word(w) for w in words)


def sglwrap_command(explicit: str | None = None) -> tuple[tuple[str, ...], dict[str, str]]:
    """How the unit should start sglwrap, and any environment that needs (PYTHONPATH for a checkout).

    Order: ``explicit``; the ``sglwrap`` console script next to this interpreter (same venv); the script this
    process was started as; else this interpreter with ``-m sglwrap``.
    """
    if explicit:
        path = Path(explicit)
        if not path.is_absolute() or not os.access(path, os.X_OK) or path.is_dir():
            raise UsageError(f"--sglwrap-bin {explicit}: expected the absolute path of an executable file")
        return (str(path),), {}
    candidates = [Path(sys.executable).parent / "sglwrap", Path(sys.argv[0]) if sys.argv else None]
    for cand in candidates:
        if cand is not None and cand.name == "sglwrap" and cand.is_file() and os.access(cand, os.X_OK):
            return (str(cand.absolute()),), {}
    env: dict[str, str] = {}
    root = Path(__file__).resolve().parent.parent
    if not _on_default_path(root):
        env["PYTHONPATH"] = str(root)  # running from a checkout: the service's python must find it too
    return (os.path.abspath(sys.executable), "-m", "sglwrap"), env


def _on_default_path(root: Path) -> bool:
    dirs = list(site.getsitepackages()) + [site.getusersitepackages()]
    return any(root == Path(d).resolve() for d in dirs if d)


def render_unit(spec: UnitSpec, *, invocation: Sequence[str] = ()) -> str:
    """The whole unit file text."""
    desc = spec.description or f"SGLang server via sglwrap (profile {spec.profile})"
    lines = [
        f"# Generated by sglwrap {__version__}" + (f": {_one_line(shlex.join(invocation))}" if invocation else ""),
        "# Save as /etc/systemd/system/NAME.service; per-host variables (SGLWRAP_*, NCCL_SOCKET_IFNAME, …)",
        "# go in /etc/sglwrap/NAME.env. Then: systemctl daemon-reload && systemctl enable --now NAME",
        "[Unit]",
        f"Description={desc.replace(chr(10), ' ').replace('%', '%%')}",
        "After=network-online.target nvidia-persistenced.service",
        "Wants=network-online.target",
        "StartLimitIntervalSec=1800",
        "StartLimitBurst=3",
        "",
        "[Service]",
    ]
    if spec.notify:
        lines += ["# sglwrap stays the main process and sends READY=1 once SGLang's /health answers 200",
                  "Type=notify", "NotifyAccess=main"]
        if spec.watchdog_sec:
            lines.append(f"WatchdogSec={spec.watchdog_sec}")
    else:
        lines += ["# sglwrap execs SGLang in the same PID: signals and exit codes are SGLang's own",
                  "Type=exec"]
    lines += [f"EnvironmentFile={ENV_FILE}", quote_env("PYTHONUNBUFFERED", "1")]
    if spec.notify:
        lines.append(quote_env("SGLWRAP_STOP_GRACE", str(STOP_GRACE_S)))
    for name, value in sorted(spec.environment.items()):
        lines.append(quote_env(name, value))
    lines += [
        f"ExecStart={exec_start(spec)}",
        "RuntimeDirectory=sglwrap/%N",
        "RuntimeDirectoryMode=0700",
        "# SIGTERM to the main process only, so SGLang drains; SIGKILL for the rest after TimeoutStopSec",
        "KillMode=mixed",
        "KillSignal=SIGTERM",
        "# weight loading + CUDA-graph capture",
        f"TimeoutStartSec={TIMEOUT_START}",
        f"TimeoutStopSec={TIMEOUT_STOP_S}",
        "Restart=on-failure",
        "RestartSec=15",
        "# 64: bad command line, 78: profile blocked or invalid; restarting cannot fix either",
        "RestartPreventExitStatus=64 78",
        "LimitMEMLOCK=infinity",
        "LimitNOFILE=1048576",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


def quote_env(name: str, value: str) -> str:
    """One ``Environment=`` line."""
    return f"Environment={quote_assignment(name, value)}"

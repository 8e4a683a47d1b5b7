"""The sd_notify protocol (man sd_notify(3)): ``KEY=VALUE`` lines in one datagram to ``$NOTIFY_SOCKET``.

A path starting with ``@`` names a socket in the Linux abstract namespace (the ``@`` becomes a NUL byte).
Without ``NOTIFY_SOCKET`` every send is a no-op, so the same code runs under systemd and on a terminal.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping


def socket_address(path: str) -> str | bytes:
    """The ``sockaddr_un`` path for ``$NOTIFY_SOCKET``: ``@name`` → ``b"\\0name"`` (abstract namespace)."""
    if path.startswith("@"):
        return b"\0" + path[1:].encode()
    return path


class Notifier:
    """Sends sd_notify messages; inert when ``NOTIFY_SOCKET`` is unset. Errors are swallowed and counted."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        path = env.get("NOTIFY_SOCKET", "")
        self.path = path
        self.failures = 0
        self._addr = socket_address(path) if path else None
        self._sock: socket.socket | None = None
        if self._addr is not None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)

    @property
    def enabled(self) -> bool:
        """True when there is a socket to talk to."""
        return self._sock is not None

    def send(self, **fields: str | int) -> bool:
        """Send ``KEY=VALUE`` lines (``send(READY=1, STATUS="ready")``); False if disabled or it failed."""
        if self._sock is None or self._addr is None:
            return False
        text = "".join(f"{k}={_one_line(v)}\n" for k, v in fields.items())
        try:
            self._sock.sendto(text.encode(), self._addr)
        except OSError:
            # systemd gone or socket full: readiness is best-effort, the server must keep running.
            self.failures += 1
            return False
        return True

    def close(self) -> None:
        """Close the socket (further sends are no-ops)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _one_line(value: str | int) -> str:
    # A newline would start a new KEY=VALUE assignment inside the datagram.
    return str(value).replace("\n", " ")


def watchdog_interval_s(environ: Mapping[str, str], pid: int | None = None) -> float | None:
    """Half of ``$WATCHDOG_USEC`` in seconds (sd_watchdog_enabled(3)), or None when no watchdog is meant for us."""
    usec = environ.get("WATCHDOG_USEC")
    if not usec:
        return None
    wpid = environ.get("WATCHDOG_PID")
    if wpid and wpid.isdigit() and int(wpid) != (os.getpid() if pid is None else pid):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 2e6 if value > 0 else None


NOTIFY_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")

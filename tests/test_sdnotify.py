"""sd_notify over real unix datagram sockets: file-system path and abstract namespace."""

from __future__ import annotations

import os
import socket
import tempfile
import uuid
from collections.abc import Iterator

import pytest

from sglwrap.sdnotify import Notifier, socket_address, watchdog_interval_s


@pytest.fixture
def fs_socket() -> Iterator[tuple[str, socket.socket]]:
    d = tempfile.mkdtemp(prefix="sdn-", dir="/tmp")  # sun_path holds 108 bytes; pytest's tmp_path can be longer
    path = os.path.join(d, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(2)
    yield path, sock
    sock.close()
    os.unlink(path)
    os.rmdir(d)


def test_messages_arrive_in_order_as_key_value_lines(fs_socket: tuple[str, socket.socket]) -> None:
    path, sock = fs_socket
    n = Notifier({"NOTIFY_SOCKET": path})
    assert n.enabled
    assert n.send(STATUS="loading weights")
    assert n.send(READY=1, STATUS="ready")
    assert n.send(WATCHDOG=1)
    got = [sock.recv(4096) for _ in range(3)]
    assert got == [b"STATUS=loading weights\n", b"READY=1\nSTATUS=ready\n", b"WATCHDOG=1\n"]


def test_abstract_namespace_socket_receives_the_messages() -> None:
    name = f"sglwrap-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(2)
    try:
        n = Notifier({"NOTIFY_SOCKET": "@" + name})
        assert n.send(STATUS="a") and n.send(READY=1)
        assert [sock.recv(4096), sock.recv(4096)] == [b"STATUS=a\n", b"READY=1\n"]
    finally:
        sock.close()


def test_socket_address_maps_at_sign_to_a_leading_nul() -> None:
    assert socket_address("@x/y") == b"\0x/y"
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"


def test_a_newline_in_a_value_cannot_inject_another_assignment(fs_socket: tuple[str, socket.socket]) -> None:
    path, sock = fs_socket
    Notifier({"NOTIFY_SOCKET": path}).send(STATUS="bad\nREADY=1")
    assert sock.recv(4096) == b"STATUS=bad READY=1\n"


def test_without_notify_socket_sending_is_a_quiet_no_op() -> None:
    n = Notifier({})
    assert not n.enabled
    assert n.send(READY=1) is False
    assert n.failures == 0


def test_a_vanished_socket_is_counted_not_raised(tmp_path: object) -> None:
    n = Notifier({"NOTIFY_SOCKET": "/tmp/sglwrap-no-such-socket-" + uuid.uuid4().hex})
    assert n.send(READY=1) is False
    assert n.failures == 1


@pytest.mark.parametrize(("env", "pid", "want"), [
    pytest.param({"WATCHDOG_USEC": "2000000"}, 10, 1.0, id="half-the-period"),
    pytest.param({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "10"}, 10, 1.0, id="for-us"),
    pytest.param({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "11"}, 10, None, id="for-another-pid"),
    pytest.param({"WATCHDOG_USEC": "soon"}, 10, None, id="garbage"),
    pytest.param({"WATCHDOG_USEC": "0"}, 10, None, id="zero"),
    pytest.param({}, 10, None, id="unset"),
])
def test_watchdog_interval(env: dict[str, str], pid: int, want: float | None) -> None:
    assert watchdog_interval_s(env, pid) == want

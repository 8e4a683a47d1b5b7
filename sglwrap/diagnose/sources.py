"""Reading diagnose inputs: files, ``-`` (stdin), gzip, journald JSON exports, and launch manifests.

Logs are read in fixed-size binary chunks and only the lines holding one of ``patterns.KEYWORDS`` are decoded,
so memory stays flat and a gigabyte of "Decode batch" lines costs a few ``bytes.find`` passes per chunk.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Final

from sglwrap.diagnose.patterns import ANSI_RE, GLUE_RE, KEYWORDS
from sglwrap.errors import SglwrapError

CHUNK: Final = 4 << 20
MAX_LINE: Final = 64 << 10  # longer lines are cut: no SGLang memory line comes near this
MANIFEST_MAX: Final = 1 << 20
EXIT_UNREADABLE: Final = 2


@dataclass(frozen=True)
class Manifest:
    """An sglwrap launch manifest (``{"sglwrap_manifest": 1, …}``) given as one of the inputs."""

    source: str
    profile_name: str | None
    profile_hash: str | None
    env: dict[str, str]
    argv: tuple[str, ...]
    sglang_version: str | None


def _unreadable(path: str, err: BaseException) -> SglwrapError:
    reason = getattr(err, "strerror", None) or str(err) or type(err).__name__
    return SglwrapError(f"cannot read {path}: {reason}", exit_code=EXIT_UNREADABLE)


def open_binary(path: str) -> IO[bytes]:
    """Open ``path`` (``-`` = stdin) for binary reading, transparently un-gzipping by magic bytes."""
    try:
        raw: IO[bytes] = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
        if path != "-" and os.path.isdir(path):
            raise IsADirectoryError(21, "is a directory")
        head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    except OSError as e:
        raise _unreadable(path, e) from None
    if head == b"\x1f\x8b":
        if path == "-":
            return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
        raw.close()
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return raw


def read_manifest(path: str) -> Manifest | None:
    """The manifest in ``path`` if the file is one (a small JSON object with ``sglwrap_manifest``), else None."""
    if path == "-":
        return None
    try:
        if os.path.getsize(path) > MANIFEST_MAX:
            return None
        with open_binary(path) as fh:
            data = fh.read(MANIFEST_MAX + 1)
    except SglwrapError:
        raise
    except (OSError, EOFError, zlib.error) as e:
        raise _unreadable(path, e) from None
    if not data.lstrip()[:1] == b"{":
        return None
    try:
        obj = json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get("sglwrap_manifest") != 1:
        return None
    return _manifest_from(path, obj)


def _manifest_from(path: str, obj: dict[str, object]) -> Manifest:
    profile = obj.get("profile") if isinstance(obj.get("profile"), dict) else {}
    assert isinstance(profile, dict)
    env = obj.get("env") if isinstance(obj.get("env"), dict) else {}
    assert isinstance(env, dict)
    argv = obj.get("argv") if isinstance(obj.get("argv"), list) else []
    assert isinstance(argv, list)
    stack = obj.get("stack") if isinstance(obj.get("stack"), dict) else {}
    assert isinstance(stack, dict)
    version = obj.get("sglang_version") or stack.get("sglang")
    return Manifest(
        source=path,
        profile_name=_str_or_none(profile.get("name")),
        profile_hash=_str_or_none(profile.get("hash")),
        env={str(k): str(v) for k, v in env.items()},
        argv=tuple(str(a) for a in argv),
        sglang_version=_str_or_none(version),
    )


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def iter_lines(path: str) -> Iterator[str]:
    """Yield the decoded, cleaned logical lines of ``path`` that may carry a fact (others are skipped unread)."""
    fh = open_binary(path)
    try:
        for raw in _candidate_lines(fh, path):
            yield from _clean(raw)
    finally:
        if fh is not sys.stdin.buffer:
            fh.close()


def _read(fh: IO[bytes], path: str) -> bytes:
    try:
        return fh.read(CHUNK)
    except EOFError:  # a truncated .gz is a truncated log: diagnose what arrived
        return b""
    except (OSError, zlib.error, ValueError) as e:  # corrupt .gz, I/O error
        raise _unreadable(path, e) from None


def _candidate_lines(fh: IO[bytes], path: str) -> Iterator[bytes]:
    carry = b""
    while True:
        chunk = _read(fh, path)
        if not chunk:
            break
        buf = carry + chunk if carry else chunk
        cut = buf.rfind(b"\n") + 1
        if cut == 0:
            if len(buf) > MAX_LINE:  # one enormous line: look at its head, drop the rest
                yield from _hits(buf[:MAX_LINE])
                buf = b""
            carry = buf
            continue
        yield from _hits(buf, cut)
        carry = buf[cut:]
        if len(carry) > MAX_LINE:
            carry = carry[:MAX_LINE]
    if carry:
        yield from _hits(carry)


def _hits(buf: bytes, end: int | None = None) -> Iterator[bytes]:
    """Lines of buf[:end] that contain a keyword, in file order, each once."""
    end = len(buf) if end is None else end
    starts: set[int] = set()
    for kw in KEYWORDS:
        pos = buf.find(kw, 0, end)
        while pos != -1:
            start = buf.rfind(b"\n", 0, pos) + 1
            starts.add(start)
            nl = buf.find(b"\n", pos, end)
            if nl == -1:
                break
            pos = buf.find(kw, nl + 1, end)
    for start in sorted(starts):
        nl = buf.find(b"\n", start, end)
        stop = end if nl == -1 else nl
        yield buf[start : min(stop, start + MAX_LINE)]


def _clean(raw: bytes) -> Iterator[str]:
    text = raw.decode("utf-8", "replace").replace("\x00", "")
    if text.startswith("{") and '"MESSAGE"' in text:
        text = _journald_message(text)
    if text.startswith("# "):  # a commentary line (fixtures, annotated excerpts), never SGLang output
        return
    if "\x1b" in text:
        text = ANSI_RE.sub("", text)
    for piece in text.split("\r"):
        if not piece.strip():
            continue
        yield from (p.rstrip() for p in GLUE_RE.split(piece) if p.strip())


def _journald_message(text: str) -> str:
    """MESSAGE of a ``journalctl -o json`` record (a string, or a byte array for non-UTF-8 text)."""
    try:
        rec = json.loads(text)
    except ValueError:
        return text
    msg = rec.get("MESSAGE") if isinstance(rec, dict) else None
    if isinstance(msg, str):
        return msg
    if isinstance(msg, list) and all(isinstance(b, int) and 0 <= b < 256 for b in msg):
        return bytes(msg).decode("utf-8", "replace")
    return text

"""Reading diagnose inputs: files, ``-`` (stdin), gzip, journald JSON exports, and launch manifests.

Logs are read in fixed-size binary chunks and only the lines holding one of ``patterns.KEYWORDS`` are decoded,
so memory stays flat and a gigabyte of "Decode batch" lines costs a few ``bytes.find`` passes per chunk.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import re
import zlib
from collections.abc import Iterable, Iterator
from typing import IO, Final

from sglwrap.diagnose.patterns import ANSI_RE, CONT_MARKERS, GLUE_RE, KEYWORDS, NOISE, SERVED_RE
from sglwrap.errors import SglwrapError
from sglwrap.record import Record

CHUNK: Final = 4 << 20
MAX_LINE: Final = 64 << 10  # longer lines are cut: no SGLang memory line comes near this
MANIFEST_MAX: Final = 1 << 20
SNIFF: Final = 64 << 10  # bytes of the head checked for binary content
MAX_CONT: Final = 3  # physical lines after an error line that may continue it
QUOTE_RE: Final = re.compile(r"^(?:> ?)+")
CONT_RE: Final = re.compile("|".join(re.escape(m.decode()) for m in CONT_MARKERS))
CONT_STR: Final = tuple(m.decode() for m in CONT_MARKERS)
KEYWORDS_STR: Final = tuple(k.decode() for k in KEYWORDS)
KW_RE: Final = re.compile("|".join(re.escape(k) for k in KEYWORDS_STR))
NOISE_STR: Final = tuple(n.decode() for n in NOISE)
EXIT_UNREADABLE: Final = 2


class Manifest(Record):
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
    """Yield the decoded, cleaned logical lines of ``path`` that may carry a fact (others are skipped unread).

    A message wrapped over several physical lines (by a terminal, an issue quote or the log itself) is joined back
    into one line when its continuation directly follows it (``continues``).
    """
    fh = open_binary(path)
    try:
        seen = [0]
        pending: str | None = None  # join_continuations, inlined: one loop per chunk instead of a generator chain
        for batch in _candidate_batches(fh, path, seen):
            for adj, raw in batch:
                pieces = [raw.rstrip()] if _plain(raw) else list(_clean(raw))
                if not pieces:
                    continue
                if pending is not None and adj and continues(pending, pieces[0]):
                    pending = pending.rstrip() + " " + pieces[0].strip()
                    pieces = pieces[1:]
                    if not pieces:
                        continue
                if pending is not None:
                    yield pending
                if len(pieces) > 1:
                    yield from pieces[:-1]
                pending = pieces[-1]
        if pending is not None:
            yield pending
        if seen[0] == 0:
            raise SglwrapError(f"cannot read {path}: it is empty (no log text)", exit_code=EXIT_UNREADABLE)
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


def looks_binary(sample: bytes) -> bool:
    """Whether the head of an input is not text: many control bytes or invalid UTF-8 once NUL runs are dropped
    (logrotate's copytruncate leaves NULs before real text)."""
    text = sample.replace(b"\x00", b"")
    if not text:
        return False
    ctrl = sum(text.count(bytes([c])) for c in range(32) if c not in (9, 10, 13, 27))
    bad = text.decode("utf-8", "replace").count("\ufffd")
    return ctrl + bad > 0.1 * len(text)


def _candidate_batches(fh: IO[bytes], path: str, seen: list[int]) -> Iterator[list[tuple[bool, str]]]:
    """Per chunk, (adjacent to the previous candidate line, line) for every line that may carry a fact, in file order.

    ``seen[0]`` counts the non-blank bytes read; a binary head raises ``SglwrapError`` (exit 2).
    """
    carry = b""
    memo: dict[str, bool] = {}  # keyword answers of repeated untimestamped lines (``_has_keyword``)
    last = -2  # global index of the last yielded line
    base = 0  # global index of the first line of the current buffer
    while True:
        chunk = _read(fh, path)
        if not chunk:
            break
        if seen[0] == 0:
            if looks_binary(chunk[:SNIFF]):
                raise SglwrapError(f"cannot read {path}: it is binary, not a text log (for a systemd journal use "
                                   f"journalctl -o json or -o cat)", exit_code=EXIT_UNREADABLE)
            seen[0] = len(chunk.replace(b"\x00", b"").strip())
        else:
            seen[0] += len(chunk)
        buf = carry + chunk if carry else chunk
        cut = buf.rfind(b"\n") + 1
        if cut == 0:
            if len(buf) > MAX_LINE:  # one enormous line: look at its head, drop the rest
                out = []
                for i, line in _hits(buf[:MAX_LINE], None, memo):
                    out.append((base + i == last + 1, line))
                    last = base + i
                yield out
                base += 1
                buf = b""
            carry = buf
            continue
        out = []
        for i, line in _hits(buf, cut, memo):
            out.append((base + i == last + 1, line))
            last = base + i
        yield out
        base += buf.count(b"\n", 0, cut)
        carry = buf[cut:]
        if len(carry) > MAX_LINE:
            carry = carry[:MAX_LINE]
    if carry:
        yield [(base + i == last + 1, line) for i, line in _hits(carry, None, memo)]


MEMO_MAX: Final = 4096


def _has_keyword(line: str, memo: dict[str, bool]) -> bool:
    """Whether ``line`` holds a keyword. Lines without a timestamp (traceback frames and source lines, tqdm bars,
    wrapped text) repeat verbatim in a restart loop, so their answer is remembered instead of rescanned."""
    if line[:1] == "[":
        return KW_RE.search(line) is not None
    hit = memo.get(line)
    if hit is None:
        if len(memo) >= MEMO_MAX:
            memo.clear()
        hit = memo[line] = KW_RE.search(line) is not None
    return hit


def _may_continue(line: str) -> bool:
    """``CONT_RE.search(line)`` with plain substring tests (an alternation of literals is slow on long lines)."""
    return any(m in line for m in CONT_STR)


def _hits(buf: bytes, end: int | None = None, memo: dict[str, bool] | None = None) -> list[tuple[int, str]]:
    """(line index, decoded line) of the lines of buf[:end] that hold a keyword, plus the lines right after an error
    line (its possible continuation), in order, each once.

    The chunk is decoded once; known serving-noise lines (``NOISE``) are blanked with one ``in`` test each (no
    regex runs on them), then each remaining line is searched once for the keywords (one alternation).
    """
    end = len(buf) if end is None else end
    memo = {} if memo is None else memo
    text = buf[:end].decode("utf-8", "replace")
    if "\x1b" in text:
        text = ANSI_RE.sub("", text)
    if "\x00" in text:
        text = text.replace("\x00", "")
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    n1, n2, n3 = NOISE_STR
    kept = ["" if (n1 in ln or n2 in ln or n3 in ln) else ln for ln in lines]
    hits = [i for i, ln in enumerate(kept) if ln and _has_keyword(ln, memo)]
    # One serving line per chunk is kept: it says the server was up (decode steps, API requests).
    served = next((i for i, ln in enumerate(lines) if not kept[i] and ln and SERVED_RE.search(ln) is not None), None)
    if served is not None:
        kept[served] = lines[served]
        hits = sorted(hits + [served])
    index: set[int] = set(hits)
    for i in hits:
        if i + 1 < len(kept) and _may_continue(kept[i]):
            for j in range(i + 1, min(i + 1 + MAX_CONT, len(kept))):
                if not kept[j]:
                    break
                index.add(j)
    return [(i, kept[i][:MAX_LINE]) for i in (sorted(index) if len(index) != len(hits) else hits)]


# A message continues on the next physical line when the line before is an error/memory message and the next line
# is not a new record (a timestamped or tagged line, a traceback frame, a new exception).
_OPEN_RE: Final = re.compile(
    r"(?:Error|Exception|OutOfResources|Not enough memory|Loaded weights|out of memory|Tried to allocate|CUDA error"
    r"|Out of memory|Required:)"
)
_NEW_RECORD_RE: Final = re.compile(
    r"\s*(?:\[\d{4}-\d\d-\d\d|\[gpu|\d{4}-\d\d-\d\d[ T]\d|Traceback|File \"|During handling|The above exception"
    r"|(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\b|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\b|\^|~|\$|#)"
)
_CONT_START_RE: Final = re.compile(
    r"\s*(?:[a-z0-9(\-]|GPU \d|Including |Of the allocated|If reserved|Current value|Raise --|Please try|Required:"
    r"|Hardware limit|Reducing block|See documentation|Tried to allocate|CUDA kernel errors|For debugging|Compile with)"
)
MAX_JOINED: Final = 4096


def _may_open(prev: str) -> bool:
    """A cheap superset of ``_OPEN_RE``: literal tests only."""
    return ("rror" in prev or "xception" in prev or "emory" in prev or "OutOfResources" in prev
            or "Tried to" in prev or "Required:" in prev)


def continues(prev: str, nxt: str) -> bool:
    """Whether ``nxt`` (the next physical line) is the rest of the message in ``prev``."""
    if nxt[:1] == "[" and nxt[1:2].isdigit():  # a new timestamped record (the common case, decided without a regex)
        return False
    if not _may_open(prev) or len(prev) > MAX_JOINED or not nxt.strip() or _OPEN_RE.search(prev) is None:
        return False
    if _NEW_RECORD_RE.match(nxt) is not None and not nxt.lstrip().startswith("--"):
        return False
    return _CONT_START_RE.match(nxt) is not None


def join_continuations(items: Iterable[tuple[bool, list[str]]]) -> Iterator[str]:
    """Merge each continuation line into the message it continues; ``items`` are (adjacent, cleaned pieces)."""
    pending: str | None = None
    for adj, pieces in items:
        if pending is not None and adj and pieces and continues(pending, pieces[0]):
            pending = pending.rstrip() + " " + pieces[0].strip()
            pieces = pieces[1:]
            if not pieces:
                continue
        if not pieces:
            continue
        if pending is not None:
            yield pending
        yield from pieces[:-1]
        pending = pieces[-1]
    if pending is not None:
        yield pending


# A worker prefix that Ray (and similar launchers) put before every line of a child's output: "(SGLangWorker
# pid=38138) ", "(TaskRunner pid=1, ip=10.0.0.2) ". Pasted from a web UI, several lines can end up on one line.
WORKER_PREFIX_RE: Final = re.compile(r"\s*\((?:\w+ )?pid=\d+(?:, ip=[\d.]+)?\)\s+")


def _plain(text: str) -> bool:
    """The common case, decided without a generator: an ordinary non-blank line, nothing glued, quoted, wrapped in
    JSON or flattened (``_clean`` would yield it unchanged)."""
    return (text[:1] not in "{>#" and "\r" not in text and text.find("[20", 1) == -1 and text.find("[gpu", 1) == -1
            and " pid=" not in text and text.strip() != "")


def _clean(text: str) -> Iterator[str]:
    if " pid=" in text and text.count(" pid=") >= 2 and len(WORKER_PREFIX_RE.findall(text, 0, MAX_JOINED)) >= 2:
        # a flattened worker log: one record per prefix
        for piece in WORKER_PREFIX_RE.split(text):
            if piece.strip():
                yield from _clean(piece)
        return
    if text[:1] not in "{>#" and "\r" not in text and "[20" not in text[1:] and "[gpu" not in text[1:]:
        if text.strip():  # the common case: an ordinary line, nothing glued, quoted or wrapped in JSON
            yield text.rstrip()
        return
    if text.startswith("{") and '"MESSAGE"' in text:
        text = _journald_message(text)
        if "\x1b" in text:
            text = ANSI_RE.sub("", text)
    if text.startswith(">"):  # an e-mail/issue quote ("> " or "> > ")
        text = QUOTE_RE.sub("", text, count=1)
    if text.startswith("# "):  # a commentary line (fixtures, annotated excerpts), never SGLang output
        return
    if "\r" not in text and "[20" not in text[1:] and "[gpu" not in text[1:]:  # the common case: nothing glued
        if text.strip():
            yield text.rstrip()
        return
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

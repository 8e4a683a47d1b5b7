"""Terminal output for people: reports on stdout, colour only where it will be seen, lines fit the window.

- ``--color auto|always|never`` (a global option of ``sglwrap``, see :func:`set_color_mode`); ``auto`` colours a
  stream only when it is a terminal, ``NO_COLOR`` (any non-empty value, https://no-color.org) is not set and
  ``TERM`` is not ``dumb``; ``always`` wins over ``NO_COLOR`` because it was asked for on the command line.
- Width: ``$COLUMNS``, else the terminal's width. Reports written to a pipe or a file are not wrapped (one finding
  per line stays greppable) unless ``$COLUMNS`` is set; tables that need a width use 100 columns there.
- Status words are coloured as whole words: PASS/OK green, WARN/DOWN yellow, BLOCK/FAIL red.
- :func:`progress` says on stderr what a slow step is doing before it starts, and how long it took.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TextIO

COLOR_MODES = ("auto", "always", "never")
DEFAULT_WIDTH = 100
MIN_WIDTH = 40

_GREEN, _YELLOW, _RED, _BOLD, _RESET = "\033[32m", "\033[33m", "\033[31m", "\033[1m", "\033[0m"
STATUS_COLORS: Mapping[str, str] = {
    "PASS": _GREEN, "OK": _GREEN, "FITS": _GREEN, "UP": _GREEN,
    "WARN": _YELLOW, "DOWN": _YELLOW, "DOWNGRADE": _YELLOW, "DOWNGRADED": _YELLOW,
    "BLOCK": _RED, "BLOCKED": _RED, "FAIL": _RED, "FAILED": _RED,
}
_STATUS_RE = re.compile(r"(?<![\w-])(" + "|".join(sorted(STATUS_COLORS, key=len, reverse=True)) + r")(?![\w-])")
_ANSI_RE = re.compile(r"\033\[[0-9;]*m")

_mode = "auto"


def set_color_mode(mode: str) -> None:
    """Set ``auto``, ``always`` or ``never`` for this process (the CLI calls this for ``--color``)."""
    if mode not in COLOR_MODES:
        raise ValueError(f"--color {mode!r}: expected one of {', '.join(COLOR_MODES)}")
    global _mode
    _mode = mode


def color_mode() -> str:
    """The current mode: ``auto``, ``always`` or ``never``."""
    return _mode


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def use_color(stream: TextIO | None = None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether text written to ``stream`` (default stdout) should carry colour codes."""
    if _mode == "never":
        return False
    if _mode == "always":
        return True
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    return _isatty(sys.stdout if stream is None else stream)


def width(stream: TextIO | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Columns to wrap to: ``$COLUMNS``, else the terminal's width, else :data:`DEFAULT_WIDTH`."""
    env = os.environ if environ is None else environ
    cols = env.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return max(int(cols), MIN_WIDTH)
    stream = sys.stdout if stream is None else stream
    if _isatty(stream):
        try:
            return max(os.get_terminal_size(stream.fileno()).columns, MIN_WIDTH)
        except (OSError, ValueError, AttributeError):
            pass
    return DEFAULT_WIDTH


def wrap_width(stream: TextIO | None = None, environ: Mapping[str, str] | None = None) -> int | None:
    """Columns to wrap a report to on ``stream``: a terminal's (or ``$COLUMNS``) width; None (no wrapping) else."""
    env = os.environ if environ is None else environ
    cols = env.get("COLUMNS", "")
    if (cols.isdigit() and int(cols) > 0) or _isatty(sys.stdout if stream is None else stream):
        return width(stream, env)
    return None


def visible_len(text: str) -> int:
    """Length of ``text`` as shown (colour codes take no columns)."""
    return len(_ANSI_RE.sub("", text))


_HANG_RE = re.compile(r"^(\s*(?:[-*•] |\d+[.)] |[\w./:-]+(?:\s[\w./-]+)?\s{2,}|[A-Za-z][\w -]{0,30}: )?)")


def wrap_line(line: str, cols: int) -> list[str]:
    """One line broken into lines of at most ``cols`` columns; continuation lines are indented under the text.

    The hanging indent follows the line's own layout: its leading spaces, a bullet (``- ``), a first column padded
    with two or more spaces (``gpu-count   WARN  ...``) or a short ``label: `` prefix. Words longer than a line
    (paths, URLs) are kept whole rather than cut.
    """
    if visible_len(line) <= cols:
        return [line]
    lead = _HANG_RE.match(line)
    hang = len(lead.group(1)) if lead else 0
    if hang > cols // 2:
        hang = len(line) - len(line.lstrip())
    out = textwrap.wrap(line, cols, subsequent_indent=" " * hang, break_long_words=False,
                        break_on_hyphens=False, drop_whitespace=True)
    first_indent = line[: len(line) - len(line.lstrip())]
    if out and not out[0].startswith(first_indent):
        out[0] = first_indent + out[0]
    return out or [line]


def wrap(text: str, cols: int) -> str:
    """Every line of ``text`` wrapped by :func:`wrap_line`; a trailing newline is kept."""
    lines = text.split("\n")
    out: list[str] = []
    for ln in lines:
        out += wrap_line(ln, cols) if ln else [ln]
    return "\n".join(out)


def paint(text: str, code: str) -> str:
    """``text`` between a colour code and a reset."""
    return f"{code}{text}{_RESET}"


# lower-case statuses where a report puts them first on a line (launch --dry-run's "  block   symm-mem: ...")
_LINE_STATUS_RE = re.compile(r"(?m)^(\s*)(pass|warn|downgrade|block)(?=\s)")
_LINE_COLORS = {"pass": _GREEN, "warn": _YELLOW, "downgrade": _YELLOW, "block": _RED}
# the memory accountant's verdict ("verdict: kv_pool_oom", launch's "memory    fits: ...")
_VERDICT_RE = re.compile(r"(?m)^(verdict:\s+|memory\s+)(fits|[a-z_]*risk[a-z_]*|[a-z_]*oom[a-z_]*|weights_dont_fit)\b")


def _verdict_color(word: str) -> str:
    return _GREEN if word == "fits" else _YELLOW if "risk" in word else _RED


def colorize_status(text: str) -> str:
    """Colour each whole-word status (PASS, WARN, DOWN, BLOCK, ...) in ``text``, a lower-case status that starts a
    line, and the memory verdict (fits green, a risk yellow, an OOM red)."""
    text = _STATUS_RE.sub(lambda m: paint(m.group(1), STATUS_COLORS[m.group(1)]), text)
    text = _LINE_STATUS_RE.sub(lambda m: m.group(1) + paint(m.group(2), _LINE_COLORS[m.group(2)]), text)
    return _VERDICT_RE.sub(lambda m: m.group(1) + paint(m.group(2), _verdict_color(m.group(2))), text)


def bold(text: str, stream: TextIO | None = None) -> str:
    """``text`` in bold where colour is on for ``stream``."""
    return paint(text, _BOLD) if use_color(stream) else text


def render(text: str, stream: TextIO | None = None, *, cols: int | None = None) -> str:
    """A report as it should appear on ``stream``: wrapped to its width, status words coloured where allowed."""
    stream = sys.stdout if stream is None else stream
    cols = cols or wrap_width(stream)
    if cols:
        text = wrap(text, cols)
    return colorize_status(text) if use_color(stream) else text


def report(text: str, stream: TextIO | None = None, *, cols: int | None = None) -> None:
    """Write a human report (stdout unless told otherwise), wrapped and coloured per :func:`render`."""
    stream = sys.stdout if stream is None else stream
    stream.write(render(text, stream, cols=cols))
    stream.flush()


def note(text: str) -> None:
    """One line for people on stderr (a hint, a warning, a path written), wrapped to the terminal."""
    report(text if text.endswith("\n") else text + "\n", sys.stderr)


@contextmanager
def progress(what: str, stream: TextIO | None = None) -> Iterator[None]:
    """Say on stderr what a slow step does before it starts; on a terminal, finish the line with its duration.

    ``what`` reads as a present participle: "reading SGLang 0.5.23's flags (first run, about 10 s)".
    """
    stream = sys.stderr if stream is None else stream
    tty = _isatty(stream)
    start = time.monotonic()
    stream.write(f"sglwrap: {what} ...")
    stream.write("" if tty else "\n")
    stream.flush()
    ok = False
    try:
        yield
        ok = True
    finally:
        took = time.monotonic() - start
        if tty:
            stream.write(f" {'done' if ok else 'failed'} ({took:.1f} s)\n")
        elif ok:
            stream.write(f"sglwrap: done in {took:.1f} s\n")
        stream.flush()

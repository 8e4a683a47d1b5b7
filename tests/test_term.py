"""sglwrap.term, and sglwrap on a real terminal: tmux runs it in a pane of known width and the test reads the screen.

What is checked on the screen: status words in colour on a terminal, none with NO_COLOR=1 or through a pipe, every
line within the pane's width (sglwrap wrapped them, not the terminal: the capture joins soft-wrapped lines), and the
progress line of the first run's slow step finished with its duration.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sglwrap import term

from .conftest import REPO

STORY = "sglang=0.5.23,torch=2.14.1+cu130,flashinfer-python=0.7.2,driver=580.95.05"  # as 0.5.23 pins it
SGR_COLOUR = re.compile(r"\x1b\[[0-9;]*3[123]m")


@pytest.fixture(autouse=True)
def auto_mode() -> Iterator[None]:
    term.set_color_mode("auto")
    yield
    term.set_color_mode("auto")


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


# --- the module ---

def test_colour_only_on_a_terminal_unless_told() -> None:
    assert term.use_color(Tty(), {}) is True
    assert term.use_color(io.StringIO(), {}) is False
    assert term.use_color(Tty(), {"NO_COLOR": "1"}) is False
    assert term.use_color(Tty(), {"NO_COLOR": ""}) is True  # no-color.org: only a non-empty value counts
    assert term.use_color(Tty(), {"TERM": "dumb"}) is False
    term.set_color_mode("never")
    assert term.use_color(Tty(), {}) is False
    term.set_color_mode("always")
    assert term.use_color(io.StringIO(), {"NO_COLOR": "1"}) is True
    with pytest.raises(ValueError):
        term.set_color_mode("sometimes")


def test_status_words_are_coloured_as_whole_words_only() -> None:
    text = term.colorize_status("x PASS y WARN DOWN BLOCK BLOCKING --block PASSED-ish")
    assert "\x1b[32mPASS\x1b[0m" in text and "\x1b[33mWARN\x1b[0m" in text and "\x1b[33mDOWN\x1b[0m" in text
    assert "\x1b[31mBLOCK\x1b[0m" in text
    assert "BLOCKING" in text and "--block" in text and "PASSED-ish" in text  # untouched
    assert term.visible_len(text) == len("x PASS y WARN DOWN BLOCK BLOCKING --block PASSED-ish")


def test_line_statuses_and_memory_verdicts_are_coloured() -> None:
    text = term.colorize_status("preflight blocked\n  block   symm-mem: x passes\n  pass    gpu-count: ok\n"
                                "verdict: kv_pool_oom\nverdict: fits\nmemory    graph_oom_risk: y\n")
    assert "  \x1b[31mblock\x1b[0m   symm-mem" in text and "  \x1b[32mpass\x1b[0m    gpu-count" in text
    assert "x passes" in text  # not at the start of a line: prose
    assert "verdict: \x1b[31mkv_pool_oom\x1b[0m" in text and "verdict: \x1b[32mfits\x1b[0m" in text
    assert "memory    \x1b[33mgraph_oom_risk\x1b[0m" in text


def test_wrap_keeps_lines_within_the_width_with_a_hanging_indent() -> None:
    line = "symm-mem           BLOCK " + "word " * 40 + "/a/very/long/path/that/must/not/be/cut/anywhere.py"
    out = term.wrap_line(line, 60)
    assert len(out) > 3
    assert all(len(o) <= 60 for o in out if " " in o.strip())
    assert all(o.startswith(" " * len("symm-mem           ")) for o in out[1:])
    assert "/a/very/long/path/that/must/not/be/cut/anywhere.py" in "\n".join(out)
    assert " ".join(" ".join(o.split()) for o in out) == " ".join(line.split())  # no word lost or changed
    bullet = term.wrap_line("  - " + "x" * 10 + " yy" * 30, 40)
    assert all(o.startswith("    ") for o in bullet[1:])


def test_report_wraps_a_terminal_but_not_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    long = "cause: " + "this is a long sentence " * 20 + "\n"
    pipe = io.StringIO()
    term.report(long, pipe)
    assert pipe.getvalue() == long  # one finding per line stays greppable
    monkeypatch.setenv("COLUMNS", "50")
    tty = Tty()
    term.report(long, tty)
    assert all(term.visible_len(ln) <= 50 for ln in tty.getvalue().splitlines())


def test_progress_off_a_terminal_is_two_plain_lines_and_on_one_is_one_finished_line() -> None:
    pipe = io.StringIO()
    with term.progress("reading things", pipe):
        pass
    lines = pipe.getvalue().splitlines()
    assert lines[0] == "sglwrap: reading things ..." and lines[1].startswith("sglwrap: done in ")
    tty = Tty()
    with term.progress("reading things", tty):
        time.sleep(0.05)
    assert re.fullmatch(r"sglwrap: reading things \.\.\. done \(\d+\.\d s\)\n", tty.getvalue())
    failing = Tty()
    with pytest.raises(RuntimeError), term.progress("x", failing):
        raise RuntimeError
    assert failing.getvalue().endswith("failed (0.0 s)\n")


# --- a real terminal ---

def _tmux() -> str:
    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.skip("tmux is not installed (apt-get install tmux)")
    return tmux


class Pane:
    """One tmux server of our own (its own socket), one pane of a given size; stopped by kill-server on it."""

    def __init__(self, width: int, command: str, env: dict[str, str]) -> None:
        self.tmux = _tmux()
        self.sock = f"sglwrap-test-{uuid.uuid4().hex[:8]}"
        assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        script = f"env {assigns} {command}; echo __EXIT__ $?; sleep 600"
        subprocess.run([self.tmux, "-L", self.sock, "-f", "/dev/null", "new-session", "-d", "-x", str(width),
                        "-y", "50", "sh", "-c", script], check=True, timeout=30)

    def screen(self) -> str:
        res = subprocess.run([self.tmux, "-L", self.sock, "capture-pane", "-p", "-e", "-J", "-S", "-500"],
                             capture_output=True, text=True, timeout=30, check=True)
        return res.stdout

    def wait(self, timeout: float = 300) -> tuple[str, int]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            text = self.screen()
            m = re.search(r"__EXIT__ (\d+)", text)
            if m:
                return text[:m.start()], int(m.group(1))
            time.sleep(0.5)
        raise AssertionError(f"no exit within {timeout} s; screen:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run([self.tmux, "-L", self.sock, "kill-server"], capture_output=True, timeout=30)


def on_screen(width: int, args: str, tmp_path: Path, *, extra_env: dict[str, str] | None = None,
              pipe: bool = False) -> tuple[str, int]:
    env = {"PYTHONPATH": str(REPO), "HOME": os.environ["HOME"], "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "SGLWRAP_SYSTEM_PROFILE_DIR": str(tmp_path / "etc"), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           **(extra_env or {})}
    cmd = f"{shlex.quote(sys.executable)} -m sglwrap {args}" + (" | cat" if pipe else "")
    pane = Pane(width, cmd, env)
    try:
        return pane.wait()
    finally:
        pane.close()


PREFLIGHT = f"preflight --assume 8xRTX-PRO-6000 --assume-stack {STORY} -- --tp-size 8 --enable-symm-mem"


def test_on_a_terminal_status_is_coloured_and_lines_fit_the_width(tmp_path: Path) -> None:
    screen, rc = on_screen(72, PREFLIGHT, tmp_path)
    assert rc == 78
    plain = re.sub(r"\x1b\[[0-9;]*m", "", screen)
    assert "symm-mem" in plain and "BLOCK" in plain
    assert re.search(r"\x1b\[[0-9;]*31mBLOCK", screen), "BLOCK in red"
    assert re.search(r"\x1b\[[0-9;]*32mPASS", screen), "PASS in green"
    lines = [ln for ln in plain.splitlines() if ln.strip() and not ln.startswith("sglwrap: ")]
    too_long = [ln for ln in lines if len(ln.rstrip()) > 72 and " " in ln.strip()]
    assert not too_long, too_long  # -J joined what the terminal wrapped: these were wrapped by sglwrap
    assert any(ln.startswith(" " * 25) for ln in lines), "continuation lines hang under the reason column"
    wide, _ = on_screen(160, PREFLIGHT, tmp_path)
    assert len(re.sub(r"\x1b\[[0-9;]*m", "", wide).splitlines()) < len(plain.splitlines())


def test_no_color_and_a_pipe_turn_colour_off_on_a_terminal(tmp_path: Path) -> None:
    screen, rc = on_screen(100, PREFLIGHT, tmp_path, extra_env={"NO_COLOR": "1"})
    assert rc == 78 and "BLOCK" in screen and not SGR_COLOUR.search(screen)
    piped, _ = on_screen(100, PREFLIGHT, tmp_path, pipe=True)
    assert "BLOCK" in piped and not SGR_COLOUR.search(piped)
    forced, _ = on_screen(100, "--color always " + PREFLIGHT, tmp_path, pipe=True)
    assert SGR_COLOUR.search(forced)


def test_the_first_runs_slow_step_says_what_it_does_and_how_long_it_took(tmp_path: Path) -> None:
    screen, rc = on_screen(200, "preflight --assume 8xRTX-PRO-6000 -- --tp-size 8", tmp_path)
    assert rc in (0, 1), screen
    plain = re.sub(r"\x1b\[[0-9;]*m", "", screen)
    assert re.search(r"sglwrap: probing the torch/NCCL/FlashInfer stack of .* \.\.\. done \(\d+\.\d s\)", plain), \
        plain
    again, _ = on_screen(200, "preflight --assume 8xRTX-PRO-6000 -- --tp-size 8", tmp_path)  # cached now
    assert "probing" not in again

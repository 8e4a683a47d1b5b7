"""Shared test set-up: no test reads the real user's home, config or runtime dirs.

XDG_CACHE_HOME is one directory per test session, so SGLang's flag table is introspected once per run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def sglang_installed() -> bool:
    try:
        import importlib.metadata

        importlib.metadata.version("sglang")
        return True
    except Exception:
        return False


# Tests of the real SGLang carry this mark. Without SGLang they skip, except under `make test`, which sets
# SGLWRAP_REQUIRE_SGLANG=1: there a missing SGLang fails them instead of letting them pass silently.
requires_sglang = pytest.mark.real_sglang
REQUIRE_SGLANG_VAR = "SGLWRAP_REQUIRE_SGLANG"


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("real_sglang") is None or sglang_installed():
        return
    if os.environ.get(REQUIRE_SGLANG_VAR) == "1":
        pytest.fail(f"the real SGLang is not installed for {sys.executable}, and {REQUIRE_SGLANG_VAR}=1 "
                    "(make test) requires it: run `make test`, which installs it", pytrace=False)
    pytest.skip("needs the real SGLang (make test installs it)")


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, session_cache: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    home.mkdir()
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("XDG_CACHE_HOME", str(session_cache))
    monkeypatch.setenv("SGLWRAP_SYSTEM_PROFILE_DIR", str(tmp_path / "etc-sglwrap-profiles"))
    # SGLang's own argument checks cost a cold SGLang import per new argv: only the tests of that check run them
    monkeypatch.setenv("SGLWRAP_SELFCHECK", "0")
    for var in ("SGLWRAP_PROFILE_PATH", "SGLWRAP_PROFILE", "RUNTIME_DIRECTORY", "SGLWRAP_PYTHON",
                "SGLWRAP_SERVER_MODULE", "SGLWRAP_QUIET", "NOTIFY_SOCKET"):
        monkeypatch.delenv(var, raising=False)
    for var in list(os.environ):
        if var.startswith("NCCL_"):
            monkeypatch.delenv(var, raising=False)
    yield home


def run_sglwrap(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
                cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m sglwrap` in a fresh interpreter (the current one), from the checkout."""
    full = dict(os.environ if env is None else env)
    full["PYTHONPATH"] = str(REPO) + (os.pathsep + full["PYTHONPATH"] if full.get("PYTHONPATH") else "")
    return subprocess.run([sys.executable, "-m", "sglwrap", *args], capture_output=True, text=True,
                          timeout=timeout, env=full, cwd=cwd)


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the preflight held-out and tuned figures when their test ran."""
    from tests.test_preflight_heldout import FIGURES

    for line in FIGURES.values():
        terminalreporter.write_line(f"preflight {line}")
